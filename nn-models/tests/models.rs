//! The reference models against transformers and torchvision (fixtures written by
//! `tests/fixtures/generate.py`): strict loading of the checkpoint directories with their
//! keys unchanged, outputs within 1e-5, greedy generation token for token, the cache
//! against recomputation, and every bad input named.

use std::path::{Path, PathBuf};

use nn_core::prelude::*;
use nn_core::StateDict;
use nn_models::bert::BertModel;
use nn_models::generation::{generate, GenerationConfig, Sampling};
use nn_models::gpt2::Gpt2LMHeadModel;
use nn_models::llama::{LlamaConfig, LlamaForCausalLM};
use nn_models::resnet::ResNet;
use nn_models::{CausalLmInput, Error};

/// One test at a time: nn's generator is global, and the sampling test seeds it while
/// others would draw from it (random initialisation).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn io(name: &str) -> StateDict {
    StateDict::load(fixture(name).join("io.safetensors")).unwrap()
}

#[track_caller]
fn assert_close(got: &Tensor, expected: &Tensor, tol: f32, what: &str) {
    assert_eq!(got.shape(), expected.shape(), "{what}: shapes");
    let worst =
        got.to_vec().iter().zip(expected.to_vec()).map(|(g, e)| (g - e).abs() / (1.0 + e.abs())).fold(0.0, f32::max);
    assert!(worst <= tol, "{what}: worst error {worst:e} > {tol:e}");
}

#[test]
fn gpt2_loads_the_transformers_directory_and_matches_its_logits() {
    let _serial = serial();
    let f = io("gpt2");
    let model = Gpt2LMHeadModel::from_pretrained(fixture("gpt2")).unwrap();
    // The file holds the tied head once; the model has both names, one parameter.
    let file = StateDict::load(fixture("gpt2").join("model.safetensors")).unwrap();
    assert!(!file.contains_key("lm_head.weight"));
    assert_eq!(model.lm_head.weight.id(), model.transformer.wte.weight.id());
    assert_eq!(model.state_dict().len(), file.len() + 1);
    let logits = model.forward(f.get("input_ids").unwrap());
    assert_close(&logits, f.get("logits").unwrap(), 1e-5, "GPT-2 logits");
    // The printout is transformers': GPT2LMHeadModel(transformer: GPT2Model(...), lm_head).
    let printed = model.to_string();
    assert!(
        printed.starts_with("GPT2LMHeadModel(\n  (transformer): GPT2Model(\n    (wte): Embedding(60, 16)"),
        "{printed}"
    );
    assert!(
        printed.contains("(attn): GPT2Attention(\n") && printed.contains("(c_attn): Conv1D(nf=48, nx=16)"),
        "{printed}"
    );
}

#[test]
fn causal_models_decode_greedily_token_for_token_as_transformers() {
    let _serial = serial();
    let check = |name: &str, model: &dyn nn_models::generation::CausalLm| {
        let f = io(name);
        let prompt = f.get("prompt").unwrap().to_vec_i64();
        let expected = f.get("greedy").unwrap().to_vec_i64();
        for use_cache in [true, false] {
            // transformers ran 12 tokens (`min_new_tokens=12`) past the configs' `eos_token_id`.
            let config = GenerationConfig { max_new_tokens: 12, use_cache, ignore_eos: true, ..Default::default() };
            let got = generate_dyn(model, &prompt, &config);
            assert_eq!(got, expected, "{name}, use_cache {use_cache}");
        }
    };
    check("gpt2", &Gpt2LMHeadModel::from_pretrained(fixture("gpt2")).unwrap());
    check("llama", &LlamaForCausalLM::from_pretrained(fixture("llama")).unwrap());
}

/// `generate` through a trait object (it takes `impl CausalLm`).
fn generate_dyn(model: &dyn nn_models::generation::CausalLm, prompt: &[i64], config: &GenerationConfig) -> Vec<i64> {
    struct Dyn<'a>(&'a dyn nn_models::generation::CausalLm);
    impl nn_models::generation::CausalLm for Dyn<'_> {
        fn logits(&self, ids: &Tensor, cache: Option<&nn_models::KvCache>) -> Tensor {
            self.0.logits(ids, cache)
        }
        fn new_cache(&self) -> nn_models::KvCache {
            self.0.new_cache()
        }
        fn max_positions(&self) -> (usize, &'static str) {
            self.0.max_positions()
        }
        fn vocab_size(&self) -> usize {
            self.0.vocab_size()
        }
        fn device(&self) -> Device {
            self.0.device()
        }
        fn eos_token_ids(&self) -> Vec<i64> {
            self.0.eos_token_ids()
        }
    }
    generate(&Dyn(model), prompt, config).unwrap()
}

