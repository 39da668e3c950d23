//! GPT-2 (transformers' `GPT2LMHeadModel`): the decoder stack with its tied language-model
//! head, loading a transformers checkpoint directory with the checkpoint's own keys, and
//! generating with a key/value cache.
//!
//! Reads top to bottom like `modeling_gpt2.py`: the config, the attention, the MLP, the
//! block, the transformer, the model with its head.

use std::path::Path;

use nn_core::ops::AttentionConfig;
use nn_core::prelude::*;
use nn_layers::{Conv1D, Dropout, Embedding, LayerNorm, Linear, ModuleList};
use serde::{Deserialize, Serialize};

use crate::activation::Activation;
pub use crate::causal_lm_input::CausalLmInput;
use crate::causal_lm_input::{check_ids, RowAttention};
use crate::error::Result;
use crate::generation::{CausalLm, TokenIds};
use crate::heads::{merge_heads, split_heads};
use crate::hf_init::{hf_embedding, std_init};
use crate::kv_cache::{causal_mask, KvCache, LayerCache};
use crate::pretrained::SaveOptions;
use crate::pretrained::{self, LoadOptions};

/// `GPT2Config`: the fields of a GPT-2 `config.json`, with transformers' names and
/// defaults. The sizes have no default: a config without one is an error naming it.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Gpt2Config {
    /// Number of token ids.
    pub vocab_size: usize,
    /// Number of positions (the longest sequence).
    pub n_positions: usize,
    /// Width of every hidden state.
    pub n_embd: usize,
    /// Number of blocks.
    pub n_layer: usize,
    /// Number of attention heads (divides `n_embd`).
    pub n_head: usize,
    /// Width of the MLP (default `4 * n_embd`).
    #[serde(default)]
    pub n_inner: Option<usize>,
    /// The MLP's activation (default `"gelu_new"`, the tanh approximation).
    #[serde(default = "gelu_new")]
    pub activation_function: Activation,
    /// Dropout on block outputs (training only; default 0.1).
    #[serde(default = "tenth")]
    pub resid_pdrop: f64,
    /// Dropout on the embeddings (training only; default 0.1).
    #[serde(default = "tenth")]
    pub embd_pdrop: f64,
    /// Dropout on attention weights (training only; default 0.1).
    #[serde(default = "tenth")]
    pub attn_pdrop: f64,
    /// Layer norms' epsilon (default 1e-5).
    #[serde(default = "gpt2_eps")]
    pub layer_norm_epsilon: f64,
    /// Standard deviation of the initial weights (default 0.02).
    #[serde(default = "std_init")]
    pub initializer_range: f64,
    /// Scale the scores by `1/sqrt(head size)` (default true).
    #[serde(default = "pretrained::yes")]
    pub scale_attn_weights: bool,
    /// Also divide the scores of block `i` by `i + 1` (default false).
    #[serde(default)]
    pub scale_attn_by_inverse_layer_idx: bool,
    /// Compute the attention in f32 when the model runs in f16 or bf16, or under autocast
    /// (default false; f32 models are unchanged). The CPU's fused attention computes half
    /// inputs in f32 either way; attention composed of half-precision ops (the GPU) keeps
    /// its scores in f32 only with this flag.
    #[serde(default)]
    pub reorder_and_upcast_attn: bool,
    /// The head shares the token embedding (default true; GPT-2's files hold it once).
    #[serde(default = "pretrained::yes")]
    pub tie_word_embeddings: bool,
    /// The token that ends a text (default 50256, `<|endoftext|>`; one id or a list):
    /// [`generate`](crate::generation::generate) stops after it, as transformers' does.
    #[serde(default = "gpt2_eos")]
    pub eos_token_id: Option<TokenIds>,
    /// Read and unused: GPT-2's embeddings have no padding row (transformers' neither).
    #[serde(default)]
    pub pad_token_id: Option<i64>,
    /// The old name of `n_positions`, kept by some files; must agree with it.
    #[serde(default)]
    pub n_ctx: Option<usize>,
    /// Fields of `GPT2DoubleHeadsModel`'s summary head (read, unused by this model).
    #[serde(default)]
    pub summary_type: Option<String>,
    /// See `summary_type`.
    #[serde(default)]
    pub summary_use_proj: Option<bool>,
    /// See `summary_type`.
    #[serde(default)]
    pub summary_activation: Option<String>,
    /// See `summary_type`.
    #[serde(default)]
    pub summary_proj_to_labels: Option<bool>,
    /// See `summary_type`.
    #[serde(default)]
    pub summary_first_dropout: Option<f64>,
}

