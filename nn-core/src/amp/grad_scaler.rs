//! [`GradScaler`]: dynamic loss scaling (PyTorch's `torch.amp.GradScaler`), its settings,
//! its resumable state, and the per-iteration record that catches misuse.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::autograd::no_grad;
use crate::error::{Error, Result};
use crate::module::Parameter;
use crate::optim::Optimizer;
use crate::tensor::{Tensor, TensorId};

/// The smallest scale a scaler holds: the smallest normal `f32`. Its reciprocal, the factor
/// [`GradScaler::unscale_`] multiplies gradients by, is still a finite `f32` (below it the
/// reciprocal overflows and every unscaled gradient would be inf or NaN).
const MIN_SCALE: f32 = f32::MIN_POSITIVE;

/// Settings of a [`GradScaler`]: PyTorch's constructor arguments, with its defaults.
///
/// ```
/// use nn_core::amp::{GradScaler, GradScalerConfig};
/// let c = GradScalerConfig::default();
/// assert_eq!((c.init_scale, c.growth_factor, c.backoff_factor, c.growth_interval, c.enabled), (65536.0, 2.0, 0.5, 2000, true));
/// let scaler = GradScaler::with_config(GradScalerConfig { init_scale: 1024.0, growth_interval: 100, ..Default::default() });
/// assert_eq!(scaler.get_scale(), 1024.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradScalerConfig {
    /// The scale to start from (default 2^16 = 65536). Held as an `f32`, as PyTorch holds
    /// it: it must be a finite, positive, normal `f32`.
    pub init_scale: f64,
    /// Multiplies the scale after `growth_interval` consecutive iterations without inf or
    /// NaN gradients (default 2; finite and greater than 1).
    pub growth_factor: f64,
    /// Multiplies the scale after an iteration whose gradients held inf or NaN (default
    /// 0.5; in (0, 1)).
    pub backoff_factor: f64,
    /// Consecutive clean iterations before the scale grows (default 2000; at least 1).
    pub growth_interval: u64,
    /// When false, the scaler passes everything through: [`GradScaler::scale`] returns the
    /// loss, [`GradScaler::step`] steps, the rest does nothing (default true). Lets one
    /// training loop run with and without mixed precision.
    pub enabled: bool,
}

impl Default for GradScalerConfig {
    fn default() -> Self {
        GradScalerConfig {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            enabled: true,
        }
    }
}

/// What a resumed run needs of a [`GradScaler`], under PyTorch's `state_dict()` key names
/// (`scale`, `growth_factor`, `backoff_factor`, `growth_interval`, `_growth_tracker`): the
/// form it takes in a [`Checkpoint`](crate::checkpoint::Checkpoint)'s metadata.
///
/// ```
/// use nn_core::amp::{GradScaler, GradScalerState};
/// let state = GradScaler::new().state_dict();
/// assert_eq!(state, GradScalerState { scale: 65536.0, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: 2000, growth_tracker: 0 });
/// let json = serde_json::to_string(&state).unwrap();
/// assert_eq!(json, r#"{"scale":65536.0,"growth_factor":2.0,"backoff_factor":0.5,"growth_interval":2000,"_growth_tracker":0}"#);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GradScalerState {
    /// The current scale.
    pub scale: f64,
    /// See [`GradScalerConfig::growth_factor`].
    pub growth_factor: f64,
    /// See [`GradScalerConfig::backoff_factor`].
    pub backoff_factor: f64,
    /// See [`GradScalerConfig::growth_interval`].
    pub growth_interval: u64,
    /// Consecutive clean iterations since the scale last changed (PyTorch's
    /// `_growth_tracker`): always less than `growth_interval`.
    #[serde(rename = "_growth_tracker")]
    pub growth_tracker: u64,
}

impl GradScalerState {
    /// Checks that a scaler can hold this state: the settings as [`GradScalerConfig`]
    /// requires them, and a growth tracker below the growth interval (one at or past it
    /// would never reach the interval again, and the scale would never grow).
    ///
    /// ```
    /// use nn_core::amp::GradScaler;
    /// let mut state = GradScaler::new().state_dict();
    /// state.scale = f64::NAN;
    /// let e = state.check().unwrap_err();
    /// assert!(e.to_string().starts_with("grad scaler state: `scale` is NaN"), "{e}");
    /// ```
    ///
    /// # Errors
    /// [`Error::GradScalerState`] naming the first offending field.
    pub fn check(&self) -> Result<()> {
        check_settings("scale", self.scale, self.growth_factor, self.backoff_factor, self.growth_interval)
            .map_err(|(key, reason)| Error::GradScalerState { key, reason })?;
        if self.growth_tracker >= self.growth_interval {
            return Err(Error::GradScalerState {
                key: "_growth_tracker",
                reason: format!(
                    "is {}; it counts clean iterations since the scale last changed, so it is less than \
                     `growth_interval` ({})",
                    self.growth_tracker, self.growth_interval
                ),
            });
        }
        Ok(())
    }
}

/// Why `v` cannot be a scale, if it cannot.
fn scale_problem(v: f64) -> Option<String> {
    // Rounded as PyTorch rounds it into its float32 scale tensor.
    let s = v as f32;
    (!(s.is_finite() && s >= MIN_SCALE))
        .then(|| format!("is {v:?}; a scale is a finite positive normal f32 (from {MIN_SCALE:e} to {:e})", f32::MAX))
}

/// The first invalid setting among those a config and a state share, as `(key, reason)`.
fn check_settings(
    scale_key: &'static str,
    scale: f64,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: u64,
) -> std::result::Result<(), (&'static str, String)> {
    if let Some(reason) = scale_problem(scale) {
        return Err((scale_key, reason));
    }
    if !(growth_factor.is_finite() && growth_factor > 1.0) {
        return Err(("growth_factor", format!("is {growth_factor:?}; it must be finite and greater than 1")));
    }
    if !(backoff_factor > 0.0 && backoff_factor < 1.0) {
        return Err(("backoff_factor", format!("is {backoff_factor:?}; it must be in (0, 1)")));
    }
    if growth_interval == 0 {
        return Err(("growth_interval", "is 0; it must be at least 1".to_string()));
    }
    Ok(())
}

/// What [`GradScaler::step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// Every gradient was finite (or the scaler is disabled): `optimizer.step()` ran.
    Stepped,
    /// A gradient held inf or NaN: `optimizer.step()` did not run, and the parameters and
    /// the optimizer's state are as they were.
    Skipped,
}

