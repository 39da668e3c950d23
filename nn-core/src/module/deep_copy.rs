//! Deep copies of module trees: PyTorch's `copy.deepcopy(model)`.
//!
//! A module's `Clone` would copy [`Parameter`] *handles*, so the "copy" would train the
//! original (a target network that follows the online one, an EMA model that is the model):
//! modules are not `Clone` (`#[derive(Module)]` refuses a `Clone` impl at compile time), and
//! [`Module::deep_copy`] makes the independent copy instead. [`Module::deep_copy_into`] is
//! the one method behind it: `#[derive(Module)]` writes it field by field, through a
//! [`DeepCopier`] that copies each tensor once, so a tensor registered twice (GPT-2's head
//! tied to its embedding) is one tensor in the copy too.

use std::any::Any;
use std::collections::HashMap;

use super::{short_type_name, Module, Parameter};
use crate::autograd::no_grad;
use crate::tensor::{Tensor, TensorId};

/// The state of one deep copy: the copy of every parameter and buffer copied so far, keyed
/// by the original's identity, so that ties inside the copied tree stay ties.
///
/// A copied tensor has the original's values, shape, dtype, device and `requires_grad`, in a
/// buffer of its own; it has no gradient and no graph. Hand-written [`Module`] impls use it
/// in [`Module::deep_copy_into`]:
///
/// ```
/// use nn_core::module::{CopySlot, DeepCopier, HoldsState};
/// use nn_core::{Item, Module, Name, Parameter, Tensor};
///
/// /// Parameters registered at run time, named "0", "1", ...
/// struct Scales(Vec<Parameter>);
/// impl HoldsState for Scales {}
/// impl Module for Scales {
///     fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
///         for (i, p) in self.0.iter().enumerate() {
///             f(Name::Index(i), Item::Param(p));
///         }
///     }
///     fn visit_modules_mut<'a>(&'a mut self, _: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {}
///     fn type_name(&self) -> &'static str {
///         "Scales"
///     }
///     fn deep_copy_into(&self, copier: &mut DeepCopier, slot: CopySlot<'_>) {
///         slot.put(Scales(self.0.iter().map(|p| copier.parameter(p)).collect()));
///     }
///     nn_core::module_accessors!();
/// }
///
/// let shared = Parameter::new(Tensor::ones(&[2]));
/// let s = Scales(vec![shared.clone(), shared]);
/// let copy = s.deep_copy();
/// assert_ne!(copy.0[0].id(), s.0[0].id()); // new tensors ...
/// assert_eq!(copy.0[0].id(), copy.0[1].id()); // ... and the tie kept
/// ```
///
/// Two registered tensors that are views of one buffer (rather than one tensor) are copied
/// apart, where PyTorch's `deepcopy` keeps their storage shared; nn's modules register no
/// such views.
#[derive(Default)]
pub struct DeepCopier {
    /// The copy of every tensor copied so far, parameters and buffers alike, so that one
    /// tensor registered as both stays one tensor.
    tensors: HashMap<TensorId, Tensor>,
    parameters: HashMap<TensorId, Parameter>,
    /// The copies of parametrized parameters, keyed by the tensor they hold.
    parametrized: HashMap<TensorId, Parameter>,
}

impl DeepCopier {
    /// A copier that has copied nothing yet: one per copied tree, so that ties are kept
    /// within it (and only within it).
    pub fn new() -> Self {
        Self::default()
    }

    /// The copy of `p`: made on first sight, the same [`Parameter`] on every later one.
    ///
    /// A parametrized parameter is copied with its parametrizations (their originals
    /// through this copier too, so a single original stays the parameter's own tensor).
    pub fn parameter(&mut self, p: &Parameter) -> Parameter {
        let id = p.raw().id();
        if !p.is_parametrized() {
            return self.plain(p.raw());
        }
        if let Some(copy) = self.parametrized.get(&id) {
            return copy.clone();
        }
        let copy = Parameter::sharing(self.plain(p.raw()).raw().clone());
        super::parameter::parametrize::copy_parametrized(p, &copy, self);
        self.parametrized.insert(id, copy.clone());
        copy
    }

    /// The copy of the parameter tensor `t`, without parametrizations.
    fn plain(&mut self, t: &Tensor) -> Parameter {
        if let Some(copy) = self.parameters.get(&t.id()) {
            return copy.clone();
        }
        let values = self.tensors.entry(t.id()).or_insert_with(|| fresh(t)).clone();
        let copy = Parameter::with_requires_grad(values, t.requires_grad());
        self.parameters.insert(t.id(), copy.clone());
        copy
    }

    /// The copy of the buffer `t`: made on first sight, the same tensor on every later one.
    pub fn buffer(&mut self, t: &Tensor) -> Tensor {
        self.tensors
            .entry(t.id())
            .or_insert_with(|| {
                let copy = fresh(t);
                if t.requires_grad() {
                    copy.requires_grad_(true);
                }
                copy
            })
            .clone()
    }

    /// An independent copy of the sub-module `m`, sharing this copier's record of ties.
    ///
    /// # Panics
    /// When `m` (or a module inside it) cannot be copied: a hand-written [`Module`] impl
    /// without [`Module::deep_copy_into`], or a plain field that is not `Clone`. The message
    /// names the module and what to write.
    #[track_caller]
    pub fn module<M: Module>(&mut self, m: &M) -> M {
        let mut out: Option<M> = None;
        m.deep_copy_into(self, CopySlot(&mut out));
        out.unwrap_or_else(|| {
            panic!(
                "deep_copy: `{}` did not write its copy: its `deep_copy_into` must end with `slot.put(copy)`",
                m.type_name()
            )
        })
    }
}

/// Values of `t` in a buffer of their own, on its device and in its dtype, outside any graph.
fn fresh(t: &Tensor) -> Tensor {
    no_grad(|| t.detach().copy())
}

/// Where [`Module::deep_copy_into`] puts the copy it made: the caller's field, of the
/// module's own type, a `Box` of it, or a `Box<dyn Module>`.
pub struct CopySlot<'a>(pub(crate) &'a mut dyn Any);

impl CopySlot<'_> {
    /// Hands the copy to the caller.
    ///
    /// # Panics
    /// When the slot takes another type: a `deep_copy_into` that builds a value of another
    /// type than `Self`.
    #[track_caller]
    pub fn put<M: Module>(self, copy: M) {
        let slot = self.0;
        if let Some(s) = slot.downcast_mut::<Option<M>>() {
            *s = Some(copy);
        } else if let Some(s) = slot.downcast_mut::<Option<Box<M>>>() {
            *s = Some(Box::new(copy));
        } else if let Some(s) = slot.downcast_mut::<Option<Box<dyn Module>>>() {
            *s = Some(Box::new(copy));
        } else {
            panic!(
                "deep_copy: the copy of a `{}` does not fit where it is copied to (a `deep_copy_into` must put a \
                 value of its own type)",
                short_type_name::<M>()
            );
        }
    }
}
