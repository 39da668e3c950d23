//! Reading a transformers checkpoint directory: `config.json` into a typed config, checked
//! field by field, and its weights (any layout, [`crate::weights`]) into a model built on
//! the meta device.
//!
//! A config is strict where a field could change what the model computes: a field the
//! model's config does not declare is an error naming it (a typo, or a feature this
//! crate does not implement), as is a field it must leave at its neutral value
//! (`is_decoder`, `add_cross_attention`, ...) set otherwise. Fields that describe the
//! checkpoint, the tokenizer or generation defaults and cannot change the forward pass
//! (`transformers_version`, `dtype`, `bos_token_id`, `temperature`, ...) are read past.
//! `eos_token_id` (where generation stops) and `pad_token_id` (the embedding row that
//! stays zero and untrained) do change what a model does: each config declares them.

use std::path::{Path, PathBuf};

use nn_core::{DType, Device, Module, StateDict};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// Fields of Hugging Face's `PretrainedConfig` that never change the forward pass.
const DESCRIPTIVE: &[&str] = &[
    "_name_or_path",
    "architectures",
    "transformers_version",
    "dtype",
    "torch_dtype",
    "bos_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "use_cache",
    "output_hidden_states",
    "output_attentions",
    "return_dict",
    "id2label",
    "label2id",
    "num_labels",
    "problem_type",
    "tokenizer_class",
    "prefix",
    "task_specific_params",
    "finetuning_task",
    "gradient_checkpointing",
    "torchscript",
    "use_bfloat16",
    "tf_legacy_loss",
    "chunk_size_feed_forward",
    "classifier_dropout",
    "max_length",
    "min_length",
    "do_sample",
    "early_stopping",
    "num_beams",
    "num_beam_groups",
    "diversity_penalty",
    "temperature",
    "top_k",
    "top_p",
    "typical_p",
    "repetition_penalty",
    "length_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "num_return_sequences",
    "output_scores",
    "return_dict_in_generate",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "remove_invalid_values",
    "exponential_decay_length_penalty",
    "suppress_tokens",
    "begin_suppress_tokens",
];

/// Fields of `PretrainedConfig` that would change the model, and so must hold their
/// neutral value (`null`, `false`, or empty) here.
const NEUTRAL: &[&str] = &[
    "is_decoder",
    "add_cross_attention",
    "is_encoder_decoder",
    "tie_encoder_decoder",
    "cross_attention_hidden_size",
    "pruned_heads",
];

fn is_neutral(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// The largest `config.json` read (transformers' configs take a few kilobytes; one with a
/// large `id2label` some hundreds).
const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// The text of the regular file at `path` (a FIFO is an error, never a wait), of at most
/// `max` bytes (`what` names the kind of file in the message; `bad` makes the error for a
/// file that is not regular, too large, or not UTF-8); [`Error::Io`] when it cannot be read.
/// The one bounded read behind `config.json`, shard indexes and tokenizer files.
pub(crate) fn read_text(path: &Path, max: u64, what: &str, bad: impl Fn(String) -> Error) -> Result<String> {
    let (file, len) = nn_core::io::open_regular(path).map_err(|e| match e {
        nn_core::Error::Io { source, .. } => Error::Io { path: path.to_path_buf(), source },
        nn_core::Error::NotARegularFile { kind, .. } => bad(format!("is not a regular file ({kind})")),
        other => bad(other.to_string()),
    })?;
    if len > max {
        return Err(bad(format!("is {len} bytes; {what} is at most {max}")));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, max + 1), &mut text)
        .map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    if text.len() as u64 > max {
        return Err(bad(format!("grew past {max} bytes while it was read")));
    }
    Ok(text)
}

