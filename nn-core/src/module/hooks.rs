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

use super::global_hooks::GlobalForwardHook;
use super::{IncompatibleKeys, ModuleIo};
use crate::autograd::handle::HookOwner;
pub use crate::autograd::handle::{HookHandle, ScopedHook};
use crate::autograd::{custom_op, is_grad_enabled};
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

/// A forward hook as its module keeps it.
#[derive(Clone)]
enum FwdHook {
    Plain(ForwardHook),
    Always(AlwaysForwardHook),
}

/// A full backward pre-hook: sees `grad_output` before the module's backward runs, may
/// return a replacement (PyTorch's `register_full_backward_pre_hook`).
pub type BackwardPreHook = Arc<dyn Fn(&Tensor) -> Option<Tensor> + Send + Sync>;

/// How a hook is registered (PyTorch's keyword arguments).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HookConfig {
    /// Fire before the hooks of its kind registered earlier, instead of after them
    /// (PyTorch's `prepend=True`). Global hooks still fire before a module's own.
    pub prepend: bool,
}

#[derive(Default, Clone)]
struct Lists {
    next: u64,
    pre: Vec<(u64, ForwardPreHook)>,
    fwd: Vec<(u64, FwdHook)>,
    bwd: Vec<(u64, BackwardHook)>,
    bwd_pre: Vec<(u64, BackwardPreHook)>,
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
fn named<R>(kind: &str, module: &str, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => panic!("{kind} of `{module}` panicked: {}", panic_text(&*payload)),
    }
}

/// Adds `entry` to `list`: at the end, or first with `config.prepend`.
fn place<T>(list: &mut Vec<T>, config: HookConfig, entry: T) {
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

    /// Registers a forward pre-hook (fired in registration order before `forward`).
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
        self.register("forward_pre", |l, id| place(&mut l.pre, config, (id, Arc::new(hook))))
    }

    /// Registers a forward hook (fired in registration order after `forward`).
    pub fn register_forward_hook(
        &self,
        hook: impl Fn(&Tensor, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> HookHandle {
        self.register_forward_hook_with(HookConfig::default(), hook)
    }

    /// [`register_forward_hook`](Self::register_forward_hook) with `config` (`prepend`:
    /// before the forward hooks registered earlier).
    pub fn register_forward_hook_with(
        &self,
        config: HookConfig,
        hook: impl Fn(&Tensor, &Tensor) -> Option<Tensor> + Send + Sync + 'static,
    ) -> HookHandle {
        self.register("forward", |l, id| place(&mut l.fwd, config, (id, FwdHook::Plain(Arc::new(hook)))))
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
        self.register("forward", |l, id| place(&mut l.fwd, config, (id, FwdHook::Always(Arc::new(hook)))))
    }

    /// Registers a full backward pre-hook (PyTorch's `register_full_backward_pre_hook`): it
    /// gets the gradient with respect to the module's first output when it arrives, before
    /// the module's backward runs, and may return a replacement, which the module's backward
    /// (and its full backward hooks, as `grad_output`) then see. Fired in registration order.
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
        self.register("full_backward_pre", |l, id| place(&mut l.bwd_pre, config, (id, Arc::new(hook))))
    }

    /// Registers a full backward hook (fired in registration order when the gradient with
    /// respect to the module's input is computed). It gets `(grad_input, grad_output)` of the
    /// first input and the first output; when no gradient reaches the first output (the
    /// loss used another output of a tuple), `grad_output` is zeros, where PyTorch passes
    /// `None`.
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
        self.register("full_backward", |l, id| place(&mut l.bwd, config, (id, Arc::new(hook))))
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

    /// Runs `module`'s computation `f` on `input` with the global hooks and this base's
    /// hooks around it: what [`Forward::forward`](super::Forward::forward) does for every
    /// module.
    pub(crate) fn call<I: ModuleIo, O: ModuleIo>(
        &self,
        module: &dyn super::Module,
        input: &I,
        f: impl FnOnce(&I) -> O,
    ) -> O {
        let global = super::global_hooks::snapshot();
        if global.is_none() && !self.hooks.any.load(Ordering::Acquire) {
            return f(input);
        }
        let global = global.unwrap_or_default();
        let (pre, fwd, bwd, bwd_pre) = {
            let l = self.hooks.lock();
            let type_name = module.type_name();
            // Global backward hooks first, as PyTorch chains them.
            let bwd = global.bwd.iter().map(|(_, h)| {
                let h = Arc::clone(h);
                Arc::new(move |gi: Option<&Tensor>, go: &Tensor| h(type_name, gi, go)) as BackwardHook
            });
            (
                l.pre.iter().map(|(_, h)| Arc::clone(h)).collect::<Vec<_>>(),
                l.fwd.iter().map(|(_, h)| h.clone()).collect::<Vec<FwdHook>>(),
                bwd.chain(l.bwd.iter().map(|(_, h)| Arc::clone(h))).collect::<Vec<_>>(),
                l.bwd_pre.iter().map(|(_, h)| Arc::clone(h)).collect::<Vec<_>>(),
            )
        };
        let mut x = input.clone();
        let type_name = module.type_name();
        for (_, h) in &global.pre {
            if let Some(new) = named("global forward pre-hook", type_name, || h(module, x.primary())) {
                x = x.with_primary(new);
            }
        }
        for h in &pre {
            if let Some(new) = named("forward pre-hook", type_name, || h(x.primary())) {
                x = x.with_primary(new);
            }
        }
        let with_bwd = !bwd.is_empty() && is_grad_enabled();
        let with_bwd_pre = !bwd_pre.is_empty() && is_grad_enabled();
        let grad_output: Arc<Mutex<Option<Tensor>>> = Arc::default();
        // The first output's shape, dtype and device: its gradient is zeros when none
        // reaches it (the loss used another output of a tuple).
        type Like = (Vec<usize>, crate::DType, crate::Device);
        let output_like: Arc<Mutex<Option<Like>>> = Arc::default();
        let input_needs_grad = x.primary().requires_grad();
        if with_bwd && input_needs_grad {
            let (bwd, go, like) = (bwd.clone(), grad_output.clone(), output_like.clone());
            let p = x.primary().clone();
            x = x.with_primary(custom_op("BackwardHookFunctionBackward", &[&p], &p, move |g_in| {
                let g_out = go.lock().unwrap_or_else(|e| e.into_inner()).take();
                // The input's gradient came through an output other than the first (an
                // RNN's `h_n`, with `out` unused): the hooks still fire, as PyTorch's do,
                // with a zero gradient for the first output (PyTorch passes `None` in
                // its place), rather than being skipped silently.
                let g_out = g_out.or_else(|| {
                    let like = like.lock().unwrap_or_else(|e| e.into_inner());
                    like.as_ref().map(|(shape, dtype, device)| Tensor::full_on(shape, 0.0, *dtype, *device))
                });
                let mut g = g_in.clone();
                let g_out = g_out.expect("internal: the module's output is recorded before its backward runs");
                for h in &bwd {
                    if let Some(new) = named("full backward hook", type_name, || h(Some(&g), &g_out)) {
                        assert_eq!(new.shape(), g.shape(), "backward hook returned grad_input of the wrong shape");
                        g = new;
                    }
                }
                vec![Some(g)]
            }));
        }
        let y = run_forward(module, &x, f, &global.fwd, &fwd);
        let mut y = y;
        if with_bwd && input_needs_grad {
            let p = y.primary();
            *output_like.lock().unwrap_or_else(|e| e.into_inner()) = Some((p.shape().to_vec(), p.dtype(), p.device()));
        }
        if (with_bwd || with_bwd_pre) && y.primary().requires_grad() {
            let p = y.primary().clone();
            y = y.with_primary(custom_op("BackwardHookFunctionBackward", &[&p], &p, move |g_out| {
                // The pre-hooks first: what they return is the gradient the module's
                // backward and its full backward hooks see.
                let mut replaced = None;
                for h in &bwd_pre {
                    let current = replaced.as_ref().unwrap_or(g_out);
                    if let Some(new) = named("full backward pre-hook", type_name, || h(current)) {
                        assert_eq!(
                            new.shape(),
                            current.shape(),
                            "full backward pre-hook returned grad_output of the wrong shape"
                        );
                        replaced = Some(new);
                    }
                }
                let g_out = replaced.as_ref().unwrap_or(g_out);
                if !with_bwd {
                    return vec![Some(g_out.clone())];
                }
                if input_needs_grad {
                    *grad_output.lock().unwrap_or_else(|e| e.into_inner()) = Some(g_out.clone());
                } else {
                    // No gradient flows to the input: fire now with grad_input = None. A
                    // replacement would have nowhere to go: refused, as PyTorch does.
                    for h in &bwd {
                        if named("full backward hook", type_name, || h(None, g_out)).is_some() {
                            panic!(
                                "full backward hook: a hook of a module whose inputs do not require grad returned a \
                                 replacement gradient, which would be dropped; return None there (PyTorch: \
                                 \"Backward hook for Modules where no input requires gradient should always return None \
                                 or None for all gradients.\")"
                            );
                        }
                    }
                }
                vec![Some(g_out.clone())]
            }));
        }
        y
    }
}

