//! Per-rank memory and step time of ZeroRedundancyOptimizer (stages 1 and 2) and
//! FullyShardedDataParallel against DistributedDataParallel, for BENCHMARKS.md: a GPT-like
//! Transformer (token and position
//! embeddings, `--layers` pre-norm encoder layers with a causal mask, width `--d`, a
//! feed-forward 4x as wide, a vocabulary of 256; 57M parameters by default) trained with
//! AdamW on synthetic tokens.
//!
//! ```text
//! cd nn-distributed && cargo build --release --example fsdp_bench
//! RAYON_NUM_THREADS=1 mpirun -np 2 --bind-to none -x RAYON_NUM_THREADS target/release/examples/fsdp_bench
//! ```
//!
//! Memory is read from a counting global allocator: the bytes live on the heap, and their
//! peak. For each wrapper, the peak over each timed step (the allocator's peak is reset
//! before it) minus what was live before the model was built: parameters, gradients,
//! optimizer state, and whatever else the step allocates (activations, which the small
//! `--batch` keeps small, and communication buffers). Every rank measures its own; rank 0
//! prints the largest. DDP runs first, then its model and optimizer are dropped and each
//! other configuration (ZeRO, ZeRO with sharded gradients, FSDP with each encoder layer a
//! unit, FSDP without resharding) runs in turn on a fresh copy. nn's CPU buffer pool (freed buffers
//! kept for reuse, up to 2 GiB) is turned off unless `--keep-pool`, so that memory a
//! wrapper frees is seen going; step times are then those of a run without the pool.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use clap::Parser;
use nn_core::functional::cross_entropy;
use nn_core::optim::{AdamW, AdamWConfig, Optimizer};
use nn_core::{manual_seed, Compute, Forward, Module, ModuleBase, Tensor};
use nn_distributed::{
    DistributedDataParallel, FsdpConfig, FsdpPolicy, FullyShardedDataParallel, ProcessGroup, ReduceOp,
    ZeroRedundancyOptimizer,
};
use nn_layers::{
    Activation, Embedding, EncoderInput, LayerNorm, Linear, TransformerEncoder, TransformerEncoderLayer,
    TransformerEncoderLayerConfig,
};

/// The system allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn add(n: usize) {
    let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are updated.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as `alloc`.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as `alloc`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            add(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[derive(Parser, Clone, Copy)]
#[command(about = "Per-rank peak memory and step time, FSDP against DDP")]
struct Args {
    /// Encoder layers.
    #[arg(long, default_value_t = 8)]
    layers: usize,
    /// Model width.
    #[arg(long, default_value_t = 768)]
    d: usize,
    /// Sequences per rank per step.
    #[arg(long, default_value_t = 2)]
    batch: usize,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 32)]
    seq: usize,
    /// Timed steps per wrapper (after one untimed step, which allocates AdamW's state).
    #[arg(long, default_value_t = 3)]
    steps: usize,
    /// Keep nn's buffer pool (faster steps; its freed-but-kept buffers then count as live).
    #[arg(long)]
    keep_pool: bool,
}

const VOCAB: usize = 256;

#[derive(Module)]
struct Lm {
    #[module]
    tok: Embedding,
    #[module]
    pos: Embedding,
    #[module]
    encoder: TransformerEncoder,
    #[module]
    norm: LayerNorm,
    #[module]
    head: Linear,
    #[base]
    base: ModuleBase,
}

impl Compute for Lm {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, idx: &Tensor) -> Tensor {
        let t = idx.shape()[1];
        let pos = Tensor::from_vec_i64((0..t as i64).collect(), &[t]);
        let x = self.tok.forward(idx) + self.pos.forward(&pos);
        let causal = Tensor::from_vec_bool((0..t * t).map(|k| k % t > k / t).collect(), &[t, t]);
        let h = self.encoder.forward(&EncoderInput::new(&x).src_mask(&causal));
        self.head.forward(&self.norm.forward(&h))
    }
}

fn lm(a: &Args) -> Lm {
    manual_seed(0);
    let cfg = TransformerEncoderLayerConfig {
        dim_feedforward: 4 * a.d,
        dropout: 0.0,
        activation: Activation::Gelu,
        batch_first: true,
        norm_first: true,
        ..Default::default()
    };
    Lm {
        tok: Embedding::new(VOCAB, a.d),
        pos: Embedding::new(a.seq, a.d),
        encoder: TransformerEncoder::new(a.layers, || TransformerEncoderLayer::with_config(a.d, a.d / 64, cfg), None),
        norm: LayerNorm::new(a.d),
        head: Linear::new(a.d, VOCAB),
        base: ModuleBase::new(),
    }
}

