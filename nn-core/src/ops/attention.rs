//! Scaled dot-product attention: fused on the CPU, composed from differentiable primitives
//! elsewhere.

use std::sync::Arc;

use smallvec::smallvec;

use crate::autograd::{op_result, Grads};
use crate::backend::AttentionPlan;
use crate::dtype::DType;
use crate::shape::{Dims, Layout};
use crate::tensor::Tensor;

/// Options of [`Tensor::scaled_dot_product_attention`].
#[derive(Clone, Debug, Default)]
pub struct AttentionConfig<'a> {
    /// A mask broadcastable to `[..., L, S]`, of one of PyTorch's two kinds:
    /// - `Bool`: **`true` = may attend** (PyTorch's `scaled_dot_product_attention`
    ///   polarity; note that [`MultiheadAttention`'s] bool masks are the opposite, `true` =
    ///   ignore);
    /// - floating point, of the query's dtype: added to the scores (`-inf` = masked out).
    ///
    /// Any other dtype panics: an integer 0/1 mask has no polarity of its own (Hugging
    /// Face's `attention_mask` is 1 = attend, an additive mask is 0 = attend), so it is
    /// refused instead of guessed.
    ///
    /// [`MultiheadAttention`'s]: https://pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html
    pub attn_mask: Option<&'a Tensor>,
    /// Dropout probability on the attention weights (applied only when > 0).
    pub dropout_p: f64,
    /// Apply a causal (lower-triangular) mask; cannot be combined with `attn_mask`.
    pub is_causal: bool,
    /// Score scale; defaults to `1 / sqrt(E)`.
    pub scale: Option<f64>,
    /// Grouped-query attention (PyTorch's `enable_gqa`): the query has `H` heads (dim -3)
    /// and the key and value `H_kv`, a divisor of `H`; query head `h` attends with key and
    /// value head `h / (H / H_kv)` (each serves that many consecutive query heads, as
    /// transformers' `repeat_kv`), read in place rather than repeated. Without it, the
    /// head counts must be equal (or one of them 1, broadcast).
    pub enable_gqa: bool,
}

impl Tensor {
    /// `softmax(q k^T * scale + mask) v` for `q: [..., L, E]`, `k: [..., S, E]`,
    /// `v: [..., S, Ev]`; output `[..., L, Ev]`. A query row whose every key position is
    /// masked out gives zeros, and passes no gradient, as PyTorch 2.5 and later (its "safe
    /// softmax"; earlier versions give NaN).
    ///
    /// ```
    /// use nn_core::{ops::AttentionConfig, Tensor};
    /// let q = Tensor::ones(&[1, 2, 4]);
    /// let v = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[1, 2, 2]);
    /// let causal = AttentionConfig { is_causal: true, ..Default::default() };
    /// let y = q.scaled_dot_product_attention(&q, &v, &causal);
    /// // Row 0 only sees position 0; row 1 averages both (equal scores).
    /// assert_eq!(y.to_vec(), vec![1.0, 2.0, 2.0, 3.0]);
    /// ```
    ///
    /// On the CPU, operands of rank 2 to 4 (`[N, H, L, E]`) whose batch dims agree (but for
    /// grouped or broadcast key and value heads) run fused, with any mask (causal, bool,
    /// additive, broadcast ones read in place), dropout and grouped-query heads: one task
    /// per batch entry, each head's scores kept in the cache, the scores above a causal
    /// diagonal not computed, and the output written token-major: `[N, H, L, Ev]` is stored
    /// as `[N, L, H, Ev]`, so the heads merge back into `[N, L, H Ev]` as a view. (With
    /// `N = 1`, the heads are the tasks and the output is stored as it is shaped.) Dropout
    /// draws the weights it keeps as the composition does, so one seed drops the same ones
    /// either way. Elsewhere, and while a trace records (export sees the standard ops), the
    /// composition of matmul, softmax and matmul runs.
    ///
    /// # Panics
    /// When the operands' sizes do not fit (embedding sizes, sequence lengths, head counts
    /// without `enable_gqa`, or with it not dividing), when `attn_mask` does not broadcast
    /// to the scores' shape or is not bool or of the query's dtype, or with both `attn_mask`
    /// and `is_causal`.
    #[track_caller]
    pub fn scaled_dot_product_attention(&self, key: &Tensor, value: &Tensor, options: &AttentionConfig<'_>) -> Tensor {
        // Its parts (a softmax, matrix products) are not cast: it is one op to autocast.
        let _op = crate::autograd::entry::op_entry!(untraced OP, args = &autocast_args(self, key, value, options),
            again = again(options, |q, k, v, o| q.scaled_dot_product_attention(k, v, o)));
        check(self, key, value, options);
        if let Some(y) = fused(self, key, value, options) {
            return y;
        }
        composed(self, key, value, options)
    }

    /// Like [`scaled_dot_product_attention`](Tensor::scaled_dot_product_attention), also
    /// returning the attention weights `[..., L, S]` (after dropout, as PyTorch's
    /// `MultiheadAttention` returns them). Always composed.
    #[track_caller]
    pub fn scaled_dot_product_attention_with_weights(
        &self,
        key: &Tensor,
        value: &Tensor,
        options: &AttentionConfig<'_>,
    ) -> (Tensor, Tensor) {
        let run = |q: &Tensor, k: &Tensor, v: &Tensor, o: &AttentionConfig<'_>| {
            q.scaled_dot_product_attention_with_weights(k, v, o)
        };
        let _op = crate::autograd::entry::op_entry!(untraced OP, args = &autocast_args(self, key, value, options), again = again(options, run));
        check(self, key, value, options);
        composed_with_weights(self, key, value, options)
    }
}

/// What autocast casts: q, k, v and a float `attn_mask` (a bool mask is not cast; see
/// `amp::cast_call`).
fn autocast_args<'a>(
    q: &'a Tensor,
    k: &'a Tensor,
    v: &'a Tensor,
    options: &AttentionConfig<'a>,
) -> [Option<&'a Tensor>; 4] {
    [Some(q), Some(k), Some(v), options.attn_mask]
}

/// `run` on the cast [`autocast_args`], the mask's cast in its options.
fn again<'o, R>(
    options: &'o AttentionConfig<'_>,
    run: impl FnOnce(&Tensor, &Tensor, &Tensor, &AttentionConfig<'_>) -> R + 'o,
) -> impl FnOnce(&[Option<&Tensor>]) -> R + 'o {
    move |c| {
        let o = AttentionConfig { attn_mask: c[3], ..*options };
        run(c[0].expect("present"), c[1].expect("present"), c[2].expect("present"), &o)
    }
}

/// The op's name in panics.
const OP: &str = crate::names::SCALED_DOT_PRODUCT_ATTENTION;

/// Panics unless the operands and options fit (see
/// [`Tensor::scaled_dot_product_attention`]).
#[track_caller]
fn check(q: &Tensor, k: &Tensor, v: &Tensor, options: &AttentionConfig<'_>) {
    if q.rank() < 2 || k.rank() < 2 || v.rank() < 2 {
        panic!(
            "{OP}: query, key and value need at least 2 dims, got {:?}, {:?}, {:?}",
            q.shape(),
            k.shape(),
            v.shape()
        );
    }
    let (e, ek) = (q.shape()[q.rank() - 1], k.shape()[k.rank() - 1]);
    let (s, sv) = (k.shape()[k.rank() - 2], v.shape()[v.rank() - 2]);
    if e != ek {
        panic!("{OP}: query {:?} and key {:?} have different embedding sizes {e} and {ek}", q.shape(), k.shape());
    }
    if s != sv {
        panic!("{OP}: key {:?} and value {:?} have different sequence lengths {s} and {sv}", k.shape(), v.shape());
    }
    for (what, t) in [("key", k), ("value", v)] {
        if q.rank() < 3 || t.rank() < 3 {
            continue;
        }
        let (h, ht) = (q.shape()[q.rank() - 3], t.shape()[t.rank() - 3]);
        if options.enable_gqa && h % ht != 0 {
            panic!(
                "{OP}: query {:?} has {h} heads (dim -3), not a multiple of {what} {:?}'s {ht} (enable_gqa)",
                q.shape(),
                t.shape()
            );
        }
        if !options.enable_gqa && h != ht && h != 1 && ht != 1 {
            panic!(
                "{OP}: query {:?} and {what} {:?} have different numbers of heads (dim -3) {h} and {ht}; set \
                 enable_gqa for grouped-query attention",
                q.shape(),
                t.shape()
            );
        }
    }
    if options.is_causal && options.attn_mask.is_some() {
        panic!("{OP}: explicit attn_mask should not be set when is_causal=true");
    }
    if let Some(m) = options.attn_mask {
        check_mask_dtype(m, q);
        let scores = scores_shape(q, k, options);
        if crate::shape::broadcast_shapes(m.shape(), &scores).is_none_or(|b| b != scores) {
            panic!("{OP}: attn_mask of shape {:?} cannot be broadcast to the scores' shape {scores:?}", m.shape());
        }
    }
}

