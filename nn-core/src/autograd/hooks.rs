//! Autograd hooks: gradient hooks on any tensor, post-accumulate-grad hooks on leaves, and
//! end-of-backward callbacks.
//!
//! A gradient hook ([`Tensor::register_hook`], PyTorch's `Tensor.register_hook`) sees the
//! gradient of its tensor once a backward pass has summed every contribution to it, and
//! may return a replacement, which is what flows on: for the result of an op, into that
//! op's backward (and into `.grad` where [`retain_grad`](Tensor::retain_grad) asked, after
//! the hooks, as PyTorch runs retain-grad last); for a leaf, into its `.grad`. The hooks of
//! an op's result live on the op's graph node, so every handle on that result shares them.
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

/// A gradient hook ([`Tensor::register_hook`]): sees a tensor's gradient, may return a
/// replacement of the same shape, dtype and device.
pub type GradHook = Arc<dyn Fn(&Tensor) -> Option<Tensor> + Send + Sync>;

static NEXT_HOOK_ID: AtomicU64 = AtomicU64::new(1);

/// One tensor's hook list, in registration order, with a flag read before the lock: every
/// graph node has one, and backward asks each for its hooks.
pub(crate) struct HookList<H> {
    any: std::sync::atomic::AtomicBool,
    hooks: Mutex<Vec<(u64, H)>>,
}

impl<H> Default for HookList<H> {
    fn default() -> Self {
        HookList { any: std::sync::atomic::AtomicBool::new(false), hooks: Mutex::new(Vec::new()) }
    }
}

impl<H: Clone> HookList<H> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, H)>> {
        self.hooks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, hook: H) -> u64 {
        let id = NEXT_HOOK_ID.fetch_add(1, Ordering::Relaxed);
        let mut l = self.lock();
        l.push((id, hook));
        self.any.store(true, Ordering::Release);
        id
    }

    /// The hooks now registered (a copy, so a hook may register or remove hooks).
    fn snapshot(&self) -> Vec<H> {
        if !self.any.load(Ordering::Acquire) {
            return Vec::new();
        }
        self.lock().iter().map(|(_, h)| h.clone()).collect()
    }

    fn has(&self, id: u64) -> bool {
        self.lock().iter().any(|(i, _)| *i == id)
    }

    fn remove(&self, id: u64) {
        let mut l = self.lock();
        l.retain(|(i, _)| *i != id);
        self.any.store(!l.is_empty(), Ordering::Release);
    }
}

/// A leaf tensor's hooks: gradient hooks (run on the summed gradient before it is
/// accumulated) and post-accumulate-grad hooks (after).
#[derive(Default)]
pub(crate) struct GradHooks {
    pre: HookList<GradHook>,
    post: HookList<PostAccumulateGradHook>,
}

impl HookOwner for TensorImpl {
    fn has_hook(&self, id: u64) -> bool {
        self.grad_hooks.pre.has(id) || self.grad_hooks.post.has(id)
    }

    fn remove_hook(&self, id: u64) {
        self.grad_hooks.pre.remove(id);
        self.grad_hooks.post.remove(id);
    }
}

/// The gradient hooks of an op's result: on its graph node.
impl HookOwner for super::Node {
    fn has_hook(&self, id: u64) -> bool {
        self.hooks.has(id)
    }

    fn remove_hook(&self, id: u64) {
        self.hooks.remove(id);
    }
}

/// `g` through `hooks` in order, each seeing the previous one's replacement; a replacement
/// of another shape, dtype or device than `g` panics, naming the tensor (`what`).
#[track_caller]
fn run_grad_hooks(hooks: &HookList<GradHook>, mut g: Tensor, what: impl Fn() -> String) -> Tensor {
    for h in hooks.snapshot() {
        if let Some(new) = h(&g) {
            if (new.shape(), new.dtype(), new.device()) != (g.shape(), g.dtype(), g.device()) {
                panic!(
                    "register_hook: a hook on {} returned a gradient of shape {:?} ({}, {}) for a gradient of shape                      {:?} ({}, {}); a replacement keeps the gradient's shape, dtype and device",
                    what(),
                    new.shape(),
                    new.dtype(),
                    new.device(),
                    g.shape(),
                    g.dtype(),
                    g.device()
                );
            }
            g = new;
        }
    }
    g
}

impl super::Node {
    /// This node's output gradient through the gradient hooks of its result.
    pub(crate) fn run_grad_hooks(&self, g: Tensor) -> Tensor {
        run_grad_hooks(&self.hooks, g, || format!("the result of `{}`", self.name))
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
        let id = self.0.grad_hooks.post.push(Arc::new(hook));
        let owner: Arc<dyn HookOwner> = self.0.clone();
        HookHandle::new(Arc::downgrade(&owner), "post_accumulate_grad", id)
    }

