//! Text in, text out: a checkpoint directory's `tokenizer.json` through Hugging Face's
//! `tokenizers` crate (the library behind transformers' fast tokenizers, built here without
//! C code: its `fancy-regex` backend), so encoding and decoding are transformers' own.
//!
//! [`Tokenizer::encode`] is transformers' `tokenizer(text)["input_ids"]` (special tokens
//! added as the tokenizer's post-processor adds them: Llama's `<s>`, BERT's `[CLS]` and
//! `[SEP]`), [`Tokenizer::decode`] is `tokenizer.decode(ids)`, and
//! [`Tokenizer::decode_stream`] prints text as tokens arrive, a whole UTF-8 character at a
//! time (a byte-level token can end inside one). Ids outside the vocabulary are refused,
//! never skipped: the `tokenizers` crate's own decode drops them silently.
//!
//! ```
//! # fn main() -> nn_models::Result<()> {
//! # let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizers/gpt2");
//! use nn_models::tokenizer::Tokenizer;
//! let tok = Tokenizer::from_dir(&dir)?; // dir/tokenizer.json
//! let ids = tok.encode("It is a truth universally acknowledged");
//! assert_eq!(tok.decode(&ids), "It is a truth universally acknowledged");
//! // As a generation streams: whole characters only, however the bytes are split.
//! let mut stream = tok.decode_stream();
//! let mut text = String::new();
//! for id in tok.encode("café 🙂") {
//!     text += &stream.step(id)?.unwrap_or_default();
//! }
//! assert_eq!(text, "café 🙂");
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};

use tokenizers::{DecoderWrapper, ModelWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper};

use crate::error::{Error, Result};
use crate::pretrained::read_text;

/// A `tokenizer.json` larger than this is refused before it is read (Llama 3's, with a
/// 128k vocabulary, is 9 MB).
const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

/// A checkpoint's tokenizer: Hugging Face's `tokenizer.json`, as transformers'
/// `PreTrainedTokenizerFast` uses it.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
    eos: Option<i64>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size())
            .field("eos_token_id", &self.eos)
            .finish()
    }
}

