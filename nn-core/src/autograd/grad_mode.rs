//! Gradient recording mode: `no_grad`, `enable_grad`, `inference_mode` and their guards.

use std::cell::Cell;

use super::nesting::Nesting;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
    static INFERENCE_MODE: Cell<bool> = const { Cell::new(false) };
    static GRAD_MODE_GUARDS: Cell<u32> = const { Cell::new(0) };
    static INFERENCE_MODE_GUARDS: Cell<u32> = const { Cell::new(0) };
}

/// True when ops on this thread record the autograd graph (the default): grad mode is on
/// ([`no_grad`] and [`enable_grad`] set it) and no [`inference_mode`] is active.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get()) && !is_inference_mode_enabled()
}

/// True inside [`inference_mode`] on this thread (`torch.is_inference_mode_enabled`).
pub fn is_inference_mode_enabled() -> bool {
    INFERENCE_MODE.with(|m| m.get())
}

/// Restores the previous gradient mode when dropped. Create one with
/// [`NoGradGuard::new`] (or [`GradModeGuard::set`] for either mode).
///
/// Guards drop innermost first on the thread that made them: the guard is not `Send`,
/// and one dropped while a guard made after it is still open panics (it would restore
/// the wrong mode).
///
/// ```compile_fail
/// let guard = nn_core::NoGradGuard::new();
/// std::thread::spawn(move || drop(guard)); // the mode belongs to this thread
/// ```
#[must_use = "the mode is restored as soon as the guard is dropped"]
pub struct GradModeGuard {
    prev: bool,
    nesting: Nesting,
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
        let nesting = Nesting::enter(&GRAD_MODE_GUARDS, "grad mode (no_grad / enable_grad)");
        let prev = GRAD_ENABLED.with(|g| g.replace(enabled));
        GradModeGuard { prev, nesting }
    }
}

impl Drop for GradModeGuard {
    fn drop(&mut self) {
        let prev = self.prev;
        self.nesting.exit(move || GRAD_ENABLED.with(|g| g.set(prev)));
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

/// A guard that turns inference mode on until it is dropped, like
/// `with torch.inference_mode():` (see [`inference_mode`]).
///
/// ```
/// use nn_core::{is_grad_enabled, InferenceModeGuard};
/// {
///     let _guard = InferenceModeGuard::new();
///     assert!(!is_grad_enabled());
/// }
/// assert!(is_grad_enabled());
/// ```
///
/// As with [`GradModeGuard`], guards drop innermost first on their own thread (not `Send`;
/// an out-of-order drop panics).
#[must_use = "inference mode ends as soon as the guard is dropped"]
pub struct InferenceModeGuard {
    prev: bool,
    nesting: Nesting,
}

impl InferenceModeGuard {
    /// Turns inference mode on for this thread until the guard drops.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        let nesting = Nesting::enter(&INFERENCE_MODE_GUARDS, "inference mode");
        InferenceModeGuard { prev: INFERENCE_MODE.with(|m| m.replace(true)), nesting }
    }
}

impl Drop for InferenceModeGuard {
    fn drop(&mut self) {
        let prev = self.prev;
        self.nesting.exit(move || INFERENCE_MODE.with(|m| m.set(prev)));
    }
}

/// Runs `f` in inference mode, like PyTorch's `torch.inference_mode()`: no op records the
/// autograd graph (results do not require grad), and, stricter than [`no_grad`], an
/// [`enable_grad`] inside does not turn recording back on (PyTorch's inference mode
/// excludes autograd altogether in its scope).
///
/// What nn does not have: PyTorch also marks the tensors created in inference mode as
/// "inference tensors", which skip version-counter bookkeeping and may not be saved for
/// backward or updated in place outside inference mode. nn keeps no version counters
/// (in-place updates are copy-on-write) and has no such tensors: what `inference_mode`
/// returns is an ordinary tensor that does not require grad, usable anywhere, exactly as
/// a [`no_grad`] result. The one observable difference from PyTorch is
/// [`is_grad_enabled`], which stays `false` under `enable_grad` inside inference mode
/// (PyTorch reports `true` there while still recording nothing).
///
/// ```
/// use nn_core::{enable_grad, inference_mode, is_inference_mode_enabled, Tensor};
/// let w = Tensor::ones(&[2]).requires_grad_(true);
/// let y = inference_mode(|| {
///     assert!(is_inference_mode_enabled());
///     let inner = enable_grad(|| &w * 3.0);
///     assert!(!inner.requires_grad()); // enable_grad cannot re-enable recording here
///     &w * 2.0
/// });
/// assert!(!y.requires_grad());
/// assert!(!is_inference_mode_enabled());
/// assert!((&w * 2.0).requires_grad());
/// ```
pub fn inference_mode<R>(f: impl FnOnce() -> R) -> R {
    let _g = InferenceModeGuard::new();
    f()
}

#[cfg(test)]
mod tests {
    use super::{enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad, InferenceModeGuard};
    use crate::testing::support::{grad, leaf};

