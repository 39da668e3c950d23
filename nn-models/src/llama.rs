//! Llama (transformers' `LlamaForCausalLM`): RMSNorm, rotary position embeddings, a SwiGLU
//! MLP and grouped-query attention, loading a transformers checkpoint directory with the
//! checkpoint's own keys, and generating with a key/value cache.
//!
//! Reads top to bottom like `modeling_llama.py`: the config, the MLP, the attention, the
//! decoder layer, the model, the model with its head.

use std::path::Path;

use nn_core::ops::AttentionConfig;
use nn_core::prelude::*;
use nn_layers::{Linear, ModuleList, RMSNorm, RMSNormConfig};
use serde::{Deserialize, Serialize};

use crate::activation::Activation;
pub use crate::causal_lm_input::CausalLmInput;
use crate::causal_lm_input::{check_ids, RowAttention};
use crate::error::{Error, Result};
use crate::generation::{CausalLm, TokenIds};
use crate::heads::{merge_heads, split_heads};
use crate::hf_init::{hf_linear, hf_word_embedding, padding_row, std_init};
use crate::kv_cache::{causal_mask, KvCache, LayerCache};
use crate::pretrained::{self, LoadOptions};
use crate::rotary::{apply_rotary, Rotary};

/// transformers' `rope_parameters` (and the older `rope_scaling`): only the default,
/// unscaled rotation is implemented.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RopeParameters {
    /// The base `theta`. Absent, the config's top-level `rope_theta` fills it, as
    /// transformers 5 does (and 10000 without either).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_theta: Option<f64>,
    /// Must be `"default"`: scaled variants (`linear`, `dynamic`, `yarn`, `llama3`, ...)
    /// are refused by name.
    #[serde(default = "default_rope")]
    pub rope_type: String,
}

fn default_rope() -> String {
    "default".into()
}

/// `LlamaConfig`: the fields of a Llama `config.json`, with transformers' names and
/// defaults. The sizes have no default: a config without one is an error naming it.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LlamaConfig {
    /// Number of token ids.
    pub vocab_size: usize,
    /// Width of every hidden state.
    pub hidden_size: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Number of query heads.
    pub num_attention_heads: usize,
    /// Number of key/value heads (grouped-query attention; default: one per query head).
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Size of each head (default `hidden_size / num_attention_heads`).
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// Number of positions (the longest sequence).
    pub max_position_embeddings: usize,
    /// The MLP's gate activation (default `"silu"`).
    #[serde(default = "silu")]
    pub hidden_act: Activation,
    /// RMSNorm's epsilon (default 1e-6).
    #[serde(default = "llama_eps")]
    pub rms_norm_eps: f64,
    /// The rotation (transformers 5's field).
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
    /// The rotation base (transformers 4's field).
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// transformers 4's scaled rotations: must be absent or null.
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
    /// Biases on the attention projections (default false).
    #[serde(default)]
    pub attention_bias: bool,
    /// Dropout on attention weights (training only; default 0).
    #[serde(default)]
    pub attention_dropout: f64,
    /// Biases on the MLP's projections (default false).
    #[serde(default)]
    pub mlp_bias: bool,
    /// Must be 1 (the tensor-parallel split of pretraining is not reproduced).
    #[serde(default = "one")]
    pub pretraining_tp: usize,
    /// The head shares the token embedding (default false for Llama).
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Standard deviation of the initial weights (default 0.02).
    #[serde(default = "std_init")]
    pub initializer_range: f64,
    /// The token that ends a text (default 2; one id or a list, as Llama 3's):
    /// [`generate`](crate::generation::generate) stops after any of them, as transformers'
    /// does.
    #[serde(default = "llama_eos")]
    pub eos_token_id: Option<TokenIds>,
    /// The padding token (default none): its embedding row starts at zero and is never
    /// trained (`nn.Embedding`'s `padding_idx`, as transformers builds it); negative counts
    /// from the end.
    #[serde(default)]
    pub pad_token_id: Option<i64>,
}

fn silu() -> Activation {
    Activation::Silu
}
fn llama_eps() -> f64 {
    1e-6
}
fn llama_eos() -> Option<TokenIds> {
    Some(TokenIds::One(2))
}
fn one() -> usize {
    1
}

