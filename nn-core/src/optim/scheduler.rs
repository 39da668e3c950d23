//! Learning-rate schedulers (PyTorch's `StepLR`, `CosineAnnealingLR`, `LinearLR`). Call
//! [`LrScheduler::step`] once per epoch (or per iteration), after the optimizer's step, as
//! in PyTorch.
//!
//! As PyTorch's, they are chainable: each step scales the rate the optimizer has now (its
//! `get_lr`, same formulas, same rounding), so two schedulers stepped on one optimizer
//! compose (a linear warm-up times a cosine decay) instead of the last one overwriting the
//! other. And each starts from the group's `initial_lr` ([`Optimizer::group_initial_lr`]),
//! set by the first scheduler attached: a scheduler built after another, or after loading a
//! state, starts from the run's first rate, not from a rate another scheduler already
//! changed.
//!
//! Each scheduler has its own state: a [`Checkpoint`](crate::checkpoint::Checkpoint) holds
//! one. To resume chained schedulers, restore the others' states too
//! ([`LrScheduler::load_state`]; their `last_epoch` is the same when they are stepped
//! together): one left at step 0 would apply its first steps again to the restored rate.
//!
//! ```
//! use nn_core::optim::{CosineAnnealingLR, LinearLR, LrScheduler, Optimizer, Sgd, SgdConfig};
//! use nn_core::{Parameter, Tensor};
//! let mut opt = Sgd::new(vec![Parameter::new(Tensor::zeros(&[1]))], SgdConfig { lr: 1.0, ..Default::default() });
//! let mut warmup = LinearLR::new(&mut opt, 0.25, 1.0, 3);
//! let mut decay = CosineAnnealingLR::new(&mut opt, 10, 0.0);
//! assert_eq!((decay.state().base_lrs[0], opt.group_lr(0)), (1.0, 0.25)); // the base is the first rate
//! let mut lrs = Vec::new();
//! for _ in 0..4 {
//!     warmup.step(&mut opt);
//!     decay.step(&mut opt);
//!     lrs.push(opt.group_lr(0));
//! }
//! // The warm-up's factor (0.5, 0.75, 1, 1) times the cosine's (0.976, 0.905, 0.794, 0.655).
//! let want = [0.5 * 0.9755, 0.75 * 0.9045, 0.7939, 0.6545];
//! assert!(lrs.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-4), "{lrs:?}");
//! ```

use super::Optimizer;
use super::MAX_COUNTER;
use crate::error::{Error, Result};

/// A scheduler's resumable state.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerState {
    /// Steps taken so far.
    pub last_epoch: u64,
    /// The learning rate each group started from: its `initial_lr` when the scheduler was
    /// created ([`Optimizer::group_initial_lr`]).
    pub base_lrs: Vec<f64>,
}

impl SchedulerState {
    /// Checks that this state can drive `opt`: one base learning rate per parameter
    /// group, each finite and non-negative, and a step count of at most
    /// [`MAX_COUNTER`].
    ///
    /// ```
    /// use nn_core::optim::{SchedulerState, Sgd, SgdConfig};
    /// use nn_core::{Parameter, Tensor};
    /// let opt = Sgd::new(vec![Parameter::new(Tensor::zeros(&[1]))], SgdConfig::default());
    /// let e = SchedulerState { last_epoch: 3, base_lrs: vec![0.1, 0.1] }.check(&opt).unwrap_err();
    /// assert!(e.to_string().contains("`base_lrs` has 2 learning rates, the optimizer 1 parameter group"), "{e}");
    /// ```
    ///
    /// # Errors
    /// [`Error::SchedulerState`] naming the offending field.
    pub fn check(&self, opt: &dyn Optimizer) -> Result<()> {
        let bad = |key: String, reason: String| Err(Error::SchedulerState { key, reason });
        if self.base_lrs.len() != opt.num_groups() {
            return bad(
                "base_lrs".into(),
                format!(
                    "has {} learning rates, the optimizer {} parameter group(s)",
                    self.base_lrs.len(),
                    opt.num_groups()
                ),
            );
        }
        if let Some((i, lr)) = self.base_lrs.iter().enumerate().find(|(_, lr)| !(lr.is_finite() && **lr >= 0.0)) {
            return bad(format!("base_lrs[{i}]"), format!("is {lr}; a learning rate is finite and non-negative"));
        }
        if self.last_epoch > MAX_COUNTER {
            return bad(
                "last_epoch".into(),
                format!("is {}, more than the {MAX_COUNTER} steps a run can count", self.last_epoch),
            );
        }
        Ok(())
    }
}

