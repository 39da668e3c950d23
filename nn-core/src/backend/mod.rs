//! The backend boundary: where device-independent ops meet device kernels.
//!
//! # The contract
//!
//! An op in [`crate::ops`] owns everything a user can see: shape rules and broadcasting,
//! dtype and device checks, error messages, the autograd wiring. It then asks for values
//! through the methods of [`Storage`] defined in this module and its children, passing
//! only [`Storage`]s, [`Layout`]s and plain kernel descriptions (the `UnaryOp` and
//! `BinaryOp` tables, `ConvGeometry`, ...). Those methods are the whole interface: no
//! op, module, optimizer or autograd code names a backend's buffer type. The optimizers'
//! steps are backend operations too (`update`: each optimizer's rule written once in
//! its CPU and GPU forms, its state buffers kept where the parameter is). One place
//! outside `backend` names a buffer type: `__private`, which exposes the CPU GEMM to the
//! benchmark that chose its kernel library.
//!
//! Every interface method:
//! - receives operands already checked by the op: one device, matching dtypes, layouts
//!   that fit their buffers, output sizes that were validated (a kernel may assume, and
//!   only `debug_assert!`, what the op checked);
//! - returns fresh, contiguous, row-major storage of the stated length (it never aliases
//!   an input), except the in-place methods, which write into the storage they are given;
//! - computes exactly the values the CPU backend computes, up to floating-point
//!   reassociation (the CPU backend is the reference every other backend is tested
//!   against, op by op);
//! - panics only for conditions the op could not check without reading values (an index
//!   out of range, an integer overflow), with a message naming the op.
//!
//! The meta device is handled in this module only: `Storage::run` (and `run2`) skip the
//! kernel when any operand is a meta buffer and return meta buffers of the outputs' dtypes
//! and lengths; the few methods that are not one kernel call (transfers to and from the
//! host, max pooling with its saved argmax, quantiles) match the meta variant themselves.
//! Kernels never see meta storage, and no op in `ops` tests for a device.
//!
//! # Adding a device
//!
//! A new device is a new child module (as `cpu`) providing kernels over its own buffer
//! type, a variant of [`Storage`] holding that buffer, a [`Device`] variant, and an arm for
//! it in `Storage::run` and the transfers; the compiler lists the matches that lack the
//! variant. A kernel the device does not have yet is not a compile error: the interface
//! method tries the device's kernel first and, without one (the GPU's `gpu::interface`
//! answers `None`), runs the CPU kernel on host copies of the operands and uploads the
//! result (the host path). The host path is counted per method
//! ([`gpu::stats`](crate::gpu::stats)) and named: the GPU's methods that may take it are
//! listed in [`gpu::HOST_PATH`](crate::gpu::HOST_PATH), and the GPU suite fails on one that
//! is not, so a new fallback is reviewed rather than silent. The fused row kernels (`norm`:
//! layer norm forward and backward, the softmax backward) are optional: without one, a
//! backend answers `None` and the op composes the same values from the primitives above.
//! Nothing in `ops`, `module`, `autograd` or `nn-layers` changes.

use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::shape::Layout;

mod conv;
pub(crate) mod cpu;
mod elementwise;
#[cfg(feature = "gpu")]
pub(crate) mod gpu;
#[cfg(feature = "gpu")]
mod host;
mod index;
mod linalg;
mod norm;
mod pooling;
mod reduce;
mod rows;
mod sample;
mod scan;
mod sort;
pub(crate) mod update;

pub use conv::Conv2dConfig;
pub(crate) use conv::ConvGeometry;
pub(crate) use cpu::try_alloc as try_host_vec;
pub use cpu::CpuStorage;
pub(crate) use elementwise::{BinaryOp, F32GradLoop, F32Loop, Operand, UnaryOp, Wgsl};
#[cfg(feature = "gpu")]
pub use gpu::GpuStorage;
pub(crate) use index::IndexArg;
pub(crate) use norm::AttentionPlan;
pub use pooling::Pool2dConfig;
pub(crate) use pooling::{Argmax, AvgPool, AvgWindows, MaxPool, PoolPlanes};
pub(crate) use scan::Scan;
pub(crate) use sort::SortSpec;

