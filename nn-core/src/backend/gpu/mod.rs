//! The GPU backend: device buffers ([`GpuStorage`]) on a wgpu adapter, and WGSL compute
//! kernels behind the backend interface (see [`crate::backend`]).
//!
//! # Buffers
//! A buffer holds the elements row-major in the safetensors encoding (little-endian `f32`,
//! `f64`, `i64` as two words, `f16`/`bf16` packed two to a word), except `bool`, which
//! takes a 32-bit word per element (WGSL has no byte type). Buffers come from a caching
//! allocator per adapter ([`context`]): a dropped tensor's buffer is reused by the next
//! request of its size class, so a training step after warm-up allocates nothing.
//!
//! # Kernels and the host path
//! Interface methods with a native kernel for their operands' dtypes run it here; the
//! others run the CPU kernel on host copies of the operands and upload the result (the
//! "host path", counted per method by [`crate::gpu::stats`] so that a test can demand zero
//! of them on a training step). Values are the same either way; only the time differs.
//! `f64` kernels use only operations Vulkan offers in double precision (arithmetic,
//! `sqrt`, comparisons); `exp`, `log`, trigonometry and `pow` in `f64` take the host path.
//! Of the CPU backend, this module and its children use only what [`super::host`] offers.
//!
//! The kernels' WGSL is in `gpu/wgsl/`, a file per kernel family, rendered into sources by
//! [`template`] and dispatched by the family's module in [`kernels`].
//!
//! # Layers
//! Each file imports only files below it (CI checks the file graph, `.ci/import_cycles.py`):
//! - data, importing no context: [`batch`] (the recorded work), [`health`] (what wgpu's
//!   callbacks report), [`gemm_variants`] (the GEMM's kernel designs), [`gemm_caps`] (what an
//!   adapter offers the GEMM);
//! - [`context`]: the opened adapter, its buffers, compiled kernels and whether it can be
//!   used;
//! - [`record`] (launches and copies into the batch), then [`readback`] (host reads, index
//!   checks), then the GEMM ([`gemm_kernel`], [`gemm_tune`] with the GEMM's own state per
//!   adapter, [`gemm`]) and the kernel families in [`kernels`], then [`interface`].

pub(crate) mod batch;
pub(crate) mod context;
pub(crate) mod gemm;
pub(crate) mod gemm_caps;
mod gemm_kernel;
pub(crate) mod gemm_tune;
mod gemm_variants;
mod health;
pub(crate) mod interface;
pub(crate) mod kernels;
mod readback;
mod record;
mod template;

use std::sync::Arc;

use half::{bf16, f16};

use self::context::{Buffer, Ctx};
use super::host::{self, CpuStorage};
use crate::dtype::DType;
use crate::shape::Layout;

/// A tensor's buffer on a GPU adapter. Cloning copies the values into a new device buffer
/// (as cloning a [`CpuStorage`] copies them): in-place writes to one never show in the other.
pub struct GpuStorage {
    buf: Arc<Buffer>,
    dtype: DType,
    len: usize,
}

impl Clone for GpuStorage {
    fn clone(&self) -> Self {
        let ctx = self.ctx();
        let out = GpuStorage::uninit(ctx, self.dtype, self.len);
        let bytes = byte_len(self.dtype, self.len).div_ceil(4) * 4;
        ctx.copy(&self.buf, &out.buf, bytes);
        out
    }
}

impl std::fmt::Debug for GpuStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuStorage(gpu:{}, {}, {} elements)", self.buf.ctx.ordinal, self.dtype, self.len)
    }
}

/// Equal when they hold the same dtype, length and values (read back to the host).
impl PartialEq for GpuStorage {
    fn eq(&self, other: &Self) -> bool {
        self.dtype == other.dtype && self.len == other.len && self.to_cpu() == other.to_cpu()
    }
}

/// Bytes a buffer of `len` elements of `dtype` needs on the device.
pub(crate) fn byte_len(dtype: DType, len: usize) -> u64 {
    let len = len as u64;
    match dtype {
        DType::F32 | DType::Bool => 4 * len,
        DType::F64 | DType::I64 => 8 * len,
        DType::F16 | DType::BF16 => 2 * len,
    }
}

impl GpuStorage {
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `n` in `gpu:n`.
    pub fn ordinal(&self) -> usize {
        self.buf.ctx.ordinal
    }

