//! Kernel choice by measurement: where an elementwise op has more than one CPU kernel, the
//! first call in a process times each on a small input and keeps the fastest.
//!
//! # Why measure
//!
//! The same kernel ranks differently on different CPUs. `tanh` computed in `f64` (eight
//! lanes per AVX-512 register, a degree-10 exponential and an `f64` division) is faster
//! than PyTorch's on AMD Zen 5 and slower than it on Intel Emerald Rapids (the `compare.py`
//! row `ew_tanh`; each machine's run has its record in `benches/results/`): there each
//! 512-bit `vdivpd` occupies the divider for about 16 cycles (two per element) and the
//! `f64` polynomial needs twice the multiply-adds per element of an `f32` one, where Zen
//! splits 512-bit operations into two 256-bit halves on four pipes and its divider is
//! faster. Which kernel wins is a property of the machine, so
//! the machine decides, as cuBLAS's heuristics and CubeCL's autotune do for GPU kernels.
//!
//! # Variants
//!
//! A kernel ([`Kernel`]) has one or more *algorithms* (for `tanh`: `f64`, the reference,
//! within 1 ulp; `f32`, within 2 ulp; `table`, piecewise polynomials on `[-6, 6]` within 1
//! ulp and the `f32` formula outside) and runs in one of the vector copies the CPU has
//! ([`Isa`]: AVX-512 or AVX2; the baseline only where neither runs). Copies of one
//! algorithm give the same bits (every multiply-add is fused in each), so the copy is a
//! question of speed only. Algorithms of one op may differ in the last bits: each one's
//! bound against the exact value is written beside it (in `vector_fns`) and tested on the CI
//! machine's CPU by forcing it (`tune_tests.rs`). A process that needs the same bits on
//! every machine names the algorithm in `NN_KERNELS`.
//!
//! # Choosing
//!
//! On the first call of a kernel in a process, every candidate (algorithm x copy) maps
//! [`SAMPLE`] values drawn like activations (about normal, spread 1.5) into a buffer,
//! [`REPS`] times after a warm-up, and the one with the smallest best time is kept for
//! the process (a cost paid once, on a sample that fits the caches).
//! `nn_core::cpu::kernel_report` lists every choice with the candidates' times (`nn_bench`
//! prints them in its `nn_bench: kernel` lines).
//!
//! # `NN_KERNELS`
//!
//! Overrides the choice, for tests and reproducibility, as `NN_GEMM` does the GEMM's:
//! comma-separated `op=variant`, where the variant is an algorithm (`tanh=f32`), a copy
//! (`tanh=avx2`), or both (`tanh=f32-avx2`); what it leaves open is still measured.
//! An entry that names no kernel, no variant of it, or a copy this CPU cannot run is an
//! error naming the CPU's features (at the first call of any tuned kernel, and from
//! `nn_core::cpu::check_kernel_env`), never an illegal instruction.

use std::hint::black_box;
use std::mem::MaybeUninit;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::isa_loops::{map_elems_on, Isa};
use super::poly_tables::{map_pieces_on, Pieces};
use crate::backend::F32Loop;

/// Values per timed run: enough that a run is tens of microseconds (timer resolution and
/// loop overheads are far below it), few enough that they stay in the L1 and L2 caches
/// whatever the CPU, so the arithmetic is what is measured.
pub(crate) const SAMPLE: usize = 8192;

/// Timed runs per candidate; the best counts (the others are interrupts, frequency steps
/// and the other vCPU's work).
pub(crate) const REPS: usize = 7;

/// One CPU kernel with variants: its op's name and its algorithms' names, in the order
/// the op lists their functions.
#[derive(Debug)]
pub(crate) struct Kernel {
    /// The op's name (`NN_KERNELS`' key).
    pub(crate) op: &'static str,
    /// The algorithms' names, the reference first.
    pub(crate) algos: &'static [&'static str],
    /// The choice, made once.
    pick: OnceLock<Pick>,
}

/// A chosen variant: an algorithm (an index into [`Kernel::algos`]) in one vector copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pick {
    /// The algorithm.
    pub(crate) algo: usize,
    /// The copy.
    pub(crate) isa: Isa,
}

/// The elementwise kernels that are chosen by measurement.
pub(crate) static TANH: Kernel = Kernel::new(crate::names::TANH, &["f64", "f32", "table"]);
/// `exp`.
pub(crate) static EXP: Kernel = Kernel::new(crate::names::EXP, &["f64", "f32"]);
/// `sigmoid`.
pub(crate) static SIGMOID: Kernel = Kernel::new(crate::names::SIGMOID, &["f32"]);
/// `silu`.
pub(crate) static SILU: Kernel = Kernel::new(crate::names::SILU, &["table"]);
/// The exact GELU.
pub(crate) static GELU: Kernel = Kernel::new("gelu", &["table"]);
/// The tanh GELU.
pub(crate) static GELU_TANH: Kernel = Kernel::new("gelu_tanh", &["f64"]);

