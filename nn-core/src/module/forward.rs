//! How a module runs: implement [`Compute`], call [`Forward::forward`].
//!
//! PyTorch separates the method a module defines (`forward`) from the way it is called
//! (`module(x)`, whose `__call__` runs the hooks around `forward`); calling `.forward`
//! directly skips the hooks, silently. nn makes the same split, but the way around the
//! hooks does not exist:
//!
//! - a module implements [`Compute`]: its input and output types and the computation;
//! - every caller uses [`Forward::forward`], which nn implements once, for every
//!   `Compute` type, and which runs the module's hooks around `compute`. `Forward`
//!   cannot be implemented by hand (it is sealed), so no module's `forward` can forget
//!   its hooks, and a module cannot be run without them: `compute` is only the body.
//! - `Compute` requires [`HasBase`]: a module that runs has a [`ModuleBase`] to hold its
//!   hooks (`#[derive(Module)]` implements `HasBase` for a struct with a `#[base]`
//!   field, and asserts in turn that such a struct implements `Compute`). So every
//!   module that runs accepts hooks, and a module that accepts hooks runs.
//!
//! Inputs and outputs can be anything that names one *primary* tensor and lists its tensor
//! slots ([`ModuleIo`]): a `Tensor`, a tuple whose first element is a `Tensor`
//! (`(Tensor, Option<Tensor>)`, `(Tensor, String)`), or a struct of one's own such as the
//! attention layers' inputs with their masks. The one-tensor hooks see and may replace the
//! primary tensors; the `_tensors` hooks see the module and every slot, as PyTorch's hooks
//! see `args` and `output` (see [`hooks`](super::hooks)).
//!
//! ```
//! use nn_core::prelude::*;
//!
//! #[derive(Module)]
//! struct Scale {
//!     #[param] s: Parameter,
//!     #[base] base: ModuleBase,
//! }
//!
//! impl Compute for Scale {
//!     type Input = Tensor;
//!     type Output = Tensor;
//!     fn compute(&self, x: &Tensor) -> Tensor {
//!         x * &*self.s
//!     }
//! }
//!
//! let m = Scale { s: Parameter::new(Tensor::full(&[1], 3.0)), base: ModuleBase::new() };
//! let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
//! let log = seen.clone();
//! m.register_forward_hook(move |_, y| { log.lock().unwrap().push(y.to_vec()); None }).unwrap();
//! assert_eq!(m.forward(&Tensor::ones(&[2])).to_vec(), [3.0, 3.0]);
//! assert_eq!(*seen.lock().unwrap(), [vec![3.0, 3.0]]); // the hook ran: nothing to opt into
//! ```

use std::borrow::Cow;

use super::{Module, ModuleBase};
use crate::tensor::Tensor;

/// A module's input or output as its hooks see it: one primary tensor (what the
/// one-tensor hooks see and replace), and every tensor it holds as *slots* (what the
/// `_tensors` hooks see and replace; see [`io`](super::io)).
///
/// nn implements it for `Tensor`, for tuples of up to four parts whose first is a
/// `Tensor` and whose others implement [`IoTensors`](super::IoTensors), and the layers'
/// input structs implement it by hand. A struct of one's own lists its tensor fields:
///
/// ```
/// use nn_core::module::{slots_of, IoSlots, ModuleIo};
/// use nn_core::Tensor;
///
/// #[derive(Clone)]
/// struct Pair { x: Tensor, mask: Option<Tensor>, scale: f64 }
///
/// impl ModuleIo for Pair {
///     fn primary(&self) -> &Tensor { &self.x }
///     fn with_primary(&self, x: Tensor) -> Self { Pair { x, ..self.clone() } }
///     fn tensors(&self) -> Vec<Option<Tensor>> { slots_of(&(self.x.clone(), self.mask.clone())) }
///     fn with_tensors(&self, slots: Vec<Option<Tensor>>) -> Self {
///         let mut s = IoSlots::new("Pair", slots, 2);
///         Pair { x: s.take(&self.x), mask: s.take(&self.mask), scale: self.scale }
///     }
/// }
/// let p = Pair { x: Tensor::ones(&[2]), mask: None, scale: 0.5 };
/// assert_eq!(p.tensors().len(), 2);
/// let q = p.with_tensors(vec![Some(Tensor::zeros(&[2])), Some(Tensor::ones(&[2]))]);
/// assert!(q.mask.is_some());
/// ```
pub trait ModuleIo: Clone {
    /// The tensor the one-tensor hooks see (for tuples, the first element); slot 0.
    fn primary(&self) -> &Tensor;
    /// A copy with the primary tensor replaced (what a one-tensor hook's returned tensor
    /// becomes).
    fn with_primary(&self, primary: Tensor) -> Self;
    /// Every tensor slot, the primary first: the other elements of a tuple, the tensor
    /// fields of a struct in declaration order, `None` where an optional tensor is
    /// absent. The number of slots is fixed by the value's layout, not by which optional
    /// tensors are given.
    fn tensors(&self) -> Vec<Option<Tensor>>;
    /// A copy with every slot replaced, in the order of [`tensors`](Self::tensors).
    ///
    /// # Panics
    /// When `slots` has another length than `tensors()`, or `None` where a tensor is
    /// required (the primary, a field that is not optional).
    fn with_tensors(&self, slots: Vec<Option<Tensor>>) -> Self;
}

