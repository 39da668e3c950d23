//! Fused scaled dot-product attention, `softmax(q k^T scale + mask) v` with dropout on the
//! weights, forward and backward.
//!
//! Composed from primitives, attention writes its scores, reads them back for the softmax,
//! writes the weights and reads them again for the product with `v`, each a tensor of
//! every head at once (a megabyte for the Transformer workload's 64 heads of 64 x 64),
//! and the heads split from `[N, L, H, D]` come back through copies: the output merged
//! into `[N, L, E]` forward, each gradient gathered back backward. Here one task handles
//! the heads of one batch entry, each head's scores staying in the cache between the
//! products and the softmax; the operands are read in place through their strides, and
//! the output and the gradients are written token-major (`[.., L, H, D]` in memory), the
//! layout the heads were split from, so merging them back is a view. (With one batch
//! entry, the tasks are heads and the results are stored head-major instead.)
//!
//! Masks are read in place through broadcast strides. PyTorch's causal mask (top-left
//! aligned: query `i` sees keys `j <= i`) is never read at all: the queries go in blocks
//! of [`BLOCK`] rows, each scored only against the keys up to its last row, so the
//! products above the diagonal are skipped (but for the blocks' own triangles). A mask the
//! same for every query (a key padding mask, `[N, 1, 1, S]`) bounds the keys each head
//! scores, from its first to its last attended key. A query row left with no key (every
//! score `-inf`, an explicit mask only) gives zero weights, as PyTorch's safe softmax.
//!
//! Grouped-query heads read their key and value head in place (query head `h` of `H` uses
//! head `h / (H / H_kv)`), and the key and value gradients add up over each group.

use std::mem::MaybeUninit;

use super::gemm::{gemm_add_rows, gemm_rows, gemm_uninit_rows};
use super::isa_loops::RowSoftmax;
use super::{team, CpuFloat, CpuStorage};
use crate::backend::AttentionPlan;
use crate::shape::Layout;

mod operands;

use operands::{block, from};
pub(crate) use operands::{Heads, Mask, Sizes};

/// Query rows per block of a causal attention: each block is scored against the keys up
/// to its last row, so of the masked half of the scores a part of `BLOCK / L` is still
/// computed; smaller blocks make more, smaller products. 32 is the fastest of 8, 16, 32,
/// 64 and one block of all rows on causal `[2, 12, 128, 64]` forward and backward (the
/// `compare.py` row `attn_causal`).
const BLOCK: usize = 32;

/// A fused attention's operands, mask and options (sizes and operands checked by the op:
/// `q: [n, heads, l, e]`, `k: [n, kv_heads, s, e]`, `v: [n, kv_heads, s, ev]`).
pub(crate) struct Attention<'a, T> {
    /// Queries.
    pub q: Heads<'a, T>,
    /// Keys.
    pub k: Heads<'a, T>,
    /// Values.
    pub v: Heads<'a, T>,
    /// The mask.
    pub mask: Mask<'a, T>,
    /// The sizes.
    pub z: Sizes,
    /// The scores' scale.
    pub scale: T,
    /// With dropout: which weights are kept (`[n, heads, l, s]`) and the kept ones' scale,
    /// `1 / (1 - p)`.
    pub dropout: Option<(&'a [bool], T)>,
    /// Results token-major, one task per batch entry; else head-major (see [`Part`]).
    pub token_major: bool,
}

/// How a task's part of a result of `heads` heads of `rows x width` is stored:
/// token-major (`[rows, heads, width]`) or head-major (`[heads, rows, width]`).
#[derive(Clone, Copy)]
struct Part {
    /// Heads in the part.
    heads: usize,
    /// Rows per head.
    rows: usize,
    /// Columns per row.
    width: usize,
    /// Token-major, else head-major.
    token_major: bool,
}

impl Part {
    /// Elements in the part.
    fn len(&self) -> usize {
        self.heads * self.rows * self.width
    }

