//! Adam and AdamW.

use super::{
    bufs_from_tensors, bufs_to_tensors, build_groups, check_state_paths, hyper_entry, non_negative, read_hyper,
    step_from_tensor, update_param, Group, IntoParamGroups, Optimizer, OptimizerState,
};
use crate::backend::update::{UpdateRule, UpdateState};
use crate::dtype::FloatElement;
use crate::error::{Error, Result};
use crate::module::Parameter;
use crate::state_dict::StateDict;
use crate::tensor::Tensor;

/// Adam hyper-parameters (PyTorch's defaults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamConfig {
    /// Learning rate (default 1e-3).
    pub lr: f64,
    /// Decay rates of the first and second moment estimates (default (0.9, 0.999)).
    pub betas: (f64, f64),
    /// Added to the denominator (default 1e-8).
    pub eps: f64,
    /// L2 penalty added to the gradient (default 0).
    pub weight_decay: f64,
    /// Use the maximum of past second moments (default false).
    pub amsgrad: bool,
}

impl Default for AdamConfig {
    fn default() -> Self {
        AdamConfig { lr: 1e-3, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 0.0, amsgrad: false }
    }
}

/// AdamW hyper-parameters (PyTorch's defaults: weight decay 0.01, decoupled).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConfig {
    /// Learning rate (default 1e-3).
    pub lr: f64,
    /// Moment decay rates (default (0.9, 0.999)).
    pub betas: (f64, f64),
    /// Added to the denominator (default 1e-8).
    pub eps: f64,
    /// Decoupled weight decay (default 0.01).
    pub weight_decay: f64,
    /// Use the maximum of past second moments (default false).
    pub amsgrad: bool,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig { lr: 1e-3, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 0.01, amsgrad: false }
    }
}

/// Shared implementation of Adam (coupled L2) and AdamW (decoupled decay).
struct AdamCore {
    groups: Vec<Group>,
    betas: (f64, f64),
    eps: f64,
    amsgrad: bool,
    decoupled: bool,
    state: Vec<Vec<(Option<UpdateState>, u64)>>,
}

const BUFS: [&str; 3] = ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"];

/// The names Adam and AdamW keep one value of for all groups, and per group, in
/// [`OptimizerState::hyper_params`].
const WIDE: [&str; 5] = ["beta1", "beta2", "eps", "amsgrad", "decoupled_weight_decay"];
const PER_GROUP: [&str; 1] = ["weight_decay"];

/// What `Adam::try_new` and `AdamW::try_new` refuse, as PyTorch does (also checked on the
/// hyper-parameters of a loaded state).
fn check_config(lr: f64, (b1, b2): (f64, f64), eps: f64, weight_decay: f64) -> std::result::Result<(), String> {
    if !non_negative(lr) {
        return Err(format!("invalid learning rate {lr}"));
    }
    if !non_negative(eps) {
        return Err(format!("invalid epsilon {eps}"));
    }
    if !((0.0..1.0).contains(&b1) && (0.0..1.0).contains(&b2)) {
        return Err(format!("invalid betas {:?}", (b1, b2)));
    }
    if !non_negative(weight_decay) {
        return Err(format!("invalid weight_decay {weight_decay}"));
    }
    Ok(())
}

/// One step of Adam or AdamW for one group, for the backend's update ([`UpdateRule`]).
#[derive(Clone, Copy)]
struct AdamRule {
    /// The step count, this step included.
    step: u64,
    lr: f64,
    wd: f64,
    betas: (f64, f64),
    eps: f64,
    amsgrad: bool,
    decoupled: bool,
}

impl UpdateRule for AdamRule {
    const NAME: &'static str = "Adam";

    #[inline(always)]
    fn cpu<T: FloatElement>(&self, p: &mut [T], g: &[T], state: &mut [&mut [T]], _fresh: bool) {
        kernel(p, g, state, self)
    }

    fn wgsl(&self) -> (&'static str, Vec<f64>) {
        device_kernel(self)
    }
}