    /// Registers `hook` to see this tensor's gradient in every backward pass that reaches
    /// it, once all of that pass's contributions are summed (PyTorch's
    /// `Tensor.register_hook`). Returning `Some(g)` replaces the gradient: for the result of
    /// an op, `g` is what flows on into the op's backward; for a leaf, what is accumulated
    /// into `.grad`. Hooks run in registration order, each seeing the previous one's
    /// replacement, and stay until [`HookHandle::remove`]. Every handle on the tensor (its
    /// clones) shares them; [`detach`](Tensor::detach) and views do not.
    ///
    /// ```
    /// use nn_core::Tensor;
    ///
    /// let x = Tensor::from_vec(vec![1.0, 2.0], &[2]).requires_grad_(true);
    /// let h = &x * 3.0;
    /// // Clip the gradient flowing through `h` (a non-leaf) to 1.
    /// let handle = h.register_hook(|g| Some(g.clamp(-1.0, 1.0)));
    /// (&h * 5.0).sum().backward();
    /// assert_eq!(x.grad().unwrap().to_vec(), vec![3.0, 3.0]); // 1 (clipped from 5) * 3
    /// handle.remove();
    /// ```
    ///
    /// # Panics
    /// When the tensor does not require grad (PyTorch: "cannot register a hook on a tensor
    /// that doesn't require gradient"). A hook that returns a gradient of another shape,
    /// dtype or device panics in backward, naming the tensor.
    #[track_caller]
    pub fn register_hook(&self, hook: impl Fn(&Tensor) -> Option<Tensor> + Send + Sync + 'static) -> HookHandle {
        if !self.requires_grad() {
            panic!(
                "register_hook: cannot register a hook on a tensor that doesn't require gradient (call                  `requires_grad_(true)` on a leaf, or hook a result computed outside `no_grad`)"
            );
        }
        let owner: Arc<dyn HookOwner>;
        let id = match &self.0.grad_fn {
            Some(node) => {
                owner = node.clone();
                node.hooks.push(Arc::new(hook))
            }
            None => {
                owner = self.0.clone();
                self.0.grad_hooks.pre.push(Arc::new(hook))
            }
        };
        HookHandle::new(Arc::downgrade(&owner), "grad", id)
    }

    /// A leaf's summed gradient of one pass through its gradient hooks.
    pub(crate) fn run_grad_hooks(&self, g: Tensor) -> Tensor {
        run_grad_hooks(&self.0.grad_hooks.pre, g, || format!("a leaf of shape {:?}", self.shape()))
    }

    /// Runs the post-accumulate-grad hooks (the list is copied first, so a hook may
    /// register or remove hooks).
    pub(crate) fn run_post_accumulate_grad_hooks(&self) {
        for h in self.0.grad_hooks.post.snapshot() {
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

    #[test]
    fn grad_hooks_see_the_summed_gradient_and_replace_it() {
        // torch: x = [1, 2] (leaf); h = x * 3; h used twice; a hook on h doubles its
        // gradient; h.retain_grad() sees the doubled one (retain-grad runs last); a hook on
        // x sees the gradient before `.grad`.
        let x = leaf(&[1.0, 2.0], &[2]);
        let h = &x * 3.0;
        h.retain_grad();
        let seen: Log = Arc::default();
        let (s1, s2) = (seen.clone(), seen.clone());
        h.register_hook(move |g| {
            s1.lock().unwrap().push(format!("h={:?}", g.to_vec()));
            Some(g * 2.0)
        });
        x.register_hook(move |g| {
            s2.lock().unwrap().push(format!("x={:?}", g.to_vec()));
            None
        });
        (&h * 5.0 + &h).sum().backward();
        assert_eq!(*seen.lock().unwrap(), ["h=[6.0, 6.0]", "x=[36.0, 36.0]"]);
        assert_eq!(h.grad().unwrap().to_vec(), [12.0, 12.0]);
        assert_eq!(grad(&x), [36.0, 36.0]);
    }

    #[test]
    fn a_leaf_hook_replaces_what_is_accumulated_and_removal_stops_it() {
        let w = Parameter::new(Tensor::from_vec(vec![1.0, -1.0], &[2]));
        let handle = w.register_hook(|g| Some(g.clamp(-0.5, 0.5)));
        assert!(handle.is_registered());
        (&*w * 4.0).sum().backward();
        assert_eq!(w.grad().unwrap().to_vec(), [0.5, 0.5]);
        handle.remove();
        w.zero_grad();
        (&*w * 4.0).sum().backward();
        assert_eq!(w.grad().unwrap().to_vec(), [4.0, 4.0]);
        // The root itself may be hooked.
        let r = (&*w * 1.0).sum();
        r.register_hook(|g| Some(g * 0.0));
        w.zero_grad();
        r.backward();
        assert_eq!(w.grad().unwrap().to_vec(), [0.0, 0.0]);
    }

    #[test]
    #[should_panic(expected = "register_hook: a hook on the result of `exp` returned a gradient of shape [3]")]
    fn a_replacement_of_another_shape_panics_naming_the_tensor() {
        let x = leaf(&[1.0, 2.0], &[2]);
        let h = x.exp();
        h.register_hook(|_| Some(Tensor::zeros(&[3])));
        h.sum().backward();
    }

    #[test]
    #[should_panic(expected = "register_hook: cannot register a hook on a tensor that doesn't require gradient")]
    fn a_tensor_without_grad_refuses_hooks() {
        Tensor::ones(&[1]).register_hook(|_| None);
    }
}
