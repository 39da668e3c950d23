//! Matrix products on the CPU, each through the one GEMM entry ([`super::gemm::gemm`]).

use std::mem::MaybeUninit;

use super::gemm::{gemm, gemm_uninit, MatRef};
use super::{team, with_float, CpuElement, CpuFloat, CpuStorage};
use crate::dtype::Element;
use crate::shape::{for_each_offset, Dims, Layout};

/// `a @ b` over broadcast batch dims (see [`crate::backend::Storage::matmul`]).
pub(crate) fn matmul(
    a: &CpuStorage,
    la: &Layout,
    b: &CpuStorage,
    lb: &Layout,
    batch: &[usize],
    (m, k, n): (usize, usize, usize),
) -> CpuStorage {
    with_float!(a, "matmul", T, va => {
        let vb = T::slice(b).expect("same dtype");
        T::into_storage(bmm_kernel(va, la, vb, lb, batch, m, k, n))
    })
}

/// `beta * input + alpha * a @ b` (see [`crate::backend::Storage::addmm`]).
pub(crate) fn addmm(
    input: &CpuStorage,
    li: &Layout,
    (a, la): (&CpuStorage, &Layout),
    (b, lb): (&CpuStorage, &Layout),
    (beta, alpha): (f64, f64),
) -> CpuStorage {
    with_float!(input, "addmm", T, iv => {
        let (av, bv) = (T::slice(a).expect("same dtype"), T::slice(b).expect("same dtype"));
        T::into_storage(addmm_kernel(iv, li, av, la, bv, lb, T::from_f64(beta), T::from_f64(alpha)))
    })
}

/// Below this many multiply-adds per matrix, batches are spread over threads (each GEMM
/// then runs on its task's thread) instead of running one after another.
const SMALL_GEMM: usize = 96 * 96 * 96;

/// Batched GEMM over broadcast batch dims: `a: [..., m, k]`, `b: [..., k, n]`.
#[allow(clippy::too_many_arguments)]
fn bmm_kernel<T: CpuFloat>(
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    batch: &[usize],
    m: usize,
    k: usize,
    n: usize,
) -> Vec<T> {
    let (ra, rb) = (la.rank(), lb.rank());
    let (rsa, csa) = (la.strides()[ra - 2], la.strides()[ra - 1]);
    let (rsb, csb) = (lb.strides()[rb - 2], lb.strides()[rb - 1]);
    // Batch offsets of both operands, with stride 0 on broadcast batch dims.
    let ba = broadcast_batch(la, batch);
    let bb = broadcast_batch(lb, batch);
    let mut offsets = Vec::with_capacity(batch.iter().product());
    for_each_offset(batch, [&ba, &bb], [la.offset(), lb.offset()], |[oa, ob]| offsets.push((oa, ob)));
    let len = offsets.len() * m * n;
    let mut out = T::alloc_buffer(len);
    if m == 0 || n == 0 || k == 0 {
        out.resize(len, T::zero());
        return out;
    }
    let run = |(oa, ob): (usize, usize), c: &mut [MaybeUninit<T>]| {
        let a = MatRef { data: a, offset: oa, row_stride: rsa, col_stride: csa };
        let b = MatRef { data: b, offset: ob, row_stride: rsb, col_stride: csb };
        gemm_uninit((m, k, n), T::one(), a, b, c)
    };
    let c = &mut out.spare_capacity_mut()[..len];
    if offsets.len() > 1 && m * n * k < SMALL_GEMM && team::threads() > 1 {
        team::for_chunks(c, m * n, |q, c| run(offsets[q], c));
    } else {
        for (c, &o) in c.chunks_mut(m * n).zip(&offsets) {
            run(o, c);
        }
    }
    // SAFETY: the products above wrote all `len` elements (one `m x n` block per batch
    // entry, `k > 0`); a panic in them leaves the length at 0.
    unsafe { out.set_len(len) };
    out
}

/// Strides of the leading (batch) dims of `l`, right-aligned to `batch` with 0 where
/// broadcast.
fn broadcast_batch(l: &Layout, batch: &[usize]) -> Dims {
    let r = l.rank() - 2;
    let lead = batch.len() - r;
    (0..batch.len()).map(|i| if i < lead || l.shape()[i - lead] == 1 { 0 } else { l.strides()[i - lead] }).collect()
}

/// `beta * input + alpha * a @ b` for `a: [m, k]`, `b: [k, n]` and `input` viewed through
/// `li` (already broadcast to `[m, n]`): the output starts as a copy of the input rows and
/// the GEMM accumulates into it, instead of a product followed by a broadcast add (another
/// pass over the output and another buffer). With `beta = 0` the input is not read, so its
/// NaN and infinities do not propagate (BLAS and PyTorch semantics).
#[allow(clippy::too_many_arguments)]
fn addmm_kernel<T: CpuFloat>(
    input: &[T],
    li: &Layout,
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    beta: T,
    alpha: T,
) -> Vec<T> {
    let (m, k, n) = (la.shape()[0], la.shape()[1], lb.shape()[1]);
    let a = MatRef { data: a, offset: la.offset(), row_stride: la.strides()[0], col_stride: la.strides()[1] };
    let b = MatRef { data: b, offset: lb.offset(), row_stride: lb.strides()[0], col_stride: lb.strides()[1] };
    if beta == T::zero() && k > 0 {
        // The input is not read (BLAS semantics: its NaN do not propagate): the product
        // is written into a fresh buffer, with no zeroing pass first.
        let mut out = T::alloc_buffer(m * n);
        gemm_uninit((m, k, n), alpha, a, b, &mut out.spare_capacity_mut()[..m * n]);
        // SAFETY: with `k > 0` the product wrote all `m * n` elements (a panic in it
        // leaves the length at 0).
        unsafe { out.set_len(m * n) };
        return out;
    }
    let mut out = if beta == T::zero() {
        let mut out = T::alloc_buffer(m * n);
        out.resize(m * n, T::zero());
        out
    } else {
        // The input's rows (a broadcast bias: one row again and again), copied by runs,
        // split over the team when large.
        super::strided_to_vec(input, li)
    };
    if k == 0 || m == 0 || n == 0 {
        // No product to accumulate: only the scaling of the input remains.
        if beta != T::one() {
            out.iter_mut().for_each(|c| *c = *c * beta);
        }
        return out;
    }
    gemm((m, k, n), alpha, a, b, beta, &mut out);
    out
}
