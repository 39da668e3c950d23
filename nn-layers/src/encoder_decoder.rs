//! The whole encoder-decoder `Transformer` (PyTorch's `nn.Transformer`), its options,
//! `TransformerConfig`, and its input, `TransformerInput`.

use std::borrow::Cow;

use nn_core::module::ForwardArg;
use nn_core::{Compute, Forward, Module, ModuleBase, ModuleIo, Tensor};

use crate::transformer_decoder::{causal_bool_mask, seq_len};
use crate::{
    Activation, DecoderInput, EncoderInput, LayerNorm, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
    TransformerEncoderLayer, TransformerEncoderLayerConfig,
};

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
#[derive(Clone, Debug, ModuleIo)]
pub struct TransformerInput {
    /// `[S, N, E]` (`[N, S, E]` batch-first, `[S, E]` unbatched): the encoder's input, the
    /// primary input (what hooks see).
    #[io(primary)]
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
