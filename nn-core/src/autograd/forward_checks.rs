//! Which module forwards are running on this thread, and the two silent failures of the
//! PyTorch production guide that this makes loud:
//!
//! - **A parameter created inside a forward** (a layer built in `compute`): each call
//!   draws fresh random weights that no optimizer holds, and the model learns nothing.
//!   `Parameter::new` while a forward runs is reported at its call site.
//! - **A host read inside a training forward** (`to_vec`, `item` of a tensor that requires
//!   grad): a tensor rebuilt from the values is cut from the graph, so no gradient flows
//!   back through it. Reported at the read's call site.
//!
//! How each is reported is a [`Report`]: [`Report::Panic`] (a panic naming the module,
//! the call site and what to write instead) or [`Report::Warn`] (the same text on stderr,
//! once per call site and module). The defaults ([`ForwardChecks::default`]): a parameter created in a
//! forward panics in debug builds and warns in release builds; a host read warns (reading
//! a value to log it is common and harmless; `.detach()` first says so and silences it).
//! There is no setting that turns a check off: a bug this guide calls the costliest is
//! never silent. [`set_forward_checks`] changes the process's setting,
//! [`with_forward_checks`] a scope's on this thread.
//!
//! Lazy modules build their layer on the first forward on purpose; they do it inside
//! [`allow_new_parameters`].

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::panic::Location;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use crate::tensor::Tensor;

/// How a check reports what it finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// A panic naming the module, the call site and the fix.
    Panic,
    /// The same message on stderr, once per call site and module for the process.
    Warn,
}

/// How each forward check reports (see the [module docs](crate::module::forward_checks)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardChecks {
    /// A `Parameter` created while a module's forward runs.
    pub new_parameter: Report,
    /// A host read (`to_vec`, `item`, ...) of a tensor that requires grad inside a training
    /// forward, with grad mode on.
    pub host_read: Report,
}

impl Default for ForwardChecks {
    /// A new parameter panics in debug builds and warns in release builds; a host read warns.
    fn default() -> Self {
        ForwardChecks {
            new_parameter: if cfg!(debug_assertions) { Report::Panic } else { Report::Warn },
            host_read: Report::Warn,
        }
    }
}

/// The process's setting: 0 while the default holds, else `1 + new_parameter * 2 + host_read`
/// with `Panic` = 1.
static GLOBAL: AtomicU8 = AtomicU8::new(0);

fn encode(c: ForwardChecks) -> u8 {
    1 + 2 * u8::from(c.new_parameter == Report::Panic) + u8::from(c.host_read == Report::Panic)
}

fn decode(v: u8) -> ForwardChecks {
    if v == 0 {
        return ForwardChecks::default();
    }
    let r = |panic: bool| if panic { Report::Panic } else { Report::Warn };
    ForwardChecks { new_parameter: r((v - 1) & 2 != 0), host_read: r((v - 1) & 1 != 0) }
}

/// Sets how the forward checks report, for every thread (a scope's
/// [`with_forward_checks`] wins on its thread).
pub fn set_forward_checks(checks: ForwardChecks) {
    GLOBAL.store(encode(checks), Ordering::Relaxed);
}

/// The setting in force on this thread.
pub fn forward_checks() -> ForwardChecks {
    SCOPED.with(Cell::get).unwrap_or_else(|| decode(GLOBAL.load(Ordering::Relaxed)))
}

/// Runs `f` with `checks` in force on this thread (tests use it to make a check panic).
///
/// ```
/// use nn_core::module::forward_checks::{with_forward_checks, ForwardChecks, Report};
/// let strict = ForwardChecks { new_parameter: Report::Panic, host_read: Report::Panic };
/// assert_eq!(with_forward_checks(strict, nn_core::module::forward_checks::forward_checks), strict);
/// ```
pub fn with_forward_checks<R>(checks: ForwardChecks, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<ForwardChecks>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SCOPED.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SCOPED.with(|s| s.replace(Some(checks))));
    f()
}

