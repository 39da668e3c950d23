//! [`Hooks`]: registering hooks on any module, `&dyn Module` items included.

use super::state_hooks::HookResult;
use super::{hooks, HookHandle, IncompatibleKeys, Module, ModuleBase};
use crate::error::{Error, Result};
use crate::state_dict::StateDict;
use crate::tensor::Tensor;

/// Hook registration, for every module and for the `&dyn Module` items of
/// `named_modules()` alike (in the [`prelude`](crate::prelude)). Hooks stay registered
/// until `handle.remove()`; see [`hooks`].
pub trait Hooks: Module {
    /// The base that holds this module's hooks: the module's own, when it runs.
    ///
    /// # Errors
    /// [`Error::NoHooks`] naming the module type when it does not run.
    fn hook_base(&self) -> Result<&ModuleBase> {
        match self.base() {
            Some(b) if self.runs_forward() => Ok(b),
            _ => Err(Error::NoHooks { module: self.type_name(), path: None }),
        }
    }

    /// The base that holds this module's state-dict hooks: any module with a base,
    /// containers included.
    ///
    /// # Errors
    /// [`Error::NoHookStore`] naming the module type when it has no base.
    fn state_hook_base(&self) -> Result<&ModuleBase> {
        self.base().ok_or(Error::NoHookStore { module: self.type_name(), path: None })
    }

    /// Registers a state-dict post-hook ([`ModuleBase::register_state_dict_post_hook`]).
    ///
    /// # Errors
    /// [`Error::NoHookStore`] when the module has no base.
    fn register_state_dict_post_hook(
        &self,
        hook: impl Fn(&mut StateDict, &str) -> HookResult + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        Ok(self.state_hook_base()?.register_state_dict_post_hook(hook))
    }

    /// Registers a load pre-hook ([`ModuleBase::register_load_state_dict_pre_hook`]).
    ///
    /// # Errors
    /// [`Error::NoHookStore`] when the module has no base.
    fn register_load_state_dict_pre_hook(
        &self,
        hook: impl Fn(&mut StateDict, &str, Option<u32>) -> HookResult + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        Ok(self.state_hook_base()?.register_load_state_dict_pre_hook(hook))
    }

    /// Registers a load post-hook ([`ModuleBase::register_load_state_dict_post_hook`]).
    ///
    /// # Errors
    /// [`Error::NoHookStore`] when the module has no base.
    fn register_load_state_dict_post_hook(
        &self,
        hook: impl Fn(&mut IncompatibleKeys) -> HookResult + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        Ok(self.state_hook_base()?.register_load_state_dict_post_hook(hook))
    }

