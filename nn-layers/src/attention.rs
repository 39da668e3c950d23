//! `MultiheadAttention` and its input, `AttentionInput`.

use nn_core::module::HoldsState;
use std::borrow::Cow;

use nn_core::module::ForwardArg;
use nn_core::{init, Compute, DType, Forward, HasBase, Item, Module, ModuleBase, ModuleIo, Name, Parameter, Tensor};

use crate::Linear;

/// Multi-head attention (PyTorch's `nn.MultiheadAttention`, same-size query, key and
/// value).
///
/// Parameters: `in_proj_weight` `[3E, E]` (Xavier uniform), `in_proj_bias` `[3E]`
/// (zeros), `out_proj.weight` `[E, E]` (Linear's init), `out_proj.bias` `[E]` (zeros).
/// Inputs are `[L, N, E]`, `[N, L, E]` with `batch_first`, or unbatched `[L, E]`; see
/// [`AttentionInput`]. The output is `(attn_output, attn_weights)`, as PyTorch's.
#[derive(Module)]
pub struct MultiheadAttention {
    /// `[3 * embed_dim, embed_dim]`: the query, key and value projections stacked.
    #[param]
    pub in_proj_weight: Parameter,
    /// `[3 * embed_dim]`.
    #[param]
    pub in_proj_bias: Option<Parameter>,
    /// The output projection.
    #[module]
    pub out_proj: NonDynamicallyQuantizableLinear,
    #[base]
    base: ModuleBase,
    embed_dim: usize,
    num_heads: usize,
    dropout: f64,
    batch_first: bool,
}

/// The input of [`MultiheadAttention`]: PyTorch's `forward(query, key, value,
/// key_padding_mask=None, need_weights=True, attn_mask=None, average_attn_weights=True)`.
///
/// `mha.forward(&x)` is self-attention on `x`; `mha.forward((&q, &k, &v))` takes three
/// tensors; masks are added with the builder methods:
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::{AttentionInput, MultiheadAttention};
/// let mha = MultiheadAttention::with_options(8, 2, 0.0, true, true); // batch_first
/// let x = Tensor::randn(&[3, 5, 8]);
/// let pad = Tensor::from_vec_bool(vec![false, false, false, true, true].repeat(3), &[3, 5]);
/// let (y, w) = mha.forward(&AttentionInput::new(&x, &x, &x).key_padding_mask(&pad));
/// assert_eq!((y.shape(), w.unwrap().shape()), (&[3, 5, 8][..], &[3, 5, 5][..]));
/// // Unbatched `[L, E]` input, as in PyTorch.
/// assert_eq!(mha.forward(&Tensor::randn(&[5, 8])).0.shape(), &[5, 8]);
/// ```
#[derive(Clone, Debug, ModuleIo)]
pub struct AttentionInput {
    /// `[L, N, E]` (`[N, L, E]` batch-first, `[L, E]` unbatched): the primary input, which
    /// hooks see.
    #[io(primary)]
    pub query: Tensor,
    /// `[S, N, E]` (`[N, S, E]`, `[S, E]`).
    pub key: Tensor,
    /// `[S, N, E]` (`[N, S, E]`, `[S, E]`).
    pub value: Tensor,
    /// `[N, S]` (`[S]` unbatched), one of PyTorch's two kinds:
    /// - `Bool`: **`true` = ignore this key position** (padding);
    /// - floating point, of the query's dtype: added to the scores (`-inf` = ignore).
    ///
    /// Any other dtype panics. Hugging Face's `attention_mask` (i64, **1 = attend**) is the
    /// opposite polarity of the bool form: an integer mask is refused rather than read one
    /// way or the other.
    pub key_padding_mask: Option<Tensor>,
    /// `[L, S]` or `[N * heads, L, S]` (`[heads, L, S]` unbatched), one of PyTorch's two
    /// kinds:
    /// - `Bool`: **`true` = may not attend** (the opposite of
    ///   `scaled_dot_product_attention`'s bool mask, as in PyTorch);
    /// - floating point, of the query's dtype: added to the scores (`-inf` = may not attend).
    ///
    /// Any other dtype panics.
    pub attn_mask: Option<Tensor>,
    /// Return the attention weights (default true, as PyTorch).
    pub need_weights: bool,
    /// Average the returned weights over heads (default true).
    pub average_attn_weights: bool,
}