#[test]
fn the_cache_gives_the_logits_of_recomputation() {
    let _serial = serial();
    let model = LlamaForCausalLM::from_pretrained(fixture("llama")).unwrap();
    let ids = io("llama").get("input_ids").unwrap().narrow(0, 0, 1);
    let full = model.forward(&ids);
    let cache = model.model.layers.len();
    let cache = nn_models::KvCache::new(cache);
    // Four positions, then three more, one call each.
    let a = model.forward(nn_models::gpt2::CausalLmInput::with_cache(&ids.narrow(1, 0, 4), &cache));
    let b = model.forward(nn_models::gpt2::CausalLmInput::with_cache(&ids.narrow(1, 4, 3), &cache));
    assert_eq!(cache.seq_len(), 7);
    assert_close(&Tensor::cat(&[&a, &b], 1), &full, 1e-5, "Llama with the cache");
}

#[test]
fn llama_loads_the_transformers_directory_and_matches_its_logits() {
    let _serial = serial();
    let f = io("llama");
    let model = LlamaForCausalLM::from_pretrained(fixture("llama")).unwrap();
    assert_close(&model.forward(f.get("input_ids").unwrap()), f.get("logits").unwrap(), 1e-5, "Llama logits");
    let keys: Vec<String> = model.state_dict().keys().map(String::from).collect();
    assert!(keys.contains(&"model.layers.1.self_attn.k_proj.weight".to_string()));
}

#[test]
fn bert_matches_transformers_with_a_padded_sequence() {
    let _serial = serial();
    let f = io("bert");
    let model = BertModel::from_pretrained(fixture("bert")).unwrap();
    let (hidden, pooled) = model.forward((f.get("input_ids").unwrap(), f.get("attention_mask").unwrap()));
    assert_close(&hidden, f.get("last_hidden_state").unwrap(), 1e-5, "BERT last_hidden_state");
    assert_close(&pooled, f.get("pooler_output").unwrap(), 1e-5, "BERT pooler_output");
    assert!(model.state_dict().contains_key("encoder.layer.1.attention.self.query.weight"));
}

/// The same mask as float 1/0 and bool gives the fixture's output; an additive mask (0 =
/// attend, -10000 = padding) is refused, where "not zero attends" read it backwards.
#[test]
fn bert_takes_hugging_faces_mask_and_refuses_an_additive_one() {
    let _serial = serial();
    let f = io("bert");
    let model = BertModel::from_pretrained(fixture("bert")).unwrap();
    let (ids, mask) = (f.get("input_ids").unwrap(), f.get("attention_mask").unwrap());
    let want = f.get("last_hidden_state").unwrap();
    for m in [mask.to_dtype(DType::F32), mask.ne(&Tensor::full_on(&[], 0.0, mask.dtype(), mask.device()))] {
        assert_close(&model.forward((ids, &m)).0, want, 1e-5, "BERT with another mask dtype");
    }
    let additive = (mask.to_dtype(DType::F32) - 1.0) * 10000.0;
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| model.forward((ids, &additive)))).unwrap_err();
    let msg = e.downcast_ref::<String>().unwrap();
    assert!(msg.contains("attention_mask holds -10000; it must be 1 (attend) or 0 (padding)"), "{msg}");
}

/// A checkpoint of BERT with a head (keys under `bert.` and `cls.`, as `bert-base-uncased`
/// ships) loads its encoder, as transformers' `BertModel.from_pretrained` does; a file
/// mixing plain and prefixed keys still loads strictly (refused).
#[test]
fn bert_loads_the_encoder_of_a_checkpoint_with_a_head() {
    let _serial = serial();
    let plain = StateDict::load(fixture("bert").join("model.safetensors")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("bert").join("config.json"), dir.path().join("config.json")).unwrap();
    let mut headed = StateDict::new();
    for (k, t) in plain.iter() {
        headed.insert(format!("bert.{k}"), t.clone());
    }
    headed.insert("cls.predictions.bias".into(), Tensor::zeros(&[7]));
    headed.save(dir.path().join("model.safetensors")).unwrap();
    let model = BertModel::from_pretrained(dir.path()).unwrap();
    let f = io("bert");
    let (hidden, _) = model.forward((f.get("input_ids").unwrap(), f.get("attention_mask").unwrap()));
    assert_close(&hidden, f.get("last_hidden_state").unwrap(), 1e-5, "BERT from a headed checkpoint");
    headed.insert("pooler.dense.bias".into(), plain.get("pooler.dense.bias").unwrap().clone());
    headed.save(dir.path().join("model.safetensors")).unwrap();
    let e = BertModel::from_pretrained(dir.path()).err().expect("a mixed file is refused").to_string();
    assert!(e.contains("bert.embeddings.word_embeddings.weight"), "{e}");
}

