//! Autograd hooks: per-tensor post-accumulate-grad hooks and end-of-backward callbacks.
//!
//! A post-accumulate-grad hook (PyTorch's `Tensor.register_post_accumulate_grad_hook`)
//! runs once per backward pass for a leaf, after every gradient that pass produced for it
//! has been summed into its `.grad`, and sees the leaf itself. That is the moment a
//! gradient is final, so it is where data-parallel training starts reducing it while the
//! rest of backward runs, and where an optimizer can step one parameter at a time.
//!
//! An end-of-backward callback ([`queue_callback`], PyTorch's
//! `Variable._execution_engine.queue_callback`) is queued from inside a backward pass,
//! typically by a hook, and runs once that pass has finished: after every hook, on the
//! thread that called `backward`.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::handle::{HookHandle, HookOwner};
use crate::tensor::{Tensor, TensorImpl};

/// A post-accumulate-grad hook: sees the leaf whose `.grad` was just updated.
pub type PostAccumulateGradHook = Arc<dyn Fn(&Tensor) + Send + Sync>;

static NEXT_HOOK_ID: AtomicU64 = AtomicU64::new(1);

/// The post-accumulate-grad hooks of one tensor, in registration order.
#[derive(Default)]
pub(crate) struct GradHooks(Mutex<Vec<(u64, PostAccumulateGradHook)>>);

impl GradHooks {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, PostAccumulateGradHook)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl HookOwner for TensorImpl {
    fn has_hook(&self, id: u64) -> bool {
        self.grad_hooks.lock().iter().any(|(i, _)| *i == id)
    }

    fn remove_hook(&self, id: u64) {
        self.grad_hooks.lock().retain(|(i, _)| *i != id);
    }
}

impl Tensor {
    /// Registers `hook` to run after this leaf's gradient has been accumulated in a
    /// backward pass (PyTorch's `register_post_accumulate_grad_hook`).
    ///
    /// The hook runs once per backward pass that reaches the tensor, after all of that
    /// pass's contributions (a parameter used twice gets one call, with the sum in
    /// `.grad`), on the thread running backward, in registration order. It receives the
    /// tensor itself: read or replace its gradient with [`grad`](Tensor::grad) /
    /// [`set_grad`](Tensor::set_grad). Clones of the tensor (a [`Parameter`] held by a
    /// model and by an optimizer) share the hooks; [`detach`](Tensor::detach) does not.
    ///
    /// As with module hooks, the hook stays registered until
    /// [`HookHandle::remove`]: dropping the handle does not remove it.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use nn_core::{Parameter, Tensor};
    ///
    /// let w = Parameter::new(Tensor::from_vec(vec![1.0, 2.0], &[2]));
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = seen.clone();
    /// let handle = w.register_post_accumulate_grad_hook(move |p| log.lock().unwrap().push(p.grad().unwrap().to_vec()));
    /// // `w` is used twice: the hook runs once, when both contributions are in `.grad`.
    /// (&*w * &*w + &*w * 3.0).sum().backward();
    /// assert_eq!(*seen.lock().unwrap(), [vec![5.0, 7.0]]);
    /// (&*w * 2.0).sum().backward(); // accumulates: 5 + 2, 7 + 2
    /// assert_eq!(seen.lock().unwrap()[1], [7.0, 9.0]);
    /// handle.remove();
    /// w.sum().backward();
    /// assert_eq!(seen.lock().unwrap().len(), 2);
    /// ```
    ///
    /// [`Parameter`]: crate::Parameter
    ///
    /// # Panics
    /// When the tensor does not require grad, or is not a leaf (the result of an op has
    /// no `.grad` to accumulate into), as PyTorch raises.
    #[track_caller]
    pub fn register_post_accumulate_grad_hook(&self, hook: impl Fn(&Tensor) + Send + Sync + 'static) -> HookHandle {
        if !self.is_leaf() {
            panic!(
                "register_post_accumulate_grad_hook: post accumulate grad hooks cannot be registered on non-leaf \
                 tensors (this one is the result of `{}`)",
                self.grad_fn_name().unwrap_or("an op")
            );
        }
        if !self.requires_grad() {
            panic!(
                "register_post_accumulate_grad_hook: cannot register a hook on a tensor that doesn't require \
                 gradient (call `requires_grad_(true)` first)"
            );
        }
        let id = NEXT_HOOK_ID.fetch_add(1, Ordering::Relaxed);
        self.0.grad_hooks.lock().push((id, Arc::new(hook)));
        let owner: Arc<dyn HookOwner> = self.0.clone();
        HookHandle::new(Arc::downgrade(&owner), "post_accumulate_grad", id)
    }

    /// Runs the post-accumulate-grad hooks (the list is copied first, so a hook may
    /// register or remove hooks).
    pub(crate) fn run_post_accumulate_grad_hooks(&self) {
        let hooks: Vec<PostAccumulateGradHook> = {
            let l = self.0.grad_hooks.lock();
            if l.is_empty() {
                return;
            }
            l.iter().map(|(_, h)| Arc::clone(h)).collect()
        };
        for h in hooks {
            h(self);
        }
    }
}

