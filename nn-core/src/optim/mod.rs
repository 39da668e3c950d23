//! Optimizers (SGD, Adam, AdamW) with parameter groups, gradient clipping and learning-rate
//! schedulers, with PyTorch's update rules step for step.
//!
//! Optimizers hold [`Parameter`] handles — the same tensors the model reads — and update
//! them in place. Frozen parameters (`requires_grad == false`) and parameters without a
//! gradient are skipped. State is keyed by parameter *path* (`"encoder.fc.weight"`) when the
//! optimizer is built from `named_parameters()`, so a checkpoint survives reordering.
//!
//! Loss scaling for mixed precision, which wraps an optimizer's step, is
//! [`amp::GradScaler`](crate::amp::GradScaler).

mod adam;
mod clip;
mod scheduler;
mod sgd;

use std::collections::{BTreeMap, HashMap};

pub use adam::{Adam, AdamConfig, AdamW, AdamWConfig};
pub use clip::{clip_coefficient, clip_grad_norm_};
pub use scheduler::{CosineAnnealingLR, LinearLR, LrScheduler, SchedulerState, StepLR};
pub use sgd::{Sgd, SgdConfig};

use crate::error::{Error, Result};
use crate::module::Parameter;
use crate::state_dict::StateDict;
// Optimizer state is kept in host vectors and updated by host closures: the one place
// outside `backend` that reads CPU buffers (moving the state onto a device is the GPU
// backend's part).
use crate::backend::{CpuStorage, Storage};
use crate::tensor::Tensor;

/// The largest epoch, step or scheduler count a checkpoint (or an optimizer state) may
/// hold: 2^53, up to which every whole number is exact in an `f64` (where PyTorch keeps
/// its counts). No training run gets near it; a larger count is a corrupt file, and
/// refusing it keeps every `+ 1` on a loaded counter from overflowing.
pub const MAX_COUNTER: u64 = 1 << 53;

/// A set of parameters with its own hyper-parameters (PyTorch's param groups), e.g. a
/// smaller learning rate for a pretrained backbone.
///
/// Optimizer state is keyed by each parameter's name (`opt.state_dict()` holds
/// `"<name>.exp_avg"`, ...), so the names must be unique across all groups. A sub-module's
/// `named_parameters()` are named relative to that sub-module (`weight`, `bias`): build
/// its group with [`with_prefix`](ParamGroup::with_prefix), which restores the full dotted
/// names, the same ones the model's own `named_parameters()` uses:
///
/// ```
/// use nn_core::optim::{Adam, AdamConfig, Optimizer, ParamGroup};
/// use nn_core::{Module, Parameter, Tensor};
///
/// #[derive(Module)]
/// struct Fc {
///     #[param] weight: Parameter,
///     #[param] bias: Parameter,
/// }
///
/// #[derive(Module)]
/// struct Net {
///     #[module] encoder: Fc,
///     #[module] head: Fc,
/// }
///
/// # fn fc(o: usize, i: usize) -> Fc { Fc { weight: Parameter::new(Tensor::zeros(&[o, i])), bias: Parameter::new(Tensor::zeros(&[o])) } }
/// # fn main() -> Result<(), nn_core::Error> {
/// let model = Net { encoder: fc(8, 4), head: fc(2, 8) };
/// let opt = Adam::try_new(
///     vec![
///         ParamGroup::with_prefix("encoder", model.get_submodule("encoder")?.named_parameters()).lr(1e-4),
///         ParamGroup::with_prefix("head", model.get_submodule("head")?.named_parameters()),
///     ],
///     AdamConfig { lr: 1e-3, ..Default::default() },
/// )?;
/// assert_eq!((opt.group_lr(0), opt.group_lr(1)), (1e-4, 1e-3));
///
/// // Without the prefix both groups name their tensors `weight` and `bias`: refused.
/// let err = Adam::try_new(
///     vec![
///         ParamGroup::new(model.get_submodule("encoder")?.named_parameters()),
///         ParamGroup::new(model.get_submodule("head")?.named_parameters()),
///     ],
///     AdamConfig::default(),
/// )
/// .err()
/// .unwrap();
/// assert!(err.to_string().contains("the name `weight` is used in group 0 and in group 1"));
/// # Ok(())
/// # }
/// ```
///
/// Names can also be given by hand:
///
/// ```
/// use nn_core::optim::{ParamGroup, Sgd, SgdConfig, Optimizer};
/// use nn_core::{Parameter, Tensor};
/// let backbone = vec![("fc1.weight".to_string(), Parameter::new(Tensor::ones(&[2])))];
/// let head = vec![("head.weight".to_string(), Parameter::new(Tensor::ones(&[2])))];
/// let opt = Sgd::new(
///     vec![ParamGroup::new(backbone).lr(1e-4), ParamGroup::new(head)],
///     SgdConfig { lr: 1e-2, ..Default::default() },
/// );
/// assert_eq!((opt.group_lr(0), opt.group_lr(1)), (1e-4, 1e-2));
/// ```
#[derive(Clone)]
pub struct ParamGroup {
    /// `(path, parameter)` pairs.
    pub params: Vec<(String, Parameter)>,
    /// Learning rate for this group (the optimizer's default when `None`).
    pub lr: Option<f64>,
    /// Weight decay for this group (the optimizer's default when `None`).
    pub weight_decay: Option<f64>,
}

