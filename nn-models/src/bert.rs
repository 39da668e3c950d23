//! BERT (transformers' `BertModel`): the encoder with its pooler, loading a transformers
//! checkpoint directory with the checkpoint's own keys.
//!
//! Reads top to bottom like `modeling_bert.py`: the config, the embeddings, the
//! self-attention and its output, the feed-forward pair, the layer, the pooler, the model.

use std::path::Path;

use nn_core::ops::AttentionConfig;
use nn_core::prelude::*;
use nn_core::DType;
use nn_layers::{Dropout, Embedding, LayerNorm, Linear, ModuleList};
use serde::{Deserialize, Serialize};

use crate::activation::Activation;
use crate::error::Result;
use crate::heads::{merge_heads, split_heads};
use crate::hf_init::{hf_embedding, hf_linear, hf_word_embedding, padding_row, std_init};
use crate::pretrained::{self, LoadOptions};

/// `BertConfig`: the fields of a BERT `config.json`, with transformers' names and defaults.
/// The sizes have no default: a config without one is an error naming it.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BertConfig {
    /// Number of token ids.
    pub vocab_size: usize,
    /// Width of every hidden state.
    pub hidden_size: usize,
    /// Number of encoder layers.
    pub num_hidden_layers: usize,
    /// Number of attention heads (divides `hidden_size`).
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Number of positions (the longest input).
    pub max_position_embeddings: usize,
    /// The feed-forward activation (default `"gelu"`, the exact one).
    #[serde(default = "gelu")]
    pub hidden_act: Activation,
    /// Dropout on embeddings and sub-layer outputs (training only; default 0.1).
    #[serde(default = "tenth")]
    pub hidden_dropout_prob: f64,
    /// Dropout on attention weights (training only; default 0.1).
    #[serde(default = "tenth")]
    pub attention_probs_dropout_prob: f64,
    /// Number of token types (segments; default 2).
    #[serde(default = "two")]
    pub type_vocab_size: usize,
    /// Layer norms' epsilon (default 1e-12).
    #[serde(default = "bert_eps")]
    pub layer_norm_eps: f64,
    /// Standard deviation of the initial weights (default 0.02).
    #[serde(default = "std_init")]
    pub initializer_range: f64,
    /// Only `"absolute"` (the default) is implemented; anything else is refused.
    #[serde(default = "absolute")]
    pub position_embedding_type: String,
    /// Whether a language-model head would share the word embeddings (`BertModel` has none).
    #[serde(default = "pretrained::yes")]
    pub tie_word_embeddings: bool,
    /// The padding token (default 0, `[PAD]`): its word-embedding row starts at zero and is
    /// never trained (`nn.Embedding`'s `padding_idx`, as transformers builds it); `null`
    /// for none, negative counts from the end.
    #[serde(default = "bert_pad")]
    pub pad_token_id: Option<i64>,
    /// Read and unused (`BertModel` does not generate).
    #[serde(default)]
    pub eos_token_id: Option<crate::generation::TokenIds>,
}

fn gelu() -> Activation {
    Activation::Gelu
}
fn tenth() -> f64 {
    0.1
}
fn two() -> usize {
    2
}
fn bert_eps() -> f64 {
    1e-12
}
fn bert_pad() -> Option<i64> {
    Some(0)
}
fn absolute() -> String {
    "absolute".into()
}

impl BertConfig {
    /// Reads `dir/config.json`.
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) naming a missing, unknown or unsupported field;
    /// [`Error::Architecture`](crate::Error::Architecture) for a config of another model.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let c: BertConfig =
            pretrained::read_config(dir, "bert", &["BertModel", "BertForPreTraining", "BertForMaskedLM"], "BertModel")?;
        let bad = |reason: String| crate::Error::Config { path: dir.join("config.json"), reason };
        if c.position_embedding_type != "absolute" {
            return Err(bad(format!(
                "`position_embedding_type` \"{}\": only \"absolute\" is implemented",
                c.position_embedding_type
            )));
        }
        if let Some(pad) = c.pad_token_id {
            padding_row(pad, c.vocab_size).map_err(bad)?;
        }
        if c.num_attention_heads == 0 || !c.hidden_size.is_multiple_of(c.num_attention_heads) {
            return Err(bad(format!(
                "`hidden_size` {} is not a multiple of `num_attention_heads` {}",
                c.hidden_size, c.num_attention_heads
            )));
        }
        Ok(c)
    }
}

