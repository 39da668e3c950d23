//! The `Module` impl shared by the lazy layers (`LazyLinear`, `LazyConv2d`): a `OnceLock`
//! holding the materialised layer, whose state is reported under the lazy layer's own
//! names (`weight`, `bias`) once it exists, and nothing before (see `is_uninitialized`).

/// Implements `HoldsState`, `Module` and `Display` for a lazy layer with fields `inner:
/// OnceLock<Layer>`, `base: ModuleBase` and the plain (`Clone`) fields listed in
/// `fields(..)`; `$placeholder` prints it before materialisation.
macro_rules! lazy_module {
    ($ty:ident, fields($($field:ident),*), |$s:ident| $placeholder:expr) => {
        impl nn_core::module::HoldsState for $ty {}

        impl nn_core::Module for $ty {
            fn visit<'a>(&'a self, f: &mut dyn FnMut(nn_core::Name<'a>, nn_core::Item<'a>)) {
                if let Some(m) = self.inner.get() {
                    m.visit(f);
                }
            }
            fn visit_modules_mut<'a>(&'a mut self, _f: &mut dyn FnMut(nn_core::Name<'_>, &'a mut dyn nn_core::Module)) {
            }
            /// The lazy type until the first forward, then the materialised layer's (as
            /// PyTorch's lazy module becomes its class): see `as_any`.
            fn type_name(&self) -> &'static str {
                match self.inner.get() {
                    Some(m) => nn_core::Module::type_name(m),
                    None => stringify!($ty),
                }
            }
            fn is_uninitialized(&self) -> bool {
                self.inner.get().is_none()
            }
            /// A lazy layer copies as it stands: still lazy, or with a copy of its layer.
            fn deep_copy_into(&self, copier: &mut nn_core::module::DeepCopier, slot: nn_core::module::CopySlot<'_>) {
                let inner = std::sync::OnceLock::new();
                if let Some(m) = self.inner.get() {
                    let _ = inner.set(copier.module(m));
                }
                slot.put($ty { inner, $($field: self.$field.clone(),)* base: self.base.deep_copy() });
            }
            fn extra_repr(&self) -> String {
                match self.inner.get() {
                    Some(m) => nn_core::Module::extra_repr(m),
                    None => {
                        let $s = self;
                        $placeholder
                    }
                }
            }
            fn base(&self) -> Option<&nn_core::ModuleBase> {
                Some(&self.base)
            }
            /// The lazy layer's flag and, once it exists, the layer's: the layer's forward
            /// reads its own flag, so without this a materialised batch norm would keep
            /// training after `eval()`.
            fn set_training(&mut self, training: bool) {
                self.base.set_training(training);
                if let Some(m) = self.inner.get_mut() {
                    nn_core::Module::set_training(m, training);
                }
            }
            fn base_mut(&mut self) -> Option<&mut nn_core::ModuleBase> {
                Some(&mut self.base)
            }
            // Once materialised, downcasts see the layer it became (PyTorch's lazy module
            // turns into its class after the first forward): an `apply` initialiser that
            // downcasts to the layer's type reached every such layer but the lazy ones.
            fn as_any(&self) -> &dyn std::any::Any {
                match self.inner.get() {
                    Some(m) => m,
                    None => self,
                }
            }
            fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
                if self.inner.get().is_some() {
                    return self.inner.get_mut().expect("materialised");
                }
                self
            }
            fn as_dyn(&self) -> &dyn nn_core::Module {
                self
            }
            fn as_dyn_mut(&mut self) -> &mut dyn nn_core::Module {
                self
            }
        }

        impl nn_core::HasBase for $ty {
            fn module_base(&self) -> &nn_core::ModuleBase {
                &self.base
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                nn_core::module::fmt_module(self, f)
            }
        }
    };
}
pub(crate) use lazy_module;