impl LlamaConfig {
    /// Reads `dir/config.json`.
    ///
    /// # Errors
    /// [`Error::Config`] naming a missing, unknown or unsupported field (a scaled rotation,
    /// `pretraining_tp` above 1, heads that do not divide); [`Error::Architecture`] for
    /// another model's config.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let c: LlamaConfig =
            pretrained::read_config(dir, "llama", &["LlamaForCausalLM", "LlamaModel"], "LlamaForCausalLM")?;
        c.check().map_err(|reason| Error::Config { path: dir.join("config.json"), reason })?;
        Ok(c)
    }

    fn check(&self) -> std::result::Result<(), String> {
        if let Some(pad) = self.pad_token_id {
            padding_row(pad, self.vocab_size)?;
        }
        if let (Some(inner), Some(outer)) = (self.rope_parameters.as_ref().and_then(|r| r.rope_theta), self.rope_theta)
        {
            if inner != outer {
                return Err(format!(
                    "`rope_parameters.rope_theta` {inner} and `rope_theta` {outer} disagree: the rotation base is \
                     one of them"
                ));
            }
        }
        if let Some(t) = [self.rope_parameters.as_ref().and_then(|r| r.rope_theta), self.rope_theta]
            .into_iter()
            .flatten()
            .find(|t| !(t.is_finite() && *t > 0.0))
        {
            return Err(format!("`rope_theta` {t}: the rotation base is finite and positive"));
        }
        if let Some(r) = &self.rope_parameters {
            if r.rope_type != "default" {
                return Err(format!(
                    "`rope_parameters.rope_type` \"{}\": only \"default\" is implemented",
                    r.rope_type
                ));
            }
        }
        if self.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(format!(
                "`rope_scaling` {}: scaled rotations are not implemented",
                self.rope_scaling.as_ref().unwrap()
            ));
        }
        if self.pretraining_tp != 1 {
            return Err(format!("`pretraining_tp` {}: only 1 is implemented", self.pretraining_tp));
        }
        let (h, kv) = (self.num_attention_heads, self.kv_heads());
        if h == 0 || kv == 0 || h % kv != 0 {
            return Err(format!("`num_attention_heads` {h} is not a multiple of `num_key_value_heads` {kv}"));
        }
        if self.head_dim.is_none() && !self.hidden_size.is_multiple_of(h) {
            return Err(format!("`hidden_size` {} is not a multiple of `num_attention_heads` {h}", self.hidden_size));
        }
        if !self.head_size().is_multiple_of(2) {
            return Err(format!("the head size {} must be even for rotary embeddings", self.head_size()));
        }
        Ok(())
    }

    /// Key/value heads.
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// The size of each head.
    pub fn head_size(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// The rotation base.
    pub fn theta(&self) -> f64 {
        self.rope_parameters.as_ref().and_then(|r| r.rope_theta).or(self.rope_theta).unwrap_or(10000.0)
    }
}

/// SwiGLU: `down_proj(act(gate_proj(x)) * up_proj(x))` (keys `gate_proj.*`, `up_proj.*`,
/// `down_proj.*`).
#[derive(Module)]
#[module(name = "LlamaMLP")]
pub struct LlamaMlp {
    /// `[intermediate, hidden]`.
    #[module]
    pub gate_proj: Linear,
    /// `[intermediate, hidden]`.
    #[module]
    pub up_proj: Linear,
    /// `[hidden, intermediate]`.
    #[module]
    pub down_proj: Linear,
    #[base]
    base: ModuleBase,
    act: Activation,
}

impl Compute for LlamaMlp {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let gate = self.act.apply(&self.gate_proj.forward(x));
        self.down_proj.forward(&(&gate * &self.up_proj.forward(x)))
    }
}

