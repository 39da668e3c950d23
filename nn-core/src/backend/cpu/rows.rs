//! Row kernels on the CPU: softmax, quantiles, elementwise predicates and boolean
//! reductions.

use super::elementwise::map1;
use super::parts::PAR_THRESHOLD;
use super::{isa_loops, strided_to_vec, team, with_cpu, with_float, CpuElement, CpuFloat, CpuStorage};
use crate::dtype::Element;
use crate::shape::Layout;

/// See [`crate::backend::Storage::dropout_mask`].
pub(crate) fn dropout_mask(len: usize, keep: f64, dtype: crate::dtype::DType) -> CpuStorage {
    use crate::dtype::DType;
    let scale = 1.0 / keep;
    match dtype {
        DType::F32 => CpuStorage::F32(dropout_draws(len, keep, |kept| if kept { scale as f32 } else { 0.0 })),
        DType::BF16 => {
            CpuStorage::BF16(dropout_draws(len, keep, |kept| if kept { half::bf16::ONE } else { half::bf16::ZERO }))
        }
        DType::F16 => {
            CpuStorage::F16(dropout_draws(len, keep, |kept| if kept { half::f16::ONE } else { half::f16::ZERO }))
        }
        _ => CpuStorage::F64(dropout_draws(len, keep, |kept| if kept { scale } else { 0.0 })),
    }
}

/// `len` dropout draws from the global generator, in order, each kept with probability
/// `keep`, as `f(kept)`: the one definition of a draw, so that for one seed the fused
/// attention drops the weights the composed one does.
pub(crate) fn dropout_draws<U>(len: usize, keep: f64, f: impl Fn(bool) -> U) -> Vec<U> {
    crate::random::with_rng(|r| (0..len).map(|_| f(rand::Rng::random::<f64>(r) < keep)).collect())
}

/// See [`crate::backend::Storage::softmax`].
pub(crate) fn softmax(x: &CpuStorage, l: &Layout, (outer, n, inner): (usize, usize, usize), log: bool) -> CpuStorage {
    if let (CpuStorage::F32(v), 1) = (x, inner) {
        if n > 0 {
            return CpuStorage::F32(softmax_f32_rows(v, l, n, log));
        }
    }
    with_float!(x, if log { "log_softmax" } else { "softmax" }, T, v => {
        let contiguous = strided_to_vec(v, l);
        T::into_storage(softmax_kernel(&contiguous, outer, n, inner, log))
    })
}

/// Softmax of `f32` rows of `n` elements along the last dim, with the vectorized kernel
/// (rows read in place when the layout is contiguous), split by rows over threads.
fn softmax_f32_rows(v: &[f32], l: &Layout, n: usize, log: bool) -> Vec<f32> {
    let x = &*super::values_of(v, l);
    let mut out = f32::alloc_buffer(x.len());
    let slots = &mut out.spare_capacity_mut()[..x.len()];
    let block = super::norm::rows_per_task(x.len() / n, n) * n;
    team::for_chunks(slots, block, |q, b| isa_loops::softmax_rows(&x[q * block..][..b.len()], b, n, log));
    // SAFETY: the blocks are whole rows covering `x`, and `softmax_rows` writes every
    // output of its rows (a panicking block re-raises before this).
    unsafe { out.set_len(x.len()) };
    out
}

/// See [`crate::backend::Storage::quantile`].
pub(crate) fn quantile(x: &CpuStorage, rows: &Layout, n: usize, q: f64) -> [CpuStorage; 4] {
    with_float!(x, "quantile", T, v => {
        let p = quantile_rows(&strided_to_vec(v, rows), n, q);
        [T::into_storage(p.values), CpuStorage::I64(p.below), CpuStorage::I64(p.above), T::into_storage(p.weights)]
    })
}

/// See [`crate::backend::Storage::predicate`].
pub(crate) fn predicate(x: &CpuStorage, l: &Layout, f: fn(f64) -> bool) -> CpuStorage {
    CpuStorage::Bool(with_cpu!(x, T, v => map1(v, l, |a: T| f(a.as_f64()))))
}