/// Sets the optimizer's learning rates as a function of the step count.
pub trait LrScheduler {
    /// This scheduler's rate after `epoch` steps from `base_lr`, in closed form: the rate
    /// it sets when it alone drives the optimizer (up to rounding: [`step`](LrScheduler::step)
    /// goes through [`next_lr`](LrScheduler::next_lr), as PyTorch does).
    fn lr_at(&self, base_lr: f64, epoch: u64) -> f64;

    /// The rate of step `epoch` (at least 1) from the group's current rate `lr` (PyTorch's
    /// chainable `get_lr`): what [`step`](LrScheduler::step) sets. The built-in schedulers
    /// use PyTorch's formulas; the default scales `lr` by the ratio of
    /// [`lr_at`](LrScheduler::lr_at) between `epoch - 1` and `epoch` (or sets `lr_at` where
    /// the earlier one is 0), so a scheduler that only defines `lr_at` chains too.
    fn next_lr(&self, lr: f64, base_lr: f64, epoch: u64) -> f64 {
        let (now, before) = (self.lr_at(base_lr, epoch), self.lr_at(base_lr, epoch.saturating_sub(1)));
        if before == 0.0 {
            now
        } else {
            lr * (now / before)
        }
    }

    /// The scheduler's state.
    fn state(&self) -> &SchedulerState;
    /// Mutable state. A state set here is not checked: restore saved states with
    /// [`load_state`](LrScheduler::load_state), which is.
    fn state_mut(&mut self) -> &mut SchedulerState;

    /// Restores a state saved from [`state`](LrScheduler::state) after checking it
    /// against `opt` ([`SchedulerState::check`]). As PyTorch's `load_state_dict`, this
    /// leaves `opt`'s learning rates alone: they are part of the optimizer's own state
    /// (restore it with [`Optimizer::load_state_dict`]; [`Checkpoint::restore`] restores
    /// both). On error the scheduler is unchanged.
    ///
    /// To resume, build the schedulers first and restore the optimizer's state after them,
    /// as in PyTorch: a [`LinearLR`] built after the optimizer's state was restored scales
    /// the restored rate by its start factor at once.
    ///
    /// [`Checkpoint::restore`]: crate::checkpoint::Checkpoint::restore
    ///
    /// # Errors
    /// [`Error::SchedulerState`] naming the offending field.
    fn load_state(&mut self, state: &SchedulerState, opt: &mut dyn Optimizer) -> Result<()> {
        state.check(opt)?;
        *self.state_mut() = state.clone();
        Ok(())
    }

    /// Advances one step and sets each group's rate to [`next_lr`](LrScheduler::next_lr)
    /// of its current one.
    ///
    /// # Panics
    /// As [`apply`](LrScheduler::apply).
    #[track_caller]
    fn step(&mut self, opt: &mut dyn Optimizer) {
        let st = self.state_mut();
        if st.last_epoch == u64::MAX {
            // Saturated (a state set by hand: a run counts to `MAX_COUNTER`): the rates of
            // this step were set by the step that reached it.
            return;
        }
        st.last_epoch += 1;
        let st = self.state();
        check_groups(st, opt);
        for (i, &b) in st.base_lrs.iter().enumerate() {
            opt.set_group_lr(i, self.next_lr(opt.group_lr(i), b, st.last_epoch));
        }
    }