    /// Guards dropped in the order they were made would leave the outer guard's mode on:
    /// refused loudly.
    #[test]
    fn guards_dropped_out_of_order_panic() {
        let outer = super::NoGradGuard::new();
        let inner = super::GradModeGuard::set(true);
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(outer))).unwrap_err();
        let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("grad mode (no_grad / enable_grad) guards dropped out of order"), "{msg}");
        drop(inner);
        // The panic was caught (a thread pool's): once the inner guard drops, the thread is
        // as before the outer one (not left in no_grad, recording nothing).
        assert!(is_grad_enabled());
        let outer = InferenceModeGuard::new();
        let inner = InferenceModeGuard::new();
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(outer))).is_err());
        assert!(is_inference_mode_enabled());
        drop(inner);
        assert!(!is_inference_mode_enabled());
        // In order, nothing is said.
        let a = super::NoGradGuard::new();
        let b = super::GradModeGuard::set(true);
        drop(b);
        drop(a);
        // Unwinding drops locals in reverse order of declaration, here the outer guard
        // first (the inner one sits in a vector declared before it): no second panic, and
        // the thread is as before both once the unwinding is caught.
        let r = std::panic::catch_unwind(|| {
            let mut held = Vec::new();
            let _outer = super::NoGradGuard::new();
            held.push(super::GradModeGuard::set(true));
            panic!("a step failed");
        });
        assert!(r.is_err());
        assert!(is_grad_enabled());
        no_grad(|| assert!(!is_grad_enabled()));
    }

    #[test]
    fn inference_mode_records_nothing_even_under_enable_grad() {
        let w = leaf(&[1.0, 2.0], &[2]);
        assert!(!is_inference_mode_enabled());
        let (y, inner, nested) = inference_mode(|| {
            assert!(is_inference_mode_enabled() && !is_grad_enabled());
            let inner = enable_grad(|| &w * 3.0);
            let nested = no_grad(|| enable_grad(|| w.exp()));
            (&w * 2.0, inner, nested)
        });
        for t in [&y, &inner, &nested] {
            assert!(!t.requires_grad() && t.is_leaf() && t.grad_fn_name().is_none());
        }
        assert_eq!(inner.to_vec_f64(), vec![3.0, 6.0]);
        assert!(!is_inference_mode_enabled() && is_grad_enabled());
        assert!((&w * 2.0).requires_grad(), "recording resumes after the scope");
    }

    #[test]
    fn guards_nest_and_restore_the_previous_mode() {
        let w = leaf(&[1.0], &[1]);
        {
            let _outer = InferenceModeGuard::new();
            {
                let _inner = InferenceModeGuard::new();
                assert!(is_inference_mode_enabled());
            }
            assert!(is_inference_mode_enabled(), "the inner guard restores inference mode, not the default");
            assert!(!(&w + 1.0).requires_grad());
        }
        assert!(!is_inference_mode_enabled());
        // Inside no_grad, leaving inference mode returns to no_grad.
        no_grad(|| {
            inference_mode(|| assert!(!is_grad_enabled()));
            assert!(!is_grad_enabled() && !is_inference_mode_enabled());
        });
        // Unwinding out of inference mode restores it too.
        let r = std::panic::catch_unwind(|| inference_mode(|| panic!("boom")));
        assert!(r.is_err() && !is_inference_mode_enabled() && is_grad_enabled());
    }

    #[test]
    fn inference_mode_is_per_thread() {
        let w = leaf(&[1.0], &[1]);
        let _g = InferenceModeGuard::new();
        let w2 = w.clone();
        let other = std::thread::spawn(move || (is_inference_mode_enabled(), (&w2 * 2.0).requires_grad())).join();
        assert_eq!(other.unwrap(), (false, true));
        assert!(!(&w * 2.0).requires_grad());
    }

    #[test]
    fn results_are_ordinary_tensors_and_in_place_updates_are_allowed() {
        // Unlike PyTorch's inference tensors, a result may enter autograd later.
        let w = leaf(&[1.0, 2.0], &[2]);
        let c = inference_mode(|| &w * 3.0);
        (&c * &w).sum().backward();
        assert_eq!(grad(&w), vec![3.0, 6.0]);
        // Like no_grad: an optimizer-style update of a leaf that requires grad.
        inference_mode(|| w.sub_(0.5));
        assert_eq!(w.to_vec_f64(), vec![0.5, 1.5]);
        assert!(w.requires_grad() && w.is_leaf());
    }
}
