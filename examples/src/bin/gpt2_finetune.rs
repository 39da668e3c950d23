//! Fine-tunes a GPT-2 from a transformers directory on the shipped *Pride and Prejudice*,
//! through the framework's own API, and saves a directory transformers loads back.
//!
//! The text is byte-level (vocabulary 256): without `--model-dir`, a small byte-level
//! GPT-2 (64 wide, 2 blocks, 4 heads, 128 positions) is built from its config and written
//! as a transformers directory first (`out/gpt2_base`), then loaded back from it, as a user
//! would load any checkpoint. Training is full (AdamW on every parameter) or, with
//! `--lora R`, rank-R adapters injected **by path** into every `transformer.h.N.attn.c_attn`
//! (forward hooks; the base frozen), merged into the weights before saving. The result,
//! `out/gpt2_finetuned` (`config.json`, `model.safetensors` with the tied head once), loads
//! in `GPT2LMHeadModel.from_pretrained`; `logits_check.safetensors` there holds a batch of
//! ids and nn's logits for it (`nn-models/tests/fixtures/generate.py --check DIR` compares).
//!
//! Expected (a timed run is recorded in `benches/results/2026-11-27-zen4-examples.md`):
//! full fine-tuning with the defaults, 400 steps, takes the held-out loss from 5.54
//! (random init) to 2.63 nats per byte (2.58 to 2.63 with `--seed` 0 to 2: 400 steps at
//! this rate are noisy); LoRA (`--model-dir out/gpt2_finetuned --lora 8`, 4,096 adapter
//! parameters, 3.3%) then takes it to 2.60. transformers loads either saved directory
//! with logits within 7e-6 of nn's (`nn-models/tests/fixtures/check_saved.py`).
//!
//! ```text
//! cargo run --release -p nn-examples --bin gpt2_finetune
//! cargo run --release -p nn-examples --bin gpt2_finetune -- --model-dir out/gpt2_finetuned --lora 8 --out-dir out/lora
//! cargo run --release -p nn-examples --bin generate -- out/gpt2_finetuned --prompt "It is a truth"
//! ```

use std::path::PathBuf;

use clap::Parser;
use nn_core::functional::cross_entropy;
use nn_core::optim::{AdamW, AdamWConfig, Optimizer};
use nn_core::prelude::*;
use nn_core::random::with_rng;
use nn_core::{init, manual_seed, no_grad, HookHandle, StateDict};
use nn_examples::{progress, repo_data_dir, write_loss_svg, CommonArgs};
use nn_models::generation::{generate, GenerationConfig, Sampling};
use nn_models::gpt2::{Gpt2Config, Gpt2LMHeadModel};
use rand::Rng;

#[derive(Parser)]
#[command(about = "GPT-2 fine-tuning on Pride and Prejudice (full or LoRA), saved for transformers")]
struct Args {
    /// A transformers GPT-2 directory with a byte-level vocabulary (256); without it a small
    /// one is built and saved to `out/gpt2_base` first.
    #[arg(long)]
    model_dir: Option<PathBuf>,
    /// Training steps.
    #[arg(long, default_value_t = 400)]
    steps: u64,
    /// Train rank-R LoRA adapters on the attention projections instead of every weight
    /// (R 1 or more).
    #[arg(long, value_parser = nn_examples::parse_positive)]
    lora: Option<usize>,
    /// Learning rate (default 3e-3, 1e-2 with `--lora`).
    #[arg(long)]
    lr: Option<f64>,
    #[command(flatten)]
    common: CommonArgs,
}

const BATCH: usize = 16;
const BLOCK: usize = 64;

/// `BATCH` random windows of `BLOCK + 1` bytes: inputs and next-byte targets. Every start
/// whose window fits is drawn, `0..=bytes.len() - BLOCK - 1`.
fn batch(bytes: &[u8]) -> (Tensor, Tensor) {
    assert!(bytes.len() > BLOCK, "batch: {} bytes are fewer than one window of {}", bytes.len(), BLOCK + 1);
    let starts: Vec<usize> = with_rng(|r| (0..BATCH).map(|_| r.random_range(0..=bytes.len() - BLOCK - 1)).collect());
    let ids =
        |off: usize| starts.iter().flat_map(|&s| bytes[s + off..s + off + BLOCK].iter().map(|&b| b as i64)).collect();
    (Tensor::from_vec_i64(ids(0), &[BATCH, BLOCK]), Tensor::from_vec_i64(ids(1), &[BATCH, BLOCK]))
}

fn loss(model: &Gpt2LMHeadModel, x: &Tensor, y: &Tensor) -> Tensor {
    let logits = model.forward(x);
    cross_entropy(&logits.reshape(&[BATCH * BLOCK, 256]), &y.reshape(&[BATCH * BLOCK]))
}

/// Mean loss over fixed held-out batches (the generator reseeded, then restored), in eval
/// mode (no dropout: before and after training are measured alike; the model's mode is
/// restored afterwards).
fn held_out(model: &mut Gpt2LMHeadModel, bytes: &[u8]) -> f64 {
    let was_training = model.is_training();
    model.eval();
    let state = nn_core::random::rng_state();
    manual_seed(12345);
    let frozen = &*model;
    let l = no_grad(|| {
        (0..8)
            .map(|_| {
                let (x, y) = batch(bytes);
                loss(frozen, &x, &y).item()
            })
            .sum::<f64>()
            / 8.0
    });
    nn_core::random::set_rng_state(&state);
    model.set_training(was_training);
    l
}

