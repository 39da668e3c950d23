//! Support for `#[derive(Module)]`'s generated code. Not a public API: names and
//! signatures change without notice.
//!
//! Unannotated fields are checked with autoref specialisation: `(&Probe::<T>::new())
//! .__nn_probe()` resolves to [`ProbeState`] when `T: HoldsState` and to [`ProbePlain`]
//! otherwise. The derive then requires the answer to implement a trait it defines next to
//! the check, implemented only for [`Plain`], whose `#[diagnostic::on_unimplemented]` text
//! (written for that field: its type and what to write instead) is the error the user
//! reads, underlined at `name: Type`.
//!
//! The `*Field` traits check annotated fields; their impls are
//! `#[diagnostic::do_not_recommend]` so that an error names the field's type and the fix,
//! not a list of unrelated implementors.

use std::any::Any;
use std::marker::PhantomData;

use crate::module::Parameter;
pub use crate::module::{CopySlot, DeepCopier, HoldsState, Item, Module, ModuleBase, Name};
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

/// A `#[param]` field: `Parameter` or `Option<Parameter>`.
#[diagnostic::on_unimplemented(
    message = "`#[param]` needs a `Parameter` or `Option<Parameter>`, got `{Self}`",
    label = "not a `Parameter`",
    note = "write `#[param] name: Parameter` (made with `Parameter::new(tensor)`); a tensor that is not trained is `#[buffer] name: Tensor`, and plain data needs no annotation"
)]
pub trait ParamField {
    /// Reports the parameter, if set.
    fn __nn_visit<'a>(&'a self, name: Name<'a>, f: &mut dyn FnMut(Name<'a>, Item<'a>));
    /// The field of a deep copy.
    fn __nn_copy(&self, c: &mut DeepCopier) -> Self
    where
        Self: Sized;
}
#[diagnostic::do_not_recommend]
impl ParamField for Parameter {
    fn __nn_visit<'a>(&'a self, name: Name<'a>, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        crate::module::parametrize::report(self, name, f)
    }
    fn __nn_copy(&self, c: &mut DeepCopier) -> Self {
        c.parameter(self)
    }
}
#[diagnostic::do_not_recommend]
impl ParamField for Option<Parameter> {
    fn __nn_visit<'a>(&'a self, name: Name<'a>, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        if let Some(p) = self {
            crate::module::parametrize::report(p, name, f)
        }
    }
    fn __nn_copy(&self, c: &mut DeepCopier) -> Self {
        self.as_ref().map(|p| c.parameter(p))
    }
}

/// A `#[buffer]` field: `Tensor` or `Option<Tensor>`.
#[diagnostic::on_unimplemented(
    message = "`#[buffer]` needs a `Tensor` or `Option<Tensor>`, got `{Self}`",
    label = "not a `Tensor`",
    note = "write `#[buffer] name: Tensor`; a trained tensor is `#[param] name: Parameter`, and plain data needs no annotation"
)]
pub trait BufferField {
    /// Reports the buffer, if set.
    fn __nn_visit<'a>(&'a self, name: Name<'a>, persistent: bool, f: &mut dyn FnMut(Name<'a>, Item<'a>));
    /// The field of a deep copy.
    fn __nn_copy(&self, c: &mut DeepCopier) -> Self
    where
        Self: Sized;
}
#[diagnostic::do_not_recommend]
impl BufferField for Tensor {
    fn __nn_visit<'a>(&'a self, name: Name<'a>, persistent: bool, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        f(name, Item::Buffer { tensor: self, persistent })
    }
    fn __nn_copy(&self, c: &mut DeepCopier) -> Self {
        c.buffer(self)
    }
}
#[diagnostic::do_not_recommend]
impl BufferField for Option<Tensor> {
    fn __nn_visit<'a>(&'a self, name: Name<'a>, persistent: bool, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        if let Some(t) = self {
            f(name, Item::Buffer { tensor: t, persistent })
        }
    }
    fn __nn_copy(&self, c: &mut DeepCopier) -> Self {
        self.as_ref().map(|t| c.buffer(t))
    }
}