impl StepOutcome {
    /// True for [`StepOutcome::Stepped`].
    pub fn stepped(self) -> bool {
        self == StepOutcome::Stepped
    }
}

/// What `unscale_` found in one parameter's gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    /// The parameter had no gradient.
    NoGrad,
    /// Every value was finite.
    Finite,
    /// Some value was inf or NaN.
    NonFinite,
}

/// The record of one iteration (from one `update()` to the next), keyed by parameter.
#[derive(Clone, Debug, Default, PartialEq)]
struct Iteration {
    /// Each parameter whose gradient was unscaled (or found absent), and what was found.
    unscaled: HashMap<TensorId, Check>,
    /// Each parameter of an optimizer [`GradScaler::step`] was called for.
    stepped: HashSet<TensorId>,
}

/// Dynamic loss scaling (PyTorch's `torch.amp.GradScaler`).
///
/// In half precision, small gradients flush to zero. The scaler multiplies the loss by a
/// large factor before `backward()` ([`scale`](GradScaler::scale)), so the gradients come
/// out scaled by it too; divides them back before the optimizer uses them
/// ([`unscale_`](GradScaler::unscale_), run by [`step`](GradScaler::step) if not called
/// earlier); and skips the optimizer step of an iteration whose gradients overflowed to inf
/// or NaN. [`update`](GradScaler::update) then adapts the factor: multiplied by
/// `backoff_factor` after an overflow, by `growth_factor` after `growth_interval`
/// consecutive clean iterations. The defaults are PyTorch's (see [`GradScalerConfig`]).
///
/// ```
/// use nn_core::amp::{GradScaler, StepOutcome};
/// use nn_core::optim::{clip_grad_norm_, Adam, AdamConfig, Optimizer};
/// use nn_core::{Parameter, Tensor};
///
/// let w = Parameter::new(Tensor::from_vec(vec![1.0, -2.0], &[2]));
/// let mut opt = Adam::new(vec![w.clone()], AdamConfig::default());
/// let mut scaler = GradScaler::new();
/// let x = Tensor::from_vec(vec![3.0, 4.0], &[2]);
///
/// opt.zero_grad();
/// let loss = w.mul(&x).sum();
/// scaler.scale(&loss).backward(); // gradients scaled by 65536
/// assert_eq!(w.grad().unwrap().to_vec(), vec![3.0 * 65536.0, 4.0 * 65536.0]);
/// scaler.unscale_(&mut opt); // only needed to look at or clip the true gradients
/// assert_eq!(w.grad().unwrap().to_vec(), vec![3.0, 4.0]);
/// clip_grad_norm_(&opt.parameters(), 1.0);
/// assert_eq!(scaler.step(&mut opt), StepOutcome::Stepped); // does not unscale again
/// scaler.update();
/// assert_eq!(scaler.get_scale(), 65536.0);
///
/// // An overflowed gradient: the step is skipped and the scale backs off.
/// let before = w.to_vec();
/// opt.zero_grad();
/// scaler.scale(&w.mul(&Tensor::from_vec(vec![f32::INFINITY, 1.0], &[2])).sum()).backward();
/// assert_eq!(scaler.step(&mut opt), StepOutcome::Skipped);
/// scaler.update();
/// assert_eq!((w.to_vec(), scaler.get_scale()), (before, 32768.0));
/// ```
///
/// # One record per iteration, keyed by parameter
///
/// Between two `update()` calls the scaler records, as PyTorch does per optimizer, which
/// gradients were unscaled (and whether they held inf or NaN) and which optimizers
/// stepped. PyTorch keys that record by `id(optimizer)`. Here it is keyed by the
/// optimizer's parameters ([`Optimizer::named_parameters`], by [`TensorId`], which is
/// never reused): an address would change when the optimizer moves, and the parameters
/// are what the checks are about. Several optimizers in one iteration work as in PyTorch
/// (each step is skipped on its own optimizer's gradients; `update()` backs off when any
/// had inf or NaN), and a gradient cannot be unscaled twice even through two optimizers
/// that share its parameter.
///
/// # Misuse
///
/// Calls out of order are bugs in the training loop and panic with PyTorch's message
/// and the parameter involved, changing nothing: `unscale_` twice for one optimizer, or
/// after its `step`, before the next `update()`; `step` twice for one optimizer before
/// `update()`; `step` for an optimizer none of whose parameters has a gradient; `update()`
/// with nothing recorded since the last one. Values from outside (settings, states,
/// [`update_with`](GradScaler::update_with)'s scale) are checked and refused with an
/// [`Error`], changing nothing.
///
/// # Where it differs from PyTorch
///
/// - A backoff that would take the scale below the smallest normal `f32` (every
///   gradient has been inf or NaN for over a hundred iterations: the loss itself is
///   broken) panics. PyTorch goes on to a zero scale and silently skips every step.
/// - Disabled, [`state_dict`](GradScaler::state_dict) returns the settings it holds
///   (PyTorch: an empty dict) and [`load_state_dict`](GradScaler::load_state_dict) checks
///   and keeps the state (PyTorch: ignores it).
/// - `unscale_` checks the gradients for inf and NaN after dividing them by the scale,
///   where PyTorch checks before: with a scale below 1, a finite gradient can overflow in
///   the division, and PyTorch's step would apply the inf; here the step is skipped.
/// - `unscale_` replaces each gradient (as [`clip_grad_norm_`](crate::optim::clip_grad_norm_)
///   does) where PyTorch writes into it: `p.grad()` after it sees the unscaled values, a
///   gradient handle taken before it keeps the scaled ones.
#[derive(Clone, Debug, PartialEq)]
pub struct GradScaler {
    enabled: bool,
    /// An `f32`, as PyTorch's float32 scale tensor: growth and backoff round as there.
    scale: f32,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: u64,
    growth_tracker: u64,
    iteration: Iteration,
}

impl Default for GradScaler {
    fn default() -> Self {
        GradScaler::new()
    }
}

impl GradScaler {
    /// An enabled scaler with PyTorch's defaults ([`GradScalerConfig::default`]).
    pub fn new() -> Self {
        GradScaler::with_config(GradScalerConfig::default())
    }

