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
//! Each scheduler has its own state, which records its kind's hyper-parameters as PyTorch's
//! `state_dict` does (a `StepLR`'s `step_size` and `gamma`, ...): a state is restored only
//! into a scheduler of the same kind, and the restored run continues with the saved
//! hyper-parameters. To resume chained schedulers, restore every one's state: one left at
//! step 0 would apply its first steps again to the restored rate. A
//! [`Checkpoint`](crate::checkpoint::Checkpoint) holds them all and
//! [`restore_all`](crate::checkpoint::Checkpoint::restore_all) restores them in order,
//! refusing a restore that leaves one behind.
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

use super::MAX_COUNTER;
use super::{HyperParams, Optimizer};
use crate::error::{Error, Result};

/// A scheduler's resumable state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedulerState {
    /// Steps taken so far.
    pub last_epoch: u64,
    /// The learning rate each group started from: its `initial_lr` when the scheduler was
    /// created ([`Optimizer::group_initial_lr`]).
    pub base_lrs: Vec<f64>,
    /// The schedule's hyper-parameters under PyTorch's attribute names, which its
    /// `state_dict` holds too: [`StepLR`] keeps `step_size` and `gamma`,
    /// [`CosineAnnealingLR`] `T_max` and `eta_min`, [`LinearLR`] `start_factor`,
    /// `end_factor` and `total_iters` (step counts as whole numbers). They tell one kind of
    /// schedule from another: [`LrScheduler::load_state`] refuses a state of another kind
    /// (a `StepLR`'s state loaded into a cosine schedule would have run the cosine from a
    /// step count it never took) and continues with the saved values, as PyTorch's
    /// `load_state_dict` does. To change one on purpose, edit the state before loading it.
    ///
    /// Empty in a state that records none (built by hand, or saved by a checkpoint before
    /// nn recorded them): loading it keeps the scheduler's own.
    pub hyper_params: HyperParams,
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
    /// let e = SchedulerState { last_epoch: 3, base_lrs: vec![0.1, 0.1], ..Default::default() }.check(&opt).unwrap_err();
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
        if let Some((k, v)) = self.hyper_params.iter().find(|(_, v)| !v.is_finite()) {
            return bad(format!("hyper_params.{k}"), format!("is {v}; a hyper-parameter is finite"));
        }
        Ok(())
    }

    /// Hyper-parameter `name`, which every built-in scheduler's state holds.
    ///
    /// # Panics
    /// When the state has none (one set through [`LrScheduler::state_mut`] without it).
    #[track_caller]
    fn hyper(&self, name: &str) -> f64 {
        match self.hyper_params.get(name) {
            Some(&v) => v,
            None => panic!(
                "LrScheduler: the state has no `{name}` hyper-parameter (a state set through `state_mut`?); \
                 restore saved states with `load_state`, which checks them"
            ),
        }
    }

    /// A step-count hyper-parameter (`step_size`, `T_max`, `total_iters`).
    #[track_caller]
    fn count(&self, name: &str) -> u64 {
        // Checked to be a whole number in range when it was loaded; a state edited through
        // `state_mut` saturates instead of wrapping.
        self.hyper(name) as u64
    }
}

/// What a built-in schedule accepts for one of its hyper-parameters.
#[derive(Clone, Copy)]
enum Range {
    /// A step count: a whole number from `min` to [`MAX_COUNTER`].
    Count { min: u64 },
    /// A finite factor or rate from `lo` (included or not) to `hi` (included).
    Real { lo: f64, lo_included: bool, hi: f64 },
    /// Any finite number (a user scheduler's own hyper-parameter).
    Finite,
}

impl Range {
    const NON_NEGATIVE: Range = Range::Real { lo: 0.0, lo_included: true, hi: f64::MAX };

    /// Why `v` is out of range, or `None`.
    fn refuses(self, v: f64) -> Option<String> {
        // A hostile value as 1e300, not as 301 digits.
        let shown = if v.abs() < 1e16 { format!("{v}") } else { format!("{v:e}") };
        match self {
            Range::Count { min } => (v.fract() != 0.0 || v < min as f64 || v > MAX_COUNTER as f64)
                .then(|| format!("is {shown}; a step count is a whole number from {min} to {MAX_COUNTER}")),
            Range::Real { lo, lo_included, hi } => {
                let above = if lo_included { v >= lo } else { v > lo };
                (!(above && v <= hi)).then(|| {
                    let (open, hi) = (
                        if lo_included { '[' } else { '(' },
                        if hi == f64::MAX { "inf)".to_string() } else { format!("{hi}]") },
                    );
                    format!("is {shown}; it must be in {open}{lo}, {hi}")
                })
            }
            Range::Finite => (!v.is_finite()).then(|| format!("is {shown}; a hyper-parameter is finite")),
        }
    }
}

