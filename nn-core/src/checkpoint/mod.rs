//! Training checkpoints: model, optimizer, scheduler, gradient scaler, counters and the RNG
//! state in one safetensors file (tensors under `model.` and `optimizer.`, everything else
//! as JSON in the header's metadata), saved atomically. Restoring all of it makes a resumed
//! run continue bit for bit like an uninterrupted one.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::amp::GradScalerState;
use crate::error::{Error, Result};
use crate::optim::{HyperParams, OptimizerState, SchedulerState};
use crate::random::RngState;
use crate::state_dict::StateDict;

mod extra;
mod restore;
pub use extra::Extra;

const META_KEY: &str = "nn.checkpoint";
/// Format 2 holds every scheduler's state (`schedulers`); format 1 held one (`scheduler`),
/// and is still read. A build that reads only format 1 refuses a format-2 file by its
/// version instead of dropping the schedulers it does not know.
const FORMAT_VERSION: u32 = 2;

pub use crate::optim::MAX_COUNTER;

/// One past the largest position of the ChaCha generator: 2^64 blocks of 16 words.
const RNG_WORD_POS_END: u128 = 1 << 68;

/// Everything needed to resume training.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// The model's state dict.
    pub model: StateDict,
    /// The optimizer's state, if any.
    pub optimizer: Option<OptimizerState>,
    /// The states of the schedulers that drive the optimizer, in the order they step: one
    /// for most runs, two for a warm-up chained with a decay (both must be restored: one
    /// left at step 0 would apply its first steps again to the restored rates).
    pub schedulers: Vec<SchedulerState>,
    /// Completed epochs.
    pub epoch: u64,
    /// Completed optimizer steps.
    pub step: u64,
    /// The global generator's state ([`crate::random::rng_state`]).
    pub rng: RngState,
    /// Free-form values the training loop wants back (its configuration, a best accuracy,
    /// a run name), as JSON holds them.
    pub extra: HashMap<String, Extra>,
    /// The gradient scaler's state, if the run uses one ([`with_scaler`](Checkpoint::with_scaler);
    /// restored by [`restore_with_scaler`](Checkpoint::restore_with_scaler)).
    pub scaler: Option<GradScalerState>,
}

#[derive(Serialize, Deserialize)]
struct Meta {
    format_version: u32,
    epoch: u64,
    step: u64,
    optimizer_lrs: Option<Vec<f64>>,
    /// [`OptimizerState::hyper_params`]; absent from checkpoints written before they were
    /// saved (those load, recording none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    optimizer_hyper_params: Vec<crate::optim::HyperParams>,
    /// Format 1's one scheduler state, `(last_epoch, base_lrs)`: read, never written.
    #[serde(default, skip_serializing)]
    scheduler: Option<(u64, Vec<f64>)>,
    /// Format 2's scheduler states.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    schedulers: Vec<SchedulerMeta>,
    rng_seed: String,
    rng_stream: u64,
    rng_word_pos: String,
    /// Numbers only in files written before [`Extra`]: those read as [`Extra::Float`].
    extra: HashMap<String, Extra>,
    /// Absent from checkpoints without a scaler, as from those written before scalers
    /// were saved: both load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scaler: Option<GradScalerState>,
}

/// One scheduler's state in the metadata.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SchedulerMeta {
    last_epoch: u64,
    base_lrs: Vec<f64>,
    #[serde(default, skip_serializing_if = "HyperParams::is_empty")]
    hyper_params: HyperParams,
}

