//! Stochastic gradient descent with momentum, dampening, Nesterov and weight decay.

use super::{
    bufs_from_tensors, bufs_to_tensors, build_groups, check_state_paths, hyper_entry, non_negative, read_hyper,
    update_param, Group, IntoParamGroups, Optimizer, OptimizerState,
};
use crate::backend::update::{UpdateRule, UpdateState};
use crate::dtype::FloatElement;
use crate::error::{Error, Result};
use crate::module::Parameter;
use crate::state_dict::StateDict;

/// SGD hyper-parameters (PyTorch's defaults but `lr`, which PyTorch requires).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdConfig {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0 = plain SGD).
    pub momentum: f64,
    /// Dampening of the momentum's gradient term.
    pub dampening: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Nesterov momentum (needs `momentum > 0` and `dampening == 0`).
    pub nesterov: bool,
}

impl Default for SgdConfig {
    fn default() -> Self {
        SgdConfig { lr: 1e-3, momentum: 0.0, dampening: 0.0, weight_decay: 0.0, nesterov: false }
    }
}

/// Stochastic gradient descent (PyTorch's `torch.optim.SGD`):
///
/// ```text
/// g = grad + weight_decay * p
/// buf = g                                  (first step)
/// buf = momentum * buf + (1 - dampening) * g
/// g = g + momentum * buf  (nesterov)   or   g = buf
/// p = p - lr * g
/// ```
///
/// ```
/// use nn_core::optim::{Optimizer, Sgd, SgdConfig};
/// use nn_core::{Parameter, Tensor};
/// let p = Parameter::new(Tensor::from_vec(vec![1.0], &[1]));
/// let mut opt = Sgd::new(vec![p.clone()], SgdConfig { lr: 0.5, ..Default::default() });
/// (&*p * 2.0).sum().backward();
/// opt.step();
/// assert_eq!(p.to_vec(), vec![0.0]); // 1 - 0.5 * 2
/// ```
pub struct Sgd {
    groups: Vec<Group>,
    config: SgdConfig,
    state: Vec<Vec<Option<UpdateState>>>,
}

