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
/// In-place updates ([`copy_`](Tensor::copy_), [`add_`](Tensor::add_), ...) are
/// copy-on-write at the buffer level: they never write through into the buffer of another
/// handle (a view, or a value saved for backward). Where PyTorch raises a version-counter
/// error when a saved value was modified, here the saved value simply stays what it was.
/// (A tensor that [shares its storage with its views](Tensor::share_storage_with_views)
/// opts out: its views and saved values read its buffer as it is now.)
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
    /// The buffer, behind a slot that views and saved copies share only when the tensor
    /// asked for it ([`Tensor::share_storage_with_views`]).
    pub(crate) storage: Arc<StorageSlot>,
    pub(crate) grad_fn: Option<Arc<Node>>,
    pub(crate) requires_grad: AtomicBool,
    pub(crate) grad: Mutex<Option<Tensor>>,
    /// Post-accumulate-grad hooks (leaves only; see `autograd::hooks`).
    pub(crate) grad_hooks: GradHooks,
}

/// Where a tensor's buffer lives. Every tensor has its own slot, except views and
/// detached copies of a tensor that shares its slot
/// ([`Tensor::share_storage_with_views`]): those read the same one, so replacing the
/// buffer ([`Tensor::set_data`]) replaces it for all of them.
pub(crate) struct StorageSlot {
    pub(crate) value: RwLock<Arc<Storage>>,
    /// Views, detached copies and values saved for backward made from now on share this
    /// slot instead of taking a handle on the buffer.
    pub(crate) shared: AtomicBool,
    /// The tensor that made the slot shared: the only one whose `set_data` may replace the
    /// buffer (a view's layout says nothing about the rest of it). 0: none yet.
    pub(crate) owner: AtomicU64,
}

impl StorageSlot {
    pub(crate) fn new(storage: Arc<Storage>) -> Arc<StorageSlot> {
        Arc::new(StorageSlot { value: RwLock::new(storage), shared: AtomicBool::new(false), owner: AtomicU64::new(0) })
    }

    pub(crate) fn get(&self) -> Arc<Storage> {
        self.value.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

mod construct;
mod grad;
mod print;
#[cfg(test)]
mod tests;
mod values;
mod write;