impl AttentionInput {
    /// Query, key and value, no masks, weights returned averaged over heads.
    pub fn new(query: &Tensor, key: &Tensor, value: &Tensor) -> Self {
        AttentionInput {
            query: query.clone(),
            key: key.clone(),
            value: value.clone(),
            key_padding_mask: None,
            attn_mask: None,
            need_weights: true,
            average_attn_weights: true,
        }
    }

    /// Self-attention: `x` as query, key and value.
    pub fn self_attention(x: &Tensor) -> Self {
        Self::new(x, x, x)
    }

    /// Sets the key padding mask.
    pub fn key_padding_mask(mut self, mask: &Tensor) -> Self {
        self.key_padding_mask = Some(mask.clone());
        self
    }

    /// Sets the attention mask.
    pub fn attn_mask(mut self, mask: &Tensor) -> Self {
        self.attn_mask = Some(mask.clone());
        self
    }

    /// Whether to return the attention weights.
    pub fn need_weights(mut self, need: bool) -> Self {
        self.need_weights = need;
        self
    }

    /// Whether returned weights are averaged over heads.
    pub fn average_attn_weights(mut self, average: bool) -> Self {
        self.average_attn_weights = average;
        self
    }
}

impl<'a> ForwardArg<'a, AttentionInput> for &'a Tensor {
    fn into_input(self) -> Cow<'a, AttentionInput> {
        Cow::Owned(AttentionInput::self_attention(self))
    }
}

impl<'a> ForwardArg<'a, AttentionInput> for (&'a Tensor, &'a Tensor, &'a Tensor) {
    fn into_input(self) -> Cow<'a, AttentionInput> {
        Cow::Owned(AttentionInput::new(self.0, self.1, self.2))
    }
}

/// A checked mask as an additive float tensor (`-inf` where a bool mask is `true`; a float
/// mask, already of the scores' dtype, as it is).
fn additive(mask: &Tensor, like: &Tensor) -> Tensor {
    if mask.dtype() == DType::Bool {
        Tensor::full_on(mask.shape(), 0.0, like.dtype(), like.device()).masked_fill(mask, f64::NEG_INFINITY)
    } else {
        mask.clone()
    }
}

/// What each mask argument of [`MultiheadAttention`] means in its two accepted kinds.
const KEY_PADDING_KINDS: &str = "a bool mask (true = ignore this key position) or a float mask of the query's dtype \
                                 (added to the scores, -inf = ignore)";
const ATTN_MASK_KINDS: &str = "a bool mask (true = may not attend) or a float mask of the query's dtype (added to \
                               the scores, -inf = may not attend)";

impl MultiheadAttention {
    /// Attention with `num_heads` heads over `embed_dim` features, no dropout, sequence-first
    /// inputs.
    ///
    /// # Panics
    /// When `embed_dim` is not divisible by `num_heads`.
    #[track_caller]
    pub fn new(embed_dim: usize, num_heads: usize) -> Self {
        Self::with_options(embed_dim, num_heads, 0.0, true, false)
    }