    /// Where local head `h`'s row 0 starts in the part, and the step between its rows.
    fn head(&self, h: usize) -> (usize, usize) {
        if self.token_major {
            (h * self.width, self.heads * self.width)
        } else {
            (h * self.rows * self.width, self.width)
        }
    }
}

/// One head's rows of a result: the task's part, where the head's row 0 starts, and the
/// step between rows.
type Rows<'p, T> = (&'p mut [MaybeUninit<T>], (usize, usize));

/// Writes zeros to rows `rows` (`width` wide) of a head's result.
fn zero_rows<T: CpuFloat>((part, (start, step)): &mut Rows<'_, T>, rows: std::ops::Range<usize>, width: usize) {
    for r in rows {
        part[*start + r * *step..][..width].fill(MaybeUninit::new(T::zero()));
    }
}

/// A head's result from row `r` on, as the GEMMs take it: the rows and their step.
fn rows_at<'p, T>((part, (start, step)): &'p mut Rows<'_, T>, r: usize) -> (&'p mut [MaybeUninit<T>], usize) {
    (&mut part[*start + r * *step..], *step)
}

/// A head's kept weights (`l x s`) and their scale, when dropout runs.
type Kept<'a, T> = Option<(&'a [bool], T)>;

/// The dropped weights `pd = p * kept * scale` (equal lengths).
fn drop_weights<T: CpuFloat>(p: &[T], (kept, scale): (&[bool], T), pd: &mut [T]) {
    for ((d, &w), &k) in pd.iter_mut().zip(p).zip(kept) {
        *d = if k { w * scale } else { T::zero() };
    }
}

