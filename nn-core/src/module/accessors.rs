//! What hand-written `Module` impls share: the accessor macro and the `Box<M>` impl.

use std::any::Any;

use super::{Item, Module, ModuleBase, Name, SetChild};

/// The six accessor methods every hand-written `Module` impl repeats (`base`, `base_mut`,
/// `as_any`, `as_any_mut`, `as_dyn`, `as_dyn_mut`); `#[derive(Module)]` writes them itself.
/// Pass the name of the `ModuleBase` field, or nothing when `base`/`base_mut` are written by
/// hand. A hand-written module with a base either implements [`Compute`](super::Compute) (and
/// [`HasBase`](super::HasBase)) or overrides [`Module::runs_forward`] to return false, as the containers
/// do: a hook on it must be able to fire.
///
/// ```
/// use nn_core::module::HoldsState;
/// use nn_core::{Item, Module, ModuleBase, Name, Parameter, Tensor};
///
/// /// A run-time list of parameters, named "0", "1", ...
/// struct ParamList {
///     params: Vec<Parameter>,
///     base: ModuleBase,
/// }
/// impl HoldsState for ParamList {}
/// impl Module for ParamList {
///     fn runs_forward(&self) -> bool {
///         false // it holds parameters; it has no forward
///     }
///     fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
///         for (i, p) in self.params.iter().enumerate() {
///             f(Name::Index(i), Item::Param(p));
///         }
///     }
///     fn visit_modules_mut<'a>(&'a mut self, _: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {}
///     fn type_name(&self) -> &'static str {
///         "ParamList"
///     }
///     nn_core::module_accessors!(base);
/// }
///
/// let mut l = ParamList { params: vec![Parameter::new(Tensor::ones(&[2]))], base: ModuleBase::new() };
/// assert_eq!(l.state_dict().keys().collect::<Vec<_>>(), ["0"]);
/// l.eval();
/// assert!(!l.is_training());
/// ```
#[macro_export]
macro_rules! module_accessors {
    ($field:ident) => {
        fn base(&self) -> ::core::option::Option<&$crate::ModuleBase> {
            ::core::option::Option::Some(&self.$field)
        }
        fn base_mut(&mut self) -> ::core::option::Option<&mut $crate::ModuleBase> {
            ::core::option::Option::Some(&mut self.$field)
        }
        $crate::module_accessors!();
    };
    () => {
        fn as_any(&self) -> &dyn ::core::any::Any {
            self
        }
        fn as_any_mut(&mut self) -> &mut dyn ::core::any::Any {
            self
        }
        fn as_dyn(&self) -> &dyn $crate::Module {
            self
        }
        fn as_dyn_mut(&mut self) -> &mut dyn $crate::Module {
            self
        }
    };
}

impl<M: Module + ?Sized> Module for Box<M> {
    fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        (**self).visit(f)
    }
    fn visit_modules_mut<'a>(&'a mut self, f: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {
        (**self).visit_modules_mut(f)
    }
    fn runs_forward(&self) -> bool {
        (**self).runs_forward()
    }
    fn __set_child(&mut self, name: &str, slot: &mut dyn Any) -> SetChild {
        (**self).__set_child(name, slot)
    }
    // The inner module puts its copy into a slot of `Box<M>` (or `Box<dyn Module>`); a
    // `Box<dyn Layer>` slot takes the layer's boxed copy, which knows its concrete type.
    fn deep_copy_into(&self, copier: &mut super::DeepCopier, slot: super::CopySlot<'_>) {
        let layer = (self as &dyn Any).downcast_ref::<Box<dyn super::Layer>>();
        if let (Some(layer), Some(out)) = (layer, slot.0.downcast_mut::<Option<Box<dyn super::Layer>>>()) {
            *out = Some((**layer).deep_copy_layer(copier));
            return;
        }
        (**self).deep_copy_into(copier, slot)
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
        (**self).base_mut()
    }
    fn as_any(&self) -> &dyn Any {
        (**self).as_any()
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        (**self).as_any_mut()
    }
    fn as_dyn(&self) -> &dyn Module {
        (**self).as_dyn()
    }
    fn as_dyn_mut(&mut self) -> &mut dyn Module {
        (**self).as_dyn_mut()
    }
    fn handle_count(&self) -> usize {
        (**self).handle_count()
    }
    // The methods a module may override, passed through: with the defaults, a boxed lazy
    // layer would list no parameters instead of refusing, and a boxed wrapper's own mode,
    // `apply` and conversion rules would be skipped.
    fn is_uninitialized(&self) -> bool {
        (**self).is_uninitialized()
    }
    fn check_conversion(&self, to: super::Conversion) -> crate::Result<()> {
        (**self).check_conversion(to)
    }
    fn set_training(&mut self, training: bool) {
        (**self).set_training(training)
    }
    fn is_training(&self) -> bool {
        (**self).is_training()
    }
    fn apply(&mut self, f: &mut dyn FnMut(&mut dyn Module)) {
        (**self).apply(f)
    }
    fn try_to_device(&mut self, device: crate::Device) -> crate::Result<()> {
        (**self).try_to_device(device)
    }
    fn to_empty(&mut self, device: crate::Device) -> crate::Result<()> {
        (**self).to_empty(device)
    }
    #[track_caller]
    fn to_dtype(&mut self, dtype: crate::DType) {
        (**self).to_dtype(dtype)
    }
    forward_state_dict_reads!();
    fn set_extra_state_json(&mut self, state: &serde_json::Value) {
        (**self).set_extra_state_json(state)
    }
}

/// The state-dict methods that a handle on a module (`Box`, `Arc`) passes to the module
/// unchanged: every one that only reads.
macro_rules! forward_state_dict_reads {
    () => {
        fn transparent_inner(&self) -> Option<&dyn Module> {
            (**self).transparent_inner()
        }
        fn state_dict_version(&self) -> Option<u32> {
            (**self).state_dict_version()
        }
        fn state_dict_migration(&self) -> Option<&dyn crate::module::MigrateState> {
            (**self).state_dict_migration()
        }
        fn has_extra_state(&self) -> bool {
            (**self).has_extra_state()
        }
        fn extra_state_json(&self) -> Result<serde_json::Value, serde_json::Error> {
            (**self).extra_state_json()
        }
        fn check_extra_state_json(&self, state: &serde_json::Value) -> Result<(), serde_json::Error> {
            (**self).check_extra_state_json(state)
        }
    };
}
pub(crate) use forward_state_dict_reads;
