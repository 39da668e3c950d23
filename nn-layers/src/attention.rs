//! `MultiheadAttention`, `TransformerEncoderLayer`, `TransformerEncoder`.

use nn_core::module::HoldsState;
use nn_core::{init, DType, ExtraRepr, Forward, Item, Module, ModuleBase, Name, Parameter, Tensor};

use crate::{Dropout, LayerNorm, Linear, ModuleList};

/// Multi-head attention (PyTorch's `nn.MultiheadAttention`, same-size query, key and
/// value).
///
/// Parameters: `in_proj_weight` `[3E, E]` (Xavier uniform), `in_proj_bias` `[3E]`
/// (zeros), `out_proj.weight` `[E, E]` (Linear's init), `out_proj.bias` `[E]` (zeros).
/// Inputs are `[L, N, E]`, or `[N, L, E]` with `batch_first`.
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

/// Masks and switches of [`MultiheadAttention::attend`].
#[derive(Clone, Copy, Debug)]
pub struct AttendOptions<'a> {
    /// `[N, S]`: `true` (or a non-zero float added as-is) marks key positions to ignore.
    pub key_padding_mask: Option<&'a Tensor>,
    /// `[L, S]` or `[N * heads, L, S]`: bool `true` = not allowed to attend (PyTorch's
    /// `MultiheadAttention` convention), or a float mask added to the scores.
    pub attn_mask: Option<&'a Tensor>,
    /// Return the attention weights.
    pub need_weights: bool,
    /// Average the returned weights over heads (`[N, L, S]`) instead of per head
    /// (`[N, heads, L, S]`).
    pub average_attn_weights: bool,
}

impl Default for AttendOptions<'_> {
    fn default() -> Self {
        AttendOptions { key_padding_mask: None, attn_mask: None, need_weights: true, average_attn_weights: true }
    }
}

/// A mask as an additive float tensor (`-inf` where a bool mask is `true`).
fn additive(mask: &Tensor, like: &Tensor) -> Tensor {
    if mask.dtype() == DType::Bool {
        Tensor::zeros_like(&Tensor::full_on(mask.shape(), 0.0, like.dtype(), like.device()))
            .masked_fill(mask, f64::NEG_INFINITY)
    } else {
        mask.to_dtype(like.dtype())
    }
}

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

    /// All options.
    #[track_caller]
    pub fn with_options(embed_dim: usize, num_heads: usize, dropout: f64, bias: bool, batch_first: bool) -> Self {
        if num_heads == 0 || embed_dim % num_heads != 0 {
            panic!("MultiheadAttention: embed_dim {embed_dim} must be divisible by num_heads {num_heads}");
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

    /// `(output, weights)` for `query` `[L, N, E]`, `key` and `value` `[S, N, E]`
    /// (batch-first: `[N, L, E]`, `[N, S, E]`).
    #[track_caller]
    pub fn attend(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        opt: AttendOptions<'_>,
    ) -> (Tensor, Option<Tensor>) {
        let e = self.embed_dim;
        for (name, t) in [("query", query), ("key", key), ("value", value)] {
            if t.rank() != 3 || t.shape()[2] != e {
                let layout = if self.batch_first { "[N, L, E]" } else { "[L, N, E]" };
                panic!("MultiheadAttention(embed_dim={e}) expects {name} {layout} with E = {e}, got {:?}", t.shape());
            }
        }
        // Work batch-first: [N, L, E].
        let (q, k, v) = if self.batch_first {
            (query.clone(), key.clone(), value.clone())
        } else {
            (query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1))
        };
        let (n, l, s) = (q.shape()[0], q.shape()[1], k.shape()[1]);
        let (h, d) = (self.num_heads, e / self.num_heads);
        let w = &*self.in_proj_weight;
        let b = self.in_proj_bias.as_deref();
        let proj = |x: &Tensor, i: usize| {
            let wi = w.narrow(0, i * e, e);
            let y = x.matmul(&wi.t());
            let y = match b {
                Some(b) => y + b.narrow(0, i * e, e),
                None => y,
            };
            // [N, T, E] -> [N, H, T, D]
            y.reshape(&[n, x.shape()[1], h, d]).transpose(1, 2)
        };
        let (q, k, v) = (proj(&q, 0), proj(&k, 1), proj(&v, 2));
        let mut scores = (q * (1.0 / (d as f64).sqrt())).matmul(&k.transpose(-2, -1)); // [N, H, L, S]
        if let Some(m) = opt.attn_mask {
            let m = additive(m, &scores);
            let m = match m.rank() {
                2 => m,
                3 => m.reshape(&[n, h, l, s]),
                _ => panic!("MultiheadAttention: attn_mask must be [L, S] or [N * heads, L, S], got {:?}", m.shape()),
            };
            scores = scores + m;
        }
        if let Some(kp) = opt.key_padding_mask {
            if kp.shape() != [n, s] {
                panic!("MultiheadAttention: key_padding_mask must be [N, S] = [{n}, {s}], got {:?}", kp.shape());
            }
            let pad = additive(kp, &scores).reshape(&[n, 1, 1, s]);
            scores = scores + pad;
        }
        let mut attn = scores.softmax(-1);
        if self.dropout > 0.0 {
            attn = attn.dropout(self.dropout, self.base.is_training());
        }
        let out = attn.matmul(&v).transpose(1, 2).reshape(&[n, l, e]);
        let out = self.out_proj.forward(&out);
        let out = if self.batch_first { out } else { out.transpose(0, 1) };
        let weights = opt.need_weights.then(|| if opt.average_attn_weights { attn.mean_dim(1, false) } else { attn });
        (out, weights)
    }
}

