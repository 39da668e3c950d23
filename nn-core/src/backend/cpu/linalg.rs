//! Matrix products on the CPU, each through the one GEMM entry ([`super::gemm::gemm`]).

use std::mem::MaybeUninit;

use super::gemm::{backend, gemm, gemm_uninit, Backend, MatRef};
use super::gemm_bf16;
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

/// `a @ b` for two `bf16` operands on a CPU with AVX512-BF16 ([`gemm_bf16`]): `f32` sums,
/// each result rounded to `bf16` once; `None` for other operands or CPUs (the caller then
/// computes through `f32`).
pub(crate) fn matmul_bf16(
    a: &CpuStorage,
    la: &Layout,
    b: &CpuStorage,
    lb: &Layout,
    batch: &[usize],
    (m, k, n): (usize, usize, usize),
) -> Option<CpuStorage> {
    let (CpuStorage::BF16(av), CpuStorage::BF16(bv)) = (a, b) else { return None };
    if !gemm_bf16::available() {
        return None;
    }
    let (ra, rb) = (la.rank(), lb.rank());
    let (ba, bb) = (broadcast_batch(la, batch), broadcast_batch(lb, batch));
    let mut offsets = Vec::with_capacity(batch.iter().product());
    for_each_offset(batch, [&ba, &bb], [la.offset(), lb.offset()], |[oa, ob]| offsets.push((oa, ob)));
    // From the pool, every slot written by the products (a zeroed `vec!` would be fresh
    // pages from the system on every call).
    let len = offsets.len() * m * n;
    let mut out = <half::bf16 as CpuElement>::alloc_buffer(len);
    let slots = &mut out.spare_capacity_mut()[..len];
    for (q, &(oa, ob)) in offsets.iter().enumerate() {
        let a = gemm_bf16::Strided { data: av, offset: oa, rs: la.strides()[ra - 2], cs: la.strides()[ra - 1] };
        let b = gemm_bf16::Strided { data: bv, offset: ob, rs: lb.strides()[rb - 2], cs: lb.strides()[rb - 1] };
        gemm_bf16::gemm_to_bf16(m, k, n, a, b, &mut slots[q * m * n..(q + 1) * m * n]);
    }
    // SAFETY: the products wrote all `len` slots (each `m x n` block whole).
    unsafe { out.set_len(len) };
    Some(CpuStorage::BF16(out))
}

