//! The [`Tensor`] handle: shared storage, an immutable strided layout, and autograd state.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::autograd::hooks::GradHooks;
use crate::autograd::Node;
use crate::backend::Storage;
use crate::shape::Layout;

/// A unique tensor identity. Graph bookkeeping keys on ids, never on values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(u64);

static NEXT_TENSOR_ID: AtomicU64 = AtomicU64::new(1);

impl TensorId {
    fn next() -> Self {
        TensorId(NEXT_TENSOR_ID.fetch_add(1, Ordering::Relaxed))
    }

    /// The id the next tensor created (on any thread) will get, or a later one: every
    /// tensor created from now on has an id at least this.
    pub(crate) fn upcoming() -> Self {
        TensorId(NEXT_TENSOR_ID.load(Ordering::Relaxed))
    }
}

/// An n-dimensional array with reverse-mode autograd.
///
/// A `Tensor` is a cheap-to-clone handle (an `Arc`): clones are the *same* tensor, like two
/// Python references to one `torch.Tensor` (same id, same `.grad`, same
/// `requires_grad`). Views (`transpose`, `permute`, `narrow`, `expand`, `reshape` of a
/// contiguous tensor) share the storage buffer and only change the layout.
///
/// As in PyTorch, views and [`detach`](Tensor::detach)ed copies are *aliases*: an in-place
/// update ([`copy_`](Tensor::copy_), [`add_`](Tensor::add_), `+=`, ...) through any of them
/// is seen by the tensor and all its other aliases (`w.narrow(0, 0, 2).fill_(1.0)` fills
/// the first two rows of `w`; with `w` a parameter, inside `no_grad`). A separate copy is [`copy`](Tensor::copy) (PyTorch's
/// `clone()`); Rust's `clone()` is another handle on the same tensor.
///
/// Values saved for backward are not aliases: a later in-place update copies the buffer
/// first (copy-on-write), so backward uses the values of the forward. Where PyTorch raises
/// a version-counter error when a saved value was modified, here the gradient is the
/// forward's. (A tensor that [shares its storage with its
/// views](Tensor::share_storage_with_views) opts out: its saved values read its buffer as
/// it is then, whose replacement by `set_data` they follow; an in-place write between
/// forward and backward makes backward panic, as PyTorch's version counter.)
///
/// ```
/// use nn_core::Tensor;
/// let w = Tensor::zeros(&[3, 2]);
/// w.narrow(0, 1, 1).fill_(1.0); // a view writes through
/// w.detach().t().add_(2.0); // so does a detached copy, and a view of it
/// assert_eq!(w.to_vec(), [2.0, 2.0, 3.0, 3.0, 2.0, 2.0]);
/// let copy = w.copy();
/// copy.zero_();
/// assert_eq!(w.sum().item(), 14.0);
/// ```
///
/// Values are row-major; the default dtype is `f32`.
///
/// ```
/// use nn_core::Tensor;
/// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
/// assert_eq!(x.shape(), &[2, 3]);
/// let t = x.t(); // a view: no copy
/// assert_eq!(t.shape(), &[3, 2]);
/// assert_eq!(t.to_vec(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
/// ```
#[derive(Clone)]
pub struct Tensor(pub(crate) Arc<TensorImpl>);

pub(crate) struct TensorImpl {
    pub(crate) id: TensorId,
    pub(crate) layout: Layout,
    /// The slot holding the buffer, shared with this tensor's aliases (its views and
    /// detached copies, and the tensor it is an alias of), so an in-place write through any
    /// of them is seen by all. Behind a lock because [`Tensor::set_data`] moves this one
    /// tensor to a new slot (its aliases keep the old buffer, as after PyTorch's
    /// `t.data = src`).
    pub(crate) storage: RwLock<Arc<StorageSlot>>,
    pub(crate) grad_fn: Option<Arc<Node>>,
    pub(crate) requires_grad: AtomicBool,
    pub(crate) grad: Mutex<Option<Tensor>>,
    /// Post-accumulate-grad hooks (leaves only; see `autograd::hooks`).
    pub(crate) grad_hooks: GradHooks,
    /// For a value saved for backward that reads a shared slot: the slot's version when it
    /// was saved (reading it after an in-place write panics, as PyTorch's "modified by an
    /// inplace operation").
    pub(crate) saved_version: Option<u64>,
}

/// Where a tensor's buffer lives. A tensor and its aliases (views, detached copies) read
/// one slot, so an in-place write through any of them replaces the buffer for all. Values
/// saved for backward and snapshots hold the buffer itself, not the slot, so a later write
/// copies the buffer first and leaves them as they were (copy-on-write) — except for a
/// tensor that [shares its storage with its views](Tensor::share_storage_with_views),
/// whose saved values read the slot too, and whose [`Tensor::set_data`] replaces the
/// buffer in the slot for all of them.
pub(crate) struct StorageSlot {
    pub(crate) value: RwLock<Arc<Storage>>,
    /// Values saved for backward made from now on read this slot instead of taking a
    /// handle on the buffer, and `set_data` replaces the buffer in it.
    pub(crate) shared: AtomicBool,
    /// The tensor that made the slot shared: the only one whose `set_data` may replace the
    /// buffer (a view's layout says nothing about the rest of it). 0: none yet.
    pub(crate) owner: AtomicU64,
    /// In-place writes so far (PyTorch's version counter): a value saved for backward that
    /// reads this slot ([`Tensor::saved_for_backward`] of a tensor sharing its storage with its views)
    /// records it, and refuses to be read after another write.
    pub(crate) version: AtomicU64,
}

impl StorageSlot {
    pub(crate) fn new(storage: Arc<Storage>) -> Arc<StorageSlot> {
        Arc::new(StorageSlot {
            value: RwLock::new(storage),
            shared: AtomicBool::new(false),
            owner: AtomicU64::new(0),
            version: AtomicU64::new(0),
        })
    }

    pub(crate) fn get(&self) -> Arc<Storage> {
        self.value.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

mod construct;
mod grad;
mod print;
mod random;
#[cfg(test)]
mod tests;
mod values;
mod write;