fn gelu_new() -> Activation {
    Activation::GeluNew
}
fn tenth() -> f64 {
    0.1
}
fn gpt2_eps() -> f64 {
    1e-5
}
fn gpt2_eos() -> Option<TokenIds> {
    Some(TokenIds::One(50256))
}

impl Gpt2Config {
    /// Reads `dir/config.json`.
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) naming a missing, unknown or inconsistent
    /// field; [`Error::Architecture`](crate::Error::Architecture) for another model's config.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let c: Gpt2Config = pretrained::read_config(dir, "gpt2", &["GPT2LMHeadModel", "GPT2Model"], "Gpt2LMHeadModel")?;
        let bad = |reason: String| crate::Error::Config { path: dir.join("config.json"), reason };
        if c.n_head == 0 || !c.n_embd.is_multiple_of(c.n_head) {
            return Err(bad(format!("`n_embd` {} is not a multiple of `n_head` {}", c.n_embd, c.n_head)));
        }
        if c.n_ctx.is_some_and(|n| n != c.n_positions) {
            return Err(bad(format!("`n_ctx` {:?} differs from `n_positions` {}", c.n_ctx, c.n_positions)));
        }
        Ok(c)
    }

    /// The MLP's width.
    pub fn inner(&self) -> usize {
        self.n_inner.unwrap_or(4 * self.n_embd)
    }
}

/// A `Conv1D` with transformers' initialisation, `N(0, std)` and zero bias.
fn conv1d(nf: usize, nx: usize, std: f64) -> Conv1D {
    let c = Conv1D::new(nf, nx);
    nn_core::init::normal_(&c.weight, 0.0, std);
    c
}

/// Causal self-attention with the three projections in one `Conv1D` (keys `c_attn.*`,
/// `c_proj.*`).
#[derive(Module)]
#[module(name = "GPT2Attention")]
pub struct Gpt2Attention {
    /// `[E, 3E]`: query, key and value.
    #[module]
    pub c_attn: Conv1D,
    /// `[E, E]`.
    #[module]
    pub c_proj: Conv1D,
    /// Dropout on the output.
    #[module]
    pub resid_dropout: Dropout,
    #[base]
    base: ModuleBase,
    heads: usize,
    scale: f64,
    attn_pdrop: f64,
    /// `reorder_and_upcast_attn`: scores and softmax in f32 under half precision.
    upcast: bool,
}

impl Compute for Gpt2Attention {
    /// `(hidden [N, L, E], the layer's cache, the rows' mask)`.
    type Input = (Tensor, Option<LayerCache>, RowAttention);
    /// `[N, L, E]`.
    type Output = Tensor;
    fn compute(&self, (x, cache, rows): &(Tensor, Option<LayerCache>, RowAttention)) -> Tensor {
        let e = x.shape()[2];
        let qkv = self.c_attn.forward(x);
        let [q, k, v] = [0, 1, 2].map(|i| split_heads(&qkv.narrow(2, i * e, e), self.heads));
        let (k, v, past) = match cache {
            Some(c) => c.append(&k, &v),
            None => (k, v, 0),
        };
        let l = q.shape()[2];
        let mask = match &rows.keep {
            Some(keep) => Some(keep.clone()),
            None if past == 0 => None,
            None => causal_mask(l, past, x.device()),
        };
        let config = AttentionConfig {
            attn_mask: mask.as_ref(),
            is_causal: rows.keep.is_none() && past == 0 && l > 1,
            dropout_p: if self.base.is_training() { self.attn_pdrop } else { 0.0 },
            scale: Some(self.scale),
            enable_gqa: false,
        };
        let dev = x.device();
        let half = |t: &Tensor| matches!(t.dtype(), DType::F16 | DType::BF16);
        let y = if self.upcast && (half(&q) || half(&k)) {
            // transformers' `_upcast_and_reordered_attn`: the scores and their softmax in f32
            // with autocast off (here the product with the values too), back in the values'
            // dtype.
            let f32 = |t: &Tensor| t.to_dtype(DType::F32);
            let run = || f32(&q).scaled_dot_product_attention(&f32(&k), &f32(&v), &config).to_dtype(v.dtype());
            match nn_core::amp::autocast_dtype(dev) {
                Some(d) => nn_core::amp::autocast_enabled(dev, d, false, run),
                None => run(),
            }
        } else {
            q.scaled_dot_product_attention(&k, &v, &config)
        };
        self.resid_dropout.forward(&self.c_proj.forward(&merge_heads(&y)))
    }
}

