//! nanoGPT's model (Karpathy's `model.py`) in nn: token and position embeddings, pre-norm
//! blocks of causal self-attention and a GELU MLP, LayerNorm with an optional bias, and
//! the language-model head tied to the token embedding. Parameter names are nanoGPT's
//! (`transformer.h.0.attn.c_attn.weight`, ...), so its checkpoints load as they are.

use nn_core::functional::cross_entropy;
use nn_core::ops::AttentionConfig;
use nn_core::optim::ParamGroup;
use nn_core::{Compute, Forward, Module, ModuleBase, Tensor};
use nn_layers::{Dropout, Embedding, LayerNorm, Linear, ModuleList, GELU};

/// The model's sizes (nanoGPT's `GPTConfig`).
#[derive(Clone, Copy, Debug)]
pub struct GptConfig {
    /// The longest context.
    pub block_size: usize,
    /// Distinct tokens.
    pub vocab_size: usize,
    /// Blocks.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Width.
    pub n_embd: usize,
    /// Dropout probability.
    pub dropout: f64,
    /// Biases in the linear layers and LayerNorms.
    pub bias: bool,
}

/// Causal multi-head self-attention with one fused q/k/v projection.
#[derive(Module)]
pub struct CausalSelfAttention {
    #[module]
    c_attn: Linear,
    #[module]
    c_proj: Linear,
    #[module]
    resid_dropout: Dropout,
    #[base]
    base: ModuleBase,
    n_head: usize,
    dropout: f64,
}

impl Compute for CausalSelfAttention {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let (b, t, c) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let heads = |z: &Tensor| z.reshape(&[b, t, self.n_head, c / self.n_head]).transpose(1, 2);
        let qkv = self.c_attn.forward(x).split(c, 2);
        let dropout_p = if self.is_training() { self.dropout } else { 0.0 };
        let config = AttentionConfig { is_causal: true, dropout_p, ..Default::default() };
        let y = heads(&qkv[0]).scaled_dot_product_attention(&heads(&qkv[1]), &heads(&qkv[2]), &config);
        self.resid_dropout.forward(&self.c_proj.forward(&y.transpose(1, 2).reshape(&[b, t, c])))
    }
}

/// The feed-forward part: 4x wider, GELU.
#[derive(Module)]
pub struct Mlp {
    #[module]
    c_fc: Linear,
    #[module]
    gelu: GELU,
    #[module]
    c_proj: Linear,
    #[module]
    dropout: Dropout,
    #[base]
    base: ModuleBase,
}

impl Compute for Mlp {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        self.dropout.forward(&self.c_proj.forward(&self.gelu.forward(&self.c_fc.forward(x))))
    }
}

/// A pre-norm Transformer block.
#[derive(Module)]
pub struct Block {
    #[module]
    ln_1: LayerNorm,
    #[module]
    attn: CausalSelfAttention,
    #[module]
    ln_2: LayerNorm,
    #[module]
    mlp: Mlp,
    #[base]
    base: ModuleBase,
}

impl Compute for Block {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let x = x + self.attn.forward(&self.ln_1.forward(x));
        &x + self.mlp.forward(&self.ln_2.forward(&x))
    }
}

/// nanoGPT's `transformer` dict: the embeddings, the blocks and the final norm.
#[derive(Module)]
pub struct Trunk {
    #[module]
    wte: Embedding,
    #[module]
    wpe: Embedding,
    #[module]
    drop: Dropout,
    #[module]
    h: ModuleList<Block>,
    #[module]
    ln_f: LayerNorm,
}

/// nanoGPT's `GPT`: token ids `[B, T]` to logits `[B, T, vocab]`.
#[derive(Module)]
pub struct Gpt {
    #[module]
    transformer: Trunk,
    #[module]
    lm_head: Linear,
    #[base]
    base: ModuleBase,
    config: GptConfig,
}

