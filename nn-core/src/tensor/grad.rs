//! Autograd state of a tensor: `requires_grad`, `.grad`, `detach`.

use std::sync::atomic::Ordering;

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

    /// The accumulated gradient of a leaf, if a backward pass has reached it.
    pub fn grad(&self) -> Option<Tensor> {
        self.0.grad.lock().unwrap_or_else(|e| e.into_inner()).clone()
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
        *self.0.grad.lock().unwrap_or_else(|e| e.into_inner()) = grad.map(|g| g.detach());
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
    /// require grad).
    pub fn detach(&self) -> Tensor {
        let _t = crate::autograd::trace::op("detach", &[self], Vec::new);
        Tensor::in_slot(self.view_slot(), self.layout().clone(), None)
    }

    /// A detached tensor over this tensor's buffer as it is now (no copy): what
    /// [`detach`](Tensor::detach) gives, except for a tensor that
    /// [shares its storage with its views](Tensor::share_storage_with_views), whose
    /// detached copies follow it when its values are replaced; a snapshot keeps these.
    ///
    /// ```
    /// use nn_core::{DType, Device, Tensor};
    /// let w = Tensor::from_vec(vec![1.0, 2.0], &[2]);
    /// w.share_storage_with_views();
    /// let (follows, kept) = (w.detach(), w.snapshot());
    /// w.set_data(&Tensor::full_on(&[2], 0.0, DType::F32, Device::Meta));
    /// assert_eq!(follows.device(), Device::Meta);
    /// assert_eq!(kept.to_vec(), [1.0, 2.0]);
    /// ```
    pub fn snapshot(&self) -> Tensor {
        let _t = crate::autograd::trace::op("detach", &[self], Vec::new);
        Tensor::from_parts(self.storage_arc(), self.layout().clone(), None)
    }
}
