//! `FsdpPolicy`: which sub-modules become units of a `FullyShardedDataParallel`.

use std::any::TypeId;
use std::collections::HashMap;

use nn_core::Module;

/// Which sub-modules become units of a [`FullyShardedDataParallel`](crate::FullyShardedDataParallel) (PyTorch's
/// `auto_wrap_policy`): modules of the given types (`ModuleWrapPolicy`) and/or modules
/// holding at least a number of parameters not already in a smaller unit
/// (`size_based_auto_wrap_policy`, decided bottom-up). Units may nest; a parameter belongs
/// to the innermost unit that contains it, and the model itself is always the root unit.
///
/// ```
/// use nn_distributed::FsdpPolicy;
/// use nn_layers::TransformerEncoderLayer;
///
/// let by_type = FsdpPolicy::new().module_type::<TransformerEncoderLayer>();
/// let by_size = FsdpPolicy::new().min_params(1_000_000);
/// assert_ne!(format!("{by_type:?}"), format!("{by_size:?}"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct FsdpPolicy {
    types: Vec<(TypeId, &'static str)>,
    min_params: Option<usize>,
}

impl FsdpPolicy {
    /// A policy that wraps nothing: the whole model is one unit.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also wraps every sub-module of type `T`.
    pub fn module_type<T: Module>(mut self) -> Self {
        self.types.push((TypeId::of::<T>(), std::any::type_name::<T>()));
        self
    }

    /// The names of the types given to [`module_type`](FsdpPolicy::module_type) that no
    /// sub-module of `model` has: a policy that silently wrapped nothing (everything went
    /// into the root unit). A lazy layer counts as the layer it became after its first
    /// forward (`Linear` for a `LazyLinear`), as PyTorch's does.
    pub(crate) fn unmatched_types(&self, model: &dyn Module) -> Vec<&'static str> {
        let modules = model.named_modules();
        self.types
            .iter()
            .filter(|(id, _)| !modules.iter().any(|(path, m)| !path.is_empty() && m.as_any().type_id() == *id))
            .map(|(_, name)| *name)
            .collect()
    }

    /// Also wraps every sub-module that holds at least `n` parameter elements outside the
    /// units below it (children are decided first).
    pub fn min_params(mut self, n: usize) -> Self {
        self.min_params = Some(n);
        self
    }

    /// The dotted paths of the units this policy picks in `model`, in pre-order (the root,
    /// `""`, excluded).
    pub fn units(&self, model: &dyn Module) -> Vec<String> {
        let modules = model.named_modules();
        let params: Vec<(String, usize)> = model.named_parameters().into_iter().map(|(n, p)| (n, p.numel())).collect();
        let mut chosen: Vec<String> = Vec::new();
        // Children before parents: reverse pre-order.
        for (path, m) in modules.iter().rev() {
            if path.is_empty() {
                continue;
            }
            let typed = self.types.iter().any(|(id, _)| m.as_any().type_id() == *id);
            let sized = self.min_params.is_some_and(|n| {
                let prefix = format!("{path}.");
                let free: usize = params
                    .iter()
                    .filter(|(name, _)| name.starts_with(&prefix))
                    .filter(|(name, _)| !chosen.iter().any(|c| name.starts_with(&format!("{c}."))))
                    .map(|(_, k)| k)
                    .sum();
                free >= n && free > 0
            });
            if typed || sized {
                chosen.push(path.clone());
            }
        }
        let order: HashMap<&str, usize> = modules.iter().enumerate().map(|(i, (p, _))| (p.as_str(), i)).collect();
        chosen.sort_by_key(|p| order[p.as_str()]);
        chosen
    }
}