/// See [`crate::backend::Storage::bool_reduce`].
pub(crate) fn bool_reduce(x: &CpuStorage, rows: &Layout, n: usize, out_len: usize, all: bool) -> CpuStorage {
    let vals = strided_to_vec(bool::slice(x).expect("a bool buffer"), rows);
    CpuStorage::Bool(if n == 0 {
        vec![all; out_len]
    } else if all {
        vals.chunks(n).map(|row| row.iter().all(|&v| v)).collect()
    } else {
        vals.chunks(n).map(|row| row.iter().any(|&v| v)).collect()
    })
}

/// Softmax (or log-softmax) of contiguous `x` viewed as `[outer, n, inner]` along `n`.
/// Each line subtracts its maximum first, so no `exp` overflows.
fn softmax_kernel<T: CpuFloat>(x: &[T], outer: usize, n: usize, inner: usize, log: bool) -> Vec<T> {
    let mut out = T::alloc_buffer(x.len());
    out.resize(x.len(), T::zero());
    if x.is_empty() {
        return out;
    }
    let block = n * inner;
    let run = |(xs, ys): (&[T], &mut [T])| {
        for j in 0..inner {
            let mut m = T::neg_infinity();
            for i in 0..n {
                let v = xs[i * inner + j];
                if v > m || v.is_nan() {
                    m = v;
                }
            }
            if m == T::neg_infinity() {
                m = T::zero(); // all -inf: exp gives 0/0 = NaN below, as PyTorch
            }
            let mut s = T::zero();
            for i in 0..n {
                let e = (xs[i * inner + j] - m).exp();
                ys[i * inner + j] = e;
                s = s + e;
            }
            if log {
                let ls = s.ln();
                for i in 0..n {
                    ys[i * inner + j] = xs[i * inner + j] - m - ls;
                }
            } else {
                let r = s.recip();
                for i in 0..n {
                    ys[i * inner + j] = ys[i * inner + j] * r;
                }
            }
        }
    };
    if super::parts::split(x.len(), PAR_THRESHOLD) && outer > 1 {
        team::for_chunks(&mut out, block, |q, ys| run((&x[q * block..][..ys.len()], ys)));
    } else {
        x.chunks(block).zip(out.chunks_mut(block)).for_each(run);
    }
    out
}

/// Per slice: the quantile value and what its backward needs (the positions of the two
/// neighbours along the slice, and the weight of the upper one).
struct Picked<T> {
    values: Vec<T>,
    below: Vec<i64>,
    above: Vec<i64>,
    weights: Vec<T>,
}

/// PyTorch's `lerp`: `a + w (b - a)` for small weights, `b - (b - a)(1 - w)` otherwise
/// (exact at both ends).
fn lerp<T: CpuFloat>(a: T, b: T, w: T) -> T {
    if w.abs() < T::from_f64(0.5) {
        a + w * (b - a)
    } else {
        b - (b - a) * (T::one() - w)
    }
}

/// The `q`-quantile of each row of `rows` (rows of length `n`, `n > 0`). Sorting is
/// stable with NaN after every number; a row holding a NaN takes rank `n - 1` (its last
/// NaN), so its quantile is NaN, as PyTorch's.
fn quantile_rows<T: CpuFloat>(rows: &[T], n: usize, q: f64) -> Picked<T> {
    let count = rows.len() / n;
    let mut p = Picked {
        values: Vec::with_capacity(count),
        below: Vec::with_capacity(count),
        above: Vec::with_capacity(count),
        weights: Vec::with_capacity(count),
    };
    let last = T::from_f64((n - 1) as f64);
    let mut order: Vec<usize> = Vec::with_capacity(n);
    for row in rows.chunks(n) {
        order.clear();
        order.extend(0..n);
        order.sort_by(|&i, &j| row[i].partial_cmp(&row[j]).unwrap_or_else(|| row[i].is_nan().cmp(&row[j].is_nan())));
        // The rank in the input's precision, as PyTorch computes `q * (n - 1)`.
        let rank = if row.iter().any(|v| v.is_nan()) { last } else { T::from_f64(q) * last };
        let (lo, hi) = (rank.floor(), rank.ceil());
        let w = rank - lo;
        let (ib, ia) = (order[lo.as_f64() as usize], order[hi.as_f64() as usize]);
        p.values.push(lerp(row[ib], row[ia], w));
        p.below.push(ib as i64);
        p.above.push(ia as i64);
        p.weights.push(w);
    }
    p
}