type Callback = Box<dyn FnOnce()>;

thread_local! {
    /// One frame per backward pass running on this thread (a hook may run a nested one).
    static CALLBACKS: RefCell<Vec<Vec<Callback>>> = const { RefCell::new(Vec::new()) };
}

/// Queues `f` to run when the backward pass that is running on this thread finishes,
/// after every hook of that pass (PyTorch's `Variable._execution_engine.queue_callback`).
/// Callbacks run in the order they were queued, and may queue further callbacks, which
/// run in the same pass. A backward pass that panics drops its callbacks unrun.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use nn_core::{autograd::queue_callback, Tensor};
///
/// let x = Tensor::from_vec(vec![3.0], &[1]).requires_grad_(true);
/// let log = Arc::new(Mutex::new(Vec::new()));
/// let l = log.clone();
/// x.register_post_accumulate_grad_hook(move |t| {
///     l.lock().unwrap().push(format!("hook: grad {}", t.grad().unwrap().item()));
///     let l = l.clone();
///     queue_callback(move || l.lock().unwrap().push("end of backward".to_string()));
/// });
/// (&x * &x).sum().backward();
/// assert_eq!(*log.lock().unwrap(), ["hook: grad 6", "end of backward"]);
/// ```
///
/// # Panics
/// When no backward pass is running on this thread.
#[track_caller]
pub fn queue_callback(f: impl FnOnce() + 'static) {
    CALLBACKS.with(|c| match c.borrow_mut().last_mut() {
        Some(frame) => frame.push(Box::new(f)),
        None => panic!(
            "queue_callback: no backward pass is running on this thread; queue callbacks from a hook that runs \
             during backward"
        ),
    });
}

/// The callback frame of one backward pass: opened at the start, closed (callbacks run) by
/// [`finish`](CallbackFrame::finish), or dropped unrun when the pass panics.
pub(crate) struct CallbackFrame {
    depth: usize,
}

impl CallbackFrame {
    pub(crate) fn open() -> Self {
        let depth = CALLBACKS.with(|c| {
            let mut c = c.borrow_mut();
            c.push(Vec::new());
            c.len()
        });
        CallbackFrame { depth }
    }

    /// Runs this pass's callbacks, including those queued by callbacks.
    pub(crate) fn finish(self) {
        loop {
            let next = CALLBACKS.with(|c| {
                let mut c = c.borrow_mut();
                debug_assert_eq!(c.len(), self.depth, "callback frames are nested");
                let frame = c.last_mut().expect("the frame is open");
                (!frame.is_empty()).then(|| frame.remove(0))
            });
            match next {
                Some(f) => f(),
                None => break,
            }
        }
    }
}

