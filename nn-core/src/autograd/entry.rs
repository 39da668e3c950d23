//! The one entry of every public op: what an op does before its kernel, in one order.
//!
//! [`enter`] (and the [`op_entry!`] macro over it, which returns early) runs, in this order:
//! 1. **Autocast** ([`amp`](crate::amp)): under an active scope for the arguments' device, an
//!    op the autocast tables list has its floating arguments cast by its policy and runs
//!    again on them ([`Entered::Done`], the op's result), with autocast excluded so that its
//!    parts do not cast again. The tables and the op name the op by one constant of
//!    [`names`](crate::names).
//! 2. **The trace frame** ([`trace`](crate::trace)): the outermost op open is what a trace
//!    records, with its inputs and attributes; the ops it calls are its parts.
//! 3. **The inside-an-op mark**: while the op runs ([`Running`] is held), the ops it calls
//!    are not cast by autocast.
//!
//! Then the op's body checks its operands (dtype, device, shape), runs its kernel through the
//! backend, and records its backward with `autograd::op_result`. PyTorch's dispatcher keeps
//! the same order (autocast, tracer, autograd, backend).
//!
//! The generic runners (`binary`, `unary`, `compare`) enter here for every op they run, so an
//! elementwise op writes no prologue of its own; the elementwise binary ops apply PyTorch's
//! type promotion (`ops::promotion`) after they enter, inside autocast and outside it.

use crate::autograd::autocast;
use crate::autograd::trace::{self, Attr, OpScope};
use crate::tensor::Tensor;

/// What [`enter`] decided.
pub(crate) enum Entered<R> {
    /// Autocast ran the op on its cast arguments: this is the op's result.
    Done(R),
    /// Run the op, holding this until it returns.
    Run(Running),
}

/// Held while an op runs: its trace frame and its inside-an-op mark, closed on drop.
#[must_use = "the op's trace frame closes when this is dropped"]
pub(crate) struct Running {
    _scope: Option<OpScope>,
    /// The mark of a composite op without a trace frame ([`enter_untraced`]); a traced
    /// op's frame holds its own.
    _parts: Option<autocast::InsideOp>,
}

impl Running {
    fn traced(scope: Option<OpScope>) -> Self {
        Running { _scope: scope, _parts: None }
    }
}

/// Enters the op `name` with its tensor `inputs` and `optional` ones (a bias; recorded
/// after the inputs when present): autocast first (`again` runs the op on the cast
/// arguments, in the order `inputs` then `optional`), then the trace frame with `attrs`
/// (built only when a trace records this op), then the inside-an-op mark.
#[inline]
pub(crate) fn enter<R>(
    name: &'static str,
    inputs: &[&Tensor],
    optional: &[Option<&Tensor>],
    attrs: impl FnOnce() -> Vec<(&'static str, Attr)>,
    again: impl FnOnce(&[Option<&Tensor>]) -> R,
) -> Entered<R> {
    if autocast::autocast_might_apply() {
        let args: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).chain(optional.iter().copied()).collect();
        if let Some(y) = autocast::cast_call(name, &args, again) {
            return Entered::Done(y);
        }
    }
    Entered::Run(Running::traced(trace::op_with(name, inputs, optional, attrs)))
}

