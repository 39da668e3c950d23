//! The workloads in burn on its Flex CPU backend (`Device::flex()`, with `.autodiff()` for the
//! training steps).
//!
//! Threads: burn-flex has no thread setting of its own. Its parallel kernels are rayon
//! `par_iter`s on rayon's global pool and its matmul/conv GEMMs call gemm with
//! `Parallelism::Rayon(0)` (= `rayon::current_num_threads()`, the global pool again), so
//! `RAYON_NUM_THREADS` limits everything; small GEMMs (< 192^3 multiply-adds) run on one
//! thread whatever it says.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig, Relu};
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, ModuleOptimizer, SgdConfig};
use burn::tensor::activation::softmax;
use burn::tensor::{Device, Distribution, Int, Tensor};

use crate::{
    emit, emit_step, gflops, median_ms, Filter, GEMM_BUDGET_MS, GEMM_SIZES, LR, MLP_BATCHES, MOMENTUM, STEP_BUDGET_MS,
};

/// A model of a step workload: its loss on a batch.
trait Net<const D: usize>: Module {
    /// Cross-entropy of the logits against `y` (or the mean of the squared output when the
    /// workload has no labels).
    fn loss(&self, x: Tensor<D>, y: &Tensor<1, Int>, ce: &CrossEntropyLoss) -> Tensor<1>;
}

/// Linear(784, 256) -> ReLU -> Linear(256, 10).
#[derive(Module, Debug)]
struct Mlp {
    l1: Linear,
    relu: Relu,
    l2: Linear,
}

impl Mlp {
    fn new(device: &Device) -> Self {
        Mlp {
            l1: LinearConfig::new(784, 256).init(device),
            relu: Relu::new(),
            l2: LinearConfig::new(256, 10).init(device),
        }
    }
}

impl Net<2> for Mlp {
    fn loss(&self, x: Tensor<2>, y: &Tensor<1, Int>, ce: &CrossEntropyLoss) -> Tensor<1> {
        ce.forward(self.l2.forward(self.relu.forward(self.l1.forward(x))), y.clone())
    }
}

/// Conv2d(1, 8, 3) ReLU MaxPool2d(2) Conv2d(8, 16, 3) ReLU MaxPool2d(2) Flatten Linear(400, 10).
/// (burn's `MaxPool2dConfig` strides default to the kernel size, as in PyTorch.)
#[derive(Module, Debug)]
struct Cnn {
    c1: Conv2d,
    c2: Conv2d,
    pool: MaxPool2d,
    relu: Relu,
    fc: Linear,
}

impl Cnn {
    fn new(device: &Device) -> Self {
        Cnn {
            c1: Conv2dConfig::new([1, 8], [3, 3]).init(device),
            c2: Conv2dConfig::new([8, 16], [3, 3]).init(device),
            pool: MaxPool2dConfig::new([2, 2]).init(),
            relu: Relu::new(),
            fc: LinearConfig::new(16 * 5 * 5, 10).init(device),
        }
    }
}

impl Net<4> for Cnn {
    fn loss(&self, x: Tensor<4>, y: &Tensor<1, Int>, ce: &CrossEntropyLoss) -> Tensor<1> {
        let x = self.pool.forward(self.relu.forward(self.c1.forward(x)));
        let x = self.pool.forward(self.relu.forward(self.c2.forward(x)));
        ce.forward(self.fc.forward(x.flatten::<2>(1, 3)), y.clone())
    }
}

const D_MODEL: usize = 128;
const HEADS: usize = 4;
const D_FF: usize = 512;

/// PyTorch's `nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, dropout=0.0,
/// batch_first=True)` written out with the same ops as the candle twin: packed q/k/v
/// projection, 4-head scaled dot-product attention, output projection, post-norm residuals,
/// ReLU feed-forward. (burn-nn's `TransformerEncoder` uses a GELU feed-forward, so it is not
/// the same layer.)
#[derive(Module, Debug)]
struct EncoderLayer {
    in_proj: Linear,
    out_proj: Linear,
    linear1: Linear,
    linear2: Linear,
    norm1: LayerNorm,
    norm2: LayerNorm,
    relu: Relu,
}

