//! Selective activation checkpointing (PyTorch's `create_selective_checkpoint_contexts`):
//! a [`CheckpointPolicy`] names ops whose outputs the first run keeps, so that the
//! recomputation in backward takes them instead of running those ops again. Saving the
//! matrix products and attention, and recomputing the elementwise ops around them, keeps
//! most of checkpointing's memory saving for a fraction of its extra time.
//!
//! The outputs are kept as the first run's buffers (shared, not copied: a later in-place
//! write to the first run's tensor copies it first), until the checkpointed block's graph
//! goes. The recomputation must run the saved ops in the first run's order, on inputs of
//! the same shapes: a recomputation that runs another op where the first run saved one, or
//! fewer or more of them, panics naming the ops (PyTorch's non-determinism check).

use std::any::Any;
use std::cell::RefCell;
use std::sync::{Arc, Mutex};

use crate::names;

/// Which ops' outputs a checkpointed block keeps (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointPolicy {
    save: Vec<&'static str>,
}

impl CheckpointPolicy {
    /// The ops whose outputs a policy can keep: the matrix products (`matmul`, and the
    /// fused `linear` and `addmm`) and the fused attention.
    pub const SAVABLE: [&'static str; 4] =
        [names::MATMUL, names::LINEAR, names::ADDMM, names::SCALED_DOT_PRODUCT_ATTENTION];

    /// Keep nothing, recompute everything: what [`checkpoint`](super::checkpoint) does.
    pub fn recompute_all() -> Self {
        CheckpointPolicy { save: Vec::new() }
    }

    /// Keep the outputs of the matrix products and of attention, recompute the rest (the
    /// usual selective policy: PyTorch's examples save `aten.mm` and the attention ops).
    pub fn save_matmuls_and_attention() -> Self {
        CheckpointPolicy { save: Self::SAVABLE.to_vec() }
    }

    /// Keep the outputs of `ops` (names from [`crate::names`]).
    ///
    /// # Panics
    /// When an op is not one a policy can keep ([`SAVABLE`](Self::SAVABLE)): its output
    /// would be recomputed silently, as if it had not been named.
    #[track_caller]
    pub fn save(ops: &[&str]) -> Self {
        let save = ops
            .iter()
            .map(|op| {
                Self::SAVABLE.iter().copied().find(|s| s == op).unwrap_or_else(|| {
                    panic!(
                        "CheckpointPolicy::save: `{op}` is not an op whose output a checkpoint can keep; those are {:?}",
                        Self::SAVABLE
                    )
                })
            })
            .collect();
        CheckpointPolicy { save }
    }

    /// The ops it keeps.
    pub fn saved_ops(&self) -> &[&'static str] {
        &self.save
    }

    fn saves(&self, op: &str) -> bool {
        self.save.contains(&op)
    }
}

impl Default for CheckpointPolicy {
    /// [`recompute_all`](Self::recompute_all), PyTorch's default.
    fn default() -> Self {
        Self::recompute_all()
    }
}

/// What a checkpointed block's first run kept, in order.
#[derive(Default)]
pub(crate) struct Kept {
    values: Vec<(&'static str, usize, Box<dyn Any + Send + Sync>)>,
}

impl Kept {
    /// How many outputs were kept.
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }
}

#[derive(Clone)]
enum Mode {
    /// The first run: saved ops push their outputs.
    Record(Arc<Mutex<Kept>>),
    /// The recomputation: saved ops take the next output, the cursor counts them.
    Replay(Arc<Mutex<Kept>>, Arc<Mutex<usize>>),
}

#[derive(Clone)]
struct Context {
    policy: CheckpointPolicy,
    mode: Mode,
}

thread_local! {
    static CONTEXT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

/// Sets the calling thread's context for the scope, restoring the one before (a
/// checkpoint inside a checkpointed block has its own).
struct Scope(Option<Context>);

impl Scope {
    fn enter(c: Option<Context>) -> Scope {
        Scope(CONTEXT.with(|x| x.replace(c)))
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let before = self.0.take();
        CONTEXT.with(|x| *x.borrow_mut() = before);
    }
}

/// Runs `f` as a checkpointed block's first run under `policy`, returning what it kept.
pub(crate) fn record<R>(policy: &CheckpointPolicy, f: impl FnOnce() -> R) -> (R, Arc<Mutex<Kept>>) {
    let kept = Arc::new(Mutex::new(Kept::default()));
    let ctx = (!policy.save.is_empty()).then(|| Context { policy: policy.clone(), mode: Mode::Record(kept.clone()) });
    let _scope = Scope::enter(ctx);
    (f(), kept)
}

/// Runs `f` as the recomputation of a block whose first run kept `kept`.
///
/// # Panics
/// When the recomputation took fewer of the kept outputs than the first run kept.
pub(crate) fn replay<R>(policy: &CheckpointPolicy, kept: &Arc<Mutex<Kept>>, f: impl FnOnce() -> R) -> R {
    let total = lock(kept).len();
    if total == 0 {
        let _scope = Scope::enter(None);
        return f();
    }
    let cursor = Arc::new(Mutex::new(0));
    let ctx = Context { policy: policy.clone(), mode: Mode::Replay(kept.clone(), cursor.clone()) };
    let r = {
        let _scope = Scope::enter(Some(ctx));
        f()
    };
    let used = *lock(&cursor);
    if used != total {
        panic!(
            "checkpoint: the recomputation ran {used} of the {total} saved ops the first run kept: a checkpointed \
             function must run the same ops when run again"
        );
    }
    r
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The output of the op `op`, computed by `f`: kept when a checkpointed block's policy
/// saves `op` (first run), taken from what was kept instead of computed (recomputation),
/// computed otherwise. The ops of [`CheckpointPolicy::SAVABLE`] compute their outputs
/// through it.
///
/// `len` is the output's element count: a recomputation whose op makes another count than
/// the kept output panics naming both (the op ran on other shapes).
pub(crate) fn computed<T: Clone + Send + Sync + 'static>(op: &'static str, len: usize, f: impl FnOnce() -> T) -> T {
    let ctx = CONTEXT.with(|c| c.borrow().clone());
    let Some(ctx) = ctx.filter(|c| c.policy.saves(op)) else { return f() };
    match ctx.mode {
        Mode::Record(kept) => {
            let v = f();
            lock(&kept).values.push((op, len, Box::new(v.clone())));
            v
        }
        Mode::Replay(kept, cursor) => {
            let mut i = lock(&cursor);
            let kept = lock(&kept);
            let Some((name, kept_len, value)) = kept.values.get(*i) else {
                panic!(
                    "checkpoint: the recomputation ran `{op}` after the {} saved ops the first run kept: a \
                     checkpointed function must run the same ops when run again",
                    kept.values.len()
                )
            };
            let Some(v) = value.downcast_ref::<T>().filter(|_| *name == op) else {
                panic!(
                    "checkpoint: the recomputation ran `{op}` where the first run kept the output of `{name}` (saved op \
                     {} of {}): a checkpointed function must run the same ops when run again",
                    *i + 1,
                    kept.values.len()
                )
            };
            if *kept_len != len {
                panic!(
                    "checkpoint: the recomputation's `{op}` makes {len} elements where the first run's made {kept_len}: \
                     a checkpointed function must compute the same shapes when run again"
                );
            }
            *i += 1;
            REPLAYED.with(|r| r.set(r.get() + 1));
            v.clone()
        }
    }
}

thread_local! {
    /// Kept outputs taken by recomputations on this thread (for the tests).
    static REPLAYED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many kept outputs recomputations on the calling thread have taken so far.
#[cfg(test)]
pub(crate) fn replayed() -> u64 {
    REPLAYED.with(std::cell::Cell::get)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::{replayed, CheckpointPolicy};
    use crate::grad_checkpoint::{checkpoint, checkpoint_with};
    use crate::ops::AttentionConfig;
    use crate::{manual_seed, Tensor};

    /// A block with every savable op and elementwise ops between them.
    fn block(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
        let h = crate::functional::linear(x, w, Some(b)).tanh(); // linear
        let q = h.matmul(&w.t()).gelu(); // matmul
        let q4 = q.reshape(&[1, 2, 3, 4]);
        let a = Tensor::scaled_dot_product_attention(&q4, &q4, &q4, &AttentionConfig::default()); // attention
        b.addmm(&a.reshape(&[6, 4]), w).sigmoid() // addmm
    }

    fn grads(policy: Option<CheckpointPolicy>) -> (Vec<f32>, Vec<f32>, Vec<f32>, u64) {
        manual_seed(3);
        let x = Tensor::randn(&[6, 4]).requires_grad_(true);
        let w = Tensor::randn(&[4, 4]).requires_grad_(true);
        let b = Tensor::randn(&[4]).requires_grad_(true);
        let (xc, wc, bc) = (x.clone(), w.clone(), b.clone());
        let before = replayed();
        let y = match policy {
            None => block(&x, &w, &b),
            Some(p) => checkpoint_with(p, move || block(&xc, &wc, &bc)),
        };
        (y.square().sum()).backward();
        let taken = replayed() - before;
        (x.grad().unwrap().to_vec(), w.grad().unwrap().to_vec(), b.grad().unwrap().to_vec(), taken)
    }

    #[test]
    fn a_selective_checkpoint_takes_the_kept_outputs_and_gives_the_plain_gradients_bit_for_bit() {
        let (px, pw, pb, _) = grads(None);
        let (sx, sw, sb, taken) = grads(Some(CheckpointPolicy::save_matmuls_and_attention()));
        assert_eq!((&px, &pw, &pb), (&sx, &sw, &sb));
        assert_eq!(taken, 4, "linear, matmul, attention and addmm are taken, not recomputed");
        let (fx, fw, fb, taken) = grads(Some(CheckpointPolicy::recompute_all()));
        assert_eq!((&px, &pw, &pb), (&fx, &fw, &fb));
        assert_eq!(taken, 0);
        let (mx, mw, mb, taken) = grads(Some(CheckpointPolicy::save(&[crate::names::MATMUL])));
        assert_eq!((&px, &pw, &pb), (&mx, &mw, &mb));
        assert_eq!(taken, 1, "only the matmul");
    }

    #[test]
    fn a_recomputation_that_runs_other_ops_panics_naming_them() {
        let x = Tensor::randn(&[3, 3]).requires_grad_(true);
        let again = Arc::new(AtomicBool::new(false));
        let (xc, flag) = (x.clone(), again.clone());
        let y = checkpoint_with(CheckpointPolicy::save_matmuls_and_attention(), move || {
            if flag.swap(true, Ordering::SeqCst) {
                xc.matmul(&xc).tanh() // the recomputation: one product
            } else {
                xc.matmul(&xc).matmul(&xc).tanh() // the first run: two
            }
        });
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| y.sum().backward())).unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("ran 1 of the 2 saved ops"), "{msg}");
    }

    #[test]
    fn a_policy_naming_an_op_it_cannot_keep_is_refused() {
        let err = std::panic::catch_unwind(|| CheckpointPolicy::save(&["tanh"])).unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("`tanh` is not an op whose output a checkpoint can keep"), "{msg}");
        assert_eq!(CheckpointPolicy::default(), CheckpointPolicy::recompute_all());
        // Plain `checkpoint` keeps nothing.
        let x = Tensor::randn(&[2, 2]).requires_grad_(true);
        let xc = x.clone();
        let before = replayed();
        checkpoint(move || xc.matmul(&xc)).sum().backward();
        assert_eq!(replayed(), before);
    }
}
