//! Autograd state of a tensor: `requires_grad`, `.grad`, `detach`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Tensor;

impl Tensor {
    /// True when gradients flow to or through this tensor: a leaf marked with
    /// [`requires_grad_`](Tensor::requires_grad_), or the result of an op on one.
    pub fn requires_grad(&self) -> bool {
        self.0.grad_fn.is_some() || self.0.requires_grad.load(Ordering::Relaxed)
    }

    /// Marks a leaf as requiring (or not) gradients; returns the same tensor.
    ///
    /// # Panics
    /// When asked to require grad on a non-floating dtype, or to stop requiring grad on a
    /// non-leaf (use [`detach`](Tensor::detach)), as PyTorch does.
    #[track_caller]
    pub fn requires_grad_(&self, requires_grad: bool) -> Tensor {
        if self.0.grad_fn.is_some() {
            if !requires_grad {
                panic!("requires_grad_: you can only change requires_grad flags of leaf tensors; use `detach()` to get a tensor without a graph");
            }
            return self.clone();
        }
        if requires_grad && !self.dtype().is_float() {
            panic!("requires_grad_: only tensors of floating-point dtype can require gradients, got {}", self.dtype());
        }
        self.0.requires_grad.store(requires_grad, Ordering::Relaxed);
        self.clone()
    }

    /// True for tensors not produced by a recorded op (user-created, detached, or results
    /// computed under `no_grad`).
    pub fn is_leaf(&self) -> bool {
        self.0.grad_fn.is_none()
    }

    /// The accumulated gradient of a leaf (or of a non-leaf that called
    /// [`retain_grad`](Tensor::retain_grad)), if a backward pass has reached it.
    ///
    /// # Panics
    /// On a non-leaf that did not call `retain_grad` and has no gradient: backward never
    /// keeps the gradients of the tensors in between, so reading one is a mistake (PyTorch
    /// warns and gives `None`; here it would be an easy `None` to miss).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0], &[2]).requires_grad_(true);
    /// let h = &x * 3.0;
    /// h.retain_grad();
    /// (&h * &h).sum().backward();
    /// assert_eq!(h.grad().unwrap().to_vec(), [6.0, 12.0]); // d(h·h)/dh = 2h
    /// assert_eq!(x.grad().unwrap().to_vec(), [18.0, 36.0]);
    /// ```
    #[track_caller]
    pub fn grad(&self) -> Option<Tensor> {
        let grad = self.0.grad.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if grad.is_none() && !self.is_leaf() && !self.retains_grad() {
            panic!(
                "grad: this tensor is not a leaf (it is the output of `{}`), and backward does not keep the \
                 gradients of non-leaf tensors; call `retain_grad()` on it before backward to keep its gradient",
                self.grad_fn_name().unwrap_or("?")
            );
        }
        grad
    }

    /// The `.grad` slot as it is, without [`grad`](Tensor::grad)'s non-leaf check (for
    /// code that visits every tensor of a module, buffers computed by an op included).
    pub(crate) fn grad_unchecked(&self) -> Option<Tensor> {
        self.0.grad.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether `self` and `other` are aliases: views or detached copies of one another
    /// (or of one tensor), so that an in-place update of either is seen by the other.
    /// A [`snapshot`](Tensor::snapshot), a [`copy`](Tensor::copy) and an op's result are
    /// not; a tensor is an alias of itself.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let w = Tensor::zeros(&[2, 3]);
    /// assert!(w.narrow(1, 0, 2).t().is_alias_of(&w.detach()));
    /// assert!(!w.snapshot().is_alias_of(&w) && !w.copy().is_alias_of(&w));
    /// ```
    pub fn is_alias_of(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.slot(), &other.slot())
    }

    /// Keeps this non-leaf tensor's gradient in [`grad`](Tensor::grad) at the next backward
    /// passes (accumulated across them, as a leaf's is): PyTorch's `retain_grad()`. A
    /// no-op on a leaf, which keeps its gradient anyway.
    ///
    /// # Panics
    /// On a tensor that does not require grad (no gradient can reach it), as PyTorch does.
    #[track_caller]
    pub fn retain_grad(&self) {
        let Some(node) = &self.0.grad_fn else {
            if !self.requires_grad() {
                panic!("retain_grad: can't retain_grad on a tensor that has requires_grad=False");
            }
            return;
        };
        let mut retained = node.retained.lock().unwrap_or_else(|e| e.into_inner());
        retained.retain(|t| t.strong_count() > 0);
        if !retained.iter().any(|t| std::ptr::eq(t.as_ptr(), Arc::as_ptr(&self.0))) {
            retained.push(Arc::downgrade(&self.0));
        }
    }

    /// Whether this non-leaf tensor keeps its gradient
    /// ([`retain_grad`](Tensor::retain_grad)); `false` on a leaf, as PyTorch's
    /// `retains_grad` (a leaf that requires grad keeps its gradient anyway).
    pub fn retains_grad(&self) -> bool {
        match &self.0.grad_fn {
            None => false,
            Some(node) => node
                .retained
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .any(|t| std::ptr::eq(t.as_ptr(), Arc::as_ptr(&self.0))),
        }
    }

    /// Replaces the accumulated gradient (`None` clears it, like `zero_grad(set_to_none=True)`).
    ///
    /// # Panics
    /// When the new gradient's shape, dtype or device differs from the tensor's (PyTorch
    /// refuses an assigned `.grad` of another type or device; accumulating into it would
    /// fail later, far from here).
    #[track_caller]
    pub fn set_grad(&self, grad: Option<Tensor>) {
        if let Some(g) = &grad {
            assert_eq!(
                g.shape(),
                self.shape(),
                "set_grad: gradient of shape {:?} for a tensor of shape {:?}",
                g.shape(),
                self.shape()
            );
            if (g.dtype(), g.device()) != (self.dtype(), self.device()) && self.device() != crate::Device::Meta {
                panic!(
                    "set_grad: a {} gradient on {} for a {} tensor on {}",
                    g.dtype(),
                    g.device(),
                    self.dtype(),
                    self.device()
                );
            }
        }
        *self.0.grad.lock().unwrap_or_else(|e| e.into_inner()) = grad.map(|g| g.detached_for_keeping());
    }

