//! Global module hooks: hooks on every module that runs, until removed (PyTorch's
//! `torch.nn.modules.module.register_module_forward_pre_hook`,
//! `register_module_forward_hook` and `register_module_full_backward_hook`), the way
//! profilers and interpretability tools see a whole model without registering on each
//! module.
//!
//! They fire in [`Forward::forward`](super::Forward::forward) of every module with a
//! forward of its own (on every thread), before the module's own hooks of the same kind,
//! as PyTorch's do: global forward pre-hooks, then the module's; the forward; global
//! forward hooks, then the module's; in backward, global full backward hooks, then the
//! module's. Forward hooks receive the module itself (`type_name()`, its parameters, a
//! downcast through `as_any()`); a backward hook, which runs after the forward has
//! returned, receives the module's type name.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use nn_core::hooks::register_module_forward_hook;
//! use nn_core::prelude::*;
//!
//! # #[derive(Module)] struct Double { #[base] base: ModuleBase }
//! # impl Compute for Double { type Input = Tensor; type Output = Tensor;
//! #     fn compute(&self, x: &Tensor) -> Tensor { x * 2.0 } }
//! let m = Double { base: ModuleBase::new() };
//! let calls = Arc::new(Mutex::new(Vec::new()));
//! let log = calls.clone();
//! let handle = register_module_forward_hook(move |module, _x, y| {
//!     log.lock().unwrap().push((module.type_name(), y.to_vec()));
//!     None
//! });
//! m.forward(&Tensor::ones(&[1]));
//! handle.remove();
//! m.forward(&Tensor::ones(&[1])); // no longer seen
//! assert_eq!(*calls.lock().unwrap(), [("Double", vec![2.0])]);
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::Module;
use crate::autograd::handle::{HookHandle, HookOwner};
use crate::tensor::Tensor;

/// A global forward pre-hook: sees the module and its input, may return a replacement.
pub type GlobalForwardPreHook = Arc<dyn Fn(&dyn Module, &Tensor) -> Option<Tensor> + Send + Sync>;
/// A global forward hook: sees the module, its input and its output, may return a
/// replacement output.
pub type GlobalForwardHook = Arc<dyn Fn(&dyn Module, &Tensor, &Tensor) -> Option<Tensor> + Send + Sync>;
/// A global full backward hook: sees the module's type name, `grad_input` (`None` when the
/// input does not require grad) and `grad_output`, may return a replacement `grad_input`.
pub type GlobalBackwardHook = Arc<dyn Fn(&'static str, Option<&Tensor>, &Tensor) -> Option<Tensor> + Send + Sync>;

#[derive(Default, Clone)]
pub(crate) struct GlobalLists {
    pub(crate) pre: Vec<(u64, GlobalForwardPreHook)>,
    pub(crate) fwd: Vec<(u64, GlobalForwardHook)>,
    pub(crate) bwd: Vec<(u64, GlobalBackwardHook)>,
}

#[derive(Default)]
struct GlobalStore {
    lists: Mutex<GlobalLists>,
}

/// Set while any global hook is registered: a module call without hooks reads this and its
/// own flag, and nothing else.
static ANY: AtomicBool = AtomicBool::new(false);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn store() -> &'static Arc<GlobalStore> {
    static STORE: OnceLock<Arc<GlobalStore>> = OnceLock::new();
    STORE.get_or_init(Arc::default)
}

impl GlobalStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, GlobalLists> {
        self.lists.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn refresh(l: &GlobalLists) {
    ANY.store(!(l.pre.is_empty() && l.fwd.is_empty() && l.bwd.is_empty()), Ordering::Release);
}

impl HookOwner for GlobalStore {
    fn has_hook(&self, id: u64) -> bool {
        let l = self.lock();
        l.pre.iter().any(|(i, _)| *i == id)
            || l.fwd.iter().any(|(i, _)| *i == id)
            || l.bwd.iter().any(|(i, _)| *i == id)
    }

    fn remove_hook(&self, id: u64) {
        let mut l = self.lock();
        l.pre.retain(|(i, _)| *i != id);
        l.fwd.retain(|(i, _)| *i != id);
        l.bwd.retain(|(i, _)| *i != id);
        refresh(&l);
    }
}

fn register(kind: &'static str, add: impl FnOnce(&mut GlobalLists, u64)) -> HookHandle {
    let s = store();
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut l = s.lock();
    add(&mut l, id);
    refresh(&l);
    let owner: Arc<dyn HookOwner> = s.clone();
    HookHandle::new(Arc::downgrade(&owner), kind, id)
}

/// Registers a forward pre-hook on every module (PyTorch's
/// `register_module_forward_pre_hook`): it runs before each module's own pre-hooks, on
/// the module and its input, and may return a replacement input. It stays until
/// [`HookHandle::remove`].
pub fn register_module_forward_pre_hook(
    hook: impl Fn(&dyn Module, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
) -> HookHandle {
    register("global_forward_pre", |l, id| l.pre.push((id, Arc::new(hook))))
}

/// Registers a forward hook on every module (PyTorch's `register_module_forward_hook`):
/// it runs before each module's own forward hooks, on the module, its input and its
/// output, and may return a replacement output. It stays until [`HookHandle::remove`].
pub fn register_module_forward_hook(
    hook: impl Fn(&dyn Module, &Tensor, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
) -> HookHandle {
    register("global_forward", |l, id| l.fwd.push((id, Arc::new(hook))))
}

/// Registers a full backward hook on every module (PyTorch's
/// `register_module_full_backward_hook`): it runs before each module's own full backward
/// hooks, with the module's type name, `grad_input` and `grad_output`, and may return a
/// replacement `grad_input`. It stays until [`HookHandle::remove`].
pub fn register_module_full_backward_hook(
    hook: impl Fn(&'static str, Option<&Tensor>, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
) -> HookHandle {
    register("global_full_backward", |l, id| l.bwd.push((id, Arc::new(hook))))
}

/// The global hooks now registered, or `None` (one atomic load) when there are none.
pub(crate) fn snapshot() -> Option<GlobalLists> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    Some(store().lock().clone())
}
