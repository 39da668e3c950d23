//! Restoring a checkpoint into a model, its optimizer, schedulers and gradient scaler:
//! every part is checked before any is changed, so a checkpoint that does not fit is an
//! error and leaves everything as it was.

use super::Checkpoint;
use crate::amp::GradScaler;
use crate::error::{Error, Result};
use crate::module::Module;
use crate::optim::{LrScheduler, Optimizer};

impl Checkpoint {
    /// Resumes a run from this checkpoint, all or nothing: the model's state (strictly:
    /// every key must match), the optimizer's state (its learning rates and other
    /// hyper-parameters with it), the scheduler's state and the global generator. A run with a
    /// gradient scaler restores its state too with
    /// [`restore_with_scaler`](Checkpoint::restore_with_scaler).
    ///
    /// Everything is checked against the model and optimizer before anything is
    /// changed: on error the model, the optimizer, the scheduler and the generator are
    /// exactly as they were.
    ///
    /// ```
    /// use nn_core::checkpoint::Checkpoint;
    /// use nn_core::optim::{LrScheduler, Optimizer, Sgd, SgdConfig, StepLR};
    /// use nn_core::{Module, Parameter, Tensor};
    ///
    /// #[derive(Module)]
    /// struct Net {
    ///     #[param] w: Parameter,
    /// }
    ///
    /// let dir = std::env::temp_dir().join(format!("nn-ckpt-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join("run.safetensors");
    /// let mut net = Net { w: Parameter::new(Tensor::ones(&[2])) };
    /// let mut opt = Sgd::new(net.named_parameters(), SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() });
    /// let mut sched = StepLR::new(&mut opt, 1, 0.5);
    /// sched.step(&mut opt);
    /// Checkpoint::new(net.state_dict(), Some(opt.state_dict()), Some(sched.state().clone()), 1, 10).save(&path).unwrap();
    ///
    /// let mut net2 = Net { w: Parameter::new(Tensor::zeros(&[2])) };
    /// let mut opt2 = Sgd::new(net2.named_parameters(), SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() });
    /// let mut sched2 = StepLR::new(&mut opt2, 1, 0.5);
    /// let ck = Checkpoint::load(&path).unwrap();
    /// ck.restore(&mut net2, Some(&mut opt2), Some(&mut sched2)).unwrap();
    /// assert_eq!((net2.w.to_vec(), opt2.group_lr(0)), (vec![1.0, 1.0], 0.05));
    ///
    /// // A model the checkpoint does not fit: an error, and nothing changed.
    /// let mut other = Net { w: Parameter::new(Tensor::zeros(&[3])) };
    /// let mut opt3 = Sgd::new(other.named_parameters(), SgdConfig { lr: 0.1, ..Default::default() });
    /// let mut sched3 = StepLR::new(&mut opt3, 1, 0.5);
    /// let e = ck.restore(&mut other, Some(&mut opt3), Some(&mut sched3)).unwrap_err();
    /// assert!(e.to_string().contains("\"w\" is [2]"), "{e}"); // the model's mismatch, named
    /// assert_eq!((other.w.to_vec(), opt3.group_lr(0)), (vec![0.0; 3], 0.1));
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`Error::Checkpoint`] when the checkpoint lacks a part that was asked for (or a
    /// scheduler is given without its optimizer), or holds a gradient scaler's state while
    /// an optimizer is restored without it (resuming would silently restart the scale: use
    /// [`restore_with_scaler`](Checkpoint::restore_with_scaler), or set `scaler` to `None`
    /// to start a new scaler on purpose), or a scheduler's state while an optimizer is
    /// restored without a scheduler (likewise: pass it, or clear `schedulers`), or holds
    /// several schedulers' states (use [`restore_all`](Checkpoint::restore_all));
    /// [`Error::SchedulerState`] (a state of another kind of schedule among them),
    /// [`Error::OptimizerState`] or [`Error::StateDict`] when a part does not fit.
    pub fn restore(
        &self,
        model: &mut dyn Module,
        optimizer: Option<&mut dyn Optimizer>,
        scheduler: Option<&mut dyn LrScheduler>,
    ) -> Result<()> {
        self.restore_parts(model, optimizer, scheduler.into_iter().collect(), None)
    }

    /// [`restore`](Checkpoint::restore), and the gradient scaler's state too, all or
    /// nothing: on error the model, the optimizer, the scheduler, the scaler and the
    /// generator are exactly as they were.
    ///
    /// ```
    /// use nn_core::amp::GradScaler;
    /// use nn_core::checkpoint::Checkpoint;
    /// use nn_core::optim::{Optimizer, Sgd, SgdConfig};
    /// use nn_core::{Module, Parameter, Tensor};
    ///
    /// #[derive(Module)]
    /// struct Net {
    ///     #[param] w: Parameter,
    /// }
    ///
    /// let dir = std::env::temp_dir().join(format!("nn-ckpt-scaler-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join("run.safetensors");
    /// let net = Net { w: Parameter::new(Tensor::ones(&[2])) };
    /// let opt = Sgd::new(net.named_parameters(), SgdConfig { lr: 0.1, ..Default::default() });
    /// let mut scaler = GradScaler::new();
    /// scaler.update_with(1024.0).unwrap();
    /// Checkpoint::new(net.state_dict(), Some(opt.state_dict()), None, 1, 10)
    ///     .with_scaler(scaler.state_dict())
    ///     .save(&path)
    ///     .unwrap();
    ///
    /// let mut net2 = Net { w: Parameter::new(Tensor::zeros(&[2])) };
    /// let mut opt2 = Sgd::new(net2.named_parameters(), SgdConfig { lr: 0.1, ..Default::default() });
    /// let mut scaler2 = GradScaler::new();
    /// let ck = Checkpoint::load(&path).unwrap();
    /// ck.restore_with_scaler(&mut net2, Some(&mut opt2), None, &mut scaler2).unwrap();
    /// assert_eq!((net2.w.to_vec(), scaler2.get_scale()), (vec![1.0, 1.0], 1024.0));
    ///
    /// // A checkpoint saved without a scaler has none to restore: an error, nothing changed.
    /// Checkpoint::new(net.state_dict(), None, None, 1, 10).save(&path).unwrap();
    /// let mut fresh = GradScaler::new();
    /// let e = Checkpoint::load(&path).unwrap().restore_with_scaler(&mut net2, None, None, &mut fresh).unwrap_err();
    /// assert!(e.to_string().contains("no grad scaler state to restore"), "{e}");
    /// assert_eq!(fresh, GradScaler::new());
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`restore`](Checkpoint::restore); [`Error::Checkpoint`] when the checkpoint holds
    /// no scaler state; [`Error::GradScalerState`] when the one it holds is invalid (one
    /// set by hand: [`load`](Checkpoint::load) refuses those).
    pub fn restore_with_scaler(
        &self,
        model: &mut dyn Module,
        optimizer: Option<&mut dyn Optimizer>,
        scheduler: Option<&mut dyn LrScheduler>,
        scaler: &mut GradScaler,
    ) -> Result<()> {
        self.restore_parts(model, optimizer, scheduler.into_iter().collect(), Some(scaler))
    }

    /// [`restore`](Checkpoint::restore) for a run driven by several schedulers (a warm-up
    /// chained with a decay), with a gradient scaler or without: each of `schedulers`
    /// takes the checkpoint's state at its position, so pass them in the order they were
    /// saved. All or nothing, as `restore`.
    ///
    /// ```
    /// use nn_core::checkpoint::Checkpoint;
    /// use nn_core::optim::{CosineAnnealingLR, LinearLR, LrScheduler, Optimizer, Sgd, SgdConfig};
    /// use nn_core::{Module, Parameter, Tensor};
    ///
    /// #[derive(Module)]
    /// struct Net {
    ///     #[param] w: Parameter,
    /// }
    ///
    /// let mut model = Net { w: Parameter::new(Tensor::ones(&[2])) };
    /// let w = || vec![Parameter::new(Tensor::ones(&[2]))];
    /// let mut opt = Sgd::new(w(), SgdConfig { lr: 1.0, ..Default::default() });
    /// let mut warmup = LinearLR::new(&mut opt, 0.1, 1.0, 5);
    /// let mut decay = CosineAnnealingLR::new(&mut opt, 100, 0.0);
    /// for _ in 0..3 {
    ///     warmup.step(&mut opt);
    ///     decay.step(&mut opt);
    /// }
    /// let states = vec![warmup.state().clone(), decay.state().clone()];
    /// let ck = Checkpoint::new(model.state_dict(), Some(opt.state_dict()), states, 0, 3);
    ///
    /// let mut opt2 = Sgd::new(w(), SgdConfig { lr: 1.0, ..Default::default() });
    /// let mut warmup2 = LinearLR::new(&mut opt2, 0.1, 1.0, 5);
    /// let mut decay2 = CosineAnnealingLR::new(&mut opt2, 100, 0.0);
    /// // Only one of them: an error (the warm-up would start over), nothing changed.
    /// let e = ck.restore(&mut model, Some(&mut opt2), Some(&mut decay2)).unwrap_err();
    /// assert!(e.to_string().contains("holds 2 schedulers' states, 1 scheduler was given"), "{e}");
    /// // In the wrong order: the warm-up refuses the cosine's state.
    /// assert!(ck.restore_all(&mut model, Some(&mut opt2), &mut [&mut decay2, &mut warmup2], None).is_err());
    /// ck.restore_all(&mut model, Some(&mut opt2), &mut [&mut warmup2, &mut decay2], None).unwrap();
    /// warmup.step(&mut opt);
    /// decay.step(&mut opt);
    /// warmup2.step(&mut opt2);
    /// decay2.step(&mut opt2);
    /// assert_eq!(opt2.group_lr(0), opt.group_lr(0));
    /// ```
    ///
    /// # Errors
    /// As [`restore`](Checkpoint::restore), and [`Error::Checkpoint`] when the number of
    /// schedulers given is not the number of states the checkpoint holds.
    pub fn restore_all(
        &self,
        model: &mut dyn Module,
        optimizer: Option<&mut dyn Optimizer>,
        schedulers: &mut [&mut dyn LrScheduler],
        scaler: Option<&mut GradScaler>,
    ) -> Result<()> {
        let schedulers = schedulers.iter_mut().map(|s| &mut **s as &mut dyn LrScheduler).collect();
        self.restore_parts(model, optimizer, schedulers, scaler)
    }

    fn restore_parts(
        &self,
        model: &mut dyn Module,
        optimizer: Option<&mut dyn Optimizer>,
        schedulers: Vec<&mut dyn LrScheduler>,
        scaler: Option<&mut GradScaler>,
    ) -> Result<()> {
        let bad = |reason: &str| Error::Checkpoint { path: "<memory>".into(), reason: reason.to_string() };
        let mut optimizer = match (optimizer, &self.optimizer) {
            (Some(o), Some(state)) => Some((o, state)),
            (Some(_), None) => return Err(bad("no optimizer state to restore")),
            (None, _) => None,
        };
        let (given, saved) = (schedulers.len(), self.schedulers.len());
        match (given, saved, optimizer.is_some()) {
            // Nothing to restore, or the model alone (to evaluate it).
            (0, 0, _) | (0, _, false) => {}
            (_, 0, _) => return Err(bad("no scheduler state to restore")),
            (_, _, false) => return Err(bad("a scheduler is restored together with its optimizer")),
            // Resuming training without the scheduler the run had would start a new one
            // from the restored (already decayed) rates: not the run.
            (0, _, true) => {
                return Err(bad(&format!(
                    "the checkpoint holds {}: pass {} to restore {}, or clear `checkpoint.schedulers` first to start a \
                     new schedule",
                    states(saved),
                    if saved == 1 { "the scheduler" } else { "the schedulers (`restore_all`)" },
                    if saved == 1 { "it" } else { "them" },
                )))
            }
            // One of chained schedulers left behind would apply its first steps again.
            _ if given != saved => {
                return Err(bad(&format!(
                    "the checkpoint holds {}, {given} scheduler{} given: restore every scheduler that drives the \
                     optimizer, in the order they were saved{}",
                    states(saved),
                    if given == 1 { " was" } else { "s were" },
                    if given == 1 { " (`restore_all`)" } else { "" },
                )))
            }
            _ => {}
        }
        let schedulers: Vec<_> = schedulers.into_iter().zip(&self.schedulers).collect();
        if let Some((o, _)) = &optimizer {
            for (s, state) in &schedulers {
                s.check_state(state, &**o)?;
            }
        }
        let scaler = match (scaler, &self.scaler) {
            (Some(s), Some(state)) => {
                state.check()?;
                Some((s, state))
            }
            (Some(_), None) => {
                return Err(bad("no grad scaler state to restore (the checkpoint was saved without one)"))
            }
            // Resuming training (an optimizer is restored) without the scaler the run had
            // would restart its scale silently: the resumed run would not be the run.
            (None, Some(_)) if optimizer.is_some() => {
                return Err(bad(
                    "the checkpoint holds a grad scaler's state: resume with `restore_with_scaler`, or set \
                     `checkpoint.scaler = None` first to start a new scaler",
                ))
            }
            (None, _) => None,
        };
        // The model's load is planned and its values converted first, touching nothing; the
        // optimizer's load checks everything before it keeps anything; the model's load is
        // then committed, which cannot fail, nor can the scaler's (checked above).
        let model_load =
            crate::module::load::prepare(&*model, &self.model, crate::module::LoadStateDictConfig::default())?;
        if let Some((o, state)) = &mut optimizer {
            o.load_state_dict(state)?;
        }
        model_load.commit(model.as_dyn_mut());
        // The learning rates are the optimizer's state's (restored above); the scheduler
        // continues from them, as PyTorch's does. Its state was checked above against the
        // optimizer's group count, which loading the optimizer's state keeps.
        if let Some((o, _)) = &mut optimizer {
            for (s, state) in schedulers {
                s.load_state(state, &mut **o).expect("the scheduler's state was checked above");
            }
        }
        if let Some((s, state)) = scaler {
            s.load_state_dict(state)?;
        }
        self.restore_rng();
        Ok(())
    }

    /// Makes the global generator continue from the checkpoint.
    pub fn restore_rng(&self) {
        crate::random::set_rng_state(&self.rng);
    }
}

/// "a scheduler's state" or "N schedulers' states".
fn states(n: usize) -> String {
    if n == 1 {
        "a scheduler's state".into()
    } else {
        format!("{n} schedulers' states")
    }
}
