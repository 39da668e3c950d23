//! Module hooks: forward pre-hooks, forward hooks, full backward hooks and full backward
//! pre-hooks, as PyTorch's `register_forward_pre_hook` / `register_forward_hook` /
//! `register_full_backward_hook` / `register_full_backward_pre_hook`; each kind in
//! registration order, or first with [`HookConfig::prepend`].
//!
//! Hooks live in the module's [`ModuleBase`] and fire inside [`Forward::forward`], which
//! nn implements for every module (see [`forward`](super::forward)): no module's code runs
//! them, so none can forget to. With no hook registered, a call costs one atomic load.
//!
//! Backward hooks are wired through the autograd graph as PyTorch does: an identity node
//! after the module's output records `grad_output`, an identity node before its input
//! hands `grad_input` (and that `grad_output`) to the hooks, which may replace it. Each
//! call of the module gets its own pair of nodes, so a module used twice fires twice.
//!
//! Registration returns a [`HookHandle`]. As in PyTorch, the hook stays registered until
//! `handle.remove()`: dropping or ignoring the handle (`let _ = ...`) leaves it in place.
//! For a hook that should live only as long as a scope, [`HookHandle::scoped`] turns the
//! handle into a guard that removes the hook when dropped.
//!
//! [`Forward::forward`]: super::Forward::forward

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub use super::running::HookCall;
use super::IncompatibleKeys;
#[cfg(doc)]
use super::ModuleIo;
use crate::autograd::handle::HookOwner;
pub use crate::autograd::handle::{HookHandle, ScopedHook};
use crate::state_dict::StateDict;
use crate::tensor::Tensor;

// The state-dict hooks' types live here, beside the store that keeps them;
// [`state_hooks`](super::state_hooks) runs them (it depends on this file, not the reverse).

/// What a state-dict hook returns: `Err` stops the save or load, and
/// [`Error::StateDictHook`](crate::Error::StateDictHook) names the hook's module around it. Any error type converts
/// with `?`, and so does a message: `Err("no such layout".into())`.
pub type HookResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// A state-dict post-hook (PyTorch's `register_state_dict_post_hook`): sees the state dict
/// being returned and the module's prefix (`""`, `"encoder.0."`), may edit it.
pub type StateDictPostHook = Arc<dyn Fn(&mut StateDict, &str) -> HookResult + Send + Sync>;
/// A load pre-hook (PyTorch's `register_load_state_dict_pre_hook`): sees the state dict
/// being loaded, the module's prefix and the version the file recorded for the module,
/// may edit it (rename, convert, drop entries).
pub type LoadStateDictPreHook = Arc<dyn Fn(&mut StateDict, &str, Option<u32>) -> HookResult + Send + Sync>;
/// A load post-hook (PyTorch's `register_load_state_dict_post_hook`): sees the load's
/// missing and unexpected keys, may remove (or add) some before strictness is judged.
pub type LoadStateDictPostHook = Arc<dyn Fn(&mut IncompatibleKeys) -> HookResult + Send + Sync>;

/// A forward pre-hook: sees the input, may return a replacement.
pub type ForwardPreHook = Arc<dyn Fn(&Tensor) -> Option<Tensor> + Send + Sync>;
/// A forward hook: sees the input and the output, may return a replacement output.
pub type ForwardHook = Arc<dyn Fn(&Tensor, &Tensor) -> Option<Tensor> + Send + Sync>;
/// A full backward hook: sees `grad_input` (`None` when the input does not require grad)
/// and `grad_output`, may return a replacement `grad_input`.
pub type BackwardHook = Arc<dyn Fn(Option<&Tensor>, &Tensor) -> Option<Tensor> + Send + Sync>;
/// A forward hook that also runs when the forward panics (PyTorch's `always_call=True`):
/// sees the input and the output (`None` when the forward, or a forward hook before it,
/// panicked), may return a replacement output.
pub type AlwaysForwardHook = Arc<dyn Fn(&Tensor, Option<&Tensor>) -> Option<Tensor> + Send + Sync>;
/// A full backward pre-hook: sees `grad_output` before the module's backward runs, may
/// return a replacement (PyTorch's `register_full_backward_pre_hook`).
pub type BackwardPreHook = Arc<dyn Fn(&Tensor) -> Option<Tensor> + Send + Sync>;

