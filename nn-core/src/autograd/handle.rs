//! Hook handles: what a registration returns, shared by module hooks and tensor hooks.

use std::sync::Weak;

/// Whatever holds hooks a [`HookHandle`] can remove: a module's hook lists, or a leaf
/// tensor's post-accumulate-grad hooks.
pub(crate) trait HookOwner: Send + Sync {
    /// Whether the hook `id` is registered.
    fn has_hook(&self, id: u64) -> bool;
    /// Removes the hook `id` (a no-op when it is not registered).
    fn remove_hook(&self, id: u64);
}

/// Removes its hook on [`remove`](HookHandle::remove). Dropping the handle does not
/// remove the hook (PyTorch's `RemovableHandle`); [`scoped`](HookHandle::scoped) gives a
/// guard that does. Returned by the module hooks and by
/// [`Tensor::register_post_accumulate_grad_hook`](crate::Tensor::register_post_accumulate_grad_hook).
pub struct HookHandle {
    owner: Weak<dyn HookOwner>,
    kind: &'static str,
    id: u64,
}

impl HookHandle {
    /// A handle on hook `id` of `owner`; `kind` names the hook in `Debug` output.
    pub(crate) fn new(owner: Weak<dyn HookOwner>, kind: &'static str, id: u64) -> Self {
        HookHandle { owner, kind, id }
    }

    /// Removes the hook now (a no-op when the module or tensor is gone).
    pub fn remove(self) {
        if let Some(s) = self.owner.upgrade() {
            s.remove_hook(self.id);
        }
    }

    /// Whether the hook is still registered on a live module or tensor.
    pub fn is_registered(&self) -> bool {
        self.owner.upgrade().is_some_and(|s| s.has_hook(self.id))
    }

    /// A guard that removes the hook when it goes out of scope (RAII):
    ///
    /// ```
    /// use nn_core::prelude::*;
    /// # #[derive(Module)] struct Id { #[base] base: ModuleBase }
    /// # impl Compute for Id { type Input = Tensor; type Output = Tensor; fn compute(&self, x: &Tensor) -> Tensor { x.clone() } }
    /// # let m = Id { base: ModuleBase::new() };
    /// {
    ///     let _guard = m.register_forward_hook(|_, y| Some(y * 2.0)).unwrap().scoped();
    ///     assert_eq!(m.forward(&Tensor::ones(&[1])).to_vec(), [2.0]);
    /// } // removed here
    /// assert_eq!(m.forward(&Tensor::ones(&[1])).to_vec(), [1.0]);
    /// ```
    #[must_use = "the guard removes the hook when dropped: bind it to a named variable (`let _guard = ...`)"]
    pub fn scoped(self) -> ScopedHook {
        ScopedHook(Some(self))
    }
}

/// A hook registration that removes its hook when dropped ([`HookHandle::scoped`]).
#[derive(Debug)]
pub struct ScopedHook(Option<HookHandle>);

impl ScopedHook {
    /// Keeps the hook registered after all, handing back its plain handle.
    pub fn into_handle(mut self) -> HookHandle {
        self.0.take().expect("a ScopedHook holds its handle until dropped")
    }
}

impl Drop for ScopedHook {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.remove();
        }
    }
}

impl std::fmt::Debug for HookHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookHandle").field("kind", &self.kind).field("id", &self.id).finish()
    }
}
