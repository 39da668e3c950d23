//! Copies, dtype and device conversions, and in-place writes into storage.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::autograd::{is_grad_enabled, op_result, Grads};
use crate::backend::Storage;
use crate::device::Device;
use crate::dtype::DType;
use crate::shape::Layout;

use super::{StorageSlot, Tensor};

impl Tensor {
    /// This tensor if already contiguous, otherwise a contiguous copy (differentiable).
    ///
    /// "Already contiguous" here also asks that the tensor start at its buffer's first
    /// element and span all of it (what kernels read), so a contiguous view of part of a
    /// tensor (`x.narrow(0, 1, 2)`) comes back as a copy, where PyTorch returns the view
    /// itself: write into the view, not into its `contiguous()`.
    pub fn contiguous(&self) -> Tensor {
        if self.is_contiguous() && self.0.layout.offset() == 0 && self.storage_arc().len() == self.numel() {
            return self.clone();
        }
        let storage = self.storage_arc().gather_layout(self.layout());
        op_result("contiguous", Arc::new(storage), Layout::contiguous(self.shape()), &[self], || {
            |g: &Tensor, _: &[bool]| -> Grads { smallvec::smallvec![Some(g.clone())] }
        })
    }

    /// A copy of this tensor in a buffer of its own, differentiable (the gradient passes
    /// through): PyTorch's `x.clone()`. Rust's `clone()` is another handle on the same
    /// tensor, and [`detach`](Tensor::detach) and views are aliases, so this is what keeps
    /// values apart from later in-place updates. The copy is contiguous.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0], &[2]).requires_grad_(true);
    /// let y = x.copy();
    /// (&y * 3.0).sum().backward();
    /// assert_eq!(x.grad().unwrap().to_vec(), [3.0, 3.0]);
    /// let z = x.detach().copy();
    /// z.add_(1.0);
    /// assert_eq!((x.to_vec(), z.to_vec()), (vec![1.0, 2.0], vec![2.0, 3.0]));
    /// ```
    pub fn copy(&self) -> Tensor {
        let storage = self.storage_arc().gather_layout(self.layout());
        op_result("clone", Arc::new(storage), Layout::contiguous(self.shape()), &[self], || {
            |g: &Tensor, _: &[bool]| -> Grads { smallvec::smallvec![Some(g.clone())] }
        })
    }

    /// Converts to another dtype (differentiable between floating types; gradients are
    /// converted back).
    ///
    /// ```
    /// use nn_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1.5, -2.25], &[2]);
    /// let h = x.to_dtype(DType::BF16);
    /// assert_eq!(h.dtype(), DType::BF16);
    /// assert_eq!(h.to_dtype(DType::F32).to_vec(), vec![1.5, -2.25]);
    /// ```
    pub fn to_dtype(&self, dtype: DType) -> Tensor {
        let src = self.dtype();
        if src == dtype {
            return self.clone();
        }
        let storage = self.storage_arc().convert(self.layout(), dtype);
        // The source is an input whatever the dtypes, so the tracer follows it (an ONNX
        // `Cast`; to an integer type it would otherwise be a constant of the traced example's
        // values).
        // An integer result records no graph (`op_result`), and an integer source never
        // requires grad.
        op_result("to_dtype", Arc::new(storage), Layout::contiguous(self.shape()), &[self], || {
            move |g: &Tensor, _: &[bool]| -> Grads { smallvec::smallvec![Some(g.to_dtype(src))] }
        })
    }

    /// Moves to another device. Moving to `Meta` drops the values; moving a meta tensor to
    /// the CPU allocates zeros (its values are unspecified until loaded or initialised,
    /// like PyTorch's `to_empty`).
    pub fn to_device(&self, device: Device) -> Tensor {
        if self.device() == device {
            return self.clone();
        }
        let from = self.device();
        let storage = self.storage_arc().to_device(self.layout(), device);
        op_result("to_device", Arc::new(storage), Layout::contiguous(self.shape()), &[self], || {
            // The gradient returns to the source device; a meta source cannot hold values, so
            // there it passes through as it is (a meta round trip still delivers gradients).
            move |g: &Tensor, _: &[bool]| -> Grads {
                smallvec::smallvec![Some(if from == Device::Meta { g.clone() } else { g.to_device(from) })]
            }
        })
    }

