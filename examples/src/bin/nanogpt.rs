//! nanoGPT (Karpathy's `train.py` core with `model.py`, ported as `nn_examples::nanogpt`)
//! trained on *Pride and Prejudice* at the character level: AdamW with nanoGPT's
//! weight-decay groups, betas (0.9, 0.95), gradient clipping at 1.0, held-out loss every
//! `--eval-every` steps, and a sample at the end. The port matches PyTorch step for step
//! (`examples/tests/nanogpt_parity.rs`).
//!
//! ```text
//! cargo run --release -p nn-examples --bin nanogpt -- --steps 300
//! ```

use clap::Parser;
use nn_core::optim::{clip_grad_norm_, AdamW, AdamWConfig, Optimizer};
use nn_core::{manual_seed, no_grad, Module, Tensor};
use nn_examples::char_model::Corpus;
use nn_examples::nanogpt::{Gpt, GptConfig};
use nn_examples::{progress, write_loss_svg, CommonArgs};

#[derive(Parser)]
#[command(about = "nanoGPT on Pride and Prejudice, character level")]
struct Args {
    /// Optimizer steps.
    #[arg(long, default_value_t = 300)]
    steps: u64,
    /// Steps between held-out evaluations.
    #[arg(long, default_value_t = 100)]
    eval_every: u64,
    /// Characters to sample at the end.
    #[arg(long, default_value_t = 200)]
    sample_len: usize,
    #[command(flatten)]
    common: CommonArgs,
}

const BLOCK: usize = 64;
const BATCH: usize = 16;

/// `BATCH` random windows of `ids` (nanoGPT's `get_batch`).
fn get_batch(ids: &Tensor) -> (Tensor, Tensor) {
    let starts = Tensor::randint(0, (ids.numel() - BLOCK) as i64, &[BATCH]).to_vec_of::<i64>();
    let x: Vec<Tensor> = starts.iter().map(|&s| ids.narrow(0, s as usize, BLOCK)).collect();
    let y: Vec<Tensor> = starts.iter().map(|&s| ids.narrow(0, s as usize + 1, BLOCK)).collect();
    (Tensor::stack(&x.iter().collect::<Vec<_>>(), 0), Tensor::stack(&y.iter().collect::<Vec<_>>(), 0))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let a = &args.common;
    a.refuse_unsupported("nanogpt", &[])?;
    if args.steps == 0 || args.eval_every == 0 {
        return Err("--steps and --eval-every must be at least 1".into());
    }
    manual_seed(a.seed);
    let corpus = Corpus::load()?;
    let ids = |part: &[i64]| Tensor::from_vec_i64(part.to_vec(), &[part.len()]);
    let (train, held) = (ids(corpus.train()), ids(corpus.held()));
    let config = GptConfig {
        block_size: BLOCK,
        vocab_size: corpus.vocab.len(),
        n_layer: 4,
        n_head: 4,
        n_embd: 128,
        dropout: 0.0,
        bias: false,
    };
    let mut model = Gpt::new(config);
    println!("{} parameters", model.num_parameters());
    let mut opt =
        AdamW::new(model.param_groups(0.1), AdamWConfig { lr: 1e-3, betas: (0.9, 0.95), ..Default::default() });
    let estimate = |model: &Gpt| -> f64 {
        let losses: Vec<f64> = (0..8)
            .map(|_| {
                let (x, y) = get_batch(&held);
                no_grad(|| model.loss(&x, &y).item())
            })
            .collect();
        losses.iter().sum::<f64>() / losses.len() as f64
    };
    let (mut losses, pb) = (Vec::new(), progress(args.steps, "train"));
    for step in 0..args.steps {
        let (x, y) = get_batch(&train);
        let loss = model.loss(&x, &y);
        losses.push(loss.item());
        opt.zero_grad();
        loss.backward();
        clip_grad_norm_(&model.parameters(), 1.0);
        opt.step();
        pb.inc(1);
        if (step + 1) % args.eval_every == 0 || step + 1 == args.steps {
            model.eval();
            let held_loss = estimate(&model);
            pb.suspend(|| println!("step {}: train loss {:.3}, held-out loss {held_loss:.3}", step + 1, loss.item()));
            model.train();
        }
    }
    pb.finish_and_clear();
    model.eval();
    let prompt: Vec<i64> = "It is a truth".chars().map(|c| corpus.id(c)).collect();
    let out = model.generate(&Tensor::from_vec_i64(prompt.clone(), &[1, prompt.len()]), args.sample_len, 0.8, 20);
    let text: String = out.to_vec_of::<i64>().iter().map(|&i| corpus.vocab[i as usize]).collect();
    println!("--- sample ---\n{text}\n--------------");
    let curve = a.out("nanogpt_loss.svg")?;
    write_loss_svg(&curve, "nanoGPT: training loss per step", "step", &[("train loss", &losses)])?;
    nn_examples::report_outputs(&model, &a.out("nanogpt.safetensors")?, &curve)?;
    Ok(())
}
