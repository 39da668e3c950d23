//! Matrix products.

use super::{cpu, Storage};
use crate::shape::Layout;

impl Storage {
    /// `self @ b` for `self` viewed as `[..., m, k]` through `la` and `b` as `[..., k, n]`
    /// through `lb` (any strides), batch dims broadcast to `batch`: a contiguous
    /// `[batch..., m, n]` buffer.
    pub(crate) fn matmul(
        &self,
        la: &Layout,
        b: &Storage,
        lb: &Layout,
        batch: &[usize],
        (m, k, n): (usize, usize, usize),
    ) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::matmul((self, la), (b, lb), batch, (m, k, n)) {
            return Storage::Gpu(out);
        }
        if let (Storage::Cpu(a), Storage::Cpu(bc)) = (self, b) {
            if let Some(out) = cpu::linalg::matmul_bf16(a, la, bc, lb, batch, (m, k, n)) {
                return Storage::Cpu(out);
            }
        }
        let len = batch.iter().product::<usize>() * m * n;
        Storage::run([self, b], (self.dtype(), len), |[a, b]| cpu::linalg::matmul(a, la, b, lb, batch, (m, k, n)))
    }

    /// `beta * self + alpha * a @ b` for `a: [m, k]`, `b: [k, n]` (any strides) and `self`
    /// viewed through `li`, already broadcast to `[m, n]`: a contiguous `[m, n]` buffer.
    /// With `beta = 0`, `self` is not read (its NaN do not propagate: BLAS and PyTorch
    /// semantics).
    pub(crate) fn addmm(
        &self,
        li: &Layout,
        (a, la): (&Storage, &Layout),
        (b, lb): (&Storage, &Layout),
        (beta, alpha): (f64, f64),
    ) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::addmm((self, li), (a, la), (b, lb), (beta, alpha)) {
            return Storage::Gpu(out);
        }
        if let (Storage::Cpu(i), Storage::Cpu(ac), Storage::Cpu(bc)) = (self, a, b) {
            if let Some(out) = cpu::linalg::addmm_bf16(i, li, (ac, la), (bc, lb), (beta, alpha)) {
                return Storage::Cpu(out);
            }
        }
        Storage::run([self, a, b], (self.dtype(), li.numel()), |[input, a, b]| {
            cpu::linalg::addmm(input, li, (a, la), (b, lb), (beta, alpha))
        })
    }
}
