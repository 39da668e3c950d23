//! An optimizer's saved state ([`OptimizerState`]): its per-parameter buffers as tensors
//! and its hyper-parameters, and the checks a loaded state passes before anything is kept.

use std::collections::{BTreeMap, HashMap};

use super::{Group, MAX_COUNTER};
use crate::backend::update::UpdateState;
use crate::error::{Error, Result};
use crate::module::Parameter;
use crate::state_dict::StateDict;
use crate::tensor::Tensor;

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
    /// [`Sgd`](super::Sgd) keeps `momentum`, `dampening`, `nesterov` (0 or 1) and `weight_decay`;
    /// [`Adam`](super::Adam) and [`AdamW`](super::AdamW) keep `beta1`, `beta2`, `eps`, `weight_decay`, `amsgrad` and
    /// `decoupled_weight_decay` (flags, 0 or 1; the last tells an AdamW state from an Adam
    /// one); each group may also hold `initial_lr` (see
    /// [`Optimizer::group_initial_lr`](super::Optimizer::group_initial_lr)).
    ///
    /// Empty in a state that records none (one saved before nn recorded them, or built by
    /// hand): loading it keeps the optimizer's own hyper-parameters, and refuses buffers the
    /// optimizer as built does not keep (momentum buffers for an `Sgd` without momentum).
    pub hyper_params: Vec<HyperParams>,
}

/// One parameter group's hyper-parameters by name (see [`OptimizerState::hyper_params`]).
pub type HyperParams = BTreeMap<String, f64>;

/// The name of the per-group entry that holds [`Optimizer::group_initial_lr`](super::Optimizer::group_initial_lr).
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

/// Buffers as tensors for a state dict, under `"<prefix>.<name>"`.
pub(crate) fn bufs_to_tensors(prefix: &str, names: &[&str], b: &UpdateState, shape: &[usize], out: &mut StateDict) {
    for (name, buf) in names.iter().zip(b.buffers()) {
        out.insert(format!("{prefix}.{name}"), Tensor::from_storage(buf.clone(), shape));
    }
}

/// Buffers back from a state dict; `None` when absent, an error naming the key when
/// malformed: a buffer missing while its siblings are present, on the meta device, not
/// floating point, of another shape than the parameter, holding a non-finite value, or a
/// negative value in a second-moment buffer (`*_sq`, a running mean of squares).
pub(crate) fn bufs_from_tensors(
    prefix: &str,
    names: &[&str],
    p: &Parameter,
    sd: &StateDict,
) -> Result<Option<UpdateState>> {
    let Some(present) = names.iter().map(|n| format!("{prefix}.{n}")).find(|k| sd.contains_key(k)) else {
        return Ok(None);
    };
    let bad = |msg: String| Err(Error::OptimizerState(msg));
    let mut all = Vec::new();
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
        // Finite in f64 is not finite in f32: 1e300 would become an infinite moment (a
        // parameter that stops training, or turns NaN at its next step).
        if p.dtype() != crate::DType::F64 {
            if let Some(v) = values.iter().find(|v| (**v as f32).is_infinite()) {
                return bad(format!(
                    "`{key}` holds the value {v:e}, beyond the range of f32, in which the buffers of this {} \
                     parameter are kept",
                    p.dtype()
                ));
            }
        }
        all.push(values);
    }
    Ok(Some(UpdateState::from_host(all, p.dtype())))
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