/// Checks saved hyper-parameters against the names and ranges a schedule keeps (`kind`
/// names it in messages: "a StepLR", "this scheduler"): every name present, no other,
/// each in range.
fn check_hyper_names(kind: &str, saved: &HyperParams, expected: &[(&str, Range)]) -> Result<()> {
    let bad = |key: String, reason: String| Err(Error::SchedulerState { key, reason });
    let names = || match expected {
        [] => "none".to_string(),
        _ => expected.iter().map(|(k, _)| format!("`{k}`")).collect::<Vec<_>>().join(", "),
    };
    if let Some(k) = saved.keys().find(|k| !expected.iter().any(|(e, _)| e == k)) {
        return bad(
            "hyper_params".into(),
            format!(
                "has `{k}`, which {kind} does not keep (it keeps {}): a state of another kind of scheduler?",
                names()
            ),
        );
    }
    for (k, range) in expected {
        let Some(&v) = saved.get(*k) else {
            return bad(
                "hyper_params".into(),
                format!("has no `{k}` ({kind} keeps {}): a state of another kind of scheduler?", names()),
            );
        };
        if let Some(reason) = range.refuses(v) {
            return bad(format!("hyper_params.{k}"), reason);
        }
    }
    Ok(())
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

    /// Checks a saved state's (non-empty) [`hyper_params`](SchedulerState::hyper_params)
    /// for this scheduler. The built-in schedulers take exactly their own names, each in
    /// the range their constructor accepts; the default takes exactly the names this
    /// scheduler's own state holds (none for one that keeps none), each finite.
    ///
    /// # Errors
    /// [`Error::SchedulerState`] naming the offending entry.
    fn check_hyper_params(&self, saved: &HyperParams) -> Result<()> {
        let own: Vec<_> = self.state().hyper_params.keys().map(|k| (k.as_str(), Range::Finite)).collect();
        check_hyper_names("this scheduler", saved, &own)
    }

    /// Checks everything [`load_state`](LrScheduler::load_state) checks, changing nothing:
    /// [`SchedulerState::check`] against `opt`, and the hyper-parameters, when the state
    /// records them, with [`check_hyper_params`](LrScheduler::check_hyper_params).
    ///
    /// # Errors
    /// [`Error::SchedulerState`] naming the offending field.
    fn check_state(&self, state: &SchedulerState, opt: &dyn Optimizer) -> Result<()> {
        state.check(opt)?;
        if state.hyper_params.is_empty() {
            return Ok(());
        }
        self.check_hyper_params(&state.hyper_params)
    }

    /// Restores a state saved from [`state`](LrScheduler::state) after checking it
    /// ([`check_state`](LrScheduler::check_state)): the step count, the base rates and
    /// the hyper-parameters (a state that records none keeps this scheduler's own; one of
    /// another kind of schedule is refused). As PyTorch's `load_state_dict`, this
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
        self.check_state(state, opt)?;
        let own = std::mem::take(&mut self.state_mut().hyper_params);
        let mut state = state.clone();
        if state.hyper_params.is_empty() {
            state.hyper_params = own;
        }
        *self.state_mut() = state;
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

/// A new scheduler's state with hyper-parameters `hyper`: each group's `initial_lr`, which
/// the first scheduler attached sets to the group's rate (PyTorch's
/// `group.setdefault("initial_lr", group["lr"])`).
fn base(opt: &mut dyn Optimizer, hyper: &[(&str, f64)]) -> SchedulerState {
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
    let hyper_params = hyper.iter().map(|&(k, v)| (k.to_string(), v)).collect();
    SchedulerState { last_epoch: 0, base_lrs, hyper_params }
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
    state: SchedulerState,
}

impl StepLR {
    const HYPER: [(&str, Range); 2] = [("step_size", Range::Count { min: 1 }), ("gamma", Range::NON_NEGATIVE)];

    /// A step schedule starting from the optimizer's current learning rates.
    ///
    /// # Panics
    /// When `step_size` is 0 or more than [`MAX_COUNTER`], or `gamma` is negative or not
    /// finite (it would drive the rate negative, or to infinity or NaN).
    pub fn new(opt: &mut dyn Optimizer, step_size: u64, gamma: f64) -> Self {
        assert!(
            (1..=MAX_COUNTER).contains(&step_size),
            "StepLR: step_size must be in 1..={MAX_COUNTER}, got {step_size}"
        );
        assert!(gamma.is_finite() && gamma >= 0.0, "StepLR: gamma must be finite and non-negative, got {gamma}");
        StepLR { state: base(opt, &[("step_size", step_size as f64), ("gamma", gamma)]) }
    }
}

impl LrScheduler for StepLR {
    fn lr_at(&self, b: f64, epoch: u64) -> f64 {
        let (step_size, gamma) = (self.state.count("step_size").max(1), self.state.hyper("gamma"));
        b * gamma.powi(i32::try_from(epoch / step_size).unwrap_or(i32::MAX))
    }
    fn next_lr(&self, lr: f64, _: f64, epoch: u64) -> f64 {
        if epoch.is_multiple_of(self.state.count("step_size").max(1)) {
            lr * self.state.hyper("gamma")
        } else {
            lr
        }
    }
    fn check_hyper_params(&self, saved: &HyperParams) -> Result<()> {
        check_hyper_names("a StepLR", saved, &Self::HYPER)
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
    state: SchedulerState,
}

impl CosineAnnealingLR {
    const HYPER: [(&str, Range); 2] = [("T_max", Range::Count { min: 1 }), ("eta_min", Range::NON_NEGATIVE)];

    /// A cosine schedule over `t_max` steps.
    ///
    /// # Panics
    /// When `t_max` is 0 or more than [`MAX_COUNTER`], or `eta_min` is negative or not
    /// finite.
    pub fn new(opt: &mut dyn Optimizer, t_max: u64, eta_min: f64) -> Self {
        assert!(
            (1..=MAX_COUNTER).contains(&t_max),
            "CosineAnnealingLR: t_max must be in 1..={MAX_COUNTER}, got {t_max}"
        );
        assert!(
            eta_min.is_finite() && eta_min >= 0.0,
            "CosineAnnealingLR: eta_min must be finite and non-negative, got {eta_min}"
        );
        CosineAnnealingLR { state: base(opt, &[("T_max", t_max as f64), ("eta_min", eta_min)]) }
    }

    /// `T_max` (at least 1) and `eta_min`.
    fn hyper(&self) -> (u64, f64) {
        (self.state.count("T_max").max(1), self.state.hyper("eta_min"))
    }
}

impl LrScheduler for CosineAnnealingLR {
    fn lr_at(&self, b: f64, epoch: u64) -> f64 {
        let (t_max, eta_min) = self.hyper();
        let t = (epoch % t_max.saturating_mul(2)) as f64;
        eta_min + (b - eta_min) * (1.0 + (std::f64::consts::PI * t / t_max as f64).cos()) / 2.0
    }
    fn next_lr(&self, lr: f64, b: f64, epoch: u64) -> f64 {
        use std::f64::consts::PI;
        let (t_max_steps, eta_min) = self.hyper();
        let t_max = t_max_steps as f64;
        // Where the previous step's cosine is -1 (the bottom of a cycle) the ratio below
        // divides by 0: PyTorch steps back up by the first increment instead.
        if (i128::from(epoch) - 1 - i128::from(t_max_steps)).rem_euclid(2 * i128::from(t_max_steps)) == 0 {
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
    fn check_hyper_params(&self, saved: &HyperParams) -> Result<()> {
        check_hyper_names("a CosineAnnealingLR", saved, &Self::HYPER)
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
        assert!(total_iters <= MAX_COUNTER, "LinearLR: total_iters must be at most {MAX_COUNTER}, got {total_iters}");
        let hyper = [("start_factor", start_factor), ("end_factor", end_factor), ("total_iters", total_iters as f64)];
        let s = LinearLR { state: base(opt, &hyper) };
        for i in 0..opt.num_groups() {
            opt.set_group_lr(i, opt.group_lr(i) * start_factor);
        }
        s
    }
}

impl LinearLR {
    const HYPER: [(&str, Range); 3] = [
        ("start_factor", Range::Real { lo: 0.0, lo_included: false, hi: 1.0 }),
        ("end_factor", Range::Real { lo: 0.0, lo_included: true, hi: 1.0 }),
        ("total_iters", Range::Count { min: 0 }),
    ];

    /// `start_factor`, `end_factor` and `total_iters`.
    fn hyper(&self) -> (f64, f64, u64) {
        (self.state.hyper("start_factor"), self.state.hyper("end_factor"), self.state.count("total_iters"))
    }
}

impl LrScheduler for LinearLR {
    fn lr_at(&self, b: f64, epoch: u64) -> f64 {
        let (start, end, total_iters) = self.hyper();
        let t = epoch.min(total_iters) as f64 / total_iters.max(1) as f64;
        b * (start + (end - start) * t)
    }
    fn next_lr(&self, lr: f64, _: f64, epoch: u64) -> f64 {
        let (start, end, total_iters) = self.hyper();
        if epoch > total_iters {
            return lr;
        }
        lr * (1.0 + (end - start) / (total_iters as f64 * start + (epoch - 1) as f64 * (end - start)))
    }
    fn check_hyper_params(&self, saved: &HyperParams) -> Result<()> {
        check_hyper_names("a LinearLR", saved, &Self::HYPER)
    }
    fn state(&self) -> &SchedulerState {
        &self.state
    }
    fn state_mut(&mut self) -> &mut SchedulerState {
        &mut self.state
    }
}