impl EncoderLayer {
    fn new(device: &Device) -> Self {
        EncoderLayer {
            in_proj: LinearConfig::new(D_MODEL, 3 * D_MODEL).init(device),
            out_proj: LinearConfig::new(D_MODEL, D_MODEL).init(device),
            linear1: LinearConfig::new(D_MODEL, D_FF).init(device),
            linear2: LinearConfig::new(D_FF, D_MODEL).init(device),
            norm1: LayerNormConfig::new(D_MODEL).init(device),
            norm2: LayerNormConfig::new(D_MODEL).init(device),
            relu: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [b, s, d] = x.dims();
        let dh = d / HEADS;
        // [b, s, 3d] -> [b, s, 3, heads, dh] -> [3, b, heads, s, dh]
        let qkv = self.in_proj.forward(x.clone()).reshape([b, s, 3, HEADS, dh]).permute([2, 0, 3, 1, 4]);
        let head = |i: usize| qkv.clone().narrow(0, i, 1).reshape([b, HEADS, s, dh]);
        let (q, k, v) = (head(0), head(1), head(2));
        let scores = q.matmul(k.swap_dims(2, 3)).mul_scalar(1.0 / (dh as f64).sqrt());
        let ctx = softmax(scores, 3).matmul(v).swap_dims(1, 2).reshape([b, s, d]);
        let x = self.norm1.forward(x + self.out_proj.forward(ctx));
        let ff = self.linear2.forward(self.relu.forward(self.linear1.forward(x.clone())));
        self.norm2.forward(x + ff)
    }
}

impl Net<3> for EncoderLayer {
    fn loss(&self, x: Tensor<3>, _y: &Tensor<1, Int>, _ce: &CrossEntropyLoss) -> Tensor<1> {
        self.forward(x).square().mean()
    }
}

/// One training step: forward, loss, backward, SGD with momentum 0.9 (dampening 0 as in
/// PyTorch; burn's default dampening is 0.1).
struct Step<M, const D: usize> {
    model: Option<M>,
    opt: ModuleOptimizer,
    ce: CrossEntropyLoss,
    x: Tensor<D>,
    y: Tensor<1, Int>,
}

impl<M: Net<D>, const D: usize> Step<M, D> {
    fn new(build: impl FnOnce(&Device) -> M, x_shape: [usize; D]) -> Self {
        let device = Device::flex().autodiff();
        let momentum = MomentumConfig::new().with_momentum(MOMENTUM).with_dampening(0.0).with_nesterov(false);
        let n = x_shape[0];
        Step {
            model: Some(build(&device)),
            opt: SgdConfig::new().with_momentum(Some(momentum)).init(),
            ce: CrossEntropyLossConfig::new().init(&device),
            x: Tensor::random(x_shape, Distribution::Normal(0.0, 1.0), &device),
            y: Tensor::<1, Int>::arange(0..n as i64, &device).remainder_scalar(10),
        }
    }

    fn run(&mut self) {
        let model = self.model.take().expect("model");
        let loss = model.loss(self.x.clone(), &self.y, &self.ce);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        self.model = Some(self.opt.step(LR, model, grads));
    }

    fn time(&mut self, name: &str) {
        let ms = median_ms(|| self.run(), STEP_BUDGET_MS);
        emit_step(name, ms, self.x.dims()[0]);
    }
}

/// Runs the selected workloads.
pub fn run(filter: &Filter) {
    let device = Device::flex();
    for n in GEMM_SIZES {
        let name = format!("gemm_{n}");
        if filter.wants(&name) {
            let a = Tensor::<2>::random([n, n], Distribution::Normal(0.0, 1.0), &device);
            let b = Tensor::<2>::random([n, n], Distribution::Normal(0.0, 1.0), &device);
            let ms = median_ms(
                || {
                    let c = a.clone().matmul(b.clone());
                    device.sync().expect("burn sync");
                    drop(c);
                },
                GEMM_BUDGET_MS,
            );
            emit(&name, ms, "GFLOP/s", gflops(n, n, n, ms));
        }
    }
    for batch in MLP_BATCHES {
        let name = format!("mlp_step_b{batch}");
        if filter.wants(&name) {
            Step::new(Mlp::new, [batch, 784]).time(&name);
        }
    }
    if filter.wants("cnn_step_b32") {
        Step::new(Cnn::new, [32, 1, 28, 28]).time("cnn_step_b32");
    }
    if filter.wants("transformer_step") {
        Step::new(EncoderLayer::new, [16, 64, D_MODEL]).time("transformer_step");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The step really trains: the loss on the fixed batch goes down.
    fn trains<M: Net<D>, const D: usize>(step: &mut Step<M, D>, factor: f32) {
        let loss =
            |s: &Step<M, D>| -> f32 { s.model.as_ref().unwrap().loss(s.x.clone(), &s.y, &s.ce).into_scalar::<f32>() };
        let before = loss(step);
        for _ in 0..20 {
            step.run();
        }
        let after = loss(step);
        assert!(after < factor * before, "loss {before} -> {after}");
    }

    #[test]
    fn mlp_trains() {
        trains(&mut Step::new(Mlp::new, [64, 784]), 0.9);
    }

    #[test]
    fn cnn_trains() {
        trains(&mut Step::new(Cnn::new, [32, 1, 28, 28]), 0.9);
    }

    #[test]
    fn transformer_trains() {
        // The mean square of a layer norm's output is ~1 whatever its input, so this loss only
        // drifts down (through the norm's affine parameters).
        trains(&mut Step::new(EncoderLayer::new, [16, 64, D_MODEL]), 1.0);
    }

    #[test]
    fn transformer_backward_reaches_the_input_projection() {
        let step = Step::new(EncoderLayer::new, [16, 64, D_MODEL]);
        let model = step.model.as_ref().unwrap();
        let probe = Tensor::<3>::random([16, 64, D_MODEL], Distribution::Normal(0.0, 1.0), &step.x.device());
        let grads = (model.forward(step.x.clone()) * probe).sum().backward();
        let g = model.in_proj.weight.grad(&grads).expect("no gradient for in_proj");
        assert!(g.abs().max().into_scalar::<f32>() > 1e-3);
    }

    #[test]
    fn labels_are_i_mod_10() {
        let device = Device::flex();
        let y = Tensor::<1, Int>::arange(0..12, &device).remainder_scalar(10);
        assert_eq!(y.into_data().convert::<i64>().try_to_vec::<i64>().unwrap(), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]);
    }
}