/// Word, position and token-type embeddings, summed and normalised.
///
/// Keys: `word_embeddings.weight`, `position_embeddings.weight`,
/// `token_type_embeddings.weight`, `LayerNorm.weight`, `LayerNorm.bias`.
#[derive(Module)]
pub struct BertEmbeddings {
    /// `[vocab_size, hidden_size]`.
    #[module]
    pub word_embeddings: Embedding,
    /// `[max_position_embeddings, hidden_size]`.
    #[module]
    pub position_embeddings: Embedding,
    /// `[type_vocab_size, hidden_size]`.
    #[module]
    pub token_type_embeddings: Embedding,
    /// The normalisation (key `LayerNorm`).
    #[module(rename = "LayerNorm")]
    pub layer_norm: LayerNorm,
    /// Dropout on the sum.
    #[module]
    pub dropout: Dropout,
    #[base]
    base: ModuleBase,
}

impl BertEmbeddings {
    fn new(c: &BertConfig) -> Self {
        BertEmbeddings {
            word_embeddings: hf_word_embedding(c.vocab_size, c.hidden_size, c.initializer_range, c.pad_token_id),
            position_embeddings: hf_embedding(c.max_position_embeddings, c.hidden_size, c.initializer_range),
            token_type_embeddings: hf_embedding(c.type_vocab_size, c.hidden_size, c.initializer_range),
            layer_norm: LayerNorm::with_options(&[c.hidden_size], c.layer_norm_eps, true, true),
            dropout: Dropout::new(c.hidden_dropout_prob),
            base: ModuleBase::default(),
        }
    }
}

impl Compute for BertEmbeddings {
    /// `(input_ids [N, L], token_type_ids [N, L])`, both i64.
    type Input = (Tensor, Tensor);
    /// `[N, L, hidden_size]`.
    type Output = Tensor;
    fn compute(&self, (ids, types): &(Tensor, Tensor)) -> Tensor {
        let (n, l) = (ids.shape()[0], ids.shape()[1]);
        let positions = Tensor::from_vec_i64((0..l as i64).collect(), &[1, l]).to_device(ids.device()).expand(&[n, l]);
        let x = &(&self.word_embeddings.forward(ids) + &self.token_type_embeddings.forward(types))
            + &self.position_embeddings.forward(&positions);
        self.dropout.forward(&self.layer_norm.forward(&x))
    }
}

/// Multi-head self-attention with separate projections (keys `query.*`, `key.*`,
/// `value.*`); the scores scaled by `1/sqrt(head size)`, padded keys masked out.
#[derive(Module)]
pub struct BertSelfAttention {
    /// `[hidden, hidden]` and `[hidden]`.
    #[module]
    pub query: Linear,
    /// `[hidden, hidden]` and `[hidden]`.
    #[module]
    pub key: Linear,
    /// `[hidden, hidden]` and `[hidden]`.
    #[module]
    pub value: Linear,
    #[base]
    base: ModuleBase,
    heads: usize,
    dropout: f64,
}

impl Compute for BertSelfAttention {
    /// `(hidden [N, L, E], keep [N, 1, 1, L])`: `keep` is bool, `true` = may attend
    /// (built by [`BertModel`] from the 0/1 attention mask).
    type Input = (Tensor, Option<Tensor>);
    /// `[N, L, E]`.
    type Output = Tensor;
    fn compute(&self, (x, keep): &(Tensor, Option<Tensor>)) -> Tensor {
        let [q, k, v] = [&self.query, &self.key, &self.value].map(|p| split_heads(&p.forward(x), self.heads));
        let dropout_p = if self.base.is_training() { self.dropout } else { 0.0 };
        let config = AttentionConfig { attn_mask: keep.as_ref(), dropout_p, ..Default::default() };
        merge_heads(&q.scaled_dot_product_attention(&k, &v, &config))
    }
}

