//! [`GradScaler`]: dynamic loss scaling (PyTorch's `torch.amp.GradScaler`), its settings,
//! its resumable state, and the per-iteration record that catches misuse.

use std::collections::{HashMap, HashSet};

use crate::autograd::no_grad;
use crate::error::{Error, Result};
use crate::module::Parameter;
use crate::optim::Optimizer;
use crate::tensor::{Tensor, TensorId};

mod config;

use config::{check_settings, scale_problem};
pub use config::{GradScalerConfig, GradScalerState};

/// The smallest scale a scaler holds: the smallest normal `f32`. Its reciprocal, the factor
/// [`GradScaler::unscale_`] multiplies gradients by, is still a finite `f32` (below it the
/// reciprocal overflows and every unscaled gradient would be inf or NaN).
const MIN_SCALE: f32 = f32::MIN_POSITIVE;

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
mod tests;
