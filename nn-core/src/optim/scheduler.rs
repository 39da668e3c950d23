//! Learning-rate schedulers (closed forms of PyTorch's `StepLR`, `CosineAnnealingLR`,
//! `LinearLR`). Call [`LrScheduler::step`] once per epoch (or per iteration), after the
//! optimizer's step, as in PyTorch.

use super::Optimizer;
use super::MAX_COUNTER;
use crate::error::{Error, Result};

/// A scheduler's resumable state.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerState {
    /// Steps taken so far.
    pub last_epoch: u64,
    /// The learning rate of each group when the scheduler was created.
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
    /// The factor applied to each base learning rate after `epoch` steps.
    fn lr_at(&self, base_lr: f64, epoch: u64) -> f64;
    /// The scheduler's state.
    fn state(&self) -> &SchedulerState;
    /// Mutable state. A state set here is not checked: restore saved states with
    /// [`load_state`](LrScheduler::load_state), which is.
    fn state_mut(&mut self) -> &mut SchedulerState;

    /// Restores a state saved from [`state`](LrScheduler::state) after checking it
    /// against `opt` ([`SchedulerState::check`]), and writes its learning rates into
    /// `opt`. On error neither the scheduler nor `opt` is changed.
    ///
    /// # Errors
    /// [`Error::SchedulerState`] naming the offending field.
    fn load_state(&mut self, state: &SchedulerState, opt: &mut dyn Optimizer) -> Result<()> {
        state.check(opt)?;
        *self.state_mut() = state.clone();
        self.apply(opt);
        Ok(())
    }

    /// Advances one step and writes the new learning rates into `opt`.
    ///
    /// # Panics
    /// As [`apply`](LrScheduler::apply).
    #[track_caller]
    fn step(&mut self, opt: &mut dyn Optimizer) {
        let st = self.state_mut();
        st.last_epoch = st.last_epoch.saturating_add(1);
        self.apply(opt);
    }

    /// Writes the learning rates for the current step into `opt`.
    ///
    /// # Panics
    /// When the state's number of base learning rates differs from the optimizer's number
    /// of groups (a state set through [`state_mut`](LrScheduler::state_mut) for another
    /// optimizer; [`load_state`](LrScheduler::load_state) refuses those).
    #[track_caller]
    fn apply(&self, opt: &mut dyn Optimizer) {
        let st = self.state();
        if st.base_lrs.len() != opt.num_groups() {
            panic!(
                "LrScheduler::apply: the scheduler has {} base learning rates, the optimizer {} parameter group(s); \
                 restore saved states with `load_state`, which checks them",
                st.base_lrs.len(),
                opt.num_groups()
            );
        }
        for (i, &b) in st.base_lrs.iter().enumerate() {
            opt.set_group_lr(i, self.lr_at(b, st.last_epoch));
        }
    }

    /// The learning rates of the current step.
    fn last_lr(&self) -> Vec<f64> {
        let st = self.state();
        st.base_lrs.iter().map(|&b| self.lr_at(b, st.last_epoch)).collect()
    }
}

fn base(opt: &dyn Optimizer) -> SchedulerState {
    SchedulerState { last_epoch: 0, base_lrs: (0..opt.num_groups()).map(|i| opt.group_lr(i)).collect() }
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
    /// A linear schedule; the optimizer's rates are multiplied by `start_factor` at once.
    pub fn new(opt: &mut dyn Optimizer, start_factor: f64, end_factor: f64, total_iters: u64) -> Self {
        assert!(start_factor > 0.0 && start_factor <= 1.0, "LinearLR: start_factor must be in (0, 1]");
        let s = LinearLR { start_factor, end_factor, total_iters, state: base(opt) };
        s.apply(opt);
        s
    }
}

impl LrScheduler for LinearLR {
    fn lr_at(&self, b: f64, epoch: u64) -> f64 {
        let t = epoch.min(self.total_iters) as f64 / self.total_iters.max(1) as f64;
        b * (self.start_factor + (self.end_factor - self.start_factor) * t)
    }
    fn state(&self) -> &SchedulerState {
        &self.state
    }
    fn state_mut(&mut self) -> &mut SchedulerState {
        &mut self.state
    }
}
