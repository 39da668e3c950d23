//! Gradient recording mode: `no_grad`, `enable_grad` and their guard.

use std::cell::Cell;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// True when ops on this thread record the autograd graph (the default).
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Restores the previous gradient mode when dropped. Create one with
/// [`NoGradGuard::new`] (or [`GradModeGuard::set`] for either mode).
#[must_use = "the mode is restored as soon as the guard is dropped"]
pub struct GradModeGuard {
    prev: bool,
}

/// A guard that disables graph recording until it is dropped, like
/// `with torch.no_grad():`.
pub type NoGradGuard = GradModeGuard;

impl GradModeGuard {
    /// Disables gradient recording on this thread until the guard drops.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Self::set(false)
    }

    /// Sets gradient recording to `enabled` until the guard drops.
    pub fn set(enabled: bool) -> Self {
        let prev = GRAD_ENABLED.with(|g| g.replace(enabled));
        GradModeGuard { prev }
    }
}

impl Drop for GradModeGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.prev));
    }
}

/// Runs `f` without recording the autograd graph (results do not require grad).
///
/// ```
/// use nn_core::{no_grad, Tensor};
/// let w = Tensor::ones(&[2]).requires_grad_(true);
/// let y = no_grad(|| &w * 3.0);
/// assert!(!y.requires_grad());
/// assert!((&w * 3.0).requires_grad());
/// ```
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _g = GradModeGuard::set(false);
    f()
}

/// Runs `f` with graph recording enabled, even inside [`no_grad`].
pub fn enable_grad<R>(f: impl FnOnce() -> R) -> R {
    let _g = GradModeGuard::set(true);
    f()
}
