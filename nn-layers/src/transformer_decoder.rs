//! `TransformerDecoderLayer`, `TransformerDecoder` and the whole `Transformer`, with their
//! inputs, `DecoderInput` and `TransformerInput` (PyTorch's `nn.Transformer` family).

use std::borrow::Cow;

use nn_core::module::ForwardArg;
use nn_core::{Compute, Forward, Module, ModuleBase, ModuleIo, Tensor};

use crate::{
    Activation, AttentionInput, Dropout, EncoderInput, LayerNorm, Linear, ModuleList, MultiheadAttention,
    TransformerEncoder, TransformerEncoderLayer, TransformerEncoderLayerConfig,
};

/// Options of [`TransformerDecoderLayer`]: the same as the encoder layer's (PyTorch's
/// `dim_feedforward=2048, dropout=0.1, activation=relu, layer_norm_eps=1e-5,
/// batch_first=False, norm_first=False`).
pub type TransformerDecoderLayerConfig = TransformerEncoderLayerConfig;

/// A `[len, len]` bool mask, `true` above the diagonal: position `i` may not attend to
/// the positions after it.
fn causal_bool_mask(len: usize, like: &Tensor) -> Tensor {
    Tensor::from_vec_bool((0..len * len).map(|k| k % len > k / len).collect(), &[len, len]).to_device(like.device())
}

/// The sequence length of `x` (`[L, N, E]`, `[N, L, E]` batch-first, or `[L, E]`).
fn seq_len(x: &Tensor, batch_first: bool) -> usize {
    if batch_first && x.rank() == 3 {
        x.shape()[1]
    } else {
        x.shape()[0]
    }
}

/// The input of [`TransformerDecoderLayer`] and [`TransformerDecoder`]: PyTorch's
/// `forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
/// memory_key_padding_mask=None, tgt_is_causal=False)`. A pair `(&tgt, &memory)` converts
/// (no masks).
///
/// Masks follow [`AttentionInput`]'s conventions: a bool mask is `true` where attention is
/// not allowed, a float mask is added to the scores.
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::{DecoderInput, Transformer, TransformerDecoderLayer, TransformerDecoderLayerConfig};
/// let cfg = TransformerDecoderLayerConfig { batch_first: true, dropout: 0.0, dim_feedforward: 16, ..Default::default() };
/// let layer = TransformerDecoderLayer::with_config(8, 2, cfg);
/// let (tgt, memory) = (Tensor::randn(&[2, 4, 8]), Tensor::randn(&[2, 6, 8]));
/// let pad = Tensor::from_vec_bool(vec![false, false, false, false, true, true].repeat(2), &[2, 6]);
/// let input = DecoderInput::new(&tgt, &memory)
///     .tgt_mask(&Transformer::generate_square_subsequent_mask(4))
///     .memory_key_padding_mask(&pad);
/// assert_eq!(layer.forward(&input).shape(), &[2, 4, 8]);
/// // `tgt_is_causal` without a mask applies the same causal mask.
/// let causal = layer.forward(&DecoderInput::new(&tgt, &memory).tgt_is_causal(true).memory_key_padding_mask(&pad));
/// assert_eq!(causal.to_vec(), layer.forward(&input).to_vec());
/// ```
#[derive(Clone, Debug)]
pub struct DecoderInput {
    /// `[T, N, E]` (`[N, T, E]` batch-first, `[T, E]` unbatched): the target sequence, the
    /// primary input (what hooks see).
    pub tgt: Tensor,
    /// `[S, N, E]` (`[N, S, E]`, `[S, E]`): the encoder's output.
    pub memory: Tensor,
    /// `[T, T]` or `[N * heads, T, T]`: the self-attention mask.
    pub tgt_mask: Option<Tensor>,
    /// `[T, S]` or `[N * heads, T, S]`: the mask of the attention over `memory`.
    pub memory_mask: Option<Tensor>,
    /// `[N, T]` (`[T]` unbatched): target positions to ignore as keys.
    pub tgt_key_padding_mask: Option<Tensor>,
    /// `[N, S]` (`[S]` unbatched): memory positions to ignore.
    pub memory_key_padding_mask: Option<Tensor>,
    /// `tgt_mask` is the causal mask (PyTorch's hint). Without a `tgt_mask`, the causal
    /// mask is applied (PyTorch then asks for the mask instead); with one, the mask given
    /// is used as it is.
    pub tgt_is_causal: bool,
}

