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

use super::hooks::{
    adapt, place, with_slot0, BackwardHookTensors, BackwardPreHookTensors, ForwardHookTensors, ForwardPreHookTensors,
    FwdEntry, HookConfig, ModuleHooks, Slots,
};
use super::running::HookCall;
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
struct GlobalLists {
    pre: Vec<(u64, ForwardPreHookTensors)>,
    fwd: Vec<(u64, FwdEntry)>,
    bwd: Vec<(u64, BackwardHookTensors)>,
    bwd_pre: Vec<(u64, BackwardPreHookTensors)>,
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
    ANY.store(!(l.pre.is_empty() && l.fwd.is_empty() && l.bwd.is_empty() && l.bwd_pre.is_empty()), Ordering::Release);
}

impl HookOwner for GlobalStore {
    fn has_hook(&self, id: u64) -> bool {
        let l = self.lock();
        l.pre.iter().any(|(i, _)| *i == id)
            || l.fwd.iter().any(|(i, _)| *i == id)
            || l.bwd.iter().any(|(i, _)| *i == id)
            || l.bwd_pre.iter().any(|(i, _)| *i == id)
    }

    fn remove_hook(&self, id: u64) {
        let mut l = self.lock();
        l.pre.retain(|(i, _)| *i != id);
        l.fwd.retain(|(i, _)| *i != id);
        l.bwd.retain(|(i, _)| *i != id);
        l.bwd_pre.retain(|(i, _)| *i != id);
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
/// the module and its primary input, and may return a replacement input. It stays until
/// [`HookHandle::remove`]. [`register_module_forward_pre_hook_tensors`] sees every input
/// tensor and the module's path.
pub fn register_module_forward_pre_hook(
    hook: impl Fn(&dyn Module, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
) -> HookHandle {
    let hook: ForwardPreHookTensors = Arc::new(move |call, xs| {
        let module = call.module().expect("a forward pre-hook runs in the forward");
        hook(module, xs[0].as_ref()?).map(|t| with_slot0(xs, t))
    });
    register("global_forward_pre", |l, id| l.pre.push((id, hook)))
}

/// Registers a forward pre-hook on every module that sees the call ([`HookCall`]: the
/// module, its type name and path) and every input slot, and may return replacement
/// slots (see [`ModuleBase::register_forward_pre_hook_tensors`](super::ModuleBase::register_forward_pre_hook_tensors)).
/// `config.prepend` puts it before the global pre-hooks registered earlier.
pub fn register_module_forward_pre_hook_tensors(
    config: HookConfig,
    hook: impl Fn(&HookCall<'_>, &[Option<Tensor>]) -> Slots + Send + Sync + 'static,
) -> HookHandle {
    config.refuse_always_call("global forward pre-hook");
    let hook: ForwardPreHookTensors = Arc::new(hook);
    register("global_forward_pre", |l, id| place(&mut l.pre, config, (id, hook)))
}

/// Registers a forward hook on every module (PyTorch's `register_module_forward_hook`):
/// it runs before each module's own forward hooks, on the module, its primary input and
/// its primary output, and may return a replacement output. It stays until
/// [`HookHandle::remove`]. [`register_module_forward_hook_tensors`] sees every tensor.
pub fn register_module_forward_hook(
    hook: impl Fn(&dyn Module, &Tensor, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
) -> HookHandle {
    let hook: ForwardHookTensors = Arc::new(move |call, xs, ys| {
        let module = call.module().expect("a forward hook runs in the forward");
        hook(module, xs[0].as_ref()?, ys[0].as_ref()?).map(|t| with_slot0(ys, t))
    });
    register("global_forward", |l, id| l.fwd.push((id, FwdEntry { hook, always: false })))
}

/// Registers a forward hook on every module that sees the call, every input slot and
/// every output slot, and may return replacement output slots; `config.always_call`
/// makes it fire when a forward panics too (PyTorch's `always_call=True`), `prepend`
/// puts it before the global forward hooks registered earlier.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use nn_core::hooks::register_module_forward_hook_tensors;
/// use nn_core::prelude::*;
/// use nn_core::HookConfig;
///
/// # #[derive(Module)] struct Double { #[base] base: ModuleBase }
/// # impl Compute for Double { type Input = Tensor; type Output = Tensor;
/// #     fn compute(&self, x: &Tensor) -> Tensor { x * 2.0 } }
/// #[derive(Module)]
/// struct Net { #[module] a: Double, #[module] b: Double, #[base] base: ModuleBase }
/// impl Compute for Net {
///     type Input = Tensor;
///     type Output = Tensor;
///     fn compute(&self, x: &Tensor) -> Tensor { self.b.forward(&self.a.forward(x)) }
/// }
/// let net = Net { a: Double { base: ModuleBase::new() }, b: Double { base: ModuleBase::new() }, base: ModuleBase::new() };
/// let paths = Arc::new(Mutex::new(Vec::new()));
/// let log = paths.clone();
/// let handle = register_module_forward_hook_tensors(HookConfig::default(), move |call, _, _| {
///     log.lock().unwrap().push(format!("{} {}", call.path().unwrap(), call.type_name()));
///     None
/// });
/// net.forward(&Tensor::ones(&[1]));
/// handle.remove();
/// assert_eq!(*paths.lock().unwrap(), ["a Double", "b Double", " Net"]);
/// ```
pub fn register_module_forward_hook_tensors(
    config: HookConfig,
    hook: impl Fn(&HookCall<'_>, &[Option<Tensor>], &[Option<Tensor>]) -> Slots + Send + Sync + 'static,
) -> HookHandle {
    let entry = FwdEntry { hook: Arc::new(hook) as ForwardHookTensors, always: config.always_call };
    register("global_forward", |l, id| place(&mut l.fwd, config, (id, entry)))
}

/// Registers a full backward hook on every module (PyTorch's
/// `register_module_full_backward_hook`): it runs before each module's own full backward
/// hooks, with the module's type name, `grad_input` and `grad_output` of the first input
/// and output (zeros where no gradient reached the first output), and may return a
/// replacement `grad_input`. It stays until [`HookHandle::remove`].
/// [`register_module_full_backward_hook_tensors`] sees every slot.
pub fn register_module_full_backward_hook(
    hook: impl Fn(&'static str, Option<&Tensor>, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
) -> HookHandle {
    let hook: BackwardHookTensors = Arc::new(move |call, gi, go| {
        let go0 = adapt::grad_output0(call, go)?;
        hook(call.type_name(), gi.first()?.as_ref(), &go0).map(|t| with_slot0(gi, t))
    });
    register("global_full_backward", |l, id| l.bwd.push((id, hook)))
}

/// Registers a full backward hook on every module that sees the call (type name and
/// path), every `grad_input` and every `grad_output` slot, with PyTorch's `None`s (see
/// [`ModuleBase::register_full_backward_hook_tensors`](super::ModuleBase::register_full_backward_hook_tensors)),
/// and may return replacement `grad_input` slots.
pub fn register_module_full_backward_hook_tensors(
    config: HookConfig,
    hook: impl Fn(&HookCall<'_>, &[Option<Tensor>], &[Option<Tensor>]) -> Slots + Send + Sync + 'static,
) -> HookHandle {
    config.refuse_always_call("global full backward hook");
    let hook: BackwardHookTensors = Arc::new(hook);
    register("global_full_backward", |l, id| place(&mut l.bwd, config, (id, hook)))
}

/// Registers a full backward pre-hook on every module (PyTorch's
/// `register_module_full_backward_pre_hook`): it runs before each module's own, on every
/// `grad_output` slot (`None` where no gradient arrived), and may return replacements.
pub fn register_module_full_backward_pre_hook_tensors(
    config: HookConfig,
    hook: impl Fn(&HookCall<'_>, &[Option<Tensor>]) -> Slots + Send + Sync + 'static,
) -> HookHandle {
    config.refuse_always_call("global full backward pre-hook");
    let hook: BackwardPreHookTensors = Arc::new(hook);
    register("global_full_backward_pre", |l, id| place(&mut l.bwd_pre, config, (id, hook)))
}

/// The global hooks now registered, or `None` (one atomic load) when there are none.
pub(crate) fn snapshot() -> Option<ModuleHooks> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    let l = store().lock();
    Some(ModuleHooks {
        pre: l.pre.iter().map(|(_, h)| Arc::clone(h)).collect(),
        fwd: l.fwd.iter().map(|(_, h)| h.clone()).collect(),
        bwd: l.bwd.iter().map(|(_, h)| Arc::clone(h)).collect(),
        bwd_pre: l.bwd_pre.iter().map(|(_, h)| Arc::clone(h)).collect(),
    })
}