impl Gpt {
    /// A model with nanoGPT's initialisation: normal(0, 0.02) weights, zero biases, and the
    /// residual projections (`c_proj`) at 0.02 / sqrt(2 * n_layer).
    pub fn new(config: GptConfig) -> Self {
        let GptConfig { n_embd: d, bias, dropout: p, .. } = config;
        let linear = |i, o| Linear::with_bias(i, o, bias);
        let norm = || LayerNorm::with_options(&[d], 1e-5, true, bias);
        let block = || Block {
            ln_1: norm(),
            attn: CausalSelfAttention {
                c_attn: linear(d, 3 * d),
                c_proj: linear(d, d),
                resid_dropout: Dropout::new(p),
                base: ModuleBase::new(),
                n_head: config.n_head,
                dropout: p,
            },
            ln_2: norm(),
            mlp: Mlp {
                c_fc: linear(d, 4 * d),
                gelu: GELU::new(),
                c_proj: linear(4 * d, d),
                dropout: Dropout::new(p),
                base: ModuleBase::new(),
            },
            base: ModuleBase::new(),
        };
        let wte = Embedding::new(config.vocab_size, d);
        let mut lm_head = Linear::with_bias(d, config.vocab_size, false);
        lm_head.weight = wte.weight.clone(); // tied: one parameter, as nanoGPT's
        let transformer = Trunk {
            wte,
            wpe: Embedding::new(config.block_size, d),
            drop: Dropout::new(p),
            h: (0..config.n_layer).map(|_| block()).collect(),
            ln_f: norm(),
        };
        let model = Gpt { transformer, lm_head, base: ModuleBase::new(), config };
        for (name, p) in model.named_parameters() {
            let std = if name.ends_with("c_proj.weight") { 0.02 / (2.0 * config.n_layer as f64).sqrt() } else { 0.02 };
            match p.rank() {
                1 if name.ends_with(".bias") => nn_core::init::zeros_(&p),
                1 => nn_core::init::ones_(&p),
                _ => nn_core::init::normal_(&p, 0.0, std),
            }
        }
        model
    }

    /// The loss of predicting `targets` (`[B, T]`) from `idx`.
    pub fn loss(&self, idx: &Tensor, targets: &Tensor) -> Tensor {
        let logits = self.forward(idx);
        let v = self.config.vocab_size;
        cross_entropy(&logits.reshape(&[-1, v as i64][..]), &targets.reshape(&[-1i64][..]))
    }

    /// nanoGPT's `configure_optimizers` groups: weight decay on the 2-D parameters
    /// (matrices and embeddings), none on biases and norms.
    pub fn param_groups(&self, weight_decay: f64) -> Vec<ParamGroup> {
        let (decay, no_decay): (Vec<_>, Vec<_>) = self.named_parameters().into_iter().partition(|(_, p)| p.rank() >= 2);
        vec![ParamGroup::new(decay).weight_decay(weight_decay), ParamGroup::new(no_decay).weight_decay(0.0)]
    }

    /// Samples `new_tokens` ids after `idx` (`[1, T]`), cropping the context to
    /// `block_size`, at `temperature` from the `top_k` most likely tokens.
    pub fn generate(&self, idx: &Tensor, new_tokens: usize, temperature: f64, top_k: usize) -> Tensor {
        let mut idx = idx.clone();
        for _ in 0..new_tokens {
            let t = idx.shape()[1];
            let context = idx.narrow(1, t.saturating_sub(self.config.block_size), t.min(self.config.block_size));
            let logits = nn_core::no_grad(|| self.forward(&context));
            let last = logits.narrow(1, logits.shape()[1] - 1, 1).squeeze_dim(1) / temperature;
            let (top, at) = last.topk(top_k, -1, true, true);
            let pick = top.softmax(-1).multinomial(1, false);
            idx = Tensor::cat(&[&idx, &at.gather(1, &pick)], 1);
        }
        idx
    }
}

impl Compute for Gpt {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, idx: &Tensor) -> Tensor {
        let t = idx.shape()[1];
        assert!(
            t <= self.config.block_size,
            "a sequence of {t} is longer than the block size {}",
            self.config.block_size
        );
        let pos = Tensor::arange_dtype(0.0, t as f64, 1.0, nn_core::DType::I64);
        let tr = &self.transformer;
        let mut x = tr.drop.forward(&(tr.wte.forward(idx) + tr.wpe.forward(&pos)));
        for block in tr.h.iter() {
            x = block.forward(&x);
        }
        self.lm_head.forward(&tr.ln_f.forward(&x))
    }
}