impl<T: CpuFloat + RowSoftmax> Attention<'_, T> {
    /// The first query row of each block (all rows in one block unless causal).
    fn blocks(&self) -> std::iter::StepBy<std::ops::Range<usize>> {
        let step = if matches!(self.mask, Mask::Causal) { BLOCK } else { self.z.l };
        (0..self.z.l).step_by(step)
    }

    /// The end of the query block starting at row `i0`.
    fn block_end(&self, i0: usize) -> usize {
        if matches!(self.mask, Mask::Causal) {
            (i0 + BLOCK).min(self.z.l)
        } else {
            self.z.l
        }
    }

    /// Head `h` of batch entry `n`'s kept weights, when dropout runs.
    fn kept(&self, n: usize, h: usize) -> Kept<'_, T> {
        let Sizes { heads, l, s, .. } = self.z;
        self.dropout.map(|(kept, scale)| (&kept[(n * heads + h) * l * s..][..l * s], scale))
    }

    /// Forward: the output, token-major (`[n, l, heads, ev]` in memory) or head-major, and
    /// the attention weights `[n, heads, l, s]` before dropout, kept for the backward.
    pub(crate) fn forward(&self) -> (Vec<T>, Vec<T>) {
        let Sizes { n, heads, l, s, e, ev, .. } = self.z;
        assert!(l * s * e * ev > 0, "fused attention: empty operands take the composed path");
        let per = if self.token_major { heads } else { 1 };
        let out_part = Part { heads: per, rows: l, width: ev, token_major: self.token_major };
        let (out_len, p_len) = (n * heads * l * ev, n * heads * l * s);
        let (mut out, mut p) = (T::alloc_buffer(out_len), T::alloc_buffer(p_len));
        let mut bufs = [
            (&mut out.spare_capacity_mut()[..out_len], out_part.len()),
            (&mut p.spare_capacity_mut()[..p_len], per * l * s),
        ];
        team::for_parts(&mut bufs, |t, parts| {
            let [out_t, p_t] = parts else { unreachable!("two buffers") };
            let mut scores = vec![T::zero(); l * s];
            let mut dropped = if self.dropout.is_some() { vec![T::zero(); l * s] } else { Vec::new() };
            for hl in 0..per {
                let (bn, h) = ((t * per + hl) / heads, (t * per + hl) % heads);
                let p_h = &mut p_t[hl * l * s..][..l * s];
                let out_h = (&mut **out_t, out_part.head(hl));
                self.forward_head((bn, h), (&mut scores, &mut dropped), p_h, out_h);
            }
        });
        // SAFETY: each task wrote the weights of its heads (every row, all `s` keys) and
        // their output rows (`forward_head` writes every row of a head).
        unsafe {
            out.set_len(out_len);
            p.set_len(p_len);
        }
        (out, p)
    }

    /// One head's weights `p` (`l x s`) and output rows, with room for its scores and its
    /// dropped weights (`l x s` each, the latter only read with dropout).
    fn forward_head(
        &self,
        (n, h): (usize, usize),
        (scores, dropped): (&mut [T], &mut [T]),
        p: &mut [MaybeUninit<T>],
        mut out: Rows<'_, T>,
    ) {
        let Sizes { s, e, ev, .. } = self.z;
        let hk = h / self.z.group();
        let keys = self.mask.keys(n, h, &self.z);
        let kept = self.kept(n, h);
        for i0 in self.blocks() {
            let i1 = self.block_end(i0);
            let (lo, hi) = self.mask.keys_before(keys, i1);
            let rows = &mut p[i0 * s..i1 * s];
            if hi <= lo {
                // No key left for these rows: zero weights, zero output.
                rows.fill(MaybeUninit::new(T::zero()));
                zero_rows(&mut out, i0..i1, ev);
                continue;
            }
            let (qm, km) = (from(self.q.mat(n, h, false), i0, 0), from(self.k.mat(n, hk, true), 0, lo));
            gemm_rows((i1 - i0, e, hi - lo), self.scale, qm, km, T::zero(), (&mut scores[i0 * s + lo..], s));
            for (i, pr) in (i0..i1).zip(rows.chunks_exact_mut(s)) {
                let (rlo, rhi) = self.mask.keys_before((lo, hi), i + 1);
                let row = &mut scores[i * s + rlo..i * s + rhi];
                let dead = self.mask.apply((n, h, i), rlo, row);
                pr[..rlo].fill(MaybeUninit::new(T::zero()));
                pr[rhi..].fill(MaybeUninit::new(T::zero()));
                if dead {
                    pr[rlo..rhi].fill(MaybeUninit::new(T::zero()));
                } else {
                    T::softmax_rows(row, &mut pr[rlo..rhi], rhi - rlo);
                }
            }
            // SAFETY: the loop above wrote every weight of rows `i0..i1`.
            let rows: &[T] = unsafe { &*(rows as *const [MaybeUninit<T>] as *const [T]) };
            let w = match kept {
                Some((kept, scale)) => {
                    let d = &mut dropped[i0 * s..i1 * s];
                    drop_weights(rows, (&kept[i0 * s..i1 * s], scale), d);
                    &*d
                }
                None => rows,
            };
            let vm = from(self.v.mat(n, hk, false), lo, 0);
            gemm_uninit_rows((i1 - i0, hi - lo, ev), T::one(), block(w, s, (0, lo), false), vm, rows_at(&mut out, i0));
        }
    }

    /// Backward: from the output's gradient `g` (any strides) and the saved weights `p`
    /// (before dropout), the gradients of `q`, `k` and `v`, stored as the forward's output
    /// (token-major, `[n, l | s, heads, e | ev]` in memory, or head-major), and with
    /// `scores_grad` the gradient of the masked scores, `[n, heads, l, s]` contiguous (an
    /// additive mask's, before its broadcast is summed).
    pub(crate) fn backward(&self, g: Heads<'_, T>, p: &[T], scores_grad: bool) -> ([Vec<T>; 3], Option<Vec<T>>) {
        let Sizes { n, heads, kv_heads, l, s, e, ev } = self.z;
        let group = self.z.group();
        assert_eq!(p.len(), n * heads * l * s, "fused attention: weights of every head");
        // Token-major, a task per batch entry; head-major, a task per key and value head:
        // either way a task holds whole groups, whose key and value gradients it sums.
        let per = if self.token_major { heads } else { group };
        let part = |heads, rows, width| Part { heads, rows, width, token_major: self.token_major };
        let parts = [part(per, l, e), part(per / group, s, e), part(per / group, s, ev)];
        let lens = [n * heads * l * e, n * kv_heads * s * e, n * kv_heads * s * ev];
        let ds_len = if scores_grad { n * heads * l * s } else { 0 };
        let [mut dq, mut dk, mut dv] = lens.map(T::alloc_buffer);
        let mut dscores = T::alloc_buffer(ds_len);
        let mut bufs = vec![
            (&mut dq.spare_capacity_mut()[..lens[0]], parts[0].len()),
            (&mut dk.spare_capacity_mut()[..lens[1]], parts[1].len()),
            (&mut dv.spare_capacity_mut()[..lens[2]], parts[2].len()),
        ];
        if scores_grad {
            bufs.push((&mut dscores.spare_capacity_mut()[..ds_len], per * l * s));
        }
        team::for_parts(&mut bufs, |t, bufs| {
            let (grads, ds_t) = bufs.split_at_mut(3);
            let [dq_t, dk_t, dv_t] = grads else { unreachable!("three gradients") };
            let mut ds = vec![T::zero(); l * s];
            let mut dropped = if self.dropout.is_some() { vec![T::zero(); l * s] } else { Vec::new() };
            for hl in 0..per {
                let (bn, h) = ((t * per + hl) / heads, (t * per + hl) % heads);
                let kl = hl / group;
                if scores_grad {
                    // Blocks of keys no query sees are not written below.
                    ds.fill(T::zero());
                }
                let p_h = &p[(bn * heads + h) * l * s..][..l * s];
                let rows = [
                    (&mut **dq_t, parts[0].head(hl)),
                    (&mut **dk_t, parts[1].head(kl)),
                    (&mut **dv_t, parts[2].head(kl)),
                ];
                self.backward_head((bn, h), g, p_h, (&mut ds, &mut dropped), rows);
                if let [ds_t] = ds_t {
                    for (o, &d) in ds_t[hl * l * s..][..l * s].iter_mut().zip(&ds) {
                        o.write(d);
                    }
                }
            }
        });
        // SAFETY: each task wrote every row of its heads' query gradients and of its key
        // and value heads' gradients (the first query head of each group writes all `s`
        // rows), and with `scores_grad` its heads' `l x s` score gradients.
        unsafe {
            dq.set_len(lens[0]);
            dk.set_len(lens[1]);
            dv.set_len(lens[2]);
            dscores.set_len(ds_len);
        }
        ([dq, dk, dv], scores_grad.then_some(dscores))
    }

    /// One head's gradients: the rows of its query gradient, and its share of its key and
    /// value head's (written by the first query head of the group, added to by the
    /// others), with room for the gradient of its scores and its dropped weights (`l x s`
    /// each, the latter only used with dropout).
    fn backward_head(
        &self,
        (n, h): (usize, usize),
        g: Heads<'_, T>,
        p: &[T],
        (ds, dropped): (&mut [T], &mut [T]),
        [mut dq, mut dk, mut dv]: [Rows<'_, T>; 3],
    ) {
        let Sizes { l, s, e, ev, .. } = self.z;
        let (hk, first) = (h / self.z.group(), h % self.z.group() == 0);
        let keys = self.mask.keys(n, h, &self.z);
        let (safe, causal) = (self.mask.safe(), matches!(self.mask, Mask::Causal));
        let pd: &[T] = match self.kept(n, h) {
            Some(kept) => {
                drop_weights(p, kept, dropped);
                dropped
            }
            None => p,
        };
        for i0 in self.blocks() {
            let i1 = self.block_end(i0);
            let (lo, hi) = self.mask.keys_before(keys, i1);
            if hi <= lo {
                zero_rows(&mut dq, i0..i1, e);
                continue;
            }
            // The dropped weights' gradient `dpd = g v^T`, then the softmax's backward in
            // place: the scores' gradient `pd dpd - p sum(dpd pd)` (`p (dp - sum(dp p))`
            // without dropout).
            let (gm, vm) = (from(g.mat(n, h, false), i0, 0), from(self.v.mat(n, hk, true), 0, lo));
            gemm_rows((i1 - i0, ev, hi - lo), T::one(), gm, vm, T::zero(), (&mut ds[i0 * s + lo..], s));
            let dropout = self.dropout.is_some();
            super::isa_loops::with_avx2(
                #[inline(always)]
                || {
                    for i in i0..i1 {
                        let (rlo, rhi) = self.mask.keys_before((lo, hi), i + 1);
                        let dr = &mut ds[i * s..][..s];
                        dr[lo..rlo].fill(T::zero());
                        dr[rhi..hi].fill(T::zero());
                        let (dr, pr, pdr) =
                            (&mut dr[rlo..rhi], &p[i * s + rlo..i * s + rhi], &pd[i * s + rlo..i * s + rhi]);
                        // A dead row (no weight under a safe mask; a live row's largest
                        // weight is at least 1 / S) passes no gradient, as the composition's
                        // safe softmax.
                        if safe && pr.iter().all(|&w| w == T::zero()) {
                            dr.fill(T::zero());
                            continue;
                        }
                        let dot = super::norm::sum8(dr, pdr, |d, w| d * w);
                        if dropout {
                            for ((d, &w), &wd) in dr.iter_mut().zip(pr).zip(pdr) {
                                *d = wd * *d - w * dot;
                            }
                        } else {
                            for (d, &w) in dr.iter_mut().zip(pr) {
                                *d = w * (*d - dot);
                            }
                        }
                    }
                },
            );
            // dq = scale ds k
            let km = from(self.k.mat(n, hk, false), lo, 0);
            gemm_uninit_rows(
                (i1 - i0, hi - lo, e),
                self.scale,
                block(ds, s, (i0, lo), false),
                km,
                rows_at(&mut dq, i0),
            );
        }
        // dv = pd^T g and dk = scale ds^T q, by blocks of keys, each from the query rows
        // that see it (causal: from its first key's row on).
        let (c0, c1) = if causal { (0, s.min(l)) } else { keys };
        if first {
            for (rows, width) in [(&mut dk, e), (&mut dv, ev)] {
                zero_rows(rows, 0..c0, width);
                zero_rows(rows, c1.max(c0)..s, width);
            }
        }
        let step = if causal { BLOCK } else { (c1 - c0).max(1) };
        for j0 in (c0..c1).step_by(step) {
            let j1 = (j0 + step).min(c1);
            let r0 = if causal { j0 } else { 0 };
            let (gm, qm) = (from(g.mat(n, h, false), r0, 0), from(self.q.mat(n, h, false), r0, 0));
            let (pt, dst) = (block(pd, s, (r0, j0), true), block(ds, s, (r0, j0), true));
            let (dv_dims, dk_dims) = ((j1 - j0, l - r0, ev), (j1 - j0, l - r0, e));
            if first {
                gemm_uninit_rows(dv_dims, T::one(), pt, gm, rows_at(&mut dv, j0));
                gemm_uninit_rows(dk_dims, self.scale, dst, qm, rows_at(&mut dk, j0));
            } else {
                // SAFETY: the group's first head wrote every row of these gradients.
                unsafe {
                    gemm_add_rows(dv_dims, T::one(), pt, gm, rows_at(&mut dv, j0));
                    gemm_add_rows(dk_dims, self.scale, dst, qm, rows_at(&mut dk, j0));
                }
            }
        }
    }
}

