//! Row kernels: softmax, quantiles, elementwise predicates and boolean reductions.

use super::{cpu, Storage};
use crate::dtype::DType;
use crate::shape::Layout;

impl Storage {
    /// A dropout mask on this buffer's device: `len` values of `dtype`, drawn in order from
    /// the global generator (no draw on the meta device), each kept with probability
    /// `keep`. A kept value is `1 / keep` in `f32`/`f64`, and 1 in a half type (the caller
    /// then scales in `f32`, so the result rounds once, as PyTorch's `input * mask * scale`;
    /// `1 / keep` rounded to `bf16` would bias every kept value by up to 0.4%).
    pub(crate) fn dropout_mask(&self, len: usize, keep: f64, dtype: DType) -> Storage {
        // Drawn on the host from the global generator on every device (one seed, one mask
        // everywhere), then uploaded: the operand's values are not read.
        #[cfg(feature = "gpu")]
        if let Storage::Gpu(g) = self {
            return Storage::Gpu(super::gpu::kernels::upload(g.ctx(), &cpu::rows::dropout_mask(len, keep, dtype)));
        }
        Storage::run_exact([self], (dtype, len), |_| cpu::rows::dropout_mask(len, keep, dtype))
    }

    /// Softmax (or log-softmax, `log`) of the elements `l` selects, viewed as
    /// `[outer, n, inner]`, along `n`: a contiguous buffer. Each line subtracts its maximum
    /// first (no `exp` overflows); a line of `-inf` gives NaN, as PyTorch.
    pub(crate) fn softmax(&self, l: &Layout, dims: (usize, usize, usize), log: bool) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::softmax(self, l, dims, log) {
            return Storage::Gpu(out);
        }
        Storage::run([self], (self.dtype(), l.numel()), |[x]| cpu::rows::softmax(x, l, dims, log))
    }

    /// The `q`-quantile (linear interpolation) of each row of `n` elements of `rows`:
    /// `[values, below, above, weights]`, where `values = (1 - w) x[below] + w x[above]`
    /// (`below`/`above` are `i64` positions in the row; `weights` has the input's dtype).
    /// A row holding NaN gives NaN.
    pub(crate) fn quantile(&self, rows: &Layout, n: usize, q: f64) -> [Storage; 4] {
        let len = rows.numel() / n.max(1);
        match self {
            Storage::Cpu(x) => {
                let [y, below, above, w] =
                    cpu::widen::through_f32([x], [x.dtype(), DType::I64, DType::I64, x.dtype()], |[x]| {
                        cpu::rows::quantile(x, rows, n, q)
                    });
                [y, below, above, w].map(Storage::Cpu)
            }
            #[cfg(feature = "gpu")]
            Storage::Gpu(g) => {
                let x = g.host("quantile");
                cpu::widen::through_f32([&x], [x.dtype(), DType::I64, DType::I64, x.dtype()], |[x]| {
                    cpu::rows::quantile(x, rows, n, q)
                })
                .map(|c| super::gpu::upload_result(g.ctx(), c))
            }
            Storage::Meta { dtype, .. } => {
                [*dtype, DType::I64, DType::I64, *dtype].map(|dtype| Storage::Meta { dtype, len })
            }
        }
    }

    /// `f(x as f64)` for every element `l` selects, as a `Bool` buffer.
    pub(crate) fn predicate(&self, l: &Layout, f: fn(f64) -> bool) -> Storage {
        Storage::run([self], (DType::Bool, l.numel()), |[x]| cpu::rows::predicate(x, l, f))
    }

    /// `all` (or any) of each row of `n` elements of the `Bool` buffer through `rows`;
    /// `out_len` results (an empty row gives `all`).
    pub(crate) fn bool_reduce(&self, rows: &Layout, n: usize, out_len: usize, all: bool) -> Storage {
        Storage::run([self], (DType::Bool, out_len), |[x]| cpu::rows::bool_reduce(x, rows, n, out_len, all))
    }
}