/// The largest relative difference between `got` and `want` (`[N, L, V]`) over the
/// positions where `mask` (`[N, L]`) is 1: padding positions' outputs are not meaningful.
fn worst_at_tokens(got: &Tensor, want: &Tensor, mask: &Tensor) -> f32 {
    assert_eq!(got.shape(), want.shape());
    let v = got.shape()[2];
    let keep = mask.to_vec_i64();
    got.to_vec()
        .chunks(v)
        .zip(want.to_vec().chunks(v))
        .zip(keep)
        .filter(|(_, k)| *k == 1)
        .flat_map(|((g, w), _)| g.iter().zip(w).map(|(g, w)| (g - w).abs() / (1.0 + w.abs())).collect::<Vec<_>>())
        .fold(0.0, f32::max)
}

/// A padded batch (left-padded, whole, right-padded rows) with transformers' attention
/// mask, with and without `generate`'s position ids, gives transformers' logits at every
/// token; without the mask the left-padded row is wrong (what the test would miss). The
/// cache continues a padded batch as the whole pass computes it, and bad masks and
/// positions are named.
#[test]
fn causal_models_take_a_padded_batch_as_transformers() {
    let _serial = serial();
    type Run = Box<dyn Fn(CausalLmInput) -> Tensor>;
    let models: [(&str, Run, usize); 2] = [
        (
            "gpt2",
            {
                let m = Gpt2LMHeadModel::from_pretrained(fixture("gpt2")).unwrap();
                Box::new(move |i| m.forward(i))
            },
            2,
        ),
        (
            "llama",
            {
                let m = LlamaForCausalLM::from_pretrained(fixture("llama")).unwrap();
                Box::new(move |i| m.forward(i))
            },
            2,
        ),
    ];
    for (name, forward, layers) in models {
        let f = StateDict::load(fixture(name).join("padded.safetensors")).unwrap();
        let (ids, mask, pos) =
            (f.get("input_ids").unwrap(), f.get("attention_mask").unwrap(), f.get("position_ids").unwrap());
        assert_eq!(nn_models::positions_from_mask(mask, 6).to_vec_i64(), pos.to_vec_i64(), "{name}: positions");
        let masked = forward(CausalLmInput::new(ids).attention_mask(mask));
        let worst = worst_at_tokens(&masked, f.get("logits_mask").unwrap(), mask);
        assert!(worst < 1e-5, "{name} with the mask: worst error {worst:e}");
        let positioned = forward(CausalLmInput::new(ids).attention_mask(mask).position_ids(pos));
        let worst = worst_at_tokens(&positioned, f.get("logits_mask_pos").unwrap(), mask);
        assert!(worst < 1e-5, "{name} with the mask and positions: worst error {worst:e}");
        let unmasked = forward(CausalLmInput::new(ids));
        let worst = worst_at_tokens(&unmasked, f.get("logits_mask").unwrap(), mask);
        assert!(worst > 1e-3, "{name}: without the mask the padded rows should differ ({worst:e})");

        // The first four tokens, then the last two through the cache.
        let cache = nn_models::KvCache::new(layers);
        let first = forward(
            CausalLmInput::with_cache(&ids.narrow(1, 0, 4), &cache)
                .attention_mask(&mask.narrow(1, 0, 4))
                .position_ids(&pos.narrow(1, 0, 4)),
        );
        let rest = forward(
            CausalLmInput::with_cache(&ids.narrow(1, 4, 2), &cache)
                .attention_mask(mask)
                .position_ids(&pos.narrow(1, 4, 2)),
        );
        let whole = Tensor::cat(&[&first, &rest], 1);
        let worst = worst_at_tokens(&whole, &positioned, mask);
        assert!(worst < 1e-5, "{name} through the cache: worst error {worst:e}");

        let panics = |input: CausalLmInput| {
            let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| forward(input))).unwrap_err();
            e.downcast_ref::<String>().cloned().unwrap()
        };
        let msg = panics(CausalLmInput::new(ids).attention_mask(&mask.narrow(1, 0, 5)));
        assert!(msg.contains("attention_mask [3, 5] must be [batch, cached + new positions] = [3, 6]"), "{msg}");
        let msg = panics(CausalLmInput::new(ids).attention_mask(&(mask.to_dtype(DType::F32) * 2.0)));
        assert!(msg.contains("attention_mask holds 2; it must be 1 (attend) or 0 (padding)"), "{msg}");
        let far = Tensor::from_vec_i64(pos.to_vec_i64().iter().map(|p| p + 40).collect(), pos.shape());
        let msg = panics(CausalLmInput::new(ids).position_ids(&far));
        assert!(msg.contains("position_ids holds 41, outside the model's 32 positions"), "{msg}");
        let msg = panics(CausalLmInput::new(ids).position_ids(&pos.narrow(1, 0, 5)));
        assert!(msg.contains("position_ids must be i64 [3, 6] or [1, 6]"), "{msg}");
    }
}

