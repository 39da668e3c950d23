//! Times data-parallel training steps for BENCHMARKS.md: one process against two, and gradient
//! buckets reduced while backward runs against one all-reduce after backward. Two models:
//! the MNIST CNN (`nn_examples::mnist_cnn`, 207k parameters, where communication is a small
//! part of a step) and a wide MLP (784-1024-1024-1024-10, 2.9M parameters, where it is not).
//! Run it once per world size:
//!
//! ```text
//! cd nn-distributed && cargo build --release --example ddp_bench
//! RAYON_NUM_THREADS=2 target/release/examples/ddp_bench --model cnn    # 1 process, 2 threads
//! RAYON_NUM_THREADS=1 mpirun -np 2 --bind-to none -x RAYON_NUM_THREADS target/release/examples/ddp_bench --model cnn
//! ```
//!
//! The configurations: the model without the wrapper (one process only); DDP with its
//! default buckets (a 1 MiB first bucket, then 25 MiB: one bucket for the CNN, two for the
//! MLP); one bucket by construction (caps of infinity: a single all-reduce once backward has
//! produced the last gradient); 0.25 MiB buckets (the CNN's classifier gradients, 0.77 MiB,
//! are reduced while the convolutions' backward runs; every MLP layer is a bucket of its
//! own). They are timed in interleaved rounds (`--rounds` x `--steps` Adam steps on synthetic
//! inputs, after `--warmup`), so drifting machine load hits all alike; rank 0 prints the
//! median step time of the slowest rank, the throughput over the global batch (`--batch`,
//! split over the ranks), and how many buckets started their all-reduce while backward was
//! still running.

use std::time::Instant;

use clap::Parser;
use nn_core::functional::cross_entropy;
use nn_core::optim::{Adam, AdamConfig, Optimizer};
use nn_core::{manual_seed, Forward, Layer, Module, Tensor};
use nn_distributed::{DdpConfig, DistributedDataParallel, ProcessGroup, ReduceOp};
use nn_layers::{Flatten, Linear, ReLU, Sequential};

#[derive(Clone, Copy, clap::ValueEnum, Debug)]
enum Model {
    Cnn,
    WideMlp,
}

#[derive(Parser)]
#[command(about = "Step time of data-parallel training")]
struct Args {
    /// Which network.
    #[arg(long, value_enum, default_value = "cnn")]
    model: Model,
    /// Global batch, split evenly over the ranks.
    #[arg(long, default_value_t = 128)]
    batch: usize,
    /// Timed steps per configuration and round.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Rounds over all configurations.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Untimed steps per configuration first.
    #[arg(long, default_value_t = 10)]
    warmup: usize,
}

fn build(model: Model) -> Box<dyn Layer> {
    match model {
        Model::Cnn => Box::new(nn_examples::mnist_cnn()),
        Model::WideMlp => Box::new(
            Sequential::new()
                .add(Flatten::new())
                .add(Linear::new(784, 1024))
                .add(ReLU::new())
                .add(Linear::new(1024, 1024))
                .add(ReLU::new())
                .add(Linear::new(1024, 1024))
                .add(ReLU::new())
                .add(Linear::new(1024, 10)),
        ),
    }
}

/// One configuration being timed.
struct Bench<'a> {
    name: &'static str,
    model: &'a dyn Layer,
    opt: Adam,
    stats: Box<dyn Fn() -> (usize, usize) + 'a>,
    times: Vec<f64>,
}