/// Every tuned kernel (for `NN_KERNELS`' checks and the report).
pub(crate) static ALL: [&Kernel; 6] = [&TANH, &EXP, &SIGMOID, &SILU, &GELU, &GELU_TANH];

/// One decision, for `nn_core::cpu::kernel_report`.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub(crate) op: &'static str,
    pub(crate) chosen: String,
    pub(crate) forced: bool,
    pub(crate) timings: Vec<(String, Duration)>,
}

/// The decisions made so far, in order.
static RECORDS: Mutex<Vec<Record>> = Mutex::new(Vec::new());

/// The decisions made so far in this process.
pub(crate) fn records() -> Vec<Record> {
    RECORDS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

impl Kernel {
    const fn new(op: &'static str, algos: &'static [&'static str]) -> Kernel {
        Kernel { op, algos, pick: OnceLock::new() }
    }

    /// The variant's name: `algo-isa`.
    pub(crate) fn variant_name(&self, p: Pick) -> String {
        format!("{}-{}", self.algos[p.algo], p.isa.name())
    }

    /// Every variant this CPU runs (the candidates of the measurement).
    pub(crate) fn candidates(&self) -> Vec<Pick> {
        (0..self.algos.len())
            .flat_map(|algo| Isa::candidates().into_iter().map(move |isa| Pick { algo, isa }))
            .collect()
    }

    /// The process's choice, measuring with `time` on the first call.
    #[inline]
    fn pick(&'static self, time: &dyn Fn(Pick) -> Duration) -> Pick {
        #[cfg(test)]
        if let Some(p) = forced_for_test(self) {
            return p;
        }
        *self.pick.get_or_init(|| self.decide(time))
    }

    /// Applies `NN_KERNELS`, then times what it leaves open.
    #[cold]
    fn decide(&'static self, time: &dyn Fn(Pick) -> Duration) -> Pick {
        let spec = match env_overrides() {
            Ok(o) => o.iter().find(|(k, _)| std::ptr::eq(*k, self)).map(|(_, s)| *s).unwrap_or_default(),
            Err(e) => panic!("{e}"),
        };
        let cands: Vec<Pick> = self
            .candidates()
            .into_iter()
            .filter(|p| spec.algo.is_none_or(|a| a == p.algo) && spec.isa.is_none_or(|i| i == p.isa))
            .collect();
        // `env_overrides` checked that a forced copy runs here, so some candidate is left.
        let mut timings = Vec::new();
        let chosen = if cands.len() == 1 {
            cands[0]
        } else {
            let mut best = (Duration::MAX, cands[0]);
            for &p in &cands {
                let t = time(p);
                timings.push((self.variant_name(p), t));
                if t < best.0 {
                    best = (t, p);
                }
            }
            best.1
        };
        let forced = spec.algo.is_some() || spec.isa.is_some();
        RECORDS.lock().unwrap_or_else(|e| e.into_inner()).push(Record {
            op: self.op,
            chosen: self.variant_name(chosen),
            forced,
            timings,
        });
        chosen
    }
}

/// One algorithm of a kernel: a function the loops inline, plain or with a table.
pub(crate) trait Algo: Copy {
    /// Runs the loop `l` with this algorithm in the copy for `isa`.
    fn run<L: F32Loop>(self, isa: Isa, l: L) -> L::Out;
    /// Maps `src` into `dst` in the copy for `isa` (the measurement, and the tests).
    fn map(self, isa: Isa, src: &[f32], dst: &mut [MaybeUninit<f32>]);
}

/// A function `f32 -> f32` mapped by the plain loop.
#[derive(Clone, Copy)]
pub(crate) struct Plain<F>(pub(crate) F);

impl<F: Fn(f32) -> f32 + Copy + Send + Sync> Algo for Plain<F> {
    #[inline(always)]
    fn run<L: F32Loop>(self, isa: Isa, l: L) -> L::Out {
        l.run_on(isa, self.0)
    }
    fn map(self, isa: Isa, src: &[f32], dst: &mut [MaybeUninit<f32>]) {
        map_elems_on(isa, src, dst, self.0)
    }
}

/// A function that is `p`'s `x p(x)` where `p` covers `x`, mapped by the table loop.
#[derive(Clone, Copy)]
pub(crate) struct Table<const K: usize, F>(pub(crate) &'static Pieces<K>, pub(crate) F);

impl<const K: usize, F: Fn(f32) -> f32 + Copy + Send + Sync> Algo for Table<K, F> {
    #[inline(always)]
    fn run<L: F32Loop>(self, isa: Isa, l: L) -> L::Out {
        l.run_pieces_on(isa, self.0, self.1)
    }
    fn map(self, isa: Isa, src: &[f32], dst: &mut [MaybeUninit<f32>]) {
        map_pieces_on(isa, self.0, src, dst, self.1)
    }
}

/// A kernel's algorithms, in [`Kernel::algos`]' order: a tuple of [`Algo`]s.
pub(crate) trait Algos: Copy {
    /// How many.
    const N: usize;
    /// Runs the loop `l` with the variant `p`.
    fn run<L: F32Loop>(self, p: Pick, l: L) -> L::Out;
    /// Maps `src` into `dst` with the variant `p`.
    fn map(self, p: Pick, src: &[f32], dst: &mut [MaybeUninit<f32>]);
}

impl<A: Algo> Algos for (A,) {
    const N: usize = 1;
    #[inline(always)]
    fn run<L: F32Loop>(self, p: Pick, l: L) -> L::Out {
        self.0.run(p.isa, l)
    }
    fn map(self, p: Pick, src: &[f32], dst: &mut [MaybeUninit<f32>]) {
        self.0.map(p.isa, src, dst)
    }
}

impl<A: Algo, B: Algo> Algos for (A, B) {
    const N: usize = 2;
    #[inline(always)]
    fn run<L: F32Loop>(self, p: Pick, l: L) -> L::Out {
        match p.algo {
            0 => self.0.run(p.isa, l),
            _ => self.1.run(p.isa, l),
        }
    }
    fn map(self, p: Pick, src: &[f32], dst: &mut [MaybeUninit<f32>]) {
        match p.algo {
            0 => self.0.map(p.isa, src, dst),
            _ => self.1.map(p.isa, src, dst),
        }
    }
}

impl<A: Algo, B: Algo, C: Algo> Algos for (A, B, C) {
    const N: usize = 3;
    #[inline(always)]
    fn run<L: F32Loop>(self, p: Pick, l: L) -> L::Out {
        match p.algo {
            0 => self.0.run(p.isa, l),
            1 => self.1.run(p.isa, l),
            _ => self.2.run(p.isa, l),
        }
    }
    fn map(self, p: Pick, src: &[f32], dst: &mut [MaybeUninit<f32>]) {
        match p.algo {
            0 => self.0.map(p.isa, src, dst),
            1 => self.1.map(p.isa, src, dst),
            _ => self.2.map(p.isa, src, dst),
        }
    }
}

/// Runs the loop `l` with `k`'s chosen variant of `algos` (choosing it on the first call).
#[inline(always)]
pub(crate) fn run<A: Algos, L: F32Loop>(k: &'static Kernel, algos: A, l: L) -> L::Out {
    debug_assert!(k.algos.len() == A::N, "{}: one function per algorithm", k.op);
    let p = k.pick(&|p| time(algos, p));
    algos.run(p, l)
}

/// The best of [`REPS`] runs of variant `p` over the sample.
fn time<A: Algos>(algos: A, p: Pick) -> Duration {
    let src = sample();
    let mut dst = vec![MaybeUninit::<f32>::uninit(); src.len()];
    algos.map(p, src, &mut dst); // warm-up: code, caches, the frequency
    let mut best = Duration::MAX;
    for _ in 0..REPS {
        let t = Instant::now();
        algos.map(p, black_box(src), &mut dst);
        black_box(&mut dst);
        best = best.min(t.elapsed());
    }
    best
}

/// [`SAMPLE`] values about normally distributed with spread 1.5 (a sum of three uniform
/// draws of a fixed generator), as activations are: the table kernels' fast path covers
/// them, as it does real inputs.
pub(crate) fn sample() -> &'static [f32] {
    static S: OnceLock<Vec<f32>> = OnceLock::new();
    S.get_or_init(|| {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut uniform = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32
        };
        (0..SAMPLE).map(|_| (uniform() + uniform() + uniform() - 1.5) * 3.0).collect()
    })
}

/// What `NN_KERNELS` asks of one kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Spec {
    pub(crate) algo: Option<usize>,
    pub(crate) isa: Option<Isa>,
}