impl DecoderInput {
    /// `tgt` and `memory` without masks.
    pub fn new(tgt: &Tensor, memory: &Tensor) -> Self {
        DecoderInput {
            tgt: tgt.clone(),
            memory: memory.clone(),
            tgt_mask: None,
            memory_mask: None,
            tgt_key_padding_mask: None,
            memory_key_padding_mask: None,
            tgt_is_causal: false,
        }
    }

    /// Sets the self-attention mask.
    pub fn tgt_mask(mut self, mask: &Tensor) -> Self {
        self.tgt_mask = Some(mask.clone());
        self
    }

    /// Sets the mask of the attention over the memory.
    pub fn memory_mask(mut self, mask: &Tensor) -> Self {
        self.memory_mask = Some(mask.clone());
        self
    }

    /// Sets the target key padding mask.
    pub fn tgt_key_padding_mask(mut self, mask: &Tensor) -> Self {
        self.tgt_key_padding_mask = Some(mask.clone());
        self
    }

    /// Sets the memory key padding mask.
    pub fn memory_key_padding_mask(mut self, mask: &Tensor) -> Self {
        self.memory_key_padding_mask = Some(mask.clone());
        self
    }

    /// Marks the self-attention as causal (see [`DecoderInput::tgt_is_causal`]).
    pub fn tgt_is_causal(mut self, causal: bool) -> Self {
        self.tgt_is_causal = causal;
        self
    }

    /// The self-attention mask to use: the one given, else the causal one when asked for.
    fn self_attn_mask(&self, batch_first: bool) -> Option<Tensor> {
        match &self.tgt_mask {
            Some(m) => Some(m.clone()),
            None if self.tgt_is_causal => Some(causal_bool_mask(seq_len(&self.tgt, batch_first), &self.tgt)),
            None => None,
        }
    }
}

impl ModuleIo for DecoderInput {
    fn primary(&self) -> &Tensor {
        &self.tgt
    }
    fn with_primary(&self, primary: Tensor) -> Self {
        DecoderInput { tgt: primary, ..self.clone() }
    }
}

impl<'a> ForwardArg<'a, DecoderInput> for (&'a Tensor, &'a Tensor) {
    fn into_input(self) -> Cow<'a, DecoderInput> {
        Cow::Owned(DecoderInput::new(self.0, self.1))
    }
}

/// Self-attention, attention over the encoder's output (`memory`) and a feed-forward
/// block, each with a residual and a layer norm (PyTorch's `nn.TransformerDecoderLayer`).
///
/// Parameters, PyTorch's names: `self_attn.*` and `multihead_attn.*` (see
/// [`MultiheadAttention`]: `in_proj_weight` Xavier uniform, `in_proj_bias` zeros,
/// `out_proj.weight` Linear's init, `out_proj.bias` zeros), `linear1.*` (`d_model ->
/// dim_feedforward`) and `linear2.*` (back), Linear's init, `norm1.*`, `norm2.*`, `norm3.*`
/// (ones and zeros). Post-norm (`x = norm(x + block(x))`) by default, pre-norm
/// (`x = x + block(norm(x))`) with `norm_first`.
#[derive(Module)]
#[module(extra_repr)]
pub struct TransformerDecoderLayer {
    /// The self-attention block.
    #[module]
    pub self_attn: MultiheadAttention,
    /// The attention over the memory.
    #[module]
    pub multihead_attn: MultiheadAttention,
    /// `d_model -> dim_feedforward`.
    #[module]
    pub linear1: Linear,
    #[module]
    dropout: Dropout,
    /// `dim_feedforward -> d_model`.
    #[module]
    pub linear2: Linear,
    /// Norm around the self-attention block.
    #[module]
    pub norm1: LayerNorm,
    /// Norm around the memory attention block.
    #[module]
    pub norm2: LayerNorm,
    /// Norm around the feed-forward block.
    #[module]
    pub norm3: LayerNorm,
    #[module]
    dropout1: Dropout,
    #[module]
    dropout2: Dropout,
    #[module]
    dropout3: Dropout,
    #[base]
    base: ModuleBase,
    config: TransformerDecoderLayerConfig,
}