/// `beta * input + alpha * a @ b` (see [`addmm`]) for `bf16` operands on a CPU with
/// AVX512-BF16: the product summed in `f32`, the sum with the input in `f32`, rounded to
/// `bf16` once; `None` for other operands or CPUs.
pub(crate) fn addmm_bf16(
    input: &CpuStorage,
    li: &Layout,
    (a, la): (&CpuStorage, &Layout),
    (b, lb): (&CpuStorage, &Layout),
    (beta, alpha): (f64, f64),
) -> Option<CpuStorage> {
    let (CpuStorage::BF16(iv), CpuStorage::BF16(av), CpuStorage::BF16(bv)) = (input, a, b) else { return None };
    if !gemm_bf16::available() {
        return None;
    }
    let (m, k, n) = (la.shape()[0], la.shape()[1], lb.shape()[1]);
    let sa = gemm_bf16::Strided { data: av, offset: la.offset(), rs: la.strides()[0], cs: la.strides()[1] };
    let sb = gemm_bf16::Strided { data: bv, offset: lb.offset(), rs: lb.strides()[0], cs: lb.strides()[1] };
    let (beta, alpha) = (beta as f32, alpha as f32);
    let (ri, ci) = (li.strides()[0], li.strides()[1]);
    let mut y = <half::bf16 as CpuElement>::alloc_buffer(m * n);
    // The epilogue runs on each part's sums as the thread that made them finishes, in
    // the multiversioned vector loops of `isa_loops` with the closures inlined into them (a
    // closure called from inside `with_avx2` is compiled out of line, and its scalar calls
    // would be a measurable part of the `compare.py` row `amp_transformer_step_bf16`).
    gemm_bf16::run(m, k, n, sa, sb, &mut y.spare_capacity_mut()[..m * n], |r0, sums, part| {
        use super::isa_loops::{map2_elems, map_elems};
        use super::widen::{bf16_to_f32, f32_to_bf16};
        for (i, (row, dst)) in sums.chunks(n.max(1)).zip(part.chunks_mut(n.max(1))).enumerate() {
            let at = li.offset() + (r0 + i) * ri;
            if beta == 0.0 {
                // The input is not read (BLAS semantics, as `addmm`).
                map_elems(
                    row,
                    dst,
                    #[inline(always)]
                    move |p| f32_to_bf16(alpha * p),
                );
            } else if ci == 1 {
                map2_elems(
                    row,
                    &iv[at..at + n],
                    dst,
                    #[inline(always)]
                    move |p, x| f32_to_bf16(alpha * p + beta * bf16_to_f32(x)),
                );
            } else {
                for (j, (d, &p)) in dst.iter_mut().zip(row).enumerate() {
                    d.write(f32_to_bf16(alpha * p + beta * bf16_to_f32(iv[at + j * ci])));
                }
            }
        }
    });
    // SAFETY: the epilogue wrote every slot of every part (`run` covers all `m` rows).
    unsafe { y.set_len(m * n) };
    Some(CpuStorage::BF16(y))
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
    if let [(oa, ob)] = offsets[..] {
        let a = MatRef { data: a, offset: oa, row_stride: rsa, col_stride: csa };
        let b = MatRef { data: b, offset: ob, row_stride: rsb, col_stride: csb };
        if transposed_pays((m, k, n), &a, &b) {
            return transpose(&product_transposed((m, k, n), T::one(), a, b), (n, m));
        }
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

/// Whether `a b` (`m x k` by `k x n`) is faster computed as its transpose `b^T a^T` and
/// transposed back: `a` with contiguous rows and `b` the transpose of a row-major matrix
/// (`x W^T`, a linear layer), with `b` two or more times wider than `a` is tall.
///
/// The gemm crate first copies into panels whichever operand it cannot read along its
/// kernel's rows; in `x W^T` that is `W`, all `n x k` of it, however few rows `x` has.
/// Computed as `W x^T`, it copies `x` instead. The product and its transposition beat the
/// direct product at 64x784x256 (a linear layer at batch 64), 32x784x256, 64x512x512 and
/// 128x512x512; at 128x784x256 (`b` twice as wide) the two are about even, and at
/// 8x784x256 and 64x128x512 the transposed one is slower (hence the bounds on `m` and
/// `k`).
///
/// The price is the transposition of the `m x n` result, against the copy of `W` (`n x k`)
/// it saves, and the product `W x^T` is the faster one: the gemm crate runs `x W^T` with
/// `W` read across its rows slower than the same product with both operands row-major, at
/// 256x768x768, 256x2048x768 (Llama's MLP at 256 tokens), 256x768x2048 and 128x768x2048;
/// at 256x768x32000 (its LM head, a result of 8.2M elements to transpose) the two are
/// about even. So from `n >= 2m` on (the transposition: [`super::transposed_to_vec`]). The
/// `compare.py` rows `mlp_forward_layers`, `gpt2_fwd` and `llama_fwd` run these products.
fn transposed_pays<T>((m, k, n): (usize, usize, usize), a: &MatRef<'_, T>, b: &MatRef<'_, T>) -> bool {
    let shape = m >= 16 && m.saturating_mul(2) <= n && k >= 256;
    let strides = a.col_stride == 1 && a.row_stride != 1 && b.row_stride == 1 && b.col_stride != 1;
    shape && strides && backend() == Backend::Gemm
}

/// `alpha a b` as its transpose, `n x m` row-major: the product `b^T a^T`, both read in
/// place through swapped strides.
fn product_transposed<T: CpuFloat>(
    (m, k, n): (usize, usize, usize),
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
) -> Vec<T> {
    let bt = MatRef { row_stride: b.col_stride, col_stride: b.row_stride, ..b };
    let at = MatRef { row_stride: a.col_stride, col_stride: a.row_stride, ..a };
    let mut t = T::alloc_buffer(m * n);
    gemm_uninit((n, k, m), alpha, bt, at, &mut t.spare_capacity_mut()[..m * n]);
    // SAFETY: `transposed_pays` asks `k >= 256`, so the product wrote all `m * n`
    // elements (a panic in it leaves the length at 0).
    unsafe { t.set_len(m * n) };
    t
}

/// The transpose of `t` (`rows x cols`, row-major), row-major (gathered in tiles).
fn transpose<T: CpuFloat>(t: &[T], (rows, cols): (usize, usize)) -> Vec<T> {
    super::strided_to_vec(t, &Layout::new(smallvec::smallvec![cols, rows], smallvec::smallvec![1, cols], 0))
}

/// Side of the square tiles of [`add_transposed`] (a tile's rows and columns both stay in
/// the L1 cache).
const TILE: usize = 16;

/// `c = beta c + t^T` for `c` (`m x n`) and `t` (`n x m`), both row-major, in tiles.
fn add_transposed<T: CpuFloat>(c: &mut [T], t: &[T], (m, n): (usize, usize), beta: T) {
    for i0 in (0..m).step_by(TILE) {
        for j0 in (0..n).step_by(TILE) {
            for i in i0..(i0 + TILE).min(m) {
                for j in j0..(j0 + TILE).min(n) {
                    let x = &mut c[i * n + j];
                    *x = if beta == T::one() { *x } else { beta * *x } + t[j * m + i];
                }
            }
        }
    }
}

/// `c[i, j] += beta * row[j]` for every row `i` of `c` (rows of `row.len()`), split over
/// the team when large.
fn add_row_to_rows<T: CpuFloat>(c: &mut [T], row: &[T], beta: T) {
    let n = row.len();
    let add = |_: usize, part: &mut [T]| {
        super::isa_loops::with_avx2(
            #[inline(always)]
            || {
                for r in part.chunks_exact_mut(n) {
                    if beta == T::one() {
                        r.iter_mut().zip(row).for_each(|(o, &b)| *o = *o + b);
                    } else {
                        r.iter_mut().zip(row).for_each(|(o, &b)| *o = *o + beta * b);
                    }
                }
            },
        )
    };
    if super::parts::split(c.len(), super::parts::PAR_THRESHOLD) {
        team::for_chunks(c, team::GRAIN.div_ceil(n) * n, add);
    } else {
        add(0, c);
    }
}

/// Strides of the leading (batch) dims of `l`, right-aligned to `batch` with 0 where
/// broadcast.
fn broadcast_batch(l: &Layout, batch: &[usize]) -> Dims {
    let r = l.rank() - 2;
    let lead = batch.len() - r;
    (0..batch.len()).map(|i| if i < lead || l.shape()[i - lead] == 1 { 0 } else { l.strides()[i - lead] }).collect()
}

/// `beta * input + alpha * a @ b` for `a: [m, k]`, `b: [k, n]` and `input` viewed through
/// `li` (already broadcast to `[m, n]`): a bias row is added across the product; any other
/// input is copied out and the GEMM accumulates into it. With `beta = 0` the input is not
/// read, so its NaN and infinities do not propagate (BLAS and PyTorch semantics).
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
    if transposed_pays((m, k, n), &a, &b) {
        let t = product_transposed((m, k, n), alpha, a, b);
        if beta == T::zero() {
            return transpose(&t, (n, m));
        }
        // The input's rows, then the product added across in tiles.
        let mut out = super::strided_to_vec(input, li);
        add_transposed(&mut out, &t, (m, n), beta);
        return out;
    }
    // A bias row broadcast over the rows (a linear layer) is added after the product.
    let row_bias = li.strides() == [0, 1] && m > 0 && n > 0;
    if k > 0 && (beta == T::zero() || row_bias) {
        // The product into a fresh buffer, with no zeroing pass first. With `beta = 0`
        // the input is not read (BLAS semantics: its NaN do not propagate). A bias row is
        // then added across: copying the rows out first for the GEMM to accumulate into
        // reads and writes the output as often, but those writes miss the cache where
        // the addition runs over a product just written (the `compare.py` row
        // `transformer_step` is faster so). With `alpha = beta = 1` the values are bit for
        // bit the same (the kernels add the input after the whole dot product either way).
        let mut out = T::alloc_buffer(m * n);
        gemm_uninit((m, k, n), alpha, a, b, &mut out.spare_capacity_mut()[..m * n]);
        // SAFETY: with `k > 0` the product wrote all `m * n` elements (a panic in it
        // leaves the length at 0).
        unsafe { out.set_len(m * n) };
        if beta != T::zero() {
            add_row_to_rows(&mut out, &input[li.offset()..][..n], beta);
        }
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