    /// A scaler with the given settings.
    ///
    /// # Panics
    /// Where [`try_with_config`](GradScaler::try_with_config) returns an error, with its
    /// message.
    #[track_caller]
    pub fn with_config(config: GradScalerConfig) -> Self {
        GradScaler::try_with_config(config).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`with_config`](GradScaler::with_config), returning an error instead of
    /// panicking. The settings are checked whether or not the scaler is enabled.
    ///
    /// ```
    /// use nn_core::amp::{GradScaler, GradScalerConfig};
    /// let e = GradScaler::try_with_config(GradScalerConfig { growth_factor: 1.0, ..Default::default() }).unwrap_err();
    /// assert_eq!(e.to_string(), "GradScaler: `growth_factor` is 1.0; it must be finite and greater than 1");
    /// ```
    ///
    /// # Errors
    /// [`Error::GradScalerConfig`] naming the first invalid setting: an `init_scale` that is
    /// not a finite positive normal `f32`, a `growth_factor` not finite and above 1, a
    /// `backoff_factor` outside (0, 1), a `growth_interval` of 0.
    pub fn try_with_config(config: GradScalerConfig) -> Result<Self> {
        let GradScalerConfig { init_scale, growth_factor, backoff_factor, growth_interval, enabled } = config;
        check_settings("init_scale", init_scale, growth_factor, backoff_factor, growth_interval)
            .map_err(|(key, reason)| Error::GradScalerConfig { key, reason })?;
        Ok(GradScaler {
            enabled,
            scale: init_scale as f32,
            growth_factor,
            backoff_factor,
            growth_interval,
            growth_tracker: 0,
            iteration: Iteration::default(),
        })
    }

    /// Whether the scaler scales (false: a pass-through, see [`GradScalerConfig::enabled`]).
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// The current scale, or 1 when the scaler is disabled (PyTorch's `get_scale()`).
    pub fn get_scale(&self) -> f64 {
        if self.enabled {
            f64::from(self.scale)
        } else {
            1.0
        }
    }

    /// The same as [`get_scale`](GradScaler::get_scale).
    pub fn scale_factor(&self) -> f64 {
        self.get_scale()
    }

    /// `loss * scale`, to call `backward()` on: every gradient it produces is scaled by the
    /// same factor. Any shape and floating dtype; the result has the loss's. Disabled, the
    /// loss itself (the same tensor).
    ///
    /// ```
    /// use nn_core::amp::{GradScaler, GradScalerConfig};
    /// use nn_core::Tensor;
    /// let loss = Tensor::scalar(0.25);
    /// assert_eq!(GradScaler::new().scale(&loss).item(), 16384.0);
    /// let off = GradScaler::with_config(GradScalerConfig { enabled: false, ..Default::default() });
    /// assert_eq!(off.scale(&loss).id(), loss.id());
    /// ```
    pub fn scale(&self, loss: &Tensor) -> Tensor {
        if !self.enabled {
            return loss.clone();
        }
        loss * f64::from(self.scale)
    }

    /// Divides the gradient of each of `optimizer`'s parameters by the scale and records
    /// whether any holds inf or NaN after the division (PyTorch checks before it; see
    /// "Where it differs from PyTorch" on [`GradScaler`]). Call it
    /// before anything that needs the true gradients, such as clipping; [`step`](GradScaler::step)
    /// then does not unscale again. Parameters without a gradient are skipped. Disabled, it
    /// does nothing.
    ///
    /// The gradients are multiplied by `1 / scale` rounded to `f32` (PyTorch's
    /// `scale.double().reciprocal().float()`): exact for the powers of two the scale is
    /// under the default settings.
    ///
    /// # Panics
    /// Changing nothing: when called a second time for (a parameter of) this optimizer
    /// since the last [`update`](GradScaler::update), or after [`step`](GradScaler::step)
    /// (PyTorch's "unscale_() has already been called on this optimizer since the last
    /// update()" and "unscale_() is being called after step()"); when a gradient is `f16`
    /// or `bf16` (PyTorch's "Attempting to unscale FP16 gradients": keep the parameters the
    /// optimizer updates in `f32`).
    #[track_caller]
    pub fn unscale_(&mut self, optimizer: &mut dyn Optimizer) {
        if !self.enabled {
            return;
        }
        self.unscale_params(&optimizer.named_parameters(), "unscale_");
    }

    /// [`unscale_`](GradScaler::unscale_), then lets `combine` decide, from whether this
    /// process found inf or NaN in the optimizer's gradients, whether the iteration
    /// overflowed: when it says so, [`step`](GradScaler::step) skips and
    /// [`update`](GradScaler::update) backs off as if this process had found one. An
    /// optimizer whose gradients are split over processes (FSDP's shards, ZeRO with sharded
    /// gradients) passes the finding through an all-reduce, so that every process skips the
    /// same steps and keeps the same scale (PyTorch's `ShardedGradScaler`;
    /// `nn_distributed::ShardedGradScaler` does this). Returns the combined finding.
    /// Disabled, it does nothing and returns `false` (without calling `combine`).
    ///
    /// ```
    /// use nn_core::amp::GradScaler;
    /// use nn_core::optim::{Sgd, SgdConfig};
    /// use nn_core::{Parameter, Tensor};
    /// let w = Parameter::new(Tensor::ones(&[1]));
    /// let mut opt = Sgd::new(vec![w.clone()], SgdConfig::default());
    /// let mut scaler = GradScaler::new();
    /// w.set_grad(Some(Tensor::ones(&[1]))); // finite here, but another process overflowed
    /// assert!(scaler.unscale_and_combine(&mut opt, &mut |local| local || true));
    /// assert!(!scaler.step(&mut opt).stepped());
    /// scaler.update();
    /// assert_eq!(scaler.get_scale(), 32768.0);
    /// ```
    ///
    /// # Panics
    /// As [`unscale_`](GradScaler::unscale_); and when `combine` answers `false` for a
    /// process that found inf or NaN (a combination must keep an overflow).
    #[track_caller]
    pub fn unscale_and_combine(
        &mut self,
        optimizer: &mut dyn Optimizer,
        combine: &mut dyn FnMut(bool) -> bool,
    ) -> bool {
        if !self.enabled {
            return false;
        }
        let params = optimizer.named_parameters();
        self.unscale_params(&params, "unscale_and_combine");
        let local = params.iter().any(|(_, p)| self.iteration.unscaled[&p.id()] == Check::NonFinite);
        let combined = combine(local);
        assert!(
            combined || !local,
            "GradScaler::unscale_and_combine: this process found inf or NaN, but the combination says none was found"
        );
        if combined && !local {
            for (_, p) in &params {
                let check = self.iteration.unscaled.get_mut(&p.id()).expect("unscaled above");
                if *check == Check::Finite {
                    *check = Check::NonFinite;
                }
            }
        }
        combined
    }