/// A module that owns a [`ModuleBase`]: the hook lists and training flag of a module that
/// runs. `#[derive(Module)]` implements it for a struct with a `#[base]` field.
#[diagnostic::on_unimplemented(
    message = "`{Self}` computes a forward but has no `#[base]` field to hold its hooks",
    label = "`{Self}` has no `ModuleBase`",
    note = "add `#[base] base: ModuleBase` to `{Self}` (initialised with `ModuleBase::new()`): every module that runs \
            accepts hooks, and its hooks always fire"
)]
pub trait HasBase: Module {
    /// The base.
    fn module_base(&self) -> &ModuleBase;
}

/// The computation of a module: what PyTorch users write as `def forward`. Implement
/// this; call [`Forward::forward`], which runs the hooks around it.
///
/// `Input` and `Output` name the module's signature: `Tensor` for the usual layer, a
/// tuple or a struct for several inputs or outputs (masks, a task name, attention
/// weights). See the [module docs](self).
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not compute a forward: it does not implement `Compute`",
    label = "no `impl Compute for {Self}`",
    note = "write `impl Compute for {Self} {{ type Input = Tensor; type Output = Tensor; fn compute(&self, x: &Tensor) \
            -> Tensor {{ ... }} }}`"
)]
pub trait Compute: HasBase {
    /// What the module takes (`Tensor`, a tuple, or an input struct).
    type Input: ModuleIo;
    /// What the module returns.
    type Output: ModuleIo;
    /// The computation. Sub-modules are called with [`Forward::forward`], so their hooks
    /// run too.
    ///
    /// Implement it; never call it. Called directly (`self.fc.compute(x)`), it would skip
    /// the module's hooks, as calling `module.forward(x)` does in PyTorch, so a call is a
    /// `deprecated` warning that says to call `forward` (an error under `-D warnings`).
    /// Implementing it warns nothing. (Deprecation is the one attribute that marks the
    /// call site and not the implementation; the method itself is not going away.)
    #[deprecated(
        note = "calling `compute` skips the module's hooks: call `forward` (it runs the hooks around `compute`); \
                `compute` is only to be implemented"
    )]
    fn compute(&self, input: &Self::Input) -> Self::Output;
}

/// What [`Forward::forward`] accepts for a module whose input is `I`: a `&I` or an owned
/// `I`; for tuple inputs a tuple of references (`bilinear.forward((&x1, &x2))`) or of owned
/// values (`bilinear.forward((x1, x2))`); for input structs whatever their layer converts
/// (a plain `&Tensor` for self-attention, say).
#[diagnostic::on_unimplemented(
    message = "this module's `forward` takes `{I}` (its `Compute::Input`), not `{Self}`",
    label = "expected `&{I}` or `{I}` here",
    note = "pass `&input` or the input itself; a tuple input takes a tuple of references, e.g. `(&x, &mask)`"
)]
pub trait ForwardArg<'a, I: Clone> {
    /// The input, borrowed where possible.
    fn into_input(self) -> Cow<'a, I>;
}