/// The shape of the scores `q k^T`: the query's and key's batch dims broadcast (the key's
/// heads counted as the query's under `enable_gqa`), then `[L, S]`. (Batch dims that do
/// not broadcast are left to the product to report.)
fn scores_shape(q: &Tensor, k: &Tensor, options: &AttentionConfig<'_>) -> Dims {
    let (rq, rk) = (q.rank(), k.rank());
    let mut kb: Dims = k.shape()[..rk - 2].into();
    if options.enable_gqa && rq >= 3 && rk >= 3 {
        kb[rk - 3] = q.shape()[rq - 3];
    }
    let mut shape = crate::shape::broadcast_shapes(&q.shape()[..rq - 2], &kb).unwrap_or_else(|| kb.clone());
    shape.extend_from_slice(&[q.shape()[rq - 2], k.shape()[rk - 2]]);
    shape
}

/// Panics unless `mask` is one of the two kinds `scaled_dot_product_attention` takes: bool,
/// or floating point of the query's dtype. The message names the argument, its dtype and
/// both accepted kinds with their polarity, and suggests no conversion: a conversion that
/// changes a mask's meaning (`to_dtype` on a 0/1 mask) is exactly the silent bug refused.
#[track_caller]
fn check_mask_dtype(mask: &Tensor, query: &Tensor) {
    let (d, q) = (mask.dtype(), query.dtype());
    if d == DType::Bool || d == q {
        return;
    }
    let kinds = format!(
        "a bool mask (true = may attend) or a float mask of the query's dtype {q} (added to the scores, -inf = \
         masked out)"
    );
    if d.is_float() {
        panic!(
            "scaled_dot_product_attention: attn_mask has dtype {d} but the query is {q}; attn_mask must be {kinds} \
             (a float mask converts between float dtypes without changing its meaning)"
        );
    }
    panic!(
        "scaled_dot_product_attention: attn_mask of shape {:?} has dtype {d}; attn_mask must be {kinds}. An integer \
         mask is refused because its polarity is ambiguous (Hugging Face's 1 = attend, an additive mask's 0 = \
         attend): build the bool mask that says which positions may be attended",
        mask.shape()
    );
}

/// The composition's output (checked operands).
#[track_caller]
fn composed(q: &Tensor, k: &Tensor, v: &Tensor, options: &AttentionConfig<'_>) -> Tensor {
    composed_with_weights(q, k, v, options).0
}

/// The composition of matmul, softmax and matmul: the output and the weights (checked
/// operands).
#[track_caller]
fn composed_with_weights(q: &Tensor, k: &Tensor, v: &Tensor, options: &AttentionConfig<'_>) -> (Tensor, Tensor) {
    let (l, s, e) = (q.shape()[q.rank() - 2], k.shape()[k.rank() - 2], q.shape()[q.rank() - 1]);
    let scale = options.scale.unwrap_or(1.0 / (e as f64).sqrt());
    let product = |a: &Tensor, b: &Tensor| if options.enable_gqa { grouped_matmul(a, b) } else { a.matmul(b) };
    let mut scores = product(q, &k.transpose(-2, -1)) * scale;
    let mask = if options.is_causal {
        let m: Vec<bool> = (0..l).flat_map(|i| (0..s).map(move |j| j <= i)).collect();
        Some(Tensor::from_vec_bool(m, &[l, s]).to_device(q.device()))
    } else {
        options.attn_mask.cloned()
    };
    if let Some(m) = mask {
        scores = if m.dtype() == DType::Bool {
            scores.masked_fill(&m.logical_not(), f64::NEG_INFINITY)
        } else {
            &scores + &m
        };
    }
    let mut weights = if options.attn_mask.is_some() { safe_softmax(&scores) } else { scores.softmax(-1) };
    if options.dropout_p > 0.0 {
        weights = weights.dropout(options.dropout_p, true);
    }
    (product(&weights, v), weights)
}

/// `a @ b` for `a: [.., H, m, k]` and `b: [.., H_b, k, n]`, `H_b` dividing `H`, head `h`
/// of `a` against head `h / (H / H_b)` of `b` (PyTorch's `repeat_interleave` of `b`'s
/// heads, as a broadcast of `b` over each group instead of a copy): `[.., H, m, n]`.
fn grouped_matmul(a: &Tensor, b: &Tensor) -> Tensor {
    let (ra, rb) = (a.rank(), b.rank());
    if ra < 3 || rb < 3 || a.shape()[ra - 3] == b.shape()[rb - 3] || b.shape()[rb - 3] == 1 {
        return a.matmul(b);
    }
    let (h, hb) = (a.shape()[ra - 3], b.shape()[rb - 3]);
    // [.., H_b, H / H_b, m, k] x [.., H_b, 1, k, n]
    let mut grouped: Dims = a.shape()[..ra - 3].into();
    grouped.extend_from_slice(&[hb, h / hb]);
    grouped.extend_from_slice(&a.shape()[ra - 2..]);
    let y = a.reshape(&grouped).matmul(&b.unsqueeze(rb - 2));
    let r = y.rank();
    let mut shape: Dims = y.shape()[..r - 4].into();
    shape.push(h);
    shape.extend_from_slice(&y.shape()[r - 2..]);
    y.reshape(&shape)
}

/// Softmax over the last dim where a row whose every score is `-inf` (every key masked
/// out) gives zeros instead of NaN, and passes no gradient (PyTorch's `_safe_softmax`).
fn safe_softmax(scores: &Tensor) -> Tensor {
    // A row is dead when it counts as many `-inf` as it has keys (built from ops that
    // export to ONNX: Equal, Cast, ReduceSum).
    // Counted in f32: in bf16, 259 masked keys of 260 would round to 260, and the row
    // with one kept key would be zeroed.
    let full = |v: f64, dtype| Tensor::full_on(&[], v, dtype, scores.device());
    let masked = scores.detached_for_keeping().eq(&full(f64::NEG_INFINITY, scores.dtype())).to_dtype(DType::F32);
    let keys = scores.shape()[scores.rank() - 1] as f64;
    let dead = masked.sum_dim(-1, true).eq(&full(keys, DType::F32));
    // Finite scores in dead rows, so the softmax and its backward stay finite there; the
    // fill below then zeroes both the rows and their gradients.
    scores.masked_fill(&dead, 0.0).softmax(-1).masked_fill(&dead, 0.0)
}

/// Strides of `[N, H, R, C]` stored token-major (`[N, R, H, C]` in memory) or head-major
/// (contiguous).
fn stored(shape: &[usize], token_major: bool) -> Dims {
    match *shape {
        [_, h, r, c] if token_major => smallvec![r * h * c, c, h * c, 1],
        _ => crate::shape::contiguous_strides(shape),
    }
}

/// `t` as rank 4, with leading dims of 1 (a view).
fn rank4(t: &Tensor) -> Tensor {
    let mut shape: Dims = smallvec![1; 4 - t.rank()];
    shape.extend_from_slice(t.shape());
    t.reshape(&shape)
}

