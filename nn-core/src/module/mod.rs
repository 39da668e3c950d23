//! The [`Module`] trait: registered state, traversed by one visitor.
//!
//! A module reports its direct state — parameters, buffers and sub-modules, in declaration
//! order — through [`Module::visit`]. Everything PyTorch's `nn.Module` does with its
//! `_parameters` / `_buffers` / `_modules` dictionaries is derived from that one walk:
//! dotted names, `state_dict`, `load_state_dict`, device and dtype moves, freezing,
//! `zero_grad`, parameter counts and the printed tree. `#[derive(Module)]` writes
//! `visit` (and the rest of the required methods) from field annotations.

mod accessors;
mod convert;
mod deep_copy;
mod display;
pub mod forward;
pub mod global_hooks;
mod holds_state;
mod hook_run;
pub mod hooks;
pub mod io;
pub(crate) mod load;
mod lookup;
mod register;
mod running;
mod shared;
pub mod state_hooks;
mod surgery;
mod walk;

use std::any::Any;
use std::collections::HashSet;
use std::fmt;

pub use crate::autograd::forward_checks;
pub use deep_copy::{CopySlot, DeepCopier};
pub use display::fmt_module;
pub use forward::{Compute, Forward, ForwardArg, HasBase, Layer, ModuleIo};
pub use holds_state::HoldsState;
pub use hooks::{HookCall, HookConfig, HookHandle, ModuleBase, ScopedHook};
pub use io::{slots_of, IoSlots, IoTensors};
pub use load::{IncompatibleKeys, LoadStateDictConfig};
pub use lookup::ModuleExt;
pub use parameter::{parametrize, Parameter};
pub use register::Hooks;
pub use state_hooks::{ExtraState, MigrateState, EXTRA_STATE_KEY};
#[doc(hidden)]
pub use surgery::{short_type_name, SetChild};
pub(crate) use walk::walk;
use walk::{collect_modules, for_each_tensor, not_found, path_parts, walk_unnamed};

pub(crate) mod parameter;

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::state_dict::StateDict;
use crate::tensor::Tensor;

/// The name of one registered entry: a field name, a list index, or a dictionary key.
/// Dotted paths are only built when a caller asks for names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Name<'a> {
    /// A struct field (or its `rename`).
    Field(&'static str),
    /// A position in a list-like container (`"0"`, `"1"`, ...).
    Index(usize),
    /// A key of a dictionary-like container, or a name chosen at run time.
    Key(&'a str),
}

impl fmt::Display for Name<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Name::Field(s) => f.write_str(s),
            Name::Index(i) => write!(f, "{i}"),
            Name::Key(k) => f.write_str(k),
        }
    }
}

impl Name<'_> {
    fn matches(&self, s: &str) -> bool {
        match self {
            Name::Field(n) => *n == s,
            Name::Key(k) => *k == s,
            Name::Index(i) => s.parse::<usize>().ok() == Some(*i) && (s == "0" || !s.starts_with('0')),
        }
    }
}