/// A `#[module]` field: any `Module`, or an `Option` of one.
#[diagnostic::on_unimplemented(
    message = "`#[module]` needs a type that implements `Module`, got `{Self}`",
    label = "not a module",
    note = "a type of your own becomes a module with `#[derive(Module)]`, and a generic parameter one with a `Module` bound (`M: Module`); plain data needs no annotation: remove `#[module]`"
)]
pub trait ModuleField {
    /// The field of a deep copy.
    fn __nn_copy(&self, c: &mut DeepCopier) -> Self
    where
        Self: Sized;
    /// Reports the sub-module, if set.
    fn __nn_visit<'a>(&'a self, name: Name<'a>, f: &mut dyn FnMut(Name<'a>, Item<'a>));
    /// Hands the sub-module out mutably, if set.
    fn __nn_visit_mut<'a>(&'a mut self, name: Name<'_>, f: &mut dyn FnMut(Name<'_>, &'a mut dyn Module));
    /// Replaces the sub-module with the `Option` of a fitting type behind `slot`.
    fn __nn_set(&mut self, slot: &mut dyn Any) -> SetChild;
}
#[diagnostic::do_not_recommend]
impl<M: Module> ModuleField for M {
    fn __nn_copy(&self, c: &mut DeepCopier) -> Self {
        c.module(self)
    }
    fn __nn_visit<'a>(&'a self, name: Name<'a>, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        f(name, Item::Module(self.as_dyn()))
    }
    fn __nn_visit_mut<'a>(&'a mut self, name: Name<'_>, f: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {
        f(name, self.as_dyn_mut())
    }
    fn __nn_set(&mut self, slot: &mut dyn Any) -> SetChild {
        set_from(self, slot)
    }
}
#[diagnostic::do_not_recommend]
impl<M: Module> ModuleField for Option<M> {
    fn __nn_copy(&self, c: &mut DeepCopier) -> Self {
        self.as_ref().map(|m| c.module(m))
    }
    fn __nn_visit<'a>(&'a self, name: Name<'a>, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        if let Some(m) = self {
            f(name, Item::Module(m.as_dyn()))
        }
    }
    fn __nn_visit_mut<'a>(&'a mut self, name: Name<'_>, f: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {
        if let Some(m) = self {
            f(name, m.as_dyn_mut())
        }
    }
    fn __nn_set(&mut self, slot: &mut dyn Any) -> SetChild {
        match slot.downcast_mut::<Option<M>>().and_then(Option::take) {
            Some(m) => {
                *self = Some(m);
                SetChild::Done
            }
            None => SetChild::WrongType(crate::module::short_type_name::<M>()),
        }
    }
}

/// Moves the `M` behind `slot` (an `Option<M>`) into `target`.
pub fn set_from<M: Module>(target: &mut M, slot: &mut dyn Any) -> SetChild {
    match slot.downcast_mut::<Option<M>>().and_then(Option::take) {
        Some(m) => {
            *target = m;
            SetChild::Done
        }
        None => SetChild::WrongType(crate::module::short_type_name::<M>()),
    }
}

/// The check behind a `#[base]` field: a module that holds hooks must run.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has a `#[base]` field but no forward: it does not implement `Compute`",
    label = "hooks registered on `{Self}` could never fire",
    note = "implement `Compute` for `{Self}` (its forward) for every type its own bounds allow (a generic struct takes \
            its `Compute` impl's bounds, e.g. `struct Residual<M: Layer>`), or remove the `#[base]` field if it only \
            holds modules"
)]
pub trait BaseNeedsCompute {
    /// Never called.
    fn __nn_runs(&self) {}
}
#[diagnostic::do_not_recommend]
impl<T: crate::module::Compute + ?Sized> BaseNeedsCompute for T {}

/// A `#[base]` field.
#[diagnostic::on_unimplemented(
    message = "`#[base]` needs a `ModuleBase`, got `{Self}`",
    label = "not a `ModuleBase`",
    note = "write `#[base] base: ModuleBase` (initialised with `ModuleBase::default()`)"
)]
pub trait BaseField {
    /// The base of a deep copy.
    fn __nn_copy(&self) -> Self
    where
        Self: Sized;
    /// The base.
    fn __nn_base(&self) -> &ModuleBase;
    /// The base, mutably.
    fn __nn_base_mut(&mut self) -> &mut ModuleBase;
}
#[diagnostic::do_not_recommend]
impl BaseField for ModuleBase {
    fn __nn_copy(&self) -> ModuleBase {
        self.deep_copy()
    }
    fn __nn_base(&self) -> &ModuleBase {
        self
    }
    fn __nn_base_mut(&mut self) -> &mut ModuleBase {
        self
    }
}

/// Carries a plain field to the copy probe: [`CopyByClone`] when its type is `Clone`,
/// [`CopyRefused`] otherwise (one more autoref away).
pub struct CopyProbe<'a, T>(pub &'a T);

/// Chosen for a `Clone` plain field: the copy's field is a clone.
pub trait CopyByClone<T> {
    /// The field of a deep copy.
    fn __nn_copy_plain(&self, field: &str, module: &str) -> T;
}
impl<T: Clone> CopyByClone<T> for CopyProbe<'_, T> {
    fn __nn_copy_plain(&self, _: &str, _: &str) -> T {
        self.0.clone()
    }
}

/// Chosen otherwise: the copy cannot be made, and says which field stops it.
pub trait CopyRefused<T> {
    /// Panics naming the field.
    fn __nn_copy_plain(&self, field: &str, module: &str) -> T;
}
impl<T> CopyRefused<T> for &CopyProbe<'_, T> {
    #[track_caller]
    fn __nn_copy_plain(&self, field: &str, module: &str) -> T {
        panic!(
            "deep_copy: the plain field `{field}` of `{module}` (type `{}`) is not `Clone`, so `{module}` cannot be \
             copied: derive or implement `Clone` for that type (in a generic struct, bound the parameter by `Clone`)",
            std::any::type_name::<T>()
        )
    }
}

