//! Scaled dot-product attention, composed from differentiable primitives.

use std::sync::Arc;

use smallvec::smallvec;

use crate::autograd::{op_result, Grads};
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
}

impl Tensor {
    /// `softmax(q k^T * scale + mask) v` for `q: [..., L, E]`, `k: [..., S, E]`,
    /// `v: [..., S, Ev]`; output `[..., L, Ev]`. A query row whose every key position is
    /// masked out gives zeros, and passes no gradient, as PyTorch 2.5 and later (its "safe
    /// softmax"; earlier versions gave NaN).
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
    /// Without mask or dropout, on rank-3 or rank-4 operands of one batch shape, the CPU
    /// runs it fused (one task per batch entry, each head's scores kept in the cache) and
    /// writes the output token-major: `[N, H, L, Ev]` is stored as `[N, L, H, Ev]`, so the
    /// heads merge back into `[N, L, H Ev]` as a view. (With `N = 1`, the heads are the
    /// tasks and the output is stored as it is shaped.) Elsewhere, and while a trace records
    /// (export sees the standard ops), the composition of matmul, softmax and matmul runs.
    #[track_caller]
    pub fn scaled_dot_product_attention(&self, key: &Tensor, value: &Tensor, options: &AttentionConfig<'_>) -> Tensor {
        if let Some(y) = fused(self, key, value, options) {
            return y;
        }
        self.scaled_dot_product_attention_with_weights(key, value, options).0
    }