/// The weights and input of `generate.py`'s `formula`.
fn formula(key: &str, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let s = key.bytes().enumerate().map(|(j, c)| c as usize * (j + 1)).sum::<usize>() % 1009;
    let base = (0..n).map(|i| (i as f64 * 0.37 + s as f64 * 0.11).sin());
    let last = key.rsplit('.').next().unwrap();
    let v: Vec<f64> = if last == "weight" && shape.len() >= 2 {
        let fan_in: usize = shape[1..].iter().product();
        base.map(|x| x * (3.0 / fan_in as f64).sqrt()).collect()
    } else if last == "weight" {
        base.map(|x| 1.0 + 0.1 * x).collect()
    } else if last == "running_var" {
        base.map(|x| 1.0 + 0.25 * (x + 1.0)).collect()
    } else {
        base.map(|x| 0.1 * x).collect()
    };
    Tensor::from_vec_f64(v, shape).to_dtype(nn_core::DType::F32)
}

#[test]
fn resnets_load_torchvision_state_dicts_and_match_its_outputs() {
    let _serial = serial();
    let f = io("resnet");
    for (name, build) in [("resnet18", ResNet::resnet18 as fn(usize) -> ResNet), ("resnet50", ResNet::resnet50)] {
        let mut model = build(10);
        let sd: StateDict = model
            .state_dict()
            .iter()
            .map(|(k, t)| {
                let v = if k.ends_with("num_batches_tracked") { t.clone() } else { formula(k, t.shape()) };
                (k.to_string(), v)
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{name}.safetensors"));
        sd.save(&path).unwrap();
        model = ResNet::from_safetensors(&path, || build(10)).unwrap();
        assert_close(&model.forward(f.get("x").unwrap()), f.get(name).unwrap(), 1e-4, name);
        // The other depth's file does not fit, and says which keys.
        let other = if name == "resnet18" { ResNet::resnet50 } else { ResNet::resnet18 };
        let err = ResNet::from_safetensors(&path, || other(10)).err().expect("an error").to_string();
        assert!(err.contains("does not fit") && err.contains("layer"), "{err}");
    }
}

/// A copy of a fixture directory whose config.json is `edit`ed.
fn with_config(name: &str, edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture(name).join(file), dir.path().join(file)).unwrap();
    }
    let text = std::fs::read_to_string(dir.path().join("config.json")).unwrap();
    let mut config: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text).unwrap();
    edit(&mut config);
    std::fs::write(dir.path().join("config.json"), serde_json::to_string(&config).unwrap()).unwrap();
    dir
}