    pub(crate) fn ctx(&self) -> &'static Ctx {
        self.buf.ctx
    }

    pub(crate) fn buffer(&self) -> &Buffer {
        &self.buf
    }

    /// A buffer of `len` elements of `dtype` with unspecified contents, for a kernel to
    /// fill.
    ///
    /// # Panics
    /// On an adapter without `f64` shaders, for `F64`: the message says so.
    pub(crate) fn uninit(ctx: &'static Ctx, dtype: DType, len: usize) -> GpuStorage {
        assert!(
            dtype != DType::F64 || ctx.f64,
            "gpu:{}: adapter `{}` offers no f64 in shaders (wgpu feature SHADER_F64); keep f64 tensors on the CPU",
            ctx.ordinal,
            ctx.info.name
        );
        GpuStorage { buf: Arc::new(ctx.alloc(byte_len(dtype, len))), dtype, len }
    }

    /// The elements `l` selects from a host buffer, uploaded.
    pub(crate) fn from_cpu(ctx: &'static Ctx, c: &CpuStorage, l: &Layout) -> GpuStorage {
        let out = GpuStorage::uninit(ctx, c.dtype(), l.numel());
        ctx.write(&out.buf, &device_bytes(c, l));
        out
    }

    /// Another handle on the same device buffer (no copy): for a deferred index check,
    /// which reads the indices only if it fails.
    pub(crate) fn share(&self) -> GpuStorage {
        GpuStorage { buf: self.buf.clone(), dtype: self.dtype, len: self.len }
    }

    /// Replaces the values with those of a host buffer of the same dtype and length.
    pub(crate) fn overwrite(&mut self, c: &CpuStorage) {
        debug_assert_eq!((c.dtype(), c.len()), (self.dtype, self.len));
        self.ctx().write(&self.buf, &device_bytes(c, &Layout::contiguous(&[c.len()])));
    }

    /// The whole buffer, copied to the host (waits for the kernels that write it).
    pub(crate) fn to_cpu(&self) -> CpuStorage {
        let bytes = self.buf.ctx.download(&self.buf, byte_len(self.dtype, self.len) as usize);
        self.values_of(&bytes)
    }

    /// [`to_cpu`](GpuStorage::to_cpu) through [`Ctx::download_raw`] (reporting a failed
    /// index check).
    pub(crate) fn to_cpu_raw(&self) -> CpuStorage {
        let bytes = self.buf.ctx.download_raw(&self.buf, byte_len(self.dtype, self.len) as usize);
        self.values_of(&bytes)
    }

    /// This storage's values from their bytes.
    fn values_of(&self, bytes: &[u8]) -> CpuStorage {
        fn words<const N: usize, T>(b: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
            b.chunks_exact(N).map(|c| f(c.try_into().expect("chunks of N"))).collect()
        }
        match self.dtype {
            DType::F32 => CpuStorage::F32(words(bytes, f32::from_le_bytes)),
            DType::F64 => CpuStorage::F64(words(bytes, f64::from_le_bytes)),
            DType::I64 => CpuStorage::I64(words(bytes, i64::from_le_bytes)),
            DType::F16 => CpuStorage::F16(words(bytes, |b| f16::from_bits(u16::from_le_bytes(b)))),
            DType::BF16 => CpuStorage::BF16(words(bytes, |b| bf16::from_bits(u16::from_le_bytes(b)))),
            DType::Bool => CpuStorage::Bool(words(bytes, |b| u32::from_le_bytes(b) != 0)),
        }
    }

    /// A buffer of `len` elements of `dtype`, all `value` (converted as the CPU converts).
    pub(crate) fn full(ctx: &'static Ctx, dtype: DType, len: usize, value: f64) -> GpuStorage {
        let out = GpuStorage::uninit(ctx, dtype, len);
        // The value's encoding, from the CPU's own conversion of it.
        let one = CpuStorage::full(dtype, 2, value);
        let mut bytes = device_bytes(&one, &Layout::contiguous(&[2]));
        bytes.truncate(8); // two 16-bit values, or one 32/64-bit value (or two 32-bit ones)
        let words: Vec<u32> = {
            bytes.resize(bytes.len().div_ceil(4) * 4, 0);
            bytes
        }
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
        let (w0, w1) = (words[0], *words.get(1).unwrap_or(&words[0]));
        let n_words = byte_len(dtype, len).div_ceil(4);
        kernels::fill(ctx, &out.buf, n_words, [w0, w1]);
        out
    }
}

/// The elements `l` selects from a host buffer, encoded as a device buffer holds them: the
/// safetensors bytes, except `bool`, which takes a 32-bit word per element.
fn device_bytes(c: &CpuStorage, l: &Layout) -> Vec<u8> {
    match c {
        CpuStorage::Bool(v) => host::strided_to_vec(v, l).iter().flat_map(|&b| u32::from(b).to_le_bytes()).collect(),
        other => host::le_bytes(other, l),
    }
}