/// `NN_KERNELS`, parsed and checked once.
pub(crate) fn env_overrides() -> Result<&'static [(&'static Kernel, Spec)], &'static str> {
    static PARSED: OnceLock<Result<Vec<(&'static Kernel, Spec)>, String>> = OnceLock::new();
    let parsed = PARSED.get_or_init(|| match std::env::var("NN_KERNELS") {
        Ok(v) => parse(&v, Isa::available),
        Err(std::env::VarError::NotPresent) => Ok(Vec::new()),
        Err(std::env::VarError::NotUnicode(_)) => Err("NN_KERNELS is not valid UTF-8".to_string()),
    });
    match parsed {
        Ok(v) => Ok(v),
        Err(e) => Err(e),
    }
}

/// Parses an `NN_KERNELS` value, with `runs` saying which copies this CPU runs.
pub(crate) fn parse(value: &str, runs: impl Fn(Isa) -> bool) -> Result<Vec<(&'static Kernel, Spec)>, String> {
    let mut out: Vec<(&'static Kernel, Spec)> = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = |why: String| format!("NN_KERNELS entry `{entry}`: {why}");
        let Some((op, variant)) = entry.split_once('=') else {
            return Err(bad("expected `op=variant`, such as `tanh=f32` or `exp=f64-avx2`".into()));
        };
        let (op, variant) = (op.trim(), variant.trim());
        let Some(k) = ALL.iter().copied().find(|k| k.op == op) else {
            let ops: Vec<&str> = ALL.iter().map(|k| k.op).collect();
            return Err(bad(format!(
                "no kernel is chosen by measurement for `{op}` (those that are: {})",
                ops.join(", ")
            )));
        };
        if out.iter().any(|(o, _)| std::ptr::eq(*o, k)) {
            return Err(bad(format!("`{op}` is named twice")));
        }
        let mut spec = Spec::default();
        for token in variant.split('-') {
            if let Some(a) = k.algos.iter().position(|a| *a == token) {
                if spec.algo.replace(a).is_some() {
                    return Err(bad("two algorithms".into()));
                }
            } else if let Some(isa) = Isa::ALL.into_iter().find(|i| i.name() == token) {
                if spec.isa.replace(isa).is_some() {
                    return Err(bad("two instruction sets".into()));
                }
                if !runs(isa) {
                    return Err(bad(format!(
                        "this CPU cannot run the {} copy, which needs {}; it has {}{}",
                        isa.name(),
                        isa.features(),
                        cpu_features(),
                        if std::env::var_os("NN_NO_AVX512").is_some_and(|v| v == "1") {
                            " (and NN_NO_AVX512=1 turns AVX-512 off)"
                        } else {
                            ""
                        }
                    )));
                }
            } else {
                return Err(bad(format!(
                    "`{token}` is none of `{op}`'s algorithms ({}) or instruction sets (avx512, avx2, base)",
                    k.algos.join(", ")
                )));
            }
        }
        out.push((k, spec));
    }
    Ok(out)
}