#[test]
fn bad_configs_and_directories_are_errors_naming_the_field_file_or_limit() {
    let _serial = serial();
    let err = |r: Result<Gpt2LMHeadModel, Error>| r.err().expect("an error").to_string();
    let missing = with_config("gpt2", |c| {
        c.remove("n_embd");
    });
    assert!(err(Gpt2LMHeadModel::from_pretrained(missing.path())).contains("missing field `n_embd`"));
    let unknown = with_config("gpt2", |c| {
        c.insert("n_embed".into(), 16.into());
    });
    let e = err(Gpt2LMHeadModel::from_pretrained(unknown.path()));
    assert!(e.contains("unknown field `n_embed`"), "{e}");
    let other = with_config("gpt2", |c| {
        c.insert("model_type".into(), "gpt_neox".into());
    });
    let e = err(Gpt2LMHeadModel::from_pretrained(other.path()));
    assert!(e.contains("`model_type` \"gpt_neox\" is not an architecture of `Gpt2LMHeadModel`"), "{e}");
    let decoder = with_config("bert", |c| {
        c.insert("is_decoder".into(), true.into());
    });
    let e = BertModel::from_pretrained(decoder.path()).err().unwrap().to_string();
    assert!(e.contains("`is_decoder` is true"), "{e}");
    let scaled = with_config("llama", |c| {
        c.insert("rope_parameters".into(), serde_json::json!({"rope_theta": 10000.0, "rope_type": "yarn"}));
    });
    let e = LlamaForCausalLM::from_pretrained(scaled.path()).err().unwrap().to_string();
    assert!(e.contains("`rope_parameters.rope_type` \"yarn\""), "{e}");
    // transformers 5 fills `rope_parameters.rope_theta` from a top-level `rope_theta` (the
    // default 10000 was used before); two values that disagree are refused.
    let split = with_config("llama", |c| {
        c.insert("rope_parameters".into(), serde_json::json!({"rope_type": "default"}));
        c.insert("rope_theta".into(), 500000.0.into());
    });
    assert_eq!(LlamaConfig::from_dir(split.path()).unwrap().theta(), 500000.0);
    let clash = with_config("llama", |c| {
        c.insert("rope_theta".into(), 500000.0.into());
    });
    let e = LlamaConfig::from_dir(clash.path()).err().unwrap().to_string();
    assert!(e.contains("`rope_parameters.rope_theta` 10000 and `rope_theta` 500000 disagree"), "{e}");
    // A key given twice (serde_json would keep the last), `architectures` not a list (its
    // check had been skipped), a config.json that is not a regular file.
    let twice = with_config("gpt2", |_| {});
    let path = twice.path().join("config.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen('{', "{\"layer_norm_epsilon\": 0.5, ", 1)).unwrap();
    let e = err(Gpt2LMHeadModel::from_pretrained(twice.path()));
    assert!(e.contains("duplicate key `layer_norm_epsilon`"), "{e}");
    let string = with_config("gpt2", |c| {
        c.insert("architectures".into(), "BertForSequenceClassification".into());
    });
    let e = err(Gpt2LMHeadModel::from_pretrained(string.path()));
    assert!(e.contains("`architectures` is \"BertForSequenceClassification\"; it is a list"), "{e}");
    #[cfg(unix)]
    {
        let device = with_config("gpt2", |_| {});
        std::fs::remove_file(device.path().join("config.json")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", device.path().join("config.json")).unwrap();
        let e = err(Gpt2LMHeadModel::from_pretrained(device.path()));
        assert!(e.contains("is not a regular file"), "{e}");
    }
    // Weights for another config: every mis-shaped key named, nothing built.
    let wider = with_config("gpt2", |c| {
        c.insert("n_embd".into(), 32.into());
    });
    let e = err(Gpt2LMHeadModel::from_pretrained(wider.path()));
    assert!(e.contains("size mismatch") && e.contains("transformer.wte.weight"), "{e}");
    // No weights.
    let empty = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("gpt2").join("config.json"), empty.path().join("config.json")).unwrap();
    let e = err(Gpt2LMHeadModel::from_pretrained(empty.path()));
    assert!(e.contains("has no weights: expected `model.safetensors`"), "{e}");
    // A prompt longer than the positions.
    let model = Gpt2LMHeadModel::from_pretrained(fixture("gpt2")).unwrap();
    let long = vec![1i64; 33];
    let e = generate(&model, &long, &GenerationConfig::default()).unwrap_err().to_string();
    assert_eq!(e, "the prompt of 33 tokens is longer than the model's 32 positions (`n_positions` in config.json)");
    let e = generate(&model, &long[..30], &GenerationConfig::default()).unwrap_err().to_string();
    assert!(e.contains("the prompt plus max_new_tokens - 1 of 49 tokens"), "{e}");
    // A prompt id outside the vocabulary: an error naming it (the embedding had panicked).
    let vocab = nn_models::generation::CausalLm::vocab_size(&model) as i64;
    for bad in [vocab, -1] {
        let e = generate(&model, &[1, bad], &GenerationConfig::default()).unwrap_err().to_string();
        assert_eq!(e, format!("generate: prompt token 1 is {bad}, outside the model's vocabulary of {vocab} ids"));
    }
    // The last new token is never fed back: 30 + 3 new tokens use 32 positions, and fit.
    let config = GenerationConfig { max_new_tokens: 3, ..Default::default() };
    assert_eq!(generate(&model, &long[..30], &config).unwrap().len(), 33);
}

