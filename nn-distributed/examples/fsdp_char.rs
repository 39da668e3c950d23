//! Trains the `char_transformer` example's model (2 pre-norm encoder layers, d_model 64, on
//! *Pride and Prejudice*, in `data/`) fully sharded: each encoder layer is a
//! `FullyShardedDataParallel` unit, the rest (embeddings, final norm, head) the root unit;
//! every rank keeps a share of the parameters, gradients and AdamW state, and draws its own
//! `32 / world` windows of each step's batch. Every 50 steps rank 0 prints the loss and
//! every rank writes its shard of the checkpoint (`--resume` continues from the last one,
//! with the same `--seed`, ranks and `--steps`; the windows after it are drawn afresh, so a
//! resumed run is not bit for bit the uninterrupted one). At the end rank 0 gathers the
//! full state dict, saves it under the unwrapped model's names and evaluates held-out
//! accuracy with it.
//!
//! ```text
//! cd nn-distributed && cargo build --release --example fsdp_char
//! mpirun -np 2 target/release/examples/fsdp_char --steps 300
//! ```

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use nn_core::functional::cross_entropy;
use nn_core::optim::{AdamW, AdamWConfig, CosineAnnealingLR, LrScheduler, Optimizer, SchedulerState};
use nn_core::{manual_seed, Forward, Module};
use nn_distributed::{FsdpPolicy, FullyShardedDataParallel, ProcessGroup, ReduceOp};
use nn_examples::char_model::{batch, evaluate, CharTransformer, Corpus, BATCH, BLOCK};
use nn_layers::TransformerEncoderLayer;