    #[track_caller]
    fn unscale_params(&mut self, params: &[(String, Parameter)], caller: &str) {
        if let Some((name, _)) = params.iter().find(|(_, p)| self.iteration.stepped.contains(&p.id())) {
            panic!(
                "GradScaler::{caller}: unscale_() is being called after step() (parameter `{name}` was stepped since \
                 the last update())"
            );
        }
        if let Some((name, _)) = params.iter().find(|(_, p)| self.iteration.unscaled.contains_key(&p.id())) {
            panic!(
                "GradScaler::{caller}: unscale_() has already been called on this optimizer since the last update() \
                 (the gradient of `{name}` is unscaled already)"
            );
        }
        let grads: Vec<Option<Tensor>> = params.iter().map(|(_, p)| p.grad()).collect();
        for ((name, _), g) in params.iter().zip(&grads) {
            if let Some(g) = g.as_ref().filter(|g| g.dtype().is_half()) {
                panic!(
                    "GradScaler::{caller}: attempting to unscale {} gradients (`{name}`): the parameters an optimizer \
                     updates must be f32 or f64",
                    g.dtype()
                );
            }
        }
        let inv = f64::from((1.0 / f64::from(self.scale)) as f32);
        for ((_, p), g) in params.iter().zip(grads) {
            // Two entries for one parameter (an optimizer that lists it twice): unscaled once.
            if self.iteration.unscaled.contains_key(&p.id()) {
                continue;
            }
            let check = match g {
                None => Check::NoGrad,
                Some(g) => {
                    // `x * 1` is `x`: skipped, so that no -0 turns into +0.
                    let g = if inv != 1.0 {
                        let unscaled = no_grad(|| &g * inv);
                        p.set_grad(Some(unscaled.clone()));
                        unscaled
                    } else {
                        g
                    };
                    // Checked after the division (PyTorch checks before it): with a scale
                    // below 1, a finite gradient can overflow there, and the step would
                    // apply the inf.
                    if g.isfinite().all().item_bool() {
                        Check::Finite
                    } else {
                        Check::NonFinite
                    }
                }
            };
            self.iteration.unscaled.insert(p.id(), check);
        }
    }

    /// Unscales `optimizer`'s gradients unless [`unscale_`](GradScaler::unscale_) did
    /// already in this iteration, then runs `optimizer.step()` if they were all finite and
    /// skips it otherwise (the parameters and the optimizer's state, moments and step
    /// counts included, stay as they were). Disabled, it just steps.
    ///
    /// # Panics
    /// Changing nothing: when called a second time for (a parameter of) this optimizer
    /// before [`update`](GradScaler::update) (PyTorch's "step() has already been called
    /// since the last update()"); when none of the optimizer's parameters has a gradient
    /// (PyTorch's "No inf checks were recorded for this optimizer"); as `unscale_` when
    /// some but not all of its parameters were unscaled already (through another
    /// optimizer).
    #[track_caller]
    pub fn step(&mut self, optimizer: &mut dyn Optimizer) -> StepOutcome {
        if !self.enabled {
            optimizer.step();
            return StepOutcome::Stepped;
        }
        let params = optimizer.named_parameters();
        if let Some((name, _)) = params.iter().find(|(_, p)| self.iteration.stepped.contains(&p.id())) {
            panic!(
                "GradScaler::step: step() has already been called since the last update() (for the optimizer of \
                 `{name}`)"
            );
        }
        let no_checks = || {
            panic!(
                "GradScaler::step: no inf checks were recorded for this optimizer: none of its {} parameter(s) has a \
                 gradient; call backward() on the scaled loss first",
                params.len()
            )
        };
        if !params.iter().all(|(_, p)| self.iteration.unscaled.contains_key(&p.id())) {
            if params.iter().all(|(_, p)| p.grad().is_none()) {
                no_checks();
            }
            self.unscale_params(&params, "step");
        }
        let checks: Vec<Check> = params.iter().map(|(_, p)| self.iteration.unscaled[&p.id()]).collect();
        if checks.iter().all(|c| *c == Check::NoGrad) {
            no_checks();
        }
        let outcome = if checks.contains(&Check::NonFinite) {
            StepOutcome::Skipped
        } else {
            optimizer.step();
            StepOutcome::Stepped
        };
        self.iteration.stepped.extend(params.iter().map(|(_, p)| p.id()));
        outcome
    }

    /// Adapts the scale at the end of an iteration and clears the iteration's record: if
    /// any gradient unscaled since the last `update()` held inf or NaN, the scale is
    /// multiplied by `backoff_factor` and the count of clean iterations restarts from 0;
    /// otherwise the count goes up by one, and on reaching `growth_interval` the scale is
    /// multiplied by `growth_factor` (unless that overflows `f32`, as in PyTorch) and the
    /// count restarts. Disabled, it does nothing.
    ///
    /// ```
    /// use nn_core::amp::{GradScaler, GradScalerConfig};
    /// use nn_core::optim::{Sgd, SgdConfig};
    /// use nn_core::{Parameter, Tensor};
    /// let w = Parameter::new(Tensor::ones(&[1]));
    /// let mut opt = Sgd::new(vec![w.clone()], SgdConfig::default());
    /// let mut scaler = GradScaler::with_config(GradScalerConfig { growth_interval: 2, ..Default::default() });
    /// for want in [65536.0, 131072.0, 131072.0, 262144.0] {
    ///     w.set_grad(Some(Tensor::ones(&[1])));
    ///     scaler.step(&mut opt);
    ///     scaler.update();
    ///     assert_eq!(scaler.get_scale(), want);
    /// }
    /// ```
    ///
    /// # Panics
    /// Changing nothing: when no gradient was checked since the last `update()` (PyTorch's
    /// "No inf checks were recorded prior to update."); when the backoff would take the
    /// scale below the smallest normal `f32` (see the type's docs).
    #[track_caller]
    pub fn update(&mut self) {
        if !self.enabled {
            return;
        }
        let checks = self.iteration.unscaled.values();
        if checks.clone().all(|c| *c == Check::NoGrad) {
            panic!(
                "GradScaler::update: no inf checks were recorded prior to update(): call step() (or unscale_()) for \
                 the optimizer, after backward() on the scaled loss, before update()"
            );
        }
        if checks.clone().any(|c| *c == Check::NonFinite) {
            let scale = (f64::from(self.scale) * self.backoff_factor) as f32;
            if scale < MIN_SCALE {
                panic!(
                    "GradScaler::update: backing off from {:e} would take the scale below {MIN_SCALE:e}: the gradients \
                     have held inf or NaN at every scale down to this one, so the loss itself is probably inf or NaN",
                    self.scale
                );
            }
            self.scale = scale;
            self.growth_tracker = 0;
        } else {
            let clean = self.growth_tracker + 1;
            if clean == self.growth_interval {
                let scale = (f64::from(self.scale) * self.growth_factor) as f32;
                if scale.is_finite() {
                    self.scale = scale;
                }
                self.growth_tracker = 0;
            } else {
                self.growth_tracker = clean;
            }
        }
        self.iteration = Iteration::default();
    }

