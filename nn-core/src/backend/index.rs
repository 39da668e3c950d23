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
    pub(crate) fn first_outside(&self, l: &Layout, n: usize) -> Option<i64> {
        match self {
            Storage::Cpu(c) => cpu::index::first_outside(c, l, n),
            Storage::Meta { .. } => None,
            #[cfg(feature = "gpu")]
            Storage::Gpu(_) => super::gpu::interface::first_outside(self, l, n).expect("a GPU buffer"),
        }
    }

    /// `index_select`: the slices of `self` (viewed through `l`, rank >= 1) at the 1-D
    /// `index` along its dim, a contiguous buffer of `l`'s shape with that dim replaced by
    /// the index length. Negative indices count from the back.
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
