//! [`ReduceOp`], the reductions of [`ProcessGroup::all_reduce`](crate::ProcessGroup::all_reduce).
//!
//! A module of its own, depending on nothing in the crate: the communication thread
//! (`comm`) runs the reductions and the `watchdog` fingerprints them, and `comm` depends on
//! `watchdog`, never the other way round.

/// A reduction of [`ProcessGroup::all_reduce`](crate::ProcessGroup::all_reduce) (PyTorch's
/// `dist.ReduceOp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Element-wise sum.
    Sum,
    /// Element-wise product.
    Product,
    /// Element-wise minimum.
    Min,
    /// Element-wise maximum.
    Max,
    /// Element-wise mean over the ranks (the sum divided by the world size; floating-point
    /// tensors only).
    Avg,
}
