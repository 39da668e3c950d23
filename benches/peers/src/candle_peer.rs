//! The workloads in candle (`candle-core` + `candle-nn`, CPU device).
//!
//! Threads: candle's CPU matmul asks gemm for `RAYON_NUM_THREADS` threads (its
//! `utils::get_num_threads`, physical cores when unset) and its other parallel kernels run on
//! rayon's global pool, which `RAYON_NUM_THREADS` sizes too.

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Module, Result, Tensor, Var, D};
use candle_nn::{conv2d, linear, Conv2d, Conv2dConfig, Init, Linear, VarBuilder, VarMap};

use crate::{
    emit, emit_step, gflops, labels, median_ms, Filter, GEMM_BUDGET_MS, GEMM_SIZES, LR, MLP_BATCHES, MOMENTUM,
    STEP_BUDGET_MS,
};

/// SGD with momentum by PyTorch's rule (`buf = momentum * buf + grad`, `buf = grad` on the
/// first step, `p -= lr * buf`). candle-nn's `SGD` has no momentum, so it is written here over
/// the model's `Var`s with candle ops.
struct MomentumSgd {
    vars: Vec<Var>,
    bufs: Vec<Option<Tensor>>,
}

impl MomentumSgd {
    fn new(vars: Vec<Var>) -> Self {
        let bufs = vec![None; vars.len()];
        MomentumSgd { vars, bufs }
    }

    fn step(&mut self, grads: &GradStore) -> Result<()> {
        for (var, buf) in self.vars.iter().zip(&mut self.bufs) {
            let Some(grad) = grads.get(var) else { continue };
            let velocity = match buf.take() {
                Some(b) => ((b * MOMENTUM)? + grad)?,
                None => grad.clone(),
            };
            var.set(&(var.as_tensor() - (&velocity * LR)?)?)?;
            *buf = Some(velocity);
        }
        Ok(())
    }
}

/// Linear(784, 256) -> ReLU -> Linear(256, 10).
struct Mlp {
    l1: Linear,
    l2: Linear,
}

impl Mlp {
    fn new(vb: VarBuilder<'_>) -> Result<Self> {
        Ok(Mlp { l1: linear(784, 256, vb.pp("0"))?, l2: linear(256, 10, vb.pp("2"))? })
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.l2.forward(&self.l1.forward(x)?.relu()?)
    }
}

/// Conv2d(1, 8, 3) ReLU MaxPool2d(2) Conv2d(8, 16, 3) ReLU MaxPool2d(2) Flatten Linear(400, 10).
struct Cnn {
    c1: Conv2d,
    c2: Conv2d,
    fc: Linear,
}

impl Cnn {
    fn new(vb: VarBuilder<'_>) -> Result<Self> {
        let cfg = Conv2dConfig::default();
        Ok(Cnn {
            c1: conv2d(1, 8, 3, cfg, vb.pp("0"))?,
            c2: conv2d(8, 16, 3, cfg, vb.pp("3"))?,
            fc: linear(16 * 5 * 5, 10, vb.pp("7"))?,
        })
    }
}

impl Module for Cnn {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = self.c1.forward(x)?.relu()?.max_pool2d(2)?;
        let x = self.c2.forward(&x)?.relu()?.max_pool2d(2)?;
        self.fc.forward(&x.flatten_from(1)?)
    }
}

const D_MODEL: usize = 128;
const HEADS: usize = 4;
const D_FF: usize = 512;
const LN_EPS: f32 = 1e-5;

/// PyTorch's `nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, dropout=0.0,
/// batch_first=True)` written out: packed q/k/v projection, 4-head scaled dot-product
/// attention, output projection, post-norm residuals, ReLU feed-forward. candle has no such
/// layer. The differentiable softmax and layer norm are used: candle-nn's fused
/// `softmax_last_dim` and `ops::layer_norm` (what `LayerNorm::forward` takes on contiguous
/// input) have no backward pass.
struct EncoderLayer {
    in_proj: Linear,
    out_proj: Linear,
    linear1: Linear,
    linear2: Linear,
    norm1: (Tensor, Tensor),
    norm2: (Tensor, Tensor),
}