    /// Sets each group's rate to this scheduler's closed form at the current step
    /// ([`lr_at`](LrScheduler::lr_at)), overriding whatever other schedulers did.
    ///
    /// # Panics
    /// When the state's number of base learning rates differs from the optimizer's number
    /// of groups (a state set through [`state_mut`](LrScheduler::state_mut) for another
    /// optimizer; [`load_state`](LrScheduler::load_state) refuses those).
    #[track_caller]
    fn apply(&self, opt: &mut dyn Optimizer) {
        let st = self.state();
        check_groups(st, opt);
        for (i, &b) in st.base_lrs.iter().enumerate() {
            opt.set_group_lr(i, self.lr_at(b, st.last_epoch));
        }
    }

    /// This scheduler's closed-form rates at the current step: the optimizer's rates when
    /// it alone drives the optimizer (with schedulers chained, read
    /// [`Optimizer::group_lr`]).
    fn last_lr(&self) -> Vec<f64> {
        let st = self.state();
        st.base_lrs.iter().map(|&b| self.lr_at(b, st.last_epoch)).collect()
    }
}

/// Panics when `st` has another number of base rates than `opt` has groups.
#[track_caller]
fn check_groups(st: &SchedulerState, opt: &dyn Optimizer) {
    if st.base_lrs.len() != opt.num_groups() {
        panic!(
            "LrScheduler: the scheduler has {} base learning rates, the optimizer {} parameter group(s); \
             restore saved states with `load_state`, which checks them",
            st.base_lrs.len(),
            opt.num_groups()
        );
    }
}

/// A new scheduler's state: each group's `initial_lr`, which the first scheduler attached
/// sets to the group's rate (PyTorch's `group.setdefault("initial_lr", group["lr"])`).
fn base(opt: &mut dyn Optimizer) -> SchedulerState {
    let base_lrs = (0..opt.num_groups())
        .map(|i| match opt.group_initial_lr(i) {
            Some(lr) => lr,
            None => {
                let lr = opt.group_lr(i);
                opt.set_group_initial_lr(i, lr);
                lr
            }
        })
        .collect();
    SchedulerState { last_epoch: 0, base_lrs }
}

/// Multiplies the learning rate by `gamma` every `step_size` steps.
///
/// ```
/// use nn_core::optim::{LrScheduler, Optimizer, Sgd, SgdConfig, StepLR};
/// use nn_core::{Parameter, Tensor};
/// let mut opt = Sgd::new(vec![Parameter::new(Tensor::zeros(&[1]))], SgdConfig { lr: 1.0, ..Default::default() });
/// let mut s = StepLR::new(&mut opt, 2, 0.5);
/// let lrs: Vec<f64> = (0..5).map(|_| { s.step(&mut opt); opt.group_lr(0) }).collect();
/// assert_eq!(lrs, [1.0, 0.5, 0.5, 0.25, 0.25]);
/// ```
pub struct StepLR {
    step_size: u64,
    gamma: f64,
    state: SchedulerState,
}

impl StepLR {
    /// A step schedule starting from the optimizer's current learning rates.
    pub fn new(opt: &mut dyn Optimizer, step_size: u64, gamma: f64) -> Self {
        assert!(step_size > 0, "StepLR: step_size must be positive");
        StepLR { step_size, gamma, state: base(opt) }
    }
}

impl LrScheduler for StepLR {
    fn lr_at(&self, b: f64, epoch: u64) -> f64 {
        b * self.gamma.powi(i32::try_from(epoch / self.step_size).unwrap_or(i32::MAX))
    }
    fn next_lr(&self, lr: f64, _: f64, epoch: u64) -> f64 {
        if epoch.is_multiple_of(self.step_size) {
            lr * self.gamma
        } else {
            lr
        }
    }
    fn state(&self) -> &SchedulerState {
        &self.state
    }
    fn state_mut(&mut self) -> &mut SchedulerState {
        &mut self.state
    }
}

/// Cosine annealing from the base rate to `eta_min` over `t_max` steps.
pub struct CosineAnnealingLR {
    t_max: u64,
    eta_min: f64,
    state: SchedulerState,
}

