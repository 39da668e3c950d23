//! Reference models for nn, what `torchvision.models` and transformers are to PyTorch:
//! GPT-2, BERT, a Llama-style decoder and ResNet, written as ordinary `#[derive(Module)]`
//! structs whose module tree, state-dict keys and printout are transformers' and
//! torchvision's. They load a transformers checkpoint directory (`config.json` and its
//! weights: `model.safetensors`, sharded safetensors, or PyTorch's `pytorch_model.bin`,
//! sharded or not; see [`weights`]) strictly, with the file's keys unchanged (tied heads
//! included), and the causal models generate with a key/value cache.
//!
//! | module | type | loads |
//! |---|---|---|
//! | [`gpt2`] | [`Gpt2LMHeadModel`](gpt2::Gpt2LMHeadModel) | `GPT2LMHeadModel` directories |
//! | [`bert`] | [`BertModel`](bert::BertModel) | `BertModel` directories |
//! | [`llama`] | [`LlamaForCausalLM`](llama::LlamaForCausalLM) | `LlamaForCausalLM` directories |
//! | [`resnet`] | [`ResNet`](resnet::ResNet) | torchvision `resnet18`/`34`/`50` state dicts |
//!
//! A model from a directory, a hook on one of its layers by its transformers path, and
//! greedy generation with the cache:
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use nn_core::prelude::*;
//! use nn_models::generation::{generate, GenerationConfig};
//! use nn_models::gpt2::{Gpt2Config, Gpt2LMHeadModel};
//!
//! # let dir = tempfile::tempdir().unwrap();
//! # let config: Gpt2Config = serde_json::from_str(
//! #     r#"{"vocab_size": 30, "n_positions": 32, "n_embd": 8, "n_layer": 2, "n_head": 2}"#).unwrap();
//! # Gpt2LMHeadModel::new(&config).save_pretrained(dir.path()).unwrap();
//! // `dir` holds config.json and model.safetensors, as transformers' save_pretrained writes.
//! let model = Gpt2LMHeadModel::from_pretrained(dir.path())?;
//! println!("{model}"); // GPT2LMHeadModel's tree: transformer.h.0.attn.c_attn, ...
//!
//! let seen = Arc::new(Mutex::new(Vec::new()));
//! let log = seen.clone();
//! let mlp = model.get_submodule("transformer.h.1.mlp")?;
//! let handle = mlp.register_forward_hook(move |_input, out| {
//!     log.lock().unwrap().push(out.shape().to_vec());
//!     None
//! })?;
//! let tokens = generate(&model, &[3, 1, 4], &GenerationConfig { max_new_tokens: 5, ..Default::default() })?;
//! assert_eq!(tokens.len(), 8);
//! // The prompt in one pass, then one position per new token (the cache holds the rest).
//! assert_eq!(seen.lock().unwrap()[0], [1, 3, 8]);
//! assert_eq!(seen.lock().unwrap()[1], [1, 1, 8]);
//! handle.remove();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod activation;
pub mod bert;
mod causal_lm_input;
mod error;
pub mod generation;
pub mod gpt2;
mod heads;
mod hf_init;
pub mod kv_cache;
pub mod llama;
mod pretrained;
pub mod resnet;
pub mod rotary;
pub mod tokenizer;
pub mod weights;

pub use causal_lm_input::{positions_from_mask, CausalLmInput, RowAttention};
pub use error::{Error, Result};
pub use kv_cache::KvCache;
pub use pretrained::{LoadOptions, SaveOptions};
