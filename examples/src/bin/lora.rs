//! LoRA fine-tuning of the character Transformer, without touching its struct: rank-4
//! adapters are injected **by path** into every attention projection module
//! (`encoder.layers.N.self_attn.out_proj`), the base model is frozen with one call, only the
//! adapters train, and the adapters alone are saved and loaded back.
//!
//! Each adapter adds `scale * B(A x)` to its projection's output through a forward hook on
//! that `Linear` (hooks run for every module, by path, and stay until removed), so the
//! model's own code is unchanged; `B` starts at zero, so injection does not change the
//! model's output. (PyTorch's `MultiheadAttention` packs the query, key and value
//! projections into one parameter, `in_proj_weight`, not a module, and nn keeps its
//! layout, so `out_proj` is the projection module an adapter can attach to.)
//!
//! The base is first trained on the book for `--base-steps`, then the adapters for
//! `--steps`. Expected with the defaults (a timed run is recorded in
//! `benches/results/2026-11-27-zen4-examples.md`): the adapters hold 1,024 parameters
//! (0.90% of the base's 113,867) in a 4.5 KB file, the
//! held-out loss (the same fixed windows before and after) goes from 2.158 (base) to 2.141
//! with only the adapters trained, the frozen base is bit-identical, and the reloaded
//! adapters reproduce the fine-tuned logits exactly.
//!
//! ```text
//! cargo run --release -p nn-examples --bin lora
//! ```

use std::collections::BTreeMap;

use clap::Parser;
use nn_core::optim::{AdamW, AdamWConfig, Optimizer};
use nn_core::prelude::*;
use nn_core::{init, manual_seed, no_grad, HookHandle, StateDict};
use nn_examples::char_model::{batch, batch_loss, evaluate, CharTransformer, Corpus};
use nn_examples::{progress, write_loss_svg, CommonArgs};
use nn_layers::ModuleDict;

#[derive(Parser)]
#[command(about = "LoRA adapters injected by path into the char Transformer's attention projections")]
struct Args {
    /// Steps of base-model training before fine-tuning.
    #[arg(long, default_value_t = 300)]
    base_steps: u64,
    /// Adapter training steps.
    #[arg(long, default_value_t = 200)]
    steps: u64,
    /// Adapter rank (1 or more).
    #[arg(long, default_value_t = 4, value_parser = nn_examples::parse_positive)]
    rank: usize,
    #[command(flatten)]
    common: CommonArgs,
}

/// One LoRA adapter: `A` `[rank, in]` (Kaiming-uniform), `B` `[out, rank]` (zeros), and
/// the scale `alpha / rank`.
#[derive(Module)]
struct LoraAdapter {
    #[param]
    lora_a: Parameter,
    #[param]
    lora_b: Parameter,
    scale: f64,
}

impl LoraAdapter {
    fn new(in_features: usize, out_features: usize, rank: usize, alpha: f64) -> Self {
        let a = Tensor::zeros(&[rank, in_features]);
        // peft's init: Kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)).
        let bound = 1.0 / (in_features as f64).sqrt();
        init::uniform_(&a, -bound, bound);
        LoraAdapter {
            lora_a: Parameter::new(a),
            lora_b: Parameter::new(Tensor::zeros(&[out_features, rank])),
            scale: alpha / rank as f64,
        }
    }

    /// `scale * B(A x)`.
    fn delta(&self, x: &Tensor) -> Tensor {
        x.matmul(&self.lora_a.t()).matmul(&self.lora_b.t()) * self.scale
    }
}

/// The module paths that get an adapter: every attention projection module.
fn targets(model: &CharTransformer) -> Vec<String> {
    model.named_modules().into_iter().map(|(p, _)| p).filter(|p| p.ends_with("self_attn.out_proj")).collect()
}

/// Adapters for `targets`, keyed by path (`.` written as `_`, as `ModuleDict` keys hold no dots).
fn make_adapters(model: &CharTransformer, targets: &[String], rank: usize) -> Result<ModuleDict<LoraAdapter>, Error> {
    targets
        .iter()
        .map(|path| {
            let lin: &nn_layers::Linear = model.get_submodule_as::<nn_layers::NonDynamicallyQuantizableLinear>(path)?;
            Ok((
                path.replace('.', "_"),
                LoraAdapter::new(lin.in_features(), lin.out_features(), rank, 2.0 * rank as f64),
            ))
        })
        .collect()
}

/// Attaches each adapter to its projection with a forward hook (`y + B(A x) * scale`).
fn inject(
    model: &CharTransformer,
    adapters: &ModuleDict<LoraAdapter>,
    targets: &[String],
) -> Result<Vec<HookHandle>, Error> {
    targets
        .iter()
        .map(|path| {
            let ad = &adapters[path.replace('.', "_").as_str()];
            let (a, b, scale) = (ad.lora_a.clone(), ad.lora_b.clone(), ad.scale);
            let adapter = LoraAdapter { lora_a: a, lora_b: b, scale };
            Ok(model.as_dyn().register_forward_hook_at(path, move |x, y| Some(y + adapter.delta(x)))?)
        })
        .collect()
}

type Error = Box<dyn std::error::Error>;

