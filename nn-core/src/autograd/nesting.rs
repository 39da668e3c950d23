//! The nesting of scope guards ([`NoGradGuard`](crate::NoGradGuard),
//! [`InferenceModeGuard`](crate::InferenceModeGuard), [`AutocastGuard`](crate::amp::AutocastGuard)):
//! each restores the setting it found, which is right only when guards drop innermost
//! first, on the thread that made them. A guard moved to another thread (or held across an
//! `.await` on a multi-threaded runtime) would restore that thread's setting and leave its
//! own changed; two guards dropped in the order they were made would leave the outer
//! guard's setting on. Both would go unnoticed, so both are refused: the guards are not
//! `Send` (a compile error), and a guard dropped out of order panics, naming the scope.

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

    /// Called first in the guard's `drop`, before it restores its setting.
    ///
    /// # Panics
    /// When a guard made after this one is still open (guards dropped out of order),
    /// unless the thread is already panicking.
    pub(crate) fn exit(&self) {
        let open = self.depth.with(Cell::get);
        if open == self.level || std::thread::panicking() {
            self.depth.with(|d| d.set(self.level - 1));
        } else {
            // The setting is left as it is (the inner guards still open restore theirs);
            // the count too, so those drop without a second panic.
            panic!(
                "{} guards dropped out of order: this one was scope {} of {open} open on this thread; \
                 drop guards innermost first (or use the closure form), or the setting an outer guard \
                 restores is wrong",
                self.what, self.level
            );
        }
    }
}
