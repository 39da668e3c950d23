//! Cumulative sums and products along one dimension (`cumsum`, `cumprod`).

use super::{strided_to_vec, CpuElement, CpuStorage};
use crate::backend::Scan;
use crate::dtype::Element;
use crate::shape::Layout;

/// See [`crate::backend::Storage::scan`]: floats accumulate in `f64` and round once per
/// output (PyTorch's CPU kernel does the same), `i64` wraps on overflow as PyTorch's does.
pub(crate) fn scan(x: &CpuStorage, l: &Layout, dims: (usize, usize, usize), scan: Scan) -> CpuStorage {
    match x {
        CpuStorage::I64(v) => {
            let op = if scan.prod { i64::wrapping_mul } else { i64::wrapping_add };
            CpuStorage::I64(lines(&strided_to_vec(v, l), dims, scan, i64::from(scan.prod), |a| a, |a| a, op))
        }
        CpuStorage::Bool(_) => unreachable!("the op converts bool to i64 first"),
        other => super::with_cpu!(other, T, v => {
            let op = if scan.prod { |a: f64, b: f64| a * b } else { |a: f64, b: f64| a + b };
            let init = if scan.prod { 1.0 } else { 0.0 };
            T::into_storage(lines(&strided_to_vec(v, l), dims, scan, init, T::as_f64, T::from_f64, op))
        }),
    }
}

/// Scans every line of contiguous `x` viewed as `[outer, n, inner]` along `n` (from the
/// back when `scan.reverse`), accumulating in `A`.
fn lines<T: CpuElement, A: Copy>(
    x: &[T],
    (outer, n, inner): (usize, usize, usize),
    scan: Scan,
    init: A,
    to: impl Fn(T) -> A,
    from: impl Fn(A) -> T,
    op: impl Fn(A, A) -> A,
) -> Vec<T> {
    let mut out = x.to_vec();
    for o in 0..outer {
        for j in 0..inner {
            let mut acc = init;
            let base = o * n * inner + j;
            for step in 0..n {
                let i = if scan.reverse { n - 1 - step } else { step };
                let at = base + i * inner;
                acc = op(acc, to(x[at]));
                out[at] = from(acc);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_the_middle_dim_both_ways() {
        // [outer 1, n 3, inner 2]: lines (1, 3, 5) and (2, 4, 6).
        let x = CpuStorage::F64(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let l = Layout::contiguous(&[6]);
        let fwd = scan(&x, &l, (1, 3, 2), Scan { prod: false, reverse: false });
        assert_eq!(fwd, CpuStorage::F64(vec![1.0, 2.0, 4.0, 6.0, 9.0, 12.0]));
        let rev = scan(&x, &l, (1, 3, 2), Scan { prod: true, reverse: true });
        assert_eq!(rev, CpuStorage::F64(vec![15.0, 48.0, 15.0, 24.0, 5.0, 6.0]));
        let i = scan(&CpuStorage::I64(vec![i64::MAX, 1]), &Layout::contiguous(&[2]), (1, 2, 1), Scan::default());
        assert_eq!(i, CpuStorage::I64(vec![i64::MAX, i64::MIN]), "wraps like PyTorch");
    }
}