impl<'a, I: Clone> ForwardArg<'a, I> for &'a I {
    fn into_input(self) -> Cow<'a, I> {
        Cow::Borrowed(self)
    }
}

/// An owned input, moved in: `model.forward(x)`, `bilinear.forward((x1, x2))`.
impl<'a, I: Clone> ForwardArg<'a, I> for I {
    fn into_input(self) -> Cow<'a, I> {
        Cow::Owned(self)
    }
}

impl<'a, B: Clone> ForwardArg<'a, (Tensor, B)> for (&'a Tensor, &'a B) {
    fn into_input(self) -> Cow<'a, (Tensor, B)> {
        Cow::Owned((self.0.clone(), self.1.clone()))
    }
}

impl<'a, B: Clone, C: Clone> ForwardArg<'a, (Tensor, B, C)> for (&'a Tensor, &'a B, &'a C) {
    fn into_input(self) -> Cow<'a, (Tensor, B, C)> {
        Cow::Owned((self.0.clone(), self.1.clone(), self.2.clone()))
    }
}

mod sealed {
    #[diagnostic::on_unimplemented(
        message = "`Forward` is implemented by nn for every module that implements `Compute`",
        label = "implement `Compute` for `{Self}` instead",
        note = "`forward` runs the module's hooks around `compute`; write `impl Compute for {Self} {{ type Input = \
                Tensor; type Output = Tensor; fn compute(&self, x: &Tensor) -> Tensor {{ ... }} }}`"
    )]
    pub trait Sealed {}
    impl<M: super::Compute + ?Sized> Sealed for M {}
}

/// Running a module: `module.forward(&x)`, PyTorch's `module(x)`. Implemented for every
/// [`Compute`] type (and only those): runs the forward pre-hooks, `compute`, the forward
/// hooks, and wires the full backward hooks into the graph.
pub trait Forward: sealed::Sealed {
    /// The module's input type.
    type Input: ModuleIo;
    /// The module's output type.
    type Output: ModuleIo;

    /// Runs the module on `input` with its hooks.
    fn forward<'a>(&self, input: impl ForwardArg<'a, Self::Input>) -> Self::Output
    where
        Self::Input: 'a;
}

impl<M: Compute + ?Sized> Forward for M {
    type Input = M::Input;
    type Output = M::Output;

    fn forward<'a>(&self, input: impl ForwardArg<'a, M::Input>) -> M::Output
    where
        M::Input: 'a,
    {
        let input = input.into_input();
        let _scope = crate::autograd::trace::module(self.module_base().trace_key());
        let _checks = crate::autograd::forward_checks::enter(self.type_name(), self.module_base().is_training());
        let _running = super::running::enter(self.as_dyn());
        #[allow(deprecated)] // the one call: with the hooks around it
        super::hook_run::call(self.module_base(), self.as_dyn(), &*input, |x| self.compute(x))
    }
}

/// A module from one tensor to one tensor: what `Sequential` holds and what
/// `Box<dyn Layer>` slots take. In generic code, `M: Layer` makes `m.forward(&x)`
/// available.
pub trait Layer: Compute<Input = Tensor, Output = Tensor> + Send + Sync {
    /// A [deep copy](super::Module::deep_copy) of this layer, boxed: how a container of
    /// `Box<dyn Layer>` (`Sequential`) copies layers whose types it does not know. Call it on
    /// the layer (`(**boxed).deep_copy_layer(..)`), not on its box.
    fn deep_copy_layer(&self, copier: &mut super::DeepCopier) -> Box<dyn Layer>;
}
impl<T: Compute<Input = Tensor, Output = Tensor> + Send + Sync> Layer for T {
    fn deep_copy_layer(&self, copier: &mut super::DeepCopier) -> Box<dyn Layer> {
        Box::new(copier.module(self))
    }
}

impl<M: HasBase + ?Sized> HasBase for Box<M> {
    fn module_base(&self) -> &ModuleBase {
        (**self).module_base()
    }
}

impl<M: Compute + ?Sized> Compute for Box<M> {
    type Input = M::Input;
    type Output = M::Output;
    #[allow(deprecated)] // the box's `forward` runs the hooks (the inner module's base is the box's)
    fn compute(&self, input: &M::Input) -> M::Output {
        (**self).compute(input)
    }
}