    /// Registers a forward pre-hook: it sees the primary input and may return a
    /// replacement.
    ///
    /// # Errors
    /// [`Error::NoHooks`] when the module does not run.
    fn register_forward_pre_hook(
        &self,
        hook: impl Fn(&Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        Ok(self.hook_base()?.register_forward_pre_hook(hook))
    }

    /// Registers a forward hook: it sees the primary input and output and may return a
    /// replacement output. Works on the `&dyn Module` items of `named_modules()`:
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use nn_core::prelude::*;
    /// # #[derive(Module)] struct Double { #[base] base: ModuleBase }
    /// # impl Compute for Double { type Input = Tensor; type Output = Tensor; fn compute(&self, x: &Tensor) -> Tensor { x * 2.0 } }
    /// #[derive(Module)]
    /// struct Net { #[module] a: Double, #[module] b: Double, #[base] base: ModuleBase }
    /// impl Compute for Net {
    ///     type Input = Tensor;
    ///     type Output = Tensor;
    ///     fn compute(&self, x: &Tensor) -> Tensor { self.b.forward(&self.a.forward(x)) }
    /// }
    /// let net = Net { a: Double { base: ModuleBase::new() }, b: Double { base: ModuleBase::new() }, base: ModuleBase::new() };
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// for (name, m) in net.named_modules() {
    ///     let seen = seen.clone();
    ///     let _ = m.register_forward_hook(move |_, y| { seen.lock().unwrap().push((name.clone(), y.item())); None });
    /// }
    /// net.forward(&Tensor::ones(&[]));
    /// let seen = seen.lock().unwrap();
    /// assert_eq!(*seen, [("a".to_string(), 2.0), ("b".to_string(), 4.0), ("".to_string(), 4.0)]);
    /// ```
    ///
    /// # Errors
    /// [`Error::NoHooks`] when the module does not run.
    fn register_forward_hook(
        &self,
        hook: impl Fn(&Tensor, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        Ok(self.hook_base()?.register_forward_hook(hook))
    }

    /// Registers a full backward hook: it sees `grad_input` (`None` when the input needs
    /// no gradient) and `grad_output`, and may return a replacement `grad_input`.
    ///
    /// # Errors
    /// [`Error::NoHooks`] when the module does not run.
    fn register_full_backward_hook(
        &self,
        hook: impl Fn(Option<&Tensor>, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        Ok(self.hook_base()?.register_full_backward_hook(hook))
    }

    /// Registers a full backward pre-hook (PyTorch's `register_full_backward_pre_hook`): it
    /// sees `grad_output` before the module's backward runs and may return a replacement.
    ///
    /// ```
    /// use nn_core::prelude::*;
    /// use nn_core::Hooks;
    ///
    /// #[derive(Module)]
    /// struct Scale { #[param] w: Parameter, #[base] base: ModuleBase }
    /// impl Compute for Scale {
    ///     type Input = Tensor;
    ///     type Output = Tensor;
    ///     fn compute(&self, x: &Tensor) -> Tensor { x * &*self.w }
    /// }
    /// let m = Scale { w: Parameter::new(Tensor::full(&[2], 3.0)), base: ModuleBase::new() };
    /// // Halve the gradient arriving at the module's output.
    /// m.register_full_backward_pre_hook(|g| Some(g * 0.5)).unwrap();
    /// m.forward(&Tensor::ones(&[2])).sum().backward();
    /// assert_eq!(m.w.grad().unwrap().to_vec(), [0.5, 0.5]);
    /// ```
    ///
    /// # Errors
    /// [`Error::NoHooks`] when the module does not run.
    fn register_full_backward_pre_hook(
        &self,
        hook: impl Fn(&Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        Ok(self.hook_base()?.register_full_backward_pre_hook(hook))
    }

    /// Registers a forward hook that also fires when the forward panics (PyTorch's
    /// `always_call=True`; see [`ModuleBase::register_forward_hook_always_call`]).
    ///
    /// # Errors
    /// [`Error::NoHooks`] when the module does not run.
    fn register_forward_hook_always_call(
        &self,
        hook: impl Fn(&Tensor, Option<&Tensor>) -> Option<Tensor> + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        Ok(self.hook_base()?.register_forward_hook_always_call(super::HookConfig::default(), hook))
    }

    /// Registers a forward pre-hook that sees the call and every input slot
    /// ([`ModuleBase::register_forward_pre_hook_tensors`]).
    ///
    /// # Errors
    /// [`Error::NoHooks`] when the module does not run.
    fn register_forward_pre_hook_tensors(
        &self,
        config: super::HookConfig,
        hook: impl Fn(&hooks::HookCall<'_>, &[Option<Tensor>]) -> hooks::Slots + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        Ok(self.hook_base()?.register_forward_pre_hook_tensors(config, hook))
    }

    /// Registers a forward hook that sees the call, every input slot and every output slot
    /// ([`ModuleBase::register_forward_hook_tensors`]).
    ///
    /// # Errors
    /// [`Error::NoHooks`] when the module does not run.
    fn register_forward_hook_tensors(
        &self,
        config: super::HookConfig,
        hook: impl Fn(&hooks::HookCall<'_>, &[Option<Tensor>], &[Option<Tensor>]) -> hooks::Slots + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        Ok(self.hook_base()?.register_forward_hook_tensors(config, hook))
    }

    /// Registers a full backward hook that sees every `grad_input` and `grad_output` slot
    /// ([`ModuleBase::register_full_backward_hook_tensors`]).
    ///
    /// # Errors
    /// [`Error::NoHooks`] when the module does not run.
    fn register_full_backward_hook_tensors(
        &self,
        config: super::HookConfig,
        hook: impl Fn(&hooks::HookCall<'_>, &[Option<Tensor>], &[Option<Tensor>]) -> hooks::Slots + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        Ok(self.hook_base()?.register_full_backward_hook_tensors(config, hook))
    }

    /// Registers a full backward pre-hook that sees every `grad_output` slot
    /// ([`ModuleBase::register_full_backward_pre_hook_tensors`]).
    ///
    /// # Errors
    /// [`Error::NoHooks`] when the module does not run.
    fn register_full_backward_pre_hook_tensors(
        &self,
        config: super::HookConfig,
        hook: impl Fn(&hooks::HookCall<'_>, &[Option<Tensor>]) -> hooks::Slots + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        Ok(self.hook_base()?.register_full_backward_pre_hook_tensors(config, hook))
    }

    /// Registers a forward hook on every module of the tree (the root included) for which
    /// `make(path, module)` returns one, e.g. to capture every named activation. Modules
    /// that do not run (containers) are not offered to `make`.
    ///
    /// # Errors
    /// None today; kept fallible for symmetry with the path forms. Should one module
    /// fail, the hooks already registered on the others are removed (all or nothing).
    fn register_forward_hooks_all(
        &self,
        mut make: impl FnMut(&str, &dyn Module) -> Option<hooks::ForwardHook>,
    ) -> Result<Vec<HookHandle>> {
        register_all(self.as_dyn(), |path, m| {
            make(path, m).map(|h| Ok(m.hook_base()?.register_forward_hook(move |x, y| h(x, y))))
        })
    }

    /// Registers a full backward hook on every module that runs for which `make` returns
    /// one (a per-layer NaN detector or gradient clipper).
    ///
    /// # Errors
    /// As `register_forward_hooks_all`.
    fn register_full_backward_hooks_all(
        &self,
        mut make: impl FnMut(&str, &dyn Module) -> Option<hooks::BackwardHook>,
    ) -> Result<Vec<HookHandle>> {
        register_all(self.as_dyn(), |path, m| {
            make(path, m).map(|h| Ok(m.hook_base()?.register_full_backward_hook(move |gi, go| h(gi, go))))
        })
    }

    /// Registers a forward hook on the sub-module at `path` (`"encoder.layers.0"`).
    ///
    /// # Errors
    /// [`Error::SubmoduleNotFound`], or [`Error::NoHooks`] naming the path.
    fn register_forward_hook_at(
        &self,
        path: &str,
        hook: impl Fn(&Tensor, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        Ok(hook_base_at(self.as_dyn(), path)?.register_forward_hook(hook))
    }

    /// Registers a forward pre-hook on the sub-module at `path`.
    ///
    /// # Errors
    /// [`Error::SubmoduleNotFound`], or [`Error::NoHooks`] naming the path.
    fn register_forward_pre_hook_at(
        &self,
        path: &str,
        hook: impl Fn(&Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        Ok(hook_base_at(self.as_dyn(), path)?.register_forward_pre_hook(hook))
    }

    /// Registers a full backward hook on the sub-module at `path`.
    ///
    /// # Errors
    /// [`Error::SubmoduleNotFound`], or [`Error::NoHooks`] naming the path.
    fn register_full_backward_hook_at(
        &self,
        path: &str,
        hook: impl Fn(Option<&Tensor>, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        Ok(hook_base_at(self.as_dyn(), path)?.register_full_backward_hook(hook))
    }
}

impl<M: Module + ?Sized> Hooks for M {}

/// Offers every module of the tree that runs to `register`, which returns the handle of
/// the hook it registered, if any.
fn register_all(
    root: &dyn Module,
    mut register: impl FnMut(&str, &dyn Module) -> Option<Result<HookHandle>>,
) -> Result<Vec<HookHandle>> {
    let mut handles: Vec<HookHandle> = Vec::new();
    for (path, m) in root.named_modules() {
        match m.runs_forward().then(|| register(&path, m)).flatten() {
            Some(Ok(handle)) => handles.push(handle),
            // All or nothing: the hooks registered so far are removed (their handles would
            // be lost with the error, and a hook stays until removed).
            Some(Err(e)) => {
                handles.into_iter().for_each(HookHandle::remove);
                return Err(e);
            }
            None => {}
        }
    }
    Ok(handles)
}

/// The hook base of the module at `path`, or an error naming the path.
fn hook_base_at<'a>(root: &'a dyn Module, path: &str) -> Result<&'a ModuleBase> {
    let m = root.get_submodule(path)?;
    m.hook_base().map_err(|_| Error::NoHooks { module: m.type_name(), path: Some(path.to_string()) })
}

#[cfg(test)]
mod tests {
    use super::register_all;
    use crate::prelude::*;
    use crate::Error;

    #[derive(Module)]
    struct Scale {
        #[param]
        w: Parameter,
        #[base]
        base: ModuleBase,
    }

    impl Compute for Scale {
        type Input = Tensor;
        type Output = Tensor;
        fn compute(&self, x: &Tensor) -> Tensor {
            x * &*self.w
        }
    }

    #[derive(Module)]
    struct Two {
        #[module]
        a: Scale,
        #[module]
        b: Scale,
    }

    /// Registering on a tree is all or nothing: when one module fails, the hooks already
    /// registered on the others are removed (their handles would be lost with the error).
    #[test]
    fn a_failed_registration_on_a_tree_removes_the_hooks_it_made() {
        let scale = || Scale { w: Parameter::new(Tensor::full(&[1], 2.0)), base: ModuleBase::new() };
        let net = Two { a: scale(), b: scale() };
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = calls.clone();
        let r = register_all(net.as_dyn(), |path, m| {
            if path == "b" {
                return Some(Err(Error::NoHooks { module: "Scale", path: Some(path.to_string()) }));
            }
            let c = c.clone();
            Some(Ok(m.hook_base().expect("runs").register_forward_hook(move |_, _| {
                c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                None
            })))
        });
        assert!(r.is_err());
        net.a.forward(&Tensor::ones(&[1]));
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0, "a hook of the failed registration fired");
    }
}
