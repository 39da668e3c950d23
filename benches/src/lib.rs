//! Benchmark workloads of the nn framework, shared by the `nn_bench` harness binary (medians
//! printed as JSON lines for `benches/compare.py`) and the criterion benches.
//!
//! Every workload mirrors one in `benches/compare.py` (PyTorch) exactly: same shapes,
//! same layers, same loss and optimizer. The real models ([`gpt2`], [`bert`], [`llama`])
//! are built from the configs compare.py gives transformers, with random initialisation.

use nn_core::functional::cross_entropy;
use nn_core::optim::{AdamW, AdamWConfig, Optimizer, Sgd, SgdConfig};
use nn_core::{manual_seed, Device, Forward, Module, Tensor};
use nn_layers::{
    Conv2d, Flatten, Linear, MaxPool2d, ReLU, Sequential, TransformerEncoderLayer, TransformerEncoderLayerConfig,
};
use nn_models::bert::BertModel;
use nn_models::gpt2::Gpt2LMHeadModel;
use nn_models::llama::LlamaForCausalLM;
use serde_json::json;

/// The MLP of the table: 784-256-10 with ReLU.
pub fn mlp() -> Sequential {
    Sequential::new().add(Linear::new(784, 256)).add(ReLU::new()).add(Linear::new(256, 10))
}

/// The CNN of the table: conv 1->8->16 (3x3), ReLU, 2x2 max pools, linear to 10.
pub fn cnn() -> Sequential {
    Sequential::new()
        .add(Conv2d::new(1, 8, 3))
        .add(ReLU::new())
        .add(MaxPool2d::new(2))
        .add(Conv2d::new(8, 16, 3))
        .add(ReLU::new())
        .add(MaxPool2d::new(2))
        .add(Flatten::new())
        .add(Linear::new(16 * 5 * 5, 10))
}

/// A Transformer encoder layer: d_model 128, 4 heads, feed-forward 512, no dropout,
/// batch-first.
pub fn transformer_layer() -> TransformerEncoderLayer {
    let cfg =
        TransformerEncoderLayerConfig { dim_feedforward: 512, dropout: 0.0, batch_first: true, ..Default::default() };
    TransformerEncoderLayer::with_config(128, 4, cfg)
}

/// A training step closure: forward, cross-entropy (or mean for the transformer), backward,
/// SGD with momentum 0.9.
pub struct Step {
    forward: Box<dyn Fn(&Tensor) -> Tensor>,
    opt: Sgd,
    x: Tensor,
    y: Tensor,
    classify: bool,
    amp: Option<nn_core::DType>,
}

impl Step {
    /// A step of `model` on random inputs of `x_shape` (and random labels in `0..10`).
    pub fn new<M>(model: M, x_shape: &[usize], classify: bool) -> Step
    where
        M: nn_core::Compute<Output = Tensor> + Module + 'static,
        for<'a> &'a Tensor: nn_core::module::ForwardArg<'a, M::Input>,
    {
        Step::on(model, x_shape, classify, Device::Cpu)
    }

    /// [`new`](Step::new) with the model, inputs and labels on `device`.
    pub fn on<M>(mut model: M, x_shape: &[usize], classify: bool, device: Device) -> Step
    where
        M: nn_core::Compute<Output = Tensor> + Module + 'static,
        for<'a> &'a Tensor: nn_core::module::ForwardArg<'a, M::Input>,
    {
        model.to_device(device);
        manual_seed(0);
        let opt = Sgd::new(model.parameters(), SgdConfig { lr: 0.01, momentum: 0.9, ..Default::default() });
        let n = x_shape[0];
        Step {
            forward: Box::new(move |x| model.forward(x)),
            opt,
            x: Tensor::randn(x_shape).to_device(device),
            y: Tensor::from_vec_i64((0..n as i64).map(|i| i % 10).collect(), &[n]).to_device(device),
            classify,
            amp: None,
        }
    }

    /// One training step.
    pub fn run(&mut self) {
        self.step();
    }

    /// The same step with the forward pass and the loss under CPU autocast to `dtype`.
    pub fn with_amp(mut self, dtype: nn_core::DType) -> Step {
        self.amp = Some(dtype);
        self
    }

    /// One training step; the loss (still on the step's device).
    pub fn step(&mut self) -> Tensor {
        self.opt.zero_grad();
        let loss = with_amp(self.amp, || {
            let out = (self.forward)(&self.x);
            if self.classify {
                cross_entropy(&out, &self.y)
            } else {
                out.square().mean()
            }
        });
        loss.backward();
        self.opt.step();
        loss
    }
}

/// The input of the real-model workloads: `[batch, sequence]` token ids.
pub const LM_INPUT: [usize; 2] = [2, 128];

/// GPT-2 at GPT-2-small width with 2 blocks: `GPT2Config(n_embd=768, n_head=12, n_layer=2,
/// n_positions=1024, vocab_size=50257)`, every dropout 0 (so a training step does the same
/// work as PyTorch's); the head tied to the token embedding; in training mode.
pub fn gpt2() -> Gpt2LMHeadModel {
    // The kwargs as a `config.json` holds them; the other fields take transformers' defaults.
    let kwargs = json!({
        "n_embd": 768, "n_head": 12, "n_layer": 2, "n_positions": 1024, "vocab_size": 50257,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
    });
    Gpt2LMHeadModel::new(&serde_json::from_value(kwargs).expect("a valid GPT-2 config"))
}