/// A rank-`r` adapter on one `Conv1D` (`y = x W + b`, `W` `[in, out]`): `A` `[r, in]`
/// (Kaiming-uniform), `B` `[out, r]` (zeros), scale `2`.
#[derive(Module)]
struct Lora {
    #[param]
    lora_a: Parameter,
    #[param]
    lora_b: Parameter,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    args.common.refuse_unsupported("gpt2_finetune", &[])?;
    manual_seed(args.common.seed);
    let text = std::fs::read(repo_data_dir().join("pride_and_prejudice.txt"))?;
    let cut = text.len() * 9 / 10;
    let (train, held) = (&text[..cut], &text[cut..]);

    let dir = match &args.model_dir {
        Some(d) => d.clone(),
        None => {
            let config: Gpt2Config = serde_json::from_value(serde_json::json!({
                "vocab_size": 256, "n_positions": 128, "n_embd": 64, "n_layer": 2, "n_head": 4,
                "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0
            }))?;
            let base = args.common.out("gpt2_base")?;
            Gpt2LMHeadModel::new(&config).save_pretrained(&base)?;
            base
        }
    };
    let mut model = Gpt2LMHeadModel::from_pretrained(&dir)?;
    if model.config().vocab_size != 256 {
        return Err(format!("{}: this example trains on bytes and needs vocab_size 256", dir.display()).into());
    }
    model.train();
    println!("{} from {} ({} parameters)", model.type_name(), dir.display(), model.num_parameters());
    let before = held_out(&mut model, held);

    // LoRA: adapters by path, the base frozen; otherwise every parameter trains.
    let mut adapters: Vec<(String, Lora, HookHandle)> = Vec::new();
    let params = match args.lora {
        Some(r) => {
            model.requires_grad_(false);
            let e = model.config().n_embd;
            for i in 0..model.config().n_layer {
                let path = format!("transformer.h.{i}.attn.c_attn");
                // peft's init: Kaiming-uniform with a = sqrt(5), U(-1/sqrt(in), 1/sqrt(in)).
                let a = Tensor::zeros(&[r, e]);
                let bound = 1.0 / (e as f64).sqrt();
                init::uniform_(&a, -bound, bound);
                let lora = Lora { lora_a: Parameter::new(a), lora_b: Parameter::new(Tensor::zeros(&[3 * e, r])) };
                let (la, lb) = (lora.lora_a.clone(), lora.lora_b.clone());
                let hook = model.get_submodule(&path)?.register_forward_hook(move |x, y| {
                    Some(y + &(x.matmul(&la.transpose(0, 1)).matmul(&lb.transpose(0, 1)) * 2.0))
                })?;
                adapters.push((path, lora, hook));
            }
            adapters
                .iter()
                .flat_map(|(p, l, _)| l.named_parameters().into_iter().map(move |(n, t)| (format!("{p}.{n}"), t)))
                .collect()
        }
        None => model.named_parameters(),
    };
    let trained: usize = params.iter().map(|(_, p)| p.numel()).sum();
    let lr = args.lr.unwrap_or(if args.lora.is_some() { 1e-2 } else { 3e-3 });
    let mut opt = AdamW::new(params, AdamWConfig { lr, ..Default::default() });
    println!("training {trained} parameters ({:.1}%), lr {lr}", 100.0 * trained as f64 / model.num_parameters() as f64);

    let pb = progress(args.steps, "fine-tune");
    let mut curve = Vec::new();
    for _ in 0..args.steps {
        let (x, y) = batch(train);
        opt.zero_grad();
        let l = loss(&model, &x, &y);
        l.backward();
        opt.step();
        curve.push(l.item());
        pb.set_message(format!("loss {:.3}", l.item()));
        pb.inc(1);
    }
    pb.finish_and_clear();
    model.eval();
    let after = held_out(&mut model, held);
    println!("held-out loss: {before:.3} -> {after:.3} nats per byte");

    // Merge the adapters into the weights (W += 2 A^T B^T) and remove their hooks, so the
    // saved directory is a plain GPT-2.
    for (path, lora, hook) in adapters {
        hook.remove();
        let c_attn = model.get_submodule_as::<nn_layers::Conv1D>(&path)?;
        no_grad(|| c_attn.weight.add_(&(lora.lora_a.transpose(0, 1).matmul(&lora.lora_b.transpose(0, 1)) * 2.0)));
    }
    let merged = held_out(&mut model, held);
    assert!((merged - after).abs() < 1e-4, "merging the adapters changed the loss: {after} vs {merged}");

    let out = args.common.out("gpt2_finetuned")?;
    model.save_pretrained(&out)?;
    let reloaded = Gpt2LMHeadModel::from_pretrained(&out)?;
    let (ids, _) = batch(held);
    let logits = no_grad(|| reloaded.forward(&ids));
    assert_eq!(logits.to_vec(), no_grad(|| model.forward(&ids)).to_vec(), "the saved directory reloads exactly");
    let mut check = StateDict::default();
    check.insert("input_ids".into(), ids);
    check.insert("logits".into(), logits);
    check.save(out.join("logits_check.safetensors"))?;
    write_loss_svg(
        &args.common.out("gpt2_finetune_loss.svg")?,
        "GPT-2 fine-tuning",
        "step",
        &[("train loss", &curve)],
    )?;
    println!("saved {} (transformers: GPT2LMHeadModel.from_pretrained)", out.display());

    let prompt: Vec<i64> = b"It is a truth universally acknowledged".iter().map(|&b| b as i64).collect();
    let config = GenerationConfig {
        max_new_tokens: 80,
        sampling: Sampling::Sample { temperature: 0.8, top_k: Some(40), top_p: Some(0.95) },
        ..Default::default()
    };
    let tokens = generate(&model, &prompt, &config)?;
    let bytes: Vec<u8> = tokens.iter().map(|&t| t as u8).collect();
    println!("sample: {}", String::from_utf8_lossy(&bytes));
    Ok(())
}