/// The fused attention (see [`Tensor::scaled_dot_product_attention`]) of checked
/// operands, or `None` where the composition runs.
fn fused(q: &Tensor, k: &Tensor, v: &Tensor, options: &AttentionConfig<'_>) -> Option<Tensor> {
    let r = q.rank();
    // A dropout of 1 or more: the composition's `dropout` has that case (and the panic
    // above 1).
    let p = options.dropout_p;
    if !(2..=4).contains(&r) || k.rank() != r || v.rank() != r || p >= 1.0 || crate::autograd::trace::is_tracing() {
        return None;
    }
    let (q4, k4, v4) = (rank4(q), rank4(k), rank4(v));
    let ([n, h, l, e], [kn, hk, s, _], [vn, hv, _, ev]) = (dims4(&q4), dims4(&k4), dims4(&v4));
    // Batch entries equal; key and value heads equal, and grouped or broadcast.
    let heads = hv == hk && hk > 0 && h % hk == 0 && (hk == h || hk == 1 || options.enable_gqa);
    let dtypes = q.dtype().is_float() && k.dtype() == q.dtype() && v.dtype() == q.dtype();
    if kn != n || vn != n || !heads || !dtypes || q.numel() == 0 || k.numel() == 0 || ev == 0 {
        return None;
    }
    let mask = options.attn_mask.map(rank4);
    let mask_layout = match &mask {
        Some(m) => Some(m.layout().broadcast_to(&[n, h, l, s])?),
        None => None,
    };
    let ms = mask.as_ref().map(Tensor::storage_arc);
    let plan = AttentionPlan {
        scale: options.scale.unwrap_or(1.0 / (e as f64).sqrt()),
        causal: options.is_causal,
        dropout: if p > 0.0 { p } else { 0.0 },
        token_major: n > 1,
    };
    let (qs, ks, vs) = (q4.storage_arc(), k4.storage_arc(), v4.storage_arc());
    let mask_operand = ms.as_deref().zip(mask_layout.as_ref());
    let [out, weights, kept] = crate::autograd::kept_outputs::computed(OP, n * h * l * ev, || {
        qs.attention_fused(q4.layout(), (&ks, k4.layout()), (&vs, v4.layout()), mask_operand, &plan)
            .map(|p| p.map(Arc::new))
    })?;
    let out_shape = [n, h, l, ev];
    let layout = Layout::new(out_shape[..].into(), stored(&out_shape, plan.token_major), 0);
    // A float mask that requires grad gets the scores' gradient, summed over its broadcast.
    let float_mask = mask.as_ref().filter(|m| m.dtype() != DType::Bool);
    let mut inputs = vec![&q4, &k4, &v4];
    inputs.extend(float_mask);
    let y = op_result(OP, out, layout, &inputs, || {
        let lay = [q4.layout().clone(), k4.layout().clone(), v4.layout().clone()];
        let mask_shape: Option<(Dims, DType)> = float_mask.map(|m| (m.shape().into(), m.dtype()));
        let (ms, mask_layout) = (ms.clone(), mask_layout.clone());
        move |g: &Tensor, needs: &[bool]| -> Grads {
            let scores_grad = needs.get(3).copied().unwrap_or(false);
            let mask = ms.as_deref().zip(mask_layout.as_ref());
            let qkv = [(&*qs, &lay[0]), (&*ks, &lay[1]), (&*vs, &lay[2])];
            let (grads, dscores) = g
                .storage_arc()
                .attention_fused_backward(g.layout(), (&*weights, &*kept), qkv, mask, &plan, scores_grad)
                .expect("scaled_dot_product_attention: the backend that ran the fused forward runs its backward");
            let mut out: Grads = grads
                .into_iter()
                .zip(&lay)
                .zip(needs)
                .map(|((gs, l), &need)| {
                    need.then(|| {
                        let shape = l.shape();
                        Tensor::from_parts(
                            Arc::new(gs),
                            Layout::new(shape.into(), stored(shape, plan.token_major), 0),
                            None,
                        )
                    })
                })
                .collect();
            if let Some((shape, dtype)) = &mask_shape {
                // Summed over the broadcast, then in the mask's dtype (a backend may give
                // half masks' gradient in `f32`, rounded here once).
                out.push(dscores.map(|ds| {
                    Tensor::from_parts(Arc::new(ds), Layout::contiguous(&[n, h, l, s]), None)
                        .sum_to_shape(shape)
                        .to_dtype(*dtype)
                }));
            }
            out
        }
    });
    let mut shape: Dims = q.shape()[..r - 2].into();
    shape.extend_from_slice(&[l, ev]);
    Some(y.reshape(&shape))
}

/// The four dims of a rank-4 tensor.
fn dims4(t: &Tensor) -> [usize; 4] {
    t.shape().try_into().expect("a rank-4 tensor")
}