#[test]
fn seeded_sampling_is_reproducible_and_differs_from_greedy() {
    let _serial = serial();
    let model = Gpt2LMHeadModel::from_pretrained(fixture("gpt2")).unwrap();
    let sampling = Sampling::Sample { temperature: 1.5, top_k: Some(20), top_p: Some(0.9) };
    let config = GenerationConfig { max_new_tokens: 20, sampling, ..Default::default() };
    nn_core::manual_seed(11);
    let a = generate(&model, &[1, 2, 3], &config).unwrap();
    nn_core::manual_seed(11);
    let b = generate(&model, &[1, 2, 3], &config).unwrap();
    assert_eq!(a, b);
    let greedy = generate(&model, &[1, 2, 3], &GenerationConfig { max_new_tokens: 20, ..Default::default() }).unwrap();
    assert_ne!(a, greedy, "sampling at temperature 1.5 follows greedy for 20 tokens");
}

#[test]
fn save_pretrained_round_trips_with_the_head_written_once() {
    let _serial = serial();
    let model = Gpt2LMHeadModel::from_pretrained(fixture("gpt2")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    model.save_pretrained(dir.path()).unwrap();
    // Written once, under the first name, as transformers writes it; read back, both
    // names are one tensor.
    let bytes = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    assert!(header.get("transformer.wte.weight").is_some() && header.get("lm_head.weight").is_none());
    let file = StateDict::load(dir.path().join("model.safetensors")).unwrap();
    assert_eq!(file.get("lm_head.weight").unwrap().id(), file.get("transformer.wte.weight").unwrap().id());
    let back = Gpt2LMHeadModel::from_pretrained(dir.path()).unwrap();
    let ids = io("gpt2").get("input_ids").unwrap().clone();
    assert_eq!(back.forward(&ids).to_vec(), model.forward(&ids).to_vec());
    // A save that fails at the config (here a link into a folder that does not exist)
    // leaves the directory as it was: the old weights, no temporary file. (The weights
    // had been replaced before the config was written.)
    let before = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    nn_core::no_grad(|| model.transformer.wte.weight.add_(1.0));
    std::fs::remove_file(dir.path().join("config.json")).unwrap();
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(dir.path().join("missing/config.json"), dir.path().join("config.json")).unwrap();
        let e = model.save_pretrained(dir.path()).unwrap_err().to_string();
        assert!(e.contains("config.json"), "{e}");
        assert_eq!(std::fs::read(dir.path().join("model.safetensors")).unwrap(), before);
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}

#[test]
fn a_cache_that_does_not_fit_is_named() {
    let _serial = serial();
    let model = Gpt2LMHeadModel::from_pretrained(fixture("gpt2")).unwrap();
    let ids = Tensor::from_vec_i64(vec![1, 2, 3], &[1, 3]);
    let panics = |input: nn_models::gpt2::CausalLmInput| {
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| model.forward(input))).expect_err("a panic");
        err.downcast_ref::<String>().cloned().unwrap()
    };
    let short = nn_models::KvCache::new(1);
    let msg = panics(nn_models::gpt2::CausalLmInput::with_cache(&ids, &short));
    assert!(msg.contains("GPT2Model: `cache` has 1 layers, the model 2"), "{msg}");
    let cache = nn_models::KvCache::new(2);
    model.forward(nn_models::gpt2::CausalLmInput::with_cache(&ids, &cache));
    let two = Tensor::from_vec_i64(vec![1, 2, 3, 4], &[2, 2]);
    let msg = panics(nn_models::gpt2::CausalLmInput::with_cache(&two, &cache));
    assert!(msg.contains("need batch 2"), "{msg}");
    // A cache filled without autocast, extended under it: refused before any layer grows.
    let four = Tensor::from_vec_i64(vec![4], &[1, 1]);
    let msg = nn_core::amp::autocast(Device::Cpu, DType::BF16, || {
        panics(nn_models::gpt2::CausalLmInput::with_cache(&four, &cache))
    });
    assert!(msg.contains("KvCache: layer 0 holds f32 keys and this forward computes bf16 ones"), "{msg}");
    assert_eq!(cache.seq_len(), 3);
}

/// Cached generation under bf16 autocast: the keys are bf16 (the attention projections
/// run in bf16), and the cache keeps them so (it refused them at the second step, against
/// the f32 word embedding).
#[test]
fn cached_generation_runs_under_autocast() {
    let _serial = serial();
    let model = Gpt2LMHeadModel::from_pretrained(fixture("gpt2")).unwrap();
    let config = GenerationConfig { max_new_tokens: 5, ignore_eos: true, ..Default::default() };
    let tokens = nn_core::amp::autocast(Device::Cpu, DType::BF16, || generate(&model, &[1, 2, 3], &config)).unwrap();
    assert_eq!(tokens.len(), 8);
}

