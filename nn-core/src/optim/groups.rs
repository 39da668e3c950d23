//! Parameter groups: what an optimizer is built from ([`ParamGroup`], [`IntoParamGroups`]),
//! the checks every optimizer makes on them, and the groups as an optimizer holds them.

use std::collections::HashMap;

use super::non_negative;
use crate::error::{Error, Result};
use crate::module::Parameter;

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
    /// See [`Optimizer::group_initial_lr`](super::Optimizer::group_initial_lr).
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
