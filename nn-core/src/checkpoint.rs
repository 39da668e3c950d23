//! Training checkpoints: model, optimizer, scheduler, counters and the RNG state in one
//! safetensors file (tensors under `model.` and `optimizer.`, everything else as JSON in
//! the header's metadata), saved atomically. Restoring all of it makes a resumed run
//! continue bit for bit like an uninterrupted one.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::optim::{OptimizerState, SchedulerState};
use crate::random::RngState;
use crate::state_dict::StateDict;

const META_KEY: &str = "nn.checkpoint";
const FORMAT_VERSION: u32 = 1;

/// Everything needed to resume training.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// The model's state dict.
    pub model: StateDict,
    /// The optimizer's state, if any.
    pub optimizer: Option<OptimizerState>,
    /// The scheduler's state, if any.
    pub scheduler: Option<SchedulerState>,
    /// Completed epochs.
    pub epoch: u64,
    /// Completed optimizer steps.
    pub step: u64,
    /// The global generator's state ([`crate::random::rng_state`]).
    pub rng: RngState,
    /// Free-form numbers the training loop wants back (best accuracy, ...).
    pub extra: HashMap<String, f64>,
}

#[derive(Serialize, Deserialize)]
struct Meta {
    format_version: u32,
    epoch: u64,
    step: u64,
    optimizer_lrs: Option<Vec<f64>>,
    scheduler: Option<(u64, Vec<f64>)>,
    rng_seed: String,
    rng_stream: u64,
    rng_word_pos: String,
    extra: HashMap<String, f64>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Checkpoint {
    /// A checkpoint of the current global RNG state with the given parts.
    pub fn new(
        model: StateDict,
        optimizer: Option<OptimizerState>,
        scheduler: Option<SchedulerState>,
        epoch: u64,
        step: u64,
    ) -> Self {
        Checkpoint { model, optimizer, scheduler, epoch, step, rng: crate::random::rng_state(), extra: HashMap::new() }
    }

    /// Writes the checkpoint atomically.
    ///
    /// # Errors
    /// As [`StateDict::save`].
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let mut all = StateDict::default();
        for (k, t) in self.model.iter() {
            all.insert(format!("model.{k}"), t.clone());
        }
        if let Some(o) = &self.optimizer {
            for (k, t) in o.tensors.iter() {
                all.insert(format!("optimizer.{k}"), t.clone());
            }
        }
        let meta = Meta {
            format_version: FORMAT_VERSION,
            epoch: self.epoch,
            step: self.step,
            optimizer_lrs: self.optimizer.as_ref().map(|o| o.lrs.clone()),
            scheduler: self.scheduler.as_ref().map(|s| (s.last_epoch, s.base_lrs.clone())),
            rng_seed: hex(&self.rng.seed),
            rng_stream: self.rng.stream,
            rng_word_pos: self.rng.word_pos.to_string(),
            extra: self.extra.clone(),
        };
        let json = serde_json::to_string(&meta).expect("plain data serialises");
        all.save_with_metadata(path, Some(HashMap::from([(META_KEY.to_string(), json)])))
    }

    /// Reads a checkpoint written by [`save`](Checkpoint::save).
    ///
    /// # Errors
    /// As [`StateDict::load`], and [`Error::Checkpoint`] when the metadata is missing or
    /// malformed.
    pub fn load(path: impl AsRef<Path>) -> Result<Checkpoint> {
        let path = path.as_ref();
        let bad = |reason: String| Error::Checkpoint { path: path.to_path_buf(), reason };
        let (all, meta) = StateDict::load_with_metadata(path)?;
        let json =
            meta.get(META_KEY).ok_or_else(|| bad(format!("no `{META_KEY}` metadata: not a training checkpoint")))?;
        let m: Meta = serde_json::from_str(json).map_err(|e| bad(format!("metadata: {e}")))?;
        if m.format_version != FORMAT_VERSION {
            return Err(bad(format!("format version {} (this build reads {FORMAT_VERSION})", m.format_version)));
        }
        let mut seed = [0u8; 32];
        if m.rng_seed.len() != 64 {
            return Err(bad("rng seed must be 64 hex digits".into()));
        }
        for (i, b) in seed.iter_mut().enumerate() {
            *b = u8::from_str_radix(&m.rng_seed[2 * i..2 * i + 2], 16).map_err(|e| bad(format!("rng seed: {e}")))?;
        }
        let word_pos = m.rng_word_pos.parse::<u128>().map_err(|e| bad(format!("rng position: {e}")))?;
        let mut model = StateDict::default();
        let mut opt = StateDict::default();
        for (k, t) in all.iter() {
            if let Some(k) = k.strip_prefix("model.") {
                model.insert(k.to_string(), t.clone());
            } else if let Some(k) = k.strip_prefix("optimizer.") {
                opt.insert(k.to_string(), t.clone());
            } else {
                return Err(bad(format!("unexpected entry `{k}`")));
            }
        }
        Ok(Checkpoint {
            model,
            optimizer: m.optimizer_lrs.map(|lrs| OptimizerState { tensors: opt, lrs }),
            scheduler: m.scheduler.map(|(last_epoch, base_lrs)| SchedulerState { last_epoch, base_lrs }),
            epoch: m.epoch,
            step: m.step,
            rng: RngState { seed, stream: m.rng_stream, word_pos },
            extra: m.extra,
        })
    }

    /// Makes the global generator continue from the checkpoint.
    pub fn restore_rng(&self) {
        crate::random::set_rng_state(&self.rng);
    }
}
