//! Sampling kernels: categorical draws from the global generator.

use super::{cpu, Storage};
use crate::dtype::DType;
use crate::shape::Layout;

impl Storage {
    /// `samples` category indices (`i64`) per row of `n` non-negative weights of `rows`
    /// (a layout whose last dim is the row), drawn in row order from the global generator
    /// ([`crate::manual_seed`]); with `replacement`, independently, else without repeats.
    /// The draws happen on the host on every device (one seed, one result everywhere), and
    /// not at all on the meta device.
    ///
    /// # Panics
    /// When a row holds a negative, infinite or NaN weight, or sums to zero (only the
    /// backend reads the values), with PyTorch's messages.
    pub(crate) fn multinomial(&self, rows: &Layout, n: usize, samples: usize, replacement: bool) -> Storage {
        let len = rows.numel().checked_div(n).unwrap_or(0) * samples;
        Storage::run([self], (DType::I64, len), |[x]| cpu::sample::multinomial(x, rows, n, samples, replacement))
    }
}
