//! Indexing kernels: selection and gathering by an `i64` index buffer, and their adjoints.

use super::{cpu, Storage};
use crate::shape::Layout;

/// An `i64` index operand: its buffer and layout, and the op and dim it indexes (for the
/// message when a value is out of range, which only the backend can see).
#[derive(Clone, Copy)]
pub(crate) struct IndexArg<'a> {
    /// The op, for messages.
    pub op: &'static str,
    /// The indexed dim.
    pub dim: usize,
    /// The index values (`i64`).
    pub index: &'a Storage,
    /// Their layout.
    pub layout: &'a Layout,
}

impl Storage {
    /// The first `i64` value `l` selects that lies outside `0..n` (row-major order), or
    /// `None` when all lie inside (or on the meta device, which has no values).
    ///
    /// On a GPU the check runs on the device without waiting, and this returns `None`: a
    /// value outside is reported at the next host read, naming `op` (PyTorch CUDA's
    /// deferred device-side assert; see `backend::gpu::context`).
    pub(crate) fn first_outside(&self, l: &Layout, n: usize, op: &str) -> Option<i64> {
        match self {
            Storage::Cpu(c) => cpu::index::first_outside(c, l, n),
            Storage::Meta { .. } => {
                let _ = op;
                None
            }
            #[cfg(feature = "gpu")]
            Storage::Gpu(g) => {
                super::gpu::kernels::check_range(g, l, n, op);
                None
            }
        }
    }

    /// Class targets (`i64` through `l`) of the loss `op` over `c` classes: the targets
    /// with `ignore_index` replaced by 0 (`i64`, for a gather) and a 0/1 mask of the kept
    /// ones in `dtype`. A kept target outside `0..c` panics on the host ("`op`: target
    /// .. is out of bounds"); on a GPU it is checked on the device and reported at the
    /// next host read (no wait here).
    #[track_caller]
    pub(crate) fn class_targets(
        &self,
        l: &Layout,
        c: usize,
        ignore_index: i64,
        dtype: crate::DType,
        op: &str,
    ) -> (Storage, Storage) {
        #[cfg(feature = "gpu")]
        if let Storage::Gpu(g) = self {
            if let Some((safe, mask)) = super::gpu::kernels::class_targets(g, l, c, ignore_index, dtype, op) {
                return (Storage::Gpu(safe), Storage::Gpu(mask));
            }
        }
        let n = l.numel();
        if let Storage::Meta { .. } = self {
            return (Storage::Meta { dtype: crate::DType::I64, len: n }, Storage::Meta { dtype, len: n });
        }
        let Storage::Cpu(host) = self.to_device(l, crate::Device::Cpu) else { unreachable!("moved to the host") };
        let tv = host.to_vec_of::<i64>(&Layout::contiguous(&[n]));
        let keep: Vec<bool> = tv.iter().map(|&v| v != ignore_index).collect();
        if let Some(bad) = tv.iter().zip(&keep).find(|(&v, &k)| k && (v < 0 || v >= c as i64)) {
            panic!("{op}: target {} is out of bounds for {c} classes", bad.0);
        }
        let safe: Vec<i64> = tv.iter().zip(&keep).map(|(&v, &k)| if k { v } else { 0 }).collect();
        let whole = Layout::contiguous(&[n]);
        let mask = cpu::CpuStorage::Bool(keep).convert_layout(&whole, dtype);
        let device = self.device();
        (
            Storage::Cpu(cpu::CpuStorage::I64(safe)).to_device(&whole, device),
            Storage::Cpu(mask).to_device(&whole, device),
        )
    }

    /// `index_select`: the slices of `self` (viewed through `l`, rank >= 1) at the 1-D
    /// `index` along its dim, a contiguous buffer of `l`'s shape with that dim replaced by
    /// the index length. A negative index is out of range.
    ///
    /// # Panics
    /// When an index is out of range: "`op`: index `i` is out of bounds for dimension
    /// `dim` with size `size`".
    pub(crate) fn index_select(&self, l: &Layout, index: IndexArg<'_>) -> Storage {
        let others: usize = l.shape().iter().enumerate().filter(|&(k, _)| k != index.dim).map(|(_, &s)| s).product();
        let len = others * index.layout.numel();
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::index_select(self, l, &index) {
            return Storage::Gpu(out);
        }
        Storage::run([self, index.index], (self.dtype(), len), |[x, i]| {
            cpu::index::index_select(x, l, (i, index.layout), index.op, index.dim)
        })
    }

    /// `index_add`: a contiguous copy of `self` (through `l`) with the slices of `source`
    /// (through its layout) added at `index` along its dim.
    pub(crate) fn index_add(&self, l: &Layout, (source, ls): (&Storage, &Layout), index: IndexArg<'_>) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::index_add(self, l, (source, ls), &index) {
            return Storage::Gpu(out);
        }
        Storage::run([self, source, index.index], (self.dtype(), l.numel()), |[x, s, i]| {
            cpu::index::index_add(x, l, (s, ls), (i, index.layout), index.op, index.dim)
        })
    }

    /// `gather`: `out[p] = self[p with its dim replaced by index[p]]`, a contiguous buffer
    /// of the index's shape (same rank as `l`, no larger outside the dim).
    pub(crate) fn gather(&self, l: &Layout, index: IndexArg<'_>) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::gather(self, l, &index) {
            return Storage::Gpu(out);
        }
        Storage::run([self, index.index], (self.dtype(), index.layout.numel()), |[x, i]| {
            cpu::index::gather(x, l, (i, index.layout), index.op, index.dim)
        })
    }

    /// `scatter_add`: a contiguous copy of `self` (through `l`) with `src[p]` (of the
    /// index's shape) added at `p` with its dim replaced by `index[p]`.
    pub(crate) fn scatter_add(&self, l: &Layout, (src, ls): (&Storage, &Layout), index: IndexArg<'_>) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::scatter_add(self, l, (src, ls), &index) {
            return Storage::Gpu(out);
        }
        Storage::run([self, src, index.index], (self.dtype(), l.numel()), |[x, s, i]| {
            cpu::index::scatter_add(x, l, (s, ls), (i, index.layout), index.op, index.dim)
        })
    }
}