/// Runs `f` with parameter creation allowed inside the forward that is running: what a
/// lazy module does when it builds its layer on the first call.
pub fn allow_new_parameters<R>(f: impl FnOnce() -> R) -> R {
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            ALLOW.with(|a| a.set(a.get() - 1));
        }
    }
    ALLOW.with(|a| a.set(a.get() + 1));
    let _restore = Restore;
    f()
}

/// One module forward running on this thread.
#[derive(Clone, Copy)]
struct Frame {
    type_name: &'static str,
    training: bool,
}

thread_local! {
    static FRAMES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
    static SCOPED: Cell<Option<ForwardChecks>> = const { Cell::new(None) };
    static ALLOW: Cell<u32> = const { Cell::new(0) };
}

/// The guard of a running forward: pops its frame when dropped (unwinding included).
pub(crate) struct Running(());

impl Drop for Running {
    fn drop(&mut self) {
        FRAMES.with(|f| {
            f.borrow_mut().pop();
        });
    }
}

/// Marks the forward of a module of type `type_name` as running until the guard drops.
pub(crate) fn enter(type_name: &'static str, training: bool) -> Running {
    FRAMES.with(|f| f.borrow_mut().push(Frame { type_name, training }));
    Running(())
}

/// The innermost running forward, if any.
fn innermost() -> Option<Frame> {
    FRAMES.with(|f| f.borrow().last().copied())
}

/// Whether this call site, in this module's forward, was already warned about. The module
/// is part of the key because the site of a `Parameter::new` is often a layer's
/// constructor (`Linear::new`), shared by every module that builds one.
fn warned(module: &'static str, at: &'static Location<'static>) -> bool {
    type Site = (&'static str, &'static str, u32, u32);
    static SEEN: Mutex<Option<HashSet<Site>>> = Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    !seen.get_or_insert_with(HashSet::new).insert((module, at.file(), at.line(), at.column()))
}

fn report(how: Report, module: &'static str, at: &'static Location<'static>, message: String) {
    match how {
        Report::Panic => panic!("{message}"),
        Report::Warn => {
            if !warned(module, at) {
                eprintln!("warning: {message} (reported once for this call site in this module)");
            }
        }
    }
}

/// Reports a `Parameter` created at `at` while a module's forward runs.
pub(crate) fn check_new_parameter(at: &'static Location<'static>) {
    let Some(frame) = innermost() else { return };
    if ALLOW.with(Cell::get) > 0 {
        return;
    }
    report(
        forward_checks().new_parameter,
        frame.type_name,
        at,
        format!(
            "a `Parameter` was created at {at} while the forward of `{}` was running: a layer built inside \
             `compute` gets fresh random weights on every call, which no optimizer holds, so the model learns \
             nothing; build the layer in the module's constructor and keep it in a `#[module]` field",
            frame.type_name
        ),
    );
}

/// Reports a host read (`op`) at `at` of `t` inside a training forward.
pub(crate) fn check_host_read(t: &Tensor, op: &str, at: &'static Location<'static>) {
    if !t.requires_grad() {
        return;
    }
    let Some(frame) = innermost().filter(|f| f.training) else { return };
    if !crate::autograd::is_grad_enabled() {
        return;
    }
    report(
        forward_checks().host_read,
        frame.type_name,
        at,
        format!(
            "`{op}` at {at} reads a tensor that requires grad (shape {:?}) to the host inside the training forward \
             of `{}`: a tensor rebuilt from these values is cut from the graph, and no gradient flows back through \
             it; keep the computation in tensor ops, or call `.detach()` first when the read is only to log the value",
            t.shape(),
            frame.type_name
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip() {
        for np in [Report::Panic, Report::Warn] {
            for hr in [Report::Panic, Report::Warn] {
                let c = ForwardChecks { new_parameter: np, host_read: hr };
                assert_eq!(decode(encode(c)), c);
            }
        }
        assert_eq!(decode(0), ForwardChecks::default());
    }

    #[test]
    fn frames_pop_on_unwind() {
        let r = std::panic::catch_unwind(|| {
            let _g = enter("M", true);
            panic!("inside");
        });
        assert!(r.is_err());
        assert!(innermost().is_none());
    }
}