impl TransformerDecoderLayer {
    /// A layer with PyTorch's defaults.
    #[track_caller]
    pub fn new(d_model: usize, nhead: usize) -> Self {
        Self::with_config(d_model, nhead, TransformerDecoderLayerConfig::default())
    }

    /// A layer with explicit options.
    ///
    /// # Panics
    /// When `d_model` is not divisible by `nhead`.
    #[track_caller]
    pub fn with_config(d_model: usize, nhead: usize, c: TransformerDecoderLayerConfig) -> Self {
        let norm = || LayerNorm::with_options(&[d_model], c.layer_norm_eps, true, true);
        let attn = || MultiheadAttention::with_options(d_model, nhead, c.dropout, true, c.batch_first);
        TransformerDecoderLayer {
            self_attn: attn(),
            multihead_attn: attn(),
            linear1: Linear::new(d_model, c.dim_feedforward),
            dropout: Dropout::new(c.dropout),
            linear2: Linear::new(c.dim_feedforward, d_model),
            norm1: norm(),
            norm2: norm(),
            norm3: norm(),
            dropout1: Dropout::new(c.dropout),
            dropout2: Dropout::new(c.dropout),
            dropout3: Dropout::new(c.dropout),
            base: ModuleBase::default(),
            config: c,
        }
    }

    #[track_caller]
    fn check(&self, input: &DecoderInput) {
        let d = self.self_attn.embed_dim();
        let layout = |what: &str| match (self.config.batch_first, what) {
            (true, "tgt") => "[N, T, E]",
            (false, "tgt") => "[T, N, E]",
            (true, _) => "[N, S, E]",
            (false, _) => "[S, N, E]",
        };
        for (what, x) in [("tgt", &input.tgt), ("memory", &input.memory)] {
            if !(2..=3).contains(&x.rank()) || x.shape()[x.rank() - 1] != d {
                panic!(
                    "TransformerDecoderLayer(d_model={d}, nhead={}) expects {what} {} (or unbatched [{}, E]) with E = \
                     {d}, got {:?}",
                    self.self_attn.num_heads(),
                    layout(what),
                    if what == "tgt" { "T" } else { "S" },
                    x.shape()
                );
            }
        }
        if input.tgt.rank() != input.memory.rank() {
            panic!(
                "TransformerDecoderLayer: tgt {:?} and memory {:?} must both be batched or both unbatched",
                input.tgt.shape(),
                input.memory.shape()
            );
        }
    }
}

impl Compute for TransformerDecoderLayer {
    type Input = DecoderInput;
    type Output = Tensor;