/// The feed-forward: `c_fc` (`[E, inner]`), the activation, `c_proj` (`[inner, E]`).
#[derive(Module)]
#[module(name = "GPT2MLP")]
pub struct Gpt2Mlp {
    /// `[E, inner]`.
    #[module]
    pub c_fc: Conv1D,
    /// `[inner, E]`.
    #[module]
    pub c_proj: Conv1D,
    /// Dropout on the output.
    #[module]
    pub dropout: Dropout,
    #[base]
    base: ModuleBase,
    act: Activation,
}

impl Compute for Gpt2Mlp {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        self.dropout.forward(&self.c_proj.forward(&self.act.apply(&self.c_fc.forward(x))))
    }
}

/// A pre-norm block: `x + attn(ln_1(x))`, then `h + mlp(ln_2(h))` (keys `ln_1.*`, `attn.*`,
/// `ln_2.*`, `mlp.*`).
#[derive(Module)]
#[module(name = "GPT2Block")]
pub struct Gpt2Block {
    /// Before the attention.
    #[module]
    pub ln_1: LayerNorm,
    /// The attention.
    #[module]
    pub attn: Gpt2Attention,
    /// Before the MLP.
    #[module]
    pub ln_2: LayerNorm,
    /// The MLP.
    #[module]
    pub mlp: Gpt2Mlp,
    #[base]
    base: ModuleBase,
}

impl Compute for Gpt2Block {
    /// As [`Gpt2Attention`]'s.
    type Input = (Tensor, Option<LayerCache>, RowAttention);
    type Output = Tensor;
    fn compute(&self, (x, cache, rows): &(Tensor, Option<LayerCache>, RowAttention)) -> Tensor {
        let h = x + &self.attn.forward((self.ln_1.forward(x), cache.clone(), rows.clone()));
        &h + &self.mlp.forward(&self.ln_2.forward(&h))
    }
}

impl Gpt2Block {
    fn new(c: &Gpt2Config, index: usize) -> Self {
        let (e, std) = (c.n_embd, c.initializer_range);
        let mut scale = if c.scale_attn_weights { 1.0 / ((e / c.n_head) as f64).sqrt() } else { 1.0 };
        if c.scale_attn_by_inverse_layer_idx {
            scale /= (index + 1) as f64;
        }
        // transformers scales the output projections by 1/sqrt(2 n_layer) at init.
        let proj_std = std / (2.0 * c.n_layer as f64).sqrt();
        Gpt2Block {
            ln_1: LayerNorm::with_options(&[e], c.layer_norm_epsilon, true, true),
            attn: Gpt2Attention {
                c_attn: conv1d(3 * e, e, std),
                c_proj: conv1d(e, e, proj_std),
                resid_dropout: Dropout::new(c.resid_pdrop),
                base: ModuleBase::default(),
                heads: c.n_head,
                scale,
                attn_pdrop: c.attn_pdrop,
                upcast: c.reorder_and_upcast_attn,
            },
            ln_2: LayerNorm::with_options(&[e], c.layer_norm_epsilon, true, true),
            mlp: Gpt2Mlp {
                c_fc: conv1d(c.inner(), e, std),
                c_proj: conv1d(e, c.inner(), proj_std),
                dropout: Dropout::new(c.resid_pdrop),
                base: ModuleBase::default(),
                act: c.activation_function,
            },
            base: ModuleBase::default(),
        }
    }
}

/// The decoder stack: token and position embeddings, the blocks, the final norm (keys
/// `wte.weight`, `wpe.weight`, `h.N.*`, `ln_f.*`).
#[derive(Module)]
#[module(name = "GPT2Model")]
pub struct Gpt2Model {
    /// `[vocab_size, n_embd]`.
    #[module]
    pub wte: Embedding,
    /// `[n_positions, n_embd]`.
    #[module]
    pub wpe: Embedding,
    /// Dropout on the embeddings.
    #[module]
    pub drop: Dropout,
    /// The blocks.
    #[module]
    pub h: ModuleList<Gpt2Block>,
    /// The final norm.
    #[module]
    pub ln_f: LayerNorm,
    #[base]
    base: ModuleBase,
    n_positions: usize,
}