    /// Like [`scaled_dot_product_attention`](Tensor::scaled_dot_product_attention), also
    /// returning the attention weights `[..., L, S]` (after dropout, as PyTorch's
    /// `MultiheadAttention` returns them).
    #[track_caller]
    pub fn scaled_dot_product_attention_with_weights(
        &self,
        key: &Tensor,
        value: &Tensor,
        options: &AttentionConfig<'_>,
    ) -> (Tensor, Tensor) {
        const OP: &str = "scaled_dot_product_attention";
        let (q, k, v) = (self, key, value);
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
        if options.is_causal && options.attn_mask.is_some() {
            panic!("{OP}: explicit attn_mask should not be set when is_causal=true");
        }
        if let Some(m) = options.attn_mask {
            check_mask_dtype(m, q);
        }
        let l = q.shape()[q.rank() - 2];
        let scale = options.scale.unwrap_or(1.0 / (e as f64).sqrt());
        let mut scores = q.matmul(&k.transpose(-2, -1)) * scale;
        let causal;
        let mask = if options.is_causal {
            let m: Vec<bool> = (0..l).flat_map(|i| (0..s).map(move |j| j <= i)).collect();
            causal = Tensor::from_vec_bool(m, &[l, s]).to_device(q.device());
            Some(causal)
        } else {
            options.attn_mask.cloned()
        };
        if let Some(m) = mask {
            if crate::shape::broadcast_shapes(m.shape(), scores.shape()).is_none_or(|b| b.as_slice() != scores.shape())
            {
                panic!(
                    "{OP}: attn_mask of shape {:?} cannot be broadcast to the scores' shape {:?}",
                    m.shape(),
                    scores.shape()
                );
            }
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
        (weights.matmul(v), weights)
    }
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

/// Softmax over the last dim where a row whose every score is `-inf` (every key masked
/// out) gives zeros instead of NaN, and passes no gradient (PyTorch's `_safe_softmax`).
fn safe_softmax(scores: &Tensor) -> Tensor {
    // A row is dead when it counts as many `-inf` as it has keys (built from ops that
    // export to ONNX: Equal, Cast, ReduceSum).
    let full = |v: f64| Tensor::full_on(&[], v, scores.dtype(), scores.device());
    let masked = scores.detach().eq(&full(f64::NEG_INFINITY)).to_dtype(scores.dtype());
    let keys = scores.shape()[scores.rank() - 1] as f64;
    let dead = masked.sum_dim(-1, true).eq(&full(keys));
    // Finite scores in dead rows, so the softmax and its backward stay finite there; the
    // fill below then zeroes both the rows and their gradients.
    scores.masked_fill(&dead, 0.0).softmax(-1).masked_fill(&dead, 0.0)
}

/// Strides of `shape` (`[.., rows, cols]`, rank 3 or 4) stored token-major: `[N, H, R, C]`
/// as `[N, R, H, C]` in memory (rank 3 is contiguous).
fn token_major(shape: &[usize]) -> Dims {
    match *shape {
        [_, r, c] => smallvec![r * c, c, 1],
        [_, h, r, c] => smallvec![r * h * c, c, h * c, 1],
        _ => unreachable!("the fused attention takes ranks 3 and 4"),
    }
}

/// The fused attention (see [`Tensor::scaled_dot_product_attention`]), or `None` where
/// the composition runs.
fn fused(q: &Tensor, k: &Tensor, v: &Tensor, options: &AttentionConfig<'_>) -> Option<Tensor> {
    let r = q.rank();
    let plain = options.attn_mask.is_none() && !options.is_causal && options.dropout_p == 0.0;
    let ranks = (r == 3 || r == 4) && k.rank() == r && v.rank() == r;
    if !plain || !ranks || crate::autograd::trace::is_tracing() {
        return None;
    }
    if r == 4 && q.shape()[0] == 1 && q.shape()[1] > 1 && k.shape()[0] == 1 && v.shape()[0] == 1 {
        // One batch entry of several heads: as rank 3, so that the heads (not the single
        // entry) are the tasks; the output is then stored head-major.
        let one = |t: &Tensor| t.squeeze_dim(0);
        return fused(&one(q), &one(k), &one(v), options).map(|y| y.unsqueeze(0));
    }
    let (batch, (l, e)) = (&q.shape()[..r - 2], (q.shape()[r - 2], q.shape()[r - 1]));
    let (s, ev) = (k.shape()[r - 2], v.shape()[r - 1]);
    let shapes =
        k.shape()[..r - 2] == *batch && v.shape()[..r - 2] == *batch && k.shape()[r - 1] == e && v.shape()[r - 2] == s;
    let dtypes = q.dtype().is_float() && k.dtype() == q.dtype() && v.dtype() == q.dtype();
    if !shapes || !dtypes || q.numel() == 0 || k.numel() == 0 || v.numel() == 0 || ev == 0 {
        return None;
    }
    let scale = options.scale.unwrap_or(1.0 / (e as f64).sqrt());
    let (qs, ks, vs) = (q.storage_arc(), k.storage_arc(), v.storage_arc());
    let [out, weights] = qs.attention_fused(q.layout(), (&ks, k.layout()), (&vs, v.layout()), scale)?;
    let out_shape: Dims = batch.iter().copied().chain([l, ev]).collect();
    let layout = Layout::new(out_shape.clone(), token_major(&out_shape), 0);
    Some(op_result("scaled_dot_product_attention", Arc::new(out), layout, &[q, k, v], || {
        let (lq, lk, lv) = (q.layout().clone(), k.layout().clone(), v.layout().clone());
        let shapes: [Dims; 3] = [q.shape().into(), k.shape().into(), v.shape().into()];
        move |g: &Tensor, needs: &[bool]| -> Grads {
            let grads = g
                .storage_arc()
                .attention_fused_backward(g.layout(), &weights, (&qs, &lq), (&ks, &lk), (&vs, &lv), scale)
                .expect("scaled_dot_product_attention: the backend that ran the fused forward runs its backward");
            grads
                .into_iter()
                .zip(&shapes)
                .zip(needs)
                .map(|((gs, shape), &need)| {
                    need.then(|| {
                        Tensor::from_parts(Arc::new(gs), Layout::new(shape.clone(), token_major(shape), 0), None)
                    })
                })
                .collect()
        }
    }))
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

    /// The composition the fused path replaces (a zero-probability dropout keeps it
    /// composed), its output and its gradients through a weighted sum.
    fn composed_and_grads(q: &Tensor, k: &Tensor, v: &Tensor, scale: Option<f64>, fused: bool) -> [Vec<f64>; 4] {
        let (q, k, v) =
            (q.detach().requires_grad_(true), k.detach().requires_grad_(true), v.detach().requires_grad_(true));
        let o = AttentionConfig { scale, ..Default::default() };
        let y = if fused {
            q.scaled_dot_product_attention(&k, &v, &o)
        } else {
            q.scaled_dot_product_attention_with_weights(&k, &v, &o).0
        };
        let w = vals(y.shape(), 7);
        (&y * &w).sum().backward();
        [y.to_vec_f64(), grad(&q), grad(&k), grad(&v)]
    }

    /// The fused CPU path (no mask, no dropout, ranks 3 and 4) against the composition,
    /// values and gradients, f64 and f32, with heads read in place out of a token-major
    /// projection as multi-head attention splits them; its output and gradients are
    /// token-major, so the heads merge back as a view.
    #[test]
    fn fused_attention_matches_the_composition() {
        let heads = |t: Tensor, h: usize| {
            let (n, l, e) = (t.shape()[0], t.shape()[1], t.shape()[2]);
            t.reshape(&[n, l, h, e / h]).transpose(1, 2)
        };
        let cases = [
            (vals(&[2, 3, 4], 1), vals(&[2, 5, 4], 2), vals(&[2, 5, 3], 3)),
            (vals(&[2, 2, 3, 4], 1), vals(&[2, 2, 5, 4], 2), vals(&[2, 2, 5, 6], 3)),
            (heads(vals(&[3, 7, 8], 4), 2), heads(vals(&[3, 9, 8], 5), 2), heads(vals(&[3, 9, 12], 6), 2)),
            (vals(&[1, 17, 16], 1), vals(&[1, 33, 16], 2), vals(&[1, 33, 16], 3)),
            (heads(vals(&[1, 6, 12], 7), 3), heads(vals(&[1, 4, 12], 8), 3), heads(vals(&[1, 4, 6], 9), 3)),
        ];
        for (q, k, v) in cases {
            for scale in [None, Some(0.3)] {
                let want = composed_and_grads(&q, &k, &v, scale, false);
                let got = composed_and_grads(&q, &k, &v, scale, true);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_close64(g, w, 1e-13);
                    assert!(!g.is_empty(), "part {i}");
                }
                let f = |t: &Tensor| t.to_dtype(DType::F32);
                let y32 = f(&q).scaled_dot_product_attention(
                    &f(&k),
                    &f(&v),
                    &AttentionConfig { scale, ..Default::default() },
                );
                assert_eq!(y32.dtype(), DType::F32);
                for (a, b) in y32.to_vec_f64().iter().zip(&want[0]) {
                    assert!((a - b).abs() < 1e-5, "f32 {a} against {b}");
                }
            }
        }
        // Token-major: the heads merge into [N, L, H Ev] without a copy.
        let (q, k, v) = (heads(vals(&[2, 5, 8], 1), 2), heads(vals(&[2, 5, 8], 2), 2), heads(vals(&[2, 5, 8], 3), 2));
        let y = q.scaled_dot_product_attention(&k, &v, &AttentionConfig::default());
        assert_eq!((y.shape(), y.strides()), (&[2, 2, 5, 4][..], &[40, 4, 8, 1][..]));
        assert!(y.transpose(1, 2).is_contiguous());
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