impl ParamGroup {
    /// A group with the optimizer's default hyper-parameters.
    pub fn new(params: Vec<(String, Parameter)>) -> Self {
        ParamGroup { params, lr: None, weight_decay: None }
    }

    /// A group whose names are `"<prefix>.<name>"`: the full dotted names of a
    /// sub-module's parameters, given the sub-module's path and its `named_parameters()`.
    /// An empty prefix leaves the names as they are.
    ///
    /// ```
    /// use nn_core::optim::ParamGroup;
    /// use nn_core::{Parameter, Tensor};
    /// let g = ParamGroup::with_prefix("encoder.0", vec![("weight".into(), Parameter::new(Tensor::ones(&[2])))]);
    /// assert_eq!(g.params[0].0, "encoder.0.weight");
    /// ```
    pub fn with_prefix(prefix: &str, params: Vec<(String, Parameter)>) -> Self {
        if prefix.is_empty() {
            return ParamGroup::new(params);
        }
        ParamGroup::new(params.into_iter().map(|(name, p)| (format!("{prefix}.{name}"), p)).collect())
    }

    /// Sets the group's learning rate.
    pub fn lr(mut self, lr: f64) -> Self {
        self.lr = Some(lr);
        self
    }

    /// Sets the group's weight decay.
    pub fn weight_decay(mut self, wd: f64) -> Self {
        self.weight_decay = Some(wd);
        self
    }
}

/// What an optimizer can be built from: plain parameters (named by position, `"0"`,
/// `"1"`, ...), named parameters (named by path), or explicit groups.
pub trait IntoParamGroups {
    /// The groups.
    fn into_param_groups(self) -> Vec<ParamGroup>;
}

impl IntoParamGroups for Vec<Parameter> {
    fn into_param_groups(self) -> Vec<ParamGroup> {
        vec![ParamGroup::new(self.into_iter().enumerate().map(|(i, p)| (i.to_string(), p)).collect())]
    }
}

impl IntoParamGroups for Vec<(String, Parameter)> {
    fn into_param_groups(self) -> Vec<ParamGroup> {
        vec![ParamGroup::new(self)]
    }
}

impl IntoParamGroups for Vec<ParamGroup> {
    fn into_param_groups(self) -> Vec<ParamGroup> {
        self
    }
}

/// A group as the optimizer holds it.
pub(crate) struct Group {
    pub(crate) params: Vec<(String, Parameter)>,
    pub(crate) lr: f64,
    pub(crate) weight_decay: f64,
    /// See [`Optimizer::group_initial_lr`].
    pub(crate) initial_lr: Option<f64>,
}

/// Checks parameter groups as every optimizer here checks them when it is built: refuses
/// the same parameter twice (two `Parameter`s on one storage too: both were stepped, a
/// double update) and two parameters under one name (their state would share one key),
/// anywhere in or across groups, and a group's own learning rate or weight decay that is
/// negative or not finite (a negative rate ascends, a NaN one makes the weights NaN, and
/// `load_state_dict` would refuse the run's own state). `optimizer` names the caller in
/// the error.
///
/// For optimizers and wrappers written elsewhere: a wrapper that splits the groups before
/// building an optimizer per part (ZeRO's partition over ranks) checks the whole here
/// first, where a duplicate split across two parts would be seen by neither.
///
/// ```
/// use nn_core::optim::{check_param_groups, ParamGroup};
/// use nn_core::{Parameter, Tensor};
/// let w = Parameter::new(Tensor::zeros(&[2]));
/// let groups = vec![
///     ParamGroup::new(vec![("w".to_string(), w.clone())]),
///     ParamGroup::new(vec![("w_again".to_string(), w)]),
/// ];
/// let err = check_param_groups("MyOptimizer", &groups).unwrap_err();
/// assert!(err.to_string().contains("w_again"), "{err}");
/// ```
///
/// # Errors
/// [`Error::ParamGroupConflict`] for a parameter twice or a name twice,
/// [`Error::OptimizerConfig`] for a group's rate or weight decay.
pub fn check_param_groups(optimizer: &'static str, groups: &[ParamGroup]) -> Result<()> {
    // By storage, not by handle: two `Parameter`s on one storage (`Parameter::new` of one
    // tensor twice, views of one buffer) were both stepped, a double update.
    let mut by_id: HashMap<*const crate::tensor::StorageSlot, (usize, &str)> = HashMap::new();
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    // PyTorch's `ValueError: optimizer got an empty parameter list`: an optimizer that can
    // step nothing is a model whose parameters were not passed (a lazy layer listed before
    // its first forward, `parameters()` of the wrong module), and would train nothing.
    if groups.iter().all(|g| g.params.is_empty()) {
        return Err(Error::OptimizerConfig {
            optimizer,
            reason: "got an empty parameter list: pass the model's `parameters()` (or parameter groups holding them)"
                .into(),
        });
    }
    for (gi, g) in groups.iter().enumerate() {
        for (what, v) in [("learning rate", g.lr), ("weight_decay", g.weight_decay)] {
            if let Some(v) = v.filter(|v| !non_negative(*v)) {
                return Err(Error::OptimizerConfig { optimizer, reason: format!("invalid {what} {v} in group {gi}") });
            }
        }
        for (name, p) in &g.params {
            let slot = std::sync::Arc::as_ptr(&p.slot());
            if let Some(&(first_group, first_key)) = by_id.get(&slot) {
                return Err(Error::ParamGroupConflict {
                    key: name.clone(),
                    first_key: first_key.to_string(),
                    first_group,
                    second_group: gi,
                    same_parameter: true,
                });
            }
            if let Some(&first_group) = by_name.get(name.as_str()) {
                return Err(Error::ParamGroupConflict {
                    key: name.clone(),
                    first_key: name.clone(),
                    first_group,
                    second_group: gi,
                    same_parameter: false,
                });
            }
            by_id.insert(slot, (gi, name));
            by_name.insert(name, gi);
        }
    }
    Ok(())
}

