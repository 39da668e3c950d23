//! Devices: where a tensor's values live.

use std::fmt;

/// Where a tensor's values live.
///
/// `Meta` tensors carry a shape and a dtype but no values: every op computes the output
/// shape and dtype without allocating, so a model of any size can be built and inspected
/// (parameter count, state-dict schema) in O(1) memory and materialised later. Reading
/// values (`to_vec`, `item`) from a meta tensor panics with a message saying so.
///
/// `Gpu(n)` is the `n`-th GPU adapter wgpu finds (Vulkan, Metal or DX12), printed `gpu:n`.
/// Its kernels exist only with nn-core's cargo feature `gpu`; the variant itself is always
/// there, so that enabling the feature anywhere in a dependency graph never changes the
/// shape of this enum under someone's exhaustive `match`. Without the feature, or when the
/// adapter does not exist, moving anything to it is an error that says which
/// ([`Device::check`]), as PyTorch's "Torch not compiled with CUDA enabled".
///
/// Storage is an enum behind this tag, so another backend adds a variant here and a module
/// under [`crate::backend`] (see its docs for the contract) without touching ops or modules.
/// Ops never copy silently between devices: mixing devices in one op panics and names both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// Host memory; kernels run on the CPU.
    #[default]
    Cpu,
    /// Shapes and dtypes only, no storage.
    Meta,
    /// The `n`-th GPU adapter (cargo feature `gpu`); see [`crate::gpu`].
    Gpu(usize),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Meta => f.write_str("meta"),
            Device::Gpu(n) => write!(f, "gpu:{n}"),
        }
    }
}

/// Parses `cpu`, `meta`, `gpu` (that is `gpu:0`) and `gpu:N`, as [`Device`]'s `Display`
/// prints them (PyTorch's `torch.device("cuda:1")` spelling is `gpu:1` here).
///
/// ```
/// use nn_core::Device;
/// assert_eq!("gpu:1".parse::<Device>(), Ok(Device::Gpu(1)));
/// assert_eq!("gpu".parse::<Device>(), Ok(Device::Gpu(0)));
/// assert!("cuda".parse::<Device>().unwrap_err().contains("expected cpu, meta, gpu or gpu:N"));
/// ```
impl std::str::FromStr for Device {
    type Err = String;

    fn from_str(s: &str) -> Result<Device, String> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "meta" => Ok(Device::Meta),
            "gpu" => Ok(Device::Gpu(0)),
            _ => s
                .strip_prefix("gpu:")
                .and_then(|n| n.parse().ok())
                .map(Device::Gpu)
                .ok_or_else(|| format!("unknown device `{s}`: expected cpu, meta, gpu or gpu:N")),
        }
    }
}

thread_local! {
    static DEFAULT_DEVICE: std::cell::Cell<Device> = const { std::cell::Cell::new(Device::Cpu) };
}

/// The device that factory functions (`zeros`, `ones`, `full`, `randn`, `rand`,
/// `uniform`, `normal`) create tensors on, on this thread; `Cpu` unless inside
/// [`with_device`].
pub fn default_device() -> Device {
    DEFAULT_DEVICE.with(|d| d.get())
}

/// Runs `f` with factory functions creating tensors on `device` (PyTorch's
/// `with torch.device("meta"):`). Building a model inside `with_device(Device::Meta, ..)`
/// allocates no storage and draws nothing from the random generator, whatever the model's
/// size; load a state dict into it to materialise it.
///
/// ```
/// use nn_core::{with_device, Device, Tensor};
/// let t = with_device(Device::Meta, || Tensor::randn(&[100_000, 100_000])); // 40 GB if real
/// assert_eq!((t.device(), t.shape()), (Device::Meta, &[100_000, 100_000][..]));
/// assert_eq!(Tensor::zeros(&[2]).device(), Device::Cpu);
/// ```
pub fn with_device<R>(device: Device, f: impl FnOnce() -> R) -> R {
    struct Restore(Device);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEFAULT_DEVICE.with(|d| d.set(self.0));
        }
    }
    let _restore = Restore(DEFAULT_DEVICE.with(|d| d.replace(device)));
    f()
}