    /// All options (PyTorch's `dropout`, `bias`, `batch_first`).
    ///
    /// # Panics
    /// As [`new`](MultiheadAttention::new), and when `dropout` is not in `[0, 1]` (PyTorch
    /// does not check it here: a negative or NaN one turned dropout off without a word, as
    /// [`Dropout::new`](crate::Dropout::new) refuses).
    #[track_caller]
    pub fn with_options(embed_dim: usize, num_heads: usize, dropout: f64, bias: bool, batch_first: bool) -> Self {
        if num_heads == 0 || !embed_dim.is_multiple_of(num_heads) {
            panic!("MultiheadAttention: embed_dim {embed_dim} must be divisible by num_heads {num_heads}");
        }
        if !(0.0..=1.0).contains(&dropout) {
            panic!("MultiheadAttention: dropout probability has to be between 0 and 1, but got {dropout}");
        }
        let w = Tensor::zeros(&[3 * embed_dim, embed_dim]);
        init::xavier_uniform_(&w, 1.0);
        let out_proj = NonDynamicallyQuantizableLinear(Linear::with_bias(embed_dim, embed_dim, bias));
        if let Some(b) = &out_proj.bias {
            init::zeros_(b);
        }
        MultiheadAttention {
            in_proj_weight: Parameter::new(w),
            in_proj_bias: bias.then(|| Parameter::new(Tensor::zeros(&[3 * embed_dim]))),
            out_proj,
            base: ModuleBase::default(),
            embed_dim,
            num_heads,
            dropout,
            batch_first,
        }
    }

    /// The feature size `E` (PyTorch's `embed_dim`).
    pub fn embed_dim(&self) -> usize {
        self.embed_dim
    }

    /// The number of heads (PyTorch's `num_heads`).
    pub fn num_heads(&self) -> usize {
        self.num_heads
    }

    /// The layer's short name in messages.
    fn label(&self) -> String {
        format!("MultiheadAttention(embed_dim={}, num_heads={})", self.embed_dim, self.num_heads)
    }

    /// Checks the input's shapes; returns whether it is batched. Every message names the
    /// layer and the shapes involved.
    #[track_caller]
    fn check(&self, a: &AttentionInput) -> bool {
        let (e, name) = (self.embed_dim, self.label());
        let (q, k, v) = (&a.query, &a.key, &a.value);
        let batched = match q.rank() {
            3 => true,
            2 => false,
            _ => panic!(
                "{name}: query must be [L, N, E], [N, L, E] (batch_first) or unbatched [L, E], got {:?}",
                q.shape()
            ),
        };
        let layout = match (batched, self.batch_first) {
            (false, _) => "[L, E]",
            (true, false) => "[L, N, E]",
            (true, true) => "[N, L, E]",
        };
        if q.shape()[q.rank() - 1] != e {
            panic!("{name} expects query {layout} with E = {e}, got {:?}", q.shape());
        }
        for (what, t) in [("key", k), ("value", v)] {
            if t.rank() != q.rank() || t.shape()[t.rank() - 1] != e {
                panic!("{name} expects {what} {layout} with E = {e} (query {:?}), got {:?}", q.shape(), t.shape());
            }
        }
        if k.shape() != v.shape() {
            panic!("{name}: key {:?} and value {:?} must have the same shape", k.shape(), v.shape());
        }
        let batch_dim = if self.batch_first { 0 } else { 1 };
        if batched && k.shape()[batch_dim] != q.shape()[batch_dim] {
            panic!(
                "{name}: query {:?} and key {:?} have different batch sizes ({} vs {})",
                q.shape(),
                k.shape(),
                q.shape()[batch_dim],
                k.shape()[batch_dim]
            );
        }
        let seq = |t: &Tensor| if !batched || !self.batch_first { t.shape()[0] } else { t.shape()[1] };
        let (l, s) = (seq(q), seq(k));
        let n = if batched { q.shape()[batch_dim] } else { 1 };
        if let Some(m) = &a.attn_mask {
            let ok = m.shape() == [l, s] || m.shape() == [if batched { n } else { 1 } * self.num_heads, l, s];
            if !ok {
                let heads = if batched { format!("{n} * {}", self.num_heads) } else { self.num_heads.to_string() };
                panic!(
                    "{name}: attn_mask must be [L, S] = [{l}, {s}] or [{heads}, {l}, {s}] for query {:?} and key {:?}, got {:?}",
                    q.shape(),
                    k.shape(),
                    m.shape()
                );
            }
        }
        for (arg, mask, kinds) in
            [("key_padding_mask", &a.key_padding_mask, KEY_PADDING_KINDS), ("attn_mask", &a.attn_mask, ATTN_MASK_KINDS)]
        {
            let Some(m) = mask else { continue };
            let (d, qd) = (m.dtype(), q.dtype());
            if d == DType::Bool || d == qd {
                continue;
            }
            if d.is_float() {
                panic!(
                    "{name}: {arg} has dtype {d} but the query is {qd}; {arg} must be {kinds} (a float mask converts \
                     between float dtypes without changing its meaning)"
                );
            }
            panic!(
                "{name}: {arg} of shape {:?} has dtype {d}; only bool and floating-point masks are taken, as in \
                 PyTorch: {arg} must be {kinds}. An integer mask is refused because its polarity is ambiguous \
                 (Hugging Face's attention_mask is 1 = attend, the bool form here is true = ignore)",
                m.shape()
            );
        }
        if let Some(m) = &a.key_padding_mask {
            let expect: Vec<usize> = if batched { vec![n, s] } else { vec![s] };
            if m.shape() != expect.as_slice() {
                panic!(
                    "{name}: key_padding_mask must be {expect:?} ([N, S], or [S] unbatched) for key {:?}, got {:?}",
                    k.shape(),
                    m.shape()
                );
            }
        }
        batched
    }
}