/// Grouped-query attention with rotary embeddings (keys `q_proj.*`, `k_proj.*`, `v_proj.*`,
/// `o_proj.*`): `num_key_value_heads` key/value heads, each shared by a group of query
/// heads (broadcast, not copied, before the product).
#[derive(Module)]
pub struct LlamaAttention {
    /// `[heads * head_dim, hidden]`.
    #[module]
    pub q_proj: Linear,
    /// `[kv_heads * head_dim, hidden]`.
    #[module]
    pub k_proj: Linear,
    /// `[kv_heads * head_dim, hidden]`.
    #[module]
    pub v_proj: Linear,
    /// `[hidden, heads * head_dim]`.
    #[module]
    pub o_proj: Linear,
    #[base]
    base: ModuleBase,
    heads: usize,
    kv_heads: usize,
    rotary: Rotary,
    dropout: f64,
}

impl LlamaAttention {
    /// The rotary tables of `rows`' positions, or of `start..start + l` in every row.
    fn tables(
        &self,
        rows: &RowAttention,
        start: usize,
        n: usize,
        l: usize,
        dtype: DType,
        device: Device,
    ) -> (Tensor, Tensor) {
        match &rows.positions {
            Some(p) => self.rotary.cos_sin_at(p, n, l, dtype, device),
            None => self.rotary.cos_sin(start, l, dtype, device),
        }
    }
}

impl Compute for LlamaAttention {
    /// `(hidden [N, L, E], the layer's cache, the rows' mask and positions)`.
    type Input = (Tensor, Option<LayerCache>, RowAttention);
    /// `[N, L, E]`.
    type Output = Tensor;
    fn compute(&self, (x, cache, rows): &(Tensor, Option<LayerCache>, RowAttention)) -> Tensor {
        let (n, l) = (x.shape()[0], x.shape()[1]);
        let q = split_heads(&self.q_proj.forward(x), self.heads);
        let k = split_heads(&self.k_proj.forward(x), self.kv_heads);
        let v = split_heads(&self.v_proj.forward(x), self.kv_heads);
        let (cos, sin) = match &rows.rotary {
            Some((cos, sin)) if cos.dtype() == x.dtype() => (cos.clone(), sin.clone()),
            _ => {
                let start = cache.as_ref().map_or(0, |c| c.cache_len());
                self.tables(rows, start, n, l, x.dtype(), x.device())
            }
        };
        let (q, k) = (apply_rotary(&q, &cos, &sin), apply_rotary(&k, &cos, &sin));
        let (k, v, past) = match cache {
            Some(c) => c.append(&k, &v),
            None => (k, v, 0),
        };
        let mask = match &rows.keep {
            Some(keep) => Some(keep.clone()),
            None if past == 0 => None,
            None => causal_mask(l, past, x.device()),
        };
        // Each key/value head serves `heads / kv_heads` consecutive query heads
        // (transformers' `repeat_kv`), read in place by the grouped attention.
        let config = AttentionConfig {
            attn_mask: mask.as_ref(),
            is_causal: rows.keep.is_none() && past == 0 && l > 1,
            dropout_p: if self.base.is_training() { self.dropout } else { 0.0 },
            scale: None,
            enable_gqa: true,
        };
        self.o_proj.forward(&merge_heads(&q.scaled_dot_product_attention(&k, &v, &config)))
    }
}

/// A pre-norm decoder layer (keys `input_layernorm.weight`, `self_attn.*`,
/// `post_attention_layernorm.weight`, `mlp.*`).
#[derive(Module)]
pub struct LlamaDecoderLayer {
    /// Before the attention.
    #[module]
    pub input_layernorm: RMSNorm,
    /// The attention.
    #[module]
    pub self_attn: LlamaAttention,
    /// Before the MLP.
    #[module]
    pub post_attention_layernorm: RMSNorm,
    /// The MLP.
    #[module]
    pub mlp: LlamaMlp,
    #[base]
    base: ModuleBase,
}

impl Compute for LlamaDecoderLayer {
    /// As [`LlamaAttention`]'s.
    type Input = (Tensor, Option<LayerCache>, RowAttention);
    type Output = Tensor;
    fn compute(&self, (x, cache, rows): &(Tensor, Option<LayerCache>, RowAttention)) -> Tensor {
        let h = x + &self.self_attn.forward((self.input_layernorm.forward(x), cache.clone(), rows.clone()));
        &h + &self.mlp.forward(&self.post_attention_layernorm.forward(&h))
    }
}

