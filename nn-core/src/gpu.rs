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

/// The counters of `gpu:n`, or `None` when it is not available (or was never opened).
pub fn stats(n: usize) -> Option<GpuStats> {
    #[cfg(feature = "gpu")]
    {
        use std::sync::atomic::Ordering::Relaxed;
        let c = crate::backend::gpu::context::get(n).ok()?;
        let host_path =
            c.fallbacks.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(k, v)| (k.clone(), *v)).collect();
        let k = &c.counters;
        Some(GpuStats {
            allocations: k.allocations.load(Relaxed),
            reuses: k.reuses.load(Relaxed),
            dispatches: k.dispatches.load(Relaxed),
            submissions: k.submissions.load(Relaxed),
            host_waits: k.host_waits.load(Relaxed),
            bind_groups: k.bind_groups.load(Relaxed),
            host_path,
        })
    }
    #[cfg(not(feature = "gpu"))]
    {
        let _ = n;
        None
    }
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