    /// Sets the scale to `new_scale` and clears the iteration's record, leaving the growth
    /// count as it is (PyTorch's `update(new_scale)`). Disabled, it only checks the value.
    ///
    /// ```
    /// use nn_core::amp::GradScaler;
    /// let mut scaler = GradScaler::new();
    /// scaler.update_with(1024.0).unwrap();
    /// assert_eq!(scaler.get_scale(), 1024.0);
    /// assert!(scaler.update_with(0.0).is_err());
    /// assert_eq!(scaler.get_scale(), 1024.0);
    /// ```
    ///
    /// # Errors
    /// [`Error::GradScalerConfig`] when `new_scale` is not a finite positive normal `f32`;
    /// nothing changed then.
    pub fn update_with(&mut self, new_scale: f64) -> Result<()> {
        if let Some(reason) = scale_problem(new_scale) {
            return Err(Error::GradScalerConfig { key: "new_scale", reason });
        }
        if self.enabled {
            self.scale = new_scale as f32;
            self.iteration = Iteration::default();
        }
        Ok(())
    }

    /// The state to save for resuming (PyTorch's `state_dict()`); store it in a
    /// [`Checkpoint`](crate::checkpoint::Checkpoint) with
    /// [`with_scaler`](crate::checkpoint::Checkpoint::with_scaler).
    pub fn state_dict(&self) -> GradScalerState {
        GradScalerState {
            scale: f64::from(self.scale),
            growth_factor: self.growth_factor,
            backoff_factor: self.backoff_factor,
            growth_interval: self.growth_interval,
            growth_tracker: self.growth_tracker,
        }
    }

    /// Restores a state saved by [`state_dict`](GradScaler::state_dict), after checking it
    /// ([`GradScalerState::check`]). The iteration's record is kept, as in PyTorch.
    ///
    /// ```
    /// use nn_core::amp::GradScaler;
    /// let mut scaler = GradScaler::new();
    /// let mut state = scaler.state_dict();
    /// state.scale = 512.0;
    /// scaler.load_state_dict(&state).unwrap();
    /// assert_eq!(scaler.get_scale(), 512.0);
    /// state.growth_interval = 0;
    /// let e = scaler.load_state_dict(&state).unwrap_err();
    /// assert_eq!(e.to_string(), "grad scaler state: `growth_interval` is 0; it must be at least 1");
    /// assert_eq!(scaler.get_scale(), 512.0);
    /// ```
    ///
    /// # Errors
    /// [`Error::GradScalerState`] naming the offending field; the scaler is unchanged then.
    pub fn load_state_dict(&mut self, state: &GradScalerState) -> Result<()> {
        state.check()?;
        self.scale = state.scale as f32;
        self.growth_factor = state.growth_factor;
        self.backoff_factor = state.backoff_factor;
        self.growth_interval = state.growth_interval;
        self.growth_tracker = state.growth_tracker;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{catch_unwind, AssertUnwindSafe};

    use super::*;
    use crate::optim::{clip_grad_norm_, Adam, AdamConfig, Sgd, SgdConfig};
    use crate::DType;

    fn param(v: &[f32]) -> Parameter {
        Parameter::new(Tensor::from_vec(v.to_vec(), &[v.len()]))
    }

    fn grad(p: &Parameter) -> Vec<f32> {
        p.grad().expect("a gradient").to_vec()
    }

    fn set_grad(p: &Parameter, g: &[f32]) {
        p.set_grad(Some(Tensor::from_vec(g.to_vec(), &[g.len()])));
    }

    /// Everything of an optimizer a skipped step must leave alone: its parameters and its
    /// state (moments, step counts, learning rates), as bits.
    fn snapshot(opt: &dyn Optimizer) -> Vec<(String, Vec<u64>)> {
        let bits = |t: &Tensor| t.to_vec_f64().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let state = opt.state_dict();
        let mut out: Vec<(String, Vec<u64>)> =
            opt.named_parameters().iter().map(|(n, p)| (format!("param {n}"), bits(p))).collect();
        out.extend(state.tensors.iter().map(|(k, t)| (format!("state {k}"), bits(t))));
        out.push(("lrs".into(), state.lrs.iter().map(|v| v.to_bits()).collect()));
        out
    }

    /// The message of the panic `f` must raise.
    fn panic_message(f: impl FnOnce()) -> String {
        let e = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
        e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
    }

    fn scaler(growth_interval: u64) -> GradScaler {
        GradScaler::with_config(GradScalerConfig { growth_interval, ..Default::default() })
    }

    /// `loss = sum(exp(w * x)) / 3` through the scaler: gradients `scale * x exp(w x) / 3`.
    fn scaled_backward(scaler: &GradScaler, w: &Parameter, x: &[f32]) {
        let x = Tensor::from_vec(x.to_vec(), &[x.len()]);
        scaler.scale(&w.mul(&x).exp().mean()).backward();
    }

    #[test]
    fn unscaled_gradients_equal_those_of_the_unscaled_loss_bit_for_bit() {
        let x = [0.3, -1.7, 2.9];
        let reference = param(&[0.1, 0.2, -0.7]);
        let disabled = GradScaler::with_config(GradScalerConfig { enabled: false, ..Default::default() });
        scaled_backward(&disabled, &reference, &x);
        let want = grad(&reference);

        let w = param(&[0.1, 0.2, -0.7]);
        let mut opt = Sgd::new(vec![w.clone()], SgdConfig::default());
        let mut s = GradScaler::new();
        scaled_backward(&s, &w, &x);
        assert_eq!(grad(&w), want.iter().map(|g| g * 65536.0).collect::<Vec<_>>());
        s.unscale_(&mut opt);
        assert_eq!(grad(&w), want);
        // A scale that is not a power of two: the gradient times f32(1 / scale).
        let mut s = GradScaler::new();
        s.update_with(3.0).unwrap();
        set_grad(&w, &[3.0, 6.0, 1e-3]);
        s.unscale_(&mut opt);
        let inv = (1.0f64 / 3.0) as f32;
        assert_eq!(grad(&w), vec![3.0 * inv, 6.0 * inv, 1e-3 * inv]);
    }

    #[test]
    fn a_step_with_an_inf_or_nan_gradient_is_skipped_and_backs_off() {
        for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            let (w, b) = (param(&[0.5, -0.25]), param(&[0.1]));
            let mut opt =
                Adam::new(vec![("w".to_string(), w.clone()), ("b".to_string(), b.clone())], AdamConfig::default());
            let mut s = scaler(3);
            // Two clean iterations: Adam has moments and a step count, the tracker is at 2.
            for _ in 0..2 {
                opt.zero_grad();
                scaled_backward(&s, &w, &[1.0, 2.0]);
                b.set_grad(Some(Tensor::from_vec(vec![65536.0], &[1])));
                assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
                s.update();
            }
            assert_eq!(s.state_dict().growth_tracker, 2);
            let before = snapshot(&opt);
            assert!(before.iter().any(|(k, v)| k == "state w.step" && f64::from_bits(v[0]) == 2.0), "{before:?}");

            opt.zero_grad();
            scaled_backward(&s, &w, &[1.0, 2.0]);
            set_grad(&b, &[bad]); // one bad value, in another parameter than `w`
            assert_eq!(s.step(&mut opt), StepOutcome::Skipped, "{bad}");
            assert!(!StepOutcome::Skipped.stepped());
            assert_eq!(snapshot(&opt), before, "{bad}: the skipped step changed the parameters or Adam's state");
            s.update();
            let st = s.state_dict();
            assert_eq!((st.scale, st.growth_tracker), (32768.0, 0), "{bad}");

            // The next clean iteration steps, from the untouched state.
            opt.zero_grad();
            scaled_backward(&s, &w, &[1.0, 2.0]);
            assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
            s.update();
            assert_ne!(snapshot(&opt), before);
            assert_eq!(s.state_dict().growth_tracker, 1);
        }
    }