/// [`enter`] for an op the autocast tables do not list, which so never runs again on cast
/// arguments: the trace frame and the inside-an-op mark.
///
/// # Panics
/// In debug builds, when the tables do list `name` on either device kind: that op must
/// enter with a way to run again (`again`), or autocast would silently not cast it.
#[inline]
pub(crate) fn enter_uncast(
    name: &'static str,
    inputs: &[&Tensor],
    optional: &[Option<&Tensor>],
    attrs: impl FnOnce() -> Vec<(&'static str, Attr)>,
) -> Running {
    debug_assert!(
        autocast::policy(crate::Device::Cpu, name).is_none() && autocast::policy(crate::Device::Gpu(0), name).is_none(),
        "{name}: listed in the autocast tables, so its entry needs `again` (the op run on cast arguments)"
    );
    Running::traced(trace::op_with(name, inputs, optional, attrs))
}

/// [`enter`] for a composite op that opens no trace frame of its own (a trace records the
/// ops it is built from, `group_norm` as means and products): autocast on `args`, then the
/// inside-an-op mark, so that its parts are not cast again.
#[inline]
pub(crate) fn enter_untraced<R>(
    name: &'static str,
    args: &[Option<&Tensor>],
    again: impl FnOnce(&[Option<&Tensor>]) -> R,
) -> Entered<R> {
    cast_or_mark(name, args, again, autocast::inside_op)
}

/// The untraced entries' shared order: autocast on `args` (the op's result when it ran),
/// else the inside-an-op mark that `mark` makes.
#[inline]
fn cast_or_mark<R>(
    name: &'static str,
    args: &[Option<&Tensor>],
    again: impl FnOnce(&[Option<&Tensor>]) -> R,
    mark: impl FnOnce() -> Option<autocast::InsideOp>,
) -> Entered<R> {
    if autocast::autocast_might_apply() {
        if let Some(y) = autocast::cast_call(name, args, again) {
            return Entered::Done(y);
        }
    }
    Entered::Run(Running { _scope: None, _parts: mark() })
}

/// [`enter_untraced`] for a composite op that is one op to autocast only on the device
/// kinds whose table lists it (`einsum`: listed on the GPU; on the CPU its matrix products
/// are cast as PyTorch's `bmm` inside it is): the inside-an-op mark only where listed.
#[inline]
pub(crate) fn enter_untraced_where_listed<R>(
    name: &'static str,
    device: crate::Device,
    args: &[Option<&Tensor>],
    again: impl FnOnce(&[Option<&Tensor>]) -> R,
) -> Entered<R> {
    cast_or_mark(name, args, again, || autocast::inside_listed_op(name, device))
}

/// [`enter_untraced`] for a composite op the autocast tables do not list (`mean`, `var`):
/// the inside-an-op mark alone, so that its parts run in the dtype it chose.
///
/// # Panics
/// In debug builds, when the tables do list `name` (see [`enter_uncast`]).
#[inline]
pub(crate) fn enter_parts(name: &'static str) -> Running {
    debug_assert!(
        autocast::policy(crate::Device::Cpu, name).is_none() && autocast::policy(crate::Device::Gpu(0), name).is_none(),
        "{name}: listed in the autocast tables, so its entry needs `again` (the op run on cast arguments)"
    );
    Running { _scope: None, _parts: autocast::inside_op() }
}

/// `let _op = op_entry!(NAME, [inputs..] (; [optional..])?, attrs = .., again = ..);`:
/// [`enter`], returning the op's result from the calling function when autocast ran it.
/// Without `again`, [`enter_uncast`]. The `untraced` forms are [`enter_untraced`] (its
/// arguments listed, or a slice as `args = ..`), [`enter_untraced_where_listed`]
/// (`untraced where_listed NAME, device, ..`) and, without `again`, [`enter_parts`].
macro_rules! op_entry {
    (untraced $name:expr) => {
        $crate::autograd::entry::enter_parts($name)
    };
    (untraced $name:expr, [$($x:expr),+], again = $again:expr) => {
        $crate::autograd::entry::op_entry!(untraced $name, args = &[$($x),+], again = $again)
    };
    (untraced $name:expr, args = $args:expr, again = $again:expr) => {
        match $crate::autograd::entry::enter_untraced($name, $args, $again) {
            $crate::autograd::entry::Entered::Done(y) => return y,
            $crate::autograd::entry::Entered::Run(running) => running,
        }
    };
    (untraced where_listed $name:expr, $device:expr, args = $args:expr, again = $again:expr) => {
        match $crate::autograd::entry::enter_untraced_where_listed($name, $device, $args, $again) {
            $crate::autograd::entry::Entered::Done(y) => return y,
            $crate::autograd::entry::Entered::Run(running) => running,
        }
    };
    ($name:expr, [$($x:expr),+] $(; [$($o:expr),*])?, attrs = $attrs:expr) => {
        $crate::autograd::entry::enter_uncast($name, &[$($x),+], &[$($($o),*)?], $attrs)
    };
    ($name:expr, [$($x:expr),+] $(; [$($o:expr),*])?, attrs = $attrs:expr, again = $again:expr) => {
        match $crate::autograd::entry::enter($name, &[$($x),+], &[$($($o),*)?], $attrs, $again) {
            $crate::autograd::entry::Entered::Done(y) => return y,
            $crate::autograd::entry::Entered::Run(running) => running,
        }
    };
}
pub(crate) use op_entry;