/// [`kernel`] for parameters on a GPU (see [`UpdateRule::wgsl`]), with the scalars the CPU
/// kernel derives: `k = [fresh, step size, sqrt(1 - b2^t), 1 - b1, 1 - b2, eps, b2,
/// 1 - lr wd, wd, decoupled, amsgrad]`.
fn device_kernel(c: &AdamRule) -> (&'static str, Vec<f64>) {
    let (step, lr, wd) = (c.step, c.lr, c.wd);
    let (b1, b2) = c.betas;
    let pow = |b: f64| i32::try_from(step).map_or_else(|_| b.powf(step as f64), |t| b.powi(t));
    let flag = |b: bool| f64::from(u8::from(b));
    (
        "
    var gi = g;
    if (k[9] != 0.0) { if (k[8] != 0.0) { p = p * k[7]; } } else if (k[8] != 0.0) { gi = gi + k[8] * p; }
    b0 = b0 + k[3] * (gi - b0);
    b1 = b1 * k[6] + k[4] * gi * gi;
    var vv = b1;
    if (k[10] != 0.0) { if (b1 > b2) { b2 = b1; } vv = b2; }
    let denom = sqrt(vv) / k[2] + k[5];
    p = p - k[1] * (b0 / denom);
",
        vec![
            lr / (1.0 - pow(b1)),
            (1.0 - pow(b2)).sqrt(),
            1.0 - b1,
            1.0 - b2,
            c.eps,
            b2,
            1.0 - lr * wd,
            wd,
            flag(c.decoupled),
            flag(c.amsgrad),
        ],
    )
}

// Inlined whole into the CPU backend's AVX2 copy (`backend::cpu::update`), with every
// slice cut to one length and the options tested outside the loop, so that the loop
// vectorizes (sqrt and divide included): out of line, or indexing slices of unknown
// lengths, it runs scalar. `compare.py`'s GPT-2 training-step rows include this step.
#[inline(always)]
fn kernel<T: FloatElement>(p: &mut [T], g: &[T], bufs: &mut [&mut [T]], c: &AdamRule) {
    let (step, lr, wd) = (c.step, c.lr, c.wd);
    let (b1, b2) = c.betas;
    // `powi` (as PyTorch's results were matched with) while the exponent fits an i32;
    // beyond, `powf`, never a wrapped exponent.
    let pow = |b: f64| i32::try_from(step).map_or_else(|_| b.powf(step as f64), |t| b.powi(t));
    let bc1 = 1.0 - pow(b1);
    let bc2_sqrt = T::from_f64((1.0 - pow(b2)).sqrt());
    let step_size = T::from_f64(lr / bc1);
    let (w1, w2, eps) = (T::from_f64(1.0 - b1), T::from_f64(1.0 - b2), T::from_f64(c.eps));
    let b2t = T::from_f64(b2);
    let decay = T::from_f64(1.0 - lr * wd);
    let l2 = T::from_f64(wd);
    let n = p.len();
    let (m, rest) = bufs.split_at_mut(1);
    let (v, vmax) = rest.split_at_mut(1);
    let (g, m, v) = (&g[..n], &mut m[0][..n], &mut v[0][..n]);
    if c.amsgrad {
        let vmax = &mut vmax[0][..n];
        for i in 0..n {
            let mut gi = g[i];
            if c.decoupled {
                if wd != 0.0 {
                    p[i] = p[i] * decay;
                }
            } else if wd != 0.0 {
                gi = gi + l2 * p[i];
            }
            m[i] = m[i] + w1 * (gi - m[i]);
            v[i] = v[i] * b2t + w2 * gi * gi;
            if v[i] > vmax[i] {
                vmax[i] = v[i];
            }
            let denom = vmax[i].sqrt() / bc2_sqrt + eps;
            p[i] = p[i] - step_size * (m[i] / denom);
        }
        return;
    }
    #[inline(always)]
    fn moments<T: FloatElement>(m: &mut T, v: &mut T, gi: T, (w1, w2, b2t): (T, T, T)) {
        *m = *m + w1 * (gi - *m);
        *v = *v * b2t + w2 * gi * gi;
    }
    let k = (w1, w2, b2t);
    match (c.decoupled, wd != 0.0) {
        (true, true) => {
            for i in 0..n {
                p[i] = p[i] * decay;
                moments(&mut m[i], &mut v[i], g[i], k);
                p[i] = p[i] - step_size * (m[i] / (v[i].sqrt() / bc2_sqrt + eps));
            }
        }
        (false, true) => {
            for i in 0..n {
                moments(&mut m[i], &mut v[i], g[i] + l2 * p[i], k);
                p[i] = p[i] - step_size * (m[i] / (v[i].sqrt() / bc2_sqrt + eps));
            }
        }
        (_, false) => {
            for i in 0..n {
                moments(&mut m[i], &mut v[i], g[i], k);
                p[i] = p[i] - step_size * (m[i] / (v[i].sqrt() / bc2_sqrt + eps));
            }
        }
    }
}