/// Peak bytes (above `floor`) and seconds of each timed step; the first step is untimed.
fn run(a: &Args, group: &ProcessGroup, floor: usize, step: &mut dyn FnMut(&Tensor, &Tensor)) -> (Vec<usize>, Vec<f64>) {
    let batch = |i: usize| {
        let n = a.batch * a.seq;
        let ids = |salt: usize| -> Vec<i64> {
            (0..n).map(|k| ((k * 31 + i * 7 + group.rank() * 13 + salt) % VOCAB) as i64).collect()
        };
        (Tensor::from_vec_i64(ids(0), &[a.batch, a.seq]), Tensor::from_vec_i64(ids(1), &[n]))
    };
    let (mut peaks, mut times) = (Vec::new(), Vec::new());
    for i in 0..=a.steps {
        let (x, y) = batch(i);
        group.barrier();
        PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
        let t = Instant::now();
        step(&x, &y);
        group.barrier();
        if i > 0 {
            times.push(t.elapsed().as_secs_f64());
            peaks.push(PEAK.load(Ordering::Relaxed).saturating_sub(floor));
        }
    }
    (peaks, times)
}

fn max_over_ranks(group: &ProcessGroup, v: f64) -> f64 {
    group.all_reduce(&Tensor::from_vec_f64(vec![v], &[1]), ReduceOp::Max).to_vec_of::<f64>()[0]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    let group = ProcessGroup::init()?;
    let lead = group.rank() == 0;
    let config = AdamWConfig { lr: 1e-4, ..Default::default() };
    let mib = |b: f64| b / (1024.0 * 1024.0);
    let loss = |logits: &Tensor, y: &Tensor| cross_entropy(&logits.reshape(&[y.shape()[0], VOCAB]), y);
    let mut results = Vec::new();
    if !a.keep_pool {
        // Freed buffers go back to the allocator, where the counter sees them go.
        nn_core::storage::set_buffer_pool_limit(0);
    }
    // One unwrapped step first: what the kernels keep for later calls (packing buffers,
    // thread-local workspaces) is allocated here, below both wrappers' floor.
    {
        let model = lm(&a);
        let mut opt = AdamW::new(model.named_parameters(), config);
        run(&Args { steps: 0, ..a }, &group, 0, &mut |x, y| {
            loss(&model.forward(x), y).backward();
            opt.step();
        });
    }

    // FSDP as PyTorch's FULL_SHARD (the default: parameters freed after each unit's
    // forward, gathered again for its backward), then without resharding after forward
    // (PyTorch's SHARD_GRAD_OP: autograd keeps each unit's parameters until its backward).
    // ZeRO: DDP with the optimizer state sharded (stage 1), then the gradients too (stage 2).
    const RUNS: [&str; 5] = ["DDP", "ZeRO", "ZeRO-2", "FSDP", "FSDP, no reshard"];
    for which in RUNS {
        let floor = LIVE.load(Ordering::Relaxed);
        let model = lm(&a);
        let params = model.num_parameters();
        let (peaks, times, held) = if which == "DDP" {
            let ddp = DistributedDataParallel::new(model, &group)?;
            let mut opt = AdamW::new(ddp.named_parameters(), config);
            let (p, t) = run(&a, &group, floor, &mut |x, y| {
                opt.zero_grad();
                loss(&ddp.forward(x), y).backward();
                opt.step();
            });
            (p, t, LIVE.load(Ordering::Relaxed) - floor)
        } else if which.starts_with("ZeRO") {
            let ddp = DistributedDataParallel::new(model, &group)?;
            let mut opt = ZeroRedundancyOptimizer::new(ddp.named_parameters(), &group, |g| AdamW::new(g, config))?;
            if which == "ZeRO-2" {
                opt.shard_gradients(&ddp)?;
            }
            let (p, t) = run(&a, &group, floor, &mut |x, y| {
                opt.zero_grad();
                loss(&ddp.forward(x), y).backward();
                opt.step();
            });
            (p, t, LIVE.load(Ordering::Relaxed) - floor)
        } else {
            let policy = FsdpPolicy::new().module_type::<TransformerEncoderLayer>();
            let fsdp_config = FsdpConfig { reshard_after_forward: which == "FSDP", ..Default::default() };
            let fsdp = FullyShardedDataParallel::with_config(model, &group, policy, fsdp_config)?;
            let mut opt = AdamW::new(fsdp.named_parameters(), config);
            let (p, t) = run(&a, &group, floor, &mut |x, y| {
                opt.zero_grad();
                loss(&fsdp.forward(x), y).backward();
                opt.step();
            });
            (p, t, LIVE.load(Ordering::Relaxed) - floor)
        };
        let peak = max_over_ranks(&group, *peaks.iter().max().unwrap_or(&0) as f64);
        let held = max_over_ranks(&group, held as f64);
        let step = max_over_ranks(&group, median(times));
        if lead {
            println!(
                "{which:>16}: {params} parameters ({:.0} MiB f32), {} rank(s): held between steps {:.0} MiB, peak during \
                 a step {:.0} MiB, median step {:.3} s",
                mib(params as f64 * 4.0),
                group.world_size(),
                mib(held),
                mib(peak),
                step
            );
        }
        results.push((peak, step, held));
    }
    if lead {
        let d = results[0];
        for (name, f) in RUNS.iter().zip(&results).skip(1) {
            println!(
                "{name} / DDP: peak memory {:.2}x, memory between steps {:.2}x, step time {:.2}x",
                f.0 / d.0,
                f.2 / d.2,
                f.1 / d.1
            );
        }
    }
    Ok(())
}