impl Forward for MultiheadAttention {
    /// Self-attention (`query = key = value = input`) without masks.
    fn forward(&self, input: &Tensor) -> Tensor {
        self.base.run(input, |x| self.attend(x, x, x, AttendOptions { need_weights: false, ..Default::default() }).0)
    }
}

/// The feed-forward activation of a [`TransformerEncoderLayer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Activation {
    /// PyTorch's default.
    #[default]
    Relu,
    /// Exact GELU.
    Gelu,
}

/// Options of [`TransformerEncoderLayer`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransformerEncoderLayerConfig {
    /// Hidden size of the feed-forward block (default 2048).
    pub dim_feedforward: usize,
    /// Dropout probability (default 0.1).
    pub dropout: f64,
    /// Feed-forward activation (default ReLU).
    pub activation: Activation,
    /// LayerNorm epsilon (default 1e-5).
    pub layer_norm_eps: f64,
    /// `[N, L, E]` inputs instead of `[L, N, E]` (default false).
    pub batch_first: bool,
    /// Pre-norm (`x + f(norm(x))`) instead of post-norm (`norm(x + f(x))`, default).
    pub norm_first: bool,
}

impl Default for TransformerEncoderLayerConfig {
    fn default() -> Self {
        TransformerEncoderLayerConfig {
            dim_feedforward: 2048,
            dropout: 0.1,
            activation: Activation::Relu,
            layer_norm_eps: 1e-5,
            batch_first: false,
            norm_first: false,
        }
    }
}

/// Self-attention and a feed-forward block with residuals and layer norms (PyTorch's
/// `nn.TransformerEncoderLayer`, same parameter names: `self_attn.*`, `linear1.*`,
/// `linear2.*`, `norm1.*`, `norm2.*`).
#[derive(Module)]
#[module(extra_repr)]
pub struct TransformerEncoderLayer {
    /// The self-attention block.
    #[module]
    pub self_attn: MultiheadAttention,
    /// `d_model -> dim_feedforward`.
    #[module]
    pub linear1: Linear,
    #[module]
    dropout: Dropout,
    /// `dim_feedforward -> d_model`.
    #[module]
    pub linear2: Linear,
    /// Norm around the attention block.
    #[module]
    pub norm1: LayerNorm,
    /// Norm around the feed-forward block.
    #[module]
    pub norm2: LayerNorm,
    #[module]
    dropout1: Dropout,
    #[module]
    dropout2: Dropout,
    #[base]
    base: ModuleBase,
    config: TransformerEncoderLayerConfig,
}

impl TransformerEncoderLayer {
    /// A layer with PyTorch's defaults.
    pub fn new(d_model: usize, nhead: usize) -> Self {
        Self::with_config(d_model, nhead, TransformerEncoderLayerConfig::default())
    }

