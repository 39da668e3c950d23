//! Sorting along one dimension: `sort`, `argsort` and `topk`.

use std::cmp::Ordering;

use super::{strided_to_vec, CpuElement, CpuStorage};
use crate::backend::SortSpec;
use crate::shape::Layout;

/// Ascending order with NaN above every number (PyTorch's sort order); NaNs tie.
#[inline]
fn nan_last<T: PartialOrd>(a: &T, b: &T) -> Ordering {
    // `v != v` is the NaN test every element type supports.
    #[allow(clippy::eq_op)]
    let (a_nan, b_nan) = (a != a, b != b);
    match (a_nan, b_nan) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(b).unwrap_or(Ordering::Equal),
    }
}

/// See [`crate::backend::Storage::sort`]: `(values, i64 indices)`, each of shape
/// `[outer, spec.k, inner]`.
pub(crate) fn sort(
    x: &CpuStorage,
    l: &Layout,
    dims: (usize, usize, usize),
    spec: SortSpec,
) -> (CpuStorage, CpuStorage) {
    super::with_cpu!(x, T, v => {
        let (vals, idx) = lines(&strided_to_vec(v, l), dims, spec);
        (T::into_storage(vals), CpuStorage::I64(idx))
    })
}

fn lines<T: CpuElement>(x: &[T], (outer, n, inner): (usize, usize, usize), spec: SortSpec) -> (Vec<T>, Vec<i64>) {
    let k = spec.k;
    let mut vals = Vec::with_capacity(outer * k * inner);
    let mut idx = vec![0i64; outer * k * inner];
    vals.resize(outer * k * inner, x.first().copied().unwrap_or_else(|| T::from_f64(0.0)));
    let mut line: Vec<T> = Vec::with_capacity(n);
    let mut order: Vec<usize> = Vec::with_capacity(n);
    for o in 0..outer {
        for j in 0..inner {
            line.clear();
            line.extend((0..n).map(|i| x[(o * n + i) * inner + j]));
            order.clear();
            order.extend(0..n);
            // A total order: by value (descending or not), then by position, so that the
            // result is the stable sort's whatever the algorithm.
            let by = |&a: &usize, &b: &usize| {
                let c = nan_last(&line[a], &line[b]);
                (if spec.descending { c.reverse() } else { c }).then(a.cmp(&b))
            };
            if k < n && k > 0 {
                order.select_nth_unstable_by(k - 1, by);
                order.truncate(k);
            }
            if spec.sorted {
                order.sort_unstable_by(by);
            } else {
                order.sort_unstable();
            }
            for (r, &i) in order.iter().take(k).enumerate() {
                let at = (o * k + r) * inner + j;
                vals[at] = line[i];
                idx[at] = i as i64;
            }
        }
    }
    (vals, idx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_stably_with_nan_largest() {
        let x = CpuStorage::F64(vec![2.0, f64::NAN, 1.0, 2.0, -1.0]);
        let l = Layout::contiguous(&[5]);
        let spec = SortSpec { k: 5, descending: false, sorted: true };
        let (v, i) = sort(&x, &l, (1, 5, 1), spec);
        assert_eq!(i, CpuStorage::I64(vec![4, 2, 0, 3, 1]));
        assert_eq!(format!("{v:?}"), "F64([-1.0, 1.0, 2.0, 2.0, NaN])");
        let (_, i) = sort(&x, &l, (1, 5, 1), SortSpec { descending: true, ..spec });
        assert_eq!(i, CpuStorage::I64(vec![1, 0, 3, 2, 4]), "equal values keep their order");
        let (v, i) = sort(&x, &l, (1, 5, 1), SortSpec { k: 2, descending: false, sorted: false });
        assert_eq!((v, i), (CpuStorage::F64(vec![1.0, -1.0]), CpuStorage::I64(vec![2, 4])), "input order");
    }
}
