//! Cumulative kernels: running sums and products along one dimension.

use super::{cpu, Storage};
use crate::shape::Layout;

/// Which running reduction [`Storage::scan`] computes, and in which direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Scan {
    /// Products (`cumprod`) instead of sums (`cumsum`).
    pub prod: bool,
    /// From the last element of each line to the first (the adjoint of a forward sum).
    pub reverse: bool,
}

impl Storage {
    /// The running sum (or product) of the elements `l` selects, viewed as
    /// `[outer, n, inner]`, along `n`: a contiguous buffer of `l`'s shape and dtype. Floats
    /// accumulate in `f64`; `i64` wraps on overflow (PyTorch). `bool` is not accepted (the
    /// op converts it to `i64`). The GPU runs `f32`/`f64` on the device where the adapter
    /// has `f64` shaders (the accumulator), and the rest on the host path.
    pub(crate) fn scan(&self, l: &Layout, dims: (usize, usize, usize), scan: Scan) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::scan(self, l, dims, scan) {
            return Storage::Gpu(out);
        }
        Storage::run([self], (self.dtype(), l.numel()), |[x]| cpu::scan::scan(x, l, dims, scan))
    }
}
