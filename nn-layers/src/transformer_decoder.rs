//! `TransformerDecoderLayer` and `TransformerDecoder`, with their input, `DecoderInput`
//! (PyTorch's `nn.TransformerDecoder` family), and the causal mask they share with the
//! whole `Transformer` (`encoder_decoder`).

use std::borrow::Cow;

use nn_core::module::ForwardArg;
use nn_core::{Compute, Forward, Module, ModuleBase, ModuleIo, Tensor};

use crate::{
    AttentionInput, Dropout, LayerNorm, Linear, ModuleList, MultiheadAttention, TransformerEncoderLayerConfig,
};

/// Options of [`TransformerDecoderLayer`]: the same as the encoder layer's (PyTorch's
/// `dim_feedforward=2048, dropout=0.1, activation=relu, layer_norm_eps=1e-5,
/// batch_first=False, norm_first=False`).
pub type TransformerDecoderLayerConfig = TransformerEncoderLayerConfig;

/// A `[len, len]` bool mask, `true` above the diagonal: position `i` may not attend to
/// the positions after it.
pub(crate) fn causal_bool_mask(len: usize, like: &Tensor) -> Tensor {
    Tensor::from_vec_bool((0..len * len).map(|k| k % len > k / len).collect(), &[len, len]).to_device(like.device())
}

/// The sequence length of `x` (`[L, N, E]`, `[N, L, E]` batch-first, or `[L, E]`).
pub(crate) fn seq_len(x: &Tensor, batch_first: bool) -> usize {
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
#[derive(Clone, Debug, ModuleIo)]
pub struct DecoderInput {
    /// `[T, N, E]` (`[N, T, E]` batch-first, `[T, E]` unbatched): the target sequence, the
    /// primary input (what hooks see).
    #[io(primary)]
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