/// BERT of the same width: `BertConfig(hidden_size=768, num_attention_heads=12,
/// num_hidden_layers=2, intermediate_size=3072, vocab_size=30522)` (512 positions), every
/// dropout 0; in training mode.
pub fn bert() -> BertModel {
    // The kwargs as a `config.json` holds them; the other fields take transformers' defaults.
    let kwargs = json!({
        "hidden_size": 768, "num_attention_heads": 12, "num_hidden_layers": 2, "intermediate_size": 3072,
        "vocab_size": 30522, "max_position_embeddings": 512,
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
    });
    BertModel::new(&serde_json::from_value(kwargs).expect("a valid BERT config"))
}

/// A Llama of the same width: `LlamaConfig(hidden_size=768, num_attention_heads=12,
/// num_key_value_heads=4, intermediate_size=2048, num_hidden_layers=2, vocab_size=32000,
/// max_position_embeddings=2048)`: grouped-query attention (3 query heads per key/value
/// head), RMSNorm, rotary embeddings, an untied head; in training mode.
pub fn llama() -> LlamaForCausalLM {
    // The kwargs as a `config.json` holds them; the other fields take transformers' defaults.
    let kwargs = json!({
        "hidden_size": 768, "num_attention_heads": 12, "num_key_value_heads": 4, "intermediate_size": 2048,
        "num_hidden_layers": 2, "vocab_size": 32000, "max_position_embeddings": 2048,
    });
    LlamaForCausalLM::new(&serde_json::from_value(kwargs).expect("a valid Llama config"))
}

/// Token ids of `shape` drawn uniformly from `0..vocab` with the global generator.
pub fn token_ids(vocab: usize, shape: &[usize]) -> Tensor {
    // `rand` is in [0, 1) in f64 but rounded to f32, which can reach 1.0: hence the `min`.
    let ids =
        Tensor::rand(shape).to_vec().into_iter().map(|u| ((f64::from(u) * vocab as f64) as i64).min(vocab as i64 - 1));
    Tensor::from_vec_i64(ids.collect(), shape)
}

/// The number of parameter values of `model` (a tied weight counted once, as PyTorch's
/// `sum(p.numel() for p in model.parameters())` does).
pub fn num_parameters(model: &impl Module) -> usize {
    model.parameters().iter().map(|p| p.tensor().numel()).sum()
}

/// The next-token loss of a causal language model: cross-entropy of the logits at
/// positions `0..L-1` (`[N, L, V]`) against the ids at `1..L` (`[N, L]`), mean over the
/// `N (L - 1)` predictions (transformers' loss, without its `ignore_index` padding).
pub fn lm_loss(logits: &Tensor, ids: &Tensor) -> Tensor {
    let (n, l, v) = (logits.shape()[0], logits.shape()[1], logits.shape()[2]);
    let predicted = logits.narrow(1, 0, l - 1).reshape(&[n * (l - 1), v]);
    cross_entropy(&predicted, &ids.narrow(1, 1, l - 1).reshape(&[n * (l - 1)]))
}

/// A causal language model's training step: forward, [`lm_loss`], backward, AdamW with
/// PyTorch's defaults (lr 1e-3, weight decay 0.01).
pub struct LmStep {
    forward: Box<dyn Fn(&Tensor) -> Tensor>,
    opt: AdamW,
    ids: Tensor,
    amp: Option<nn_core::DType>,
}

/// `f` under CPU autocast to `amp`, or as it is.
fn with_amp<R>(amp: Option<nn_core::DType>, f: impl FnOnce() -> R) -> R {
    match amp {
        Some(d) => nn_core::amp::autocast(Device::Cpu, d, f),
        None => f(),
    }
}

impl LmStep {
    /// A step of `model` (in the mode it is in) on the token ids `ids` (`[N, L]`, i64).
    pub fn new<M>(model: M, ids: Tensor) -> LmStep
    where
        M: nn_core::Compute<Output = Tensor> + Module + 'static,
        for<'a> &'a Tensor: nn_core::module::ForwardArg<'a, M::Input>,
    {
        let opt = AdamW::new(model.parameters(), AdamWConfig::default());
        LmStep { forward: Box::new(move |x| model.forward(x)), opt, ids, amp: None }
    }

    /// The same step with the forward pass and the loss under CPU autocast to `dtype`.
    pub fn with_amp(mut self, dtype: nn_core::DType) -> LmStep {
        self.amp = Some(dtype);
        self
    }

    /// One training step; the loss.
    pub fn step(&mut self) -> Tensor {
        self.opt.zero_grad();
        let loss = with_amp(self.amp, || lm_loss(&(self.forward)(&self.ids), &self.ids));
        loss.backward();
        self.opt.step();
        loss
    }
}
