//! The module forwards running on this thread, outermost first, and each running module's
//! path from the outermost one: what a hook's [`HookCall::path`] reads.
//!
//! [`Forward::forward`](super::Forward::forward) pushes its module before the hooks and
//! `compute` run and pops it when it returns or unwinds. A path is looked up in one
//! `named_modules()` walk of the outermost running module, made the first time a hook
//! asks during that outermost forward and remade when a module is missing from it (a lazy
//! layer built on its first call); it is dropped when the outermost forward returns.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;

use super::Module;
use crate::tensor::Tensor;

/// A module's identity while it runs: the address of its `ModuleBase` (stable while the
/// module is borrowed by its forward).
type Key = usize;

fn key_of(m: &dyn Module) -> Option<Key> {
    m.base().map(|b| b as *const super::ModuleBase as usize)
}

/// A running module, with its borrow's lifetime erased.
///
/// Sound because an entry lives only while the `&self` of the `Forward::forward` that
/// pushed it does: [`enter`]'s guard pops it when that forward returns or unwinds, and the
/// pointer is read only by [`path_of`] on this thread, while the forward runs.
#[derive(Clone, Copy)]
struct Entry(*const (dyn Module + 'static));

thread_local! {
    static STACK: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
    static PATHS: RefCell<Option<HashMap<Key, String>>> = const { RefCell::new(None) };
}

/// Pops the module [`enter`] pushed; the outermost also drops the path cache.
pub(crate) struct Running(());

impl Drop for Running {
    fn drop(&mut self) {
        let empty = STACK.with(|s| {
            let mut s = s.borrow_mut();
            s.pop();
            s.is_empty()
        });
        if empty {
            PATHS.with(|p| p.borrow_mut().take());
        }
    }
}

/// Marks `module`'s forward as running on this thread until the guard drops.
pub(crate) fn enter(module: &dyn Module) -> Running {
    // SAFETY: only the lifetime is erased (see `Entry`): the guard pops the entry before
    // the borrow `module` comes from ends.
    let erased: *const (dyn Module + 'static) = unsafe { std::mem::transmute(module as *const dyn Module) };
    STACK.with(|s| s.borrow_mut().push(Entry(erased)));
    Running(())
}

/// The path of `module` from the outermost module running on this thread (`""` for that
/// one), or `None` when its `named_modules()` does not reach `module`.
pub(crate) fn path_of(module: &dyn Module) -> Option<String> {
    let key = key_of(module)?;
    let root = STACK.with(|s| s.borrow().first().copied())?;
    if let Some(p) = PATHS.with(|p| p.borrow().as_ref().and_then(|m| m.get(&key).cloned())) {
        return Some(p);
    }
    // SAFETY: the outermost entry's forward is running (it is below the caller's on the
    // stack), so its module is alive and borrowed.
    let root: &dyn Module = unsafe { &*root.0 };
    let map: HashMap<Key, String> =
        root.named_modules().into_iter().filter_map(|(path, m)| Some((key_of(m)?, path))).collect();
    let found = map.get(&key).cloned();
    PATHS.with(|p| *p.borrow_mut() = Some(map));
    found
}

/// What a hook that sees every tensor is told about the call it runs in: the module, its
/// type name and path, and whether the forward panicked.
///
/// Forward pre-hooks and forward hooks get the module itself; backward hooks, which run
/// after the forward has returned, get its type name and the path it had then.
pub struct HookCall<'a> {
    module: Option<&'a dyn Module>,
    type_name: &'static str,
    path: OnceCell<Option<String>>,
    panicked: bool,
    /// The shapes, dtypes and devices of the output slots (for the one-tensor backward
    /// hooks, which get zeros where no gradient arrived).
    pub(crate) outputs_like: &'a [Option<Like>],
}

/// A tensor's shape, dtype and device: enough to make zeros like it.
pub(crate) type Like = (Vec<usize>, crate::DType, crate::Device);

/// The [`Like`] of every slot.
pub(crate) fn like_of(slots: &[Option<Tensor>]) -> Vec<Option<Like>> {
    slots.iter().map(|t| t.as_ref().map(|t| (t.shape().to_vec(), t.dtype(), t.device()))).collect()
}

/// Zeros like `like`.
pub(crate) fn zeros(like: &Like) -> Tensor {
    Tensor::full_on(&like.0, 0.0, like.1, like.2)
}

impl<'a> HookCall<'a> {
    /// A forward-time call on `module`.
    pub(crate) fn forward(module: &'a dyn Module, panicked: bool) -> Self {
        HookCall {
            module: Some(module),
            type_name: module.type_name(),
            path: OnceCell::new(),
            panicked,
            outputs_like: &[],
        }
    }

    /// A backward-time call, with the path captured at forward time.
    pub(crate) fn backward(type_name: &'static str, path: Option<String>, outputs_like: &'a [Option<Like>]) -> Self {
        HookCall { module: None, type_name, path: OnceCell::from(path), panicked: false, outputs_like }
    }

    /// The module (forward pre-hooks and forward hooks); `None` in backward hooks.
    pub fn module(&self) -> Option<&'a dyn Module> {
        self.module
    }

    /// The module's type name (`"Linear"`).
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// The module's dotted path from the outermost module running on this thread: `""`
    /// for that one, `"encoder.layers.0"` below it (PyTorch's `named_modules` name).
    /// `None` when that module's `named_modules()` does not reach this one (a module built
    /// and called inside a forward).
    pub fn path(&self) -> Option<&str> {
        self.path.get_or_init(|| self.module.and_then(path_of)).as_deref()
    }

    /// Whether the forward (or a forward hook before this one) panicked: a forward hook
    /// registered with [`HookConfig::always_call`](super::HookConfig::always_call) is then
    /// called with no output slots, and the panic goes on after it.
    pub fn panicked(&self) -> bool {
        self.panicked
    }
}

impl std::fmt::Debug for HookCall<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookCall")
            .field("type_name", &self.type_name)
            .field("path", &self.path())
            .field("panicked", &self.panicked)
            .finish()
    }
}