/// The heads of a rank-4 layout (the op brings every operand to rank 4).
fn heads_of<'a, T>(data: &'a [T], l: &Layout) -> Option<Heads<'a, T>> {
    let strides: [usize; 4] = l.strides().try_into().ok()?;
    Some(Heads { data, offset: l.offset(), strides })
}

/// An operand: its buffer and the layout that selects it.
type Operand<'a> = (&'a CpuStorage, &'a Layout);

/// The typed [`Attention`] of operands `[q, k, v]` (of `T`, rank 4) and a mask (bool or
/// of `T`, broadcast to the scores' `[n, heads, l, s]`), with the kept weights of a
/// dropout; `None` for other operands.
fn typed<'a, T: CpuFloat>(
    [q, k, v]: [Operand<'a>; 3],
    mask: Option<Operand<'a>>,
    plan: &AttentionPlan,
    kept: Option<&'a [bool]>,
) -> Option<Attention<'a, T>> {
    let shape = |(_, l): Operand<'_>| <[usize; 4]>::try_from(l.shape()).ok();
    let ([n, heads, l, e], [kn, kv_heads, s, ke], [vn, vh, vs, ev]) = (shape(q)?, shape(k)?, shape(v)?);
    let fits = kn == n && vn == n && vh == kv_heads && vs == s && ke == e && kv_heads > 0 && heads % kv_heads == 0;
    if !fits {
        return None;
    }
    let heads_in = |(d, l): Operand<'a>| T::slice(d).and_then(|d| heads_of(d, l));
    let mask = match (mask, plan.causal) {
        (None, false) => Mask::None,
        (None, true) => Mask::Causal,
        (Some(_), true) => return None,
        (Some((d, lm)), false) => {
            if lm.shape() != [n, heads, l, s] {
                return None;
            }
            match d {
                CpuStorage::Bool(b) => Mask::Keep(heads_of(b, lm)?),
                _ => Mask::Add(heads_in((d, lm))?),
            }
        }
    };
    Some(Attention {
        q: heads_in(q)?,
        k: heads_in(k)?,
        v: heads_in(v)?,
        mask,
        z: Sizes { n, heads, kv_heads, l, s, e, ev },
        scale: T::from_f64(plan.scale),
        // The composition's scale: `1 / keep` in f64, then in the weights' dtype.
        dropout: kept.map(|k| (k, T::from_f64(1.0 / (1.0 - plan.dropout)))),
        token_major: plan.token_major,
    })
}