/// `reorder_and_upcast_attn` computes a bf16 model's attention in f32 (the flag was
/// accepted and ignored). On the CPU the fused attention already computes half inputs'
/// scores in f32 and rounds its output once, so the upcast path must give exactly its
/// logits; where attention is composed of half-precision ops (the GPU) it is what keeps
/// the scores in f32.
#[test]
fn gpt2_upcast_attention_computes_half_models_scores_in_f32() {
    let _serial = serial();
    let ids = io("gpt2").get("input_ids").unwrap().narrow(0, 0, 1);
    let upcast = with_config("gpt2", |c| {
        c.insert("reorder_and_upcast_attn".into(), true.into());
    });
    let logits = |dir: &Path, dtype: DType| {
        let mut m = Gpt2LMHeadModel::from_pretrained(dir).unwrap();
        m.to_dtype(dtype);
        m.forward(&ids).to_dtype(DType::F32)
    };
    for dtype in [DType::BF16, DType::F16, DType::F32] {
        let (plain, up) = (logits(&fixture("gpt2"), dtype), logits(upcast.path(), dtype));
        assert_eq!(up.to_vec(), plain.to_vec(), "{dtype:?}");
    }
}

/// `generate` stops after the config's `eos_token_id` (one id or a list), as transformers'
/// `generate` does with the model's config; `eos_token_id` overrides it and `ignore_eos`
/// runs every token.
#[test]
fn generation_stops_at_the_configs_eos_token() {
    let _serial = serial();
    for name in ["gpt2", "llama"] {
        let prompt = io(name).get("prompt").unwrap().to_vec_i64();
        let greedy = io(name).get("greedy").unwrap().to_vec_i64();
        let (first, second) = (greedy[prompt.len()], greedy[prompt.len() + 1]);
        // One id for GPT-2, a list (as Llama 3's) for Llama.
        let eos = if name == "gpt2" { serde_json::json!(second) } else { serde_json::json!([1000, second]) };
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(fixture(name).join("config.json")).unwrap();
        let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
        config["eos_token_id"] = eos;
        std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
        std::fs::copy(fixture(name).join("model.safetensors"), dir.path().join("model.safetensors")).unwrap();
        let model: Box<dyn nn_models::generation::CausalLm> = if name == "gpt2" {
            Box::new(Gpt2LMHeadModel::from_pretrained(dir.path()).unwrap())
        } else {
            Box::new(LlamaForCausalLM::from_pretrained(dir.path()).unwrap())
        };
        let run = |config: GenerationConfig| generate_dyn(model.as_ref(), &prompt, &config);
        let twelve = GenerationConfig { max_new_tokens: 12, ..Default::default() };
        // The first time `second` comes, generation stops after it.
        let stop = prompt.len() + greedy[prompt.len()..].iter().position(|&t| t == second).unwrap() + 1;
        assert_eq!(run(twelve.clone()), greedy[..stop], "{name}: stops after the config's eos");
        assert_eq!(run(GenerationConfig { ignore_eos: true, ..twelve.clone() }), greedy, "{name}: ignore_eos");
        let own = run(GenerationConfig { eos_token_id: Some(first), ..twelve });
        assert_eq!(own, greedy[..prompt.len() + 1], "{name}: the caller's eos_token_id replaces the config's");
    }
}