impl Bench<'_> {
    fn run(&mut self, group: &ProcessGroup, x: &Tensor, y: &Tensor, steps: usize, timed: bool) {
        for _ in 0..steps {
            group.barrier();
            let t = Instant::now();
            self.opt.zero_grad();
            cross_entropy(&self.model.forward(x), y).backward();
            self.opt.step();
            if timed {
                self.times.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let group = ProcessGroup::init()?;
    let args = Args::parse();
    let world = group.world_size();
    if args.batch % world != 0 {
        return Err(format!("--batch {} does not split evenly over {world} ranks", args.batch).into());
    }
    let per_rank = args.batch / world;
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "default".into());
    let lead = group.rank() == 0;
    manual_seed(group.rank() as u64);
    let x = Tensor::randn(&[per_rank, 1, 28, 28]);
    let y = Tensor::from_vec_i64((0..per_rank as i64).map(|i| i % 10).collect(), &[per_rank]);

    manual_seed(0);
    let plain = build(args.model);
    let one = DdpConfig { first_bucket_cap_mb: f64::INFINITY, bucket_cap_mb: f64::INFINITY, ..Default::default() };
    let small = DdpConfig { first_bucket_cap_mb: 0.25, bucket_cap_mb: 0.25, ..Default::default() };
    let wrapped: Vec<(&'static str, DistributedDataParallel<Box<dyn Layer>>)> = [
        ("DDP, default buckets (1 MiB first, 25 MiB)", DdpConfig::default()),
        ("DDP, one bucket after backward (caps inf)", one),
        ("DDP, overlapped (0.25 MiB buckets)", small),
    ]
    .into_iter()
    .map(|(name, config)| {
        manual_seed(0);
        DistributedDataParallel::with_config(build(args.model), &group, config).map(|d| (name, d))
    })
    .collect::<Result<_, _>>()?;
    let adam = |m: &dyn Layer| Adam::new(m.parameters(), AdamConfig { lr: 1e-3, ..Default::default() });
    let mut benches: Vec<Bench<'_>> = Vec::new();
    if world == 1 {
        benches.push(Bench {
            name: "no wrapper",
            model: &*plain,
            opt: adam(&*plain),
            stats: Box::new(|| (0, 0)),
            times: vec![],
        });
    }
    for (name, ddp) in &wrapped {
        benches.push(Bench {
            name,
            model: ddp,
            opt: adam(ddp),
            stats: Box::new(move || {
                let s = ddp.reduction_stats();
                (s.overlapped, s.buckets)
            }),
            times: vec![],
        });
    }
    for b in &mut benches {
        b.run(&group, &x, &y, args.warmup, false);
    }
    for _ in 0..args.rounds {
        for b in &mut benches {
            b.run(&group, &x, &y, args.steps, true);
        }
    }
    if lead {
        println!(
            "{:?}, {} parameters, global batch {} ({per_rank} per rank), {world} rank(s), RAYON_NUM_THREADS={threads}, \
             median of {} steps",
            args.model,
            plain.num_parameters(),
            args.batch,
            args.rounds * args.steps
        );
        println!("{:<44} {:>9} {:>11} {:>19}", "configuration", "step ms", "samples/s", "overlapped/buckets");
    }
    for b in &benches {
        let slowest = group.all_reduce(&Tensor::from_vec_f64(b.times.clone(), &[b.times.len()]), ReduceOp::Max);
        let mut t = slowest.to_vec_f64();
        t.sort_by(f64::total_cmp);
        let ms = t[t.len() / 2];
        let (overlapped, buckets) = (b.stats)();
        if lead {
            let bk = if buckets == 0 { "-".to_string() } else { format!("{overlapped}/{buckets}") };
            println!("{:<44} {ms:>9.2} {:>11.0} {bk:>19}", b.name, args.batch as f64 / (ms / 1e3));
        }
    }
    // The communication alone: one all-reduce of the whole gradient.
    let grad = Tensor::zeros(&[plain.num_parameters()]);
    let mut t = Vec::new();
    for _ in 0..30 {
        group.barrier();
        let s = Instant::now();
        let _ = group.all_reduce(&grad, ReduceOp::Avg);
        t.push(s.elapsed().as_secs_f64() * 1e3);
    }
    t.sort_by(f64::total_cmp);
    if lead {
        println!("one all-reduce of all {} gradient values: {:.2} ms (median of 30)", grad.numel(), t[15]);
    }
    // The fixed cost of a collective: an all-reduce of one value.
    let one = Tensor::zeros(&[1]);
    let mut t = Vec::new();
    for _ in 0..500 {
        let s = Instant::now();
        let _ = group.all_reduce(&one, ReduceOp::Sum);
        t.push(s.elapsed().as_secs_f64() * 1e6);
    }
    t.sort_by(f64::total_cmp);
    if lead {
        println!("one all-reduce of 1 value: {:.1} us (median of 500)", t[250]);
    }
    Ok(())
}
