//! Benchmarks of the Rust peers of nn (candle, burn and the raw `gemm` crate) on the workloads
//! of `benches/src/bin/nn_bench.rs` and `benches/compare.py`: same names, same shapes, same
//! layers, loss and optimizer, same median-of-many-runs timing, same JSON lines.
//!
//! This crate is deliberately outside the root workspace: it needs crates.io and several
//! minutes to build, and nothing in the framework depends on it. `compare.py --peers` builds
//! and runs it.

use std::time::Instant;

pub mod burn_peer;
pub mod candle_peer;
pub mod gemm_peer;

/// Median wall time of `f` in milliseconds over enough runs to fill about `budget_ms`
/// (3 warm-up runs, one probe run to size the sample, then between 5 and 100 000 timed runs):
/// the method of `nn_bench`.
pub fn median_ms(mut f: impl FnMut(), budget_ms: f64) -> f64 {
    for _ in 0..3 {
        f();
    }
    let probe = Instant::now();
    f();
    let one_ms = probe.elapsed().as_secs_f64() * 1e3;
    let runs = ((budget_ms / one_ms.max(1e-3)) as usize).clamp(5, 100_000);
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

/// Prints one result line in `nn_bench`'s format.
pub fn emit(workload: &str, ms: f64, unit: &str, throughput: f64) {
    println!("{{\"workload\": \"{workload}\", \"median_ms\": {ms:.6}, \"unit\": \"{unit}\", \"throughput\": {throughput:.3}}}");
}

/// Which workloads to run: all of them, or those whose name starts with a prefix.
#[derive(Clone, Debug, Default)]
pub struct Filter(pub Option<String>);

impl Filter {
    /// Whether `name` is selected.
    pub fn wants(&self, name: &str) -> bool {
        self.0.as_deref().is_none_or(|prefix| name.starts_with(prefix))
    }
}

/// Square GEMM sizes of the `gemm_{n}` workloads.
pub const GEMM_SIZES: [usize; 5] = [64, 128, 256, 512, 1024];
/// Timing budget (ms) of a GEMM workload (as in `nn_bench`).
pub const GEMM_BUDGET_MS: f64 = 2000.0;
/// Timing budget (ms) of a training-step workload (as in `nn_bench`).
pub const STEP_BUDGET_MS: f64 = 3000.0;
/// MLP batch sizes of the `mlp_step_b{batch}` workloads.
pub const MLP_BATCHES: [usize; 2] = [64, 256];
/// Optimizer of every step workload: SGD, learning rate 0.01, momentum 0.9 (PyTorch
/// semantics: no dampening, no Nesterov).
pub const LR: f64 = 0.01;
/// See [`LR`].
pub const MOMENTUM: f64 = 0.9;

/// GFLOP/s of an `m x k x n` matrix product done in `ms` milliseconds.
pub fn gflops(m: usize, k: usize, n: usize, ms: f64) -> f64 {
    2.0 * (m * k * n) as f64 / (ms * 1e6)
}

/// Emits a training-step result (samples/s).
pub fn emit_step(name: &str, ms: f64, batch: usize) {
    emit(name, ms, "samples/s", batch as f64 / (ms / 1e3));
}

/// Labels `i % 10` of a batch of `n`, as in `nn_bench` and `compare.py`.
pub fn labels(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| i % 10).collect()
}

/// The thread count asked for through `RAYON_NUM_THREADS` (what `compare.py` sets), or the
/// machine's parallelism when it is unset or 0 (rayon's own default).
pub fn rayon_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