#[derive(Parser)]
#[command(about = "Character-level Transformer on Pride and Prejudice, fully sharded over the ranks of an MPI job")]
struct Args {
    /// Optimizer steps.
    #[arg(long, default_value_t = 300)]
    steps: u64,
    /// Seed of the initialisation (each rank's batches and dropout draw from seed + 1 + rank).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Where the sharded checkpoint and the full state dict go.
    #[arg(long, default_value = "fsdp_char_out")]
    out_dir: PathBuf,
    /// Continue from the sharded checkpoint in `--out-dir` (the same number of ranks, and
    /// the same `--steps`: the cosine schedule goes on from the saved rate, so a longer run
    /// would spend its extra steps near the final rate).
    #[arg(long)]
    resume: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let group = ProcessGroup::init()?;
    let (rank, world) = (group.rank(), group.world_size());
    let lead = rank == 0;
    if !BATCH.is_multiple_of(world) {
        return Err(format!("the batch of {BATCH} windows does not split over {world} ranks").into());
    }
    let corpus = Corpus::load()?;
    let vocab = corpus.vocab.len();
    manual_seed(args.seed);
    let model = CharTransformer::new(vocab);
    let params = model.num_parameters();
    let policy = FsdpPolicy::new().module_type::<TransformerEncoderLayer>();
    let fsdp = FullyShardedDataParallel::new(model, &group, policy)?;
    manual_seed(args.seed + 1 + rank as u64);
    let mut opt =
        AdamW::new(fsdp.named_parameters(), AdamWConfig { lr: 3e-3, weight_decay: 0.01, ..Default::default() });
    let mut sched = CosineAnnealingLR::new(&mut opt, args.steps, 3e-4);
    std::fs::create_dir_all(&args.out_dir)?;
    // Each save goes to a folder of its own, `step_N`; `step.txt` names the last one that
    // every rank finished (written after a barrier, atomically), so an interrupted save
    // never mixes the shards of two steps.
    let step_file = args.out_dir.join("step.txt");
    let step_dir = |n: u64| args.out_dir.join(format!("step_{n}"));
    let mut start = 0;
    if args.resume {
        // `step.txt`: the step the shards were saved at, the run's seed and its length.
        let saved = std::fs::read_to_string(&step_file)?;
        let fields: Vec<u64> = saved.split_whitespace().map(str::parse).collect::<Result<_, _>>()?;
        let [at, seed, steps] = fields[..] else {
            return Err(format!("{}: expected `step seed steps`, got {saved:?}", step_file.display()).into());
        };
        for (flag, was, now) in [("--seed", seed, args.seed), ("--steps", steps, args.steps)] {
            if was != now {
                return Err(format!(
                    "--resume: the saved run used {flag} {was}, this one {flag} {now}: its batches would follow \
                     another stream, or its cosine schedule another length; resume with {flag} {was}, or drop \
                     --resume to start over"
                )
                .into());
            }
        }
        if at >= args.steps {
            return Err(format!(
                "--resume: the saved run finished (step {at} of {}): nothing left to train; drop --resume to start over",
                args.steps
            )
            .into());
        }
        start = at;
        fsdp.load_sharded(fsdp.shard_path(step_dir(start)), &mut opt)?;
        // The learning rate is the loaded optimizer state's; the scheduler goes on from
        // step `start` (stepping it `start` times would decay the loaded rate again).
        let state = SchedulerState { last_epoch: start, ..sched.state().clone() };
        sched.load_state(&state, &mut opt)?;
    }
    if lead {
        println!(
            "{params} parameters in units {:?}; {world} rank(s), {} windows of {BLOCK} characters each per step; this \
             rank holds {} of them",
            fsdp.unit_paths(),
            BATCH / world,
            fsdp.num_parameters()
        );
    }
    let share = BATCH / world;
    let mut last_saved = (start > 0).then_some(start);
    let t0 = Instant::now();
    for step in start..args.steps {
        let (x, y) = batch(corpus.train());
        let (x, y) = (x.narrow(0, 0, share).contiguous(), y.narrow(0, 0, share).contiguous());
        opt.zero_grad();
        let logits = fsdp.forward(&x).reshape(&[share * BLOCK, vocab]);
        let loss = cross_entropy(&logits, &y.reshape(&[share * BLOCK]));
        loss.backward();
        fsdp.clip_grad_norm_(1.0);
        opt.step();
        sched.step(&mut opt);
        if (step + 1) % 50 == 0 || step + 1 == args.steps {
            let mean = group.all_reduce(&loss.detach(), ReduceOp::Avg).item();
            if lead {
                println!("step {:>4}: loss {mean:.3} ({:.1} s)", step + 1, t0.elapsed().as_secs_f64());
            }
            // Every rank writes its shard; once all have, rank 0 names the step in
            // `step.txt` and removes the previous save.
            std::fs::create_dir_all(step_dir(step + 1))?;
            fsdp.save_sharded(fsdp.shard_path(step_dir(step + 1)), &opt)?;
            group.barrier();
            if lead {
                let line = format!("{} {} {}\n", step + 1, args.seed, args.steps);
                nn_core::io::atomic_write(&step_file, |f| std::io::Write::write_all(f, line.as_bytes()))?;
                if let Some(previous) = last_saved.filter(|&p| p != step + 1) {
                    let _ = std::fs::remove_dir_all(step_dir(previous));
                }
            }
            last_saved = Some(step + 1);
        }
    }
    // The whole model, under its own names, on rank 0: evaluate it unwrapped.
    let full = fsdp.full_state_dict();
    if let Some(full) = full {
        let path = args.out_dir.join("char_transformer_full.safetensors");
        full.save(&path)?;
        let mut plain = CharTransformer::new(vocab);
        plain.load_state_dict(&full, true)?;
        plain.eval();
        let (acc, held_loss) = evaluate(&plain, corpus.held(), vocab, 20);
        println!(
            "held-out next-character accuracy {:.2}% (loss {held_loss:.3}); sharded checkpoint: {} file(s) in {}, full \
             state dict: {}",
            acc * 100.0,
            world,
            step_dir(args.steps).display(),
            path.display()
        );
    }
    Ok(())
}