/// The vector extensions this CPU reports, by `lscpu`'s names.
pub(crate) fn cpu_features() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! present {
            ($($f:tt),*) => {{
                let mut v: Vec<&str> = Vec::new();
                $(if std::arch::is_x86_feature_detected!($f) { v.push($f); })*
                v
            }};
        }
        let v = present!(
            "sse4.2",
            "avx",
            "avx2",
            "fma",
            "f16c",
            "avx512f",
            "avx512vl",
            "avx512dq",
            "avx512bw",
            "avx512bf16",
            "avx512fp16",
            "avx512vnni"
        );
        if v.is_empty() {
            "none of the vector extensions nn uses".to_string()
        } else {
            v.join(" ")
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        format!("no x86 extensions ({} build)", std::env::consts::ARCH)
    }
}

#[cfg(test)]
thread_local! {
    /// The variant a test forces for one kernel on this thread (see [`force_for_test`]).
    static FORCED: std::cell::Cell<Option<(&'static Kernel, Pick)>> = const { std::cell::Cell::new(None) };
}

#[cfg(test)]
fn forced_for_test(k: &'static Kernel) -> Option<Pick> {
    FORCED.with(|f| f.get()).filter(|(fk, _)| std::ptr::eq(*fk, k)).map(|(_, p)| p)
}

/// Runs `f` with kernel `k` forced to variant `p` on this thread (the choice is read on
/// the calling thread before a loop is split, so the team's helpers run it too).
#[cfg(test)]
pub(crate) fn force_for_test<R>(k: &'static Kernel, p: Pick, f: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            FORCED.with(|f| f.set(None));
        }
    }
    FORCED.with(|c| c.set(Some((k, p))));
    let _reset = Reset;
    f()
}

#[cfg(test)]
#[path = "tune_tests.rs"]
mod tests;
