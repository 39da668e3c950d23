//! Indexing kernels on the CPU.

use super::{strided_to_vec, with_cpu, with_float, CpuElement, CpuStorage};
use crate::shape::{contiguous_strides, for_each_offset, Dims, Layout};

/// The index values, within `0..size`, or a panic naming the op, the value and the dim.
/// A negative index is out of bounds, as in PyTorch's `gather`, `scatter_add`,
/// `index_select` and `index_add` (counting it from the back would read a padding
/// position for a `lengths - 1` of an empty sequence, or a class for an ignored -100).
#[track_caller]
fn checked(op: &str, (index, li): (&CpuStorage, &Layout), size: usize, dim: usize) -> Vec<usize> {
    let values = i64::slice(index).expect("an i64 index (checked by the op)");
    strided_to_vec(values, li)
        .into_iter()
        .map(|i| {
            if i < 0 || i >= size as i64 {
                panic!("{op}: index {i} is out of bounds for dimension {dim} with size {size}");
            }
            i as usize
        })
        .collect()
}

/// See [`crate::backend::Storage::first_outside`].
pub(crate) fn first_outside(index: &CpuStorage, l: &Layout, n: usize) -> Option<i64> {
    let values = i64::slice(index).expect("an i64 index (checked by the op)");
    strided_to_vec(values, l).into_iter().find(|&i| i < 0 || i >= n as i64)
}

/// `(outer, size, inner)` for `shape` split around `dim`.
fn split_at(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    (shape[..dim].iter().product(), shape[dim], shape[dim + 1..].iter().product())
}

/// See [`crate::backend::Storage::index_select`].
#[track_caller]
pub(crate) fn index_select(
    x: &CpuStorage,
    l: &Layout,
    index: (&CpuStorage, &Layout),
    op: &str,
    d: usize,
) -> CpuStorage {
    let idx = checked(op, index, l.shape()[d], d);
    let (outer, n, inner) = split_at(l.shape(), d);
    with_cpu!(x, T, v => {
        // Read a contiguous source in place: copying it first would cost the whole
        // tensor per call (a data loader selecting 64 rows of 60,000).
        let src = super::values_of(v, l);
        let mut out = Vec::with_capacity(outer * idx.len() * inner);
        for o in 0..outer {
            for &i in &idx {
                let base = (o * n + i) * inner;
                out.extend_from_slice(&src[base..base + inner]);
            }
        }
        T::into_storage(out)
    })
}

/// See [`crate::backend::Storage::index_add`].
#[track_caller]
pub(crate) fn index_add(
    x: &CpuStorage,
    l: &Layout,
    (source, ls): (&CpuStorage, &Layout),
    index: (&CpuStorage, &Layout),
    op: &str,
    d: usize,
) -> CpuStorage {
    let idx = checked(op, index, l.shape()[d], d);
    let (outer, n, inner) = split_at(l.shape(), d);
    with_float!(x, op, T, v => {
        let mut out = strided_to_vec(v, l);
        let src = strided_to_vec(T::slice(source).expect("same dtype"), ls);
        let k = idx.len();
        for o in 0..outer {
            for (j, &i) in idx.iter().enumerate() {
                let dst = (o * n + i) * inner;
                let from = (o * k + j) * inner;
                for t in 0..inner {
                    out[dst + t] += src[from + t];
                }
            }
        }
        T::into_storage(out)
    })
}

/// See [`crate::backend::Storage::gather`].
#[track_caller]
pub(crate) fn gather(
    x: &CpuStorage,
    l: &Layout,
    (index, li): (&CpuStorage, &Layout),
    op: &str,
    d: usize,
) -> CpuStorage {
    let idx = checked(op, (index, li), l.shape().get(d).copied().unwrap_or(1), d);
    let mut strides: Dims = l.strides().into();
    let step = strides.get(d).copied().unwrap_or(0);
    if !strides.is_empty() {
        strides[d] = 0;
    }
    with_cpu!(x, T, v => {
        let mut out = Vec::with_capacity(li.numel());
        let mut j = 0;
        let il = Layout::contiguous(li.shape());
        for_each_offset(li.shape(), [il.strides(), &strides], [0, l.offset()], |[_, o]| {
            out.push(v[o + idx[j] * step]);
            j += 1;
        });
        T::into_storage(out)
    })
}

/// See [`crate::backend::Storage::scatter_add`].
#[track_caller]
pub(crate) fn scatter_add(
    x: &CpuStorage,
    l: &Layout,
    (src, ls): (&CpuStorage, &Layout),
    (index, li): (&CpuStorage, &Layout),
    op: &str,
    d: usize,
) -> CpuStorage {
    let idx = checked(op, (index, li), l.shape().get(d).copied().unwrap_or(1), d);
    let mut ostrides = contiguous_strides(l.shape());
    let step = ostrides.get(d).copied().unwrap_or(0);
    if !ostrides.is_empty() {
        ostrides[d] = 0;
    }
    with_float!(x, op, T, v => {
        let mut out = strided_to_vec(v, l);
        let sv = T::slice(src).expect("same dtype");
        let mut j = 0;
        for_each_offset(li.shape(), [ls.strides(), &ostrides], [ls.offset(), 0], |[si, o]| {
            let t = o + idx[j] * step;
            out[t] += sv[si];
            j += 1;
        });
        T::into_storage(out)
    })
}
