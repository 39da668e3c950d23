//! `Arc<M>` as a module: one module held by handle, for what must keep it past a call (an
//! activation [checkpoint](crate::grad_checkpoint) recomputes its block in backward). It
//! has `M`'s names, state, hooks and forward; changing it (`to_device`, `train`,
//! `load_state_dict` through `&mut`) needs the handle to be the only one, and panics
//! naming the module otherwise, where a silent change of one clone would be a change of
//! all. `deep_copy` gives a new `Arc` over an independent copy.

use std::any::Any;
use std::sync::Arc;

use super::{Compute, HasBase, Item, Module, ModuleBase, Name, SetChild};

/// The only handle on `m`, mutably, or a panic naming the module and why it is shared.
#[track_caller]
fn unique<'m, M: Module>(m: &'m mut Arc<M>, what: &str) -> &'m mut M {
    let (name, n) = (m.type_name(), Arc::strong_count(m));
    Arc::get_mut(m).unwrap_or_else(|| {
        panic!(
            "{what}: this `Arc<{name}>` is one of {n} handles on the module (a checkpointed forward whose backward has \
             not run holds one): it cannot change while shared; run backward or drop the other handles first"
        )
    })
}

impl<M: Module> Module for Arc<M> {
    fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        (**self).visit(f)
    }
    #[track_caller]
    fn visit_modules_mut<'a>(&'a mut self, f: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {
        unique(self, "changing a sub-module").visit_modules_mut(f)
    }
    fn runs_forward(&self) -> bool {
        (**self).runs_forward()
    }
    fn __set_child(&mut self, name: &str, slot: &mut dyn Any) -> SetChild {
        unique(self, "set_submodule").__set_child(name, slot)
    }
    fn deep_copy_into(&self, copier: &mut super::DeepCopier, slot: super::CopySlot<'_>) {
        slot.put(Arc::new(copier.module(&**self)))
    }
    fn type_name(&self) -> &'static str {
        (**self).type_name()
    }
    fn extra_repr(&self) -> String {
        (**self).extra_repr()
    }
    fn base(&self) -> Option<&ModuleBase> {
        (**self).base()
    }
    fn base_mut(&mut self) -> Option<&mut ModuleBase> {
        unique(self, "base_mut").base_mut()
    }
    fn as_any(&self) -> &dyn Any {
        (**self).as_any()
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        unique(self, "as_any_mut").as_any_mut()
    }
    // The handle itself, not the module inside: a walk over the tree then meets the `Arc`
    // and can ask it how many handles there are before a load that needs `&mut`.
    fn as_dyn(&self) -> &dyn Module {
        self
    }
    fn handle_count(&self) -> usize {
        Arc::strong_count(self)
    }
    fn as_dyn_mut(&mut self) -> &mut dyn Module {
        unique(self, "as_dyn_mut").as_dyn_mut()
    }
    fn is_uninitialized(&self) -> bool {
        (**self).is_uninitialized()
    }
    fn check_conversion(&self, to: super::Conversion) -> crate::Result<()> {
        (**self).check_conversion(to)
    }
    fn set_training(&mut self, training: bool) {
        unique(self, if training { "train" } else { "eval" }).set_training(training)
    }
    fn is_training(&self) -> bool {
        (**self).is_training()
    }
    fn apply(&mut self, f: &mut dyn FnMut(&mut dyn Module)) {
        unique(self, "apply").apply(f)
    }
    fn try_to_device(&mut self, device: crate::Device) -> crate::Result<()> {
        unique(self, "to_device").try_to_device(device)
    }
    fn to_empty(&mut self, device: crate::Device) -> crate::Result<()> {
        unique(self, "to_empty").to_empty(device)
    }
    #[track_caller]
    fn to_dtype(&mut self, dtype: crate::DType) {
        unique(self, "to_dtype").to_dtype(dtype)
    }
    super::accessors::forward_state_dict_reads!();
    #[track_caller]
    fn set_extra_state_json(&mut self, state: &serde_json::Value) {
        unique(self, "load_state_dict").set_extra_state_json(state)
    }
}

impl<M: HasBase> HasBase for Arc<M> {
    fn module_base(&self) -> &ModuleBase {
        (**self).module_base()
    }
}

impl<M: Compute> Compute for Arc<M> {
    type Input = M::Input;
    type Output = M::Output;
    #[allow(deprecated)] // the handle's `forward` runs the hooks (the module's base is the handle's)
    fn compute(&self, input: &M::Input) -> M::Output {
        (**self).compute(input)
    }
}