    #[track_caller]
    fn compute(&self, input: &DecoderInput) -> Tensor {
        self.check(input);
        let x = &input.tgt;
        let mem = &input.memory;
        let tgt_mask = input.self_attn_mask(self.config.batch_first);
        let sa = |x: &Tensor| {
            let mut a = AttentionInput::self_attention(x).need_weights(false);
            a.attn_mask = tgt_mask.clone();
            a.key_padding_mask = input.tgt_key_padding_mask.clone();
            self.dropout1.forward(&self.self_attn.forward(&a).0)
        };
        let mha = |x: &Tensor| {
            let mut a = AttentionInput::new(x, mem, mem).need_weights(false);
            a.attn_mask = input.memory_mask.clone();
            a.key_padding_mask = input.memory_key_padding_mask.clone();
            self.dropout2.forward(&self.multihead_attn.forward(&a).0)
        };
        let ff = |x: &Tensor| {
            let h = self.config.activation.apply(&self.linear1.forward(x));
            self.dropout3.forward(&self.linear2.forward(&self.dropout.forward(&h)))
        };
        if self.config.norm_first {
            let x = x + &sa(&self.norm1.forward(x));
            let x = &x + &mha(&self.norm2.forward(&x));
            &x + &ff(&self.norm3.forward(&x))
        } else {
            let x = self.norm1.forward(&(x + &sa(x)));
            let x = self.norm2.forward(&(&x + &mha(&x)));
            self.norm3.forward(&(&x + &ff(&x)))
        }
    }
}

impl nn_core::ExtraRepr for TransformerDecoderLayer {
    fn extra_repr(&self) -> String {
        String::new()
    }
}

/// A stack of [`TransformerDecoderLayer`]s (PyTorch's `nn.TransformerDecoder`; keys
/// `layers.0.*`, `layers.1.*`, ..., and `norm.*` when a final norm is given). Every layer
/// sees the same memory and masks.
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::{LayerNorm, TransformerDecoder, TransformerDecoderLayer, TransformerDecoderLayerConfig};
/// let cfg = TransformerDecoderLayerConfig { dim_feedforward: 16, ..Default::default() };
/// let dec = TransformerDecoder::new(2, || TransformerDecoderLayer::with_config(8, 2, cfg), Some(LayerNorm::new(8)));
/// assert!(dec.state_dict().keys().any(|k| k == "layers.1.multihead_attn.in_proj_weight"));
/// assert!(dec.state_dict().keys().any(|k| k == "norm.weight"));
/// let (tgt, memory) = (Tensor::randn(&[4, 2, 8]), Tensor::randn(&[6, 2, 8]));
/// assert_eq!(dec.forward((&tgt, &memory)).shape(), &[4, 2, 8]);
/// ```
#[derive(Module)]
pub struct TransformerDecoder {
    /// The layers.
    #[module]
    pub layers: ModuleList<TransformerDecoderLayer>,
    /// Optional final normalisation.
    #[module]
    pub norm: Option<LayerNorm>,
    #[base]
    base: ModuleBase,
}

impl TransformerDecoder {
    /// `num_layers` layers built by `make`, and an optional final norm.
    pub fn new(num_layers: usize, mut make: impl FnMut() -> TransformerDecoderLayer, norm: Option<LayerNorm>) -> Self {
        TransformerDecoder { layers: (0..num_layers).map(|_| make()).collect(), norm, base: ModuleBase::default() }
    }
}

impl Compute for TransformerDecoder {
    type Input = DecoderInput;
    type Output = Tensor;

    /// Runs every layer with the same memory and masks, then the final norm.
    fn compute(&self, input: &DecoderInput) -> Tensor {
        let mut h = input.clone();
        if h.tgt_mask.is_none() && h.tgt_is_causal {
            // Built once for all layers.
            let batch_first = self.layers.iter().next().is_some_and(|l| l.config.batch_first);
            h.tgt_mask = h.self_attn_mask(batch_first);
        }
        for layer in &self.layers {
            h = h.with_primary(layer.forward(&h));
        }
        match &self.norm {
            Some(n) => n.forward(&h.tgt),
            None => h.tgt,
        }
    }
}

/// Options of [`Transformer`], with PyTorch's defaults (`num_encoder_layers=6,
/// num_decoder_layers=6, dim_feedforward=2048, dropout=0.1, activation=relu,
/// layer_norm_eps=1e-5, batch_first=False, norm_first=False`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransformerConfig {
    /// Encoder layers.
    pub num_encoder_layers: usize,
    /// Decoder layers.
    pub num_decoder_layers: usize,
    /// Hidden size of the feed-forward blocks.
    pub dim_feedforward: usize,
    /// Dropout probability.
    pub dropout: f64,
    /// Feed-forward activation.
    pub activation: Activation,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// `[N, L, E]` inputs instead of `[L, N, E]`.
    pub batch_first: bool,
    /// Pre-norm layers instead of post-norm.
    pub norm_first: bool,
}

