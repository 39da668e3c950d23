//! Benchmark workloads of the nn framework, shared by the `nn_bench` harness binary (medians
//! printed as JSON lines for `benches/compare.py`) and the criterion benches.
//!
//! Every workload mirrors one in `benches/compare.py` (PyTorch) exactly: same shapes,
//! same layers, same loss and optimizer.

use nn_core::functional::cross_entropy;
use nn_core::optim::{Optimizer, Sgd, SgdConfig};
use nn_core::{manual_seed, Device, Forward, Module, Tensor};
use nn_layers::{
    Conv2d, Flatten, Linear, MaxPool2d, ReLU, Sequential, TransformerEncoderLayer, TransformerEncoderLayerConfig,
};

/// The MLP of the table: 784-256-10 with ReLU.
pub fn mlp() -> Sequential {
    Sequential::new().add(Linear::new(784, 256)).add(ReLU::new()).add(Linear::new(256, 10))
}

/// The CNN of the table: conv 1->8->16 (3x3), ReLU, 2x2 max pools, linear to 10.
pub fn cnn() -> Sequential {
    Sequential::new()
        .add(Conv2d::new(1, 8, 3))
        .add(ReLU::new())
        .add(MaxPool2d::new(2))
        .add(Conv2d::new(8, 16, 3))
        .add(ReLU::new())
        .add(MaxPool2d::new(2))
        .add(Flatten::new())
        .add(Linear::new(16 * 5 * 5, 10))
}

/// A Transformer encoder layer: d_model 128, 4 heads, feed-forward 512, no dropout,
/// batch-first.
pub fn transformer_layer() -> TransformerEncoderLayer {
    let cfg =
        TransformerEncoderLayerConfig { dim_feedforward: 512, dropout: 0.0, batch_first: true, ..Default::default() };
    TransformerEncoderLayer::with_config(128, 4, cfg)
}

/// A training step closure: forward, cross-entropy (or mean for the transformer), backward,
/// SGD with momentum 0.9.
pub struct Step {
    forward: Box<dyn Fn(&Tensor) -> Tensor>,
    opt: Sgd,
    x: Tensor,
    y: Tensor,
    classify: bool,
}

impl Step {
    /// A step of `model` on random inputs of `x_shape` (and random labels in `0..10`).
    pub fn new<M>(model: M, x_shape: &[usize], classify: bool) -> Step
    where
        M: nn_core::Compute<Output = Tensor> + Module + 'static,
        for<'a> &'a Tensor: nn_core::module::ForwardArg<'a, M::Input>,
    {
        Step::on(model, x_shape, classify, Device::Cpu)
    }

    /// [`new`](Step::new) with the model, inputs and labels on `device`.
    pub fn on<M>(mut model: M, x_shape: &[usize], classify: bool, device: Device) -> Step
    where
        M: nn_core::Compute<Output = Tensor> + Module + 'static,
        for<'a> &'a Tensor: nn_core::module::ForwardArg<'a, M::Input>,
    {
        model.to_device(device);
        manual_seed(0);
        let opt = Sgd::new(model.parameters(), SgdConfig { lr: 0.01, momentum: 0.9, ..Default::default() });
        let n = x_shape[0];
        Step {
            forward: Box::new(move |x| model.forward(x)),
            opt,
            x: Tensor::randn(x_shape).to_device(device),
            y: Tensor::from_vec_i64((0..n as i64).map(|i| i % 10).collect(), &[n]).to_device(device),
            classify,
        }
    }

    /// One training step.
    pub fn run(&mut self) {
        self.step();
    }

    /// One training step; the loss (still on the step's device).
    pub fn step(&mut self) -> Tensor {
        self.opt.zero_grad();
        let out = (self.forward)(&self.x);
        let loss = if self.classify { cross_entropy(&out, &self.y) } else { out.square().mean() };
        loss.backward();
        self.opt.step();
        loss
    }
}
