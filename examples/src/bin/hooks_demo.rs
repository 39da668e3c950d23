//! Module hooks on a digits classifier:
//! 1. capture every named module's activation with one forward hook per module, and print
//!    per-layer statistics;
//! 2. train a deliberately unstable model (a `sqrt(relu(x))` activation, finite in forward
//!    but NaN in backward at `x <= 0`) with a backward hook on every layer that names the
//!    layer turning a finite `grad_output` into a non-finite `grad_input`, and stop there;
//! 3. train the stable model normally and report held-out accuracy.
//!
//! Expected: the detector fires at the first step naming `1 (SqrtRelu)`; the stable model
//! reaches about 96-97% held-out accuracy.
//!
//! ```text
//! cargo run --release -p nn-examples --bin hooks_demo
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use clap::Parser;
use nn_core::checkpoint::Checkpoint;
use nn_core::functional::cross_entropy;
use nn_core::optim::{Optimizer, Sgd, SgdConfig};
use nn_core::{manual_seed, Compute, Forward, Hooks, Module, ModuleBase, Tensor};
use nn_data::{load_digits, DataLoader};
use nn_examples::{accuracy, progress, repo_data_dir, split, write_loss_svg, CommonArgs, Flag};
use nn_layers::{Linear, Sequential, Tanh};

#[derive(Parser)]
#[command(about = "Activation capture and a NaN-gradient detector with module hooks")]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
}

/// `sqrt(relu(x))`: a plausible-looking activation with a NaN gradient at `x <= 0`.
#[derive(Module, Default)]
struct SqrtRelu {
    #[base]
    base: ModuleBase,
}

impl Compute for SqrtRelu {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        x.relu().sqrt()
    }
}

/// Shape, mean and standard deviation of one captured activation.
type ActStats = (Vec<usize>, f64, f64);

