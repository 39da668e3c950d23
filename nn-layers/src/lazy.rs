//! The `Module` impl shared by the lazy layers (`LazyLinear`, `LazyConv2d`): a `OnceLock`
//! holding the materialised layer, whose state is reported under the lazy layer's own
//! names (`weight`, `bias`) once it exists, and nothing before (see `is_uninitialized`).

/// Implements `HoldsState`, `Module` and `Display` for a lazy layer with fields `inner:
/// OnceLock<Layer>` and `base: ModuleBase`; `$placeholder` prints it before materialisation.
macro_rules! lazy_module {
    ($ty:ident, |$s:ident| $placeholder:expr) => {
        impl nn_core::module::HoldsState for $ty {}

        impl nn_core::Module for $ty {
            fn visit<'a>(&'a self, f: &mut dyn FnMut(nn_core::Name<'a>, nn_core::Item<'a>)) {
                if let Some(m) = self.inner.get() {
                    m.visit(f);
                }
            }
            fn visit_modules_mut<'a>(&'a mut self, _f: &mut dyn FnMut(nn_core::Name<'_>, &'a mut dyn nn_core::Module)) {
            }
            fn type_name(&self) -> &'static str {
                stringify!($ty)
            }
            fn is_uninitialized(&self) -> bool {
                self.inner.get().is_none()
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
            nn_core::module_accessors!(base);
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