impl EncoderLayer {
    fn new(vb: VarBuilder<'_>) -> Result<Self> {
        let norm = |name: &str| -> Result<(Tensor, Tensor)> {
            let vb = vb.pp(name);
            Ok((
                vb.get_with_hints(D_MODEL, "weight", Init::Const(1.0))?,
                vb.get_with_hints(D_MODEL, "bias", Init::Const(0.0))?,
            ))
        };
        Ok(EncoderLayer {
            in_proj: linear(D_MODEL, 3 * D_MODEL, vb.pp("self_attn.in_proj"))?,
            out_proj: linear(D_MODEL, D_MODEL, vb.pp("self_attn.out_proj"))?,
            linear1: linear(D_MODEL, D_FF, vb.pp("linear1"))?,
            linear2: linear(D_FF, D_MODEL, vb.pp("linear2"))?,
            norm1: norm("norm1")?,
            norm2: norm("norm2")?,
        })
    }
}

impl Module for EncoderLayer {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, s, d) = x.dims3()?;
        let dh = d / HEADS;
        // [b, s, 3d] -> [3, b, heads, s, dh]
        let qkv = self.in_proj.forward(x)?.reshape((b, s, 3, HEADS, dh))?.permute((2, 0, 3, 1, 4))?;
        let (q, k, v) = (qkv.get(0)?.contiguous()?, qkv.get(1)?.contiguous()?, qkv.get(2)?.contiguous()?);
        let scores = (q.matmul(&k.t()?)? * (1.0 / (dh as f64).sqrt()))?;
        let attn = candle_nn::ops::softmax(&scores, D::Minus1)?;
        let ctx = attn.matmul(&v)?.transpose(1, 2)?.reshape((b, s, d))?;
        let x = (x + self.out_proj.forward(&ctx)?)?;
        let x = candle_nn::ops::layer_norm_slow(&x, &self.norm1.0, &self.norm1.1, LN_EPS)?;
        let ff = self.linear2.forward(&self.linear1.forward(&x)?.relu()?)?;
        candle_nn::ops::layer_norm_slow(&(x + ff)?, &self.norm2.0, &self.norm2.1, LN_EPS)
    }
}

/// One training step: forward, cross-entropy against `i % 10` (or the mean of the squared
/// output for the transformer), backward, SGD with momentum.
struct Step<M> {
    model: M,
    opt: MomentumSgd,
    x: Tensor,
    y: Option<Tensor>,
}

