//! Support for `#[derive(Module)]`'s generated code. Not a public API: names and
//! signatures change without notice.
//!
//! Unannotated fields are checked with autoref specialisation: `(&Probe::<T>::new())
//! .__nn_probe()` resolves to [`ProbeState`] when `T: HoldsState` and to [`ProbePlain`]
//! otherwise; the result must then satisfy an `Unregistered*` trait that only [`Plain`]
//! implements, whose `#[diagnostic::on_unimplemented]` text is the error the user reads,
//! underlined at their field.

use std::marker::PhantomData;

use crate::module::Parameter;
pub use crate::module::{HoldsState, Item, Module, ModuleBase, Name};
use crate::tensor::Tensor;

/// Carries a field type to the probe.
pub struct Probe<T: ?Sized>(PhantomData<T>);

impl<T: ?Sized> Probe<T> {
    /// A probe for `T`.
    pub const fn new() -> Self {
        Probe(PhantomData)
    }
}

impl<T: ?Sized> Default for Probe<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// The probe's answer for a type that holds module state.
pub struct Stateful<T: ?Sized>(PhantomData<T>);
/// The probe's answer for plain data.
pub struct Plain;

/// Chosen when the field type holds state.
pub trait ProbeState<T: ?Sized> {
    /// Classifies the field.
    fn __nn_probe(&self) -> Stateful<T>;
}
impl<T: ?Sized + HoldsState> ProbeState<T> for Probe<T> {
    fn __nn_probe(&self) -> Stateful<T> {
        Stateful(PhantomData)
    }
}

/// Chosen otherwise (one more autoref away).
pub trait ProbePlain {
    /// Classifies the field.
    fn __nn_probe(&self) -> Plain;
}
impl<T: ?Sized> ProbePlain for &Probe<T> {
    fn __nn_probe(&self) -> Plain {
        Plain
    }
}

macro_rules! unregistered {
    ($trait:ident, $check:ident, $note:literal) => {
        #[diagnostic::on_unimplemented(
                            message = "field of type `{T}` holds module state but is not registered",
                            label = "invisible to parameters(), state_dict() and to_device()",
                            note = $note
                        )]
        /// Only plain-data fields may stay unannotated.
        pub trait $trait<T: ?Sized> {}
        impl<T: ?Sized> $trait<T> for Plain {}
        /// Fails to compile, with this hint, when the probed field holds state.
        pub fn $check<T: ?Sized, K: $trait<T>>(_: K) {}
    };
}

unregistered!(
    UnregisteredList,
    check_list,
    "a list of layers is registered as `#[module] name: ModuleList<Layer>` (a `Vec` is invisible to the framework)"
);
unregistered!(UnregisteredTensorList, check_tensor_list, "tensors are registered one per field (`#[param] w: Parameter` or `#[buffer] b: Tensor`), or stacked into one tensor");
unregistered!(
    UnregisteredDict,
    check_dict,
    "a map of layers is registered as `#[module] name: ModuleDict<Layer>` (a `HashMap` is invisible to the framework)"
);
unregistered!(UnregisteredTensor, check_tensor, "a trained tensor is `#[param] name: Parameter`; other state that should move and be saved with the model is `#[buffer] name: Tensor`");
unregistered!(UnregisteredParam, check_param, "register it with `#[param]`");
unregistered!(UnregisteredOption, check_option, "annotate it (`#[module]`, `#[param]` or `#[buffer]`): an `Option` field registers its value when `Some`, like PyTorch's `None` registration");
unregistered!(
    UnregisteredTuple,
    check_tuple,
    "register each element as its own annotated field, or chain layers in a `#[module] Sequential`"
);
unregistered!(UnregisteredModule, check_module, "register it with `#[module]`");