/// `dir/config.json` as `C`, for a model whose `model_type` is `model_type` and whose
/// `architectures` entries, when given, are among `architectures`. `expected` names the
/// Rust type for messages.
pub(crate) fn read_config<C: DeserializeOwned>(
    dir: &Path,
    model_type: &str,
    architectures: &[&str],
    expected: &'static str,
) -> Result<C> {
    let path = dir.join("config.json");
    let bad = |reason: String| Error::Config { path: path.clone(), reason };
    // Read as the weights are: a regular file (a FIFO would block, `/dev/zero` never ends),
    // of a bounded size, with no key given twice (serde_json keeps the last one silently).
    let text = read_text(&path, MAX_CONFIG_BYTES, "a config", bad)?;
    nn_core::serialization::check_unique_keys(&text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let Value::Object(mut fields) = value else { return Err(bad("expected a JSON object".into())) };
    let supported = || format!("`model_type` \"{model_type}\" with `architectures` {architectures:?}");
    match fields.get("model_type") {
        Some(Value::String(t)) if t == model_type => {}
        Some(other) => {
            return Err(Error::Architecture {
                path,
                found: format!("`model_type` {other}"),
                expected,
                supported: supported(),
            })
        }
        None => return Err(bad("missing field `model_type`".into())),
    }
    match fields.get("architectures") {
        None | Some(Value::Null | Value::Array(_)) => {}
        Some(other) => return Err(bad(format!("`architectures` is {other}; it is a list of class names"))),
    }
    if let Some(Value::Array(names)) = fields.get("architectures") {
        if let Some(other) = names.iter().find(|n| !n.as_str().is_some_and(|n| architectures.contains(&n))) {
            return Err(Error::Architecture {
                path,
                found: format!("`architectures` entry {other}"),
                expected,
                supported: supported(),
            });
        }
    }
    fields.remove("model_type");
    for key in NEUTRAL {
        if let Some(v) = fields.remove(*key) {
            if !is_neutral(&v) {
                return Err(bad(format!(
                    "`{key}` is {v}: {expected} implements only the plain encoder/decoder, where it is unset"
                )));
            }
        }
    }
    for key in DESCRIPTIVE {
        fields.remove(*key);
    }
    serde_json::from_value(Value::Object(fields)).map_err(|e| bad(e.to_string()))
}

/// Serde's `default` for fields whose Hugging Face default is `true`.
pub(crate) fn yes() -> bool {
    true
}

/// The weights of `dir` in any layout transformers writes ([`crate::weights`]), or the
/// error naming the directory.
pub(crate) fn weights_path(dir: &Path) -> Result<PathBuf> {
    crate::weights::locate(dir)
}

/// How `from_pretrained_with` loads a checkpoint: transformers' `dtype=` and (for one
/// device) `device_map=`.
///
/// ```
/// use nn_core::{DType, Device};
/// use nn_models::LoadOptions;
/// // transformers: from_pretrained(dir, dtype=torch.bfloat16)
/// let bf16 = LoadOptions { dtype: Some(DType::BF16), ..Default::default() };
/// // transformers 5's default, dtype="auto": the checkpoint's own dtype, on the CPU.
/// assert_eq!(LoadOptions::default(), LoadOptions { dtype: None, device: Device::Cpu });
/// # let _ = bf16;
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LoadOptions {
    /// The floating-point dtype of the parameters and buffers: `None` keeps the
    /// checkpoint's (the dtype most of its floating-point values are stored in), `Some`
    /// converts to it. Integer buffers keep their dtype either way.
    pub dtype: Option<DType>,
    /// The device the model is placed on.
    pub device: Device,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { dtype: None, device: Device::Cpu }
    }
}

impl LoadOptions {
    /// What `from_pretrained(dir)` loads with: f32 on the CPU, whatever the checkpoint's
    /// dtype (transformers 4's default).
    pub fn f32() -> Self {
        LoadOptions { dtype: Some(DType::F32), device: Device::Cpu }
    }
}

/// The floating-point dtype that holds most of the state dict's values (f32 when it has
/// none).
fn checkpoint_dtype(weights: &StateDict) -> DType {
    let mut counts: Vec<(DType, usize)> = Vec::new();
    for t in weights.values().filter(|t| t.dtype().is_float()) {
        match counts.iter_mut().find(|(d, _)| *d == t.dtype()) {
            Some((_, n)) => *n += t.numel(),
            None => counts.push((t.dtype(), t.numel())),
        }
    }
    counts.into_iter().max_by_key(|&(_, n)| n).map_or(DType::F32, |(d, _)| d)
}

/// Builds a model with `build` on the meta device (no memory for its random init) and loads
/// the weights of `dir` into it strictly: every key must match, with tied parameters
/// satisfied by one name, as transformers writes them. On any error nothing is returned.
pub(crate) fn load_pretrained<M: Module>(dir: &Path, build: impl FnOnce() -> M, options: &LoadOptions) -> Result<M> {
    load_weights(&weights_path(dir)?, build, |w| w, options)
}

/// A base model's weights from a checkpoint of the model with a head, as transformers'
/// base-model `from_pretrained` takes them: where every key is under `prefix.` (the base
/// model, `bert.`) or `head.` (the head, `cls.`), the prefix is stripped and the head's
/// keys are left out. Any other file is returned as it is (and loads strictly).
pub(crate) fn base_of_headed(weights: StateDict, prefix: &str, head: &str) -> StateDict {
    let (prefix, head) = (format!("{prefix}."), format!("{head}."));
    let headed = weights.keys().any(|k| k.starts_with(&prefix))
        && weights.keys().all(|k| k.starts_with(&prefix) || k.starts_with(&head));
    if !headed {
        return weights;
    }
    let mut base = StateDict::with_capacity(weights.len());
    for (k, t) in weights.iter() {
        if let Some(k) = k.strip_prefix(&prefix) {
            base.insert(k.to_string(), t.clone());
        }
    }
    base
}

/// Builds a model with `build` on the meta device and strict-loads the weights at `path`
/// (a safetensors or PyTorch file, or a shard index: [`crate::weights::read`]) into it
/// (its entries through `adapt`), in evaluation mode; on any error nothing is returned.
pub(crate) fn load_weights<M: Module>(
    path: &Path,
    build: impl FnOnce() -> M,
    adapt: impl FnOnce(StateDict) -> StateDict,
    options: &LoadOptions,
) -> Result<M> {
    let path = path.to_path_buf();
    let weights = adapt(crate::weights::read(&path)?);
    let dtype = options.dtype.unwrap_or_else(|| checkpoint_dtype(&weights));
    let mut model = nn_core::with_device(Device::Meta, build);
    if dtype != DType::F32 {
        // On the meta device: the parameters take the dtype before any value exists, so
        // the load converts (or keeps) each tensor once, into its final dtype.
        model.to_dtype(dtype);
    }
    model
        .load_state_dict(&weights, true)
        .map_err(|source| Error::Weights { path: path.clone(), source: Box::new(source) })?;
    drop(weights);
    if options.device != Device::Cpu {
        model.to_device(options.device);
    }
    model.eval();
    Ok(model)
}

