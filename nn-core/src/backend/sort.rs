//! Sorting kernels: `sort`, `argsort` and `topk` along one dimension.

use super::{cpu, Storage};
use crate::dtype::DType;
use crate::shape::Layout;

/// What [`Storage::sort`] keeps of each sorted line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SortSpec {
    /// How many elements of each line to keep (`n` for a full sort, `k` for `topk`).
    pub k: usize,
    /// Largest first.
    pub descending: bool,
    /// Keep the `k` in sorted order; otherwise in their input order.
    pub sorted: bool,
}

impl Storage {
    /// Sorts every line of the elements `l` selects, viewed as `[outer, n, inner]`, along
    /// `n` (stably: equal elements keep their order; NaN above every number, as PyTorch)
    /// and keeps the first `spec.k`: `(values, i64 positions in the line)`, both contiguous
    /// `[outer, k, inner]`. The GPU sorts `f32` lines of up to 1024 elements on the device
    /// (a bitonic network per line; half types through an `f32` copy made there), other
    /// dtypes and longer lines on the host path.
    pub(crate) fn sort(&self, l: &Layout, dims: (usize, usize, usize), spec: SortSpec) -> (Storage, Storage) {
        let len = dims.0 * spec.k * dims.2;
        #[cfg(feature = "gpu")]
        if let Some((values, indices)) = super::gpu::interface::sort(self, l, dims, spec) {
            return (Storage::Gpu(values), Storage::Gpu(indices));
        }
        Storage::run2([self], [(self.dtype(), len), (DType::I64, len)], |[x]| cpu::sort::sort(x, l, dims, spec))
    }
}