impl Compute for MultiheadAttention {
    type Input = AttentionInput;
    /// The output (the query's layout) and, with `need_weights`, the weights `[N, L, S]`
    /// (`[N, heads, L, S]` unaveraged; without the `N` unbatched).
    type Output = (Tensor, Option<Tensor>);

    #[track_caller]
    fn compute(&self, a: &AttentionInput) -> (Tensor, Option<Tensor>) {
        if !self.check(a) {
            // Unbatched: run as a batch of one, as PyTorch does.
            let one = AttentionInput {
                query: a.query.unsqueeze(1),
                key: a.key.unsqueeze(1),
                value: a.value.unsqueeze(1),
                key_padding_mask: a.key_padding_mask.as_ref().map(|m| m.unsqueeze(0)),
                attn_mask: a.attn_mask.clone(),
                ..a.clone()
            };
            let batch_first = false;
            let (y, w) = self.attend(&one, batch_first);
            return (y.squeeze_dim(1), w.map(|w| w.squeeze_dim(0)));
        }
        self.attend(a, self.batch_first)
    }
}

impl MultiheadAttention {
    /// Batched attention on checked inputs.
    fn attend(&self, a: &AttentionInput, batch_first: bool) -> (Tensor, Option<Tensor>) {
        let e = self.embed_dim;
        // Work batch-first: [N, L, E].
        let (q, k, v) = if batch_first {
            (a.query.clone(), a.key.clone(), a.value.clone())
        } else {
            (a.query.transpose(0, 1), a.key.transpose(0, 1), a.value.transpose(0, 1))
        };
        let (n, l, s) = (q.shape()[0], q.shape()[1], k.shape()[1]);
        let (h, d) = (self.num_heads, e / self.num_heads);
        let w = &*self.in_proj_weight;
        let b = self.in_proj_bias.as_deref();
        let proj = |x: &Tensor, i: usize| {
            // One fused `x wi^T + bi` (the bias row added across the product).
            let bi = b.map(|b| b.narrow(0, i * e, e));
            let y = nn_core::functional::linear(x, &w.narrow(0, i * e, e), bi.as_ref());
            // The query is scaled by 1 / sqrt(D) here, while it is still contiguous (the
            // same products as scaling the [N, H, L, D] view, in one contiguous pass).
            let y = if i == 0 { y * (1.0 / (d as f64).sqrt()) } else { y };
            // [N, T, E] -> [N, H, T, D]
            y.reshape(&[n, x.shape()[1], h, d]).transpose(1, 2)
        };
        let (q, k, v) = (proj(&q, 0), proj(&k, 1), proj(&v, 2));
        let dropout = if self.base.is_training() { self.dropout } else { 0.0 };
        if !a.need_weights {
            // No weights to return: `scaled_dot_product_attention`, as PyTorch's
            // `multi_head_attention_forward` does, with both masks merged into one additive
            // mask. So a query row whose every key is masked out gives zeros there (and NaN
            // on the weights path below, as in PyTorch). On the CPU it runs fused, masks and
            // dropout included (the query is already scaled), its output stored token-major,
            // so merging the heads back is a view. The merged mask is never one per head
            // unless `attn_mask` is: a key padding mask alone stays `[N, 1, 1, S]` (whose
            // padded keys the fused kernel skips), with an `[L, S]` mask it is `[N, 1, L, S]`.
            let attn_mask = a.attn_mask.as_ref().map(|m| {
                let m = additive(m, &q);
                if m.rank() == 3 {
                    m.reshape(&[n, h, l, s])
                } else {
                    m
                }
            });
            let pad = a.key_padding_mask.as_ref().map(|kp| additive(kp, &q).reshape(&[n, 1, 1, s]));
            let mask = match (attn_mask, pad) {
                (Some(m), Some(p)) => Some(&m + &p),
                (m, p) => m.or(p),
            };
            let config = nn_core::ops::AttentionConfig {
                attn_mask: mask.as_ref(),
                dropout_p: dropout,
                scale: Some(1.0),
                ..Default::default()
            };
            let out = q.scaled_dot_product_attention(&k, &v, &config).transpose(1, 2).reshape(&[n, l, e]);
            let out = self.out_proj.forward(&out);
            return (if batch_first { out } else { out.transpose(0, 1) }, None);
        }
        let mut scores = q.matmul(&k.transpose(-2, -1)); // [N, H, L, S]
        if let Some(m) = &a.attn_mask {
            let m = additive(m, &scores);
            let m = if m.rank() == 3 { m.reshape(&[n, h, l, s]) } else { m };
            scores = &scores + &m; // out of place: `scores` is part of the graph
        }
        if let Some(kp) = &a.key_padding_mask {
            let pad = additive(kp, &scores).reshape(&[n, 1, 1, s]);
            scores = &scores + &pad;
        }
        let mut attn = scores.softmax(-1);
        if self.dropout > 0.0 {
            attn = attn.dropout(self.dropout, self.base.is_training());
        }
        let out = attn.matmul(&v).transpose(1, 2).reshape(&[n, l, e]);
        let out = self.out_proj.forward(&out);
        let out = if batch_first { out } else { out.transpose(0, 1) };
        let weights = a.need_weights.then(|| if a.average_attn_weights { attn.mean_dim(1, false) } else { attn });
        (out, weights)
    }
}