impl Sgd {
    /// An optimizer over `params` (`Vec<Parameter>`, `named_parameters()`, or groups).
    ///
    /// # Panics
    /// Where [`try_new`](Sgd::try_new) returns an error, with its message.
    #[track_caller]
    pub fn new(params: impl IntoParamGroups, config: SgdConfig) -> Self {
        Sgd::try_new(params, config).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`new`](Sgd::new), returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::OptimizerConfig`] on invalid hyper-parameters (negative rates, Nesterov
    /// without momentum or with dampening) and on an empty parameter list, as PyTorch raises;
    /// [`Error::ParamGroupConflict`] when a parameter is in two groups or two parameters
    /// share a name (see [`ParamGroup`](super::ParamGroup)).
    pub fn try_new(params: impl IntoParamGroups, config: SgdConfig) -> Result<Self> {
        check_config(&config).map_err(|reason| Error::OptimizerConfig { optimizer: "Sgd", reason })?;
        let groups = build_groups("Sgd", params.into_param_groups(), config.lr, config.weight_decay)?;
        let state = groups.iter().map(|g| vec![None; g.params.len()]).collect();
        Ok(Sgd { groups, config, state })
    }
}

/// What [`Sgd::try_new`] refuses, as PyTorch does (also checked on the hyper-parameters
/// of a loaded state).
fn check_config(c: &SgdConfig) -> std::result::Result<(), String> {
    if !non_negative(c.lr) {
        return Err(format!("invalid learning rate {}", c.lr));
    }
    if !non_negative(c.momentum) {
        return Err(format!("invalid momentum {}", c.momentum));
    }
    if !non_negative(c.weight_decay) {
        return Err(format!("invalid weight_decay {}", c.weight_decay));
    }
    if !c.dampening.is_finite() {
        return Err(format!("invalid dampening {}", c.dampening));
    }
    if c.nesterov && !(c.momentum > 0.0 && c.dampening == 0.0) {
        return Err("Nesterov momentum requires a momentum and zero dampening".into());
    }
    Ok(())
}

/// The names [`Sgd`] keeps one value of for all groups, and per group, in
/// [`OptimizerState::hyper_params`].
const WIDE: [&str; 3] = ["momentum", "dampening", "nesterov"];
const PER_GROUP: [&str; 1] = ["weight_decay"];

/// [`kernel`] for parameters on a GPU (see [`UpdateRule::wgsl`]): `k = [fresh, lr, weight decay,
/// momentum, 1 - dampening, nesterov]`.
const DEVICE_KERNEL: &str = "
    var d = g;
    if (k[2] != 0.0) { d = g + k[2] * p; }
    if (k[3] == 0.0) {
        p = p - k[1] * d;
    } else {
        if (k[0] != 0.0) { b0 = d; } else { b0 = k[3] * b0 + k[4] * d; }
        var s = b0;
        if (k[5] != 0.0) { s = d + k[3] * b0; }
        p = p - k[1] * s;
    }
";

#[inline(always)]
fn kernel<T: FloatElement>(p: &mut [T], g: &[T], bufs: &mut [&mut [T]], fresh: bool, lr: f64, wd: f64, c: &SgdConfig) {
    let (lr, wd) = (T::from_f64(lr), T::from_f64(wd));
    let (m, damp) = (T::from_f64(c.momentum), T::from_f64(1.0 - c.dampening));
    let use_wd = wd != T::zero();
    if c.momentum == 0.0 {
        for (pi, &gi) in p.iter_mut().zip(g) {
            let d = if use_wd { gi + wd * *pi } else { gi };
            *pi = *pi - lr * d;
        }
        return;
    }
    let buf = &mut bufs[0];
    for ((pi, &gi), bi) in p.iter_mut().zip(g).zip(buf.iter_mut()) {
        let d = if use_wd { gi + wd * *pi } else { gi };
        *bi = if fresh { d } else { m * *bi + damp * d };
        let step = if c.nesterov { d + m * *bi } else { *bi };
        *pi = *pi - lr * step;
    }
}

/// SGD's step with one group's rate and weight decay, for the backend's update
/// ([`UpdateRule`]).
struct SgdRule {
    lr: f64,
    wd: f64,
    config: SgdConfig,
}

impl UpdateRule for SgdRule {
    const NAME: &'static str = "SGD";

    #[inline(always)]
    fn cpu<T: FloatElement>(&self, p: &mut [T], g: &[T], state: &mut [&mut [T]], fresh: bool) {
        kernel(p, g, state, fresh, self.lr, self.wd, &self.config)
    }

    fn wgsl(&self) -> (&'static str, Vec<f64>) {
        let c = &self.config;
        (DEVICE_KERNEL, vec![self.lr, self.wd, c.momentum, 1.0 - c.dampening, f64::from(u8::from(c.nesterov))])
    }
}

impl Optimizer for Sgd {
    fn step(&mut self) {
        let c = self.config;
        let n_bufs = usize::from(c.momentum != 0.0);
        for (g, st) in self.groups.iter().zip(&mut self.state) {
            let (lr, wd) = (g.lr, g.weight_decay);
            for ((_, p), s) in g.params.iter().zip(st.iter_mut()) {
                update_param(p, s, n_bufs, &SgdRule { lr, wd, config: c });
            }
        }
    }

    fn zero_grad(&self) {
        self.groups.iter().flat_map(|g| &g.params).for_each(|(_, p)| p.zero_grad());
    }

    fn named_parameters(&self) -> Vec<(String, Parameter)> {
        self.groups.iter().flat_map(|g| g.params.iter().cloned()).collect()
    }

    fn num_groups(&self) -> usize {
        self.groups.len()
    }

    fn group_lr(&self, i: usize) -> f64 {
        self.groups[i].lr
    }

    fn set_group_lr(&mut self, i: usize, lr: f64) {
        self.groups[i].lr = lr;
    }

    fn group_initial_lr(&self, i: usize) -> Option<f64> {
        self.groups[i].initial_lr
    }

    fn set_group_initial_lr(&mut self, i: usize, lr: f64) {
        self.groups[i].initial_lr = Some(lr);
    }

    fn state_dict(&self) -> OptimizerState {
        let mut tensors = StateDict::default();
        for (g, st) in self.groups.iter().zip(&self.state) {
            for ((name, p), s) in g.params.iter().zip(st) {
                if let (Some(b), true) = (s, self.config.momentum != 0.0) {
                    bufs_to_tensors(name, &["momentum_buffer"], b, p.shape(), &mut tensors);
                }
            }
        }
        let c = &self.config;
        let hyper_params = self
            .groups
            .iter()
            .map(|g| {
                let pairs = [
                    ("momentum", c.momentum),
                    ("dampening", c.dampening),
                    ("nesterov", f64::from(u8::from(c.nesterov))),
                    ("weight_decay", g.weight_decay),
                ];
                hyper_entry(&pairs, g.initial_lr)
            })
            .collect();
        OptimizerState { tensors, lrs: self.groups.iter().map(|g| g.lr).collect(), hyper_params }
    }

    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()> {
        let mut config = self.config;
        let mut decays: Vec<f64> = self.groups.iter().map(|g| g.weight_decay).collect();
        let mut initial: Vec<Option<f64>> = self.groups.iter().map(|g| g.initial_lr).collect();
        let hyper = read_hyper(state, self.groups.len(), &WIDE, &PER_GROUP, &["nesterov"])?;
        let recorded = hyper.is_some();
        if let Some(h) = hyper {
            config.momentum = h.wide["momentum"];
            config.dampening = h.wide["dampening"];
            config.nesterov = h.wide["nesterov"] == 1.0;
            decays = h.per_group.iter().map(|g| g["weight_decay"]).collect();
            initial = h.initial_lrs;
            for &weight_decay in &decays {
                check_config(&SgdConfig { weight_decay, ..config })
                    .map_err(|e| Error::OptimizerState(format!("the state's hyper-parameters: {e}")))?;
            }
        }
        if config.momentum == 0.0 {
            if let Some(key) = state.tensors.keys().next() {
                let whose = if recorded {
                    "its momentum is 0, and an Sgd without momentum keeps no buffers"
                } else {
                    "this Sgd has momentum 0 and keeps no buffers (the state records no momentum of its own)"
                };
                return Err(Error::OptimizerState(format!("the state holds `{key}`, but {whose}")));
            }
        }
        check_state_paths(&self.groups, state, &["momentum_buffer"])?;
        let mut new_state = Vec::new();
        for g in &self.groups {
            let mut st = Vec::new();
            for (name, p) in &g.params {
                st.push(bufs_from_tensors(name, &["momentum_buffer"], p, &state.tensors)?);
            }
            new_state.push(st);
        }
        self.state = new_state;
        self.config = SgdConfig { lr: self.config.lr, ..config };
        for (((g, &lr), wd), initial_lr) in self.groups.iter_mut().zip(&state.lrs).zip(decays).zip(initial) {
            (g.lr, g.weight_decay, g.initial_lr) = (lr, wd, initial_lr);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PyTorch's `ValueError: optimizer got an empty parameter list`, for every optimizer
    /// and for groups that hold nothing.
    #[test]
    fn an_optimizer_over_no_parameters_is_refused() {
        use crate::optim::{Adam, AdamConfig, ParamGroup};
        let e = Sgd::try_new(Vec::<crate::Parameter>::new(), SgdConfig::default()).err().unwrap().to_string();
        assert_eq!(
            e,
            "Sgd: got an empty parameter list: pass the model's `parameters()` (or parameter groups holding them)"
        );
        let groups = vec![ParamGroup::new(Vec::new()), ParamGroup::new(Vec::new())];
        assert!(Adam::try_new(groups, AdamConfig::default())
            .err()
            .unwrap()
            .to_string()
            .starts_with("Adam: got an empty"));
        // One empty group beside a full one is fine, as in PyTorch.
        let p = crate::Parameter::new(crate::Tensor::ones(&[1]));
        let groups = vec![ParamGroup::new(Vec::new()), ParamGroup::new(vec![("w".into(), p)])];
        assert!(Sgd::try_new(groups, SgdConfig::default()).is_ok());
    }
}