    /// Refuses an in-place update autograd would get wrong: of a tensor that requires grad,
    /// or from a source that does (in-place updates are not recorded, so no gradient would
    /// reach it), with grad mode on; and of a layout writing one element several times.
    #[track_caller]
    pub(crate) fn check_inplace(&self, op: &str, sources: &[&Tensor]) {
        if is_grad_enabled() && self.requires_grad() {
            panic!(
                "{op}: in-place update of a tensor that requires grad; run it inside `no_grad(|| ...)` \
                 (as optimizers and init functions do)"
            );
        }
        if is_grad_enabled() {
            if let Some(src) = sources.iter().find(|t| t.requires_grad()) {
                panic!(
                    "{op}: the source (shape {:?}) requires grad, but in-place updates are not recorded by autograd, \
                     so no gradient would reach it; compute the result out of place (`&a + &b`, `Tensor::cat`, \
                     `Tensor::where_cond`, ...), or inside `no_grad(|| ...)` (or from `source.detach()`) to take \
                     its values only",
                    src.shape()
                );
            }
        }
        // PyTorch's internal-overlap check: a dim of several elements with stride 0 (an
        // `expand`ed view) would write each element many times, the last write winning.
        let l = self.layout();
        if let Some(d) = (0..l.rank()).find(|&d| l.shape()[d] > 1 && l.strides()[d] == 0) {
            panic!(
                "{op}: unsupported operation: more than one element of the written-to tensor refers to a single \
                 memory location (dim {d} of shape {:?} has stride 0, as `expand` makes); clone() the tensor before \
                 writing to it",
                self.shape()
            );
        }
    }

    /// Replaces this tensor's values (and dtype and device) with `src`'s, keeping its
    /// identity, so every handle (a module's parameter, an optimizer's copy) sees the new
    /// values: PyTorch's `param.data = src`. Shares `src`'s buffer when the layouts allow
    /// (copy-on-write: a later in-place update of either does not reach the other).
    ///
    /// As in PyTorch, this tensor leaves its aliases: views and detached copies made before
    /// keep the old values. Ops that already ran keep their own handle on the values they
    /// saved for backward, so replacing a parameter's data between a forward and its
    /// backward (even with a meta tensor, which drops the parameter's hold on its buffer)
    /// leaves that backward as it was; the buffer goes once backward has used it. The
    /// exception is a tensor that [shares its storage with its
    /// views](Tensor::share_storage_with_views): there the buffer is replaced for every
    /// view and saved value.
    ///
    /// ```
    /// use nn_core::{DType, Device, Parameter, Tensor};
    /// let w = Parameter::new(Tensor::from_vec(vec![2.0, 3.0], &[2]));
    /// let x = Tensor::from_vec(vec![5.0, 7.0], &[2]).requires_grad_(true);
    /// let y = (&x * &*w).sum();
    /// let before = w.detach();
    /// w.set_data(&Tensor::full_on(&[2], 0.0, DType::F32, Device::Meta));
    /// assert_eq!(w.device(), Device::Meta);
    /// assert_eq!(before.to_vec(), [2.0, 3.0]); // an alias made before keeps the old values
    /// y.backward();
    /// assert_eq!(x.grad().unwrap().to_vec(), [2.0, 3.0]); // the w of the forward
    /// assert_eq!(w.grad().unwrap().to_vec(), [5.0, 7.0]);
    /// ```
    ///
    /// # Panics
    /// When the shapes differ.
    #[track_caller]
    pub fn set_data(&self, src: &Tensor) {
        crate::autograd::trace::on_access_from(crate::autograd::trace::OpKind::InPlace, "set_data", self, &[src]);
        if src.shape() != self.shape() {
            panic!("set_data: source of shape {:?} for a tensor of shape {:?}", src.shape(), self.shape());
        }
        let slot = self.slot();
        let shared = slot.shared.load(Ordering::Acquire);
        if shared && slot.owner.load(Ordering::Acquire) != self.0.id.0 {
            panic!(
                "set_data: this tensor is a view of a tensor that shares its storage with its views; replace the \
                 values of that tensor instead"
            );
        }
        // The source's buffer itself when it holds just this layout's elements (a buffer
        // larger than that, a view's, is copied: the tensor owns what it reads).
        let new = if src.layout() == self.layout() && src.storage_arc().len() == src.layout().storage_span() {
            src.storage_arc()
        } else if self.is_contiguous() && self.layout().offset() == 0 {
            src.snapshot().contiguous().storage_arc()
        } else {
            // A strided leaf: rebuild a buffer in this tensor's own layout.
            let src_storage = src.storage_arc();
            let mut out = Storage::full(src.device(), src.dtype(), self.layout().storage_span(), 0.0);
            out.write_from(self.layout(), &src_storage, src.layout());
            Arc::new(out)
        };
        if shared {
            *slot.value.write().unwrap_or_else(|e| e.into_inner()) = new;
        } else {
            *self.0.storage.write().unwrap_or_else(|e| e.into_inner()) = StorageSlot::new(new);
        }
    }

