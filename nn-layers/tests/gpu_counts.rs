//! What one warm training step does on the GPU, counted by `gpu::stats`: no device
//! allocation, no host wait besides the loss read, every kernel on the device, and a
//! handful of submissions (feature `gpu`; Mesa's software Vulkan where there is no GPU).
//!
//! One test in its own binary: the counters are per device, so nothing else may run on
//! `gpu:0` while it counts.
#![cfg(feature = "gpu")]

use nn_core::functional::cross_entropy;
use nn_core::optim::{Optimizer, Sgd, SgdConfig};
use nn_core::{gpu, manual_seed, Device, Forward, Module, Tensor};
use nn_layers::{
    Conv2d, Flatten, Linear, MaxPool2d, ReLU, Sequential, TransformerEncoderLayer, TransformerEncoderLayerConfig,
};

const GPU: Device = Device::Gpu(0);

/// Counters of one warm step of `model` (three steps of warm-up first). The batch is
/// uploaded in every step, as a data loader would.
fn one_warm_step<M>(name: &str, model: M, x: &Tensor, y: Option<&Tensor>) -> gpu::GpuStats
where
    M: nn_core::Compute<Output = Tensor> + Module,
    for<'a> &'a Tensor: nn_core::module::ForwardArg<'a, M::Input>,
{
    let mut model = model;
    model.to_device(GPU);
    let mut opt = Sgd::new(model.named_parameters(), SgdConfig { lr: 0.01, momentum: 0.9, ..Default::default() });
    let mut step = || {
        opt.zero_grad();
        let out = model.forward(&x.to_device(GPU));
        let loss = match y {
            Some(y) => cross_entropy(&out, &y.to_device(GPU)),
            None => out.square().mean(),
        };
        loss.backward();
        opt.step();
        loss.item()
    };
    for _ in 0..3 {
        step();
    }
    let before = gpu::stats(0);
    let loss = step();
    let after = gpu::stats(0);
    assert!(loss.is_finite(), "{name}: loss {loss}");
    let d = gpu::GpuStats {
        allocations: after.allocations - before.allocations,
        reuses: after.reuses - before.reuses,
        dispatches: after.dispatches - before.dispatches,
        submissions: after.submissions - before.submissions,
        host_waits: after.host_waits - before.host_waits,
        bind_groups: after.bind_groups - before.bind_groups,
        host_path: Vec::new(),
    };
    eprintln!(
        "{name}: {} launches, {} submissions, {} host waits, {} allocations, {} bind groups",
        d.dispatches, d.submissions, d.host_waits, d.allocations, d.bind_groups
    );
    assert_eq!(
        after.host_path_calls(),
        before.host_path_calls(),
        "{name}: every kernel on the device: {:?}",
        after.host_path
    );
    d
}

#[test]
fn a_warm_training_step_allocates_nothing_and_waits_only_for_the_loss() {
    if let Err(e) = GPU.check() {
        panic!("the GPU suite needs gpu:0: {e}");
    }
    manual_seed(0);
    let labels = |n: usize| Tensor::from_vec_i64((0..n as i64).map(|i| i % 10).collect(), &[n]);
    let mlp = Sequential::new().add(Linear::new(784, 256)).add(ReLU::new()).add(Linear::new(256, 10));
    let cnn = Sequential::new()
        .add(Conv2d::new(1, 8, 3))
        .add(ReLU::new())
        .add(MaxPool2d::new(2))
        .add(Conv2d::new(8, 16, 3))
        .add(ReLU::new())
        .add(MaxPool2d::new(2))
        .add(Flatten::new())
        .add(Linear::new(400, 10));
    let cfg =
        TransformerEncoderLayerConfig { dim_feedforward: 64, dropout: 0.0, batch_first: true, ..Default::default() };
    let layer = TransformerEncoderLayer::with_config(32, 4, cfg);
    let counts = [
        ("MLP", one_warm_step("MLP", mlp, &Tensor::randn(&[64, 784]), Some(&labels(64)))),
        ("CNN", one_warm_step("CNN", cnn, &Tensor::randn(&[8, 1, 28, 28]), Some(&labels(8)))),
        ("Transformer", one_warm_step("Transformer", layer, &Tensor::randn(&[4, 8, 32]), None)),
    ];
    for (name, d) in counts {
        assert_eq!(d.allocations, 0, "{name}: a warm step allocates no device memory");
        assert_eq!(d.host_waits, 1, "{name}: the host waits only to read the loss");
        assert_eq!(d.bind_groups, d.dispatches, "{name}: one bind group per launch");
        // One submission per 64 launches, one for each upload of the batch (x and the
        // labels), and the one that reads the loss.
        let bound = d.dispatches.div_ceil(64) + 3;
        assert!(
            d.submissions <= bound,
            "{name}: {} submissions for {} launches (at most {bound})",
            d.submissions,
            d.dispatches
        );
    }
}