impl Tokenizer {
    /// Reads `dir/tokenizer.json`, and the end-of-sequence token from
    /// `dir/tokenizer_config.json` (`eos_token`) when there is one.
    ///
    /// # Errors
    /// [`Error::Tokenizer`] naming the file: missing, not a regular file, too large, not
    /// valid JSON or not a tokenizer, or an `eos_token` the vocabulary lacks.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let mut tok = Self::from_file(dir.join("tokenizer.json"))?;
        let config = dir.join("tokenizer_config.json");
        if config.is_file() {
            let bad = |reason: String| Error::Tokenizer { path: config.clone(), reason };
            let text = read_text(&config, MAX_TOKENIZER_BYTES, "a tokenizer file", bad)?;
            // No key twice: serde_json would keep the last `eos_token` without a word.
            nn_core::serialization::check_unique_keys(&text).map_err(bad)?;
            let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
            // A plain string, or transformers' AddedToken object `{"content": "..."}`.
            let eos = &value["eos_token"];
            if let Some(name) = eos.as_str().or_else(|| eos["content"].as_str()) {
                let id = tok.inner.token_to_id(name).ok_or_else(|| {
                    bad(format!("`eos_token` is {name:?}, which is not in the vocabulary of tokenizer.json"))
                })?;
                tok.eos = Some(id as i64);
            }
        }
        Ok(tok)
    }

    /// Reads a `tokenizer.json` file.
    ///
    /// # Errors
    /// [`Error::Tokenizer`] naming the file, as for [`from_dir`](Self::from_dir).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let bad = |reason: String| Error::Tokenizer { path: path.clone(), reason };
        let text = read_text(&path, MAX_TOKENIZER_BYTES, "a tokenizer file", bad)?;
        let inner = tokenizers::Tokenizer::from_bytes(text.as_bytes()).map_err(|e| bad(short(&e.to_string())))?;
        Ok(Tokenizer { inner, path, eos: None })
    }

    /// The number of ids, added tokens included (transformers' `len(tokenizer)`).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The end-of-sequence token's id, from `tokenizer_config.json`.
    pub fn eos_token_id(&self) -> Option<i64> {
        self.eos
    }

    /// The id of one token of the vocabulary (`tokenizer.convert_tokens_to_ids`).
    pub fn token_to_id(&self, token: &str) -> Option<i64> {
        self.inner.token_to_id(token).map(i64::from)
    }

    /// `text`'s ids, special tokens added as transformers adds them (`tokenizer(text)`).
    ///
    /// # Panics
    /// When the tokenizer cannot encode the text (a model whose vocabulary lacks a
    /// character and has no unknown token); [`try_encode`](Self::try_encode) returns the
    /// error instead.
    pub fn encode(&self, text: &str) -> Vec<i64> {
        self.try_encode(text).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`encode`](Self::encode), returning the tokenizer's error.
    ///
    /// # Errors
    /// [`Error::Tokenizer`] with the `tokenizers` crate's reason.
    pub fn try_encode(&self, text: &str) -> Result<Vec<i64>> {
        let enc = self
            .inner
            .encode(text, true)
            .map_err(|e| Error::Tokenizer { path: self.path.clone(), reason: short(&e.to_string()) })?;
        Ok(enc.get_ids().iter().map(|&i| i as i64).collect())
    }

    /// The text of `ids`, special tokens included (transformers' `tokenizer.decode(ids)`).
    ///
    /// # Panics
    /// On an id outside the vocabulary (the `tokenizers` crate would drop it without a
    /// word); [`try_decode`](Self::try_decode) returns the error instead.
    pub fn decode(&self, ids: &[i64]) -> String {
        self.try_decode(ids).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`decode`](Self::decode), returning the error.
    ///
    /// # Errors
    /// [`Error::Input`] naming the first id outside the vocabulary; [`Error::Tokenizer`]
    /// for the decoder's own errors.
    pub fn try_decode(&self, ids: &[i64]) -> Result<String> {
        let ids = self.checked(ids)?;
        self.inner
            .decode(&ids, false)
            .map_err(|e| Error::Tokenizer { path: self.path.clone(), reason: short(&e.to_string()) })
    }

    /// A decoder for ids that arrive one at a time (transformers' `TextStreamer`): each
    /// [`step`](TextStream::step) returns the text that is complete so far, whole
    /// characters only.
    pub fn decode_stream(&self) -> TextStream<'_> {
        TextStream { inner: self.inner.decode_stream(false), tokenizer: self }
    }

    /// An error unless every id of this tokenizer has a row in a model's embedding of
    /// `model_vocab` rows (a model may have more rows than tokens, padded for speed; one
    /// with fewer would index past its table on the last ids).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] naming both sizes.
    pub fn check_vocab(&self, model_vocab: usize) -> Result<()> {
        let n = self.vocab_size();
        if n > model_vocab {
            return Err(Error::Tokenizer {
                path: self.path.clone(),
                reason: format!(
                    "the tokenizer has {n} ids and the model's embedding {model_vocab} rows: they are not one \
                     checkpoint's"
                ),
            });
        }
        Ok(())
    }

    fn checked(&self, ids: &[i64]) -> Result<Vec<u32>> {
        let n = self.vocab_size();
        ids.iter()
            .enumerate()
            .map(|(i, &id)| {
                u32::try_from(id).ok().filter(|&v| (v as usize) < n).ok_or_else(|| {
                    Error::Input(format!("decode: id {i} is {id}, outside the tokenizer's vocabulary of {n} ids"))
                })
            })
            .collect()
    }
}

/// Decodes ids one at a time ([`Tokenizer::decode_stream`]).
pub struct TextStream<'a> {
    inner: tokenizers::DecodeStream<
        'a,
        ModelWrapper,
        NormalizerWrapper,
        PreTokenizerWrapper,
        PostProcessorWrapper,
        DecoderWrapper,
    >,
    tokenizer: &'a Tokenizer,
}

impl TextStream<'_> {
    /// Feeds one id; returns the text it completes, if any (`None` while a character's
    /// bytes are still arriving).
    ///
    /// # Errors
    /// As [`Tokenizer::try_decode`].
    pub fn step(&mut self, id: i64) -> Result<Option<String>> {
        let id = self.tokenizer.checked(&[id])?[0];
        self.inner
            .step(id)
            .map_err(|e| Error::Tokenizer { path: self.tokenizer.path.clone(), reason: short(&e.to_string()) })
    }
}

/// At most 1,000 characters of a message (serde's errors quote the input).
fn short(s: &str) -> String {
    match s.char_indices().nth(1000) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}