impl Default for TransformerConfig {
    fn default() -> Self {
        let l = TransformerEncoderLayerConfig::default();
        TransformerConfig {
            num_encoder_layers: 6,
            num_decoder_layers: 6,
            dim_feedforward: l.dim_feedforward,
            dropout: l.dropout,
            activation: l.activation,
            layer_norm_eps: l.layer_norm_eps,
            batch_first: l.batch_first,
            norm_first: l.norm_first,
        }
    }
}

impl TransformerConfig {
    /// The options each encoder and decoder layer gets.
    fn layer(&self) -> TransformerEncoderLayerConfig {
        TransformerEncoderLayerConfig {
            dim_feedforward: self.dim_feedforward,
            dropout: self.dropout,
            activation: self.activation,
            layer_norm_eps: self.layer_norm_eps,
            batch_first: self.batch_first,
            norm_first: self.norm_first,
        }
    }
}

/// The input of [`Transformer`]: PyTorch's `forward(src, tgt, src_mask=None,
/// tgt_mask=None, memory_mask=None, src_key_padding_mask=None, tgt_key_padding_mask=None,
/// memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None)`. A pair
/// `(&src, &tgt)` converts (no masks). Mask conventions as [`DecoderInput`]'s.
#[derive(Clone, Debug)]
pub struct TransformerInput {
    /// `[S, N, E]` (`[N, S, E]` batch-first, `[S, E]` unbatched): the encoder's input, the
    /// primary input (what hooks see).
    pub src: Tensor,
    /// `[T, N, E]` (`[N, T, E]`, `[T, E]`): the decoder's input.
    pub tgt: Tensor,
    /// `[S, S]` or `[N * heads, S, S]`: the encoder's self-attention mask.
    pub src_mask: Option<Tensor>,
    /// `[T, T]` or `[N * heads, T, T]`: the decoder's self-attention mask.
    pub tgt_mask: Option<Tensor>,
    /// `[T, S]` or `[N * heads, T, S]`: the mask of the decoder's attention over the memory.
    pub memory_mask: Option<Tensor>,
    /// `[N, S]` (`[S]` unbatched): source positions to ignore in the encoder.
    pub src_key_padding_mask: Option<Tensor>,
    /// `[N, T]` (`[T]` unbatched): target positions to ignore in the decoder.
    pub tgt_key_padding_mask: Option<Tensor>,
    /// `[N, S]` (`[S]` unbatched): memory positions to ignore in the decoder.
    pub memory_key_padding_mask: Option<Tensor>,
    /// `src_mask` is causal; without a `src_mask`, the causal mask is applied.
    pub src_is_causal: bool,
    /// `tgt_mask` is causal; without a `tgt_mask`, the causal mask is applied.
    pub tgt_is_causal: bool,
}

impl TransformerInput {
    /// `src` and `tgt` without masks.
    pub fn new(src: &Tensor, tgt: &Tensor) -> Self {
        TransformerInput {
            src: src.clone(),
            tgt: tgt.clone(),
            src_mask: None,
            tgt_mask: None,
            memory_mask: None,
            src_key_padding_mask: None,
            tgt_key_padding_mask: None,
            memory_key_padding_mask: None,
            src_is_causal: false,
            tgt_is_causal: false,
        }
    }

    /// Sets the encoder's self-attention mask.
    pub fn src_mask(mut self, mask: &Tensor) -> Self {
        self.src_mask = Some(mask.clone());
        self
    }

    /// Sets the decoder's self-attention mask.
    pub fn tgt_mask(mut self, mask: &Tensor) -> Self {
        self.tgt_mask = Some(mask.clone());
        self
    }

