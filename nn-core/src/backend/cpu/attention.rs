//! Fused scaled dot-product attention, `softmax(q k^T scale) v`, forward and backward.
//!
//! Composed from primitives, attention writes its scores, reads them back for the softmax,
//! writes the weights and reads them again for the product with `v`, each a tensor of
//! every head at once (a megabyte for the Transformer workload's 64 heads of 64 x 64),
//! and the heads split from `[N, L, H, D]` come back through copies: the output merged
//! into `[N, L, E]` forward, each gradient gathered back backward. Here one task handles
//! the heads of one batch entry, each head's scores staying in the cache between the
//! products and the softmax; the operands are read in place through their strides, and
//! the output and the gradients are written token-major (`[.., L, H, D]` in memory), the
//! layout the heads were split from, so merging them back is a view.

use std::mem::MaybeUninit;

use super::gemm::{gemm, gemm_uninit_rows, MatRef};
use super::vmath::RowSoftmax;
use super::{team, CpuFloat, CpuStorage};
use crate::shape::Layout;

/// The sizes of a fused attention: `outer` batch entries of `heads` heads each, queries
/// `[l, e]`, keys `[s, e]` and values `[s, ev]` per head.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sizes {
    /// Batch entries (one task each).
    pub outer: usize,
    /// Heads per batch entry.
    pub heads: usize,
    /// Query positions.
    pub l: usize,
    /// Key and value positions.
    pub s: usize,
    /// Query and key width.
    pub e: usize,
    /// Value width.
    pub ev: usize,
}

/// One operand's heads: element `(o, h, row, col)` is
/// `data[offset + o * strides[0] + h * strides[1] + row * strides[2] + col * strides[3]]`.
#[derive(Clone, Copy)]
pub(crate) struct Heads<'a, T> {
    /// The buffer.
    pub data: &'a [T],
    /// Index of element `(0, 0, 0, 0)`.
    pub offset: usize,
    /// Steps of the batch entry, head, row and column.
    pub strides: [usize; 4],
}

impl<'a, T> Heads<'a, T> {
    /// Head `h` of batch entry `o` as a matrix, or its transpose.
    fn mat(&self, o: usize, h: usize, transposed: bool) -> MatRef<'a, T> {
        let [so, sh, sr, sc] = self.strides;
        let (row_stride, col_stride) = if transposed { (sc, sr) } else { (sr, sc) };
        MatRef { data: self.data, offset: self.offset + o * so + h * sh, row_stride, col_stride }
    }
}

