//! The outputs a selectively checkpointed block keeps ([`crate::grad_checkpoint::CheckpointPolicy`]):
//! recorded by the ops that can keep theirs on the block's first run, taken by the same ops
//! on its recomputation instead of running their kernels. A recomputation that runs other
//! ops, fewer or more of them, or makes outputs of other sizes panics naming them.
//!
//! It lives beside the graph (not in `grad_checkpoint`) because the ops call it: the
//! checkpoint module sits above the ops, and this sits below them.

use std::any::Any;
use std::cell::RefCell;
use std::sync::{Arc, Mutex};

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
    /// The ops whose outputs are kept.
    save: Arc<[&'static str]>,
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

/// Runs `f` as a checkpointed block's first run keeping the outputs of the ops `save`,
/// returning what it kept.
pub(crate) fn record<R>(save: &[&'static str], f: impl FnOnce() -> R) -> (R, Arc<Mutex<Kept>>) {
    let kept = Arc::new(Mutex::new(Kept::default()));
    let ctx = (!save.is_empty()).then(|| Context { save: save.into(), mode: Mode::Record(kept.clone()) });
    let _scope = Scope::enter(ctx);
    (f(), kept)
}

/// Runs `f` as the recomputation of a block whose first run kept `kept`.
///
/// # Panics
/// When the recomputation took fewer of the kept outputs than the first run kept.
pub(crate) fn replay<R>(save: &[&'static str], kept: &Arc<Mutex<Kept>>, f: impl FnOnce() -> R) -> R {
    let total = lock(kept).len();
    if total == 0 {
        let _scope = Scope::enter(None);
        return f();
    }
    let cursor = Arc::new(Mutex::new(0));
    let ctx = Context { save: save.into(), mode: Mode::Replay(kept.clone(), cursor.clone()) };
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
/// computed otherwise. The ops of `CheckpointPolicy::SAVABLE` compute their outputs
/// through it.
///
/// `len` is the output's element count: a recomputation whose op makes another count than
/// the kept output panics naming both (the op ran on other shapes).
pub(crate) fn computed<T: Clone + Send + Sync + 'static>(op: &'static str, len: usize, f: impl FnOnce() -> T) -> T {
    let ctx = CONTEXT.with(|c| c.borrow().clone());
    let Some(ctx) = ctx.filter(|c| c.save.contains(&op)) else { return f() };
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