impl CosineAnnealingLR {
    /// A cosine schedule over `t_max` steps.
    pub fn new(opt: &mut dyn Optimizer, t_max: u64, eta_min: f64) -> Self {
        assert!(t_max > 0, "CosineAnnealingLR: t_max must be positive");
        CosineAnnealingLR { t_max, eta_min, state: base(opt) }
    }
}

impl LrScheduler for CosineAnnealingLR {
    fn lr_at(&self, b: f64, epoch: u64) -> f64 {
        let t = (epoch % self.t_max.saturating_mul(2)) as f64;
        self.eta_min + (b - self.eta_min) * (1.0 + (std::f64::consts::PI * t / self.t_max as f64).cos()) / 2.0
    }
    fn next_lr(&self, lr: f64, b: f64, epoch: u64) -> f64 {
        use std::f64::consts::PI;
        let (t_max, eta_min) = (self.t_max as f64, self.eta_min);
        // Where the previous step's cosine is -1 (the bottom of a cycle) the ratio below
        // divides by 0: PyTorch steps back up by the first increment instead.
        if (i128::from(epoch) - 1 - i128::from(self.t_max)).rem_euclid(2 * i128::from(self.t_max)) == 0 {
            return lr + (b - eta_min) * (1.0 - (PI / t_max).cos()) / 2.0;
        }
        let before = 1.0 + (PI * (epoch - 1) as f64 / t_max).cos();
        if before == 0.0 {
            // A `t_max` past about 3e8, where the cosine next to the bottom rounds to -1:
            // the ratio would be 0/0 (PyTorch raises); the closed form is exact there.
            return self.lr_at(b, epoch);
        }
        (1.0 + (PI * epoch as f64 / t_max).cos()) / before * (lr - eta_min) + eta_min
    }
    fn state(&self) -> &SchedulerState {
        &self.state
    }
    fn state_mut(&mut self) -> &mut SchedulerState {
        &mut self.state
    }
}

/// Linear change of the factor from `start_factor` to `end_factor` over `total_iters`
/// steps (a linear warm-up with `start_factor < 1`); sets the first rate on creation, as
/// PyTorch.
pub struct LinearLR {
    start_factor: f64,
    end_factor: f64,
    total_iters: u64,
    state: SchedulerState,
}

impl LinearLR {
    /// A linear schedule; the optimizer's rates are multiplied by `start_factor` at once
    /// (build it before restoring an optimizer's state, see [`LrScheduler::load_state`]).
    ///
    /// # Panics
    /// When `start_factor` is not in `(0, 1]` or `end_factor` not in `[0, 1]`, as PyTorch
    /// raises (a negative or NaN factor would drive the rate negative or NaN).
    pub fn new(opt: &mut dyn Optimizer, start_factor: f64, end_factor: f64, total_iters: u64) -> Self {
        assert!(start_factor > 0.0 && start_factor <= 1.0, "LinearLR: start_factor must be in (0, 1]");
        assert!((0.0..=1.0).contains(&end_factor), "LinearLR: end_factor must be in [0, 1], got {end_factor}");
        let s = LinearLR { start_factor, end_factor, total_iters, state: base(opt) };
        for i in 0..opt.num_groups() {
            opt.set_group_lr(i, opt.group_lr(i) * start_factor);
        }
        s
    }
}

impl LrScheduler for LinearLR {
    fn lr_at(&self, b: f64, epoch: u64) -> f64 {
        let t = epoch.min(self.total_iters) as f64 / self.total_iters.max(1) as f64;
        b * (self.start_factor + (self.end_factor - self.start_factor) * t)
    }
    fn next_lr(&self, lr: f64, _: f64, epoch: u64) -> f64 {
        if epoch > self.total_iters {
            return lr;
        }
        let (start, end) = (self.start_factor, self.end_factor);
        lr * (1.0 + (end - start) / (self.total_iters as f64 * start + (epoch - 1) as f64 * (end - start)))
    }
    fn state(&self) -> &SchedulerState {
        &self.state
    }
    fn state_mut(&mut self) -> &mut SchedulerState {
        &mut self.state
    }
}