/// How [`save_pretrained_with`](crate::gpt2::Gpt2LMHeadModel::save_pretrained_with)
/// writes the weights: transformers' `save_pretrained` arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SaveOptions {
    /// Split the weights into shards of at most this many bytes (transformers'
    /// `max_shard_size`), named by `model.safetensors.index.json`; a tensor larger than it
    /// gets a shard of its own. `None`: one `model.safetensors`.
    pub max_shard_size: Option<u64>,
}

/// Writes `config` as `dir/config.json` and the model's weights as `dir/model.safetensors`
/// or, with [`SaveOptions::max_shard_size`], as shards and their index (tied parameters
/// once, under their first name, as `save_pretrained` does), creating `dir`.
///
/// Every file is written in full under a temporary name first and then renamed into place
/// together ([`nn_core::io::AtomicFiles`]): a failed write leaves the directory as it
/// was. (Written one after the other in place, a failure between them would leave new
/// weights beside an old config that fits their shapes, and the directory would load
/// without error into a different model.) The weights of an earlier save in the other
/// layout, or with another shard count, are removed once the new ones are in place: left
/// there, they would make the directory ambiguous ([`crate::weights::locate`] refuses it).
pub(crate) fn save_pretrained(
    dir: &Path,
    config: &Map<String, Value>,
    model: &dyn Module,
    options: &SaveOptions,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io { path: dir.to_path_buf(), source })?;
    let config_path = dir.join("config.json");
    let mut files = nn_core::io::AtomicFiles::new();
    let metadata = || Some(std::collections::HashMap::from([("format".to_string(), "pt".to_string())]));
    let state = model.state_dict();
    let weights_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Weights { path, source: Box::new(source) }
    };
    let written: Vec<String> = match options.max_shard_size {
        None => {
            let weights = dir.join("model.safetensors");
            state.save_staged(&mut files, &weights, metadata()).map_err(weights_err(&weights))?;
            vec!["model.safetensors".into()]
        }
        Some(max) => {
            let shards = shard(&state, max);
            let n = shards.len();
            let mut weight_map = std::collections::BTreeMap::new();
            let mut names = Vec::with_capacity(n + 1);
            for (i, part) in shards.iter().enumerate() {
                let name = format!("model-{:05}-of-{n:05}.safetensors", i + 1);
                let path = dir.join(&name);
                part.save_staged(&mut files, &path, metadata()).map_err(weights_err(&path))?;
                weight_map.extend(part.keys().map(|k| (k.to_string(), name.clone())));
                names.push(name);
            }
            let total: usize =
                shards.iter().flat_map(|p| p.values()).map(|t| t.numel() * t.dtype().size_in_bytes()).sum();
            let index = serde_json::json!({ "metadata": { "total_size": total }, "weight_map": weight_map });
            let index_path = dir.join("model.safetensors.index.json");
            let text = serde_json::to_string_pretty(&index).expect("a JSON value serialises");
            files
                .write(&index_path, |f| std::io::Write::write_all(f, text.as_bytes()))
                .map_err(|e| Error::Config { path: index_path.clone(), reason: e.to_string() })?;
            names.push("model.safetensors.index.json".into());
            names
        }
    };
    let text = serde_json::to_string_pretty(config).expect("a JSON map serialises");
    files
        .write(&config_path, |f| std::io::Write::write_all(f, text.as_bytes()))
        .map_err(|e| Error::Config { path: config_path.clone(), reason: e.to_string() })?;
    // A rename that failed: named as the file system's error on that file (not as weights
    // that do not fit).
    files.commit().map_err(|e| match e {
        nn_core::Error::Io { path, source } => Error::Io { path, source },
        other => Error::Weights { path: dir.join(&written[0]), source: Box::new(other) },
    })?;
    crate::weights::remove_stale(dir, &written)
}

/// The state dict's distinct tensors (a tied one under its first name) in shards of at
/// most `max` bytes, in state-dict order, as transformers splits them.
fn shard(state: &StateDict, max: u64) -> Vec<StateDict> {
    let mut seen = std::collections::HashSet::new();
    let mut shards = vec![StateDict::new()];
    let mut size = 0u64;
    for (k, t) in state.iter() {
        if !seen.insert(t.id()) {
            continue;
        }
        let bytes = (t.numel() * t.dtype().size_in_bytes()) as u64;
        if size + bytes > max && !shards.last().expect("one at least").is_empty() {
            shards.push(StateDict::new());
            size = 0;
        }
        size += bytes;
        shards.last_mut().expect("one at least").insert(k.to_string(), t.clone());
    }
    shards
}