    /// With a scale below 1, unscaling can overflow a finite gradient: that step is
    /// skipped too, the parameter untouched.
    #[test]
    fn a_gradient_that_overflows_when_unscaled_skips_the_step() {
        let w = param(&[1.0, 2.0]);
        let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.1, ..Default::default() });
        let mut s = GradScaler::new();
        s.update_with(1e-3).unwrap();
        set_grad(&w, &[1e36, 1.0]); // finite; 1e39 once divided by 1e-3
        assert_eq!(s.step(&mut opt), StepOutcome::Skipped);
        assert_eq!(w.to_vec(), vec![1.0, 2.0]);
    }

    #[test]
    fn the_scale_grows_after_exactly_growth_interval_clean_iterations() {
        let w = param(&[1.0]);
        let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.0, ..Default::default() });
        let mut s = scaler(3);
        let mut iteration = |s: &mut GradScaler, g: f32| {
            set_grad(&w, &[g]);
            s.step(&mut opt);
            s.update();
            let st = s.state_dict();
            (st.scale, st.growth_tracker)
        };
        assert_eq!(iteration(&mut s, 1.0), (65536.0, 1));
        assert_eq!(iteration(&mut s, 1.0), (65536.0, 2));
        assert_eq!(iteration(&mut s, 1.0), (131072.0, 0));
        assert_eq!(iteration(&mut s, 1.0), (131072.0, 1));
        assert_eq!(iteration(&mut s, 1.0), (131072.0, 2));
        // An inf resets the count: three more clean iterations are needed.
        assert_eq!(iteration(&mut s, f32::INFINITY), (65536.0, 0));
        assert_eq!(iteration(&mut s, 1.0), (65536.0, 1));
        assert_eq!(iteration(&mut s, 1.0), (65536.0, 2));
        assert_eq!(iteration(&mut s, 1.0), (131072.0, 0));
        // Growth that would overflow f32 keeps the scale (and restarts the count).
        s.update_with(f64::from(f32::MAX)).unwrap();
        assert_eq!(iteration(&mut s, 1.0), (f64::from(f32::MAX), 1));
        assert_eq!(iteration(&mut s, 1.0), (f64::from(f32::MAX), 2));
        assert_eq!(iteration(&mut s, 1.0), (f64::from(f32::MAX), 0));
        // A growth factor that is not a power of two rounds to f32, as PyTorch's scale.
        let mut s = GradScaler::with_config(GradScalerConfig {
            init_scale: 1.0,
            growth_factor: 1.1,
            growth_interval: 1,
            ..Default::default()
        });
        assert_eq!(iteration(&mut s, 1.0).0, f64::from(1.1f64 as f32));
        assert_eq!(iteration(&mut s, 1.0).0, f64::from((f64::from(1.1f64 as f32) * 1.1) as f32));
    }

    #[test]
    fn unscale_then_clip_then_step_unscales_once() {
        let x = [3.0, -4.0];
        // Reference: no scaler.
        let r = param(&[0.5, 0.5]);
        let mut ropt = Sgd::new(vec![r.clone()], SgdConfig { lr: 0.1, ..Default::default() });
        r.mul(&Tensor::from_vec(x.to_vec(), &[2])).sum().backward();
        let rnorm = clip_grad_norm_(&ropt.parameters(), 1.0);
        let rclipped = grad(&r);
        ropt.step();

        let w = param(&[0.5, 0.5]);
        let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.1, ..Default::default() });
        let mut s = GradScaler::new();
        s.scale(&w.mul(&Tensor::from_vec(x.to_vec(), &[2])).sum()).backward();
        s.unscale_(&mut opt);
        assert_eq!(grad(&w), x.to_vec());
        assert_eq!(clip_grad_norm_(&opt.parameters(), 1.0), rnorm);
        assert_eq!(rnorm, 5.0);
        assert_eq!(grad(&w), rclipped);
        assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
        assert_eq!(grad(&w), rclipped, "step unscaled the gradients a second time");
        assert_eq!(w.to_vec(), r.to_vec());
        s.update();
        assert_eq!(s.get_scale(), 65536.0);
    }

    #[test]
    fn a_disabled_scaler_is_a_pass_through() {
        let off = GradScalerConfig { enabled: false, ..Default::default() };
        let mut s = GradScaler::with_config(off);
        assert!(!s.is_enabled() && GradScaler::new().is_enabled());
        assert_eq!((s.get_scale(), s.scale_factor()), (1.0, 1.0));
        let w = param(&[1.0, 2.0]);
        let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.5, ..Default::default() });
        let loss = w.mul(&w).sum();
        let scaled = s.scale(&loss);
        assert_eq!(scaled.id(), loss.id());
        scaled.backward();
        s.unscale_(&mut opt);
        s.unscale_(&mut opt); // no record, so no misuse to catch
        assert_eq!(grad(&w), vec![2.0, 4.0]);
        assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
        assert_eq!(w.to_vec(), vec![0.0, 0.0]);
        // No inf check either: the optimizer steps with what it is given, as without a scaler.
        set_grad(&w, &[f32::INFINITY, 0.0]);
        assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
        assert!(w.to_vec()[0].is_infinite());
        s.update();
        s.update_with(8.0).unwrap();
        assert!(s.update_with(-8.0).is_err());
        assert_eq!(s.get_scale(), 1.0);
        assert_eq!(s, GradScaler::with_config(off), "nothing was recorded");
    }

    #[test]
    fn invalid_configs_are_refused() {
        let cases: [(GradScalerConfig, &str); 11] = [
            (GradScalerConfig { init_scale: 0.0, ..Default::default() }, "`init_scale` is 0.0;"),
            (GradScalerConfig { init_scale: -1.0, ..Default::default() }, "`init_scale` is -1.0;"),
            (GradScalerConfig { init_scale: f64::NAN, ..Default::default() }, "`init_scale` is NaN;"),
            (GradScalerConfig { init_scale: f64::INFINITY, ..Default::default() }, "`init_scale` is inf;"),
            (GradScalerConfig { init_scale: 1e39, ..Default::default() }, "`init_scale` is 1e39;"),
            (GradScalerConfig { init_scale: 1e-40, ..Default::default() }, "a scale is a finite positive normal f32"),
            (GradScalerConfig { growth_factor: 1.0, ..Default::default() }, "`growth_factor` is 1.0;"),
            (GradScalerConfig { growth_factor: f64::INFINITY, ..Default::default() }, "`growth_factor` is inf;"),
            (
                GradScalerConfig { backoff_factor: 1.0, ..Default::default() },
                "`backoff_factor` is 1.0; it must be in (0, 1)",
            ),
            (GradScalerConfig { backoff_factor: 0.0, ..Default::default() }, "`backoff_factor` is 0.0;"),
            (
                GradScalerConfig { growth_interval: 0, ..Default::default() },
                "`growth_interval` is 0; it must be at least 1",
            ),
        ];
        for (config, want) in cases {
            for config in [config, GradScalerConfig { enabled: false, ..config }] {
                let e = GradScaler::try_with_config(config).unwrap_err();
                assert!(matches!(e, Error::GradScalerConfig { .. }), "{e:?}");
                assert!(e.to_string().starts_with("GradScaler: ") && e.to_string().contains(want), "{e}");
                assert_eq!(panic_message(|| drop(GradScaler::with_config(config))), e.to_string());
            }
        }
        // The edges that are valid.
        for config in [
            GradScalerConfig { init_scale: f64::from(f32::MIN_POSITIVE), ..Default::default() },
            GradScalerConfig { init_scale: f64::from(f32::MAX), ..Default::default() },
            GradScalerConfig {
                growth_factor: 1.0 + f64::EPSILON,
                backoff_factor: 1e-300,
                growth_interval: 1,
                ..Default::default()
            },
        ] {
            GradScaler::try_with_config(config).unwrap();
        }
    }

    #[test]
    fn invalid_states_are_refused_and_change_nothing() {
        let mut s = scaler(4);
        s.update_with(256.0).unwrap();
        let w = param(&[1.0]);
        let mut opt = Sgd::new(vec![w.clone()], SgdConfig::default());
        set_grad(&w, &[1.0]);
        s.step(&mut opt);
        s.update();
        set_grad(&w, &[1.0]);
        s.unscale_(&mut opt); // a record in progress, which a refused load keeps too
        let before = s.clone();
        let good = s.state_dict();
        assert_eq!(
            good,
            GradScalerState {
                scale: 256.0,
                growth_factor: 2.0,
                backoff_factor: 0.5,
                growth_interval: 4,
                growth_tracker: 1
            }
        );
        let cases: [(GradScalerState, &str); 12] = [
            (GradScalerState { scale: f64::NAN, ..good }, "`scale` is NaN;"),
            (GradScalerState { scale: f64::INFINITY, ..good }, "`scale` is inf;"),
            (GradScalerState { scale: f64::NEG_INFINITY, ..good }, "`scale` is -inf;"),
            (GradScalerState { scale: 0.0, ..good }, "`scale` is 0.0;"),
            (GradScalerState { scale: -2.0, ..good }, "`scale` is -2.0;"),
            (GradScalerState { scale: 1e300, ..good }, "`scale` is 1e300;"),
            (GradScalerState { growth_interval: 0, growth_tracker: 0, ..good }, "`growth_interval` is 0"),
            (GradScalerState { growth_factor: 0.5, ..good }, "`growth_factor` is 0.5"),
            (GradScalerState { growth_factor: f64::NAN, ..good }, "`growth_factor` is NaN"),
            (GradScalerState { backoff_factor: 1.5, ..good }, "`backoff_factor` is 1.5"),
            (GradScalerState { backoff_factor: -0.5, ..good }, "`backoff_factor` is -0.5"),
            (GradScalerState { growth_tracker: 4, ..good }, "`_growth_tracker` is 4; it counts clean iterations"),
        ];
        for (state, want) in cases {
            let e = s.load_state_dict(&state).unwrap_err();
            assert!(matches!(e, Error::GradScalerState { .. }), "{e:?}");
            assert!(e.to_string().starts_with("grad scaler state: ") && e.to_string().contains(want), "{e}");
            assert_eq!(s, before, "{want}: a refused state changed the scaler");
        }
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e39, 1e-39] {
            let e = s.update_with(bad).unwrap_err();
            assert!(e.to_string().starts_with("GradScaler: `new_scale` is "), "{e}");
            assert_eq!(s, before);
        }
        // A valid state round-trips, and the record in progress is kept.
        s.load_state_dict(&GradScalerState { scale: 8.0, growth_tracker: 3, ..good }).unwrap();
        assert_eq!(s.state_dict(), GradScalerState { scale: 8.0, growth_tracker: 3, ..good });
        assert_eq!(s.iteration, before.iteration);
    }

    #[test]
    fn unscale_twice_panics_and_changes_nothing() {
        let w = param(&[1.0, 2.0]);
        let mut opt = Adam::new(vec![w.clone()], AdamConfig::default());
        let mut s = GradScaler::new();
        set_grad(&w, &[65536.0, 131072.0]);
        s.unscale_(&mut opt);
        let (before, opt_before, grad_before) = (s.clone(), snapshot(&opt), grad(&w));
        let msg = panic_message(|| s.unscale_(&mut opt));
        assert_eq!(
            msg,
            "GradScaler::unscale_: unscale_() has already been called on this optimizer since the last update() \
             (the gradient of `0` is unscaled already)"
        );
        assert_eq!((&s, snapshot(&opt), grad(&w)), (&before, opt_before, grad_before));
        assert_eq!(grad(&w), vec![1.0, 2.0]);
        // The iteration goes on normally.
        assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
        // After step: unscale_ is refused (PyTorch's "unscale_() is being called after step()").
        let (before, opt_before) = (s.clone(), snapshot(&opt));
        let msg = panic_message(|| s.unscale_(&mut opt));
        assert!(msg.starts_with("GradScaler::unscale_: unscale_() is being called after step()"), "{msg}");
        assert_eq!((&s, snapshot(&opt)), (&before, opt_before));
        s.update();
        // A new iteration may unscale again.
        set_grad(&w, &[65536.0, 65536.0]);
        s.unscale_(&mut opt);
        assert_eq!(grad(&w), vec![1.0, 1.0]);
    }

    #[test]
    fn step_twice_without_update_panics_and_changes_nothing() {
        let w = param(&[1.0, 2.0]);
        let mut opt = Adam::new(vec![w.clone()], AdamConfig::default());
        let mut s = GradScaler::new();
        set_grad(&w, &[65536.0, 65536.0]);
        assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
        let (before, opt_before, grad_before) = (s.clone(), snapshot(&opt), grad(&w));
        let msg = panic_message(|| {
            s.step(&mut opt);
        });
        assert_eq!(
            msg,
            "GradScaler::step: step() has already been called since the last update() (for the optimizer of `0`)"
        );
        assert_eq!((&s, snapshot(&opt), grad(&w)), (&before, opt_before, grad_before));
        s.update();
        set_grad(&w, &[65536.0, 65536.0]);
        assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
    }

    #[test]
    fn steps_and_updates_without_gradients_panic_and_change_nothing() {
        let w = param(&[1.0]);
        let mut opt = Sgd::new(vec![w.clone()], SgdConfig::default());
        let mut s = GradScaler::new();
        let before = s.clone();
        let msg = panic_message(|| s.update());
        assert!(msg.starts_with("GradScaler::update: no inf checks were recorded prior to update()"), "{msg}");
        let msg = panic_message(|| {
            s.step(&mut opt);
        });
        assert!(
            msg.starts_with("GradScaler::step: no inf checks were recorded for this optimizer: none of its 1"),
            "{msg}"
        );
        assert_eq!(s, before);
        // unscale_ without gradients is allowed (PyTorch too), but records no check.
        s.unscale_(&mut opt);
        let msg = panic_message(|| {
            s.step(&mut opt);
        });
        assert!(msg.contains("no inf checks were recorded for this optimizer"), "{msg}");
        assert!(panic_message(|| s.update()).contains("no inf checks were recorded prior to update()"));
        assert_eq!(w.to_vec(), vec![1.0]);
    }

    #[test]
    fn several_optimizers_in_one_iteration() {
        let (a, b) = (param(&[1.0]), param(&[1.0]));
        let mut opt_a = Sgd::new(vec![a.clone()], SgdConfig { lr: 1.0, ..Default::default() });
        let mut opt_b = Sgd::new(vec![b.clone()], SgdConfig { lr: 1.0, ..Default::default() });
        let mut s = GradScaler::new();
        set_grad(&a, &[65536.0]);
        set_grad(&b, &[f32::NAN]);
        // Each optimizer is skipped on its own gradients; the update sees both.
        assert_eq!(s.step(&mut opt_a), StepOutcome::Stepped);
        assert_eq!(s.step(&mut opt_b), StepOutcome::Skipped);
        assert_eq!((a.to_vec(), b.to_vec()), (vec![0.0], vec![1.0]));
        s.update();
        assert_eq!(s.get_scale(), 32768.0);
        // Two optimizers sharing a parameter: its gradient is not unscaled twice.
        let mut opt_ab = Sgd::new(vec![a.clone(), b.clone()], SgdConfig::default());
        set_grad(&a, &[32768.0]);
        set_grad(&b, &[32768.0]);
        s.unscale_(&mut opt_a);
        let before = s.clone();
        let msg = panic_message(|| {
            s.step(&mut opt_ab);
        });
        assert!(msg.contains("unscale_() has already been called on this optimizer") && msg.contains("`0`"), "{msg}");
        assert_eq!((s, grad(&a), grad(&b)), (before, vec![1.0], vec![32768.0]));
    }

    #[test]
    fn half_precision_gradients_are_refused() {
        let w = Parameter::new(Tensor::ones(&[2]).to_dtype(DType::F16));
        let mut opt = Sgd::new(vec![w.clone()], SgdConfig::default());
        w.set_grad(Some(Tensor::ones(&[2]).to_dtype(DType::F16)));
        let mut s = GradScaler::new();
        let before = s.clone();
        let msg = panic_message(|| s.unscale_(&mut opt));
        assert!(msg.starts_with("GradScaler::unscale_: attempting to unscale f16 gradients (`0`)"), "{msg}");
        assert_eq!(s, before);
        assert_eq!(w.grad().unwrap().to_vec(), vec![1.0, 1.0]);
    }

    #[test]
    fn backing_off_below_the_smallest_normal_f32_panics() {
        let w = param(&[1.0]);
        let mut opt = Sgd::new(vec![w.clone()], SgdConfig::default());
        let mut s = GradScaler::new();
        s.update_with(f64::from(f32::MIN_POSITIVE) * 4.0).unwrap();
        let mut poisoned = |s: &mut GradScaler| {
            set_grad(&w, &[f32::NAN]);
            s.step(&mut opt);
            s.update();
        };
        poisoned(&mut s);
        poisoned(&mut s);
        assert_eq!(s.get_scale(), f64::from(f32::MIN_POSITIVE));
        let msg = panic_message(|| poisoned(&mut s));
        assert!(msg.contains("would take the scale below 1.1754944e-38") && msg.contains("the loss itself"), "{msg}");
        assert_eq!(s.get_scale(), f64::from(f32::MIN_POSITIVE));
    }
}
