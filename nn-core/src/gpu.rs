//! The GPU device: whether one is there, what it is, and what it has done.
//!
//! `Device::Gpu(n)` is the `n`-th adapter wgpu finds (best first: discrete GPUs, then
//! integrated, virtual and software ones such as Mesa's lavapipe). Kernels are WGSL compute
//! shaders (nn-core's cargo feature `gpu`); without the feature every function here says
//! there is no GPU, and moving a tensor to one is an error naming the missing feature.
//!
//! ```
//! use nn_core::{gpu, Device, Tensor};
//! if gpu::is_available() {
//!     let x = Tensor::from_vec(vec![1.0, -2.0, 3.0], &[3]).to_device(Device::Gpu(0));
//!     let y = (&x * &x).sum();
//!     assert_eq!(y.device(), Device::Gpu(0));
//!     assert_eq!(y.item(), 14.0); // the host waits only here
//! } else {
//!     assert!(Device::Gpu(0).check().is_err());
//! }
//! ```

use crate::device::Device;
use crate::error::Result;

/// True when `Device::Gpu(0)` can be used: nn-core was built with the `gpu` feature and
/// wgpu found an adapter that opens.
pub fn is_available() -> bool {
    Device::Gpu(0).check().is_ok()
}

/// The number of GPU adapters (0 without the `gpu` feature).
pub fn device_count() -> usize {
    #[cfg(feature = "gpu")]
    {
        crate::backend::gpu::context::count()
    }
    #[cfg(not(feature = "gpu"))]
    {
        0
    }
}

/// What `gpu:n` is: the adapter's name, driver and graphics API (for logs and benchmark
/// reports), or `None` when it is not available.
pub fn adapter_info(n: usize) -> Option<String> {
    #[cfg(feature = "gpu")]
    {
        crate::backend::gpu::context::get(n).ok().map(|c| {
            format!(
                "{} ({:?}, {:?}, driver {} {})",
                c.info.name, c.info.device_type, c.info.backend, c.info.driver, c.info.driver_info
            )
        })
    }
    #[cfg(not(feature = "gpu"))]
    {
        let _ = n;
        None
    }
}

/// The backend methods that may run on host copies of their GPU operands: no native GPU
/// kernel for them, or for some dtypes or layouts of their operands. Each such call is
/// counted, by method, in [`GpuStats::host_path`]; the GPU suite (`nn-core/tests/gpu.rs`,
/// every op on the GPU against the CPU) fails on a method that takes the host path without
/// being named here, so a new fallback is a listed, reviewed one.
///
/// Today's list, as the GPU suite on lavapipe takes it: max pooling with its saved argmax
/// (`max_pool2d` and its backward), `index_add` and `scatter_add` with repeated indices,
/// `sort`, `multinomial`, the cumulative `scan` of integers, `predicate` (`isnan` and its
/// kin) for some dtypes, `softmax` where no fused row kernel applies, and `exp` in `f64`
/// (WGSL has no `f64` transcendental functions), and `i64`: every method called with an
/// `i64` operand or result that has no integer kernel (integer arithmetic, conversions to
/// and from `i64`; WGSL has no 64-bit integers), counted under that one name.
pub const HOST_PATH: &[&str] = &[
    "i64",
    "index_add",
    "max_pool2d",
    "max_pool2d_backward",
    "multinomial",
    "predicate",
    "scan",
    "scatter_add",
    "softmax",
    "sort",
    "unary<unary::Exp>",
    "unary_grad<unary::Exp>",
];

/// Counters of one GPU since the process started; see [`stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuStats {
    /// Device buffers created: by the caching allocator, and staging buffers for reads
    /// (a training step after warm-up should add none).
    pub allocations: u64,
    /// Requests served from the allocator's cache.
    pub reuses: u64,
    /// Kernel launches (recorded into the batch; they run when it is submitted).
    pub dispatches: u64,
    /// Queue submissions: a batch of recorded launches goes to the device when the host
    /// reads a value, before a large upload, or when it fills (64 launches).
    pub submissions: u64,
    /// Times the host blocked on the device (reading a value back).
    pub host_waits: u64,
    /// Bind groups created (one per launch).
    pub bind_groups: u64,
    /// Backend methods that ran on host copies of their operands (no native GPU kernel
    /// for them or for their dtype yet), by method, with how often.
    pub host_path: Vec<(String, u64)>,
}

impl GpuStats {
    /// Total host-path calls.
    pub fn host_path_calls(&self) -> u64 {
        self.host_path.iter().map(|(_, n)| n).sum()
    }
}

/// The counters of `gpu:n`. A GPU that is not available (no `gpu` feature, no such
/// adapter, or lost) counts what it ran before, which is nothing when it never opened:
/// all zeros ([`adapter_info`] says whether it is there).
///
/// ```
/// use nn_core::gpu;
/// let s = gpu::stats(0);
/// if !gpu::is_available() {
///     assert_eq!((s.allocations, s.dispatches, s.host_waits), (0, 0, 0));
/// }
/// ```
pub fn stats(n: usize) -> GpuStats {
    #[cfg(feature = "gpu")]
    {
        use std::sync::atomic::Ordering::Relaxed;
        let Ok(c) = crate::backend::gpu::context::get(n) else { return GpuStats::default() };
        let host_path =
            c.fallbacks.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(k, v)| (k.clone(), *v)).collect();
        let k = &c.counters;
        GpuStats {
            allocations: k.allocations.load(Relaxed),
            reuses: k.reuses.load(Relaxed),
            dispatches: k.dispatches.load(Relaxed),
            submissions: k.submissions.load(Relaxed),
            host_waits: k.host_waits.load(Relaxed),
            bind_groups: k.bind_groups.load(Relaxed),
            host_path,
        }
    }
    #[cfg(not(feature = "gpu"))]
    {
        let _ = n;
        GpuStats::default()
    }
}