/// What a hook that sees every tensor returns: `None` to keep the slots it was given,
/// or replacements for all of them (the same number, each kept or replaced; see
/// [`ModuleIo::tensors`]).
pub type Slots = Option<Vec<Option<Tensor>>>;

/// A forward pre-hook that sees the call and every input slot (PyTorch's
/// `hook(module, args)`), and may return replacement slots.
pub type ForwardPreHookTensors = Arc<dyn Fn(&HookCall<'_>, &[Option<Tensor>]) -> Slots + Send + Sync>;
/// A forward hook that sees the call, every input slot and every output slot (PyTorch's
/// `hook(module, args, output)`), and may return replacement output slots. With
/// [`HookConfig::always_call`] it also runs when the forward panicked, with
/// [`HookCall::panicked`] set and no output slots (what it returns then is ignored).
pub type ForwardHookTensors = Arc<dyn Fn(&HookCall<'_>, &[Option<Tensor>], &[Option<Tensor>]) -> Slots + Send + Sync>;
/// A full backward hook that sees the call, every `grad_input` slot and every
/// `grad_output` slot (PyTorch's `hook(module, grad_input, grad_output)`), and may return
/// replacement `grad_input` slots. PyTorch's `None`s: see
/// [`ModuleBase::register_full_backward_hook_tensors`].
pub type BackwardHookTensors = Arc<dyn Fn(&HookCall<'_>, &[Option<Tensor>], &[Option<Tensor>]) -> Slots + Send + Sync>;
/// A full backward pre-hook that sees the call and every `grad_output` slot (`None`
/// where no gradient arrived), and may return replacement slots.
pub type BackwardPreHookTensors = Arc<dyn Fn(&HookCall<'_>, &[Option<Tensor>]) -> Slots + Send + Sync>;

/// A forward hook as it is kept: the every-tensor form, and whether it is always called.
#[derive(Clone)]
pub(crate) struct FwdEntry {
    pub(crate) hook: ForwardHookTensors,
    pub(crate) always: bool,
}

/// How a hook is registered (PyTorch's keyword arguments).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HookConfig {
    /// Fire before the hooks of its kind registered earlier, instead of after them
    /// (PyTorch's `prepend=True`). Global hooks still fire before a module's own.
    pub prepend: bool,
    /// For forward hooks: also fire when the forward (or a forward hook before this one)
    /// panics, with no output (PyTorch's `always_call=True`); the panic then goes on. A
    /// hook that panics itself on that path is reported on stderr and skipped. Other
    /// kinds of hook refuse it (a panic at registration).
    pub always_call: bool,
}

impl HookConfig {
    /// `prepend: true`.
    pub fn prepend() -> Self {
        HookConfig { prepend: true, ..Self::default() }
    }

    /// `always_call: true`.
    pub fn always_call() -> Self {
        HookConfig { always_call: true, ..Self::default() }
    }

    /// Panics when `always_call` is set for a kind of hook that has no such option (it
    /// would be ignored, silently).
    pub(crate) fn refuse_always_call(self, kind: &str) {
        assert!(
            !self.always_call,
            "HookConfig::always_call is for forward hooks; a {kind} has no such option (PyTorch's \
             always_call is an argument of register_forward_hook only)"
        );
    }
}

/// The input slots with slot 0 replaced by `primary`: what a one-tensor hook's
/// replacement becomes.
pub(crate) fn with_slot0(slots: &[Option<Tensor>], primary: Tensor) -> Vec<Option<Tensor>> {
    let mut v = slots.to_vec();
    v[0] = Some(primary);
    v
}

/// The one-tensor forms, as every-tensor hooks over slot 0.
pub(crate) mod adapt {
    use super::*;

    pub(crate) fn pre(h: impl Fn(&Tensor) -> Option<Tensor> + Send + Sync + 'static) -> ForwardPreHookTensors {
        Arc::new(move |_, xs| h(xs[0].as_ref()?).map(|t| with_slot0(xs, t)))
    }

    pub(crate) fn fwd(h: impl Fn(&Tensor, &Tensor) -> Option<Tensor> + Send + Sync + 'static) -> ForwardHookTensors {
        Arc::new(move |_, xs, ys| h(xs[0].as_ref()?, ys[0].as_ref()?).map(|t| with_slot0(ys, t)))
    }

    pub(crate) fn always(
        h: impl Fn(&Tensor, Option<&Tensor>) -> Option<Tensor> + Send + Sync + 'static,
    ) -> ForwardHookTensors {
        Arc::new(move |call, xs, ys| {
            let y = if call.panicked() { None } else { ys[0].as_ref() };
            let new = h(xs[0].as_ref()?, y);
            new.filter(|_| !call.panicked()).map(|t| with_slot0(ys, t))
        })
    }

    /// `grad_output` slot 0, or zeros like output 0 when no gradient reached it (the
    /// one-tensor form's contract; PyTorch passes `None`). `None` when output 0 is not
    /// differentiable: the one-tensor hook is not called.
    pub(crate) fn grad_output0(call: &HookCall<'_>, go: &[Option<Tensor>]) -> Option<Tensor> {
        go.first()?.clone().or_else(|| call.outputs_like.first()?.as_ref().map(super::super::running::zeros))
    }

    pub(crate) fn bwd(
        h: impl Fn(Option<&Tensor>, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> BackwardHookTensors {
        Arc::new(move |call, gi, go| {
            let go0 = grad_output0(call, go)?;
            h(gi.first()?.as_ref(), &go0).map(|t| with_slot0(gi, t))
        })
    }

    /// The one-tensor pre-hook sees the first output's gradient when one arrives.
    pub(crate) fn bwd_pre(h: impl Fn(&Tensor) -> Option<Tensor> + Send + Sync + 'static) -> BackwardPreHookTensors {
        Arc::new(move |_, go| h(go.first()?.as_ref()?).map(|t| with_slot0(go, t)))
    }
}

#[derive(Default, Clone)]
struct Lists {
    next: u64,
    pre: Vec<(u64, ForwardPreHookTensors)>,
    fwd: Vec<(u64, FwdEntry)>,
    bwd: Vec<(u64, BackwardHookTensors)>,
    bwd_pre: Vec<(u64, BackwardPreHookTensors)>,
    /// The state-dict hooks ([`state_hooks`](super::state_hooks)), which `any` does not
    /// count: a forward never looks at them.
    sd_post: Vec<(u64, StateDictPostHook)>,
    load_pre: Vec<(u64, LoadStateDictPreHook)>,
    load_post: Vec<(u64, LoadStateDictPostHook)>,
}

/// The text of a panic's payload.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("<a non-string panic payload>")
}

/// Runs the hook call `f`; a panic in it goes on as a panic naming the hook's kind and its
/// module's type, with the hook's message.
pub(crate) fn named<R>(kind: &str, module: &str, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => panic!("{kind} of `{module}` panicked: {}", panic_text(&*payload)),
    }
}

/// Adds `entry` to `list`: at the end, or first with `config.prepend`.
pub(crate) fn place<T>(list: &mut Vec<T>, config: HookConfig, entry: T) {
    if config.prepend {
        list.insert(0, entry);
    } else {
        list.push(entry);
    }
}

/// A module's state-dict hooks, in registration order (a snapshot: a hook may register or
/// remove hooks while it runs).
#[derive(Default)]
pub(crate) struct StateHooks {
    pub(crate) post: Vec<StateDictPostHook>,
    pub(crate) load_pre: Vec<LoadStateDictPreHook>,
    pub(crate) load_post: Vec<LoadStateDictPostHook>,
}

#[derive(Default)]
pub(crate) struct HookStore {
    any: AtomicBool,
    lists: Mutex<Lists>,
}

impl HookStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Lists> {
        self.lists.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn refresh(&self, l: &Lists) {
        let none = l.pre.is_empty() && l.fwd.is_empty() && l.bwd.is_empty() && l.bwd_pre.is_empty();
        self.any.store(!none, Ordering::Release);
    }
}

/// Ids are unique across the three lists of a module, so a handle needs no list tag.
impl HookOwner for HookStore {
    fn has_hook(&self, id: u64) -> bool {
        let l = self.lock();
        l.pre.iter().any(|(i, _)| *i == id)
            || l.fwd.iter().any(|(i, _)| *i == id)
            || l.bwd.iter().any(|(i, _)| *i == id)
            || l.bwd_pre.iter().any(|(i, _)| *i == id)
            || l.sd_post.iter().any(|(i, _)| *i == id)
            || l.load_pre.iter().any(|(i, _)| *i == id)
            || l.load_post.iter().any(|(i, _)| *i == id)
    }

    fn remove_hook(&self, id: u64) {
        let mut l = self.lock();
        l.pre.retain(|(i, _)| *i != id);
        l.fwd.retain(|(i, _)| *i != id);
        l.bwd.retain(|(i, _)| *i != id);
        l.bwd_pre.retain(|(i, _)| *i != id);
        l.sd_post.retain(|(i, _)| *i != id);
        l.load_pre.retain(|(i, _)| *i != id);
        l.load_post.retain(|(i, _)| *i != id);
        self.refresh(&l);
    }
}

/// Per-instance bookkeeping that PyTorch keeps in `nn.Module` itself: the training flag
/// and the hook lists. Every module that runs has one (`#[base] base: ModuleBase`, which
/// [`Compute`](super::Compute) requires); the hooks fire in
/// [`Forward::forward`](super::Forward::forward).
pub struct ModuleBase {
    training: bool,
    hooks: Arc<HookStore>,
}

impl Default for ModuleBase {
    /// Training mode, no hooks (PyTorch's initial state).
    fn default() -> Self {
        ModuleBase { training: true, hooks: Arc::default() }
    }
}

impl std::fmt::Debug for ModuleBase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = self.hooks.lock();
        f.debug_struct("ModuleBase")
            .field("training", &self.training)
            .field("forward_pre_hooks", &l.pre.len())
            .field("forward_hooks", &l.fwd.len())
            .field("backward_hooks", &l.bwd.len())
            .field("backward_pre_hooks", &l.bwd_pre.len())
            .field("state_dict_post_hooks", &l.sd_post.len())
            .field("load_state_dict_pre_hooks", &l.load_pre.len())
            .field("load_state_dict_post_hooks", &l.load_post.len())
            .finish()
    }
}

impl ModuleBase {
    /// This module's identity in a forward trace (see [`crate::autograd::trace`]): matches
    /// [`TracedOp::module`](crate::autograd::trace::TracedOp::module) for the ops it ran. Valid while
    /// the model is not moved.
    pub fn trace_key(&self) -> crate::autograd::trace::ModuleKey {
        crate::autograd::trace::ModuleKey::of(self)
    }
    /// A base in training mode without hooks.
    pub fn new() -> Self {
        Self::default()
    }

    /// The base of a [deep copy](super::Module::deep_copy): the training flag, and no hooks.
    /// `ModuleBase` is not `Clone`, so that a module deriving `Clone` (whose copy would
    /// share the original's parameters) does not compile.
    pub fn deep_copy(&self) -> Self {
        ModuleBase { training: self.training, hooks: Arc::default() }
    }

    /// The training flag.
    pub fn is_training(&self) -> bool {
        self.training
    }

    /// Sets the training flag.
    pub fn set_training(&mut self, training: bool) {
        self.training = training;
    }

    fn register(&self, kind: &'static str, add: impl FnOnce(&mut Lists, u64)) -> HookHandle {
        let mut l = self.hooks.lock();
        l.next += 1;
        let id = l.next;
        add(&mut l, id);
        self.hooks.refresh(&l);
        let owner: Arc<dyn HookOwner> = self.hooks.clone();
        HookHandle::new(Arc::downgrade(&owner), kind, id)
    }

    /// Registers a forward pre-hook (fired in registration order before `forward`): it
    /// sees the primary input ([`ModuleIo::primary`]) and may return a replacement. See
    /// [`register_forward_pre_hook_tensors`](Self::register_forward_pre_hook_tensors) for
    /// the module and every input tensor.
    pub fn register_forward_pre_hook(
        &self,
        hook: impl Fn(&Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> HookHandle {
        self.register_forward_pre_hook_with(HookConfig::default(), hook)
    }

    /// [`register_forward_pre_hook`](Self::register_forward_pre_hook) with `config`
    /// (`prepend`: before the pre-hooks registered earlier).
    pub fn register_forward_pre_hook_with(
        &self,
        config: HookConfig,
        hook: impl Fn(&Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> HookHandle {
        self.register_pre(config, adapt::pre(hook))
    }

    /// Registers a forward pre-hook that sees the call ([`HookCall`]: the module, its
    /// type name and path) and every input slot ([`ModuleIo::tensors`]: the elements of
    /// a tuple input, the tensor fields of an input struct, `None` for an absent optional
    /// tensor), PyTorch's `hook(module, args)`. It may return replacement slots, as many
    /// as it was given.
    ///
    /// # Panics
    /// At the module's call, naming the hook and the module, when the hook returns another
    /// number of slots, or `None` where a tensor is required.
    pub fn register_forward_pre_hook_tensors(
        &self,
        config: HookConfig,
        hook: impl Fn(&HookCall<'_>, &[Option<Tensor>]) -> Slots + Send + Sync + 'static,
    ) -> HookHandle {
        self.register_pre(config, Arc::new(hook))
    }

    fn register_pre(&self, config: HookConfig, hook: ForwardPreHookTensors) -> HookHandle {
        config.refuse_always_call("forward pre-hook");
        self.register("forward_pre", |l, id| place(&mut l.pre, config, (id, hook)))
    }

    /// Registers a forward hook (fired in registration order after `forward`): it sees
    /// the primary input and output and may return a replacement output.
    pub fn register_forward_hook(
        &self,
        hook: impl Fn(&Tensor, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> HookHandle {
        self.register_forward_hook_with(HookConfig::default(), hook)
    }

    /// [`register_forward_hook`](Self::register_forward_hook) with `config` (`prepend`:
    /// before the forward hooks registered earlier; `always_call` is for
    /// [`register_forward_hook_always_call`](Self::register_forward_hook_always_call),
    /// whose hook is told whether there is an output, and is refused here).
    ///
    /// # Panics
    /// When `config.always_call` is set: this hook's signature has no way to be called
    /// without an output.
    pub fn register_forward_hook_with(
        &self,
        config: HookConfig,
        hook: impl Fn(&Tensor, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> HookHandle {
        assert!(
            !config.always_call,
            "register_forward_hook_with: a hook `Fn(&Tensor, &Tensor)` cannot be called when the forward panicked (there \
             is no output): use register_forward_hook_always_call, whose hook gets `Option<&Tensor>`, or \
             register_forward_hook_tensors"
        );
        self.register_fwd(config, adapt::fwd(hook))
    }

    /// Registers a forward hook that fires after every forward *and* when the forward
    /// panics (PyTorch's `register_forward_hook(hook, always_call=True)`): it gets the
    /// input and `Some(output)`, or `None` when the forward (or a forward hook that ran
    /// before it) panicked; then the panic goes on to the caller, unchanged. A hook that
    /// panics itself on that path is reported on stderr and skipped, so the first panic is
    /// the one the caller sees (PyTorch warns the same way). Its replacement output, when
    /// there is an output, is used as a plain forward hook's.
    pub fn register_forward_hook_always_call(
        &self,
        config: HookConfig,
        hook: impl Fn(&Tensor, Option<&Tensor>) -> Option<Tensor> + Send + Sync + 'static,
    ) -> HookHandle {
        self.register_fwd(HookConfig { always_call: true, ..config }, adapt::always(hook))
    }

    /// Registers a forward hook that sees the call ([`HookCall`]), every input slot and
    /// every output slot ([`ModuleIo::tensors`]), PyTorch's `hook(module, args, output)`,
    /// and may return replacement output slots. With `config.always_call` it also fires
    /// when the forward panics, with [`HookCall::panicked`] set and no output slots.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use nn_core::prelude::*;
    /// use nn_core::HookConfig;
    ///
    /// #[derive(Module)]
    /// struct Split { #[base] base: ModuleBase }
    /// impl Compute for Split {
    ///     type Input = Tensor;
    ///     type Output = (Tensor, Tensor);
    ///     fn compute(&self, x: &Tensor) -> (Tensor, Tensor) { (x * 2.0, x * 3.0) }
    /// }
    /// let m = Split { base: ModuleBase::new() };
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = seen.clone();
    /// m.hook_base().unwrap().register_forward_hook_tensors(HookConfig::default(), move |call, _inputs, outputs| {
    ///     log.lock().unwrap().push((call.type_name(), call.path().map(str::to_string), outputs.len()));
    ///     // Replace the second output, keep the first.
    ///     Some(vec![outputs[0].clone(), Some(Tensor::zeros(&[2]))])
    /// });
    /// let (a, b) = m.forward(&Tensor::ones(&[2]));
    /// assert_eq!((a.to_vec(), b.to_vec()), (vec![2.0, 2.0], vec![0.0, 0.0]));
    /// assert_eq!(*seen.lock().unwrap(), [("Split", Some(String::new()), 2)]);
    /// ```
    pub fn register_forward_hook_tensors(
        &self,
        config: HookConfig,
        hook: impl Fn(&HookCall<'_>, &[Option<Tensor>], &[Option<Tensor>]) -> Slots + Send + Sync + 'static,
    ) -> HookHandle {
        self.register_fwd(config, Arc::new(hook))
    }

    fn register_fwd(&self, config: HookConfig, hook: ForwardHookTensors) -> HookHandle {
        let entry = FwdEntry { hook, always: config.always_call };
        self.register("forward", |l, id| place(&mut l.fwd, config, (id, entry)))
    }

    /// Registers a full backward pre-hook (PyTorch's `register_full_backward_pre_hook`): it
    /// gets the gradient with respect to the module's first output when one arrives,
    /// before the module's backward runs, and may return a replacement, which the module's
    /// backward (and its full backward hooks, as `grad_output`) then see. Fired in
    /// registration order.
    pub fn register_full_backward_pre_hook(
        &self,
        hook: impl Fn(&Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> HookHandle {
        self.register_full_backward_pre_hook_with(HookConfig::default(), hook)
    }

    /// [`register_full_backward_pre_hook`](Self::register_full_backward_pre_hook) with
    /// `config` (`prepend`: before the pre-hooks registered earlier).
    pub fn register_full_backward_pre_hook_with(
        &self,
        config: HookConfig,
        hook: impl Fn(&Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> HookHandle {
        self.register_bwd_pre(config, adapt::bwd_pre(hook))
    }

    /// Registers a full backward pre-hook that sees the call and every `grad_output` slot,
    /// `None` where no gradient reached that output (PyTorch's `hook(module,
    /// grad_output)`), and may return replacement slots (a tensor of the output's shape
    /// where one arrived, or where the output is differentiable).
    pub fn register_full_backward_pre_hook_tensors(
        &self,
        config: HookConfig,
        hook: impl Fn(&HookCall<'_>, &[Option<Tensor>]) -> Slots + Send + Sync + 'static,
    ) -> HookHandle {
        self.register_bwd_pre(config, Arc::new(hook))
    }

    fn register_bwd_pre(&self, config: HookConfig, hook: BackwardPreHookTensors) -> HookHandle {
        config.refuse_always_call("full backward pre-hook");
        self.register("full_backward_pre", |l, id| place(&mut l.bwd_pre, config, (id, hook)))
    }

    /// Registers a full backward hook (fired in registration order when the gradient with
    /// respect to the module's input is computed). It gets `(grad_input, grad_output)` of the
    /// first input and the first output; when no gradient reaches the first output (the
    /// loss used another output of a tuple), `grad_output` is zeros, where PyTorch passes
    /// `None`. See [`register_full_backward_hook_tensors`](Self::register_full_backward_hook_tensors)
    /// for every slot.
    pub fn register_full_backward_hook(
        &self,
        hook: impl Fn(Option<&Tensor>, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> HookHandle {
        self.register_full_backward_hook_with(HookConfig::default(), hook)
    }

    /// [`register_full_backward_hook`](Self::register_full_backward_hook) with `config`
    /// (`prepend`: before the full backward hooks registered earlier).
    pub fn register_full_backward_hook_with(
        &self,
        config: HookConfig,
        hook: impl Fn(Option<&Tensor>, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> HookHandle {
        self.register_bwd(config, adapt::bwd(hook))
    }

    /// Registers a full backward hook that sees the call, every `grad_input` slot and
    /// every `grad_output` slot (PyTorch's `hook(module, grad_input, grad_output)`), and
    /// may return replacement `grad_input` slots. As in PyTorch:
    ///
    /// - it fires when the gradients with respect to the module's inputs are computed;
    ///   a `grad_input` slot is `None` where the input slot is `None` (an absent optional
    ///   tensor), and zeros where the input is a tensor no gradient reached (one that does
    ///   not require grad, or that the module did not use), as PyTorch materializes them;
    /// - when no input requires grad, it fires when the gradients with respect to the
    ///   outputs arrive, with every `grad_input` slot `None`, and may not replace them;
    /// - a `grad_output` slot is `None` where no gradient reached that output.
    ///
    /// A replacement has the input's shape; for an input that does not require grad, only
    /// the tensor the hook was given may be returned (there is nowhere for another to go).
    pub fn register_full_backward_hook_tensors(
        &self,
        config: HookConfig,
        hook: impl Fn(&HookCall<'_>, &[Option<Tensor>], &[Option<Tensor>]) -> Slots + Send + Sync + 'static,
    ) -> HookHandle {
        self.register_bwd(config, Arc::new(hook))
    }

    fn register_bwd(&self, config: HookConfig, hook: BackwardHookTensors) -> HookHandle {
        config.refuse_always_call("full backward hook");
        self.register("full_backward", |l, id| place(&mut l.bwd, config, (id, hook)))
    }

    /// Registers a state-dict post-hook (PyTorch's `register_state_dict_post_hook`): it
    /// gets the state dict [`state_dict`](super::Module::state_dict) is about to return and
    /// this module's prefix (`""`, `"encoder.0."`), and may edit it. Hooks run children
    /// first, each module's in registration order; see [`state_hooks`](super::state_hooks).
    pub fn register_state_dict_post_hook(
        &self,
        hook: impl Fn(&mut StateDict, &str) -> HookResult + Send + Sync + 'static,
    ) -> HookHandle {
        self.register("state_dict_post", |l, id| l.sd_post.push((id, Arc::new(hook))))
    }

    /// Registers a load pre-hook (PyTorch's `register_load_state_dict_pre_hook`): it gets
    /// a copy of the state dict being loaded, this module's prefix and the layout version
    /// the state dict records for this module (`None` when it records none), and may edit
    /// the copy: rename keys of an older layout, convert values, drop entries. Hooks run
    /// parents first.
    pub fn register_load_state_dict_pre_hook(
        &self,
        hook: impl Fn(&mut StateDict, &str, Option<u32>) -> HookResult + Send + Sync + 'static,
    ) -> HookHandle {
        self.register("load_state_dict_pre", |l, id| l.load_pre.push((id, Arc::new(hook))))
    }

    /// Registers a load post-hook (PyTorch's `register_load_state_dict_post_hook`): it
    /// gets the load's missing and unexpected keys, and may take some out (keys it knows
    /// are fine) before a strict load judges them. It runs before any value is assigned,
    /// so that a refused load changes nothing (PyTorch's runs after).
    pub fn register_load_state_dict_post_hook(
        &self,
        hook: impl Fn(&mut IncompatibleKeys) -> HookResult + Send + Sync + 'static,
    ) -> HookHandle {
        self.register("load_state_dict_post", |l, id| l.load_post.push((id, Arc::new(hook))))
    }

    /// Whether this base holds load pre- or post-hooks (for loaders that do not go through
    /// [`load_state_dict`](super::Module::load_state_dict), such as FSDP's full state dict,
    /// to refuse a model whose hooks they would skip).
    pub fn has_load_state_dict_hooks(&self) -> bool {
        let l = self.hooks.lock();
        !(l.load_pre.is_empty() && l.load_post.is_empty())
    }

    /// A snapshot of the state-dict hooks.
    pub(crate) fn state_hooks(&self) -> StateHooks {
        let l = self.hooks.lock();
        StateHooks {
            post: l.sd_post.iter().map(|(_, h)| Arc::clone(h)).collect(),
            load_pre: l.load_pre.iter().map(|(_, h)| Arc::clone(h)).collect(),
            load_post: l.load_post.iter().map(|(_, h)| Arc::clone(h)).collect(),
        }
    }

    /// A snapshot of the forward and backward hooks, or `None` (one atomic load) when
    /// there are none.
    pub(crate) fn hook_snapshot(&self) -> Option<ModuleHooks> {
        if !self.hooks.any.load(Ordering::Acquire) {
            return None;
        }
        let l = self.hooks.lock();
        Some(ModuleHooks {
            pre: l.pre.iter().map(|(_, h)| Arc::clone(h)).collect(),
            fwd: l.fwd.iter().map(|(_, h)| h.clone()).collect(),
            bwd: l.bwd.iter().map(|(_, h)| Arc::clone(h)).collect(),
            bwd_pre: l.bwd_pre.iter().map(|(_, h)| Arc::clone(h)).collect(),
        })
    }
}

/// A module's forward and backward hooks at the start of a call, in firing order.
#[derive(Default)]
pub(crate) struct ModuleHooks {
    pub(crate) pre: Vec<ForwardPreHookTensors>,
    pub(crate) fwd: Vec<FwdEntry>,
    pub(crate) bwd: Vec<BackwardHookTensors>,
    pub(crate) bwd_pre: Vec<BackwardPreHookTensors>,
}