/// `Ok` when `gpu:n` can be used; the error says why not (no `gpu` feature, no such
/// adapter, or it failed to open).
pub(crate) fn check_gpu(n: usize) -> crate::Result<()> {
    #[cfg(feature = "gpu")]
    {
        gpu::context::get(n)
            .and_then(|ctx| ctx.alive())
            .map_err(|reason| crate::Error::DeviceUnavailable { device: Device::Gpu(n), reason })
    }
    #[cfg(not(feature = "gpu"))]
    {
        Err(crate::Error::DeviceUnavailable {
            device: Device::Gpu(n),
            reason: "nn-core was built without its `gpu` cargo feature; enable it (for example \
                     `nn = { version = \"..\", features = [\"gpu\"] }`)"
                .into(),
        })
    }
}

/// The context of `gpu:n`.
///
/// # Panics
/// When it is not available, with [`check_gpu`]'s reason.
#[cfg(feature = "gpu")]
#[track_caller]
fn gpu_context(n: usize) -> &'static gpu::context::Ctx {
    gpu::context::get(n)
        .unwrap_or_else(|reason| panic!("{}", crate::Error::DeviceUnavailable { device: Device::Gpu(n), reason }))
}

/// Without the `gpu` feature there is no context: panics with [`check_gpu`]'s reason.
#[cfg(not(feature = "gpu"))]
#[track_caller]
fn gpu_context(n: usize) -> ! {
    panic!("{}", check_gpu(n).expect_err("no GPU without the feature"))
}

/// A tensor's buffer on some device.
#[derive(Clone, Debug, PartialEq)]
pub enum Storage {
    /// Values in host memory.
    Cpu(CpuStorage),
    /// No values: only the dtype and the element count.
    Meta {
        /// Element type.
        dtype: DType,
        /// Number of elements the buffer would hold.
        len: usize,
    },
    /// Values in a GPU adapter's memory (cargo feature `gpu`).
    #[cfg(feature = "gpu")]
    Gpu(GpuStorage),
}