/// `steps` optimizer steps on random training batches, appending each loss to `losses`.
fn train_steps(
    model: &CharTransformer,
    opt: &mut AdamW,
    steps: u64,
    label: &str,
    train: &[i64],
    vocab: usize,
    losses: &mut Vec<f64>,
) {
    let pb = progress(steps, label);
    for _ in 0..steps {
        let (x, y) = batch(train);
        opt.zero_grad();
        let loss = batch_loss(model, &x, &y, vocab);
        losses.push(loss.item());
        loss.backward();
        opt.step();
        pb.inc(1);
    }
    pb.finish_and_clear();
}

fn main() -> Result<(), Error> {
    let args = Args::parse();
    let a = &args.common;
    a.refuse_unsupported("lora", &[])?;
    manual_seed(a.seed);
    let corpus = Corpus::load()?;
    let (train, held, vocab) = (corpus.train(), corpus.held(), corpus.vocab.len());

    // 1. A base model, trained briefly on the whole book.
    let mut model = CharTransformer::new(vocab);
    let mut opt =
        AdamW::new(model.named_parameters(), AdamWConfig { lr: 3e-3, weight_decay: 0.01, ..Default::default() });
    let mut losses = Vec::new();
    train_steps(&model, &mut opt, args.base_steps, "base", train, vocab, &mut losses);
    model.eval();
    let (base_acc, base_loss) = evaluate(&model, held, vocab, 20);
    println!("base model: held-out accuracy {:.2}%, loss {base_loss:.3}", base_acc * 100.0);

    // 2. Adapters by path; injecting them leaves the output unchanged (B = 0).
    let targets = targets(&model);
    println!("adapter targets: {targets:?}");
    let probe = batch(held).0;
    let before = no_grad(|| model.forward(&probe));
    let adapters = make_adapters(&model, &targets, args.rank)?;
    let hooks = inject(&model, &adapters, &targets)?;
    assert_eq!(no_grad(|| model.forward(&probe)).to_vec(), before.to_vec(), "B = 0: injection is invisible");

    // 3. Freeze the base; train only the adapters.
    model.requires_grad_(false);
    let (n_base, n_ad) = (model.num_parameters(), adapters.num_parameters());
    println!(
        "trainable: {n_ad} adapter parameters ({:.2}% of the base's {n_base}); base trainable: {}",
        100.0 * n_ad as f64 / n_base as f64,
        model.num_trainable_parameters()
    );
    let frozen: BTreeMap<String, Vec<f32>> =
        model.state_dict().iter().map(|(k, t)| (k.to_string(), t.to_vec())).collect();
    let mut opt =
        AdamW::new(adapters.named_parameters(), AdamWConfig { lr: 3e-3, weight_decay: 0.0, ..Default::default() });
    model.train();
    train_steps(&model, &mut opt, args.steps, "adapters", train, vocab, &mut losses);
    model.eval();
    let unchanged = model.state_dict().iter().all(|(k, t)| frozen[k] == t.to_vec());
    assert!(unchanged, "the frozen base must not change");
    // The same fixed held-out windows as the base model's score above.
    let (acc, loss) = evaluate(&model, held, vocab, 20);
    println!("with adapters: held-out accuracy {:.2}%, loss {loss:.3} (base {base_loss:.3})", acc * 100.0);

    // 4. Save the adapters alone; load them into a fresh copy of the base.
    let ad_path = a.out("lora_adapters.safetensors")?;
    adapters.save(&ad_path)?;
    let base_path = a.out("lora_base.safetensors")?;
    model.save(&base_path)?;
    println!(
        "adapters: {} ({} bytes; the base model file is {} bytes)",
        ad_path.display(),
        std::fs::metadata(&ad_path)?.len(),
        std::fs::metadata(&base_path)?.len()
    );
    let tuned = no_grad(|| model.forward(&probe)).to_vec();
    for h in hooks {
        h.remove();
    }
    assert_eq!(no_grad(|| model.forward(&probe)).to_vec(), before.to_vec(), "removing the hooks restores the base");

    let mut fresh = CharTransformer::new(vocab);
    fresh.load(&base_path)?;
    fresh.eval();
    let mut loaded = make_adapters(&fresh, &targets, args.rank)?;
    let report = loaded.load_state_dict(&StateDict::load(&ad_path)?, true)?;
    assert!(report.missing_keys.is_empty() && report.unexpected_keys.is_empty());
    let _hooks = inject(&fresh, &loaded, &targets)?;
    let again = no_grad(|| fresh.forward(&probe)).to_vec();
    assert_eq!(again, tuned, "reloaded adapters reproduce the fine-tuned model");
    println!("reloaded base + adapters reproduce the fine-tuned logits exactly");

    let curve = a.out("lora_loss.svg")?;
    let split = args.base_steps as usize;
    let adapter_part: Vec<f64> =
        losses.iter().enumerate().map(|(i, &l)| if i < split { f64::NAN } else { l }).collect();
    let series: [(&str, &[f64]); 2] = [("base model", &losses[..split]), ("adapters only", &adapter_part)];
    write_loss_svg(&curve, "LoRA: base training, then adapters only", "step", &series)?;
    println!("loss curve: {}", curve.display());
    Ok(())
}
