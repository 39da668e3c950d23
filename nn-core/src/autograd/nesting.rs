//! The nesting of scope guards ([`NoGradGuard`](crate::NoGradGuard),
//! [`InferenceModeGuard`](crate::InferenceModeGuard), [`AutocastGuard`](crate::amp::AutocastGuard)):
//! each restores the setting it found, which is right only when guards drop innermost
//! first, on the thread that made them. A guard moved to another thread (or held across an
//! `.await` on a multi-threaded runtime) would restore that thread's setting and leave its
//! own changed; two guards dropped in the order they were made would leave the outer
//! guard's setting on. Both would go unnoticed, so both are refused: the guards are not
//! `Send` (a compile error), and a guard dropped out of order panics, naming the scope (and
//! restores its setting once the guards opened after it have dropped, so a caught panic
//! leaves the thread's settings as they were).

use std::cell::Cell;
use std::marker::PhantomData;
use std::thread::LocalKey;

/// A guard's place among the open guards of one kind on its thread.
pub(crate) struct Nesting {
    depth: &'static LocalKey<Cell<u32>>,
    level: u32,
    what: &'static str,
    /// Not `Send` or `Sync`: the setting a guard restores is its thread's.
    _thread: PhantomData<*const ()>,
}

impl Nesting {
    /// One more open guard of the kind counted by `depth` (`what` names it in panics).
    pub(crate) fn enter(depth: &'static LocalKey<Cell<u32>>, what: &'static str) -> Nesting {
        let level = depth.with(|d| {
            let level = d.get() + 1;
            d.set(level);
            level
        });
        Nesting { depth, level, what, _thread: PhantomData }
    }

    /// Called in the guard's `drop` with `restore`, which puts back the setting the guard
    /// found; runs it now when the guard is the innermost open one, and then the restores
    /// of outer guards that were dropped out of order before it, innermost first. Out of
    /// order, `restore` waits for the guards made after this one: when they have dropped,
    /// the thread is as it was before this guard, so a caught panic (a thread pool's)
    /// leaves no setting changed behind it.
    ///
    /// # Panics
    /// When a guard made after this one is still open (guards dropped out of order),
    /// unless the thread is already unwinding (locals can drop out of order then).
    pub(crate) fn exit(&self, restore: impl FnOnce() + 'static) {
        if let Some(message) = self.leave(restore) {
            panic!("{message}");
        }
    }

    /// [`exit`](Nesting::exit) without the panic: the message it would panic with, for a
    /// guard that leaves two scopes and must register both before panicking.
    pub(crate) fn leave(&self, restore: impl FnOnce() + 'static) -> Option<String> {
        let kind = self.depth as *const LocalKey<Cell<u32>> as usize;
        let open = self.depth.with(Cell::get);
        if open == self.level {
            restore();
            let mut depth = self.level - 1;
            ABANDONED.with(|a| {
                let mut a = a.borrow_mut();
                while let Some(i) = a.iter().rposition(|(k, level, _)| *k == kind && *level == depth && depth > 0) {
                    let (_, _, outer) = a.remove(i);
                    outer();
                    depth -= 1;
                }
            });
            self.depth.with(|d| d.set(depth));
            return None;
        }
        // Out of order: the setting is left as it is until the inner guards still open
        // have dropped (they restore theirs first); the count too, so those drop without a
        // second panic. While unwinding (the inner guards drop after this one, as locals
        // declared later can), the same, without a second panic.
        ABANDONED.with(|a| a.borrow_mut().push((kind, self.level, Box::new(restore))));
        (!std::thread::panicking()).then(|| {
            format!(
                "{} guards dropped out of order: this one was scope {} of {open} open on this thread; drop guards \
                 innermost first (or use the closure form), or the setting an outer guard restores is wrong",
                self.what, self.level
            )
        })
    }
}

/// A restore waiting for the guards opened after its own to drop.
type Abandoned = (usize, u32, Box<dyn FnOnce()>);

thread_local! {
    /// The guards dropped out of order on this thread: (kind, level, restore).
    static ABANDONED: std::cell::RefCell<Vec<Abandoned>> = const { std::cell::RefCell::new(Vec::new()) };
}