/// The counters (at most [`MAX_COUNTER`]) and learning rates (finite, non-negative) of a
/// checkpoint: checked by `save`, so that it writes nothing `load` refuses, and by `load`.
fn check_counters_and_rates(
    epoch: u64,
    step: u64,
    optimizer_lrs: Option<&[f64]>,
    schedulers: &[SchedulerState],
) -> std::result::Result<(), String> {
    let counter = |name: &str, v: u64| match v > MAX_COUNTER {
        true => Err(format!("`{name}` is {v}, more than the {MAX_COUNTER} a run can count")),
        false => Ok(()),
    };
    let rates = |name: &str, lrs: &[f64]| match lrs.iter().enumerate().find(|(_, lr)| !(lr.is_finite() && **lr >= 0.0))
    {
        Some((i, lr)) => Err(format!("`{name}[{i}]` is {lr}; a learning rate is finite and non-negative")),
        None => Ok(()),
    };
    counter("epoch", epoch)?;
    counter("step", step)?;
    if let Some(lrs) = optimizer_lrs {
        rates("optimizer_lrs", lrs)?;
    }
    for (i, s) in schedulers.iter().enumerate() {
        counter(&format!("schedulers[{i}].last_epoch"), s.last_epoch)?;
        rates(&format!("schedulers[{i}].base_lrs"), &s.base_lrs)?;
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Checkpoint {
    /// A checkpoint of the current global RNG state with the given parts: the schedulers'
    /// states are `None`, `Some(state)` or a list of every scheduler's state, in the order
    /// they step (restore those with [`restore_all`](Checkpoint::restore_all)).
    pub fn new(
        model: StateDict,
        optimizer: Option<OptimizerState>,
        schedulers: impl IntoIterator<Item = SchedulerState>,
        epoch: u64,
        step: u64,
    ) -> Self {
        Checkpoint {
            model,
            optimizer,
            schedulers: schedulers.into_iter().collect(),
            epoch,
            step,
            rng: crate::random::rng_state(),
            extra: HashMap::new(),
            scaler: None,
        }
    }

    /// The same checkpoint holding a gradient scaler's state (`scaler.state_dict()`).
    pub fn with_scaler(mut self, scaler: GradScalerState) -> Self {
        self.scaler = Some(scaler);
        self
    }

    /// Writes the checkpoint atomically. What [`load`](Checkpoint::load) or
    /// [`restore`](Checkpoint::restore) would refuse is not written: such a file must not
    /// replace the last good checkpoint.
    ///
    /// # Errors
    /// As [`StateDict::save`]; [`Error::GradScalerState`] for a scaler state that
    /// [`load`](Checkpoint::load) would refuse, [`Error::OptimizerState`] for a
    /// hyper-parameter that is not finite; [`Error::Checkpoint`] for an `extra` value that
    /// is not (a diverged loss: JSON has no NaN), a learning rate that is not finite and
    /// non-negative (a schedule grown past `f64`'s range), a counter past [`MAX_COUNTER`],
    /// a generator position out of range, hyper-parameters for another number of groups
    /// than the learning rates, or an optimizer buffer holding inf or NaN (a diverged run)
    /// or a negative mean of squares. Nothing is written then.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        if let Some(scaler) = &self.scaler {
            scaler.check()?;
        }
        // JSON has no NaN or infinity (serde_json would write `null`, which `load` refuses).
        let hyper = self.optimizer.iter().flat_map(|o| o.hyper_params.iter().enumerate());
        for (i, h) in hyper {
            if let Some((k, v)) = h.iter().find(|(_, v)| !v.is_finite()) {
                return Err(Error::OptimizerState(format!(
                    "`hyper_params[{i}].{k}` is {v}; a hyper-parameter is finite"
                )));
            }
        }
        for s in &self.schedulers {
            if let Some((k, v)) = s.hyper_params.iter().find(|(_, v)| !v.is_finite()) {
                return Err(Error::SchedulerState {
                    key: format!("hyper_params.{k}"),
                    reason: format!("is {v}; a hyper-parameter is finite"),
                });
            }
        }
        let refuse = |reason: String| Error::Checkpoint {
            path: path.as_ref().to_path_buf(),
            reason: format!("{reason}; nothing was written (the previous checkpoint, if any, is kept)"),
        };
        if let Some((at, v)) = self.extra.iter().find_map(|(k, v)| v.first_non_finite(&format!("extra[\"{k}\"]"))) {
            return Err(refuse(format!("`{at}` is {v}, which the file's JSON metadata cannot hold")));
        }
        // What `load` and `restore` would refuse is not written: a learning rate a scheduler
        // grew past f64's range or one set negative, a counter past `MAX_COUNTER`, a
        // diverged optimizer state (NaN moments).
        let lrs = self.optimizer.as_ref().map(|o| o.lrs.as_slice());
        check_counters_and_rates(self.epoch, self.step, lrs, &self.schedulers).map_err(refuse)?;
        if self.rng.word_pos >= RNG_WORD_POS_END {
            return Err(refuse(format!("`rng.word_pos` {} is not a generator position", self.rng.word_pos)));
        }
        if let Some(o) = &self.optimizer {
            if !o.hyper_params.is_empty() && o.hyper_params.len() != o.lrs.len() {
                return Err(refuse(format!(
                    "the optimizer state has {} parameter groups' hyper-parameters and {} learning rates",
                    o.hyper_params.len(),
                    o.lrs.len()
                )));
            }
            for (k, t) in o.tensors.iter().filter(|(_, t)| t.dtype().is_float() && t.device() != crate::Device::Meta) {
                // As `restore` reads them: finite, and a mean of squares (`*_sq`) not negative.
                let second_moment = k.ends_with("_sq");
                if let Some(v) = t.to_vec_f64().into_iter().find(|v| !v.is_finite() || (second_moment && *v < 0.0)) {
                    return Err(refuse(format!(
                        "`optimizer.{k}` holds {v}: the optimizer's state has diverged, and restoring it would be \
                         refused"
                    )));
                }
            }
        }
        // The model's versions and extra states go with its entries, under `model`.
        let mut all = self.model.add_prefix("model.");
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
            optimizer_hyper_params: self.optimizer.as_ref().map(|o| o.hyper_params.clone()).unwrap_or_default(),
            scheduler: None,
            schedulers: self
                .schedulers
                .iter()
                .map(|s| SchedulerMeta {
                    last_epoch: s.last_epoch,
                    base_lrs: s.base_lrs.clone(),
                    hyper_params: s.hyper_params.clone(),
                })
                .collect(),
            rng_seed: hex(&self.rng.seed),
            rng_stream: self.rng.stream,
            rng_word_pos: self.rng.word_pos.to_string(),
            extra: self.extra.clone(),
            scaler: self.scaler,
        };
        let json = serde_json::to_string(&meta).expect("plain data serialises");
        all.save_with_metadata(path, Some(HashMap::from([(META_KEY.to_string(), json)])))
    }

    /// Reads a checkpoint written by [`save`](Checkpoint::save). Every field of the
    /// metadata is checked (the counters against [`MAX_COUNTER`], learning rates finite
    /// and non-negative, the generator state well-formed, the scaler's state as
    /// [`GradScalerState::check`] checks it); what depends on the model and the optimizer
    /// is checked by [`restore`](Checkpoint::restore).
    ///
    /// # Errors
    /// As [`StateDict::load`], and [`Error::Checkpoint`] naming the field when the
    /// metadata is missing or malformed.
    pub fn load(path: impl AsRef<Path>) -> Result<Checkpoint> {
        let path = path.as_ref();
        let bad = |reason: String| Error::Checkpoint { path: path.to_path_buf(), reason };
        let (all, meta) = StateDict::load_with_metadata(path)?;
        let json =
            meta.get(META_KEY).ok_or_else(|| bad(format!("no `{META_KEY}` metadata: not a training checkpoint")))?;
        crate::serialization::check_unique_keys(json).map_err(|e| bad(format!("metadata: {e}")))?;
        let m: Meta = serde_json::from_str(json).map_err(|e| bad(format!("metadata: {e}")))?;
        match (m.format_version, &m.scheduler, m.schedulers.is_empty()) {
            (1, _, true) | (2, None, _) => {}
            (1, _, false) => {
                return Err(bad("`schedulers` in a format-1 file (format 1 holds one `scheduler`)".into()))
            }
            (2, Some(_), _) => {
                return Err(bad("`scheduler` in a format-2 file (format 2 holds a list, `schedulers`)".into()))
            }
            (v, ..) => return Err(bad(format!("format version {v} (this build reads 1 and {FORMAT_VERSION})"))),
        }
        match (&m.optimizer_lrs, m.optimizer_hyper_params.len()) {
            (_, 0) => {}
            (None, _) => return Err(bad("optimizer hyper-parameters but no `optimizer_lrs`".into())),
            (Some(lrs), n) if lrs.len() != n => {
                return Err(bad(format!(
                    "`optimizer_hyper_params` has {n} parameter groups, `optimizer_lrs` {}",
                    lrs.len()
                )))
            }
            _ => {}
        }
        // Format 1's one state, with no hyper-parameters (it recorded none), or format 2's.
        let schedulers: Vec<SchedulerState> = match m.scheduler {
            Some((last_epoch, base_lrs)) => vec![SchedulerState { last_epoch, base_lrs, ..Default::default() }],
            None => m
                .schedulers
                .into_iter()
                .map(|s| SchedulerState {
                    last_epoch: s.last_epoch,
                    base_lrs: s.base_lrs,
                    hyper_params: s.hyper_params,
                })
                .collect(),
        };
        check_counters_and_rates(m.epoch, m.step, m.optimizer_lrs.as_deref(), &schedulers).map_err(bad)?;
        if let Some(scaler) = &m.scaler {
            scaler.check().map_err(|e| match e {
                Error::GradScalerState { key, reason } => bad(format!("`scaler.{key}` {reason}")),
                other => other,
            })?;
        }
        let digits = m.rng_seed.as_bytes();
        if digits.len() != 64 || !digits.iter().all(u8::is_ascii_hexdigit) {
            return Err(bad(format!("`rng_seed` must be 64 hex digits, got {:?}", Shortened(&m.rng_seed))));
        }
        let mut seed = [0u8; 32];
        for (b, pair) in seed.iter_mut().zip(digits.chunks_exact(2)) {
            let hex = |d: u8| (d as char).to_digit(16).expect("checked hex digit") as u8;
            *b = hex(pair[0]) << 4 | hex(pair[1]);
        }
        let word_pos = m.rng_word_pos.parse::<u128>().ok().filter(|&w| w < RNG_WORD_POS_END).ok_or_else(|| {
            bad(format!("`rng_word_pos` {:?} is not a generator position", Shortened(&m.rng_word_pos)))
        })?;
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
        for (path, v) in all.versions() {
            let Some(path) = (if path == "model" { Some("") } else { path.strip_prefix("model.") }) else {
                return Err(bad(format!("a layout version for `{path}`, which is not under `model`")));
            };
            model.set_version(path, v);
        }
        for (k, state) in all.extra_states() {
            let Some(key) = k.strip_prefix("model.") else {
                return Err(bad(format!("an extra state `{k}`, which is not under `model.`")));
            };
            model.insert_extra_state(key.to_string(), state.clone());
        }
        if m.optimizer_lrs.is_none() && !opt.is_empty() {
            let first = opt.keys().next().expect("non-empty");
            return Err(bad(format!("optimizer entries (`optimizer.{first}`, ...) but no `optimizer_lrs`")));
        }
        Ok(Checkpoint {
            model,
            optimizer: m.optimizer_lrs.map(|lrs| OptimizerState {
                tensors: opt,
                lrs,
                hyper_params: m.optimizer_hyper_params,
            }),
            schedulers,
            epoch: m.epoch,
            step: m.step,
            rng: RngState { seed, stream: m.rng_stream, word_pos },
            extra: m.extra,
            scaler: m.scaler,
        })
    }
}

/// A string as `{:?}` shows it, cut to a readable length (metadata fields can be huge).
struct Shortened<'a>(&'a str);

impl std::fmt::Debug for Shortened<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MAX: usize = 80;
        match self.0.char_indices().nth(MAX) {
            Some((end, _)) => write!(f, "{:?}... ({} bytes)", &self.0[..end], self.0.len()),
            None => write!(f, "{:?}", self.0),
        }
    }
}