/// See [`crate::backend::Storage::attention_fused`].
pub(crate) fn attention(
    qkv: [Operand<'_>; 3],
    mask: Option<Operand<'_>>,
    plan: &AttentionPlan,
) -> Option<[CpuStorage; 3]> {
    fn run<T: CpuFloat + RowSoftmax>(
        qkv: [Operand<'_>; 3],
        mask: Option<Operand<'_>>,
        plan: &AttentionPlan,
    ) -> Option<[CpuStorage; 3]> {
        // Checked without dropout first: once drawn, the weights to drop must be used (the
        // composition would draw them again).
        let z = typed::<T>(qkv, mask, plan, None)?.z;
        let kept = (plan.dropout > 0.0)
            .then(|| super::rows::dropout_draws(z.n * z.heads * z.l * z.s, 1.0 - plan.dropout, |kept| kept));
        let a = typed::<T>(qkv, mask, plan, kept.as_deref()).expect("the operands were checked above");
        let (out, p) = a.forward();
        Some([T::into_storage(out), T::into_storage(p), CpuStorage::Bool(kept.unwrap_or_default())])
    }
    match qkv[0].0 {
        CpuStorage::F32(_) => run::<f32>(qkv, mask, plan),
        CpuStorage::F64(_) => run::<f64>(qkv, mask, plan),
        CpuStorage::F16(_) | CpuStorage::BF16(_) => {
            let dtype = qkv[0].0.dtype();
            let mut wide = Vec::new();
            let [q, k, v, m] = widened(&mut wide, [Some(qkv[0].0), Some(qkv[1].0), Some(qkv[2].0), mask.map(|m| m.0)]);
            let on = [operand(q, qkv[0].1), operand(k, qkv[1].1), operand(v, qkv[2].1)];
            let [out, p, kept] = run::<f32>(on, m.zip(mask.map(|m| m.1)), plan)?;
            // The weights stay `f32`: only the backward reads them.
            Some([super::widen::narrow(out, dtype), p, kept])
        }
        _ => None,
    }
}

/// A widened operand beside its layout.
fn operand<'a>(s: Option<&'a CpuStorage>, l: &'a Layout) -> Operand<'a> {
    (s.expect("a widened operand is present"), l)
}

/// `f32` copies of the `f16`/`bf16` buffers among `operands`, one per distinct buffer
/// (`q`, `k` and `v` split from one projection share theirs), kept in `store`; the other
/// operands as they are.
///
/// Half-precision attention runs the `f32` kernel on these copies and rounds its results
/// once (PyTorch's CPU attention on `bf16` also computes in `f32`). The products inside
/// it are per head and small (the Transformer workload's are 32 x 32 x 64): the `bf16`
/// GEMM's packing costs more there than it saves, and the fused kernel over widened
/// operands ran the workload's attention forward and backward 2.5x faster than the
/// composition of `bf16` products (2-vCPU Zen 5, 1 thread: 1.13 ms against 2.82 ms).
fn widened<'s, const N: usize>(
    store: &'s mut Vec<CpuStorage>,
    operands: [Option<&'s CpuStorage>; N],
) -> [Option<&'s CpuStorage>; N] {
    let mut slot: [Option<usize>; N] = [None; N];
    for (i, s) in operands.iter().enumerate() {
        let Some(s) = s else { continue };
        let same = (0..i).find(|&j| operands[j].is_some_and(|t| std::ptr::eq(t, *s)));
        slot[i] = match same {
            Some(j) => slot[j],
            None => super::widen::widen(s).map(|w| {
                store.push(w);
                store.len() - 1
            }),
        };
    }
    let store: &'s [CpuStorage] = store;
    std::array::from_fn(|i| slot[i].map(|j| &store[j]).or(operands[i]))
}

/// See [`crate::backend::Storage::attention_fused_backward`].
pub(crate) fn attention_backward(
    (g, lg): Operand<'_>,
    (p, kept): (&CpuStorage, &CpuStorage),
    qkv: [Operand<'_>; 3],
    mask: Option<Operand<'_>>,
    plan: &AttentionPlan,
    scores_grad: bool,
) -> Option<([CpuStorage; 3], Option<CpuStorage>)> {
    fn run<T: CpuFloat + RowSoftmax>(
        (g, lg): (&[T], &Layout),
        (p, kept): (&CpuStorage, &CpuStorage),
        qkv: [Operand<'_>; 3],
        (mask, plan): (Option<Operand<'_>>, &AttentionPlan),
        scores_grad: bool,
    ) -> Option<([CpuStorage; 3], Option<CpuStorage>)> {
        let CpuStorage::Bool(kept) = kept else { return None };
        let kept = (plan.dropout > 0.0).then_some(&kept[..]);
        let a = typed::<T>(qkv, mask, plan, kept)?;
        let (grads, ds) = a.backward(heads_of(g, lg)?, T::slice(p)?, scores_grad);
        Some((grads.map(T::into_storage), ds.map(T::into_storage)))
    }
    match g {
        CpuStorage::F32(x) => run::<f32>((x, lg), (p, kept), qkv, (mask, plan), scores_grad),
        CpuStorage::F64(x) => run::<f64>((x, lg), (p, kept), qkv, (mask, plan), scores_grad),
        CpuStorage::F16(_) | CpuStorage::BF16(_) => {
            // As the forward (see `widened`): the `f32` kernel on `f32` copies, each
            // operand's gradient rounded once; the saved weights are `f32` already.
            let dtype = g.dtype();
            let mut wide = Vec::new();
            let ops = [Some(g), Some(qkv[0].0), Some(qkv[1].0), Some(qkv[2].0), mask.map(|m| m.0)];
            let [gw, q, k, v, m] = widened(&mut wide, ops);
            let Some(CpuStorage::F32(gw)) = gw else { return None };
            let on = [operand(q, qkv[0].1), operand(k, qkv[1].1), operand(v, qkv[2].1)];
            let (grads, ds) = run::<f32>((gw, lg), (p, kept), on, (m.zip(mask.map(|m| m.1)), plan), scores_grad)?;
            // The scores' gradient stays `f32`: the op sums it over a mask's broadcast
            // before rounding it to the mask's dtype, once.
            Some((grads.map(|s| super::widen::narrow(s, dtype)), ds))
        }
        _ => None,
    }
}