/// A `#[param]` field: `Parameter` or `Option<Parameter>`.
#[diagnostic::on_unimplemented(
    message = "`#[param]` needs a `Parameter` or `Option<Parameter>`, got `{Self}`",
    label = "not a parameter type",
    note = "wrap a trained tensor with `Parameter::new(tensor)`; state that is not trained is `#[buffer] name: Tensor`"
)]
pub trait ParamField {
    /// Reports the parameter, if set.
    fn __nn_visit<'a>(&'a self, name: Name<'a>, f: &mut dyn FnMut(Name<'a>, Item<'a>));
}
impl ParamField for Parameter {
    fn __nn_visit<'a>(&'a self, name: Name<'a>, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        f(name, Item::Param(self))
    }
}
impl ParamField for Option<Parameter> {
    fn __nn_visit<'a>(&'a self, name: Name<'a>, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        if let Some(p) = self {
            f(name, Item::Param(p))
        }
    }
}

/// A `#[buffer]` field: `Tensor` or `Option<Tensor>`.
#[diagnostic::on_unimplemented(
    message = "`#[buffer]` needs a `Tensor` or `Option<Tensor>`, got `{Self}`",
    label = "not a buffer type",
    note = "a trained tensor is `#[param] name: Parameter`; sub-modules are `#[module]`"
)]
pub trait BufferField {
    /// Reports the buffer, if set.
    fn __nn_visit<'a>(&'a self, name: Name<'a>, persistent: bool, f: &mut dyn FnMut(Name<'a>, Item<'a>));
}
impl BufferField for Tensor {
    fn __nn_visit<'a>(&'a self, name: Name<'a>, persistent: bool, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        f(name, Item::Buffer { tensor: self, persistent })
    }
}
impl BufferField for Option<Tensor> {
    fn __nn_visit<'a>(&'a self, name: Name<'a>, persistent: bool, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        if let Some(t) = self {
            f(name, Item::Buffer { tensor: t, persistent })
        }
    }
}

/// A `#[module]` field: any `Module`, or an `Option` of one.
#[diagnostic::on_unimplemented(
    message = "`#[module]` needs a type that implements `Module`, got `{Self}`",
    label = "not a module",
    note = "derive it with `#[derive(Module)]`; a list of layers is a `ModuleList<_>`, a map of layers a `ModuleDict<_>`, a chain a `Sequential`"
)]
pub trait ModuleField {
    /// Reports the sub-module, if set.
    fn __nn_visit<'a>(&'a self, name: Name<'a>, f: &mut dyn FnMut(Name<'a>, Item<'a>));
    /// Hands the sub-module out mutably, if set.
    fn __nn_visit_mut(&mut self, name: Name<'_>, f: &mut dyn FnMut(Name<'_>, &mut dyn Module));
}
impl<M: Module> ModuleField for M {
    fn __nn_visit<'a>(&'a self, name: Name<'a>, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        f(name, Item::Module(self.as_dyn()))
    }
    fn __nn_visit_mut(&mut self, name: Name<'_>, f: &mut dyn FnMut(Name<'_>, &mut dyn Module)) {
        f(name, self.as_dyn_mut())
    }
}
impl<M: Module> ModuleField for Option<M> {
    fn __nn_visit<'a>(&'a self, name: Name<'a>, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        if let Some(m) = self {
            f(name, Item::Module(m.as_dyn()))
        }
    }
    fn __nn_visit_mut(&mut self, name: Name<'_>, f: &mut dyn FnMut(Name<'_>, &mut dyn Module)) {
        if let Some(m) = self {
            f(name, m.as_dyn_mut())
        }
    }
}

/// A `#[base]` field.
#[diagnostic::on_unimplemented(
    message = "`#[base]` needs a `ModuleBase`, got `{Self}`",
    label = "not a `ModuleBase`",
    note = "write `#[base] base: ModuleBase` (initialised with `ModuleBase::default()`)"
)]
pub trait BaseField {
    /// The base.
    fn __nn_base(&self) -> &ModuleBase;
    /// The base, mutably.
    fn __nn_base_mut(&mut self) -> &mut ModuleBase;
}
impl BaseField for ModuleBase {
    fn __nn_base(&self) -> &ModuleBase {
        self
    }
    fn __nn_base_mut(&mut self) -> &mut ModuleBase {
        self
    }
}

/// Optional extra text for the printout, selected with `#[module(extra_repr)]` on the
/// struct.
pub use crate::module::{fmt_module, ExtraRepr};
