//! [`ModuleExt`]: look-ups by path and PyTorch's keyword forms of the traversals
//! (`named_parameters(prefix=..., recurse=False)`, `named_modules(prefix=...)`,
//! `get_parameter`, `get_buffer`, `zero_grad(set_to_none=False)`), for every module and
//! `dyn Module`.

use std::collections::HashSet;

use super::{IncompatibleKeys, Item, LoadStateDictConfig, Module, Parameter};
use crate::error::{Error, Result};
use crate::state_dict::StateDict;
use crate::tensor::Tensor;

/// Look-ups and keyword forms of [`Module`]'s traversals; implemented for every module
/// (and `dyn Module`), in the prelude.
///
/// ```
/// use nn_core::prelude::*;
/// use nn_core::module::ModuleExt;
///
/// #[derive(Module)]
/// struct Block {
///     #[param] gain: Parameter,
///     #[buffer] steps: Tensor,
///     #[module] inner: Inner,
/// }
/// #[derive(Module)]
/// struct Inner { #[param] weight: Parameter }
/// let b = Block {
///     gain: Parameter::new(Tensor::ones(&[2])),
///     steps: Tensor::zeros(&[1]),
///     inner: Inner { weight: Parameter::new(Tensor::ones(&[3])) },
/// };
/// assert_eq!(b.get_parameter("inner.weight").unwrap().shape(), &[3]);
/// assert_eq!(b.get_buffer("steps").unwrap().shape(), &[1]);
/// let direct: Vec<String> = b.named_parameters_with("block", false).into_iter().map(|(k, _)| k).collect();
/// assert_eq!(direct, ["block.gain"]);
/// let e = b.get_parameter("inner.wieght").unwrap_err().to_string();
/// assert!(e.contains("Inner at `inner` has no parameter `wieght`"), "{e}");
/// ```
pub trait ModuleExt: Module {
    /// The parameter at a dotted `path` (`"encoder.layers.0.weight"`), PyTorch's
    /// `get_parameter`.
    ///
    /// # Errors
    /// [`Error::SubmoduleNotFound`] for a module part of the path that does not exist,
    /// [`Error::EntryNotFound`] (naming the module's parameters) for the last part.
    fn get_parameter(&self, path: &str) -> Result<Parameter> {
        let (module, name) = split(self.as_dyn(), path)?;
        let mut found = None;
        let mut names = Vec::new();
        module.visit(&mut |n, item| {
            if let Item::Param(p) = item {
                if found.is_none() && n.matches(name) {
                    found = Some(p.clone());
                }
                names.push(n.to_string());
            }
        });
        found.ok_or_else(|| missing("parameter", path, module.type_name(), names))
    }

    /// The buffer at a dotted `path`, persistent or not (PyTorch's `get_buffer`).
    ///
    /// # Errors
    /// As [`get_parameter`](ModuleExt::get_parameter), naming the module's buffers.
    fn get_buffer(&self, path: &str) -> Result<Tensor> {
        let (module, name) = split(self.as_dyn(), path)?;
        let mut found = None;
        let mut names = Vec::new();
        module.visit(&mut |n, item| {
            if let Item::Buffer { tensor, .. } = item {
                if found.is_none() && n.matches(name) {
                    found = Some(tensor.clone());
                }
                names.push(n.to_string());
            }
        });
        found.ok_or_else(|| missing("buffer", path, module.type_name(), names))
    }

    /// PyTorch's `named_parameters(prefix, recurse)`: every parameter's dotted name after
    /// `prefix.` (no dot when `prefix` is empty); with `recurse` false, only this module's
    /// own parameters (a tied one listed once, under its first name, as there).
    ///
    /// # Panics
    /// With `recurse`, as [`Module::named_parameters`] (a lazy sub-module that has not run).
    #[track_caller]
    fn named_parameters_with(&self, prefix: &str, recurse: bool) -> Vec<(String, Parameter)> {
        let own = if recurse {
            self.named_parameters()
        } else {
            direct(self.as_dyn(), |i| i.param().map(|p| (p.id(), p.clone())))
        };
        prefixed(prefix, own)
    }

    /// PyTorch's `named_buffers(prefix, recurse)`, as
    /// [`named_parameters_with`](ModuleExt::named_parameters_with).
    fn named_buffers_with(&self, prefix: &str, recurse: bool) -> Vec<(String, Tensor)> {
        let own = if recurse {
            self.named_buffers()
        } else {
            direct(self.as_dyn(), |i| i.buffer().map(|t| (t.id(), t.clone())))
        };
        prefixed(prefix, own)
    }