/// The attention's output projection, dropout, and the residual's normalisation.
///
/// Keys: `dense.*`, `LayerNorm.*`.
#[derive(Module)]
pub struct BertSelfOutput {
    /// `[hidden, hidden]`.
    #[module]
    pub dense: Linear,
    /// The normalisation (key `LayerNorm`).
    #[module(rename = "LayerNorm")]
    pub layer_norm: LayerNorm,
    /// Dropout before the residual.
    #[module]
    pub dropout: Dropout,
    #[base]
    base: ModuleBase,
}

impl Compute for BertSelfOutput {
    /// `(hidden, residual)`.
    type Input = (Tensor, Tensor);
    type Output = Tensor;
    fn compute(&self, (h, residual): &(Tensor, Tensor)) -> Tensor {
        self.layer_norm.forward(&(&self.dropout.forward(&self.dense.forward(h)) + residual))
    }
}

/// Self-attention and its output (keys `self.*`, `output.*`; `self` is a Rust keyword,
/// hence `#[module(rename = "self")]`).
#[derive(Module)]
pub struct BertAttention {
    /// The attention proper (key `self`).
    #[module(rename = "self")]
    pub self_attn: BertSelfAttention,
    /// Its output projection and normalisation.
    #[module]
    pub output: BertSelfOutput,
    #[base]
    base: ModuleBase,
}

impl Compute for BertAttention {
    /// As [`BertSelfAttention`]'s.
    type Input = (Tensor, Option<Tensor>);
    type Output = Tensor;
    fn compute(&self, input: &(Tensor, Option<Tensor>)) -> Tensor {
        self.output.forward((&self.self_attn.forward(input), &input.0))
    }
}

/// The feed-forward's first half: `dense` (`[intermediate, hidden]`) and the activation.
#[derive(Module)]
pub struct BertIntermediate {
    /// `[intermediate_size, hidden_size]`.
    #[module]
    pub dense: Linear,
    #[base]
    base: ModuleBase,
    act: Activation,
}

impl Compute for BertIntermediate {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        self.act.apply(&self.dense.forward(x))
    }
}

/// The feed-forward's second half with the residual's normalisation (keys `dense.*`,
/// `LayerNorm.*`).
#[derive(Module)]
pub struct BertOutput {
    /// `[hidden_size, intermediate_size]`.
    #[module]
    pub dense: Linear,
    /// The normalisation (key `LayerNorm`).
    #[module(rename = "LayerNorm")]
    pub layer_norm: LayerNorm,
    /// Dropout before the residual.
    #[module]
    pub dropout: Dropout,
    #[base]
    base: ModuleBase,
}

impl Compute for BertOutput {
    /// `(hidden, residual)`.
    type Input = (Tensor, Tensor);
    type Output = Tensor;
    fn compute(&self, (h, residual): &(Tensor, Tensor)) -> Tensor {
        self.layer_norm.forward(&(&self.dropout.forward(&self.dense.forward(h)) + residual))
    }
}

/// One encoder layer: attention, then the feed-forward, each with its residual.
#[derive(Module)]
pub struct BertLayer {
    /// Keys `attention.self.*`, `attention.output.*`.
    #[module]
    pub attention: BertAttention,
    /// Keys `intermediate.dense.*`.
    #[module]
    pub intermediate: BertIntermediate,
    /// Keys `output.dense.*`, `output.LayerNorm.*`.
    #[module]
    pub output: BertOutput,
    #[base]
    base: ModuleBase,
}

