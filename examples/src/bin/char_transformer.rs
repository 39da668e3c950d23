//! A tiny character-level Transformer (2 pre-norm encoder layers with a causal mask, 4
//! heads, d_model 64) trained on Jane Austen's *Pride and Prejudice* (shipped in `data/`),
//! holding out the last 10% of the text. Prints held-out next-character accuracy and
//! samples text at the end; writes the loss curve and a checkpoint (`--resume`).
//!
//! Expected after the default 600 steps (a timed run is recorded in
//! `benches/results/2026-11-27-zen4-examples.md`): held-out next-character accuracy
//! around 39% (loss about 2.05) and samples with words, names and Austen's punctuation;
//! more steps (`--steps 3000`) go further.
//!
//! ```text
//! cargo run --release -p nn-examples --bin char_transformer
//! ```

use clap::Parser;
use nn_core::checkpoint::Checkpoint;
use nn_core::optim::{AdamW, AdamWConfig, CosineAnnealingLR, LrScheduler, Optimizer};
use nn_core::random::with_rng;
use nn_core::{manual_seed, no_grad, Forward, Module, Tensor};
use nn_examples::char_model::{batch, batch_loss, evaluate, CharTransformer, Corpus, BATCH, BLOCK, MIN_TEXT};
use nn_examples::{progress, write_loss_svg, Amp, CommonArgs, Flag};
use rand::Rng;

#[derive(Parser)]
#[command(about = "Character-level Transformer on Pride and Prejudice")]
struct Args {
    /// Optimizer steps (default 600; `--epochs N` is N 100-step blocks: give one or the
    /// other).
    #[arg(long, conflicts_with = "epochs")]
    steps: Option<u64>,
    /// Characters to sample at the end.
    #[arg(long, default_value_t = 300)]
    sample_len: usize,
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let a = &args.common;
    a.refuse_unsupported("char_transformer", &[Flag::Epochs, Flag::Resume, Flag::Limit, Flag::Device, Flag::Amp])?;
    let steps = args.steps.or(a.epochs.map(|e| e * 100)).unwrap_or(600);
    manual_seed(a.seed);
    let corpus = Corpus::load()?;
    let (vocab, ids) = (&corpus.vocab, &corpus.ids);
    let (train, held) = (corpus.train(), corpus.held());
    let train = &train[..a.limit.unwrap_or(train.len()).min(train.len())];
    if train.len() < MIN_TEXT {
        return Err(format!(
            "--limit {}: a training window needs {MIN_TEXT} characters (a context of {BLOCK} and the next one); pass \
             --limit {MIN_TEXT} or more",
            train.len()
        )
        .into());
    }
    println!("{} characters, vocabulary of {}, {} for training", ids.len(), vocab.len(), train.len());

    let mut model = CharTransformer::new(vocab.len());
    let device = a.device()?;
    model.to_device(device);
    println!("{model}\n{} parameters, on {device}", model.num_parameters());
    let mut opt =
        AdamW::new(model.named_parameters(), AdamWConfig { lr: 3e-3, weight_decay: 0.01, ..Default::default() });
    let mut sched = CosineAnnealingLR::new(&mut opt, steps, 3e-4);
    let ckpt = a.out("char_transformer_checkpoint.safetensors")?;
    let (mut start, mut losses) = (0, Vec::new());
    let mut scaler = a.grad_scaler();
    if a.resume {
        let ck = Checkpoint::load(&ckpt)?;
        // The same seed, --limit and --amp: the run continued, not another one.
        a.check_settings(&ck, &[])?;
        // Model, optimizer, scheduler and RNG, all checked before any is changed.
        if a.amp == Some(Amp::F16) {
            ck.restore_with_scaler(&mut model, Some(&mut opt), Some(&mut sched), &mut scaler)?;
        } else {
            ck.restore(&mut model, Some(&mut opt), Some(&mut sched))?;
        }
        start = ck.step;
        CommonArgs::check_schedule_length(&ck, steps, "step")?;
        a.check_resume_end(start, steps, "step")?;
        // One loss per step so far, each at its own index (NaN where one was not finite).
        losses = nn_examples::losses_from_extra(&ck.extra, start as usize);
        println!("resumed at step {start}");
    }
    let vocab_n = vocab.len();
    let pb = progress(steps, "train");
    pb.set_position(start);
    model.train();
    let t0 = std::time::Instant::now();
    for step in start..steps {
        let (x, y) = batch(train);
        let (x, y) = (x.to_device(device), y.to_device(device));
        opt.zero_grad();
        let loss = a.autocast(|| batch_loss(&model, &x, &y, vocab_n));
        losses.push(loss.item());
        scaler.scale(&loss).backward();
        // Clipping sees the true gradients: unscaled first (a pass-through without f16).
        scaler.unscale_(&mut opt);
        nn_core::optim::clip_grad_norm_(&model.parameters(), 1.0);
        scaler.step(&mut opt);
        scaler.update();
        sched.step(&mut opt);
        pb.inc(1);
        pb.set_message(format!("loss {:.3}", losses.last().copied().unwrap_or(0.0)));
        if (step + 1) % 100 == 0 || step + 1 == steps {
            let mut ck =
                Checkpoint::new(model.state_dict(), Some(opt.state_dict()), Some(sched.state().clone()), 0, step + 1);
            ck.extra = nn_examples::losses_extra(&losses);
            CommonArgs::record_schedule_length(&mut ck, steps);
            a.record_settings(&mut ck, &[]);
            if a.amp == Some(Amp::F16) {
                ck = ck.with_scaler(scaler.state_dict());
            }
            ck.save(&ckpt)?;
        }
    }
    pb.finish_and_clear();
    println!("trained {} steps in {:.1} s", steps - start, t0.elapsed().as_secs_f64());

    model.eval();
    let (acc, held_loss) = evaluate(&model, held, vocab_n, 20);
    println!(
        "held-out next-character accuracy: {:.2}% (loss {held_loss:.3}, on 20 x {BATCH} x {BLOCK} characters)",
        acc * 100.0
    );

    // Sampling with temperature 0.8 from a prompt.
    let mut out: Vec<i64> = "It is a truth universally".chars().map(|c| corpus.id(c)).collect();
    no_grad(|| {
        for _ in 0..args.sample_len {
            let ctx = &out[out.len().saturating_sub(BLOCK)..];
            let x = Tensor::from_vec_i64(ctx.to_vec(), &[1, ctx.len()]).to_device(device);
            let logits = model.forward(&x).narrow(1, ctx.len() - 1, 1).reshape(&[vocab_n]);
            let p = (logits * (1.0 / 0.8)).softmax(0).to_vec();
            let u: f32 = with_rng(|r| r.random());
            let mut acc = 0.0;
            let next = p.iter().position(|&q| {
                acc += q;
                acc > u
            });
            out.push(next.unwrap_or(vocab_n - 1) as i64);
        }
    });
    println!("--- sample ---\n{}\n--------------", out.iter().map(|&i| vocab[i as usize]).collect::<String>());
    let curve = a.out("char_transformer_loss.svg")?;
    write_loss_svg(&curve, "char Transformer: training loss per step", "step", &[("train loss", &losses)])?;
    nn_examples::report_outputs(&model, &a.out("char_transformer.safetensors")?, &curve)?;
    Ok(())
}