impl<M: Module> Step<M> {
    fn new(build: impl FnOnce(VarBuilder<'_>) -> Result<M>, x_shape: &[usize], classify: bool) -> Result<Self> {
        let dev = Device::Cpu;
        let varmap = VarMap::new();
        let model = build(VarBuilder::from_varmap(&varmap, DType::F32, &dev))?;
        let n = x_shape[0];
        let y = if classify { Some(Tensor::from_vec(labels(n), n, &dev)?) } else { None };
        Ok(Step { model, opt: MomentumSgd::new(varmap.all_vars()), x: Tensor::randn(0f32, 1f32, x_shape, &dev)?, y })
    }

    fn run(&mut self) -> Result<()> {
        let out = self.model.forward(&self.x)?;
        let loss = match &self.y {
            Some(y) => candle_nn::loss::cross_entropy(&out, y)?,
            None => out.sqr()?.mean_all()?,
        };
        let grads = loss.backward()?;
        self.opt.step(&grads)
    }

    fn time(&mut self, name: &str, batch: usize) {
        let ms = median_ms(|| self.run().expect("candle step"), STEP_BUDGET_MS);
        emit_step(name, ms, batch);
    }
}

/// Runs the selected workloads.
pub fn run(filter: &Filter) -> Result<()> {
    let dev = Device::Cpu;
    for n in GEMM_SIZES {
        let name = format!("gemm_{n}");
        if filter.wants(&name) {
            let a = Tensor::randn(0f32, 1f32, (n, n), &dev)?;
            let b = Tensor::randn(0f32, 1f32, (n, n), &dev)?;
            let ms = median_ms(|| drop(a.matmul(&b).expect("candle matmul")), GEMM_BUDGET_MS);
            emit(&name, ms, "GFLOP/s", gflops(n, n, n, ms));
        }
    }
    for batch in MLP_BATCHES {
        let name = format!("mlp_step_b{batch}");
        if filter.wants(&name) {
            Step::new(Mlp::new, &[batch, 784], true)?.time(&name, batch);
        }
    }
    if filter.wants("cnn_step_b32") {
        Step::new(Cnn::new, &[32, 1, 28, 28], true)?.time("cnn_step_b32", 32);
    }
    if filter.wants("transformer_step") {
        Step::new(EncoderLayer::new, &[16, 64, D_MODEL], false)?.time("transformer_step", 16);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The step really trains: the loss on the fixed batch goes down (catches ops without a
    /// backward pass, which would leave parameters unchanged).
    fn trains<M: Module>(step: &mut Step<M>, factor: f32) {
        let loss = |s: &Step<M>| -> f32 {
            let out = s.model.forward(&s.x).unwrap();
            let l = match &s.y {
                Some(y) => candle_nn::loss::cross_entropy(&out, y).unwrap(),
                None => out.sqr().unwrap().mean_all().unwrap(),
            };
            l.to_scalar::<f32>().unwrap()
        };
        let before = loss(step);
        for _ in 0..20 {
            step.run().unwrap();
        }
        let after = loss(step);
        assert!(after < factor * before, "loss {before} -> {after}");
    }

    #[test]
    fn mlp_trains() {
        trains(&mut Step::new(Mlp::new, &[64, 784], true).unwrap(), 0.9);
    }

    #[test]
    fn cnn_trains() {
        trains(&mut Step::new(Cnn::new, &[32, 1, 28, 28], true).unwrap(), 0.9);
    }

    #[test]
    fn transformer_trains() {
        // The mean square of a layer norm's output is ~1 whatever its input, so this loss only
        // drifts down (through the norm's affine parameters).
        trains(&mut Step::new(EncoderLayer::new, &[16, 64, D_MODEL], false).unwrap(), 1.0);
    }

    #[test]
    fn transformer_backward_reaches_the_input_projection() {
        // Through attention, softmax and both norms (a fused op without backward would cut
        // the graph and leave no gradient here).
        let step = Step::new(EncoderLayer::new, &[16, 64, D_MODEL], false).unwrap();
        let probe = Tensor::randn(0f32, 1f32, (16, 64, D_MODEL), &Device::Cpu).unwrap();
        let loss = (step.model.forward(&step.x).unwrap() * probe).unwrap().sum_all().unwrap();
        let grads = loss.backward().unwrap();
        let g = grads.get(step.model.in_proj.weight()).expect("no gradient for in_proj");
        assert!(g.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap() > 1e-3);
    }

    #[test]
    fn momentum_matches_pytorch_rule() {
        // p = 1, grad of p^2 is 2p. PyTorch: buf1 = 2, p1 = 1 - 0.01 * 2 = 0.98;
        // buf2 = 0.9 * 2 + 1.96 = 3.76, p2 = 0.98 - 0.0376 = 0.9424.
        let var = Var::from_slice(&[1f32], 1, &Device::Cpu).unwrap();
        let mut opt = MomentumSgd::new(vec![var.clone()]);
        for _ in 0..2 {
            let loss = var.as_tensor().sqr().unwrap().sum_all().unwrap();
            opt.step(&loss.backward().unwrap()).unwrap();
        }
        let p = var.as_tensor().to_vec1::<f32>().unwrap()[0];
        assert!((p - 0.9424).abs() < 1e-6, "{p}");
    }
}