/// The check that a module is not `Clone`: `#[derive(Module)]` implements this trait for the
/// struct, which conflicts with this blanket impl (E0119, naming the trait) exactly when the
/// struct is `Clone`, generic or not.
#[allow(non_camel_case_types)]
pub trait ModuleIsNotClone_ItsCloneWouldShareParameters_CallDeepCopy {}
impl<T: Clone> ModuleIsNotClone_ItsCloneWouldShareParameters_CallDeepCopy for T {}

use crate::module::ExtraRepr;
pub use crate::module::{fmt_module, Compute, HasBase, MigrateState, SetChild};

/// The printout's extra text, selected with `#[module(extra_repr)]` on the struct.
#[diagnostic::on_unimplemented(
    message = "`#[module(extra_repr)]` needs `{Self}` to implement `ExtraRepr`",
    label = "`{Self}` does not implement `ExtraRepr`",
    note = "write `impl ExtraRepr for {Self} {{ fn extra_repr(&self) -> String {{ ... }} }}`, or remove `#[module(extra_repr)]`"
)]
pub trait ExtraReprField {
    /// The text inside the module's parentheses.
    fn __nn_extra_repr(&self) -> String;
}
#[diagnostic::do_not_recommend]
impl<T: ExtraRepr + ?Sized> ExtraReprField for T {
    fn __nn_extra_repr(&self) -> String {
        ExtraRepr::extra_repr(self)
    }
}

pub use serde_json::{Error as JsonError, Value as JsonValue};

/// The extra state, selected with `#[module(extra_state)]` on the struct: the `Module`
/// methods the derive writes go through this trait, so that a missing `ExtraState` impl is
/// reported at `extra_state`.
#[diagnostic::on_unimplemented(
    message = "`#[module(extra_state)]` needs `{Self}` to implement `ExtraState`",
    label = "`{Self}` does not implement `ExtraState`",
    note = "write `impl ExtraState for {Self} {{ type State = ...; fn extra_state(&self) -> Self::State {{ ... }} fn \
            set_extra_state(&mut self, state: Self::State) {{ ... }} }}`, or remove `#[module(extra_state)]`"
)]
pub trait ExtraStateField {
    /// The state as JSON.
    fn __nn_extra_state_json(&self) -> Result<JsonValue, JsonError>;
    /// Whether `state` deserialises as the module's state.
    fn __nn_check_extra_state_json(&self, state: &JsonValue) -> Result<(), JsonError>;
    /// Takes a state checked by `__nn_check_extra_state_json`.
    fn __nn_set_extra_state_json(&mut self, state: &JsonValue);
}
#[diagnostic::do_not_recommend]
impl<T: crate::module::ExtraState + ?Sized> ExtraStateField for T {
    fn __nn_extra_state_json(&self) -> Result<JsonValue, JsonError> {
        serde_json::to_value(crate::module::ExtraState::extra_state(self))
    }
    fn __nn_check_extra_state_json(&self, state: &JsonValue) -> Result<(), JsonError> {
        <T::State as serde::Deserialize>::deserialize(state).map(drop)
    }
    fn __nn_set_extra_state_json(&mut self, state: &JsonValue) {
        let state = <T::State as serde::Deserialize>::deserialize(state)
            .unwrap_or_else(|e| panic!("set_extra_state: a state checked before the load no longer parses: {e}"));
        crate::module::ExtraState::set_extra_state(self, state)
    }
}

/// One f32 GEMM `c = a b` (row-major; `ta`/`tb` read `a`/`b` as stored transposed) on an
/// explicit backend, `"gemm"` or `"matrixmultiply"`, with the usual thread policy: the
/// hook behind `benches/benches/kernels.rs`'s `gemm_backends` group, which is how the
/// backend choice in `nn_core::backend::cpu::gemm` is measured. Not API.
#[allow(clippy::too_many_arguments)]
pub fn gemm_f32_with_backend(
    backend: &str,
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    ta: bool,
    b: &[f32],
    tb: bool,
    c: &mut [f32],
) {
    use crate::backend::cpu::gemm::{gemm_on, Backend, MatRef};
    let backend = match backend {
        "gemm" => Backend::Gemm,
        "matrixmultiply" => Backend::MatrixMultiply,
        other => panic!("unknown GEMM backend {other:?} (expected \"gemm\" or \"matrixmultiply\")"),
    };
    assert!(a.len() == m * k && b.len() == k * n && c.len() == m * n, "gemm: operand lengths do not match {m}x{k}x{n}");
    gemm_on(backend, (m, k, n), 1.0, MatRef::row_major(a, (m, k), ta), MatRef::row_major(b, (k, n), tb), 0.0, c)
}