/// A [`Linear`] under the name PyTorch gives `MultiheadAttention.out_proj`, so printouts
/// match; everything else (keys, init, forward) is `Linear`'s.
pub struct NonDynamicallyQuantizableLinear(pub Linear);

impl std::ops::Deref for NonDynamicallyQuantizableLinear {
    type Target = Linear;
    fn deref(&self) -> &Linear {
        &self.0
    }
}

impl HasBase for NonDynamicallyQuantizableLinear {
    fn module_base(&self) -> &ModuleBase {
        self.0.module_base()
    }
}

impl Compute for NonDynamicallyQuantizableLinear {
    type Input = Tensor;
    type Output = Tensor;
    #[allow(deprecated)] // the wrapper's `forward` runs the hooks (its base is the inner layer's)
    fn compute(&self, input: &Tensor) -> Tensor {
        self.0.compute(input)
    }
}

impl HoldsState for NonDynamicallyQuantizableLinear {}

impl Module for NonDynamicallyQuantizableLinear {
    fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        self.0.visit(f)
    }
    fn visit_modules_mut<'a>(&'a mut self, f: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {
        self.0.visit_modules_mut(f)
    }
    fn type_name(&self) -> &'static str {
        "NonDynamicallyQuantizableLinear"
    }
    fn deep_copy_into(&self, copier: &mut nn_core::module::DeepCopier, slot: nn_core::module::CopySlot<'_>) {
        slot.put(NonDynamicallyQuantizableLinear(copier.module(&self.0)));
    }
    fn extra_repr(&self) -> String {
        Module::extra_repr(&self.0)
    }
    fn base(&self) -> Option<&ModuleBase> {
        self.0.base()
    }
    fn base_mut(&mut self) -> Option<&mut ModuleBase> {
        self.0.base_mut()
    }
    nn_core::module_accessors!();
}