/// `f` on `x`, then the global and the module's forward hooks on its output. With hooks
/// that are always called, a panic of `f` or of a hook before them still runs them (with
/// no output), then goes on.
fn run_forward<I: ModuleIo, O: ModuleIo>(
    module: &dyn super::Module,
    x: &I,
    f: impl FnOnce(&I) -> O,
    global: &[(u64, GlobalForwardHook)],
    own: &[FwdHook],
) -> O {
    use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
    let always = own.iter().any(|h| matches!(h, FwdHook::Always(_)));
    let mut ran = vec![false; own.len()];
    let hooks = |ran: &mut [bool]| -> O {
        let mut y = f(x);
        let type_name = module.type_name();
        for (_, h) in global {
            if let Some(new) = named("global forward hook", type_name, || h(module, x.primary(), y.primary())) {
                y = y.with_primary(new);
            }
        }
        for (i, h) in own.iter().enumerate() {
            ran[i] = true;
            let new = match h {
                FwdHook::Plain(h) => named("forward hook", type_name, || h(x.primary(), y.primary())),
                FwdHook::Always(h) => named("forward hook", type_name, || h(x.primary(), Some(y.primary()))),
            };
            if let Some(new) = new {
                y = y.with_primary(new);
            }
        }
        y
    };
    if !always {
        return hooks(&mut ran);
    }
    match catch_unwind(AssertUnwindSafe(|| hooks(&mut ran))) {
        Ok(y) => y,
        Err(panic) => {
            for (h, ran) in own.iter().zip(&ran) {
                if let (FwdHook::Always(h), false) = (h, ran) {
                    if catch_unwind(AssertUnwindSafe(|| h(x.primary(), None))).is_err() {
                        eprintln!(
                            "warning: a forward hook with always_call of `{}` panicked while the forward's own panic \
                             was being handled; that first panic goes on",
                            module.type_name()
                        );
                    }
                }
            }
            resume_unwind(panic)
        }
    }
}
