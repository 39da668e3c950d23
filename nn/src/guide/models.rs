//! # Reference models
//!
//! [`nn::models`](crate::models) (nn-models) holds GPT-2, BERT, a Llama-style decoder and
//! ResNet-18/34/50, written as ordinary `#[derive(Module)]` structs whose module trees,
//! state-dict keys and printouts are transformers' and torchvision's:
//! [`Gpt2LMHeadModel`](crate::models::gpt2::Gpt2LMHeadModel),
//! [`BertModel`](crate::models::bert::BertModel),
//! [`LlamaForCausalLM`](crate::models::llama::LlamaForCausalLM) and
//! [`ResNet`](crate::models::resnet::ResNet). Their logits match transformers' within
//! 1e-5 (the parity tests are in `nn-models/tests/`).
//!
//! ## `from_pretrained` on a transformers directory
//!
//! `from_pretrained(dir)` reads `config.json` (field by field: an unknown or unsupported
//! field is an error naming it) and strict-loads the weights with their keys unchanged:
//! `model.safetensors`, sharded safetensors with their index, or PyTorch's
//! `pytorch_model.bin`, sharded or not. The model comes back in eval mode. The directory
//! below is a tiny GPT-2 (2 layers, 16 wide, 60 tokens) that transformers saved:
//! ```
//! use nn::prelude::*;
//! use nn::models::gpt2::Gpt2LMHeadModel;
//! use nn::models::generation::CausalLm;
//! use nn::models::CausalLmInput;
//!
//! let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../nn-models/tests/fixtures/gpt2");
//! let model = Gpt2LMHeadModel::from_pretrained(&dir)?;
//! assert!(!model.is_training());
//! assert_eq!((model.config().n_layer, model.config().vocab_size), (2, 60));
//! assert!(model.to_string().starts_with("GPT2LMHeadModel(")); // transformers' tree and names
//! assert!(model.get_submodule("transformer.h.1.mlp.c_fc").is_ok());
//! // The head is tied to the token embedding: one parameter, as in the file.
//! assert_eq!(model.lm_head.weight.id(), model.transformer.wte.weight.id());
//!
//! let ids = Tensor::from_vec_i64(vec![3, 1, 4, 1, 5], &[1, 5]);
//! let logits = model.forward(&ids); // input_ids [N, L] -> logits [N, L, vocab]
//! assert_eq!(logits.shape(), &[1, 5, 60]);
//!
//! // With a key/value cache: the prompt once, then one position per call.
//! let cache = model.new_cache();
//! model.forward(CausalLmInput::with_cache(&ids.narrow(1, 0, 4), &cache));
//! assert_eq!(cache.seq_len(), 4);
//! let next = model.forward(CausalLmInput::with_cache(&ids.narrow(1, 4, 1), &cache));
//! let (cached, full) = (next.i((0, 0)).to_vec(), logits.i((0, 4)).to_vec());
//! assert!(cached.iter().zip(&full).all(|(a, b)| (a - b).abs() < 1e-5));
//! # Ok::<(), nn::models::Error>(())
//! ```
//! [`from_pretrained_with`](crate::models::gpt2::Gpt2LMHeadModel::from_pretrained_with)
//! takes [`LoadOptions`](crate::models::LoadOptions) (transformers' `dtype=` and the
//! device): `dtype: None` keeps a bf16 checkpoint in bf16, never held in `f32` on the
//! way. GPT-2's `save_pretrained` writes a directory transformers loads back, in shards
//! with [`SaveOptions`](crate::models::SaveOptions). Padded batches take transformers'
//! `attention_mask` and `position_ids` through [`CausalLmInput`](crate::models::CausalLmInput).
//!
//! ## Generation
//!
//! [`generate`](crate::models::generation::generate) continues a prompt greedily or by
//! sampling (temperature, top-k, top-p, in transformers' order) from nn's seeded
//! generator, with the cache by default; it stops after the config's `eos_token_id`
//! unless told otherwise.
//! [`generate_streaming`](crate::models::generation::generate_streaming) hands each token
//! over as it is chosen:
//! ```
//! use nn::models::generation::{generate, GenerationConfig, Sampling};
//! use nn::models::gpt2::Gpt2LMHeadModel;
//!
//! let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../nn-models/tests/fixtures/gpt2");
//! let model = Gpt2LMHeadModel::from_pretrained(&dir)?;
//! let greedy = GenerationConfig { max_new_tokens: 6, ignore_eos: true, ..Default::default() };
//! let tokens = generate(&model, &[3, 1, 4], &greedy)?;
//! assert_eq!((tokens.len(), &tokens[..3]), (9, &[3, 1, 4][..])); // the prompt, then 6 new tokens
//! // Without the cache every step runs the whole sequence again: the same tokens.
//! assert_eq!(generate(&model, &[3, 1, 4], &GenerationConfig { use_cache: false, ..greedy.clone() })?, tokens);
//!
//! let sampled = GenerationConfig {
//!     sampling: Sampling::Sample { temperature: 0.8, top_k: Some(10), top_p: Some(0.9) },
//!     ..greedy
//! };
//! nn::manual_seed(7);
//! let a = generate(&model, &[3, 1, 4], &sampled)?;
//! nn::manual_seed(7);
//! assert_eq!(generate(&model, &[3, 1, 4], &sampled)?, a); // same seed, same draws
//! assert!(generate(&model, &[60], &sampled).is_err()); // an id outside the vocabulary
//! # Ok::<(), nn::models::Error>(())
//! ```
//!
//! ## The tokenizer
//!
//! [`Tokenizer::from_dir(dir)`](crate::models::tokenizer::Tokenizer::from_dir) reads a
//! checkpoint's `tokenizer.json` (and the end-of-sequence token from
//! `tokenizer_config.json`) through Hugging Face's `tokenizers` crate: `encode` and
//! `decode` give transformers' fast tokenizer's ids and text, and `decode_stream` yields
//! whole UTF-8 characters as tokens arrive. An id outside the vocabulary is an error,
//! never skipped, and [`check_vocab`](crate::models::tokenizer::Tokenizer::check_vocab)
//! refuses a tokenizer with more ids than a model embeds:
//! ```
//! use nn::models::tokenizer::Tokenizer;
//!
//! let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../nn-models/tests/fixtures");
//! let tok = Tokenizer::from_dir(fixtures.join("tokenizers/gpt2"))?; // a byte-level BPE
//! let ids = tok.encode("It is a truth universally acknowledged");
//! assert_eq!(tok.decode(&ids), "It is a truth universally acknowledged");
//! assert_eq!(tok.eos_token_id(), tok.token_to_id("<|endoftext|>"));
//!
//! let mut stream = tok.decode_stream();
//! let mut text = String::new();
//! for id in tok.encode("café 🙂") {
//!     text += &stream.step(id)?.unwrap_or_default(); // whole characters only
//! }
//! assert_eq!(text, "café 🙂");
//! assert!(tok.try_decode(&[tok.vocab_size() as i64]).is_err());
//! assert!(tok.check_vocab(60).is_err()); // 400 ids: too many for the tiny GPT-2 above
//! # Ok::<(), nn::models::Error>(())
//! ```
//! The `generate` example puts the three together (a directory, its tokenizer, streamed
//! text); `gpt2_finetune` fine-tunes a GPT-2 directory and saves one transformers loads
//! (`examples/README.md`).