/// Fault injection: destroys `gpu:n`'s device now, as a driver reset or a GPU dropping
/// off the bus would, so that a program's handling of a lost device can be tested (nn's own
/// tests use it). Work recorded but not yet submitted is discarded.
///
/// From then on every use of `gpu:n` panics naming the device, the adapter and the loss
/// (recording a kernel, allocating, reading a value back), as CUDA errors stay sticky in
/// PyTorch; no call waits on the dead device. [`Device::check`] returns the error, and
/// [`is_available`] is false for `gpu:0` once it is lost. CPU tensors, and values read
/// back before the loss, are untouched. Does nothing when `gpu:n` is not available.
///
/// An error wgpu reports outside an error scope (a failed submission, a staging buffer
/// the device could not allocate) is as sticky: it loses the launches recorded with it,
/// whose outputs would hold stale memory, so it panics naming the device and the error,
/// and every later use of the device fails the same way. (An allocation that runs out of
/// memory is not such an error: it is retried after the allocator's cache is emptied, and
/// then panics naming the device, which stays usable.)
///
/// ```no_run
/// use nn_core::{gpu, Device, Tensor};
/// let x = Tensor::ones(&[4]).to_device(Device::Gpu(0));
/// gpu::lose_device(0);
/// let err = Device::Gpu(0).check().unwrap_err().to_string();
/// assert!(err.contains("gpu:0") && err.contains("lost"), "{err}");
/// // (x * 2.0).item() would panic: "gpu:0 (`<adapter>`) was lost: ..."
/// # drop(x);
/// ```
pub fn lose_device(n: usize) {
    #[cfg(feature = "gpu")]
    if let Ok(ctx) = crate::backend::gpu::context::get(n) {
        ctx.lose();
    }
    #[cfg(not(feature = "gpu"))]
    let _ = n;
}

/// The GEMM kernels of one GPU (see [`gemm_report`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GemmReport {
    /// Every GEMM variant, by name, with `None` where this adapter runs it and otherwise why
    /// not: the adapter and the feature it lacks, or the compiler's error for an element type.
    pub variants: Vec<(String, Option<String>)>,
    /// The autotuner's table: size class, then the variant chosen with every candidate's time.
    pub tuned: Vec<(String, String)>,
    /// The variant that ran the latest product, why (`forced`, `tuned`, `small`, or the
    /// refusals that sent it to the general variant) and how it read the operands:
    /// `t64x64_8x8 (tuned) [f32]`, `t64x64_4x4 (forced ...) [f16 (packed words)]`.
    pub last: Option<String>,
    /// Host waits spent timing variants (the GEMM's only ones: a few per size class, once).
    pub tuning_waits: u64,
}

/// How `gpu:n` runs matrix products: its GEMM variants, which it refuses and why, the
/// autotuner's choices and the latest product's variant; `None` when it is not available.
///
/// ```
/// use nn_core::{gpu, Device, Tensor};
/// if gpu::is_available() {
///     let g = Device::Gpu(0);
///     let y = Tensor::ones(&[3, 4]).to_device(g).matmul(&Tensor::ones(&[4, 2]).to_device(g));
///     assert_eq!(y.to_vec(), vec![4.0; 6]);
///     let report = gpu::gemm_report(0).unwrap();
///     assert!(report.variants.iter().any(|(name, refused)| name == "t64x64_4x4" && refused.is_none()));
///     assert!(report.last.is_some());
/// }
/// ```
pub fn gemm_report(n: usize) -> Option<GemmReport> {
    #[cfg(feature = "gpu")]
    {
        let ctx = crate::backend::gpu::context::get(n).ok()?;
        let (variants, tuned, last, tuning_waits) = crate::backend::gpu::gemm_tune::report(ctx);
        Some(GemmReport { variants, tuned, last, tuning_waits })
    }
    #[cfg(not(feature = "gpu"))]
    {
        let _ = n;
        None
    }
}

/// Makes every GPU matrix product run the GEMM variant `spec` names where it can (and the
/// general variant, saying why, where it cannot); `None` or `"auto"` lets the autotuner choose
/// again. A `+packed` suffix sends f16 tensors through the packed-word path even on adapters
/// with `SHADER_F16`; a `+checked` suffix compiles the kernels with wgpu's runtime bounds
/// checks (`NN_GPU_GEMM_CHECKED=1` adds it to any spec), which they otherwise go without.
/// The environment variable `NN_GPU_GEMM` sets the initial value. For
/// tests and benchmarks; the names are those of [`GemmReport::variants`].
///
/// # Panics
/// When `spec` names no variant; the message lists them.
pub fn force_gemm(spec: Option<&str>) {
    #[cfg(feature = "gpu")]
    crate::backend::gpu::gemm_tune::force(spec);
    #[cfg(not(feature = "gpu"))]
    let _ = spec;
}

impl Device {
    /// `Ok` when tensors can be placed on this device: always for `Cpu` and `Meta`; for
    /// `Gpu(n)` when nn-core was built with the `gpu` feature and adapter `n` exists and
    /// opened. The error says which of those failed.
    ///
    /// ```
    /// use nn_core::Device;
    /// assert!(Device::Cpu.check().is_ok());
    /// if !nn_core::gpu::is_available() {
    ///     let err = Device::Gpu(0).check().unwrap_err().to_string();
    ///     assert!(err.contains("gpu:0"), "{err}");
    /// }
    /// ```
    pub fn check(self) -> Result<()> {
        match self {
            Device::Cpu | Device::Meta => Ok(()),
            Device::Gpu(n) => crate::backend::check_gpu(n),
        }
    }
}