    /// Sets the mask of the decoder's attention over the memory.
    pub fn memory_mask(mut self, mask: &Tensor) -> Self {
        self.memory_mask = Some(mask.clone());
        self
    }

    /// Sets the source key padding mask.
    pub fn src_key_padding_mask(mut self, mask: &Tensor) -> Self {
        self.src_key_padding_mask = Some(mask.clone());
        self
    }

    /// Sets the target key padding mask.
    pub fn tgt_key_padding_mask(mut self, mask: &Tensor) -> Self {
        self.tgt_key_padding_mask = Some(mask.clone());
        self
    }

    /// Sets the memory key padding mask.
    pub fn memory_key_padding_mask(mut self, mask: &Tensor) -> Self {
        self.memory_key_padding_mask = Some(mask.clone());
        self
    }

    /// Marks the encoder's self-attention as causal.
    pub fn src_is_causal(mut self, causal: bool) -> Self {
        self.src_is_causal = causal;
        self
    }

    /// Marks the decoder's self-attention as causal.
    pub fn tgt_is_causal(mut self, causal: bool) -> Self {
        self.tgt_is_causal = causal;
        self
    }
}

impl ModuleIo for TransformerInput {
    fn primary(&self) -> &Tensor {
        &self.src
    }
    fn with_primary(&self, primary: Tensor) -> Self {
        TransformerInput { src: primary, ..self.clone() }
    }
}

impl<'a> ForwardArg<'a, TransformerInput> for (&'a Tensor, &'a Tensor) {
    fn into_input(self) -> Cow<'a, TransformerInput> {
        Cow::Owned(TransformerInput::new(self.0, self.1))
    }
}

/// The encoder-decoder transformer of "Attention Is All You Need" (PyTorch's
/// `nn.Transformer`): a [`TransformerEncoder`] with a final norm turns `src` into the
/// memory, a [`TransformerDecoder`] with a final norm attends to it from `tgt`. The output
/// has `tgt`'s shape.
///
/// Parameters, PyTorch's keys: `encoder.layers.N.*` (see [`TransformerEncoderLayer`]),
/// `encoder.norm.*`, `decoder.layers.N.*` (see [`TransformerDecoderLayer`]),
/// `decoder.norm.*`. Init: PyTorch's `_reset_parameters`, Xavier uniform on every
/// parameter with two or more dims (attention projections and linear weights), the layers'
/// own init for the rest (zero attention biases, `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`
/// linear biases, unit norms).
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::{Transformer, TransformerConfig, TransformerInput};
/// let cfg = TransformerConfig {
///     num_encoder_layers: 1,
///     num_decoder_layers: 1,
///     dim_feedforward: 16,
///     batch_first: true,
///     ..Default::default()
/// };
/// let model = Transformer::with_config(8, 2, cfg);
/// let (src, tgt) = (Tensor::randn(&[2, 5, 8]), Tensor::randn(&[2, 3, 8]));
/// let mask = Transformer::generate_square_subsequent_mask(3);
/// let y = model.forward(&TransformerInput::new(&src, &tgt).tgt_mask(&mask));
/// assert_eq!(y.shape(), &[2, 3, 8]);
/// assert!(model.state_dict().keys().any(|k| k == "decoder.layers.0.norm3.weight"));
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct Transformer {
    /// The encoder (its final norm is `encoder.norm`).
    #[module]
    pub encoder: TransformerEncoder,
    /// The decoder (its final norm is `decoder.norm`).
    #[module]
    pub decoder: TransformerDecoder,
    #[base]
    base: ModuleBase,
    d_model: usize,
    nhead: usize,
    batch_first: bool,
}

impl Transformer {
    /// A transformer with PyTorch's defaults but for `d_model` and `nhead` (PyTorch's
    /// defaults for those are 512 and 8).
    #[track_caller]
    pub fn new(d_model: usize, nhead: usize) -> Self {
        Self::with_config(d_model, nhead, TransformerConfig::default())
    }