    /// From now on, the values autograd saves from this tensor for backward read this
    /// tensor's buffer *slot* (as its views and detached copies always do) instead of
    /// holding the buffer itself, and [`set_data`](Tensor::set_data) on this tensor replaces
    /// the values for all of them: PyTorch's semantics when a storage is resized in place
    /// (`untyped_storage().resize_(0)`, then refilled), which FSDP uses to free gathered
    /// parameters after a module's forward and gather them again before its backward.
    /// Irreversible; `nn-distributed`'s `FullyShardedDataParallel` calls it on every
    /// parameter it shards.
    ///
    /// ```
    /// use nn_core::{DType, Device, Parameter, Tensor};
    /// let w = Parameter::new(Tensor::from_vec(vec![2.0, 3.0], &[2]));
    /// w.share_storage_with_views();
    /// let x = Tensor::from_vec(vec![5.0, 7.0], &[2]).requires_grad_(true);
    /// let y = (&x * &*w).sum();
    /// // Free the values between forward and backward (a meta tensor holds none) ...
    /// w.set_data(&Tensor::full_on(&[2], 0.0, DType::F32, Device::Meta));
    /// // ... and put them back before backward reads them.
    /// w.set_data(&Tensor::from_vec(vec![2.0, 3.0], &[2]));
    /// y.backward();
    /// assert_eq!(x.grad().unwrap().to_vec(), [2.0, 3.0]);
    /// ```
    ///
    /// Replacing the buffer is not a write: an in-place update (`add_`, `copy_`, an
    /// optimizer step) between forward and backward is, and backward then refuses the
    /// values it saved, naming the version they were saved at, as PyTorch's "modified by
    /// an inplace operation" (it would compute the forward's gradient from the new values).
    ///
    /// # Panics
    /// When this tensor is a view of part of a buffer (replacing its values would replace
    /// the rest of that buffer for the tensors it is a view of: [`copy`](Tensor::copy) it
    /// first), or when another alias already made the slot shared.
    #[track_caller]
    pub fn share_storage_with_views(&self) {
        if self.layout().offset() != 0 || self.layout().storage_span() != self.storage_arc().len() {
            panic!(
                "share_storage_with_views: this tensor (shape {:?}) is a view of part of a buffer of {} elements; \
                 call it on a tensor that spans its buffer (`copy()` this one)",
                self.shape(),
                self.storage_arc().len()
            );
        }
        let slot = self.slot();
        let me = self.0.id.0;
        match slot.owner.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => slot.shared.store(true, Ordering::Release),
            Err(owner) if owner == me => {}
            Err(_) => panic!(
                "share_storage_with_views: this tensor is a view of (or a copy sharing the slot of) another tensor \
                 that shares its storage; call it on that tensor"
            ),
        }
    }

    /// Whether this tensor's saved values read its buffer slot
    /// ([`share_storage_with_views`](Tensor::share_storage_with_views)).
    pub fn shares_storage_with_views(&self) -> bool {
        // Read under the lock, without cloning the slot's `Arc` (every op asks, per input).
        self.0.storage.read().unwrap_or_else(|e| e.into_inner()).shared.load(Ordering::Acquire)
    }

    /// The slot this tensor reads its buffer from, shared with its aliases.
    pub(crate) fn slot(&self) -> Arc<StorageSlot> {
        Arc::clone(&self.0.storage.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The slot of an op's output over `storage` that is not a view: the shared slot of an
    /// input that [shares its storage with its views](Tensor::share_storage_with_views)
    /// and holds exactly this buffer, else a new one.
    pub(crate) fn slot_for(storage: Arc<Storage>, inputs: &[&Tensor]) -> Arc<StorageSlot> {
        for t in inputs {
            if t.shares_storage_with_views() && Arc::ptr_eq(&t.storage_arc(), &storage) {
                return t.slot();
            }
        }
        StorageSlot::new(storage)
    }

    /// Runs `f` on this tensor's buffer for writing, in the slot it shares with its
    /// aliases, copying the buffer first if a snapshot or a saved value holds it
    /// (copy-on-write).
    ///
    /// # Panics
    /// On the meta device, naming `op`.
    #[track_caller]
    pub(crate) fn modify_storage<R>(&self, op: &str, f: impl FnOnce(&mut Storage, &Layout) -> R) -> R {
        if self.device() == Device::Meta {
            panic!("{op}: tensor on the meta device has no values to update");
        }
        self.update_storage(f)
    }

    /// Runs `f` on this tensor's buffer for writing (copy-on-write, as
    /// [`modify_storage`](Tensor::modify_storage)), on any device: the backend's in-place
    /// methods leave a meta buffer as it is.
    pub(crate) fn update_storage<R>(&self, f: impl FnOnce(&mut Storage, &Layout) -> R) -> R {
        let slot = self.slot();
        let mut guard = slot.value.write().unwrap_or_else(|e| e.into_inner());
        let r = f(Arc::make_mut(&mut guard), &self.0.layout);
        // Counted once written: a write that panics (an integer overflow) changed nothing.
        slot.version.fetch_add(1, Ordering::AcqRel);
        r
    }

    /// Copies `src` (broadcast to this shape, converted to this dtype) into this tensor's
    /// values, in place, and so into every alias of this tensor (a view writes into its
    /// base). Not recorded by autograd. As in PyTorch, `src` may be on another device: this
    /// is the one op that copies between devices, because copying is what it is asked to
    /// do.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::zeros(&[2, 2]);
    /// x.copy_(&Tensor::from_vec(vec![1.0, 2.0], &[2]));
    /// assert_eq!(x.to_vec(), vec![1.0, 2.0, 1.0, 2.0]);
    /// x.narrow(1, 1, 1).copy_(&Tensor::from_vec(vec![7.0], &[1]));
    /// assert_eq!(x.to_vec(), vec![1.0, 7.0, 1.0, 7.0]);
    /// ```
    ///
    /// # Panics
    /// When `src` does not broadcast to this shape; and outside `no_grad`, when this tensor
    /// or `src` requires grad (the copy would not be recorded, so no gradient would reach
    /// `src`; PyTorch records it, nn refuses it).
    #[track_caller]
    pub fn copy_(&self, src: &Tensor) -> &Tensor {
        crate::autograd::trace::on_access_from(crate::autograd::trace::OpKind::InPlace, "copy_", self, &[src]);
        self.check_inplace("copy_", &[src]);
        if self.device() == Device::Meta && src.device() == Device::Meta {
            return self;
        }
        let Some(b) = src.layout().broadcast_to(self.shape()) else {
            panic!("copy_: source of shape {:?} cannot be broadcast to {:?}", src.shape(), self.shape());
        };
        let moved;
        let src = if src.device() != self.device() && self.device() != Device::Meta && src.device() != Device::Meta {
            moved = src.to_device(self.device());
            &moved
        } else {
            src
        };
        let s = src.cpu_storage("copy_");
        self.modify_storage("copy_", |dst, layout| dst.write_from(layout, &s, &b));
        self
    }

    /// Sets every element to `value`, in place.
    #[track_caller]
    pub fn fill_(&self, value: f64) -> &Tensor {
        self.copy_(&Tensor::full_on(&[], value, self.dtype(), self.device()))
    }

    /// Sets every element to zero, in place.
    #[track_caller]
    pub fn zero_(&self) -> &Tensor {
        self.fill_(0.0)
    }

    // In-place arithmetic (`add_`, `sub_`, `mul_`, `+=`, ...) lives in `ops/inplace.rs`.
}