impl Compute for Gpt2Model {
    type Input = CausalLmInput;
    /// The last hidden state `[N, L, E]`.
    type Output = Tensor;
    #[track_caller]
    fn compute(&self, input: &CausalLmInput) -> Tensor {
        let ids = &input.input_ids;
        let past = input.cache.as_ref().map_or(0, KvCache::seq_len);
        check_ids("GPT2Model", ids, past, self.n_positions, "n_positions");
        if let Some(c) = &input.cache {
            c.check("GPT2Model", self.h.len(), ids);
        }
        let (n, l) = (ids.shape()[0], ids.shape()[1]);
        let rows = RowAttention::of("GPT2Model", input, past, self.n_positions, "n_positions");
        let positions = match &rows.positions {
            Some(p) => Tensor::from_vec_i64(p.iter().map(|&p| p as i64).collect(), &[n, l]).to_device(ids.device()),
            None => Tensor::from_vec_i64((past as i64..(past + l) as i64).collect(), &[1, l])
                .to_device(ids.device())
                .expand(&[n, l]),
        };
        let mut h = self.drop.forward(&(&self.wte.forward(ids) + &self.wpe.forward(&positions)));
        for (i, block) in self.h.iter().enumerate() {
            h = block.forward((h, input.cache.as_ref().map(|c| c.layer(i)), rows.clone()));
        }
        self.ln_f.forward(&h)
    }
}

/// transformers' `GPT2LMHeadModel`: [`Gpt2Model`] (key `transformer`) and a linear head
/// without bias whose weight **is** the token embedding (`lm_head.weight` tied to
/// `transformer.wte.weight`: one parameter, stored once in the file, as transformers
/// writes it).
///
/// Input: token ids `[N, L]` (i64), or a [`CausalLmInput`] with a cache; output: logits
/// `[N, L, vocab_size]`.
///
/// ```
/// use nn_core::prelude::*;
/// use nn_models::gpt2::{Gpt2Config, Gpt2LMHeadModel};
/// use nn_models::generation::{generate, GenerationConfig};
///
/// let config: Gpt2Config = serde_json::from_str(
///     r#"{"vocab_size": 20, "n_positions": 16, "n_embd": 8, "n_layer": 1, "n_head": 2}"#).unwrap();
/// let mut gpt2 = Gpt2LMHeadModel::new(&config);
/// gpt2.eval();
/// assert_eq!(gpt2.named_parameters()[0].0, "transformer.wte.weight"); // the head is tied to it
/// let logits = gpt2.forward(&Tensor::from_vec_i64(vec![1, 5, 3], &[1, 3]));
/// assert_eq!(logits.shape(), &[1, 3, 20]);
/// let out = generate(&gpt2, &[1, 5, 3], &GenerationConfig { max_new_tokens: 4, ..Default::default() }).unwrap();
/// assert_eq!((out.len(), &out[..3]), (7, &[1, 5, 3][..]));
/// ```
#[derive(Module)]
#[module(name = "GPT2LMHeadModel")]
pub struct Gpt2LMHeadModel {
    /// The decoder stack (keys `transformer.*`).
    #[module]
    pub transformer: Gpt2Model,
    /// `[vocab_size, n_embd]`, tied to `transformer.wte.weight` unless the config says not.
    #[module]
    pub lm_head: Linear,
    #[base]
    base: ModuleBase,
    config: Gpt2Config,
}

impl Gpt2LMHeadModel {
    /// A model with transformers' random initialisation, the head tied to the token
    /// embedding (unless `tie_word_embeddings` is false), in training mode.
    pub fn new(config: &Gpt2Config) -> Self {
        let c = config;
        let transformer = Gpt2Model {
            wte: hf_embedding(c.vocab_size, c.n_embd, c.initializer_range),
            wpe: hf_embedding(c.n_positions, c.n_embd, c.initializer_range),
            drop: Dropout::new(c.embd_pdrop),
            h: (0..c.n_layer).map(|i| Gpt2Block::new(c, i)).collect(),
            ln_f: LayerNorm::with_options(&[c.n_embd], c.layer_norm_epsilon, true, true),
            base: ModuleBase::default(),
            n_positions: c.n_positions,
        };
        let mut lm_head = Linear::with_bias(c.n_embd, c.vocab_size, false);
        if c.tie_word_embeddings {
            lm_head.weight = transformer.wte.weight.clone();
        } else {
            nn_core::init::normal_(&lm_head.weight, 0.0, c.initializer_range);
        }
        Gpt2LMHeadModel { transformer, lm_head, base: ModuleBase::default(), config: c.clone() }
    }