    /// A transformer with explicit options.
    ///
    /// # Panics
    /// When `d_model` is not divisible by `nhead`.
    #[track_caller]
    pub fn with_config(d_model: usize, nhead: usize, c: TransformerConfig) -> Self {
        let layer = c.layer();
        let norm = || Some(LayerNorm::with_options(&[d_model], c.layer_norm_eps, true, true));
        let encoder = TransformerEncoder::new(
            c.num_encoder_layers,
            || TransformerEncoderLayer::with_config(d_model, nhead, layer),
            norm(),
        );
        let decoder = TransformerDecoder::new(
            c.num_decoder_layers,
            || TransformerDecoderLayer::with_config(d_model, nhead, layer),
            norm(),
        );
        let model =
            Transformer { encoder, decoder, base: ModuleBase::default(), d_model, nhead, batch_first: c.batch_first };
        crate::reset::xavier_matrices(&model);
        model
    }

    /// A `[n, n]` float mask with `-inf` above the diagonal and `0` elsewhere: position `i`
    /// attends to positions `0..=i` only (PyTorch's `generate_square_subsequent_mask`).
    ///
    /// ```
    /// use nn_layers::Transformer;
    /// let m = Transformer::generate_square_subsequent_mask(3);
    /// let inf = f32::NEG_INFINITY;
    /// assert_eq!(m.to_vec(), vec![0.0, inf, inf, 0.0, 0.0, inf, 0.0, 0.0, 0.0]);
    /// ```
    pub fn generate_square_subsequent_mask(n: usize) -> Tensor {
        Tensor::full(&[n, n], f64::NEG_INFINITY).triu(1)
    }

    /// The feature size `E`.
    pub fn d_model(&self) -> usize {
        self.d_model
    }

    /// The number of attention heads.
    pub fn nhead(&self) -> usize {
        self.nhead
    }

    #[track_caller]
    fn check(&self, input: &TransformerInput) {
        let (src, tgt) = (&input.src, &input.tgt);
        let d = self.d_model;
        if src.rank() == 0 || tgt.rank() == 0 || src.shape()[src.rank() - 1] != d || tgt.shape()[tgt.rank() - 1] != d {
            panic!(
                "Transformer(d_model={d}, nhead={}): the feature number of src {:?} and tgt {:?} must be equal to \
                 d_model",
                self.nhead,
                src.shape(),
                tgt.shape()
            );
        }
        let batch_dim = if self.batch_first { 0 } else { 1 };
        if src.rank() == 3 && tgt.rank() == 3 && src.shape()[batch_dim] != tgt.shape()[batch_dim] {
            panic!(
                "Transformer(d_model={d}, nhead={}): the batch number of src {:?} and tgt {:?} must be equal (dim {})",
                self.nhead,
                src.shape(),
                tgt.shape(),
                batch_dim
            );
        }
    }
}

impl Compute for Transformer {
    type Input = TransformerInput;
    type Output = Tensor;

    #[track_caller]
    fn compute(&self, input: &TransformerInput) -> Tensor {
        self.check(input);
        let src_mask = match &input.src_mask {
            None if input.src_is_causal => Some(causal_bool_mask(seq_len(&input.src, self.batch_first), &input.src)),
            m => m.clone(),
        };
        let enc =
            EncoderInput { src: input.src.clone(), src_mask, src_key_padding_mask: input.src_key_padding_mask.clone() };
        let memory = self.encoder.forward(&enc);
        let dec = DecoderInput {
            tgt: input.tgt.clone(),
            memory,
            tgt_mask: input.tgt_mask.clone(),
            memory_mask: input.memory_mask.clone(),
            tgt_key_padding_mask: input.tgt_key_padding_mask.clone(),
            memory_key_padding_mask: input.memory_key_padding_mask.clone(),
            tgt_is_causal: input.tgt_is_causal,
        };
        self.decoder.forward(&dec)
    }
}

impl nn_core::ExtraRepr for Transformer {
    fn extra_repr(&self) -> String {
        String::new()
    }
}