impl GpuStorage {
    /// The whole buffer on the host, for the host path of the method `name` (counted).
    pub(crate) fn host(&self, name: &str) -> CpuStorage {
        self.ctx().note_fallback(name);
        self.to_cpu()
    }
}

/// Host copies of GPU operands for a kernel without a native GPU version for them, whose
/// results have the dtypes `outputs`. `F` names it in the statistics, except that every
/// call with an `i64` operand or result counts as `i64`: WGSL has no 64-bit integers, so
/// integer arithmetic and conversions to and from `i64` always take the host path, and one
/// listed entry covers them (a float call of the same method still counts by name).
pub(crate) fn host_path<F, const N: usize>(
    ctx: &'static Ctx,
    operands: [&super::Storage; N],
    outputs: &[DType],
) -> [CpuStorage; N] {
    let int = outputs.contains(&DType::I64) || operands.iter().any(|s| s.dtype() == DType::I64);
    ctx.note_fallback(&if int { "i64".to_string() } else { kernel_name::<F>() });
    operands.map(|s| match s {
        super::Storage::Gpu(g) => g.to_cpu(),
        other => unreachable!("placement found a {} operand among GPU ones", other.device()),
    })
}

/// A host result of the host path, uploaded.
pub(crate) fn upload_result(ctx: &'static Ctx, c: CpuStorage) -> super::Storage {
    let l = Layout::contiguous(&[c.len()]);
    super::Storage::Gpu(GpuStorage::from_cpu(ctx, &c, &l))
}

/// `unary<nn_core::ops::unary::Exp>` from the type name of a closure inside
/// `Storage::unary`.
fn kernel_name<F>() -> String {
    let full = std::any::type_name::<F>();
    let tail = full.rsplit_once("Storage>::").map_or(full, |(_, t)| t);
    tail.trim_end_matches("::{{closure}}").replace("nn_core::ops::", "")
}

/// Whether two positions of `layout` may be one element: false only when, with the dims of
/// more than one element sorted by stride, each stride is past every offset the smaller
/// ones reach (the layouts of tensors and of their non-overlapping views).
fn may_overlap(layout: &Layout) -> bool {
    let mut dims: Vec<(usize, usize)> =
        layout.shape().iter().zip(layout.strides()).filter(|(&n, _)| n > 1).map(|(&n, &s)| (s, n)).collect();
    dims.sort_unstable();
    let mut reach = 0; // the largest offset the dims so far reach from the first
    for (stride, n) in dims {
        if stride <= reach {
            return true;
        }
        reach += stride * (n - 1);
    }
    false
}

/// Writes the elements `src_layout` selects from `src`, converted to `dst`'s dtype, into
/// the positions `layout` selects in `dst`.
pub(crate) fn write_from(dst: &mut GpuStorage, layout: &Layout, src: &GpuStorage, src_layout: &Layout) {
    let vals = kernels::convert(src, src_layout, dst.dtype());
    // A destination written through a layout that may reach a position twice (a zero
    // stride, an overlapping `unfold`) goes through the host, where the last write wins as
    // on the CPU: on the device the threads writing one element race (and a 64-bit
    // element's two words may come from different sources; half types' per-half atomics
    // would OR two values together).
    match vals {
        Some(vals) if !may_overlap(layout) => kernels::scatter(dst, layout, &vals),
        _ => {
            let mut on_host = dst.host("write_from");
            let vals = src.to_cpu().convert_layout(src_layout, dst.dtype());
            host::scatter_into(&mut on_host, layout, &vals);
            dst.overwrite(&on_host);
        }
    }
}

/// A mutex's guard, whether or not another thread panicked holding it (the data behind
/// every lock of the GPU backend stays consistent between statements).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::may_overlap;
    use crate::shape::Layout;

    #[test]
    fn overlap_is_found_in_zero_and_short_strides_only() {
        let l = |shape: &[usize], strides: &[usize]| Layout::new(shape.into(), strides.into(), 0);
        assert!(!may_overlap(&l(&[2, 3], &[3, 1])));
        assert!(!may_overlap(&l(&[3, 2], &[1, 3]))); // transposed
        assert!(!may_overlap(&l(&[1, 4], &[0, 1]))); // a size-1 dim's stride is never used
        assert!(!may_overlap(&l(&[2, 2], &[4, 1]))); // a strided slice
        assert!(may_overlap(&l(&[2, 4], &[1, 0]))); // expanded
        assert!(may_overlap(&l(&[4, 3], &[1, 1]))); // overlapping windows
        assert!(may_overlap(&l(&[2, 3], &[2, 1]))); // rows 2 apart, 3 long
    }
}