impl Storage {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            Storage::Cpu(c) => c.dtype(),
            Storage::Meta { dtype, .. } => *dtype,
            #[cfg(feature = "gpu")]
            Storage::Gpu(g) => g.dtype(),
        }
    }

    /// The device the buffer lives on.
    pub fn device(&self) -> Device {
        match self {
            Storage::Cpu(_) => Device::Cpu,
            Storage::Meta { .. } => Device::Meta,
            #[cfg(feature = "gpu")]
            Storage::Gpu(g) => Device::Gpu(g.ordinal()),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Storage::Cpu(c) => c.len(),
            Storage::Meta { len, .. } => *len,
            #[cfg(feature = "gpu")]
            Storage::Gpu(g) => g.len(),
        }
    }

    /// True when the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A buffer of `len` elements of `dtype`, all `value`, on `device`.
    ///
    /// # Panics
    /// When the allocator cannot provide the buffer, or `device` is a GPU that is not
    /// available (the message says why).
    #[track_caller]
    pub(crate) fn full(device: Device, dtype: DType, len: usize, value: f64) -> Storage {
        match device {
            Device::Cpu => Storage::Cpu(CpuStorage::full(dtype, len, value)),
            Device::Meta => Storage::Meta { dtype, len },
            Device::Gpu(n) => Storage::gpu_full(n, dtype, len, value),
        }
    }

    #[cfg(feature = "gpu")]
    #[track_caller]
    fn gpu_full(n: usize, dtype: DType, len: usize, value: f64) -> Storage {
        Storage::Gpu(GpuStorage::full(gpu_context(n), dtype, len, value))
    }

    #[cfg(not(feature = "gpu"))]
    #[track_caller]
    fn gpu_full(n: usize, _: DType, _: usize, _: f64) -> Storage {
        gpu_context(n)
    }

    /// [`full`](Storage::full), or `None` when the allocator cannot provide the buffer.
    pub(crate) fn try_full(device: Device, dtype: DType, len: usize, value: f64) -> Option<Storage> {
        Some(match device {
            Device::Cpu => Storage::Cpu(CpuStorage::try_full(dtype, len, value)?),
            Device::Meta => Storage::Meta { dtype, len },
            Device::Gpu(n) => Storage::gpu_full(n, dtype, len, value),
        })
    }

    /// Host values moved into a buffer in host memory (on the CPU device).
    pub(crate) fn from_vec<T: Element>(v: Vec<T>) -> Storage {
        Storage::Cpu(CpuStorage::from_vec(v))
    }

    /// The elements `l` selects, row-major, converted to `T` and copied to the host;
    /// `None` on the meta device.
    pub(crate) fn to_vec_of<T: Element>(&self, l: &Layout) -> Option<Vec<T>> {
        match self {
            Storage::Cpu(c) => Some(c.to_vec_of(l)),
            Storage::Meta { .. } => None,
            #[cfg(feature = "gpu")]
            Storage::Gpu(_) => Some(self.to_device(l, Device::Cpu).to_vec_of(&Layout::contiguous(&[l.numel()]))?),
        }
    }

    /// The elements `l` selects, row-major, little-endian, copied to the host (the
    /// safetensors encoding); `None` on the meta device.
    pub(crate) fn to_le_bytes(&self, l: &Layout) -> Option<Vec<u8>> {
        match self {
            Storage::Cpu(c) => Some(cpu::bytes::le_bytes(c, l)),
            Storage::Meta { .. } => None,
            #[cfg(feature = "gpu")]
            Storage::Gpu(_) => self.to_device(l, Device::Cpu).to_le_bytes(&Layout::contiguous(&[l.numel()])),
        }
    }

    /// Writes the elements `l` selects, row-major, little-endian, to `w` (streamed from host
    /// memory; a GPU buffer is read back first). A meta buffer has no values: an error
    /// (callers reject meta tensors before, naming the key).
    pub(crate) fn write_le(&self, l: &Layout, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        match self {
            Storage::Cpu(c) => cpu::bytes::write_le(c, l, w),
            Storage::Meta { .. } => {
                Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "a meta tensor has no values to write"))
            }
            #[cfg(feature = "gpu")]
            Storage::Gpu(_) => match self.to_device(l, Device::Cpu) {
                Storage::Cpu(c) => cpu::bytes::write_le(&c, &Layout::contiguous(&[l.numel()]), w),
                _ => unreachable!("moved to the CPU"),
            },
        }
    }

    /// The elements `l` selects, as a buffer on `device`. Moving to `Meta` drops the
    /// values; moving a meta buffer to a device with memory allocates zeros (PyTorch's
    /// `to_empty`, with defined contents).
    ///
    /// # Panics
    /// When `device` is a GPU that is not available (the message says why).
    #[track_caller]
    pub(crate) fn to_device(&self, l: &Layout, device: Device) -> Storage {
        match (self, device) {
            (Storage::Cpu(c), Device::Cpu) => Storage::Cpu(c.gather_layout(l)),
            (_, Device::Meta) => Storage::Meta { dtype: self.dtype(), len: l.numel() },
            (Storage::Meta { dtype, .. }, device) => Storage::full(device, *dtype, l.numel(), 0.0),
            #[cfg(feature = "gpu")]
            (Storage::Cpu(c), Device::Gpu(n)) => Storage::Gpu(GpuStorage::from_cpu(gpu_context(n), c, l)),
            #[cfg(feature = "gpu")]
            (Storage::Gpu(g), Device::Cpu) => {
                let whole = g.to_cpu();
                Storage::Cpu(if l.is_contiguous() && l.offset() == 0 && l.numel() == whole.len() {
                    whole
                } else {
                    whole.gather_layout(l)
                })
            }
            #[cfg(feature = "gpu")]
            (Storage::Gpu(g), Device::Gpu(n)) if g.ordinal() == n => self.gather_layout(l),
            #[cfg(feature = "gpu")]
            (Storage::Gpu(_), Device::Gpu(n)) => {
                self.to_device(l, Device::Cpu).to_device(&Layout::contiguous(&[l.numel()]), Device::Gpu(n))
            }
            #[cfg(not(feature = "gpu"))]
            (Storage::Cpu(_), Device::Gpu(n)) => gpu_context(n),
        }
    }

    /// The one place the meta device is handled: runs `cpu` on the operands' CPU buffers,
    /// or returns a meta buffer of `dtype` and `len` when any operand is a meta buffer. GPU
    /// operands reaching here have no native kernel for this method yet: `cpu` runs on host
    /// copies and the result is uploaded (the host path, counted per method). On the CPU,
    /// `f16`/`bf16` operands are widened to `f32` for the kernel and its result rounded back
    /// (`cpu::widen`).
    fn run<const N: usize, F: FnOnce([&CpuStorage; N]) -> CpuStorage>(
        operands: [&Storage; N],
        meta: (DType, usize),
        cpu: F,
    ) -> Storage {
        Storage::run_with(true, operands, meta, cpu)
    }

    /// [`run`](Storage::run) for the kernels that take every dtype as it is (copies and
    /// conversions, and the elementwise maps, which widen each half-type element as they
    /// read it and round each result as they write it): half-type operands go to the
    /// kernel unwidened.
    fn run_exact<const N: usize, F: FnOnce([&CpuStorage; N]) -> CpuStorage>(
        operands: [&Storage; N],
        meta: (DType, usize),
        cpu: F,
    ) -> Storage {
        Storage::run_with(false, operands, meta, cpu)
    }

    /// [`run`](Storage::run), widening half types or not.
    fn run_with<const N: usize, F: FnOnce([&CpuStorage; N]) -> CpuStorage>(
        widen: bool,
        operands: [&Storage; N],
        (dtype, len): (DType, usize),
        cpu: F,
    ) -> Storage {
        match Storage::placement(operands) {
            Placement::Meta => Storage::Meta { dtype, len },
            Placement::Cpu => {
                let [y] = on_host(widen, operands.map(Storage::cpu_ref), [dtype], |o| [cpu(o)]);
                Storage::Cpu(y)
            }
            #[cfg(feature = "gpu")]
            Placement::Gpu(ctx) => {
                let host = gpu::host_path::<F, N>(ctx, operands, &[dtype]);
                let [y] = on_host(widen, std::array::from_fn(|i| &host[i]), [dtype], |o| [cpu(o)]);
                gpu::upload_result(ctx, y)
            }
        }
    }

    /// [`run`](Storage::run) for a kernel with two outputs.
    fn run2<const N: usize, F: FnOnce([&CpuStorage; N]) -> (CpuStorage, CpuStorage)>(
        operands: [&Storage; N],
        meta: [(DType, usize); 2],
        cpu: F,
    ) -> (Storage, Storage) {
        Storage::run2_with(true, operands, meta, cpu)
    }

    /// [`run2`](Storage::run2), widening half types or not (as [`run_with`](Storage::run_with)).
    fn run2_with<const N: usize, F: FnOnce([&CpuStorage; N]) -> (CpuStorage, CpuStorage)>(
        widen: bool,
        operands: [&Storage; N],
        meta: [(DType, usize); 2],
        cpu: F,
    ) -> (Storage, Storage) {
        match Storage::placement(operands) {
            Placement::Meta => {
                let [(da, la), (db, lb)] = meta;
                (Storage::Meta { dtype: da, len: la }, Storage::Meta { dtype: db, len: lb })
            }
            Placement::Cpu => {
                let [a, b] = on_host(widen, operands.map(Storage::cpu_ref), meta.map(|m| m.0), |o| cpu(o).into());
                (Storage::Cpu(a), Storage::Cpu(b))
            }
            #[cfg(feature = "gpu")]
            Placement::Gpu(ctx) => {
                let host = gpu::host_path::<F, N>(ctx, operands, &meta.map(|m| m.0));
                let [a, b] = on_host(widen, std::array::from_fn(|i| &host[i]), meta.map(|m| m.0), |o| cpu(o).into());
                (gpu::upload_result(ctx, a), gpu::upload_result(ctx, b))
            }
        }
    }

    /// Where a kernel over `operands` runs: meta if any is meta, else on their one device.
    ///
    /// (The host buffers of either device then go through [`on_host`].)
    ///
    /// # Panics
    /// When the operands are on different devices (ops check this before asking for
    /// values; reaching here would be a bug, reported rather than copied around).
    fn placement<const N: usize>(operands: [&Storage; N]) -> Placement {
        if operands.iter().any(|s| matches!(s, Storage::Meta { .. })) {
            return Placement::Meta;
        }
        let Some(first) = operands.first() else { return Placement::Cpu };
        let device = first.device();
        if let Some(other) = operands.iter().find(|s| s.device() != device) {
            panic!("backend: one kernel got operands on {device} and {}", other.device());
        }
        match first {
            #[cfg(feature = "gpu")]
            Storage::Gpu(g) => Placement::Gpu(g.ctx()),
            _ => Placement::Cpu,
        }
    }

    /// The CPU buffer of an operand [`placement`](Storage::placement) put on the CPU.
    fn cpu_ref(&self) -> &CpuStorage {
        match self {
            Storage::Cpu(c) => c,
            other => unreachable!("placement put a {} buffer on the CPU", other.device()),
        }
    }
}