fn rms_norm(c: &LlamaConfig) -> RMSNorm {
    RMSNorm::with_config(&[c.hidden_size], RMSNormConfig { eps: Some(c.rms_norm_eps), elementwise_affine: true })
}

impl LlamaDecoderLayer {
    fn new(c: &LlamaConfig) -> Self {
        let (e, d, std) = (c.hidden_size, c.head_size(), c.initializer_range);
        let (h, kv, i) = (c.num_attention_heads, c.kv_heads(), c.intermediate_size);
        LlamaDecoderLayer {
            input_layernorm: rms_norm(c),
            self_attn: LlamaAttention {
                q_proj: hf_linear(e, h * d, c.attention_bias, std),
                k_proj: hf_linear(e, kv * d, c.attention_bias, std),
                v_proj: hf_linear(e, kv * d, c.attention_bias, std),
                o_proj: hf_linear(h * d, e, c.attention_bias, std),
                base: ModuleBase::default(),
                heads: h,
                kv_heads: kv,
                rotary: Rotary::new(d, c.theta()),
                dropout: c.attention_dropout,
            },
            post_attention_layernorm: rms_norm(c),
            mlp: LlamaMlp {
                gate_proj: hf_linear(e, i, c.mlp_bias, std),
                up_proj: hf_linear(e, i, c.mlp_bias, std),
                down_proj: hf_linear(i, e, c.mlp_bias, std),
                base: ModuleBase::default(),
                act: c.hidden_act,
            },
            base: ModuleBase::default(),
        }
    }
}

/// The decoder stack: the token embedding, the layers, the final norm (keys
/// `embed_tokens.weight`, `layers.N.*`, `norm.weight`).
#[derive(Module)]
pub struct LlamaModel {
    /// `[vocab_size, hidden_size]`.
    #[module]
    pub embed_tokens: nn_layers::Embedding,
    /// The layers.
    #[module]
    pub layers: ModuleList<LlamaDecoderLayer>,
    /// The final norm.
    #[module]
    pub norm: RMSNorm,
    #[base]
    base: ModuleBase,
    max_positions: usize,
}

impl Compute for LlamaModel {
    type Input = CausalLmInput;
    /// The last hidden state `[N, L, E]`.
    type Output = Tensor;
    #[track_caller]
    fn compute(&self, input: &CausalLmInput) -> Tensor {
        let ids = &input.input_ids;
        let past = input.cache.as_ref().map_or(0, KvCache::seq_len);
        check_ids("LlamaModel", ids, past, self.max_positions, "max_position_embeddings");
        if let Some(c) = &input.cache {
            c.check("LlamaModel", self.layers.len(), ids);
        }
        let mut rows = RowAttention::of("LlamaModel", input, past, self.max_positions, "max_position_embeddings");
        let mut h = self.embed_tokens.forward(ids);
        // Every layer rotates by the same positions: the tables once (a padded batch's are
        // `N` times one row's), in the dtype the layers' norms give them.
        if let Some(first) = self.layers.iter().next() {
            let (n, l) = (ids.shape()[0], ids.shape()[1]);
            rows.rotary = Some(first.self_attn.tables(&rows, past, n, l, h.dtype(), h.device()));
        }
        for (i, layer) in self.layers.iter().enumerate() {
            h = layer.forward((h, input.cache.as_ref().map(|c| c.layer(i)), rows.clone()));
        }
        self.norm.forward(&h)
    }
}

/// transformers' `LlamaForCausalLM`: [`LlamaModel`] (key `model`) and a linear head without
/// bias (`lm_head.weight`, tied to `model.embed_tokens.weight` when the config says so).
///
/// Input: token ids `[N, L]` (i64), or a [`CausalLmInput`] with a cache; output: logits
/// `[N, L, vocab_size]`.
///
/// ```
/// use nn_core::prelude::*;
/// use nn_models::llama::{LlamaConfig, LlamaForCausalLM};
///
/// let config: LlamaConfig = serde_json::from_str(r#"{"vocab_size": 20, "hidden_size": 8,
///     "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 4,
///     "num_key_value_heads": 2, "max_position_embeddings": 32}"#).unwrap();
/// let mut llama = LlamaForCausalLM::new(&config);
/// llama.eval();
/// let logits = llama.forward(&Tensor::from_vec_i64(vec![1, 5, 3], &[1, 3]));
/// assert_eq!(logits.shape(), &[1, 3, 20]);
/// assert_eq!(llama.model.layers[0].self_attn.k_proj.weight.shape(), &[4, 8]); // 2 kv heads of 2
/// ```
#[derive(Module)]
pub struct LlamaForCausalLM {
    /// The decoder stack (keys `model.*`).
    #[module]
    pub model: LlamaModel,
    /// `[vocab_size, hidden_size]`.
    #[module]
    pub lm_head: Linear,
    #[base]
    base: ModuleBase,
    config: LlamaConfig,
}