    /// Clears the accumulated gradient.
    pub fn zero_grad(&self) {
        self.set_grad(None);
    }

    /// The name of the op that produced this tensor, for non-leaves (`"matmul"`, ...).
    pub fn grad_fn_name(&self) -> Option<&'static str> {
        self.0.grad_fn.as_ref().map(|n| n.name)
    }

    /// A new tensor sharing this one's values but cut from the graph (a leaf that does not
    /// require grad): an alias, as in PyTorch, so an in-place update of either is seen by
    /// both. For values that stay as they are now, use [`snapshot`](Tensor::snapshot) (no
    /// copy until one of them is written) or [`copy`](Tensor::copy).
    ///
    /// The detached handles, by what a later in-place write to the tensor does to them:
    ///
    /// | handle | a later write | for |
    /// |---|---|---|
    /// | `detach` | is seen (an alias) | PyTorch's `detach` |
    /// | [`snapshot`](Tensor::snapshot) | is not seen (copy on write) | values kept as they are |
    /// | `saved_for_backward` (inside nn) | not seen; under shared storage, seen and refused when backward reads it | what an op keeps for its backward |
    /// | `detached_for_keeping` (inside nn) | not seen; under shared storage, seen | gradients and outputs an op holds |
    ///
    /// ("Shared storage": a tensor that [shares its storage with its
    /// views](Tensor::share_storage_with_views), as FSDP's parameters do.)
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let w = Tensor::from_vec(vec![1.0, 2.0], &[2]);
    /// w.detach().zero_();
    /// assert_eq!(w.to_vec(), [0.0, 0.0]);
    /// ```
    pub fn detach(&self) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::DETACH, &[self], &[], Vec::new);
        // A value saved for backward stays checked when detached.
        Tensor::in_slot_at(self.slot(), self.layout().clone(), None, self.0.saved_version)
    }

    /// A detached tensor holding this tensor's values as they are now: in-place updates of
    /// either later do not reach the other (the buffer is copied by the first write, not
    /// here). Also for a tensor that [shares its storage with its
    /// views](Tensor::share_storage_with_views), whose detached copies follow it when its
    /// values are replaced.
    ///
    /// ```
    /// use nn_core::{no_grad, DType, Device, Tensor};
    /// let w = Tensor::from_vec(vec![1.0, 2.0], &[2]);
    /// let kept = w.snapshot();
    /// no_grad(|| w.add_(1.0));
    /// assert_eq!((w.to_vec(), kept.to_vec()), (vec![2.0, 3.0], vec![1.0, 2.0]));
    ///
    /// w.share_storage_with_views();
    /// let (follows, kept) = (w.detach(), w.snapshot());
    /// w.set_data(&Tensor::full_on(&[2], 0.0, DType::F32, Device::Meta));
    /// assert_eq!(follows.device(), Device::Meta);
    /// assert_eq!(kept.to_vec(), [2.0, 3.0]);
    /// ```
    pub fn snapshot(&self) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::SNAPSHOT, &[self], &[], Vec::new);
        Tensor::from_parts(self.storage_arc(), self.layout().clone(), None)
    }

    /// A detached handle on the values an op keeps for backward: a
    /// [`snapshot`](Tensor::snapshot), so a later in-place update of the tensor does not
    /// change what backward reads, except for a tensor that [shares its storage with its
    /// views](Tensor::share_storage_with_views), whose saved values follow its slot (FSDP
    /// frees and regathers it between forward and backward). Those record the slot's
    /// version: read after an in-place write (an optimizer step, `copy_`, `add_`), they
    /// panic, as PyTorch's "modified by an inplace operation", rather than give the new
    /// values to a backward of the old ones.
    pub(crate) fn saved_for_backward(&self) -> Tensor {
        if self.shares_storage_with_views() {
            let _op = crate::autograd::entry::enter_uncast(crate::names::DETACH, &[self], &[], Vec::new);
            let slot = self.slot();
            let version = slot.version.load(std::sync::atomic::Ordering::Acquire);
            Tensor::in_slot_at(slot, self.layout().clone(), None, Some(version))
        } else {
            self.snapshot()
        }
    }

    /// How many in-place writes this tensor's storage has had (PyTorch's `_version`): `add_`,
    /// `copy_`, an optimizer step. Replacing the buffer with [`set_data`](Tensor::set_data)
    /// does not count. For code that must know whether values it used were written since
    /// (FSDP compares its shards' versions between a forward and its backward).
    ///
    /// ```
    /// use nn_core::{no_grad, Tensor};
    /// let w = Tensor::zeros(&[2]);
    /// let v = w.version();
    /// no_grad(|| w.add_(1.0));
    /// assert_eq!(w.version(), v + 1);
    /// ```
    pub fn version(&self) -> u64 {
        self.slot().version.load(std::sync::atomic::Ordering::Acquire)
    }

    /// A detached handle on values kept as they are (a gradient, an op's output): as
    /// [`saved_for_backward`](Tensor::saved_for_backward), without the version check.
    pub(crate) fn detached_for_keeping(&self) -> Tensor {
        if self.shares_storage_with_views() {
            self.detach()
        } else {
            self.snapshot()
        }
    }
}