impl BertLayer {
    fn new(c: &BertConfig) -> Self {
        let (e, std) = (c.hidden_size, c.initializer_range);
        let norm = || LayerNorm::with_options(&[e], c.layer_norm_eps, true, true);
        BertLayer {
            attention: BertAttention {
                self_attn: BertSelfAttention {
                    query: hf_linear(e, e, true, std),
                    key: hf_linear(e, e, true, std),
                    value: hf_linear(e, e, true, std),
                    base: ModuleBase::default(),
                    heads: c.num_attention_heads,
                    dropout: c.attention_probs_dropout_prob,
                },
                output: BertSelfOutput {
                    dense: hf_linear(e, e, true, std),
                    layer_norm: norm(),
                    dropout: Dropout::new(c.hidden_dropout_prob),
                    base: ModuleBase::default(),
                },
                base: ModuleBase::default(),
            },
            intermediate: BertIntermediate {
                dense: hf_linear(e, c.intermediate_size, true, std),
                base: ModuleBase::default(),
                act: c.hidden_act,
            },
            output: BertOutput {
                dense: hf_linear(c.intermediate_size, e, true, std),
                layer_norm: norm(),
                dropout: Dropout::new(c.hidden_dropout_prob),
                base: ModuleBase::default(),
            },
            base: ModuleBase::default(),
        }
    }
}

impl Compute for BertLayer {
    /// As [`BertSelfAttention`]'s.
    type Input = (Tensor, Option<Tensor>);
    type Output = Tensor;
    fn compute(&self, input: &(Tensor, Option<Tensor>)) -> Tensor {
        let a = self.attention.forward(input);
        self.output.forward((&self.intermediate.forward(&a), &a))
    }
}

/// The stack of layers (key `layer.N.*`).
#[derive(Module)]
pub struct BertEncoder {
    /// The layers.
    #[module]
    pub layer: ModuleList<BertLayer>,
}

/// `tanh(dense(h[:, 0]))`: the first token's state, projected (keys `dense.*`).
#[derive(Module)]
pub struct BertPooler {
    /// `[hidden, hidden]`.
    #[module]
    pub dense: Linear,
    #[base]
    base: ModuleBase,
}

impl Compute for BertPooler {
    /// `[N, L, E]`.
    type Input = Tensor;
    /// `[N, E]`.
    type Output = Tensor;
    fn compute(&self, h: &Tensor) -> Tensor {
        self.dense.forward(&h.narrow(1, 0, 1).squeeze_dim(1)).tanh()
    }
}

/// transformers' `BertModel`: embeddings, encoder and pooler, with the checkpoint's keys
/// (`embeddings.word_embeddings.weight`, `encoder.layer.0.attention.self.query.weight`,
/// `pooler.dense.weight`, ...).
///
/// The input is `(input_ids, attention_mask)`, both `[N, L]`: ids are i64; the mask is
/// Hugging Face's (**1 = attend, 0 = padding**; i64, bool or float; bool `true` = attend,
/// the opposite of `MultiheadAttention`'s `key_padding_mask`), converted inside to the
/// attention's bool form. Any value other than 0 and 1 panics: an additive mask (0 =
/// attend, -10000 = padding) would otherwise be read backwards. Every token is of type 0 (transformers'
/// default `token_type_ids`; sentence pairs with segment ids are not taken by this input).
/// The output is `(last_hidden_state
/// [N, L, E], pooler_output [N, E])`.
///
/// ```
/// use nn_core::prelude::*;
/// use nn_models::bert::{BertConfig, BertModel};
///
/// let config: BertConfig = serde_json::from_str(r#"{"vocab_size": 30, "hidden_size": 8,
///     "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
///     "max_position_embeddings": 16}"#).unwrap();
/// let mut bert = BertModel::new(&config);
/// bert.eval();
/// let ids = Tensor::from_vec_i64(vec![2, 7, 4, 9, 1, 0], &[2, 3]);
/// let mask = Tensor::from_vec_i64(vec![1, 1, 1, 1, 1, 0], &[2, 3]); // last token: padding
/// let (hidden, pooled) = bert.forward((&ids, &mask));
/// assert_eq!((hidden.shape(), pooled.shape()), (&[2, 3, 8][..], &[2, 8][..]));
/// ```
#[derive(Module)]
pub struct BertModel {
    /// Keys `embeddings.*`.
    #[module]
    pub embeddings: BertEmbeddings,
    /// Keys `encoder.layer.N.*`.
    #[module]
    pub encoder: BertEncoder,
    /// Keys `pooler.dense.*`.
    #[module]
    pub pooler: BertPooler,
    #[base]
    base: ModuleBase,
    config: BertConfig,
}