/// One registered entry reported by [`Module::visit`].
#[derive(Clone, Copy)]
pub enum Item<'a> {
    /// A trainable parameter.
    Param(&'a Parameter),
    /// A buffer; non-persistent buffers move with the module but are not in `state_dict`.
    Buffer {
        /// The buffer's tensor.
        tensor: &'a Tensor,
        /// Whether `state_dict` includes it.
        persistent: bool,
    },
    /// A sub-module.
    Module(&'a dyn Module),
}

/// The module's own line in its printout, used by `#[derive(Module)]` when the struct
/// carries `#[module(extra_repr)]` (PyTorch's `extra_repr` override).
pub trait ExtraRepr {
    /// The text inside the parentheses, e.g. `in_features=784, out_features=256, bias=True`.
    fn extra_repr(&self) -> String;
}

/// A neural-network module with registered state (PyTorch's `nn.Module`).
///
/// Implement it with `#[derive(Module)]`; the required methods are what the derive
/// writes, the provided ones are the public API, all computed from [`visit`](Module::visit).
pub trait Module: HoldsState + Any {
    /// Calls `f` on each direct parameter, buffer and sub-module, in declaration order.
    /// Unset optional entries (`None`) are skipped, like PyTorch's `None` registrations.
    fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>));

    /// Calls `f` on each direct sub-module, mutably, in declaration order.
    fn visit_modules_mut<'a>(&'a mut self, f: &mut dyn FnMut(Name<'_>, &'a mut dyn Module));

    /// The type's name as printed (`"Linear"`): the struct's, or the one given with
    /// `#[module(name = "GPT2LMHeadModel")]` on it.
    fn type_name(&self) -> &'static str;

    /// The module's own line in the printout (`in_features=784, out_features=256, ...`).
    fn extra_repr(&self) -> String {
        String::new()
    }

    /// The per-instance base (training flag, hooks), if the module has one.
    fn base(&self) -> Option<&ModuleBase> {
        None
    }

    /// Mutable access to the base, if any.
    fn base_mut(&mut self) -> Option<&mut ModuleBase> {
        None
    }

    /// Whether the module runs a forward of its own, so that hooks on it fire. True for
    /// every module with a base (`#[derive(Module)]` checks at compile time that a struct
    /// with a `#[base]` field implements [`Compute`]); containers that only hold modules
    /// (`ModuleList`, `ModuleDict`) keep a base for their training flag and return false.
    fn runs_forward(&self) -> bool {
        self.base().is_some()
    }

    /// Replaces the direct child `name` with the module in `slot`, an `Option<M>` (taken
    /// on success). Written by `#[derive(Module)]`; used by
    /// [`set_submodule`](Module::set_submodule).
    #[doc(hidden)]
    fn __set_child(&mut self, name: &str, slot: &mut dyn Any) -> SetChild {
        let _ = (name, slot);
        SetChild::Unsupported
    }

    /// True for a lazy module whose parameters do not exist yet (before its first forward).
    fn is_uninitialized(&self) -> bool {
        false
    }

    /// Whether this module, as a sub-module of the one converted, lets
    /// [`to_device`](Module::to_device) or [`to_dtype`](Module::to_dtype) convert its
    /// tensors. Those walk the whole tree's tensors and call this on every sub-module (and
    /// the module itself) first: an error stops the conversion before anything changed.
    /// The default accepts; a module that lays out its tensors for one device or dtype
    /// (`FullyShardedDataParallel`'s shards) refuses, so that a parent's conversion cannot
    /// bypass its own `to_device`/`to_dtype`.
    ///
    /// # Errors
    /// Whatever the module reports, naming what it cannot do.
    fn check_conversion(&self, to: Conversion) -> Result<()> {
        let _ = to;
        Ok(())
    }

    /// The version of this module's state-dict layout, recorded in every state dict it
    /// writes ([`StateDict::version`]) and handed to its load pre-hooks (PyTorch's
    /// `_version`); `#[module(version = N)]` writes it. `None`: no version is recorded.
    fn state_dict_version(&self) -> Option<u32> {
        None
    }

    /// The type's own migration of older state-dict layouts (PyTorch's
    /// `_load_from_state_dict` override, such as `BatchNorm`'s for files without
    /// `num_batches_tracked`): `#[module(migrate)]` writes it for a type that implements
    /// [`MigrateState`]. It runs at every load before the module's load pre-hooks, and every
    /// copy of the type has it (instance hooks are not copied). `None`: no migration.
    fn state_dict_migration(&self) -> Option<&dyn MigrateState> {
        None
    }

    /// For a wrapper that shows the module it wraps as itself (its entries are the wrapped
    /// module's, unprefixed: `DistributedDataParallel`), the wrapped module, whose
    /// state-dict hooks then run as the wrapper's. `None` for every other module.
    fn transparent_inner(&self) -> Option<&dyn Module> {
        None
    }

    /// How many handles share this module: 1, except for an [`Arc`](std::sync::Arc)'d module
    /// with clones alive (a checkpointed forward whose backward has not run holds one). A
    /// shared module's state cannot change through one handle, so a load that would set its
    /// extra state is refused before anything changes.
    fn handle_count(&self) -> usize {
        1
    }

    /// Whether the module keeps non-tensor state in its state dict, under
    /// `<prefix>._extra_state` (PyTorch's `get_extra_state` override). `#[module(extra_state)]`
    /// writes this and the three methods below from the struct's [`ExtraState`] impl; see
    /// [`state_hooks`].
    fn has_extra_state(&self) -> bool {
        false
    }

    /// The module's extra state as JSON.
    ///
    /// # Errors
    /// When the state does not serialise; by default (no extra state) always.
    fn extra_state_json(&self) -> std::result::Result<serde_json::Value, serde_json::Error> {
        Err(serde::ser::Error::custom(format!("`{}` keeps no extra state", self.type_name())))
    }

    /// Whether `state` is an extra state this module can take (it deserialises), touching
    /// nothing: a load checks every value before it sets any.
    ///
    /// # Errors
    /// When it is not; by default (no extra state) always.
    fn check_extra_state_json(&self, state: &serde_json::Value) -> std::result::Result<(), serde_json::Error> {
        let _ = state;
        Err(serde::de::Error::custom(format!("`{}` keeps no extra state", self.type_name())))
    }

    /// Takes an extra state that [`check_extra_state_json`](Module::check_extra_state_json)
    /// accepted.
    ///
    /// # Panics
    /// By default (the module keeps no extra state, so no load calls it).
    fn set_extra_state_json(&mut self, state: &serde_json::Value) {
        let _ = state;
        panic!("set_extra_state_json: `{}` keeps no extra state", self.type_name());
    }

    /// Writes an independent copy of this module into `slot` (with
    /// [`CopySlot::put`]), its parameters and buffers copied through `copier` so that ties
    /// inside the copied tree stay ties. [`deep_copy`](Module::deep_copy) calls it;
    /// `#[derive(Module)]` writes it (each registered field copied, the `#[base]` field by
    /// [`ModuleBase::deep_copy`], plain fields cloned). A hand-written impl writes it too.
    ///
    /// # Panics
    /// By default, naming the type: a hand-written impl that does not write it cannot be
    /// copied, and a copy that silently shared its weights is what this method prevents.
    #[track_caller]
    fn deep_copy_into(&self, copier: &mut DeepCopier, slot: CopySlot<'_>) {
        let _ = (copier, slot);
        panic!(
            "deep_copy: `{}` implements `Module` by hand without `deep_copy_into`, so it cannot be copied; write \
             `deep_copy_into` for it (see `nn_core::module::DeepCopier`)",
            self.type_name()
        );
    }

    /// An independent copy (PyTorch's `copy.deepcopy(module)`): new parameters and buffers
    /// with equal values, dtypes, devices and `requires_grad`, the training flag kept, ties
    /// inside the module kept as ties in the copy. Not copied:
    /// - gradients (the copy starts with none);
    /// - hooks, where PyTorch's `deepcopy` copies them: a hook is a closure that may hold
    ///   handles to the original's state (a buffer it fills, a counter), so a copied hook
    ///   would act on the original from the copy; and nothing could remove it, since its
    ///   handle was given out for the original. Register the copy's hooks on the copy.
    ///
    /// Modules are not `Clone`: a clone would hold the original's [`Parameter`] handles and
    /// train the original (`#[derive(Module)]` refuses a `Clone` impl at compile time).
    ///
    /// ```
    /// use nn_core::{Module, Parameter, Tensor};
    ///
    /// #[derive(Module)]
    /// struct Ema {
    ///     #[param]
    ///     weight: Parameter,
    ///     decay: f64,
    /// }
    /// let online = Ema { weight: Parameter::new(Tensor::ones(&[2])), decay: 0.99 };
    /// let target = online.deep_copy();
    /// nn_core::no_grad(|| target.weight.mul_(0.5)); // the copy moves alone
    /// assert_eq!((online.weight.to_vec(), target.weight.to_vec()), (vec![1.0; 2], vec![0.5; 2]));
    /// assert_eq!(target.decay, 0.99);
    /// ```
    ///
    /// # Panics
    /// When a module inside cannot be copied (see [`deep_copy_into`](Module::deep_copy_into)),
    /// or a plain field is not `Clone`: named in the message.
    #[track_caller]
    fn deep_copy(&self) -> Self
    where
        Self: Sized,
    {
        DeepCopier::new().module(self)
    }

    /// `self` as `Any`, for downcasting in [`apply`](Module::apply) callbacks.
    fn as_any(&self) -> &dyn Any;

    /// `self` as mutable `Any`.
    fn as_any_mut(&mut self) -> &mut dyn Any;

    // ------------------------------------------------------------------------------
    // Traversal
    // ------------------------------------------------------------------------------

    /// `(dotted name, parameter)` for every parameter of this module and its
    /// sub-modules, in PyTorch's order (pre-order over modules; each module's own
    /// parameters in declaration order before its children's); a parameter registered
    /// twice (weight tying) is listed once, under its first name, as PyTorch does.
    ///
    /// # Panics
    /// When a lazy sub-module has not run yet: its parameters do not exist, and a list
    /// taken now (an optimizer built from it) would miss them without a word. Run one
    /// forward pass first (PyTorch's docs ask for this dry run before building the
    /// optimizer).
    #[track_caller]
    fn named_parameters(&self) -> Vec<(String, Parameter)> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut lazy = self.is_uninitialized();
        walk(self.as_dyn(), &mut String::new(), &mut |path, item| match item {
            Item::Param(p) if seen.insert(p.id()) => out.push((path.to_string(), p.clone())),
            Item::Module(m) => lazy |= m.is_uninitialized(),
            _ => {}
        });
        if lazy {
            refuse_uninitialized(self.as_dyn(), "named_parameters", LIST_MISSES);
        }
        out
    }

    /// Every parameter (deduplicated), in traversal order; no names are built.
    ///
    /// # Panics
    /// When a lazy sub-module has not run yet, as
    /// [`named_parameters`](Module::named_parameters).
    #[track_caller]
    fn parameters(&self) -> Vec<Parameter> {
        let mut out: Vec<Parameter> = Vec::new();
        let mut seen = HashSet::new();
        let mut lazy = self.is_uninitialized();
        walk_unnamed(self.as_dyn(), &mut |item| match item {
            Item::Param(p) if seen.insert(p.id()) => out.push(p.clone()),
            Item::Module(m) => lazy |= m.is_uninitialized(),
            _ => {}
        });
        if lazy {
            refuse_uninitialized(self.as_dyn(), "parameters", LIST_MISSES);
        }
        out
    }

    /// `(dotted name, buffer)` for every buffer, persistent or not; a buffer held under
    /// several names (shared by two modules) once, under its first name, as PyTorch's
    /// `named_buffers` (an in-place update over the list would otherwise apply twice).
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        walk(self.as_dyn(), &mut String::new(), &mut |path, item| {
            if let Item::Buffer { tensor, .. } = item {
                if seen.insert(tensor.id()) {
                    out.push((path.to_string(), tensor.clone()));
                }
            }
        });
        out
    }

    /// Every buffer, persistent or not (a shared one once).
    fn buffers(&self) -> Vec<Tensor> {
        self.named_buffers().into_iter().map(|(_, t)| t).collect()
    }

    /// The dotted path (`""` for this module) and the module of the first lazy module,
    /// pre-order, that has not run its first forward yet: its parameters do not exist.
    fn first_uninitialized(&self) -> Option<(String, &dyn Module)> {
        self.named_modules().into_iter().find(|(_, m)| m.is_uninitialized())
    }

    /// `("", self)` first, then every sub-module with its dotted path, pre-order.
    fn named_modules(&self) -> Vec<(String, &dyn Module)> {
        let mut out = vec![(String::new(), self.as_dyn())];
        collect_modules(self.as_dyn(), &mut String::new(), &mut out);
        out
    }

    /// `self` first, then every sub-module, pre-order (PyTorch's `modules()`).
    fn modules(&self) -> Vec<&dyn Module> {
        self.named_modules().into_iter().map(|(_, m)| m).collect()
    }

    /// Direct sub-modules with their names.
    fn named_children(&self) -> Vec<(String, &dyn Module)> {
        let mut out = Vec::new();
        self.visit(&mut |name, item| {
            if let Item::Module(m) = item {
                out.push((name.to_string(), m));
            }
        });
        out
    }

    /// Direct sub-modules.
    fn children(&self) -> Vec<&dyn Module> {
        self.named_children().into_iter().map(|(_, m)| m).collect()
    }

    /// The sub-module at a dotted `path` (`""` is `self`).
    ///
    /// # Errors
    /// [`Error::SubmoduleNotFound`] naming the first missing part and what exists there.
    fn get_submodule(&self, path: &str) -> Result<&dyn Module> {
        let mut cur = self.as_dyn();
        for (start, part) in path_parts(path) {
            let mut found = None;
            let mut names = Vec::new();
            cur.visit(&mut |name, item| {
                if let Item::Module(m) = item {
                    if found.is_none() && name.matches(part) {
                        found = Some(m);
                    }
                    names.push(name.to_string());
                }
            });
            cur = found.ok_or_else(|| not_found(path, start, cur.type_name(), names))?;
        }
        Ok(cur)
    }

    /// The sub-module at a dotted `path`, mutably (`""` is `self`).
    ///
    /// # Errors
    /// [`Error::SubmoduleNotFound`], as [`get_submodule`](Module::get_submodule).
    fn get_submodule_mut(&mut self, path: &str) -> Result<&mut dyn Module> {
        let mut cur = self.as_dyn_mut();
        for (start, part) in path_parts(path) {
            let parent_type = cur.type_name();
            let mut found = None;
            let mut names = Vec::new();
            cur.visit_modules_mut(&mut |name, m| {
                names.push(name.to_string());
                if found.is_none() && name.matches(part) {
                    found = Some(m);
                }
            });
            cur = found.ok_or_else(|| not_found(path, start, parent_type, names))?;
        }
        Ok(cur)
    }

    /// The sub-module at `path` as its concrete type, without a downcast at the call site:
    /// `model.get_submodule_as::<Linear>("encoder.fc")?.out_features`.
    ///
    /// # Errors
    /// [`Error::SubmoduleNotFound`], or [`Error::WrongModuleType`] naming both types.
    fn get_submodule_as<T: Module>(&self, path: &str) -> Result<&T>
    where
        Self: Sized,
    {
        self.as_dyn().submodule_as(path)
    }

    /// [`get_submodule_as`](Module::get_submodule_as), mutably.
    ///
    /// # Errors
    /// As `get_submodule_as`.
    fn get_submodule_as_mut<T: Module>(&mut self, path: &str) -> Result<&mut T>
    where
        Self: Sized,
    {
        self.as_dyn_mut().submodule_as_mut(path)
    }

    /// Replaces the sub-module at `path` with `module` (PyTorch's `set_submodule`). The
    /// slot decides what fits: a field of type `Linear` takes a `Linear`, an
    /// `Option<Linear>` field a `Linear`, a `Box<dyn Layer>` field or `Sequential` item a
    /// `Box<dyn Layer>` (box any layer into it), a `ModuleList<M>` item an `M`.
    ///
    /// # Errors
    /// [`Error::SubmoduleNotFound`] for a path that does not exist, and
    /// [`Error::SetSubmodule`] naming the slot's type for a module that does not fit; on
    /// error nothing is changed.
    fn set_submodule<M: Module>(&mut self, path: &str, module: M) -> Result<()>
    where
        Self: Sized,
    {
        self.as_dyn_mut().set_submodule_dyn(path, &mut Some(module), short_type_name::<M>())
    }

    // ------------------------------------------------------------------------------
    // State dicts
    // ------------------------------------------------------------------------------

    /// Parameters and persistent buffers under their dotted names, in PyTorch's order
    /// (each module's own parameters, then its own buffers, then its children), tied
    /// parameters under every name, as PyTorch. The tensors are the
    /// module's own handles (detached views sharing storage), not copies.
    ///
    /// # Tied parameters
    /// A `Parameter` held by two modules (a clone of one handle, as GPT-2's `lm_head.weight`
    /// is `transformer.wte.weight`) is one parameter:
    /// [`named_parameters`](Module::named_parameters) lists it once, an optimizer steps it once, and the
    /// gradients of both uses add up. Here it is listed under every name; a file written by
    /// [`save`](Module::save) (or [`StateDict::save`]) holds it once, under its first name,
    /// as Hugging Face's files do, and records the other names, which
    /// [`StateDict::load`] lists again as the same tensor;
    /// [`load_state_dict`](Module::load_state_dict) accepts any one of its names (a
    /// Hugging Face file has only the first), or several with equal values.
    ///
    /// ```
    /// use nn_core::{Module, Parameter, Tensor};
    ///
    /// #[derive(Module)]
    /// struct Embed { #[param] weight: Parameter }
    /// #[derive(Module)]
    /// struct Head { #[param] weight: Parameter }
    /// #[derive(Module)]
    /// struct Lm { #[module] wte: Embed, #[module] lm_head: Head }
    ///
    /// let w = Parameter::new(Tensor::randn(&[5, 3]));
    /// let mut lm = Lm { wte: Embed { weight: w.clone() }, lm_head: Head { weight: w } };
    /// assert_eq!(lm.named_parameters().len(), 1);
    /// assert_eq!(lm.state_dict().keys().collect::<Vec<_>>(), ["wte.weight", "lm_head.weight"]);
    /// let dir = tempfile::tempdir().unwrap();
    /// lm.save(dir.path().join("lm.safetensors")).unwrap();
    /// let mut file = nn_core::StateDict::load(dir.path().join("lm.safetensors")).unwrap();
    /// assert_eq!(file.keys().collect::<Vec<_>>(), ["wte.weight", "lm_head.weight"]);
    /// assert_eq!(file.get("wte.weight").unwrap().id(), file.get("lm_head.weight").unwrap().id()); // written once
    /// file.remove("lm_head.weight"); // as a Hugging Face file holds it
    /// lm.load_state_dict(&file, true).unwrap(); // strict: the tie is satisfied by one name
    /// ```
    ///
    /// # Panics
    /// When a lazy sub-module has not run yet (its parameters do not exist); use
    /// [`try_state_dict`](Module::try_state_dict) for a `Result`.
    #[track_caller]
    fn state_dict(&self) -> StateDict {
        self.try_state_dict().unwrap_or_else(|e| panic!("state_dict: {e}"))
    }

    /// [`state_dict`](Module::state_dict), or an error naming the first uninitialised lazy
    /// sub-module or the hook that failed.
    ///
    /// After the tensors, the state dict records each module's layout version and extra
    /// state, and the tree's state-dict post-hooks edit it, children first (see
    /// [`state_hooks`]).
    ///
    /// # Panics
    /// When two different tensors are reported under one dotted name (a hand-written
    /// [`visit`](Module::visit) that names two fields alike): the state dict would hold
    /// only the last. When a state-dict post-hook panics, naming its module.
    ///
    /// # Errors
    /// [`Error::Uninitialized`]; [`Error::StateDictHook`] when a post-hook returns an error
    /// or an extra state does not serialise.
    fn try_state_dict(&self) -> Result<StateDict> {
        if let Some((_, m)) = self.first_uninitialized() {
            return Err(Error::Uninitialized { module: m.type_name() });
        }
        let mut sd = StateDict::default();
        // A tied entry (one tensor under several names) is one detached handle under each
        // name, so the state dict itself records the tie (`StateDict::save` writes it once).
        let mut handles: std::collections::HashMap<crate::tensor::TensorId, Tensor> = std::collections::HashMap::new();
        walk(self.as_dyn(), &mut String::new(), &mut |path, item| {
            let t = match item {
                Item::Param(p) => p.tensor(),
                Item::Buffer { tensor, persistent: true } => tensor,
                _ => return,
            };
            let handle = handles.entry(t.id()).or_insert_with(|| t.detach()).clone();
            if let Some(earlier) = sd.insert(path.to_string(), handle) {
                if !earlier.is_alias_of(t) {
                    panic!(
                        "state_dict: two different tensors are named `{path}`; a hand-written `visit` must give each \
                         field its own name"
                    );
                }
            }
        });
        state_hooks::finish_state_dict(self.as_dyn(), &mut sd)?;
        Ok(sd)
    }

    /// Copies `state_dict` into this module's parameters and persistent buffers.
    ///
    /// A tied entry (one tensor under several names) is loaded once: from any one of its
    /// names, or from several holding equal values; several holding different values is an
    /// error naming them ([`StateDictError::tied_conflicts`](crate::error::StateDictError)),
    /// and it is missing only when none of its names is there. The tie survives the load.
    ///
    /// Missing keys, unexpected keys and shape mismatches are all collected first and
    /// reported together, by name. With `strict`, any of them is an error; without, the
    /// missing and unexpected keys are returned and shape mismatches are still an error.
    /// So is a value of another kind (an integer into a float entry), and a finite value
    /// that the entry's dtype cannot hold (an f32 70000 into an f16 model, an f64 1e300
    /// into f32): PyTorch's `copy_` loads it as `inf`, silently. On error the module is
    /// left exactly as it was. Values are converted to each entry's current dtype and
    /// copied into its storage in place, as PyTorch's `param.copy_(input)`: views, detached handles and the tensors an earlier
    /// [`state_dict`](Module::state_dict) returned see the loaded values. An entry on the
    /// meta device takes the loaded tensor instead (PyTorch's `assign=True`: it has no
    /// storage to copy into), converted to the entry's dtype, so a model built on meta in
    /// bf16 loads an f32 file as bf16 (PyTorch's `assign=True` would keep f32).
    ///
    /// Load pre-hooks run first, on a copy of `state_dict` (the caller's is never changed);
    /// extra states (`<prefix>._extra_state`) are matched and checked as the tensors are,
    /// and load post-hooks see the missing and unexpected keys before strictness is judged.
    /// Only then is anything assigned (see [`state_hooks`]).
    ///
    /// # Errors
    /// [`Error::StateDictHook`] naming a hook that failed or an extra state its module
    /// refused; [`Error::StateDict`] listing every offending key; [`Error::Uninitialized`] when the
    /// state dict has entries for a lazy sub-module that has not run yet: its parameters
    /// do not exist, so the entries would be dropped as unexpected and its first forward
    /// would draw new ones (PyTorch materialises them from the state dict; run one forward
    /// pass first). A lazy sub-module the state dict has nothing for is left to its first
    /// forward.
    fn load_state_dict(&mut self, state_dict: &StateDict, strict: bool) -> Result<IncompatibleKeys> {
        load::load_state_dict(self.as_dyn_mut(), state_dict, load::LoadStateDictConfig { strict, assign: false })
    }

    /// Saves [`state_dict`](Module::state_dict) to a safetensors file, atomically.
    ///
    /// # Errors
    /// As [`StateDict::save`].
    fn save(&self, path: impl AsRef<std::path::Path>) -> Result<()>
    where
        Self: Sized,
    {
        self.state_dict().save(path)
    }

    /// Loads a safetensors file strictly (every key must match) into this module; on error
    /// the module is unchanged.
    ///
    /// # Errors
    /// As [`StateDict::load`] and [`load_state_dict`](Module::load_state_dict).
    fn load(&mut self, path: impl AsRef<std::path::Path>) -> Result<IncompatibleKeys>
    where
        Self: Sized,
    {
        let sd = StateDict::load(path)?;
        self.load_state_dict(&sd, true)
    }

    // ------------------------------------------------------------------------------
    // Modes, devices, gradients
    // ------------------------------------------------------------------------------

    /// Training mode for this module and every sub-module.
    fn train(&mut self) {
        self.set_training(true);
    }

    /// Evaluation mode for this module and every sub-module.
    fn eval(&mut self) {
        self.set_training(false);
    }

    /// Sets the mode recursively.
    fn set_training(&mut self, training: bool) {
        if let Some(b) = self.base_mut() {
            b.set_training(training);
        }
        parameter::parametrize::set_training(self.as_dyn(), training);
        self.visit_modules_mut(&mut |_, m| m.set_training(training));
    }

    /// The mode: the module's own flag when it has a [`ModuleBase`], otherwise the mode
    /// of its first sub-module that reports one (modes are set recursively, so they
    /// agree), and `true` for a module with neither.
    fn is_training(&self) -> bool {
        if let Some(b) = self.base() {
            return b.is_training();
        }
        let mut mode = None;
        self.visit(&mut |_, item| {
            if let (None, Item::Module(m)) = (mode, item) {
                mode = Some(m.is_training());
            }
        });
        mode.unwrap_or(true)
    }

    /// Moves every parameter and buffer to `device`, in place (handles held elsewhere,
    /// such as an optimizer's, see the move).
    ///
    /// # Panics
    /// Where [`try_to_device`](Module::try_to_device) returns an error (the device is not
    /// available, a tensor is on the meta device, a lazy sub-module has not run, a
    /// sub-module refuses), before anything moves.
    #[track_caller]
    fn to_device(&mut self, device: Device) {
        self.try_to_device(device).unwrap_or_else(|e| panic!("to_device: {e}"))
    }

    /// [`to_device`](Module::to_device), returning an error (and moving nothing) instead of
    /// panicking.
    ///
    /// ```
    /// use nn_core::{Device, Module, Parameter, Tensor};
    ///
    /// #[derive(Module)]
    /// struct Net {
    ///     #[param] w: Parameter,
    /// }
    ///
    /// let mut net = Net { w: Parameter::new(Tensor::zeros(&[2])) };
    /// if !nn_core::gpu::is_available() {
    ///     let err = net.try_to_device(Device::Gpu(7)).unwrap_err().to_string();
    ///     assert!(err.starts_with("device gpu:7 is not available"), "{err}");
    ///     assert_eq!(net.w.device(), Device::Cpu, "nothing moved");
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::DeviceUnavailable`] when `device` is not available;
    /// [`Error::ConversionRefused`] when a tensor is on the meta device and `device` is
    /// not (it has no values to move: PyTorch refuses too; see
    /// [`to_empty`](Module::to_empty)), or a sub-module refuses
    /// ([`check_conversion`](Module::check_conversion)); [`Error::Uninitialized`] when a lazy
    /// sub-module has no parameters yet (before its first forward): they would be made on
    /// the CPU when it runs (PyTorch records the device for them; nn asks for the dry run
    /// first). Nothing moves then.
    fn try_to_device(&mut self, device: Device) -> crate::Result<()> {
        convert::try_to_device(self.as_dyn_mut(), device)
    }

    /// Converts every floating-point parameter and buffer to `dtype` (integer and bool
    /// buffers, such as `num_batches_tracked`, keep theirs, as PyTorch), in place: handles
    /// held elsewhere see the change, and an optimizer's state follows at its next step
    /// (moments cast with their values, step counts kept; its `state_dict` shows the old
    /// dtype until then). Optimizers step f32 and f64 parameters only.
    ///
    /// # Panics
    /// When `dtype` is not a floating-point type, when a lazy sub-module has no parameters
    /// yet (before its first forward): they would be made in f32 when it runs (PyTorch
    /// records the dtype for them; nn asks for the dry run first), or when a sub-module
    /// refuses the conversion ([`check_conversion`](Module::check_conversion)); nothing is
    /// converted then.
    #[track_caller]
    fn to_dtype(&mut self, dtype: DType) {
        convert::to_dtype(self.as_dyn_mut(), dtype)
    }

    /// Gives every parameter and buffer new storage on `device`, filled with zeros, without
    /// reading the old values (PyTorch's `to_empty`, whose storage is uninitialised): the
    /// way from a model built on the meta device to one whose values are then set by hand
    /// (an init function through [`apply`](Module::apply)), which
    /// [`to_device`](Module::to_device) refuses for meta tensors. Tied tensors stay tied;
    /// gradients are dropped.
    ///
    /// ```
    /// use nn_core::{with_device, Device, Module, Parameter, Tensor};
    ///
    /// #[derive(Module)]
    /// struct Net {
    ///     #[param] w: Parameter,
    /// }
    ///
    /// let mut net = with_device(Device::Meta, || Net { w: Parameter::new(Tensor::ones(&[2])) });
    /// assert!(net.try_to_device(Device::Cpu).is_err()); // no values to move
    /// net.to_empty(Device::Cpu).unwrap();
    /// assert_eq!((net.w.device(), net.w.to_vec()), (Device::Cpu, vec![0.0, 0.0]));
    /// ```
    ///
    /// # Errors
    /// As [`try_to_device`](Module::try_to_device), but for meta tensors; nothing changes
    /// then.
    fn to_empty(&mut self, device: Device) -> crate::Result<()> {
        convert::to_empty(self.as_dyn_mut(), device)
    }

    /// Clears the gradient of every parameter (a lazy sub-module that has not run yet has
    /// none to clear).
    fn zero_grad(&self) {
        walk_unnamed(self.as_dyn(), &mut |item| {
            if let Item::Param(p) = item {
                p.zero_grad();
            }
        });
    }

    /// Sets `requires_grad` on every parameter of this module and its sub-modules
    /// (freezing with `false`). Takes `&self` (parameters are shared handles), so any
    /// subtree can be frozen: `model.get_submodule("encoder")?.requires_grad_(false)`.
    ///
    /// # Panics
    /// When a lazy sub-module has no parameters yet (before its first forward): the setting
    /// would be lost when they are made, as PyTorch refuses `requires_grad_` on an
    /// uninitialised parameter.
    #[track_caller]
    fn requires_grad_(&self, requires_grad: bool) {
        if self.first_uninitialized().is_some() {
            refuse_uninitialized(
                self.as_dyn(),
                &format!("requires_grad_({requires_grad})"),
                "and the setting would be lost when they are made",
            );
        }
        for p in self.parameters() {
            p.requires_grad_(requires_grad);
        }
    }

    /// Total number of parameter elements (tied parameters counted once).
    fn num_parameters(&self) -> usize {
        self.parameters().iter().map(|p| p.numel()).sum()
    }

    /// Number of parameter elements that require grad.
    fn num_trainable_parameters(&self) -> usize {
        self.parameters().iter().filter(|p| p.requires_grad()).map(|p| p.numel()).sum()
    }

    /// Calls `f` on every sub-module (children first, then `self`, as PyTorch's `apply`).
    fn apply(&mut self, f: &mut dyn FnMut(&mut dyn Module)) {
        self.visit_modules_mut(&mut |_, m| m.apply(f));
        f(self.as_dyn_mut());
    }

    // ------------------------------------------------------------------------------
    // Hooks
    // ------------------------------------------------------------------------------

    /// `self` as a trait object.
    #[doc(hidden)]
    fn as_dyn(&self) -> &dyn Module;

    /// `self` as a mutable trait object.
    #[doc(hidden)]
    fn as_dyn_mut(&mut self) -> &mut dyn Module;
}

impl fmt::Display for dyn Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_module(self, f)
    }
}

/// A conversion of a whole module, as [`Module::check_conversion`] is asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Conversion {
    /// [`Module::to_device`] (or [`Module::to_empty`]) to this device.
    Device(Device),
    /// [`Module::to_dtype`] to this dtype.
    DType(DType),
}

/// What a parameter list taken before a lazy module ran would do.
const LIST_MISSES: &str = "so a list taken now (an optimizer built from it) would miss them";

/// Panics naming the first lazy module of `m` (itself included) that has not run yet, and
/// what `op` would get wrong (`consequence`).
#[track_caller]
fn refuse_uninitialized(m: &dyn Module, op: &str, consequence: &str) {
    let (path, lazy) = m.first_uninitialized().expect("called for a module with a lazy sub-module");
    let at = if path.is_empty() { String::new() } else { format!(" `{path}`") };
    panic!(
        "{op}: the lazy module{at} ({}) has no parameters until its first forward, {consequence}; run one forward \
         pass first (a dry run)",
        lazy.type_name()
    );
}