fn model() -> Sequential {
    Sequential::new()
        .add(Linear::new(64, 64))
        .add(Tanh::new())
        .add(Linear::new(64, 32))
        .add(Tanh::new())
        .add(Linear::new(32, 10))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let a = &args.common;
    a.refuse_unsupported("hooks_demo", &[Flag::Epochs, Flag::Resume, Flag::Limit])?;
    manual_seed(a.seed);
    let data = load_digits(repo_data_dir().join("digits.csv.gz"))?;
    let ((xtr, ytr), (xte, yte)) = split(&data.features, &data.labels, 0.2, a.seed);
    let (xtr, ytr) = a.limit_train(xtr, ytr)?;
    nn_examples::check_nonempty("test", &xte)?;
    let loader = DataLoader::new(xtr.clone(), ytr.clone(), 32).shuffle(a.seed);

    // 1. Activation capture.
    let net = model();
    let acts: Arc<Mutex<BTreeMap<String, ActStats>>> = Arc::default();
    let handles = net.as_dyn().register_forward_hooks_all(|name, _| {
        let acts = acts.clone();
        let name = if name.is_empty() { "(model)".to_string() } else { name.to_string() };
        Some(Arc::new(move |_x: &Tensor, y: &Tensor| {
            let v = y.to_vec_f64();
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
            acts.lock().unwrap().insert(name.clone(), (y.shape().to_vec(), mean, std));
            None
        }))
    })?;
    // Up to 128 samples (fewer with a smaller --limit).
    net.forward(&xtr.narrow(0, 0, xtr.shape()[0].min(128)));
    println!("activations captured by forward hooks:");
    for (name, (shape, mean, std)) in acts.lock().unwrap().iter() {
        println!("  {name:<8} {shape:?}  mean {mean:+.4}  std {std:.4}");
    }
    drop(handles); // removes the hooks

    // 2. NaN detector on an unstable model: `sqrt(relu(x))` is finite in forward, but its
    // gradient is 0 * inf = NaN wherever x <= 0.
    let unstable = Sequential::new()
        .add(Linear::new(64, 64))
        .add(SqrtRelu::default())
        .add(Linear::new(64, 32))
        .add(Tanh::new())
        .add(Linear::new(32, 10));
    let culprit: Arc<Mutex<Option<String>>> = Arc::default();
    let _detectors = unstable.as_dyn().register_full_backward_hooks_all(|name, m| {
        if name.is_empty() {
            return None;
        }
        let culprit = culprit.clone();
        let label = format!("{name} ({})", m.type_name());
        Some(Arc::new(move |grad_input: Option<&Tensor>, grad_output: &Tensor| {
            // The culprit turns a finite gradient into a non-finite one.
            let bad = |t: &Tensor| t.to_vec().iter().any(|v| !v.is_finite());
            let mut c = culprit.lock().unwrap();
            if c.is_none() && !bad(grad_output) && grad_input.is_some_and(bad) {
                *c = Some(label.clone());
            }
            None
        }))
    })?;
    let mut opt = Sgd::new(unstable.parameters(), SgdConfig { lr: 0.05, ..Default::default() });
    let mut unstable_losses = Vec::new();
    'outer: for epoch in 0..5 {
        for (step, (xb, yb)) in loader.epoch(epoch).enumerate() {
            opt.zero_grad();
            let loss = cross_entropy(&unstable.forward(&xb), &yb);
            unstable_losses.push(loss.item());
            loss.backward();
            if let Some(layer) = culprit.lock().unwrap().clone() {
                println!("NaN detector: non-finite gradient first seen at layer {layer}, epoch {epoch} step {step}; stopping");
                break 'outer;
            }
            opt.step();
        }
    }
    if culprit.lock().unwrap().is_none() {
        println!("NaN detector: no non-finite gradient in 5 epochs");
    }

    // 3. The stable run.
    let mut net = net;
    let epochs = a.epochs.unwrap_or(30);
    let mut opt = Sgd::new(net.named_parameters(), SgdConfig { lr: 0.05, momentum: 0.9, ..Default::default() });
    let ckpt = a.out("hooks_demo_checkpoint.safetensors")?;
    let mut start = 0;
    if a.resume {
        let ck = Checkpoint::load(&ckpt)?;
        // The same seed (the train/test split follows it) and --limit: the run continued.
        a.check_settings(&ck, &[])?;
        ck.restore(&mut net, Some(&mut opt), None)?;
        start = ck.epoch;
        a.check_resume_end(start, epochs, "epoch")?;
    }
    let pb = progress(epochs * loader.num_batches() as u64, "stable");
    pb.set_position(start.saturating_mul(loader.num_batches() as u64));
    let mut losses = Vec::new();
    for epoch in start..epochs {
        let mut total = 0.0;
        for (xb, yb) in loader.epoch(epoch) {
            opt.zero_grad();
            let loss = cross_entropy(&net.forward(&xb), &yb);
            total += loss.item();
            loss.backward();
            opt.step();
            pb.inc(1);
        }
        losses.push(total / loader.num_batches() as f64);
        let mut ck = Checkpoint::new(net.state_dict(), Some(opt.state_dict()), None, epoch + 1, 0);
        a.record_settings(&mut ck, &[]);
        ck.save(&ckpt)?;
    }
    pb.finish_and_clear();
    net.eval();
    println!("held-out accuracy: {:.2}% ({} samples)", accuracy(&mut net, &xte, &yte, 256) * 100.0, xte.shape()[0]);
    let curve = a.out("hooks_demo_loss.svg")?;
    let capped: Vec<f64> = unstable_losses.iter().map(|l| if l.is_finite() { l.min(10.0) } else { f64::NAN }).collect();
    write_loss_svg(
        &curve,
        "stable run (per epoch) and unstable run (per step, capped at 10)",
        "epoch / step",
        &[("stable", &losses), ("unstable", &capped)],
    )?;
    nn_examples::report_outputs(&net, &a.out("hooks_demo.safetensors")?, &curve)?;
    Ok(())
}