#[cfg(test)]
mod tests {
    use super::AttentionConfig;
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, rng_lock, t64};
    use crate::{manual_seed, DType, Device, Tensor};

    /// `q = [[1, 0], [0, 1]]`, `k = [[1, 0], [0, 1], [1, 1]]`, `v = [[1, 2], [3, 4], [5, 6]]`.
    fn qkv() -> (Tensor, Tensor, Tensor) {
        (
            leaf(&[1.0, 0.0, 0.0, 1.0], &[2, 2]),
            leaf(&[1.0, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]),
            leaf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]),
        )
    }

    fn vals(shape: &[usize], seed: u64) -> Tensor {
        let n: usize = shape.iter().product();
        let v = (0..n as u64).map(|i| ((i * 7919 + seed * 104729) % 23) as f64 / 11.0 - 1.0).collect();
        Tensor::from_vec_f64(v, shape)
    }

    /// `h` heads `[N, h, L, D]` split out of a token-major projection `[N, L, h D]`, read in
    /// place as multi-head attention splits them.
    fn heads(t: Tensor, h: usize) -> Tensor {
        let (n, l, e) = (t.shape()[0], t.shape()[1], t.shape()[2]);
        t.reshape(&[n, l, h, e / h]).transpose(1, 2)
    }

    fn bool_mask() -> Tensor {
        Tensor::from_vec_bool(vec![true, false, true, true, true, false], &[2, 3])
    }

    #[test]
    fn attention_forward_default_scale() {
        let (q, k, v) = qkv();
        let (y, w) = q.scaled_dot_product_attention_with_weights(&k, &v, &AttentionConfig::default());
        assert_eq!(y.shape(), &[2, 2]);
        assert_close64(&y.to_vec_f64(), &[3.0, 4.0, 3.4066725560787154, 4.406672556078716], 1e-15);
        let p = [0.4011120926797859, 0.1977758146404282, 0.4011120926797859];
        assert_close64(&w.to_vec_f64(), &[p[0], p[1], p[2], p[1], p[0], p[2]], 1e-15);
        let s1 = AttentionConfig { scale: Some(1.0), ..Default::default() };
        assert_close64(
            &q.scaled_dot_product_attention(&k, &v, &s1).to_vec_f64(),
            &[3.0, 4.0, 3.5339127895091087, 4.53391278950911],
            1e-15,
        );
    }

    #[test]
    fn attention_forward_masks() {
        let (q, k, v) = qkv();
        let m = bool_mask();
        let bm = AttentionConfig { attn_mask: Some(&m), ..Default::default() };
        let e = [3.0, 4.0, 2.3395230986533138, 3.3395230986533138];
        assert_close64(&q.scaled_dot_product_attention(&k, &v, &bm).to_vec_f64(), &e, 1e-15);
        // A float mask is added to the scores.
        let f = t64(&[0.0, 0.5, 0.0, 1.0, 0.0, 0.0], &[2, 3]);
        let fm = AttentionConfig { attn_mask: Some(&f), ..Default::default() };
        let e = [3.0, 4.0, 2.796246026864504, 3.7962460268645035];
        assert_close64(&q.scaled_dot_product_attention(&k, &v, &fm).to_vec_f64(), &e, 1e-15);
        // -inf in a float mask is the same as false in a bool mask.
        let fi = m.logical_not().to_dtype(DType::F64) * -1e300;
        let fim = AttentionConfig { attn_mask: Some(&fi), ..Default::default() };
        let b = q.scaled_dot_product_attention(&k, &v, &bm).to_vec_f64();
        assert_close64(&q.scaled_dot_product_attention(&k, &v, &fim).to_vec_f64(), &b, 1e-15);
        // Causal: row 0 sees position 0, row 1 positions 0 and 1.
        let c = AttentionConfig { is_causal: true, ..Default::default() };
        let e = [1.0, 2.0, 2.3395230986533138, 3.3395230986533138];
        assert_close64(&q.scaled_dot_product_attention(&k, &v, &c).to_vec_f64(), &e, 1e-15);
    }

    /// PyTorch 2.15: a query row with every key masked out gives zeros and no gradient, for
    /// a bool mask and for a float mask of `-inf`; the other rows are unaffected.
    #[test]
    fn attention_fully_masked_rows_are_zero_without_gradient() {
        let m = Tensor::from_vec_bool(vec![false, false, false, true, true, false], &[2, 3]);
        let f = m.logical_not().to_dtype(DType::F64).masked_fill(&m.logical_not(), f64::NEG_INFINITY);
        let part = Tensor::from_vec_bool(vec![true, true, true, true, true, false], &[2, 3]);
        for mask in [&m, &f] {
            let (q, k, v) = qkv();
            let o = AttentionConfig { attn_mask: Some(mask), ..Default::default() };
            let y = q.scaled_dot_product_attention(&k, &v, &o);
            let yv = y.to_vec_f64();
            assert_eq!(&yv[..2], &[0.0, 0.0], "{:?}", mask.dtype());
            // Row 1 is the partially masked row of `part`.
            let (q2, k2, v2) = qkv();
            let op = AttentionConfig { attn_mask: Some(&part), ..Default::default() };
            assert_close64(&yv[2..], &q2.scaled_dot_product_attention(&k2, &v2, &op).to_vec_f64()[2..], 1e-15);
            (y * t64(&[1.0, 2.0, 3.0, 4.0], &[2, 2])).sum().backward();
            let (gq, gk, gv) = (grad(&q), grad(&k), grad(&v));
            assert_eq!(&gq[..2], &[0.0, 0.0]);
            assert!(gq.iter().chain(&gk).chain(&gv).all(|g| g.is_finite()), "{gq:?} {gk:?} {gv:?}");
        }
        // Against PyTorch 2.15 (`F.scaled_dot_product_attention` in f64, row 1 fully masked,
        // loss `sum(y * arange(6))`).
        let lf = |t: Tensor| t.requires_grad_(true);
        let (q, k, v) = (lf(vals(&[1, 3, 4], 4)), lf(vals(&[1, 3, 4], 5)), lf(vals(&[1, 3, 2], 6)));
        let mut keep = vec![true; 9];
        keep[3..6].fill(false);
        let keep = Tensor::from_vec_bool(keep, &[3, 3]);
        let y =
            q.scaled_dot_product_attention(&k, &v, &AttentionConfig { attn_mask: Some(&keep), ..Default::default() });
        let py = [0.130037707778621, 0.04913373075598346, 0.0, 0.0, 0.1671005291503446, 0.387415913130826];
        assert_close64(&y.to_vec_f64(), &py, 1e-14);
        (y * Tensor::arange(0.0, 6.0, 1.0).to_dtype(DType::F64).reshape(&[1, 3, 2])).sum().backward();
        let gq = [
            -0.11759807103179067,
            -0.11759807103179071,
            0.14490745213047454,
            -0.11759807103179064,
            0.0,
            0.0,
            0.0,
            0.0,
            -0.5374129608224243,
            -0.5374129608224243,
            1.2413933351074895,
            -0.5374129608224244,
        ];
        let gk = [
            -0.4728961275015568,
            -0.1141328361575066,
            0.5071359783488089,
            -0.6504015030747898,
            0.3345317950898682,
            -0.006930469748568115,
            -0.3324526541652978,
            0.42753813349464814,
            0.1383643324116884,
            0.12106330590607474,
            -0.17468332418351087,
            0.22286336958014147,
        ];
        let gv = [
            2.245507304503021,
            3.0988663895973994,
            0.9585742996335522,
            1.56319458308423,
            0.7959183958634266,
            1.3379390273183709,
        ];
        assert_close64(&grad(&q), &gq, 1e-14);
        assert_close64(&grad(&k), &gk, 1e-14);
        assert_close64(&grad(&v), &gv, 1e-14);
    }

    /// Only bool and float masks are taken; an integer mask is refused, naming the argument,
    /// its dtype and both kinds with their polarity, and suggesting no conversion.
    #[test]
    fn attention_refuses_integer_masks() {
        let (q, k, v) = qkv();
        let hf = Tensor::from_vec_i64(vec![1, 1, 0, 1, 1, 1], &[2, 3]);
        let err = std::panic::catch_unwind(|| {
            q.scaled_dot_product_attention(&k, &v, &AttentionConfig { attn_mask: Some(&hf), ..Default::default() })
        })
        .expect_err("an i64 mask must be refused");
        let msg = err.downcast_ref::<String>().expect("a formatted message");
        for part in ["attn_mask", "dtype i64", "bool mask (true = may attend)", "float mask", "added to the scores"] {
            assert!(msg.contains(part), "{part:?} missing from {msg:?}");
        }
        assert!(!msg.contains("to_dtype"), "no conversion may be suggested: {msg}");
        // A float mask of another float dtype is refused too (PyTorch's rule).
        let f32_mask = Tensor::zeros(&[2, 3]);
        let err = std::panic::catch_unwind(|| {
            q.scaled_dot_product_attention(
                &k,
                &v,
                &AttentionConfig { attn_mask: Some(&f32_mask), ..Default::default() },
            )
        })
        .expect_err("an f32 mask for an f64 query must be refused");
        let msg = err.downcast_ref::<String>().expect("a formatted message");
        assert!(msg.contains("attn_mask has dtype f32 but the query is f64"), "{msg}");
    }

    #[test]
    fn attention_backward() {
        let (q, k, v) = qkv();
        let m = bool_mask();
        let o = AttentionConfig { attn_mask: Some(&m), ..Default::default() };
        (q.scaled_dot_product_attention(&k, &v, &o) * t64(&[1.0, 2.0, 3.0, 4.0], &[2, 2])).sum().backward();
        // grad_v = P^T w_out with P the attention weights.
        let e = [1.4907153520200294, 2.3209538026933725, 2.0092846479799706, 2.6790461973066275, 0.5, 1.0];
        assert_close64(&grad(&v), &e, 1e-14);
        // Row 0 attends to keys 0 and 2 with equal scores: its query gradient is
        // scale * sum_s P (w.v_s - w.out) k_s = (1/sqrt 2) * 0.5 * ((5 - 11) k0 + (17 - 11) k2).
        let gq = grad(&q);
        let s = std::f64::consts::FRAC_1_SQRT_2;
        assert_close64(&gq[..2], &[s * 0.5 * (-6.0 + 6.0), s * 0.5 * 6.0], 1e-14);
        // The masked key 2 gets no gradient from row 1; the whole key gradient sums to the
        // query-weighted sum of zero-mean score gradients.
        assert!(grad(&k).iter().all(|g| g.is_finite()));
    }

    #[test]
    fn attention_gradcheck() {
        let (q, k, v) = (vals(&[2, 3, 2], 1), vals(&[2, 4, 2], 2), vals(&[2, 4, 3], 3));
        let f = |o: AttentionConfig<'static>| move |t: &[Tensor]| t[0].scaled_dot_product_attention(&t[1], &t[2], &o);
        gradcheck(f(AttentionConfig::default()), &[q.clone(), k.clone(), v.clone()]).unwrap();
        gradcheck(
            f(AttentionConfig { is_causal: true, scale: Some(0.7), ..Default::default() }),
            &[q.clone(), k.clone(), v.clone()],
        )
        .unwrap();
        let m = Tensor::from_vec_bool(
            vec![true, false, true, true, false, true, true, false, true, true, true, false],
            &[3, 4],
        );
        gradcheck(
            |t| {
                t[0].scaled_dot_product_attention(
                    &t[1],
                    &t[2],
                    &AttentionConfig { attn_mask: Some(&m), ..Default::default() },
                )
            },
            &[q.clone(), k.clone(), v.clone()],
        )
        .unwrap();
        // A float mask is differentiable too.
        gradcheck(
            |t| {
                t[0].scaled_dot_product_attention(
                    &t[1],
                    &t[2],
                    &AttentionConfig { attn_mask: Some(&t[3]), ..Default::default() },
                )
            },
            &[q.clone(), k.clone(), v.clone(), vals(&[3, 4], 4)],
        )
        .unwrap();
        // A fully masked query row (row 1) among partly masked ones: zeros, no gradient.
        let dead = Tensor::from_vec_bool(
            vec![true, false, true, true, false, false, false, false, true, true, true, false],
            &[3, 4],
        );
        gradcheck(
            |t| {
                t[0].scaled_dot_product_attention(
                    &t[1],
                    &t[2],
                    &AttentionConfig { attn_mask: Some(&dead), ..Default::default() },
                )
            },
            &[q, k, v],
        )
        .unwrap();
    }

    /// The output of `f(q, k, v)` (on leaf copies) and its gradients through a weighted
    /// sum: `[y, gq, gk, gv]`, and with a float `mask` that requires grad, the mask's.
    fn grads_of(
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        mask: Option<&Tensor>,
        f: impl Fn(&Tensor, &Tensor, &Tensor) -> Tensor,
    ) -> Vec<Vec<f64>> {
        let leaf = |t: &Tensor| t.detach().requires_grad_(true);
        let (q, k, v) = (leaf(q), leaf(k), leaf(v));
        let y = f(&q, &k, &v);
        let w = vals(y.shape(), 7).to_dtype(y.dtype());
        (&y * &w).sum().backward();
        let mut out = vec![y.to_vec_f64(), grad(&q), grad(&k), grad(&v)];
        if let Some(m) = mask.filter(|m| m.requires_grad()) {
            out.push(grad(m));
            m.zero_grad();
        }
        out
    }

    /// [`grads_of`] the attention under `o`, fused or composed (the composition the fused
    /// path replaces: `_with_weights` never fuses). A rank-4 fused output is checked to
    /// come from the fused op.
    fn attend(q: &Tensor, k: &Tensor, v: &Tensor, o: &AttentionConfig<'_>, fused: bool) -> Vec<Vec<f64>> {
        grads_of((q, k, v), o.attn_mask, |q, k, v| {
            if !fused {
                return q.scaled_dot_product_attention_with_weights(k, v, o).0;
            }
            let y = q.scaled_dot_product_attention(k, v, o);
            if q.rank() == 4 {
                assert_eq!(y.grad_fn_name(), Some("scaled_dot_product_attention"), "the fused path ran");
            }
            y
        })
    }

    /// Asserts that `got` and `want` (parts of [`grads_of`]) agree to `tol`, NaN matching
    /// NaN, naming the case `what` on failure.
    #[track_caller]
    fn assert_parts_close(got: &[Vec<f64>], want: &[Vec<f64>], tol: f64, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(!g.is_empty() && g.len() == w.len(), "{what}: part {i}");
            for (j, (a, b)) in g.iter().zip(w).enumerate() {
                let ok = (a - b).abs() <= tol * (1.0 + b.abs()) || (a.is_nan() && b.is_nan());
                assert!(ok, "{what}: part {i} (y, gq, gk, gv, gmask), element {j}: {a} against {b}");
            }
        }
    }

    /// Asserts that the fused path gives the composition's output and gradients under `o`
    /// (f64, and the output in f32), naming the case `what` on failure.
    #[track_caller]
    fn assert_fused_matches(q: &Tensor, k: &Tensor, v: &Tensor, o: &AttentionConfig<'_>, what: &str) {
        let want = attend(q, k, v, o, false);
        assert_parts_close(&attend(q, k, v, o, true), &want, 1e-12, what);
        // f32: the same kernels in the vectorized softmax's precision.
        let f = |t: &Tensor| t.to_dtype(DType::F32);
        let m32 = o.attn_mask.map(|m| if m.dtype() == DType::Bool { m.clone() } else { f(m) });
        let o32 = AttentionConfig { attn_mask: m32.as_ref(), ..o.clone() };
        let y32 = f(q).scaled_dot_product_attention(&f(k), &f(v), &o32);
        assert_eq!(y32.dtype(), DType::F32);
        for (a, b) in y32.to_vec_f64().iter().zip(&want[0]) {
            assert!((a - b).abs() < 1e-5 || (a.is_nan() && b.is_nan()), "{what}: f32 {a} against {b}");
        }
    }

    /// The fused CPU path (no mask, no dropout, ranks 3 and 4) against the composition,
    /// values and gradients, f64 and f32, with heads read in place out of a token-major
    /// projection as multi-head attention splits them; its output and gradients are
    /// token-major, so the heads merge back as a view.
    #[test]
    fn fused_attention_matches_the_composition() {
        let cases = [
            (vals(&[2, 3, 4], 1), vals(&[2, 5, 4], 2), vals(&[2, 5, 3], 3)),
            (vals(&[2, 2, 3, 4], 1), vals(&[2, 2, 5, 4], 2), vals(&[2, 2, 5, 6], 3)),
            (heads(vals(&[3, 7, 8], 4), 2), heads(vals(&[3, 9, 8], 5), 2), heads(vals(&[3, 9, 12], 6), 2)),
            (vals(&[1, 17, 16], 1), vals(&[1, 33, 16], 2), vals(&[1, 33, 16], 3)),
            (heads(vals(&[1, 6, 12], 7), 3), heads(vals(&[1, 4, 12], 8), 3), heads(vals(&[1, 4, 6], 9), 3)),
        ];
        for (q, k, v) in cases {
            for scale in [None, Some(0.3)] {
                let o = AttentionConfig { scale, ..Default::default() };
                assert_fused_matches(&q, &k, &v, &o, &format!("{:?} {scale:?}", q.shape()));
            }
        }
        // Token-major: the heads merge into [N, L, H Ev] without a copy.
        let (q, k, v) = (heads(vals(&[2, 5, 8], 1), 2), heads(vals(&[2, 5, 8], 2), 2), heads(vals(&[2, 5, 8], 3), 2));
        let y = q.scaled_dot_product_attention(&k, &v, &AttentionConfig::default());
        assert_eq!((y.shape(), y.strides()), (&[2, 2, 5, 4][..], &[40, 4, 8, 1][..]));
        assert!(y.transpose(1, 2).is_contiguous());
    }

    /// Half-precision attention runs the f32 kernel on widened copies and rounds each
    /// result once: its output and its gradients are exactly the f32 ones rounded, for bf16
    /// and f16, with q, k and v split from one projection (one buffer, widened once), with
    /// a causal mask and with an additive mask of the query's dtype broadcast over the
    /// batch (its gradient summed over the broadcast in f32, then rounded once).
    #[test]
    fn half_attention_is_the_f32_attention_rounded_once() {
        for dtype in [DType::BF16, DType::F16] {
            for masked in [false, true] {
                let run = |dt: DType| {
                    let qkv = vals(&[2, 5, 24], 3).to_dtype(dtype).to_dtype(dt).requires_grad_(true);
                    let mask = vals(&[1, 2, 5, 5], 11).to_dtype(dtype).to_dtype(dt).requires_grad_(true);
                    let split = |i: usize| heads(qkv.narrow(2, 8 * i, 8), 2);
                    let o = if masked {
                        AttentionConfig { attn_mask: Some(&mask), ..Default::default() }
                    } else {
                        AttentionConfig { is_causal: true, ..Default::default() }
                    };
                    let y = split(0).scaled_dot_product_attention(&split(1), &split(2), &o);
                    assert_eq!(y.dtype(), dt);
                    y.backward_with(&vals(y.shape(), 9).to_dtype(dtype).to_dtype(dt), false);
                    let grads = [qkv.grad().expect("qkv's gradient"), mask.grad().unwrap_or_else(|| mask.detach())];
                    (y.detach(), grads)
                };
                let (y, [gx, gm]) = run(dtype);
                let (y32, [gx32, gm32]) = run(DType::F32);
                let rounded = |t: &Tensor| t.to_dtype(dtype).to_dtype(DType::F64).to_vec_f64();
                let what = format!("{dtype} masked {masked}");
                assert_eq!(y.to_dtype(DType::F64).to_vec_f64(), rounded(&y32), "output, {what}");
                assert_eq!(gx.to_dtype(DType::F64).to_vec_f64(), rounded(&gx32), "qkv gradient, {what}");
                assert_eq!(gm.dtype(), dtype);
                assert_eq!(gm.to_dtype(DType::F64).to_vec_f64(), rounded(&gm32), "mask gradient, {what}");
            }
        }
    }

    #[test]
    fn fused_attention_gradcheck() {
        let (q, k, v) = (vals(&[2, 2, 3, 4], 1), vals(&[2, 2, 5, 4], 2), vals(&[2, 2, 5, 3], 3));
        gradcheck(|t| t[0].scaled_dot_product_attention(&t[1], &t[2], &AttentionConfig::default()), &[q, k, v])
            .unwrap();
        let (q, k, v) = (vals(&[3, 4, 2], 4), vals(&[3, 6, 2], 5), vals(&[3, 6, 5], 6));
        let o = AttentionConfig { scale: Some(1.7), ..Default::default() };
        gradcheck(|t| t[0].scaled_dot_product_attention(&t[1], &t[2], &o), &[q, k, v]).unwrap();
    }

    /// Causal attention fused (the scores above the diagonal skipped by blocks of queries)
    /// against the composition: L = S, L < S and L > S, in one query block and in several
    /// (ragged), one batch entry (tasks of heads, head-major) and several (token-major),
    /// heads read in place out of token-major projections.
    #[test]
    fn fused_causal_attention_matches_the_composition() {
        let c = AttentionConfig { is_causal: true, ..Default::default() };
        let sizes =
            [(2, 3, 5, 5), (2, 2, 4, 7), (2, 2, 7, 3), (1, 2, 70, 70), (2, 1, 70, 45), (1, 3, 40, 75), (3, 2, 64, 64)];
        for (n, h, l, s) in sizes {
            let (q, k, v) = (vals(&[n, h, l, 4], 1), vals(&[n, h, s, 4], 2), vals(&[n, h, s, 3], 3));
            assert_fused_matches(&q, &k, &v, &c, &format!("causal [{n}, {h}], L {l}, S {s}"));
        }
        let split = |seed| heads(vals(&[2, 40, 8], seed), 2);
        let c8 = AttentionConfig { is_causal: true, scale: Some(0.8), ..Default::default() };
        assert_fused_matches(&split(4), &split(5), &split(6), &c8, "causal, split heads");
    }

    /// A bool mask of `shape`, `keep(i)` at flat index `i`.
    fn keep_mask(shape: &[usize], keep: impl Fn(usize) -> bool) -> Tensor {
        Tensor::from_vec_bool((0..shape.iter().product()).map(keep).collect(), shape)
    }

    /// Bool masks of the broadcast shapes the fused path reads in place: `[L, S]`, key
    /// padding `[N, 1, 1, S]` (right and left padded: the keys are bounded on both sides;
    /// and a batch entry with every key masked out), `[N, H, L, S]` (with fully masked
    /// rows), `[H, 1, S]` and `[L, 1]` (a fully masked row); over several batch entries
    /// (token-major) and one (head-major).
    #[test]
    fn fused_attention_bool_masks_match_the_composition() {
        let (n, h, l, s) = (2, 3, 6, 7);
        let (q, k, v) = (vals(&[n, h, l, 4], 1), vals(&[n, h, s, 4], 2), vals(&[n, h, s, 5], 3));
        let cases = [
            ("[L, S]", keep_mask(&[l, s], |i| i % 3 != 1)),
            ("[N, 1, 1, S] right-padded", keep_mask(&[n, 1, 1, s], |i| i % s < 5 - i / s * 2)),
            ("[N, 1, 1, S] left-padded", keep_mask(&[n, 1, 1, s], |i| i % s >= 2 + i / s)),
            ("[N, 1, 1, S], entry 1 all masked", keep_mask(&[n, 1, 1, s], |i| i < s && i % 2 == 0)),
            ("[N, H, L, S]", keep_mask(&[n, h, l, s], |i| (i * 7) % 5 != 0)),
            ("[N, H, L, S], dead rows", keep_mask(&[n, h, l, s], |i| (i / s) % 4 != 1 && i % 3 != 0)),
            ("[H, 1, S]", keep_mask(&[h, 1, s], |i| i % 4 != 2)),
            ("[L, 1]", keep_mask(&[l, 1], |i| i != 2)),
        ];
        for (what, m) in &cases {
            assert_fused_matches(&q, &k, &v, &AttentionConfig { attn_mask: Some(m), ..Default::default() }, what);
            let one = |t: &Tensor| t.narrow(0, 1, 1);
            let m1 = if m.rank() == 4 { one(m) } else { m.clone() };
            let o1 = AttentionConfig { attn_mask: Some(&m1), ..Default::default() };
            assert_fused_matches(&one(&q), &one(&k), &one(&v), &o1, &format!("{what}, one batch entry"));
        }
        // Dead rows give zeros: entry 1's keys are all masked out.
        let y = q.scaled_dot_product_attention(
            &k,
            &v,
            &AttentionConfig { attn_mask: Some(&cases[3].1), ..Default::default() },
        );
        let y = y.to_vec_f64();
        assert!(y[..y.len() / 2].iter().all(|x| *x != 0.0) && y[y.len() / 2..].iter().all(|x| *x == 0.0));
    }

    /// Float masks, added to the scores, with `-inf` entries (scattered, a whole row, the
    /// padded keys of a key padding mask), broadcast from `[L, S]` and `[N, 1, 1, S]`; a
    /// float mask that requires grad gets the composition's gradient (the scores',
    /// summed over the mask's broadcast).
    #[test]
    fn fused_attention_float_masks_match_the_composition() {
        let (n, h, l, s) = (2, 2, 5, 6);
        let (q, k, v) = (vals(&[n, h, l, 3], 1), vals(&[n, h, s, 3], 2), vals(&[n, h, s, 4], 3));
        let ninf = f64::NEG_INFINITY;
        let float = |shape: &[usize], f: &dyn Fn(usize) -> f64| {
            Tensor::from_vec_f64((0..shape.iter().product()).map(f).collect(), shape)
        };
        let cases = [
            ("[L, S]", float(&[l, s], &|i| if i % 5 == 3 { ninf } else { (i % 7) as f64 * 0.3 - 0.8 })),
            ("[L, S], row 1 dead", float(&[l, s], &|i| if i / s == 1 || i % 4 == 0 { ninf } else { 0.1 * i as f64 })),
            ("[N, 1, 1, S]", float(&[n, 1, 1, s], &|i| if i % s >= 4 - i / s { ninf } else { 0.2 * (i % 3) as f64 })),
            ("[N, H, L, S]", float(&[n, h, l, s], &|i| if i % 9 == 4 { ninf } else { (i % 11) as f64 * 0.1 - 0.5 })),
        ];
        for (what, m) in &cases {
            assert_fused_matches(&q, &k, &v, &AttentionConfig { attn_mask: Some(m), ..Default::default() }, what);
            let m = m.detach().requires_grad_(true);
            let o = AttentionConfig { attn_mask: Some(&m), ..Default::default() };
            assert_fused_matches(&q, &k, &v, &o, &format!("{what}, requiring grad"));
        }
    }

    /// `t: [N, H_kv, T, D]` with each head repeated for `groups` consecutive query heads
    /// (transformers' `repeat_kv`).
    fn repeat_kv(t: &Tensor, groups: usize) -> Tensor {
        let [n, hk, r, d]: [usize; 4] = t.shape().try_into().unwrap();
        t.unsqueeze(2).expand(&[n, hk, groups, r, d]).reshape(&[n, hk * groups, r, d])
    }

    /// Grouped-query attention (`enable_gqa`): 4 query heads on 2 and on 1 key and value
    /// heads, plain, causal and key-padded, one batch entry and two, against the
    /// composition (grouped products) and against the composition of the key and value
    /// heads repeated (their gradients summed back over each group).
    #[test]
    fn fused_grouped_query_attention_matches_the_composition() {
        let (l, s) = (5, 7);
        for n in [1, 2] {
            let pad = keep_mask(&[n, 1, 1, s], |i| i % s < 6 - i / s);
            for hk in [2, 1] {
                let (q, k, v) = (vals(&[n, 4, l, 4], 1), vals(&[n, hk, s, 4], 2), vals(&[n, hk, s, 3], 3));
                let configs = [
                    AttentionConfig { enable_gqa: true, ..Default::default() },
                    AttentionConfig { enable_gqa: true, is_causal: true, ..Default::default() },
                    AttentionConfig { enable_gqa: true, attn_mask: Some(&pad), ..Default::default() },
                ];
                for o in &configs {
                    let what = format!("GQA N {n}, H_kv {hk}, causal {}, mask {}", o.is_causal, o.attn_mask.is_some());
                    assert_fused_matches(&q, &k, &v, o, &what);
                    let plain = AttentionConfig { enable_gqa: false, ..o.clone() };
                    let repeated = grads_of((&q, &k, &v), None, |q, k, v| {
                        q.scaled_dot_product_attention_with_weights(
                            &repeat_kv(k, 4 / hk),
                            &repeat_kv(v, 4 / hk),
                            &plain,
                        )
                        .0
                    });
                    assert_parts_close(&attend(&q, &k, &v, o, true), &repeated, 1e-12, &format!("{what}, repeated"));
                }
            }
        }
    }

    #[test]
    #[should_panic(
        expected = "scaled_dot_product_attention: query [1, 4, 3, 2] has 4 heads (dim -3), not a multiple of key [1, 3, 3, 2]'s 3 (enable_gqa)"
    )]
    fn grouped_query_heads_must_divide() {
        let (q, kv) = (Tensor::zeros(&[1, 4, 3, 2]), Tensor::zeros(&[1, 3, 3, 2]));
        q.scaled_dot_product_attention(&kv, &kv, &AttentionConfig { enable_gqa: true, ..Default::default() });
    }

    #[test]
    #[should_panic(
        expected = "scaled_dot_product_attention: query [1, 4, 3, 2] and key [1, 2, 3, 2] have different numbers of heads (dim -3) 4 and 2; set enable_gqa for grouped-query attention"
    )]
    fn different_head_counts_need_enable_gqa() {
        let (q, kv) = (Tensor::zeros(&[1, 4, 3, 2]), Tensor::zeros(&[1, 2, 3, 2]));
        q.scaled_dot_product_attention(&kv, &kv, &AttentionConfig::default());
    }

    /// Dropout on the weights: under one seed the fused path draws the composition's stream
    /// (one draw per weight, in order), so it drops the same weights and gives the same
    /// output and gradients (its backward through the dropped weights, the softmax's through
    /// the undropped ones), and leaves the generator where the composition does; plain,
    /// causal, masked with a dead row, grouped, in f64 and f32.
    #[test]
    fn fused_attention_dropout_matches_the_composition_under_one_seed() {
        let _rng = rng_lock();
        let (q, k, v) = (vals(&[2, 2, 6, 4], 1), vals(&[2, 2, 7, 4], 2), vals(&[2, 2, 7, 3], 3));
        let m = keep_mask(&[2, 1, 6, 7], |i| i / 7 != 2 && i % 7 != 5);
        let kv1 = |t: &Tensor| t.narrow(1, 0, 1);
        fn d(o: AttentionConfig<'_>) -> AttentionConfig<'_> {
            AttentionConfig { dropout_p: 0.3, ..o }
        }
        let cases = [
            ("plain", d(AttentionConfig::default()), false),
            ("causal", d(AttentionConfig { is_causal: true, ..Default::default() }), false),
            ("masked", d(AttentionConfig { attn_mask: Some(&m), ..Default::default() }), false),
            ("grouped", d(AttentionConfig { enable_gqa: true, is_causal: true, ..Default::default() }), true),
        ];
        for (what, o, grouped) in &cases {
            let (k, v) = if *grouped { (kv1(&k), kv1(&v)) } else { (k.clone(), v.clone()) };
            let undropped = attend(&q, &k, &v, &AttentionConfig { dropout_p: 0.0, ..o.clone() }, true)[0].clone();
            for seed in [3, 4] {
                manual_seed(seed);
                let want = attend(&q, &k, &v, o, false);
                let after_composed = Tensor::rand(&[3]).to_vec();
                manual_seed(seed);
                let got = attend(&q, &k, &v, o, true);
                assert_eq!(Tensor::rand(&[3]).to_vec(), after_composed, "{what}: the generator moved on alike");
                assert_parts_close(&got, &want, 1e-12, &format!("{what}, seed {seed}"));
                assert_ne!(got[0], undropped, "{what}: dropout ran");
                let f = |t: &Tensor| t.to_dtype(DType::F32);
                manual_seed(seed);
                let want32 = f(&q).scaled_dot_product_attention_with_weights(&f(&k), &f(&v), o).0;
                manual_seed(seed);
                let got32 = f(&q).scaled_dot_product_attention(&f(&k), &f(&v), o);
                for (a, b) in got32.to_vec().iter().zip(want32.to_vec()) {
                    assert!((a - b).abs() < 1e-5, "{what}: f32 {a} against {b}");
                }
            }
        }
    }

    /// Finite-difference gradients of the fused path in f64 under each mask kind: causal
    /// over several query blocks, bool key padding and `[N, H, L, S]` masks (with a dead
    /// row), a float mask (its gradient checked too), grouped-query heads, and dropout
    /// under a fixed seed.
    #[test]
    fn fused_attention_masks_gradcheck() {
        let (q, k, v) = (vals(&[1, 2, 40, 2], 1), vals(&[1, 2, 36, 2], 2), vals(&[1, 2, 36, 2], 3));
        let o = AttentionConfig { is_causal: true, ..Default::default() };
        gradcheck(|t| t[0].scaled_dot_product_attention(&t[1], &t[2], &o), &[q, k, v]).unwrap();
        let (q, k, v) = (vals(&[2, 2, 3, 2], 1), vals(&[2, 2, 5, 2], 2), vals(&[2, 2, 5, 3], 3));
        let pad = keep_mask(&[2, 1, 1, 5], |i| i % 5 != 4 && i != 5);
        let full = keep_mask(&[2, 2, 3, 5], |i| (i / 5) % 3 != 1 && i % 4 != 1);
        for m in [&pad, &full] {
            let o = AttentionConfig { attn_mask: Some(m), ..Default::default() };
            gradcheck(|t| t[0].scaled_dot_product_attention(&t[1], &t[2], &o), &[q.clone(), k.clone(), v.clone()])
                .unwrap();
        }
        let additive = vals(&[2, 1, 3, 5], 4);
        gradcheck(
            |t| {
                let o = AttentionConfig { attn_mask: Some(&t[3]), ..Default::default() };
                t[0].scaled_dot_product_attention(&t[1], &t[2], &o)
            },
            &[q.clone(), k.clone(), v.clone(), additive],
        )
        .unwrap();
        let (k1, v1) = (k.narrow(1, 0, 1), v.narrow(1, 0, 1));
        let o = AttentionConfig { enable_gqa: true, attn_mask: Some(&pad), ..Default::default() };
        gradcheck(|t| t[0].scaled_dot_product_attention(&t[1], &t[2], &o), &[q.clone(), k1, v1]).unwrap();
        let _rng = rng_lock();
        let o = AttentionConfig { dropout_p: 0.4, is_causal: true, ..Default::default() };
        let f = |t: &[Tensor]| {
            manual_seed(5);
            t[0].scaled_dot_product_attention(&t[1], &t[2], &o)
        };
        gradcheck(f, &[q, k, v]).unwrap();
    }

    /// NaN and infinities in the operands propagate as through the composition, without
    /// a panic or a hang: a NaN query row makes its output row NaN and leaves the others;
    /// a NaN key reaches the rows that attend to it; an infinite score makes its row NaN
    /// (`inf - inf` in the softmax), under no mask, a causal one, and a key padding one.
    #[test]
    fn fused_attention_propagates_nan_and_inf_as_the_composition() {
        let (q, k, v) = (vals(&[2, 2, 5, 3], 1), vals(&[2, 2, 5, 3], 2), vals(&[2, 2, 5, 3], 3));
        let set = |t: &Tensor, i: usize, x: f64| {
            let mut d = t.to_vec_f64();
            d[i] = x;
            Tensor::from_vec_f64(d, t.shape())
        };
        let pad = keep_mask(&[2, 1, 1, 5], |i| i % 5 != 3);
        let configs = [
            AttentionConfig::default(),
            AttentionConfig { is_causal: true, ..Default::default() },
            AttentionConfig { attn_mask: Some(&pad), ..Default::default() },
        ];
        let inputs = [
            ("NaN query", set(&q, 7, f64::NAN), k.clone(), v.clone()),
            ("NaN key", q.clone(), set(&k, 2 * 3 + 1, f64::NAN), v.clone()),
            ("infinite query", set(&q, 16, f64::INFINITY), k.clone(), v.clone()),
            ("infinite key", q.clone(), set(&k, 35, f64::NEG_INFINITY), v.clone()),
            ("NaN value", q.clone(), k.clone(), set(&v, 40, f64::NAN)),
        ];
        for (what, q, k, v) in &inputs {
            for o in &configs {
                let what = format!("{what}, causal {}, mask {}", o.is_causal, o.attn_mask.is_some());
                let composed = q.scaled_dot_product_attention_with_weights(k, v, o).0.to_vec_f64();
                let y = q.scaled_dot_product_attention(k, v, o);
                assert_close64(&y.to_vec_f64(), &composed, 1e-12);
                assert!(composed.iter().any(|x| x.is_nan()) || what.starts_with("infinite key"), "{what}");
                let q = q.detach().requires_grad_(true);
                q.scaled_dot_product_attention(k, v, o).sum().backward();
                assert_eq!(q.grad().unwrap().shape(), q.shape(), "{what}");
            }
        }
        // A dead row passes no gradient, even from a NaN value (which its zero weights
        // still carry into the output, as the composition's product does).
        let dead = keep_mask(&[5, 5], |i| i / 5 != 1);
        let o = AttentionConfig { attn_mask: Some(&dead), ..Default::default() };
        let nan_v = set(&v, 40, f64::NAN);
        let want = grads_of((&q, &k, &nan_v), None, |q, k, v| q.scaled_dot_product_attention_with_weights(k, v, &o).0);
        let got = grads_of((&q, &k, &nan_v), None, |q, k, v| q.scaled_dot_product_attention(k, v, &o));
        assert_parts_close(&got[..2], &want[..2], 1e-12, "dead row, NaN value");
        // (The NaN is entry 1, head 0's value 3; that head's row 1 is dead.)
        assert!(got[1][33..36].iter().all(|g| *g == 0.0), "{:?}", &got[1][30..45]);
        // A NaN key the mask leaves out (entry 0's key 3) reaches no row.
        let o = &configs[2];
        let y = q.scaled_dot_product_attention(&set(&k, 3 * 3 + 1, f64::NAN), &v, o).to_vec_f64();
        assert!(y.iter().all(|x| x.is_finite()), "{y:?}");
        // The NaN query row (batch 0, head 0, row 2) is NaN; the rows beside it are finite.
        let y = set(&q, 7, f64::NAN).scaled_dot_product_attention(&k, &v, &AttentionConfig::default()).to_vec_f64();
        assert!(
            y[6..9].iter().all(|x| x.is_nan())
                && y.iter().enumerate().all(|(i, x)| (6..9).contains(&i) || x.is_finite())
        );
    }

    #[test]
    #[should_panic(
        expected = "scaled_dot_product_attention: attn_mask of shape [2, 1, 1, 5] cannot be broadcast to the scores' shape [3, 2, 4, 5]"
    )]
    fn attention_key_padding_mask_of_another_batch_panics() {
        let (q, kv) = (Tensor::zeros(&[3, 2, 4, 8]), Tensor::zeros(&[3, 2, 5, 8]));
        let m = Tensor::from_vec_bool(vec![true; 10], &[2, 1, 1, 5]);
        q.scaled_dot_product_attention(&kv, &kv, &AttentionConfig { attn_mask: Some(&m), ..Default::default() });
    }

    /// While a trace records, the composition runs, so export sees matmul and softmax.
    #[test]
    fn fused_attention_is_composed_while_tracing() {
        let (q, k, v) = (vals(&[2, 3, 4], 1), vals(&[2, 5, 4], 2), vals(&[2, 5, 3], 3));
        let (y, trace) =
            crate::autograd::trace::trace(|| q.scaled_dot_product_attention(&k, &v, &AttentionConfig::default()));
        let names: Vec<&str> = trace.ops.iter().map(|o| o.name).collect();
        assert!(names.contains(&"softmax") && !names.contains(&"scaled_dot_product_attention"), "{names:?}");
        let fused = q.scaled_dot_product_attention(&k, &v, &AttentionConfig::default());
        assert_close64(&y.to_vec_f64(), &fused.to_vec_f64(), 1e-14);
    }

    #[test]
    fn attention_batches_heads_and_broadcasts_the_mask() {
        // [B = 2, H = 2, L = 3, E = 4] against keys of length 5, mask [L, S] broadcast.
        let (q, k, v) = (vals(&[2, 2, 3, 4], 1), vals(&[2, 2, 5, 4], 2), vals(&[2, 2, 5, 3], 3));
        let m = Tensor::from_vec_bool((0..15).map(|i| i % 4 != 1).collect(), &[3, 5]);
        let o = AttentionConfig { attn_mask: Some(&m), ..Default::default() };
        let y = q.scaled_dot_product_attention(&k, &v, &o);
        assert_eq!(y.shape(), &[2, 2, 3, 3]);
        // The same composed by hand.
        let scores = q.matmul(&k.transpose(-2, -1)) * 0.5;
        let manual = scores.masked_fill(&m.logical_not(), f64::NEG_INFINITY).softmax(-1).matmul(&v);
        assert_close64(&y.to_vec_f64(), &manual.to_vec_f64(), 1e-14);
    }

    #[test]
    fn attention_on_noncontiguous_inputs() {
        let (q, k, v) = (vals(&[2, 3, 2], 1), vals(&[2, 4, 2], 2), vals(&[2, 4, 3], 3));
        check_noncontig(
            |t| {
                t[0].scaled_dot_product_attention(
                    &t[1],
                    &t[2],
                    &AttentionConfig { is_causal: true, ..Default::default() },
                )
            },
            &[q.clone(), k.clone(), v.clone()],
        );
        // Heads split out of a [B, L, H * E] projection by a transpose, as in multi-head
        // attention.
        let proj = vals(&[2, 3, 4], 5);
        let heads = proj.reshape(&[2, 3, 2, 2]).transpose(1, 2);
        assert!(!heads.is_contiguous());
        let o = AttentionConfig::default();
        assert_eq!(
            heads.scaled_dot_product_attention(&heads, &heads, &o).to_vec_f64(),
            heads.contiguous().scaled_dot_product_attention(&heads.contiguous(), &heads.contiguous(), &o).to_vec_f64()
        );
    }

    #[test]
    fn attention_dropout_drops_weights_reproducibly() {
        let _rng = rng_lock();
        let (q, k, v) = (vals(&[4, 2], 1), vals(&[5, 2], 2), vals(&[5, 3], 3));
        let plain = q.scaled_dot_product_attention_with_weights(&k, &v, &AttentionConfig::default()).1.to_vec_f64();
        let o = AttentionConfig { dropout_p: 0.5, ..Default::default() };
        manual_seed(9);
        let (y, w) = q.scaled_dot_product_attention_with_weights(&k, &v, &o);
        for (d, p) in w.to_vec_f64().iter().zip(&plain) {
            assert!(*d == 0.0 || (d - 2.0 * p).abs() < 1e-15, "{d} vs {p}");
        }
        assert_close64(&y.to_vec_f64(), &w.matmul(&v).to_vec_f64(), 1e-15);
        manual_seed(9);
        assert_eq!(q.scaled_dot_product_attention(&k, &v, &o).to_vec_f64(), y.to_vec_f64());
    }

    #[test]
    fn attention_on_meta() {
        let q = Tensor::full_on(&[2, 4, 6, 8], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        let kv = Tensor::full_on(&[2, 4, 7, 8], 0.0, DType::F32, Device::Meta);
        let y = q.scaled_dot_product_attention(&kv, &kv, &AttentionConfig::default());
        assert_eq!((y.shape(), y.device()), (&[2, 4, 6, 8][..], Device::Meta));
        let c = q.scaled_dot_product_attention(&q, &q, &AttentionConfig { is_causal: true, ..Default::default() });
        assert_eq!((c.shape(), c.device()), (&[2, 4, 6, 8][..], Device::Meta));
        c.sum().backward();
        assert_eq!(q.grad().unwrap().shape(), &[2, 4, 6, 8]);
    }

    #[test]
    #[should_panic(expected = "scaled_dot_product_attention: explicit attn_mask should not be set when is_causal=true")]
    fn attention_causal_with_mask_panics() {
        let (q, k, v) = qkv();
        let m = bool_mask();
        q.scaled_dot_product_attention(
            &k,
            &v,
            &AttentionConfig { attn_mask: Some(&m), is_causal: true, ..Default::default() },
        );
    }

    #[test]
    #[should_panic(
        expected = "scaled_dot_product_attention: query [2, 3] and key [4, 2] have different embedding sizes 3 and 2"
    )]
    fn attention_embedding_mismatch_names_both_shapes() {
        Tensor::zeros(&[2, 3]).scaled_dot_product_attention(
            &Tensor::zeros(&[4, 2]),
            &Tensor::zeros(&[4, 2]),
            &AttentionConfig::default(),
        );
    }

    #[test]
    #[should_panic(
        expected = "scaled_dot_product_attention: attn_mask of shape [3, 3] cannot be broadcast to the scores' shape [2, 3]"
    )]
    fn attention_mask_shape_mismatch_panics() {
        let (q, k, v) = qkv();
        let m = Tensor::from_vec_bool(vec![true; 9], &[3, 3]);
        q.scaled_dot_product_attention(&k, &v, &AttentionConfig { attn_mask: Some(&m), ..Default::default() });
    }
}