/// Forward: the output, token-major (`[outer, l, heads, ev]` in memory), and the
/// attention weights `[outer, heads, l, s]`, kept for the backward.
pub(crate) fn forward<T: CpuFloat + RowSoftmax>(
    (q, k, v): (Heads<'_, T>, Heads<'_, T>, Heads<'_, T>),
    z: Sizes,
    scale: T,
) -> (Vec<T>, Vec<T>) {
    let Sizes { outer, heads, l, s, e, ev } = z;
    assert!(l * s * e * ev > 0, "fused attention: empty operands take the composed path");
    let (out_len, p_len) = (outer * l * heads * ev, outer * heads * l * s);
    let (mut out, mut p) = (T::alloc_buffer(out_len), T::alloc_buffer(p_len));
    let mut bufs = [
        (&mut out.spare_capacity_mut()[..out_len], l * heads * ev),
        (&mut p.spare_capacity_mut()[..p_len], heads * l * s),
    ];
    team::for_parts(&mut bufs, |o, parts| {
        let [out_o, p_o] = parts else { unreachable!("two buffers") };
        let mut scores = vec![T::zero(); l * s];
        for h in 0..heads {
            gemm((l, e, s), scale, q.mat(o, h, false), k.mat(o, h, true), T::zero(), &mut scores);
            let p_oh = &mut p_o[h * l * s..][..l * s];
            T::softmax_rows(&scores, p_oh, s);
            // SAFETY: `softmax_rows` wrote every weight of the head.
            let p_oh: &[T] = unsafe { &*(p_oh as *const [MaybeUninit<T>] as *const [T]) };
            let pm = MatRef::row_major(p_oh, (l, s), false);
            gemm_uninit_rows((l, s, ev), T::one(), pm, v.mat(o, h, false), (&mut out_o[h * ev..], heads * ev));
        }
    });
    // SAFETY: each batch entry's task wrote its weights (every head) and its output (each
    // head's `ev` columns of every row, all `heads` of them).
    unsafe {
        out.set_len(out_len);
        p.set_len(p_len);
    }
    (out, p)
}

/// Backward: from the output's gradient `g` (any strides) and the saved weights `p`, the
/// gradients of `q`, `k` and `v`, token-major (`[outer, l | s, heads, e | ev]` in memory).
pub(crate) fn backward<T: CpuFloat>(
    g: Heads<'_, T>,
    p: &[T],
    (q, k, v): (Heads<'_, T>, Heads<'_, T>, Heads<'_, T>),
    z: Sizes,
    scale: T,
) -> [Vec<T>; 3] {
    let Sizes { outer, heads, l, s, e, ev } = z;
    assert_eq!(p.len(), outer * heads * l * s, "fused attention: weights of every head");
    let lens = [outer * l * heads * e, outer * s * heads * e, outer * s * heads * ev];
    let [mut dq, mut dk, mut dv] = lens.map(T::alloc_buffer);
    let mut bufs = [
        (&mut dq.spare_capacity_mut()[..lens[0]], l * heads * e),
        (&mut dk.spare_capacity_mut()[..lens[1]], s * heads * e),
        (&mut dv.spare_capacity_mut()[..lens[2]], s * heads * ev),
    ];
    team::for_parts(&mut bufs, |o, parts| {
        let [dq_o, dk_o, dv_o] = parts else { unreachable!("three buffers") };
        let mut ds = vec![T::zero(); l * s];
        for h in 0..heads {
            let p_oh = &p[(o * heads + h) * l * s..][..l * s];
            let pt = MatRef::row_major(p_oh, (s, l), true);
            // dv = p^T g
            gemm_uninit_rows((s, l, ev), T::one(), pt, g.mat(o, h, false), (&mut dv_o[h * ev..], heads * ev));
            // dp = g v^T, then the softmax's backward in place: p (dp - sum(dp p)), scaled.
            gemm((l, ev, s), T::one(), g.mat(o, h, false), v.mat(o, h, true), T::zero(), &mut ds);
            super::vmath::with_avx2(
                #[inline(always)]
                || {
                    for (dr, pr) in ds.chunks_exact_mut(s).zip(p_oh.chunks_exact(s)) {
                        let dot = super::norm::sum8(dr, pr, |d, w| d * w);
                        for (d, &w) in dr.iter_mut().zip(pr) {
                            *d = w * (*d - dot) * scale;
                        }
                    }
                },
            );
            let dsm = MatRef::row_major(&ds[..], (l, s), false);
            // dq = ds k, dk = ds^T q
            gemm_uninit_rows((l, s, e), T::one(), dsm, k.mat(o, h, false), (&mut dq_o[h * e..], heads * e));
            let dst = MatRef::row_major(&ds[..], (s, l), true);
            gemm_uninit_rows((s, l, e), T::one(), dst, q.mat(o, h, false), (&mut dk_o[h * e..], heads * e));
        }
    });
    // SAFETY: each batch entry's task wrote every head's columns of every row of its
    // three gradients.
    unsafe {
        dq.set_len(lens[0]);
        dk.set_len(lens[1]);
        dv.set_len(lens[2]);
    }
    [dq, dk, dv]
}

/// `[outer, heads, rows, cols]` and their strides for a rank-3 (`heads = 1`) or rank-4
/// layout; `None` for other ranks.
fn heads_of(l: &Layout) -> Option<([usize; 4], [usize; 4])> {
    match (l.shape(), l.strides()) {
        (&[b, r, c], &[sb, sr, sc]) => Some(([b, 1, r, c], [sb, 0, sr, sc])),
        (&[n, h, r, c], &[sn, sh, sr, sc]) => Some(([n, h, r, c], [sn, sh, sr, sc])),
        _ => None,
    }
}

/// The operands' [`Heads`] and [`Sizes`] (shapes checked by the op: one batch shape,
/// `q: [.., l, e]`, `k: [.., s, e]`, `v: [.., s, ev]`, rank 3 or 4).
fn geometry<'a, T>(
    (q, lq): (&'a [T], &Layout),
    (k, lk): (&'a [T], &Layout),
    (v, lv): (&'a [T], &Layout),
) -> Option<([Heads<'a, T>; 3], Sizes)> {
    let (([outer, heads, l, e], sq), ([_, _, s, _], sk), ([_, _, _, ev], sv)) =
        (heads_of(lq)?, heads_of(lk)?, heads_of(lv)?);
    let h = |data, l: &Layout, strides| Heads { data, offset: l.offset(), strides };
    Some(([h(q, lq, sq), h(k, lk, sk), h(v, lv, sv)], Sizes { outer, heads, l, s, e, ev }))
}

/// An operand: its buffer and the layout that selects it.
type Operand<'a> = (&'a CpuStorage, &'a Layout);

/// See [`crate::backend::Storage::attention_fused`].
pub(crate) fn attention(q: Operand<'_>, k: Operand<'_>, v: Operand<'_>, scale: f64) -> Option<[CpuStorage; 2]> {
    fn typed<T: CpuFloat + RowSoftmax>(
        q: (&[T], &Layout),
        (k, v): (Operand<'_>, Operand<'_>),
        scale: f64,
    ) -> Option<[CpuStorage; 2]> {
        let (k, v) = ((T::slice(k.0)?, k.1), (T::slice(v.0)?, v.1));
        let ([q, k, v], z) = geometry(q, k, v)?;
        let (out, p) = forward((q, k, v), z, T::from_f64(scale));
        Some([T::into_storage(out), T::into_storage(p)])
    }
    match q.0 {
        CpuStorage::F32(x) => typed::<f32>((x, q.1), (k, v), scale),
        CpuStorage::F64(x) => typed::<f64>((x, q.1), (k, v), scale),
        _ => None,
    }
}

/// See [`crate::backend::Storage::attention_fused_backward`].
pub(crate) fn attention_backward(
    g: Operand<'_>,
    p: &CpuStorage,
    qkv: [Operand<'_>; 3],
    scale: f64,
) -> Option<[CpuStorage; 3]> {
    fn typed<T: CpuFloat>(
        (g, lg): (&[T], &Layout),
        p: &CpuStorage,
        [q, k, v]: [Operand<'_>; 3],
        scale: f64,
    ) -> Option<[CpuStorage; 3]> {
        let (q, k, v) = ((T::slice(q.0)?, q.1), (T::slice(k.0)?, k.1), (T::slice(v.0)?, v.1));
        let ([q, k, v], z) = geometry(q, k, v)?;
        let (_, sg) = heads_of(lg)?;
        let g = Heads { data: g, offset: lg.offset(), strides: sg };
        Some(backward(g, T::slice(p)?, (q, k, v), z, T::from_f64(scale)).map(T::into_storage))
    }
    match g.0 {
        CpuStorage::F32(x) => typed::<f32>((x, g.1), p, qkv, scale),
        CpuStorage::F64(x) => typed::<f64>((x, g.1), p, qkv, scale),
        _ => None,
    }
}
