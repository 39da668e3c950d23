//! Reductions.

use super::{cpu, Storage};
use crate::dtype::DType;
use crate::shape::{kept_shape, Layout};

impl Storage {
    /// The sum of the elements `l` selects over the dims where `mask` is true (accumulated
    /// in `f64`): a contiguous buffer of the shape with those dims kept as 1.
    pub(crate) fn sum(&self, l: &Layout, mask: &[bool]) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::sum(self, l, mask) {
            return Storage::Gpu(out);
        }
        let len = kept_shape(l.shape(), mask).iter().product();
        Storage::run_exact([self], (self.dtype(), len), |[x]| cpu::reduce::sum(x, l, mask))
    }

    /// For each row of `n` elements of `rows` (a layout whose last dim is the scanned
    /// one), the `I64` index of its largest element (`largest`) or smallest; NaN wins
    /// over every number and the first of equal candidates is kept (PyTorch).
    pub(crate) fn arg_extreme(&self, rows: &Layout, n: usize, largest: bool) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::arg_extreme(self, rows, n, largest) {
            return Storage::Gpu(out);
        }
        Storage::run([self], (DType::I64, rows.numel() / n), |[x]| cpu::reduce::arg_extreme(x, rows, n, largest))
    }
}