/// `pad_token_id` is BERT's and Llama's `padding_idx`: a new model's row is zero and the
/// row gets no gradient (transformers' `nn.Embedding(..., padding_idx=pad_token_id)`); a
/// pad id outside the vocabulary is an error naming the field.
#[test]
fn pad_token_id_is_the_word_embeddings_padding_row() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixture("bert").join("config.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let c = nn_models::bert::BertConfig::from_dir(dir.path()).unwrap();
    assert_eq!(c.pad_token_id, Some(0));
    // transformers' own BertModel, built from this config with random weights (the
    // fixture), has its pad row zeroed too.
    let hf = StateDict::load(fixture("bert").join("model.safetensors")).unwrap();
    let hf_row = hf.get("embeddings.word_embeddings.weight").unwrap().narrow(0, 0, 1).to_vec();
    assert_eq!(hf_row, vec![0.0; c.hidden_size], "transformers zeroes the pad row");
    let bert = nn_models::bert::BertModel::new(&c);
    let (name, w) = bert.named_parameters().into_iter().find(|(n, _)| n.ends_with("word_embeddings.weight")).unwrap();
    assert_eq!(w.narrow(0, 0, 1).to_vec(), vec![0.0; c.hidden_size], "{name}: the pad row starts at zero");
    assert!(w.narrow(0, 1, 1).to_vec().iter().any(|&v| v != 0.0));
    let ids = Tensor::from_vec_i64(vec![5, 0, 7, 0], &[1, 4]);
    let mask = Tensor::from_vec_i64(vec![1, 1, 1, 1], &[1, 4]);
    bert.forward((&ids, &mask)).0.sum().backward();
    let g = w.grad().unwrap();
    assert_eq!(g.narrow(0, 0, 1).to_vec(), vec![0.0; c.hidden_size], "the pad row gets no gradient");
    assert!(g.narrow(0, 5, 1).to_vec().iter().any(|&v| v != 0.0));
    // Out of range, named; negative counts from the end.
    config["pad_token_id"] = serde_json::json!(60);
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let e = nn_models::bert::BertConfig::from_dir(dir.path()).unwrap_err().to_string();
    assert!(e.contains("`pad_token_id` 60 is not a row of the 60-token embedding"), "{e}");
    config["pad_token_id"] = serde_json::json!(-1);
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let c = nn_models::bert::BertConfig::from_dir(dir.path()).unwrap();
    let llama_like = nn_models::bert::BertModel::new(&c);
    let w = llama_like.named_parameters().into_iter().find(|(n, _)| n.ends_with("word_embeddings.weight")).unwrap().1;
    assert_eq!(w.narrow(0, 59, 1).to_vec(), vec![0.0; c.hidden_size]);
}

/// Every reference model deep-copies: the copy's outputs equal the original's, no tensor
/// is shared, GPT-2's head stays tied to its embedding in the copy, and training the copy
/// leaves the original as it was.
#[test]
fn every_reference_model_deep_copies() {
    let _serial = serial();
    let gpt2 = Gpt2LMHeadModel::from_pretrained(fixture("gpt2")).unwrap();
    let bert = BertModel::from_pretrained(fixture("bert")).unwrap();
    let llama = LlamaForCausalLM::from_pretrained(fixture("llama")).unwrap();
    let resnet = ResNet::resnet18(10);
    fn independent<M: Module>(original: &M, copy: &M, what: &str) {
        let ids: Vec<_> = original.parameters().iter().map(|p| p.id()).collect();
        assert!(copy.parameters().iter().all(|p| !ids.contains(&p.id())), "{what}: a parameter is shared");
        let a = original.state_dict();
        let b = copy.state_dict();
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "{what}: keys");
        for (k, t) in a.iter() {
            assert_eq!(t.to_vec_f64(), b.get(k).unwrap().to_vec_f64(), "{what}: {k}");
        }
    }
    let ids = Tensor::from_vec_i64(vec![1, 4, 2, 7], &[1, 4]);
    let c = gpt2.deep_copy();
    independent(&gpt2, &c, "GPT-2");
    assert_eq!(c.lm_head.weight.id(), c.transformer.wte.weight.id(), "the tie is kept");
    assert_eq!(c.forward(&ids).to_vec(), gpt2.forward(&ids).to_vec());
    let before = gpt2.state_dict().values().map(|t| t.to_vec_f64()).collect::<Vec<_>>();
    let mut opt = nn_core::optim::Sgd::new(c.parameters(), nn_core::optim::SgdConfig { lr: 0.5, ..Default::default() });
    c.forward(&ids).square().mean().backward();
    nn_core::optim::Optimizer::step(&mut opt);
    assert_eq!(gpt2.state_dict().values().map(|t| t.to_vec_f64()).collect::<Vec<_>>(), before);
    assert_ne!(c.forward(&ids).to_vec(), gpt2.forward(&ids).to_vec());
    independent(&bert, &bert.deep_copy(), "BERT");
    let c = llama.deep_copy();
    independent(&llama, &c, "Llama");
    assert_eq!(c.forward(&ids).to_vec(), llama.forward(&ids).to_vec());
    let mut resnet = resnet;
    resnet.eval();
    let c = resnet.deep_copy();
    independent(&resnet, &c, "ResNet");
    assert!(!c.is_training());
    let x = Tensor::randn(&[1, 3, 32, 32]);
    assert_eq!(c.forward(&x).to_vec(), resnet.forward(&x).to_vec());
}