impl AdamCore {
    fn step(&mut self) {
        for gi in 0..self.groups.len() {
            let (lr, wd) = (self.groups[gi].lr, self.groups[gi].weight_decay);
            for pi in 0..self.groups[gi].params.len() {
                let p = self.groups[gi].params[pi].1.clone();
                if !p.requires_grad() || p.grad().is_none() {
                    continue;
                }
                super::check_steppable(&p);
                let mut slot = self.state[gi][pi].0.take();
                let step = self.state[gi][pi].1.saturating_add(1);
                let rule = AdamRule {
                    step,
                    lr,
                    wd,
                    betas: self.betas,
                    eps: self.eps,
                    amsgrad: self.amsgrad,
                    decoupled: self.decoupled,
                };
                update_param(&p, &mut slot, 3, &rule);
                self.state[gi][pi] = (slot, step);
            }
        }
    }

    fn state_dict(&self) -> OptimizerState {
        let mut tensors = StateDict::default();
        let names: &[&str] = if self.amsgrad { &BUFS } else { &BUFS[..2] };
        for (g, st) in self.groups.iter().zip(&self.state) {
            for ((name, p), (b, step)) in g.params.iter().zip(st) {
                if let Some(b) = b {
                    // f64: exact for every count up to `MAX_COUNTER` (f32 stops at 2^24).
                    tensors.insert(format!("{name}.step"), Tensor::from_vec_f64(vec![*step as f64], &[]));
                    bufs_to_tensors(name, names, b, p.shape(), &mut tensors);
                }
            }
        }
        let flag = |b: bool| f64::from(u8::from(b));
        let hyper_params = self
            .groups
            .iter()
            .map(|g| {
                let pairs = [
                    ("beta1", self.betas.0),
                    ("beta2", self.betas.1),
                    ("eps", self.eps),
                    ("amsgrad", flag(self.amsgrad)),
                    ("decoupled_weight_decay", flag(self.decoupled)),
                    ("weight_decay", g.weight_decay),
                ];
                hyper_entry(&pairs, g.initial_lr)
            })
            .collect();
        OptimizerState { tensors, lrs: self.groups.iter().map(|g| g.lr).collect(), hyper_params }
    }

    fn name(&self) -> &'static str {
        if self.decoupled {
            "AdamW"
        } else {
            "Adam"
        }
    }

    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()> {
        let (mut betas, mut eps, mut amsgrad) = (self.betas, self.eps, self.amsgrad);
        let mut decays: Vec<f64> = self.groups.iter().map(|g| g.weight_decay).collect();
        let mut initial: Vec<Option<f64>> = self.groups.iter().map(|g| g.initial_lr).collect();
        let flags = ["amsgrad", "decoupled_weight_decay"];
        if let Some(h) = read_hyper(state, self.groups.len(), &WIDE, &PER_GROUP, &flags)? {
            if (h.wide["decoupled_weight_decay"] == 1.0) != self.decoupled {
                let saved = if self.decoupled { "Adam" } else { "AdamW" };
                return Err(Error::OptimizerState(format!(
                    "the state is an {saved}'s (`decoupled_weight_decay` is {}), this optimizer an {}: resume it \
                     with an {saved}",
                    h.wide["decoupled_weight_decay"],
                    self.name()
                )));
            }
            (betas, eps, amsgrad) = ((h.wide["beta1"], h.wide["beta2"]), h.wide["eps"], h.wide["amsgrad"] == 1.0);
            decays = h.per_group.iter().map(|g| g["weight_decay"]).collect();
            initial = h.initial_lrs;
            for &wd in &decays {
                check_config(0.0, betas, eps, wd)
                    .map_err(|e| Error::OptimizerState(format!("the state's hyper-parameters: {e}")))?;
            }
        }
        let names: &[&str] = if amsgrad { &BUFS } else { &BUFS[..2] };
        let mut suffixes = names.to_vec();
        suffixes.push("step");
        check_state_paths(&self.groups, state, &suffixes)?;
        let mut new_state = Vec::new();
        for g in &self.groups {
            let mut st = Vec::new();
            for (name, p) in &g.params {
                let b = bufs_from_tensors(name, names, p, &state.tensors)?;
                let key = format!("{name}.step");
                let step = match (&b, state.tensors.get(&key)) {
                    (None, None) => 0,
                    (None, Some(_)) => {
                        return Err(Error::OptimizerState(format!("`{key}` without `{name}.{}`", names[0])))
                    }
                    (Some(_), Some(t)) => step_from_tensor(&key, t)?,
                    (Some(_), None) => return Err(Error::OptimizerState(format!("missing `{key}`"))),
                };
                let b = b.map(|b| pad_bufs(b, p.numel()));
                st.push((b, step));
            }
            new_state.push(st);
        }
        self.state = new_state;
        (self.betas, self.eps, self.amsgrad) = (betas, eps, amsgrad);
        for (((g, &lr), wd), initial_lr) in self.groups.iter_mut().zip(&state.lrs).zip(decays).zip(initial) {
            (g.lr, g.weight_decay, g.initial_lr) = (lr, wd, initial_lr);
        }
        Ok(())
    }
}