impl LlamaForCausalLM {
    /// A model with transformers' random initialisation, in training mode.
    ///
    /// # Panics
    /// When the config does not describe a model (heads that do not divide, an odd head
    /// size, a scaled rotation); [`LlamaConfig::from_dir`] reports these as errors.
    #[track_caller]
    pub fn new(config: &LlamaConfig) -> Self {
        if let Err(reason) = config.check() {
            panic!("LlamaForCausalLM: {reason}");
        }
        let c = config;
        let model = LlamaModel {
            embed_tokens: hf_word_embedding(c.vocab_size, c.hidden_size, c.initializer_range, c.pad_token_id),
            layers: (0..c.num_hidden_layers).map(|_| LlamaDecoderLayer::new(c)).collect(),
            norm: rms_norm(c),
            base: ModuleBase::default(),
            max_positions: c.max_position_embeddings,
        };
        let mut lm_head = hf_linear(c.hidden_size, c.vocab_size, false, c.initializer_range);
        if c.tie_word_embeddings {
            lm_head.weight = model.embed_tokens.weight.clone();
        }
        LlamaForCausalLM { model, lm_head, base: ModuleBase::default(), config: c.clone() }
    }

    /// Loads a transformers checkpoint directory (`config.json`, `model.safetensors`),
    /// strictly and with its keys unchanged; the model is in evaluation mode.
    ///
    /// # Errors
    /// A config error naming the field; [`Error::MissingWeights`]; [`Error::Weights`]
    /// naming every key that does not fit.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<Self> {
        Self::from_pretrained_with(dir, &LoadOptions::f32())
    }

    /// [`from_pretrained`](Self::from_pretrained) with transformers' load options: the
    /// checkpoint's own dtype or another ([`LoadOptions::dtype`]), and the device. The
    /// parameters are built on the meta device and take the dtype before the weights
    /// arrive, so a bf16 checkpoint loaded in bf16 is never held in f32.
    ///
    /// # Errors
    /// As [`from_pretrained`](Self::from_pretrained).
    pub fn from_pretrained_with(dir: impl AsRef<Path>, options: &LoadOptions) -> Result<Self> {
        let dir = dir.as_ref();
        let config = LlamaConfig::from_dir(dir)?;
        pretrained::load_pretrained(dir, || LlamaForCausalLM::new(&config), options)
    }

    /// The config the model was built from.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }
}

impl Compute for LlamaForCausalLM {
    type Input = CausalLmInput;
    /// Logits `[N, L, vocab_size]`.
    type Output = Tensor;
    fn compute(&self, input: &CausalLmInput) -> Tensor {
        self.lm_head.forward(&self.model.forward(input))
    }
}

impl CausalLm for LlamaForCausalLM {
    fn logits(&self, input_ids: &Tensor, cache: Option<&KvCache>) -> Tensor {
        self.forward(CausalLmInput { cache: cache.cloned(), ..CausalLmInput::new(input_ids) })
    }
    fn new_cache(&self) -> KvCache {
        KvCache::new(self.config.num_hidden_layers)
    }
    fn max_positions(&self) -> (usize, &'static str) {
        (self.config.max_position_embeddings, "max_position_embeddings")
    }

    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }
    fn device(&self) -> nn_core::Device {
        self.model.embed_tokens.weight.device()
    }
    fn eos_token_ids(&self) -> Vec<i64> {
        self.config.eos_token_id.as_ref().map(TokenIds::ids).unwrap_or_default()
    }
}