/// Where [`Storage::run`] runs a kernel.
enum Placement {
    Meta,
    Cpu,
    #[cfg(feature = "gpu")]
    Gpu(&'static gpu::context::Ctx),
}

/// `kernel` on host buffers (the CPU's own, or a GPU's host-path copies), with half types
/// widened to `f32` and the results rounded to `dtypes` when `widen` (the CPU kernels take
/// `f32`/`f64`), as they are otherwise.
fn on_host<const N: usize, const M: usize>(
    widen: bool,
    host: [&CpuStorage; N],
    dtypes: [DType; M],
    kernel: impl FnOnce([&CpuStorage; N]) -> [CpuStorage; M],
) -> [CpuStorage; M] {
    if widen {
        cpu::widen::through_f32(host, dtypes, kernel)
    } else {
        kernel(host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meta_operand_skips_the_kernel_and_gives_the_stated_output() {
        let cpu = Storage::full(Device::Cpu, DType::F32, 6, 1.0);
        let meta = Storage::full(Device::Meta, DType::F32, 6, 0.0);
        let out = Storage::run([&cpu, &meta], (DType::Bool, 4), |_| panic!("the kernel must not run"));
        assert_eq!(out, Storage::Meta { dtype: DType::Bool, len: 4 });
        let both = Storage::run([&cpu, &cpu], (DType::F32, 6), |[a, _]| a.clone());
        assert_eq!(both, cpu);
        let (x, y) = Storage::run2([&meta], [(DType::F64, 2), (DType::I64, 3)], |_| panic!("not run"));
        assert_eq!((x.len(), y.dtype()), (2, DType::I64));
    }

    #[test]
    fn host_vectors_round_trip_through_every_element_type() {
        let l = Layout::contiguous(&[3]);
        let s = Storage::from_vec(vec![1.5f64, -2.0, 3.25]);
        assert_eq!(s.dtype(), DType::F64);
        assert_eq!(s.to_vec_of::<f32>(&l), Some(vec![1.5f32, -2.0, 3.25]));
        assert_eq!(s.to_vec_of::<i64>(&l), Some(vec![1, -2, 3]));
        assert_eq!(s.to_vec_of::<bool>(&l), Some(vec![true, true, true]));
        let h = Storage::from_vec(vec![half::f16::from_f32(0.5); 3]);
        assert_eq!(h.dtype(), DType::F16);
        assert_eq!(h.to_vec_of::<f64>(&l), Some(vec![0.5; 3]));
        let b = Storage::from_vec(vec![half::bf16::from_f32(2.0), half::bf16::ZERO]);
        assert_eq!(b.to_vec_of::<i64>(&Layout::contiguous(&[2])), Some(vec![2, 0]));
        // i64 above 2^53 is copied, not rounded through f64.
        let big = Storage::from_vec(vec![(1i64 << 53) + 1]);
        assert_eq!(big.to_vec_of::<i64>(&Layout::contiguous(&[1])), Some(vec![(1i64 << 53) + 1]));
        assert_eq!(Storage::full(Device::Meta, DType::F32, 3, 0.0).to_vec_of::<f32>(&l), None);
    }

    #[test]
    fn an_integer_update_that_overflows_changes_nothing() {
        let l = Layout::contiguous(&[3]);
        let mut dst = Storage::from_vec(vec![1i64, i64::MAX, 3]);
        let rhs = Storage::from_vec(vec![1i64, 1, 1]);
        let bad = dst.checked_int_update(&l, (&rhs, &l), &|a, b| a.checked_add(b));
        assert_eq!(bad, Some((i64::MAX, 1)));
        assert_eq!(dst.to_vec_of::<i64>(&l), Some(vec![1, i64::MAX, 3]), "nothing written");
        let mut ok = Storage::from_vec(vec![1i64, 2, 3]);
        assert_eq!(ok.checked_int_update(&l, (&rhs, &l), &|a, b| a.checked_add(b)), None);
        assert_eq!(ok.to_vec_of::<i64>(&l), Some(vec![2, 3, 4]));
    }
}