/// Builds the groups of optimizer `optimizer` after [`check_param_groups`].
pub(crate) fn build_groups(
    optimizer: &'static str,
    groups: Vec<ParamGroup>,
    lr: f64,
    weight_decay: f64,
) -> Result<Vec<Group>> {
    check_param_groups(optimizer, &groups)?;
    Ok(groups
        .into_iter()
        .map(|g| Group {
            params: g.params,
            lr: g.lr.unwrap_or(lr),
            weight_decay: g.weight_decay.unwrap_or(weight_decay),
            initial_lr: None,
        })
        .collect())
}

/// `x >= 0` and finite: PyTorch's hyper-parameter checks (`0.0 <= x`), which also refuse
/// NaN; infinity too here (an infinite `eps` made Adam a silent no-op, an infinite rate
/// NaN weights), as `load_state_dict` refuses it.
pub(crate) fn non_negative(x: f64) -> bool {
    x >= 0.0 && x.is_finite()
}

/// An optimizer: `step` updates the parameters from their gradients.
pub trait Optimizer {
    /// One update of every parameter that has a gradient and requires grad.
    fn step(&mut self);

    /// Clears the gradients of every parameter.
    fn zero_grad(&self);

    /// Every parameter this optimizer updates, group by group, under the name its state
    /// is keyed by (`"<path>"` in `"<path>.exp_avg"`). What [`GradScaler`] unscales and
    /// checks for inf/NaN.
    ///
    /// [`GradScaler`]: crate::amp::GradScaler
    ///
    /// ```
    /// use nn_core::optim::{Optimizer, Sgd, SgdConfig};
    /// use nn_core::{Parameter, Tensor};
    /// let w = Parameter::new(Tensor::ones(&[2]));
    /// let opt = Sgd::new(vec![("fc.weight".to_string(), w.clone())], SgdConfig::default());
    /// let params = opt.named_parameters();
    /// assert_eq!(params.len(), 1);
    /// assert_eq!((params[0].0.as_str(), params[0].1.id()), ("fc.weight", w.id()));
    /// ```
    fn named_parameters(&self) -> Vec<(String, Parameter)>;

    /// [`named_parameters`](Optimizer::named_parameters) without the names (for
    /// [`clip_grad_norm_`]).
    fn parameters(&self) -> Vec<Parameter> {
        self.named_parameters().into_iter().map(|(_, p)| p).collect()
    }

    /// Number of parameter groups.
    fn num_groups(&self) -> usize;

    /// The learning rate of group `i`.
    fn group_lr(&self, i: usize) -> f64;

    /// Sets the learning rate of group `i` (what schedulers do).
    fn set_group_lr(&mut self, i: usize, lr: f64);

    /// The learning rate group `i` had when the first scheduler was attached to it
    /// (PyTorch's `group["initial_lr"]`): every later scheduler starts from it, so a
    /// warm-up and a decay built one after the other share one base. `None` until a
    /// scheduler is attached; saved and restored with the state.
    fn group_initial_lr(&self, i: usize) -> Option<f64>;

    /// Sets [`group_initial_lr`](Optimizer::group_initial_lr) (what a scheduler does when
    /// it is attached to a group that has none).
    fn set_group_initial_lr(&mut self, i: usize, lr: f64);

    /// The optimizer's state: per-parameter buffers keyed `"<path>.<buffer>"`, and the
    /// hyper-parameters that schedulers change.
    fn state_dict(&self) -> OptimizerState;