impl Drop for CallbackFrame {
    fn drop(&mut self) {
        // Drop the callbacks outside the borrow: dropping a closure may run arbitrary code.
        let frame = CALLBACKS.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() == self.depth {
                c.pop()
            } else {
                None
            }
        });
        drop(frame);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::queue_callback;
    use crate::testing::support::{grad, leaf};
    use crate::{Parameter, Tensor};

    type Log = Arc<Mutex<Vec<String>>>;

    fn logger(log: &Log, name: &'static str) -> impl Fn(&Tensor) + Send + Sync + 'static {
        let log = log.clone();
        move |t: &Tensor| log.lock().unwrap().push(format!("{name}={:?}", t.grad().unwrap().to_vec()))
    }

    #[test]
    fn a_hook_runs_once_per_backward_after_all_contributions() {
        let log: Log = Arc::default();
        let w = leaf(&[2.0], &[1]);
        w.register_post_accumulate_grad_hook(logger(&log, "w"));
        // w feeds three ops; the engine sums before accumulating, and the hook sees 2w + 3 + 1.
        let y = w.square() + &w * 3.0 + w.exp().log();
        y.sum().backward();
        assert_eq!(*log.lock().unwrap(), ["w=[8.0]"]);
        assert_eq!(grad(&w), vec![8.0]);
    }

    #[test]
    fn hooks_fire_in_registration_order_and_see_the_accumulated_gradient() {
        let log: Log = Arc::default();
        let p = Parameter::new(Tensor::from_vec(vec![1.0, -1.0], &[2]));
        let _a = p.register_post_accumulate_grad_hook(logger(&log, "a"));
        let b = p.register_post_accumulate_grad_hook(logger(&log, "b"));
        (&*p * 2.0).sum().backward();
        (&*p * 3.0).sum().backward();
        assert_eq!(*log.lock().unwrap(), ["a=[2.0, 2.0]", "b=[2.0, 2.0]", "a=[5.0, 5.0]", "b=[5.0, 5.0]"]);
        assert!(b.is_registered());
        b.remove();
        log.lock().unwrap().clear();
        p.zero_grad();
        p.sum().backward();
        assert_eq!(*log.lock().unwrap(), ["a=[1.0, 1.0]"]);
    }

    #[test]
    fn dropping_the_handle_keeps_the_hook_and_clones_share_it() {
        let log: Log = Arc::default();
        let p = Parameter::new(Tensor::ones(&[1]));
        drop(p.register_post_accumulate_grad_hook(logger(&log, "p")));
        let same = p.clone();
        (&*same * 4.0).sum().backward();
        assert_eq!(*log.lock().unwrap(), ["p=[4.0]"]);
        // A detached tensor is a new leaf without hooks.
        let d = p.detach().requires_grad_(true);
        (&d * 4.0).sum().backward();
        assert_eq!(log.lock().unwrap().len(), 1);
    }

    #[test]
    fn hooks_fire_in_the_order_gradients_become_final() {
        // out = w2 * (w1 * x): w2's gradient is final first, as in any layered model.
        let log: Log = Arc::default();
        let (w1, w2) = (leaf(&[2.0], &[1]), leaf(&[3.0], &[1]));
        w1.register_post_accumulate_grad_hook(logger(&log, "w1"));
        w2.register_post_accumulate_grad_hook(logger(&log, "w2"));
        let x = Tensor::from_vec_f64(vec![5.0], &[1]);
        (&w2 * &(&w1 * &x)).sum().backward();
        assert_eq!(*log.lock().unwrap(), ["w2=[10.0]", "w1=[15.0]"]);
    }

    #[test]
    fn a_hook_may_replace_the_gradient() {
        let w = leaf(&[1.0, 2.0], &[2]);
        w.register_post_accumulate_grad_hook(|t| t.set_grad(Some(t.grad().unwrap().clamp(-1.0, 1.0))));
        (&w * 10.0).sum().backward();
        assert_eq!(grad(&w), vec![1.0, 1.0]);
    }

    #[test]
    fn the_root_leaf_fires_its_hook() {
        let log: Log = Arc::default();
        let w = leaf(&[3.0], &[]);
        w.register_post_accumulate_grad_hook(logger(&log, "w"));
        w.backward();
        assert_eq!(*log.lock().unwrap(), ["w=[1.0]"]);
    }

    #[test]
    fn a_leaf_without_gradient_in_this_pass_does_not_fire() {
        let log: Log = Arc::default();
        let (a, b) = (leaf(&[1.0], &[1]), leaf(&[1.0], &[1]));
        b.register_post_accumulate_grad_hook(logger(&log, "b"));
        (&a * 2.0).sum().backward();
        assert!(log.lock().unwrap().is_empty());
        assert!(b.grad().is_none());
    }

    #[test]
    #[should_panic(
        expected = "post accumulate grad hooks cannot be registered on non-leaf tensors (this one is the result of `affine`)"
    )]
    fn non_leaves_refuse_hooks() {
        let w = leaf(&[1.0], &[1]);
        (&w * 2.0).register_post_accumulate_grad_hook(|_| {});
    }

    #[test]
    #[should_panic(expected = "cannot register a hook on a tensor that doesn't require gradient")]
    fn tensors_without_grad_refuse_hooks() {
        Tensor::ones(&[1]).register_post_accumulate_grad_hook(|_| {});
    }

    #[test]
    fn callbacks_run_after_every_hook_in_queue_order() {
        let log: Log = Arc::default();
        let (w1, w2) = (leaf(&[2.0], &[1]), leaf(&[3.0], &[1]));
        for (w, name) in [(&w1, "w1"), (&w2, "w2")] {
            let l = log.clone();
            w.register_post_accumulate_grad_hook(move |_| {
                l.lock().unwrap().push(format!("hook {name}"));
                let l = l.clone();
                queue_callback(move || {
                    l.lock().unwrap().push(format!("callback {name}"));
                    let l = l.clone();
                    queue_callback(move || l.lock().unwrap().push(format!("nested {name}")));
                });
            });
        }
        (&w1 * &w2).sum().backward();
        let got = log.lock().unwrap().clone();
        assert_eq!(got.len(), 6, "{got:?}");
        assert!(got[..2].iter().all(|s| s.starts_with("hook")), "{got:?}");
        assert!(got[2..4].iter().all(|s| s.starts_with("callback")), "{got:?}");
        assert!(got[4..].iter().all(|s| s.starts_with("nested")), "{got:?}");
        // The next backward starts with an empty queue.
        log.lock().unwrap().clear();
        (&w1 * 2.0).sum().backward();
        assert_eq!(log.lock().unwrap().len(), 3);
    }

    #[test]
    #[should_panic(expected = "queue_callback: no backward pass is running on this thread")]
    fn queue_callback_outside_backward_panics() {
        queue_callback(|| {});
    }

    #[test]
    fn a_panicking_backward_drops_its_callbacks() {
        let ran = Arc::new(Mutex::new(false));
        let w = leaf(&[1.0], &[1]);
        let r = ran.clone();
        w.register_post_accumulate_grad_hook(move |_| {
            let r = r.clone();
            queue_callback(move || *r.lock().unwrap() = true);
            panic!("hook failed");
        });
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (&w * 2.0).sum().backward()));
        assert!(err.is_err());
        assert!(!*ran.lock().unwrap());
        // The frame was popped: queueing outside a backward is an error again.
        assert!(std::panic::catch_unwind(|| queue_callback(|| {})).is_err());
    }
}
