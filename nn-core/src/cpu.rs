//! The CPU kernels this process chose, and why.
//!
//! Where an elementwise op has more than one CPU kernel (`f64` and `f32` algorithms for
//! `tanh` and `exp`, and a table for `tanh`; an AVX-512 and an AVX2 copy of every vectorized loop on a CPU
//! with both), the first call in a process times each on a small input and keeps the
//! fastest, because which one wins depends on the microarchitecture: `tanh` in `f64` is
//! faster than PyTorch's on AMD Zen 5 and slower than it on Intel Emerald Rapids (the
//! `compare.py` row `ew_tanh`).
//! [`kernel_report`] lists the choices with the candidates' times.
//!
//! Copies of one algorithm give the same bits. Algorithms may differ in the last bits,
//! each within its bound of the exact value: `tanh` and `exp` in `f64` within 1 ulp, in
//! `f32` within 2, `tanh`'s table within 1 on `[-6, 6]` and 2 beyond. A program that needs the same bits on every machine fixes the
//! algorithm with the environment variable `NN_KERNELS`, comma-separated `op=variant`
//! entries, a variant being an algorithm, a copy, or both:
//!
//! ```text
//! NN_KERNELS=tanh=f64,exp=f64 cargo run --release ...   # the reference algorithms
//! NN_KERNELS=tanh=f32-avx2 cargo test ...               # one variant
//! ```
//!
//! An entry that names no such op or variant, or a copy this CPU cannot run, is an error
//! naming the CPU's features ([`check_kernel_env`] reports it; a tuned kernel called with
//! such a setting panics with the same message), never an illegal instruction.
//!
//! ```
//! use nn_core::{cpu, Tensor};
//!
//! cpu::check_kernel_env()?;
//! let y = Tensor::from_vec(vec![0.0, 1.0, -2.0], &[3]).tanh();
//! assert!((y.to_vec()[1] - 1f32.tanh()).abs() < 1e-6);
//! let tanh = cpu::kernel_report().into_iter().find(|c| c.op == "tanh").expect("chosen at the first call");
//! assert!(cpu::kernel_variants().iter().any(|(op, v)| *op == "tanh" && v.contains(&tanh.variant)));
//! # Ok::<(), nn_core::Error>(())
//! ```

use std::time::Duration;

use crate::backend::cpu::tune;
use crate::error::{Error, Result};

/// One kernel's choice in this process.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelChoice {
    /// The op (`tanh`, `exp`, `gelu`, ...), as `NN_KERNELS` names it.
    pub op: &'static str,
    /// The variant that runs: `algorithm-copy`, such as `f32-avx512`.
    pub variant: String,
    /// Whether `NN_KERNELS` fixed it (wholly or in part).
    pub forced: bool,
    /// Each candidate's best time over the measurement's sample (empty when only one
    /// candidate was left).
    pub timings: Vec<(String, Duration)>,
}

/// The choices made so far in this process, in the order the kernels were first called
/// (a kernel not yet called has made none).
pub fn kernel_report() -> Vec<KernelChoice> {
    tune::records()
        .into_iter()
        .map(|r| KernelChoice { op: r.op, variant: r.chosen, forced: r.forced, timings: r.timings })
        .collect()
}

/// Every kernel chosen by measurement, with the variants this CPU runs.
pub fn kernel_variants() -> Vec<(&'static str, Vec<String>)> {
    tune::ALL.iter().map(|k| (k.op, k.candidates().into_iter().map(|p| k.variant_name(p)).collect())).collect()
}

/// Checks `NN_KERNELS` (read once per process): an error names the entry, what is wrong
/// and, for a copy the CPU cannot run, the CPU's features.
pub fn check_kernel_env() -> Result<()> {
    tune::env_overrides().map(|_| ()).map_err(|reason| Error::KernelOverride { reason: reason.to_string() })
}

/// The vector extensions this CPU has that nn's kernels use, by `lscpu`'s names (for
/// messages and benchmark records).
pub fn features() -> String {
    tune::cpu_features()
}
