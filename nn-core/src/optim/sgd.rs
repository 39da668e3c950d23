//! Stochastic gradient descent with momentum, dampening, Nesterov and weight decay.

use super::{
    bufs_from_tensors, bufs_to_tensors, build_groups, check_state_paths, non_negative, update_param, Bufs,
    DeviceKernel, Group, IntoParamGroups, Optimizer, OptimizerState,
};
use crate::backend::cpu::vmath::with_avx2;
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
    state: Vec<Vec<Option<Bufs>>>,
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
    /// without momentum or with dampening), as PyTorch raises;
    /// [`Error::ParamGroupConflict`] when a parameter is in two groups or two parameters
    /// share a name (see [`ParamGroup`](super::ParamGroup)).
    pub fn try_new(params: impl IntoParamGroups, config: SgdConfig) -> Result<Self> {
        let bad = |reason: String| Err(Error::OptimizerConfig { optimizer: "Sgd", reason });
        if !non_negative(config.lr) {
            return bad(format!("invalid learning rate {}", config.lr));
        }
        if !non_negative(config.momentum) {
            return bad(format!("invalid momentum {}", config.momentum));
        }
        if !non_negative(config.weight_decay) {
            return bad(format!("invalid weight_decay {}", config.weight_decay));
        }
        if config.nesterov && !(config.momentum > 0.0 && config.dampening == 0.0) {
            return bad("Nesterov momentum requires a momentum and zero dampening".into());
        }
        let groups = build_groups(params.into_param_groups(), config.lr, config.weight_decay)?;
        let state = groups.iter().map(|g| vec![None; g.params.len()]).collect();
        Ok(Sgd { groups, config, state })
    }
}

/// [`kernel`] for parameters on a GPU (see [`DeviceKernel`]): `k = [fresh, lr, weight decay,
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

impl Optimizer for Sgd {
    fn step(&mut self) {
        let c = self.config;
        let n_bufs = usize::from(c.momentum != 0.0);
        for (g, st) in self.groups.iter().zip(&mut self.state) {
            let (lr, wd) = (g.lr, g.weight_decay);
            for ((_, p), s) in g.params.iter().zip(st.iter_mut()) {
                update_param(
                    p,
                    s,
                    n_bufs,
                    &|pv, gv, b, fresh| {
                        with_avx2(
                            #[inline(always)]
                            || kernel(pv, gv, b, fresh, lr, wd, &c),
                        )
                    },
                    &|pv, gv, b, fresh| {
                        with_avx2(
                            #[inline(always)]
                            || kernel(pv, gv, b, fresh, lr, wd, &c),
                        )
                    },
                    &DeviceKernel {
                        body: DEVICE_KERNEL,
                        scalars: vec![lr, wd, c.momentum, 1.0 - c.dampening, f64::from(u8::from(c.nesterov))],
                    },
                );
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

    fn state_dict(&self) -> OptimizerState {
        let mut tensors = StateDict::default();
        for (g, st) in self.groups.iter().zip(&self.state) {
            for ((name, p), s) in g.params.iter().zip(st) {
                if let (Some(b), true) = (s, self.config.momentum != 0.0) {
                    bufs_to_tensors(name, &["momentum_buffer"], b, p.shape(), &mut tensors);
                }
            }
        }
        OptimizerState { tensors, lrs: self.groups.iter().map(|g| g.lr).collect() }
    }

    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()> {
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
        for (g, &lr) in self.groups.iter_mut().zip(&state.lrs) {
            g.lr = lr;
        }
        Ok(())
    }
}