    /// Loads a transformers checkpoint directory (`config.json`, `model.safetensors`),
    /// strictly and with its keys unchanged (the tied head from `transformer.wte.weight`);
    /// the model is in evaluation mode.
    ///
    /// The keys are those `GPT2LMHeadModel.save_pretrained` writes (`transformer.h.0...`).
    /// Older uploads saved from the bare `GPT2Model` (keys without `transformer.`, with the
    /// `attn.bias` mask buffers) are refused with every missing and unexpected key named:
    /// no key is renamed or dropped behind the user's back.
    ///
    /// # Errors
    /// A config error naming the field; [`Error::MissingWeights`](crate::Error::MissingWeights);
    /// [`Error::Weights`](crate::Error::Weights) naming every key that does not fit.
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
        let config = Gpt2Config::from_dir(dir)?;
        pretrained::load_pretrained(dir, || Gpt2LMHeadModel::new(&config), options)
    }

    /// Writes the model as transformers' `save_pretrained` does: `config.json` and
    /// `model.safetensors` (the tied head once, as `transformer.wte.weight`), which
    /// `GPT2LMHeadModel.from_pretrained` loads.
    ///
    /// # Errors
    /// [`Error::Io`](crate::Error::Io) and the save's errors.
    pub fn save_pretrained(&self, dir: impl AsRef<Path>) -> Result<()> {
        self.save_pretrained_with(dir, &SaveOptions::default())
    }

    /// [`save_pretrained`](Self::save_pretrained) with transformers' options: with
    /// [`SaveOptions::max_shard_size`], the weights in shards named by
    /// `model.safetensors.index.json`, as `save_pretrained(dir, max_shard_size=...)`
    /// writes them (and `from_pretrained`, here and in transformers, loads them).
    ///
    /// ```
    /// use nn_models::gpt2::{Gpt2Config, Gpt2LMHeadModel};
    /// use nn_models::SaveOptions;
    /// # let dir = tempfile::tempdir().unwrap();
    /// let config: Gpt2Config = serde_json::from_str(
    ///     r#"{"vocab_size": 30, "n_positions": 16, "n_embd": 8, "n_layer": 2, "n_head": 2}"#).unwrap();
    /// let model = Gpt2LMHeadModel::new(&config);
    /// model.save_pretrained_with(dir.path(), &SaveOptions { max_shard_size: Some(2_000) })?;
    /// assert!(dir.path().join("model.safetensors.index.json").is_file());
    /// let back = Gpt2LMHeadModel::from_pretrained(dir.path())?;
    /// assert_eq!(back.transformer.wte.weight.to_vec(), model.transformer.wte.weight.to_vec());
    /// # Ok::<(), nn_models::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`save_pretrained`](Self::save_pretrained).
    pub fn save_pretrained_with(&self, dir: impl AsRef<Path>, options: &SaveOptions) -> Result<()> {
        let mut config = match serde_json::to_value(&self.config).expect("the config serialises") {
            serde_json::Value::Object(m) => m,
            _ => unreachable!("a struct serialises to a map"),
        };
        // Unset options are left out, except `eos_token_id`: its default is 50256, so an
        // unset one must be written as `null` to read back unset (transformers writes it so).
        config.retain(|k, v| !v.is_null() || k == "eos_token_id");
        config.insert("model_type".into(), "gpt2".into());
        config.insert("architectures".into(), serde_json::json!(["GPT2LMHeadModel"]));
        pretrained::save_pretrained(dir.as_ref(), &config, self, options)
    }

    /// The config the model was built from.
    pub fn config(&self) -> &Gpt2Config {
        &self.config
    }
}

impl Compute for Gpt2LMHeadModel {
    type Input = CausalLmInput;
    /// Logits `[N, L, vocab_size]`.
    type Output = Tensor;
    fn compute(&self, input: &CausalLmInput) -> Tensor {
        self.lm_head.forward(&self.transformer.forward(input))
    }
}

impl CausalLm for Gpt2LMHeadModel {
    fn logits(&self, input_ids: &Tensor, cache: Option<&KvCache>) -> Tensor {
        self.forward(CausalLmInput { cache: cache.cloned(), ..CausalLmInput::new(input_ids) })
    }
    fn new_cache(&self) -> KvCache {
        KvCache::new(self.config.n_layer)
    }
    fn max_positions(&self) -> (usize, &'static str) {
        (self.config.n_positions, "n_positions")
    }

    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }
    fn device(&self) -> nn_core::Device {
        self.transformer.wte.weight.device()
    }
    fn eos_token_ids(&self) -> Vec<i64> {
        self.config.eos_token_id.as_ref().map(TokenIds::ids).unwrap_or_default()
    }
}