    /// Restores a state saved by [`state_dict`](Optimizer::state_dict), matching
    /// parameters by path.
    ///
    /// The optimizer continues with the state's hyper-parameters
    /// ([`OptimizerState::hyper_params`]: momentum, betas, weight decay, ...), as
    /// PyTorch's `load_state_dict` restores its `param_groups`: buffers saved under a
    /// momentum of 0.9 are never read as if the momentum were another. To change one on
    /// purpose, edit the state before loading it.
    ///
    /// Every entry is checked before anything is kept: the group count, finite and
    /// non-negative learning rates, hyper-parameters of this kind of optimizer that it
    /// accepts when built (an Adam state is refused by an AdamW), buffers on the CPU with a
    /// floating dtype, the parameter's shape and finite values (non-negative for second
    /// moments), and step counts that are whole numbers in `0..=`[`MAX_COUNTER`].
    /// A state holding NaN or infinite buffers (a diverged run) is refused.
    ///
    /// # Errors
    /// [`Error::OptimizerState`] naming the offending key when the state names parameters
    /// this optimizer does not hold or fails one of the checks above; the optimizer is
    /// unchanged then.
    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()>;
}

/// A serialisable optimizer state.
#[derive(Clone, Debug, Default)]
pub struct OptimizerState {
    /// Per-parameter buffers, keyed `"<path>.<buffer>"` (`momentum_buffer`, `exp_avg`,
    /// `exp_avg_sq`, `step`).
    pub tensors: StateDict,
    /// Learning rate of each group.
    pub lrs: Vec<f64>,
    /// Each group's other hyper-parameters, under PyTorch's `param_groups` names (its
    /// `betas` pair as `beta1` and `beta2`):
    /// [`Sgd`] keeps `momentum`, `dampening`, `nesterov` (0 or 1) and `weight_decay`;
    /// [`Adam`] and [`AdamW`] keep `beta1`, `beta2`, `eps`, `weight_decay`, `amsgrad` and
    /// `decoupled_weight_decay` (flags, 0 or 1; the last tells an AdamW state from an Adam
    /// one); each group may also hold `initial_lr` (see
    /// [`Optimizer::group_initial_lr`]).
    ///
    /// Empty in a state that records none (one saved before nn recorded them, or built by
    /// hand): loading it keeps the optimizer's own hyper-parameters, and refuses buffers the
    /// optimizer as built does not keep (momentum buffers for an `Sgd` without momentum).
    pub hyper_params: Vec<HyperParams>,
}

/// One parameter group's hyper-parameters by name (see [`OptimizerState::hyper_params`]).
pub type HyperParams = BTreeMap<String, f64>;

/// The name of the per-group entry that holds [`Optimizer::group_initial_lr`].
pub(crate) const INITIAL_LR: &str = "initial_lr";

/// A state's hyper-parameters, checked for an optimizer that keeps the names `wide` (one
/// value for all groups: nn's optimizers hold them in their config) and `per_group`.
pub(crate) struct SavedHyper {
    /// The value of each of `wide`, the same in every group.
    pub wide: HashMap<&'static str, f64>,
    /// The values of `per_group`, group by group.
    pub per_group: Vec<HashMap<&'static str, f64>>,
    /// Each group's `initial_lr`, where it has one.
    pub initial_lrs: Vec<Option<f64>>,
}

