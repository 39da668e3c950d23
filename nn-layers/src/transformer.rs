//! `TransformerEncoderLayer` and `TransformerEncoder`, with their input, `EncoderInput`.

use std::borrow::Cow;

use nn_core::module::ForwardArg;
use nn_core::{Compute, ExtraRepr, Forward, Module, ModuleBase, ModuleIo, Tensor};

use crate::{AttentionInput, Dropout, LayerNorm, Linear, ModuleList, MultiheadAttention};

/// The feed-forward activation of a [`TransformerEncoderLayer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Activation {
    /// PyTorch's default.
    #[default]
    Relu,
    /// Exact GELU.
    Gelu,
}

impl Activation {
    /// Applies the activation (the encoder and decoder layers' feed-forward).
    pub(crate) fn apply(self, h: &Tensor) -> Tensor {
        match self {
            Activation::Relu => h.relu(),
            Activation::Gelu => h.gelu(),
        }
    }
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

/// The input of [`TransformerEncoderLayer`] and [`TransformerEncoder`]: PyTorch's
/// `forward(src, src_mask=None, src_key_padding_mask=None)`. A plain `&Tensor` converts
/// (no masks): `layer.forward(&x)`.
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::{EncoderInput, TransformerEncoderLayer, TransformerEncoderLayerConfig};
/// let cfg = TransformerEncoderLayerConfig { batch_first: true, dropout: 0.0, ..Default::default() };
/// let layer = TransformerEncoderLayer::with_config(8, 2, cfg);
/// let x = Tensor::randn(&[2, 4, 8]);
/// let causal = Tensor::from_vec_bool((0..16).map(|k| k % 4 > k / 4).collect(), &[4, 4]);
/// let y = layer.forward(&EncoderInput::new(&x).src_mask(&causal));
/// assert_eq!(y.shape(), &[2, 4, 8]);
/// assert_eq!(layer.forward(&x).shape(), &[2, 4, 8]);
/// ```
#[derive(Clone, Debug, ModuleIo)]
pub struct EncoderInput {
    /// `[L, N, E]` (`[N, L, E]` batch-first, `[L, E]` unbatched): the primary input.
    #[io(primary)]
    pub src: Tensor,
    /// `[L, L]` or `[N * heads, L, L]`: bool with **`true` = may not attend**, or a float
    /// mask of `src`'s dtype added to the scores (`-inf` = may not attend); any other dtype
    /// panics (see [`AttentionInput::attn_mask`]).
    pub src_mask: Option<Tensor>,
    /// `[N, L]`: bool with **`true` = ignore this position** (padding), or a float mask of
    /// `src`'s dtype added to the scores; any other dtype panics, Hugging Face's i64
    /// `attention_mask` (1 = attend) included (see [`AttentionInput::key_padding_mask`]).
    pub src_key_padding_mask: Option<Tensor>,
}

impl EncoderInput {
    /// `src` without masks.
    pub fn new(src: &Tensor) -> Self {
        EncoderInput { src: src.clone(), src_mask: None, src_key_padding_mask: None }
    }

    /// Sets the attention mask.
    pub fn src_mask(mut self, mask: &Tensor) -> Self {
        self.src_mask = Some(mask.clone());
        self
    }

    /// Sets the key padding mask.
    pub fn src_key_padding_mask(mut self, mask: &Tensor) -> Self {
        self.src_key_padding_mask = Some(mask.clone());
        self
    }
}

impl<'a> ForwardArg<'a, EncoderInput> for &'a Tensor {
    fn into_input(self) -> Cow<'a, EncoderInput> {
        Cow::Owned(EncoderInput::new(self))
    }
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
}

impl Compute for TransformerEncoderLayer {
    type Input = EncoderInput;
    type Output = Tensor;

    #[track_caller]
    fn compute(&self, input: &EncoderInput) -> Tensor {
        let x = &input.src;
        let d = self.self_attn.embed_dim();
        if !(2..=3).contains(&x.rank()) || x.shape()[x.rank() - 1] != d {
            let layout = if self.config.batch_first { "[N, L, E]" } else { "[L, N, E]" };
            panic!(
                "TransformerEncoderLayer(d_model={d}, nhead={}) expects src {layout} (or unbatched [L, E]) with E = {d}, \
                 got {:?}",
                self.self_attn.num_heads(),
                x.shape()
            );
        }
        {
            let sa = |x: &Tensor| {
                let mut a = AttentionInput::self_attention(x).need_weights(false);
                a.attn_mask = input.src_mask.clone();
                a.key_padding_mask = input.src_key_padding_mask.clone();
                self.dropout1.forward(&self.self_attn.forward(&a).0)
            };
            let ff = |x: &Tensor| {
                let h = self.config.activation.apply(&self.linear1.forward(x));
                self.dropout2.forward(&self.linear2.forward(&self.dropout.forward(&h)))
            };
            if self.config.norm_first {
                let x = x + &sa(&self.norm1.forward(x));
                &x + &ff(&self.norm2.forward(&x))
            } else {
                let x = self.norm1.forward(&(x + &sa(x)));
                self.norm2.forward(&(&x + &ff(&x)))
            }
        }
    }
}

impl ExtraRepr for TransformerEncoderLayer {
    fn extra_repr(&self) -> String {
        String::new()
    }
}

/// A stack of [`TransformerEncoderLayer`]s (PyTorch's `nn.TransformerEncoder`; keys
/// `layers.0.*`, `layers.1.*`, ..., and `norm.*` when a final norm is given).
///
/// Padded positions: every output row is computed, padded ones included, as PyTorch's
/// ordinary path computes them. PyTorch's nested-tensor fast path
/// (`enable_nested_tensor=True`, taken in eval mode without grad, batch-first, post-norm,
/// with a bool `src_key_padding_mask` and no `src_mask`) returns exact zeros at the padded
/// positions instead; the rows that are not padded agree either way. Compare outputs at
/// positions the mask keeps, or zero the padded rows (`where_cond` on the mask) where
/// code reads every row.
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
}

impl Compute for TransformerEncoder {
    type Input = EncoderInput;
    type Output = Tensor;

    /// Runs every layer with the same masks, then the final norm.
    fn compute(&self, input: &EncoderInput) -> Tensor {
        let mut h = input.clone();
        for layer in &self.layers {
            h = h.with_primary(layer.forward(&h));
        }
        match &self.norm {
            Some(n) => n.forward(&h.src),
            None => h.src,
        }
    }
}