    /// PyTorch's `named_modules(prefix=...)`: `(prefix, self)` first, then every
    /// sub-module under `prefix.` and its path.
    fn named_modules_with(&self, prefix: &str) -> Vec<(String, &dyn Module)> {
        self.named_modules()
            .into_iter()
            .map(|(k, m)| {
                let k = match (prefix.is_empty(), k.is_empty()) {
                    (true, _) => k,
                    (false, true) => prefix.to_string(),
                    (false, false) => format!("{prefix}.{k}"),
                };
                (k, m)
            })
            .collect()
    }

    /// PyTorch's `zero_grad(set_to_none)`: with `set_to_none` (PyTorch's default, and
    /// [`Module::zero_grad`]'s) every gradient is dropped; without, every existing gradient
    /// is filled with zeros in place (for code that reads `.grad` after `zero_grad`).
    fn zero_grad_with(&self, set_to_none: bool) {
        if set_to_none {
            return self.zero_grad();
        }
        for p in self.parameters() {
            if let Some(g) = p.grad() {
                // The stored gradient itself (`grad` hands out a handle on it).
                crate::no_grad(|| g.fill_(0.0));
            }
        }
    }

    /// PyTorch's `load_state_dict(state_dict, strict, assign)`: as
    /// [`Module::load_state_dict`], and with `assign` the entries take the state dict's
    /// tensors (dtype, device, values) instead of copying into their own, the way a model
    /// built on the meta device gets its weights without a second copy in memory (see
    /// [`LoadStateDictConfig::assign`] for what is shared and what is copied).
    ///
    /// ```
    /// use nn_core::module::{LoadStateDictConfig, ModuleExt};
    /// use nn_core::prelude::*;
    /// use nn_core::StateDict;
    ///
    /// #[derive(Module)]
    /// struct Net { #[param] w: Parameter }
    /// // Built without values, then given the file's tensors.
    /// let mut net = Net { w: Parameter::new(Tensor::full_on(&[2], 0.0, DType::F32, Device::Meta)) };
    /// let mut sd = StateDict::new();
    /// sd.insert("w".to_string(), Tensor::from_vec(vec![1.0, 2.0], &[2]).to_dtype(DType::BF16));
    /// let assign = LoadStateDictConfig { strict: true, assign: true };
    /// net.load_state_dict_with(&sd, assign).unwrap();
    /// assert_eq!((net.w.device(), net.w.dtype()), (Device::Cpu, DType::BF16)); // the file's
    /// assert!(net.w.requires_grad()); // the module's
    /// assert_eq!(net.w.to_vec(), [1.0, 2.0]);
    /// ```
    ///
    /// # Errors
    /// As [`Module::load_state_dict`]; with `assign`, also an entry that shares its storage
    /// with its views (a sharded parameter), which cannot take another tensor.
    fn load_state_dict_with(
        &mut self,
        state_dict: &StateDict,
        config: LoadStateDictConfig,
    ) -> Result<IncompatibleKeys> {
        super::load::load_state_dict(self.as_dyn_mut(), state_dict, config)
    }
}

impl<M: Module + ?Sized> ModuleExt for M {}

impl Item<'_> {
    fn param(&self) -> Option<&Parameter> {
        match self {
            Item::Param(p) => Some(p),
            _ => None,
        }
    }

    fn buffer(&self) -> Option<&Tensor> {
        match self {
            Item::Buffer { tensor, .. } => Some(tensor),
            _ => None,
        }
    }
}

/// The module owning the last component of `path`, and that component.
fn split<'a, 'p>(root: &'a dyn Module, path: &'p str) -> Result<(&'a dyn Module, &'p str)> {
    match path.rsplit_once('.') {
        Some((module, name)) => Ok((root.get_submodule(module)?, name)),
        None => Ok((root, path)),
    }
}

fn missing(kind: &'static str, path: &str, module_type: &'static str, names: Vec<String>) -> Error {
    Error::EntryNotFound { kind, path: path.to_string(), module_type, names }
}

/// The module's own entries that `pick` takes, each tensor once.
fn direct<T>(m: &dyn Module, pick: impl Fn(&Item<'_>) -> Option<(crate::TensorId, T)>) -> Vec<(String, T)> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    m.visit(&mut |name, item| {
        if let Some((id, t)) = pick(&item) {
            if seen.insert(id) {
                out.push((name.to_string(), t));
            }
        }
    });
    out
}

fn prefixed<T>(prefix: &str, entries: Vec<(String, T)>) -> Vec<(String, T)> {
    if prefix.is_empty() {
        return entries;
    }
    entries.into_iter().map(|(k, v)| (format!("{prefix}.{k}"), v)).collect()
}