/// Reads `state.hyper_params` for an optimizer with `n_groups` groups keeping `wide` and
/// `per_group` (of which `flags` are 0 or 1): `None` when the state records none; an error
/// naming the entry when a group is missing, a name is missing or unknown (a state of
/// another kind of optimizer), a value is not finite, a flag is not 0 or 1, or a `wide`
/// value differs between groups. Ranges are the optimizer's to check.
pub(crate) fn read_hyper(
    state: &OptimizerState,
    n_groups: usize,
    wide: &[&'static str],
    per_group: &[&'static str],
    flags: &[&str],
) -> Result<Option<SavedHyper>> {
    if state.hyper_params.is_empty() {
        return Ok(None);
    }
    let bad = |msg: String| Err(Error::OptimizerState(msg));
    if state.hyper_params.len() != n_groups {
        return bad(format!(
            "`hyper_params` has {} parameter groups, this optimizer {n_groups}",
            state.hyper_params.len()
        ));
    }
    let kept = || wide.iter().chain(per_group).map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
    let mut saved = SavedHyper { wide: HashMap::new(), per_group: Vec::new(), initial_lrs: Vec::new() };
    for (i, h) in state.hyper_params.iter().enumerate() {
        if let Some(k) =
            h.keys().find(|k| !wide.contains(&k.as_str()) && !per_group.contains(&k.as_str()) && *k != INITIAL_LR)
        {
            return bad(format!(
                "`hyper_params[{i}]` has `{k}`, which this optimizer does not keep (it keeps {}): a state of \
                 another kind of optimizer?",
                kept()
            ));
        }
        if let Some((k, v)) = h.iter().find(|(_, v)| !v.is_finite()) {
            return bad(format!("`hyper_params[{i}].{k}` is {v}; a hyper-parameter is finite"));
        }
        if let Some((k, v)) = h.iter().find(|(k, v)| flags.contains(&k.as_str()) && **v != 0.0 && **v != 1.0) {
            return bad(format!("`hyper_params[{i}].{k}` is {v}; a flag is 0 or 1"));
        }
        let get = |k: &str| {
            h.get(k).copied().ok_or_else(|| Error::OptimizerState(format!("`hyper_params[{i}]` has no `{k}`")))
        };
        for &k in wide {
            let v = get(k)?;
            match saved.wide.get(k) {
                Some(&first) if first.to_bits() != v.to_bits() => {
                    return bad(format!(
                        "`hyper_params[{i}].{k}` is {v}, group 0's {first}: nn's optimizers keep one `{k}` for \
                         all groups"
                    ))
                }
                _ => saved.wide.insert(k, v),
            };
        }
        saved.per_group.push(per_group.iter().map(|&k| get(k).map(|v| (k, v))).collect::<Result<_>>()?);
        let initial = h.get(INITIAL_LR).copied();
        if let Some(v) = initial.filter(|v| *v < 0.0) {
            return bad(format!("`hyper_params[{i}].{INITIAL_LR}` is {v}; a learning rate is non-negative"));
        }
        saved.initial_lrs.push(initial);
    }
    Ok(Some(saved))
}

/// One group's hyper-parameters as [`OptimizerState::hyper_params`] holds them: the
/// `(name, value)` pairs, and the group's `initial_lr` where it has one.
pub(crate) fn hyper_entry(pairs: &[(&str, f64)], initial_lr: Option<f64>) -> HyperParams {
    let mut h: HyperParams = pairs.iter().map(|&(k, v)| (k.to_string(), v)).collect();
    if let Some(lr) = initial_lr {
        h.insert(INITIAL_LR.to_string(), lr);
    }
    h
}

/// Per-parameter optimizer buffers of one dtype.
#[derive(Clone, Debug)]
pub(crate) enum Bufs {
    F32(Vec<Vec<f32>>),
    F64(Vec<Vec<f64>>),
    /// On the parameter's GPU, in its dtype.
    #[cfg(feature = "gpu")]
    Gpu(Vec<crate::backend::GpuStorage>),
}

/// An optimizer's update of one element as WGSL statements, for parameters on a GPU: they
/// read and assign `p` (the parameter), read `g` (its gradient) and update the state `b0`,
/// `b1`, `b2`, with the scalars `k[0]`, `k[1]`, ... in the parameter's dtype (`k[0]` is 1
/// on the first step, when the state was just created).
#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
pub(crate) struct DeviceKernel<'a> {
    /// The statements.
    pub body: &'a str,
    /// `k[1..]`.
    pub scalars: Vec<f64>,
}

/// The dtype and device panics of [`update_param`], checked before an optimizer takes a
/// parameter's buffers out of its state: a caught panic there dropped them (Adam then kept
/// the step count and restarted the moments from zero, a far larger step).
#[track_caller]
pub(crate) fn check_steppable(p: &Parameter) {
    if !p.requires_grad() {
        return;
    }
    let Some(g) = p.grad() else { return };
    if !matches!(p.dtype(), crate::DType::F32 | crate::DType::F64) {
        panic!("optimizer: parameters must be f32 or f64, got {}", p.dtype());
    }
    if g.dtype() != p.dtype() {
        panic!("optimizer: parameter is {} but its gradient is {}", p.dtype(), g.dtype());
    }
    if p.device() == crate::Device::Meta || g.device() == crate::Device::Meta {
        panic!("optimizer: gradient of a meta parameter has no values");
    }
}

/// An update kernel for one dtype: `(param values, grad values, buffers, fresh buffers)`,
/// elementwise (a large parameter is updated in parts on the CPU team, each part a call).
pub(crate) type Kernel<'a, T> = dyn Fn(&mut [T], &[T], &mut [&mut [T]], bool) + Sync + 'a;

/// Runs `f(param values, grad values, buffers)` in place for one parameter, if it requires
/// grad and has a gradient. Buffers are created (zeros) on first use; when the parameter
/// has since been moved or cast (`to_device`, `to_dtype` on its module), they are moved and
/// cast with it, values kept ([`conform`]).
pub(crate) fn update_param(
    p: &Parameter,
    bufs: &mut Option<Bufs>,
    n_bufs: usize,
    f32_fn: &Kernel<'_, f32>,
    f64_fn: &Kernel<'_, f64>,
    device_kernel: &DeviceKernel<'_>,
) {
    if !p.requires_grad() {
        return;
    }
    let Some(g) = p.grad() else { return };
    #[cfg(feature = "gpu")]
    if let (crate::Device::Gpu(_), true) = (p.device(), p.is_contiguous()) {
        device_update(p, &g.contiguous(), bufs, n_bufs, device_kernel);
        return;
    }
    #[cfg(not(feature = "gpu"))]
    let _ = device_kernel;
    let g = g.contiguous();
    let gs = g.storage_arc();
    let Storage::Cpu(gc) = &*gs else { panic!("optimizer: gradient of a meta parameter has no values") };
    if !matches!(gc, CpuStorage::F32(_) | CpuStorage::F64(_)) {
        panic!("optimizer: parameters must be f32 or f64, got {}", gc.dtype());
    }
    let fresh = bufs.is_none();
    let n = p.numel();
    *bufs = Some(match bufs.take() {
        Some(b) => conform(b, n, gc.dtype(), crate::Device::Cpu),
        None if gc.dtype() == crate::DType::F64 => Bufs::F64(vec![vec![0.0; n]; n_bufs]),
        None => Bufs::F32(vec![vec![0.0; n]; n_bufs]),
    });
    let b = bufs.as_mut().expect("created above");
    if !p.is_contiguous() {
        // Rare (a strided leaf): update a contiguous copy and write it back.
        let tmp = p.held().contiguous();
        let q = Parameter::with_requires_grad(tmp.clone(), true);
        q.set_grad(Some(g.clone()));
        // Fresh buffers stay fresh (SGD's first momentum is the gradient itself).
        let mut bb = (!fresh).then(|| b.clone());
        update_param(&q, &mut bb, n_bufs, f32_fn, f64_fn, device_kernel);
        *b = bb.expect("kept");
        crate::no_grad(|| p.copy_(&tmp));
        return;
    }
    p.modify_storage("optimizer step", |pc, layout| {
        let r = layout.contiguous_range().expect("checked contiguous");
        let Storage::Cpu(pc) = pc else { unreachable!("modify_storage refuses the meta device") };
        match (pc, gc, b) {
            (CpuStorage::F32(pv), CpuStorage::F32(gv), Bufs::F32(bv)) => in_parts(&mut pv[r], gv, bv, fresh, f32_fn),
            (CpuStorage::F64(pv), CpuStorage::F64(gv), Bufs::F64(bv)) => in_parts(&mut pv[r], gv, bv, fresh, f64_fn),
            (pc, gc, _) => panic!("optimizer: parameter is {} but its gradient is {}", pc.dtype(), gc.dtype()),
        }
    });
}

/// Runs an elementwise update kernel over a parameter, its gradient and its buffers: in
/// parts on the CPU team when the parameter is large, else in one call.
fn in_parts<T: Send + Sync>(p: &mut [T], g: &[T], bufs: &mut [Vec<T>], fresh: bool, f: &Kernel<'_, T>) {
    use crate::backend::cpu::{elementwise, team};
    let mut all: Vec<&mut [T]> = std::iter::once(p).chain(bufs.iter_mut().map(|b| &mut b[..])).collect();
    if !elementwise::split(g.len(), elementwise::PAR_THRESHOLD) {
        let (p, bufs) = all.split_first_mut().expect("the parameter is first");
        return f(p, g, bufs, fresh);
    }
    team::for_chunks_n(&mut all, team::GRAIN, |q, parts| {
        let (p, bufs) = parts.split_first_mut().expect("the parameter is first");
        f(p, &g[q * team::GRAIN..][..p.len()], bufs, fresh)
    });
}

/// Buffers moved and cast to where their parameter now is (`n` elements of `dtype` on
/// `device`), values kept: a module moved with `to_device` or cast with `to_dtype` after
/// some steps continues with its moments (f64 to f32 rounds them), never with zeroed
/// moments under an advanced step count (whose bias correction would make the next Adam
/// update about 3x the learning rate). Buffers already there are returned as they are.
pub(crate) fn conform(b: Bufs, n: usize, dtype: crate::DType, device: crate::Device) -> Bufs {
    use crate::{DType, Device};
    let tensors: Vec<Tensor> = match b {
        Bufs::F32(v) if (dtype, device) == (DType::F32, Device::Cpu) => return Bufs::F32(v),
        Bufs::F64(v) if (dtype, device) == (DType::F64, Device::Cpu) => return Bufs::F64(v),
        #[cfg(feature = "gpu")]
        Bufs::Gpu(v)
            if matches!(device, Device::Gpu(_))
                && v.iter().all(|s| s.dtype() == dtype && Storage::Gpu(s.clone()).device() == device) =>
        {
            return Bufs::Gpu(v)
        }
        Bufs::F32(v) => v.into_iter().map(|b| Tensor::from_vec(b, &[n])).collect(),
        Bufs::F64(v) => v.into_iter().map(|b| Tensor::from_vec_f64(b, &[n])).collect(),
        #[cfg(feature = "gpu")]
        Bufs::Gpu(v) => v.into_iter().map(|s| Tensor::from_storage(Storage::Gpu(s), &[n])).collect(),
    };
    // Cast on the host: the device may not compute in one of the two dtypes (f64 on most
    // GPUs).
    let moved = tensors.into_iter().map(|t| t.to_device(Device::Cpu).to_dtype(dtype).to_device(device));
    match device {
        #[cfg(feature = "gpu")]
        Device::Gpu(_) => Bufs::Gpu(
            moved
                .map(|t| match &*t.storage_arc() {
                    Storage::Gpu(s) => s.clone(),
                    _ => unreachable!("moved to a GPU"),
                })
                .collect(),
        ),
        _ if dtype == DType::F64 => Bufs::F64(moved.map(|t| t.to_vec_f64()).collect()),
        _ => Bufs::F32(moved.map(|t| t.to_vec()).collect()),
    }
}

/// The update of a contiguous parameter on a GPU: one kernel over the parameter, its
/// gradient and its state, all on the device (state loaded from a state dict, which is on
/// the host, is uploaded on the first step).
#[cfg(feature = "gpu")]
fn device_update(p: &Parameter, g: &Tensor, bufs: &mut Option<Bufs>, n_bufs: usize, kernel: &DeviceKernel<'_>) {
    use crate::backend::GpuStorage;
    let gs = g.storage_arc();
    let Storage::Gpu(gg) = &*gs else { panic!("optimizer: a gpu parameter has a gradient on {}", g.device()) };
    let (dtype, n) = (p.dtype(), p.numel());
    if !dtype.is_float() || dtype.size_in_bytes() < 4 {
        panic!("optimizer: parameters must be f32 or f64, got {dtype}");
    }
    let (state, fresh) = match bufs.take() {
        Some(b) => match conform(b, n, dtype, p.device()) {
            Bufs::Gpu(v) => (v, false),
            _ => unreachable!("conformed to the parameter's GPU"),
        },
        None => {
            let zeros = || Tensor::full_on(&[n], 0.0, dtype, p.device());
            let storage = |t: Tensor| match &*t.storage_arc() {
                Storage::Gpu(s) => s.clone(),
                _ => unreachable!("made on the parameter's GPU"),
            };
            ((0..n_bufs).map(|_| storage(zeros())).collect(), true)
        }
    };
    let mut scalars = vec![if fresh { 1.0 } else { 0.0 }];
    scalars.extend_from_slice(&kernel.scalars);
    p.modify_storage("optimizer step", |ps, layout| match ps {
        Storage::Gpu(pg) => {
            let refs: Vec<&GpuStorage> = state.iter().collect();
            crate::backend::gpu::kernels::optimizer_step(pg, layout.offset(), n, gg, &refs, kernel.body, &scalars);
        }
        other => unreachable!("a gpu parameter's storage is on {}", other.device()),
    });
    *bufs = Some(Bufs::Gpu(state));
}

/// Buffers as tensors for a state dict.
pub(crate) fn bufs_to_tensors(prefix: &str, names: &[&str], b: &Bufs, shape: &[usize], out: &mut StateDict) {
    for (i, name) in names.iter().enumerate() {
        let t = match b {
            Bufs::F32(v) => Tensor::from_vec(v[i].clone(), shape),
            Bufs::F64(v) => Tensor::from_vec_f64(v[i].clone(), shape),
            #[cfg(feature = "gpu")]
            Bufs::Gpu(v) => Tensor::from_storage(Storage::Gpu(v[i].clone()), shape),
        };
        out.insert(format!("{prefix}.{name}"), t);
    }
}

/// Buffers back from a state dict; `None` when absent, an error naming the key when
/// malformed: a buffer missing while its siblings are present, on the meta device, not
/// floating point, of another shape than the parameter, holding a non-finite value, or a
/// negative value in a second-moment buffer (`*_sq`, a running mean of squares).
pub(crate) fn bufs_from_tensors(prefix: &str, names: &[&str], p: &Parameter, sd: &StateDict) -> Result<Option<Bufs>> {
    let Some(present) = names.iter().map(|n| format!("{prefix}.{n}")).find(|k| sd.contains_key(k)) else {
        return Ok(None);
    };
    let bad = |msg: String| Err(Error::OptimizerState(msg));
    let mut f32s = Vec::new();
    let mut f64s = Vec::new();
    for n in names {
        let key = format!("{prefix}.{n}");
        let Some(t) = sd.get(&key) else {
            return bad(format!("missing `{key}` (the state has `{present}`)"));
        };
        if t.device() == crate::Device::Meta {
            return bad(format!("`{key}` is on the {} device and has no values", t.device()));
        }
        if !t.dtype().is_float() {
            return bad(format!("`{key}` has dtype {}; optimizer buffers are floating point", t.dtype()));
        }
        if t.shape() != p.shape() {
            return bad(format!("`{key}` has shape {:?}, the parameter {:?}", t.shape(), p.shape()));
        }
        let values = t.to_vec_f64();
        let second_moment = n.ends_with("_sq");
        if let Some(v) = values.iter().find(|v| !v.is_finite() || (second_moment && **v < 0.0)) {
            let what = if second_moment { "a mean of squares is finite and non-negative" } else { "it must be finite" };
            return bad(format!("`{key}` holds the value {v}; {what}"));
        }
        match p.dtype() {
            crate::DType::F64 => f64s.push(values),
            _ => {
                // Finite in f64 is not finite in f32: 1e300 would become an infinite moment
                // (a parameter that stops training, or turns NaN at its next step).
                if let Some(v) = values.iter().find(|v| (**v as f32).is_infinite()) {
                    return bad(format!(
                        "`{key}` holds the value {v:e}, beyond the range of f32, in which the buffers of this {} \
                         parameter are kept",
                        p.dtype()
                    ));
                }
                f32s.push(values.into_iter().map(|v| v as f32).collect())
            }
        }
    }
    Ok(Some(if p.dtype() == crate::DType::F64 { Bufs::F64(f64s) } else { Bufs::F32(f32s) }))
}

/// A step counter saved by `state_dict`: one value, a whole number in
/// `0..=`[`MAX_COUNTER`].
pub(crate) fn step_from_tensor(key: &str, t: &Tensor) -> Result<u64> {
    let bad = |msg: String| Err(Error::OptimizerState(msg));
    if t.numel() != 1 {
        return bad(format!("`{key}` must hold one value, has shape {:?}", t.shape()));
    }
    if t.device() == crate::Device::Meta {
        return bad(format!("`{key}` is on the {} device and has no values", t.device()));
    }
    let max = MAX_COUNTER;
    let step = match t.dtype() {
        crate::DType::Bool => None,
        crate::DType::I64 => u64::try_from(t.to_vec_i64()[0]).ok(),
        _ => {
            let v = t.to_vec_f64()[0];
            (v >= 0.0 && v <= max as f64 && v.fract() == 0.0).then_some(v as u64)
        }
    };
    match step {
        Some(s) if s <= max => Ok(s),
        _ => bad(format!(
            "`{key}` is {} {}; a step count is a whole number in 0..={max}",
            t.dtype(),
            if t.dtype() == crate::DType::I64 { t.to_vec_i64()[0].to_string() } else { t.to_vec_f64()[0].to_string() }
        )),
    }
}

/// Checks the group count and learning rates of `state`, and that every entry is
/// `"<path>.<suffix>"` for a parameter this optimizer holds and a buffer it keeps.
pub(crate) fn check_state_paths(groups: &[Group], state: &OptimizerState, suffixes: &[&str]) -> Result<()> {
    if state.lrs.len() != groups.len() {
        return Err(Error::OptimizerState(format!(
            "the state has {} parameter groups, this optimizer {}",
            state.lrs.len(),
            groups.len()
        )));
    }
    if let Some((i, lr)) = state.lrs.iter().enumerate().find(|(_, lr)| !(lr.is_finite() && **lr >= 0.0)) {
        return Err(Error::OptimizerState(format!("`lrs[{i}]` is {lr}; a learning rate is finite and non-negative")));
    }
    let known: HashMap<&str, ()> = groups.iter().flat_map(|g| g.params.iter().map(|(n, _)| (n.as_str(), ()))).collect();
    for key in state.tensors.keys() {
        let path = suffixes.iter().find_map(|s| key.strip_suffix(s).and_then(|k| k.strip_suffix('.')));
        match path {
            Some(path) if known.contains_key(path) => {}
            Some(path) => {
                return Err(Error::OptimizerState(format!(
                    "the state has buffers for `{path}` (`{key}`), which this optimizer does not hold"
                )))
            }
            None => {
                return Err(Error::OptimizerState(format!(
                    "unexpected entry `{key}`: this optimizer keeps `<parameter>.<buffer>` entries with buffers {}",
                    suffixes.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
                )))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    /// A parameter large enough that its update runs in parts on the team gets, element
    /// for element, the bits a small parameter holding the same values gets in one call
    /// (SGD with momentum, Nesterov and weight decay; Adam with AMSGrad; AdamW), f32 and
    /// f64, over a few steps with changing gradients.
    #[test]
    fn updates_in_parts_match_one_call_bit_for_bit() {
        let n = 3 * crate::backend::cpu::elementwise::PAR_THRESHOLD + 17;
        type Make = fn(Vec<Parameter>) -> Box<dyn Optimizer>;
        let makers: [Make; 3] = [
            |p| {
                let c = SgdConfig { lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.01, ..Default::default() };
                Box::new(Sgd::new(p, c))
            },
            |p| Box::new(Adam::new(p, AdamConfig { amsgrad: true, weight_decay: 0.1, ..Default::default() })),
            |p| Box::new(AdamW::new(p, AdamWConfig::default())),
        ];
        for dtype in [DType::F32, DType::F64] {
            for make in makers {
                let values: Vec<f64> = (0..n).map(|i| ((i * 37) % 101) as f64 / 50.0 - 1.0).collect();
                let big = Parameter::new(Tensor::from_vec_f64(values.clone(), &[n]).to_dtype(dtype));
                // The first and the last 40 elements, each in a small parameter.
                let ends = [0..40, n - 40..n];
                let small: Vec<Parameter> = ends
                    .iter()
                    .map(|r| Parameter::new(Tensor::from_vec_f64(values[r.clone()].to_vec(), &[40]).to_dtype(dtype)))
                    .collect();
                let (mut ob, mut os) = (make(vec![big.clone()]), make(small.clone()));
                for step in 0..3 {
                    let grad: Vec<f64> = (0..n).map(|i| ((i * 13 + step * 7) % 29) as f64 / 10.0 - 1.4).collect();
                    big.set_grad(Some(Tensor::from_vec_f64(grad.clone(), &[n]).to_dtype(dtype)));
                    for (p, r) in small.iter().zip(&ends) {
                        p.set_grad(Some(Tensor::from_vec_f64(grad[r.clone()].to_vec(), &[40]).to_dtype(dtype)));
                    }
                    ob.step();
                    os.step();
                }
                let all = big.to_vec_f64();
                for (p, r) in small.iter().zip(&ends) {
                    assert_eq!(all[r.clone()], p.to_vec_f64()[..], "{dtype:?}");
                }
            }
        }
    }
}