impl BertModel {
    /// A model with transformers' random initialisation (weights `N(0, initializer_range)`,
    /// biases zero, norms one and zero), in training mode.
    pub fn new(config: &BertConfig) -> Self {
        let c = config;
        BertModel {
            embeddings: BertEmbeddings::new(c),
            encoder: BertEncoder { layer: (0..c.num_hidden_layers).map(|_| BertLayer::new(c)).collect() },
            pooler: BertPooler {
                dense: hf_linear(c.hidden_size, c.hidden_size, true, c.initializer_range),
                base: ModuleBase::default(),
            },
            base: ModuleBase::default(),
            config: c.clone(),
        }
    }

    /// Loads a transformers checkpoint directory (`config.json`, `model.safetensors`),
    /// strictly and with its keys unchanged; the model is in evaluation mode.
    ///
    /// A checkpoint of BERT with a head (`BertForPreTraining`, as `bert-base-uncased`
    /// ships; `BertForMaskedLM`), whose keys are the encoder's under `bert.` and the
    /// head's under `cls.`, loads its encoder, as transformers' `BertModel.from_pretrained`
    /// does: the head is not part of this model, and its weights are not read. The rest
    /// is still strict (a `BertForMaskedLM` has no pooler: its keys are named missing).
    ///
    /// # Errors
    /// A config error naming the field; [`Error::MissingWeights`](crate::Error::MissingWeights);
    /// [`Error::Weights`](crate::Error::Weights) naming every key that does not fit.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<Self> {
        Self::from_pretrained_with(dir, &LoadOptions::f32())
    }

    /// [`from_pretrained`](Self::from_pretrained) with transformers' load options: the
    /// checkpoint's own dtype or another ([`LoadOptions::dtype`]), and the device.
    ///
    /// # Errors
    /// As [`from_pretrained`](Self::from_pretrained).
    pub fn from_pretrained_with(dir: impl AsRef<Path>, options: &LoadOptions) -> Result<Self> {
        let dir = dir.as_ref();
        let config = BertConfig::from_dir(dir)?;
        let weights = pretrained::weights_path(dir)?;
        let adapt = |w| pretrained::base_of_headed(w, "bert", "cls");
        pretrained::load_weights(&weights, || BertModel::new(&config), adapt, options)
    }

    /// The config the model was built from.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }
}

impl Compute for BertModel {
    /// `(input_ids, attention_mask)`, both `[N, L]`.
    type Input = (Tensor, Tensor);
    /// `(last_hidden_state [N, L, E], pooler_output [N, E])`.
    type Output = (Tensor, Tensor);

    #[track_caller]
    fn compute(&self, (ids, mask): &(Tensor, Tensor)) -> (Tensor, Tensor) {
        let c = &self.config;
        if ids.rank() != 2 || ids.dtype() != DType::I64 {
            panic!("BertModel: input_ids must be i64 [batch, seq], got {} {:?}", ids.dtype(), ids.shape());
        }
        if mask.shape() != ids.shape() {
            panic!("BertModel: attention_mask {:?} must have input_ids' shape {:?}", mask.shape(), ids.shape());
        }
        let (n, l) = (ids.shape()[0], ids.shape()[1]);
        if l > c.max_position_embeddings {
            panic!(
                "BertModel: a sequence of {l} tokens is longer than the model's {} positions (`max_position_embeddings`)",
                c.max_position_embeddings
            );
        }
        // Hugging Face's mask is 1 = attend, 0 = padding; any other value is refused.
        let keep = crate::causal_lm_input::hf_mask_tokens("BertModel", mask);
        let keep = keep.reshape(&[n, 1, 1, l]);
        let types = Tensor::full_on(&[n, l], 0.0, DType::I64, ids.device());
        let mut h = self.embeddings.forward((ids, &types));
        let keep = Some(keep);
        for layer in &self.encoder.layer {
            h = layer.forward((h, keep.clone()));
        }
        let pooled = self.pooler.forward(&h);
        (h, pooled)
    }
}
