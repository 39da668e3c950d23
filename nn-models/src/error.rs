//! The crate's error: every failure names the file, field or limit involved.

use std::path::PathBuf;

/// What went wrong while building, loading or running a reference model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file of the checkpoint directory could not be read.
    #[error("cannot read `{}`: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// `config.json` is not valid JSON, lacks a field, has a field this model does not
    /// know, or holds a value the model cannot take.
    #[error("`{}`: {reason}", path.display())]
    Config {
        /// The config file.
        path: PathBuf,
        /// What is wrong, naming the field.
        reason: String,
    },
    /// The checkpoint is of an architecture this type does not implement.
    #[error("`{}`: {found} is not an architecture of `{expected}` (this type loads {supported})", path.display())]
    Architecture {
        /// The config file.
        path: PathBuf,
        /// What the config names (`model_type` or `architectures`).
        found: String,
        /// The Rust type asked to load it.
        expected: &'static str,
        /// What it loads.
        supported: String,
    },
    /// The directory has no weights file.
    #[error("`{}` has no weights: expected `model.safetensors`, `model.safetensors.index.json`, `pytorch_model.bin` or `pytorch_model.bin.index.json` there", dir.display())]
    MissingWeights {
        /// The checkpoint directory.
        dir: PathBuf,
    },
    /// A sharded checkpoint's index does not agree with its shards (a shard missing, outside
    /// the directory, holding a key the index maps elsewhere, lacking one it maps there, or
    /// a stray shard beside them); nothing was loaded.
    #[error("`{}`: {reason}", path.display())]
    Shards {
        /// The index file.
        path: PathBuf,
        /// What is wrong, naming the shard and the key.
        reason: String,
    },
    /// A weights file is corrupt, hostile or of a format not read ([`nn_core::Error`]
    /// names what is wrong); nothing was loaded.
    #[error("cannot load `{}`: {source}", path.display())]
    WeightsFile {
        /// The weights file.
        path: PathBuf,
        /// The loader's error.
        #[source]
        source: Box<nn_core::Error>,
    },
    /// The weights do not fit the model the config describes (missing, unexpected or
    /// mis-shaped keys, all named); nothing was kept.
    #[error("`{}` does not fit the model built from its config.json: {source}", path.display())]
    Weights {
        /// The weights file.
        path: PathBuf,
        /// The load error, naming every key.
        #[source]
        source: Box<nn_core::Error>,
    },
    /// A tokenizer file that cannot be read or used, or a tokenizer that does not fit the
    /// model.
    #[error("`{}`: {reason}", path.display())]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A prompt or a generation longer than the model's positions.
    #[error("{what} of {len} tokens is longer than the model's {limit} positions (`{field}` in config.json)")]
    TooLong {
        /// What was too long (`the prompt`, `prompt plus max_new_tokens`).
        what: &'static str,
        /// Its length.
        len: usize,
        /// The model's limit.
        limit: usize,
        /// The config field that sets it.
        field: &'static str,
    },
    /// An input that does not fit the model (a shape, a dtype, a token id).
    #[error("{0}")]
    Input(String),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