/// Adds the unused `max_exp_avg_sq` slot when loading a non-amsgrad state.
fn pad_bufs(mut b: UpdateState, n: usize) -> UpdateState {
    b.pad_to(3, n);
    b
}

macro_rules! adam_optimizer {
    ($(#[$doc:meta])* $name:ident, $config:ident, $decoupled:expr) => {
        $(#[$doc])*
        pub struct $name(AdamCore);

        impl $name {
            /// An optimizer over `params` (`Vec<Parameter>`, `named_parameters()`, or groups).
            ///
            /// # Panics
            #[doc = concat!("Where [`try_new`](", stringify!($name), "::try_new) returns an error, with its message.")]
            #[track_caller]
            pub fn new(params: impl IntoParamGroups, config: $config) -> Self {
                $name::try_new(params, config).unwrap_or_else(|e| panic!("{e}"))
            }

            #[doc = concat!("Like [`new`](", stringify!($name), "::new), returning an error instead of panicking.")]
            ///
            /// # Errors
            /// [`Error::OptimizerConfig`] on invalid hyper-parameters (negative rates or
            /// epsilon, betas outside `[0, 1)`), as PyTorch raises;
            /// [`Error::ParamGroupConflict`] when a parameter is in two groups or two
            /// parameters share a name (see [`ParamGroup`](super::ParamGroup)).
            pub fn try_new(params: impl IntoParamGroups, config: $config) -> Result<Self> {
                check_config(config.lr, config.betas, config.eps, config.weight_decay)
                    .map_err(|reason| Error::OptimizerConfig { optimizer: stringify!($name), reason })?;
                let groups = build_groups(stringify!($name), params.into_param_groups(), config.lr, config.weight_decay)?;
                let state = groups.iter().map(|g| vec![(None, 0); g.params.len()]).collect();
                Ok($name(AdamCore { groups, betas: config.betas, eps: config.eps, amsgrad: config.amsgrad, decoupled: $decoupled, state }))
            }
        }

        impl Optimizer for $name {
            fn step(&mut self) {
                self.0.step()
            }
            fn zero_grad(&self) {
                self.0.groups.iter().flat_map(|g| &g.params).for_each(|(_, p)| p.zero_grad());
            }
            fn named_parameters(&self) -> Vec<(String, Parameter)> {
                self.0.groups.iter().flat_map(|g| g.params.iter().cloned()).collect()
            }
            fn num_groups(&self) -> usize {
                self.0.groups.len()
            }
            fn group_lr(&self, i: usize) -> f64 {
                self.0.groups[i].lr
            }
            fn set_group_lr(&mut self, i: usize, lr: f64) {
                self.0.groups[i].lr = lr;
            }
            fn group_initial_lr(&self, i: usize) -> Option<f64> {
                self.0.groups[i].initial_lr
            }
            fn set_group_initial_lr(&mut self, i: usize, lr: f64) {
                self.0.groups[i].initial_lr = Some(lr);
            }
            fn state_dict(&self) -> OptimizerState {
                self.0.state_dict()
            }
            fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()> {
                self.0.load_state_dict(state)
            }
        }
    };
}

adam_optimizer!(
    /// Adam (PyTorch's `torch.optim.Adam`): `m = b1 m + (1 - b1) g`,
    /// `v = b2 v + (1 - b2) g^2`, `p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`,
    /// with weight decay added to the gradient.
    Adam, AdamConfig, false
);
adam_optimizer!(
    /// AdamW (PyTorch's `torch.optim.AdamW`): Adam with decoupled weight decay,
    /// `p *= 1 - lr * weight_decay` before the Adam update.
    AdamW, AdamWConfig, true
);