impl std::fmt::Display for NonDynamicallyQuantizableLinear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        nn_core::module::fmt_module(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A negative or NaN dropout turned dropout off on every path without a word.
    #[test]
    fn a_dropout_outside_0_1_is_refused() {
        for p in [-0.1, f64::NAN, 1.5] {
            let Err(e) = std::panic::catch_unwind(|| MultiheadAttention::with_options(8, 2, p, true, false)) else {
                panic!("dropout {p} accepted")
            };
            let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(msg.contains(&format!("dropout probability has to be between 0 and 1, but got {p}")), "{msg}");
        }
    }

    /// Without weights to return, attention runs fused (its output stored token-major);
    /// with them, composed. Both give the same output and the same gradients, batch-first
    /// or not, for the input and every parameter, without masks and under each kind: a
    /// bool key padding mask, a bool `[L, S]` mask, both (merged), a float `[N * heads, L,
    /// S]` mask. (No query row is fully masked: the weights path gives NaN there, as
    /// PyTorch's.)
    #[test]
    fn the_fused_path_gives_the_composed_output_and_gradients() {
        // (Any values: the two paths run on the same ones.)
        let (l, n) = (5, 3);
        let pad = Tensor::from_vec_bool((0..n * l).map(|i| i % l >= l - i / l).collect(), &[n, l]);
        let upper = Tensor::from_vec_bool((0..l * l).map(|i| i % l > i / l).collect(), &[l, l]);
        let float = Tensor::randn(&[n * 2, l, l]);
        let masks =
            [(None, None), (Some(&pad), None), (None, Some(&upper)), (Some(&pad), Some(&upper)), (None, Some(&float))];
        for batch_first in [false, true] {
            let m = MultiheadAttention::with_options(8, 2, 0.0, true, batch_first);
            let shape = if batch_first { [n, l, 8] } else { [l, n, 8] };
            let (x, w) = (Tensor::randn(&shape), Tensor::randn(&shape));
            for (i, (kp, am)) in masks.iter().enumerate() {
                let run = |need: bool| {
                    let x = x.detach().requires_grad_(true);
                    m.zero_grad();
                    let mut input = AttentionInput::self_attention(&x).need_weights(need);
                    input.key_padding_mask = kp.cloned();
                    input.attn_mask = am.cloned();
                    let (y, weights) = m.forward(&input);
                    assert_eq!(weights.is_some(), need);
                    (&y * &w).sum().backward();
                    let mut grads = vec![x.grad().expect("the input's gradient").to_vec()];
                    for (name, p) in m.named_parameters() {
                        grads.push(p.grad().unwrap_or_else(|| panic!("no gradient for {name}")).to_vec());
                    }
                    (y.to_vec(), grads)
                };
                let ((fused, fused_grads), (composed, composed_grads)) = (run(false), run(true));
                let close =
                    |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-5 * (1.0 + y.abs()));
                let what = format!("batch_first {batch_first}, masks {i}");
                assert!(close(&fused, &composed), "{what}: {fused:?} against {composed:?}");
                assert_eq!(fused_grads.len(), 5);
                for (f, c) in fused_grads.iter().zip(&composed_grads) {
                    assert!(close(f, c), "{what}: {f:?} against {c:?}");
                }
            }
        }
    }
}