    /// A layer with explicit options.
    pub fn with_config(d_model: usize, nhead: usize, c: TransformerEncoderLayerConfig) -> Self {
        let norm = || LayerNorm::with_options(&[d_model], c.layer_norm_eps, true, true);
        TransformerEncoderLayer {
            self_attn: MultiheadAttention::with_options(d_model, nhead, c.dropout, true, c.batch_first),
            linear1: Linear::new(d_model, c.dim_feedforward),
            dropout: Dropout::new(c.dropout),
            linear2: Linear::new(c.dim_feedforward, d_model),
            norm1: norm(),
            norm2: norm(),
            dropout1: Dropout::new(c.dropout),
            dropout2: Dropout::new(c.dropout),
            base: ModuleBase::default(),
            config: c,
        }
    }

    /// Runs the layer with optional masks (`src_mask` `[L, L]`, `src_key_padding_mask`
    /// `[N, L]`, conventions of [`AttendOptions`]).
    pub fn forward_masked(
        &self,
        src: &Tensor,
        src_mask: Option<&Tensor>,
        src_key_padding_mask: Option<&Tensor>,
    ) -> Tensor {
        self.base.run(src, |x| {
            let sa = |x: &Tensor| {
                let opt = AttendOptions {
                    key_padding_mask: src_key_padding_mask,
                    attn_mask: src_mask,
                    need_weights: false,
                    ..Default::default()
                };
                self.dropout1.forward(&self.self_attn.attend(x, x, x, opt).0)
            };
            let ff = |x: &Tensor| {
                let h = self.linear1.forward(x);
                let h = match self.config.activation {
                    Activation::Relu => h.relu(),
                    Activation::Gelu => h.gelu(),
                };
                self.dropout2.forward(&self.linear2.forward(&self.dropout.forward(&h)))
            };
            if self.config.norm_first {
                let x = x + &sa(&self.norm1.forward(x));
                &x + &ff(&self.norm2.forward(&x))
            } else {
                let x = self.norm1.forward(&(x + &sa(x)));
                self.norm2.forward(&(&x + &ff(&x)))
            }
        })
    }
}

impl ExtraRepr for TransformerEncoderLayer {
    fn extra_repr(&self) -> String {
        String::new()
    }
}

impl Forward for TransformerEncoderLayer {
    fn forward(&self, input: &Tensor) -> Tensor {
        self.forward_masked(input, None, None)
    }
}

/// A stack of [`TransformerEncoderLayer`]s (PyTorch's `nn.TransformerEncoder`; keys
/// `layers.0.*`, `layers.1.*`, ..., and `norm.*` when a final norm is given).
#[derive(Module)]
pub struct TransformerEncoder {
    /// The layers.
    #[module]
    pub layers: ModuleList<TransformerEncoderLayer>,
    /// Optional final normalisation.
    #[module]
    pub norm: Option<LayerNorm>,
    #[base]
    base: ModuleBase,
}

impl TransformerEncoder {
    /// `num_layers` layers built by `make`, and an optional final norm.
    pub fn new(num_layers: usize, mut make: impl FnMut() -> TransformerEncoderLayer, norm: Option<LayerNorm>) -> Self {
        TransformerEncoder { layers: (0..num_layers).map(|_| make()).collect(), norm, base: ModuleBase::default() }
    }

    /// Runs every layer with the same masks.
    pub fn forward_masked(&self, src: &Tensor, mask: Option<&Tensor>, src_key_padding_mask: Option<&Tensor>) -> Tensor {
        self.base.run(src, |x| {
            let mut h = x.clone();
            for layer in &self.layers {
                h = layer.forward_masked(&h, mask, src_key_padding_mask);
            }
            match &self.norm {
                Some(n) => n.forward(&h),
                None => h,
            }
        })
    }
}

impl Forward for TransformerEncoder {
    fn forward(&self, input: &Tensor) -> Tensor {
        self.forward_masked(input, None, None)
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

impl Forward for NonDynamicallyQuantizableLinear {
    fn forward(&self, input: &Tensor) -> Tensor {
        self.0.forward(input)
    }
}

impl HoldsState for NonDynamicallyQuantizableLinear {}

impl Module for NonDynamicallyQuantizableLinear {
    fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        self.0.visit(f)
    }
    fn visit_modules_mut(&mut self, f: &mut dyn FnMut(Name<'_>, &mut dyn Module)) {
        self.0.visit_modules_mut(f)
    }
    fn type_name(&self) -> &'static str {
        "NonDynamicallyQuantizableLinear"
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
