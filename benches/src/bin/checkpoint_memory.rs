//! Peak memory and time of a training step with and without activation checkpointing
//! (`nn_core::grad_checkpoint`): 12 Transformer encoder layers at GPT-2-small width
//! (d_model 768, 12 heads, feed-forward 3072, pre-norm, GELU, no dropout), input
//! `[4, 256, 768]`, loss the mean square of the output, SGD. One mode per process, so that
//! each peak (the process's `VmHWM`, its resident high-water mark, from `/proc/self/status`)
//! is its own; prints one JSON line per mode.
//!
//! ```text
//! cargo run --release -p nn-bench --bin checkpoint_memory -- plain
//! cargo run --release -p nn-bench --bin checkpoint_memory -- every   # every layer checkpointed
//! cargo run --release -p nn-bench --bin checkpoint_memory -- selective   # every layer, products and attention kept
//! ```
//!
//! The peak counts the parameters (85M, 340 MB in f32), their gradients, the momentum and
//! the activations; only the activations change between the modes.

use std::sync::Arc;
use std::time::Instant;

use nn_core::grad_checkpoint::{checkpoint_with, CheckpointPolicy};
use nn_core::optim::{Optimizer, Sgd, SgdConfig};
use nn_core::{manual_seed, Forward, Module, Tensor};
use nn_layers::{Activation, EncoderInput, TransformerEncoderLayer, TransformerEncoderLayerConfig};

/// The process's resident high-water mark, in MiB (Linux).
fn peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status (Linux)");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmHWM line");
    kib / 1024.0
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "plain".to_string());
    let policy = match mode.as_str() {
        "plain" => None,
        "every" => Some(CheckpointPolicy::recompute_all()),
        "selective" => Some(CheckpointPolicy::save_matmuls_and_attention()),
        other => panic!("checkpoint_memory: unknown mode `{other}` (expected `plain`, `every` or `selective`)"),
    };
    manual_seed(0);
    let config = TransformerEncoderLayerConfig {
        dim_feedforward: 3072,
        dropout: 0.0,
        batch_first: true,
        norm_first: true,
        activation: Activation::Gelu,
        ..Default::default()
    };
    let layers: Vec<Arc<TransformerEncoderLayer>> =
        (0..12).map(|_| Arc::new(TransformerEncoderLayer::with_config(768, 12, config))).collect();
    let params: Vec<(String, nn_core::Parameter)> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.named_parameters().into_iter().map(move |(k, p)| (format!("{i}.{k}"), p)))
        .collect();
    let mut opt = Sgd::new(params, SgdConfig { lr: 1e-3, momentum: 0.9, ..Default::default() });
    let x = Tensor::randn(&[4, 256, 768]);
    let before = peak_mib();
    let mut times = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut h = x.clone();
        for l in &layers {
            h = match &policy {
                Some(p) => {
                    let (l, input) = (l.clone(), h.clone());
                    checkpoint_with(p.clone(), move || l.forward(EncoderInput::new(&input)))
                }
                None => l.forward(EncoderInput::new(&h)),
            };
        }
        h.square().mean().backward();
        opt.step();
        opt.zero_grad();
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{{\"mode\": \"{mode}\", \"peak_mib\": {:.1}, \"before_steps_mib\": {before:.1}, \"median_step_ms\": {:.1}}}",
        peak_mib(),
        times[1]
    );
}
