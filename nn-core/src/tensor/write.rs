//! Copies, dtype and device conversions, and in-place writes into storage.

use std::sync::Arc;

use crate::autograd::{is_grad_enabled, op_result, Grads};
use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::shape::{for_each_offset, Layout};
use crate::storage::{with_cpu, CpuStorage, Storage};

use super::Tensor;

impl Tensor {
    /// This tensor if already contiguous, otherwise a contiguous copy (differentiable).
    pub fn contiguous(&self) -> Tensor {
        if self.is_contiguous() && self.0.layout.offset() == 0 && self.storage_arc().len() == self.numel() {
            return self.clone();
        }
        let storage = match &*self.storage_arc() {
            Storage::Cpu(c) => Storage::Cpu(c.gather_layout(self.layout())),
            Storage::Meta { dtype, .. } => Storage::Meta { dtype: *dtype, len: self.numel() },
        };
        op_result("contiguous", Arc::new(storage), Layout::contiguous(self.shape()), &[self], || {
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
        let storage = match &*self.storage_arc() {
            Storage::Cpu(c) => Storage::Cpu(c.convert_layout(self.layout(), dtype)),
            Storage::Meta { .. } => Storage::Meta { dtype, len: self.numel() },
        };
        let inputs: &[&Tensor] = if dtype.is_float() { &[self] } else { &[] };
        op_result("to_dtype", Arc::new(storage), Layout::contiguous(self.shape()), inputs, || {
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
        let dtype = self.dtype();
        let storage = match device {
            Device::Meta => Storage::Meta { dtype, len: self.numel() },
            Device::Cpu => Storage::Cpu(CpuStorage::zeros(dtype, self.numel())),
        };
        op_result("to_device", Arc::new(storage), Layout::contiguous(self.shape()), &[self], || {
            move |g: &Tensor, _: &[bool]| -> Grads { smallvec::smallvec![Some(g.to_device(Device::Cpu))] }
        })
    }

    #[track_caller]
    pub(crate) fn check_inplace(&self, op: &str) {
        if is_grad_enabled() && self.requires_grad() {
            panic!(
                "{op}: in-place update of a tensor that requires grad; run it inside `no_grad(|| ...)` \
                 (as optimizers and init functions do)"
            );
        }
    }

    /// Replaces this tensor's values (and dtype and device) with `src`'s, keeping its
    /// identity, so every handle (a module's parameter, an optimizer's copy) sees the new
    /// values: PyTorch's `param.data = src`. Shares `src`'s buffer when the layouts allow.
    ///
    /// # Panics
    /// When the shapes differ.
    #[track_caller]
    pub fn set_data(&self, src: &Tensor) {
        crate::trace::on_access(crate::trace::OpKind::InPlace, "set_data", self);
        if src.shape() != self.shape() {
            panic!("set_data: source of shape {:?} for a tensor of shape {:?}", src.shape(), self.shape());
        }
        let new = if src.layout() == self.layout() {
            src.storage_arc()
        } else if self.is_contiguous() && self.layout().offset() == 0 {
            src.detach().contiguous().storage_arc()
        } else {
            // A strided leaf: rebuild a buffer in this tensor's own layout.
            let span = self.layout().storage_span();
            match &*src.storage_arc() {
                Storage::Meta { dtype, .. } => Arc::new(Storage::Meta { dtype: *dtype, len: span }),
                Storage::Cpu(c) => {
                    let vals = c.gather_layout(src.layout());
                    let mut out = CpuStorage::zeros(vals.dtype(), span);
                    scatter_into(&mut out, self.layout(), &vals);
                    Arc::new(Storage::Cpu(out))
                }
            }
        };
        *self.0.storage.write().unwrap_or_else(|e| e.into_inner()) = new;
    }

    /// Runs `f` on this tensor's buffer for writing, copying the buffer first if any other
    /// handle shares it (copy-on-write).
    pub(crate) fn modify_storage<R>(&self, op: &str, f: impl FnOnce(&mut CpuStorage, &Layout) -> R) -> R {
        let mut guard = self.0.storage.write().unwrap_or_else(|e| e.into_inner());
        match Arc::make_mut(&mut guard) {
            Storage::Cpu(c) => f(c, &self.0.layout),
            Storage::Meta { .. } => {
                panic!("{op}: tensor on the meta device has no values to update")
            }
        }
    }

    /// Copies `src` (broadcast to this shape, converted to this dtype) into this tensor's
    /// values, in place. Not recorded by autograd.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::zeros(&[2, 2]);
    /// x.copy_(&Tensor::from_vec(vec![1.0, 2.0], &[2]));
    /// assert_eq!(x.to_vec(), vec![1.0, 2.0, 1.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn copy_(&self, src: &Tensor) -> &Tensor {
        crate::trace::on_access(crate::trace::OpKind::InPlace, "copy_", self);
        self.check_inplace("copy_");
        if self.device() == Device::Meta && src.device() == Device::Meta {
            return self;
        }
        let Some(b) = src.layout().broadcast_to(self.shape()) else {
            panic!("copy_: source of shape {:?} cannot be broadcast to {:?}", src.shape(), self.shape());
        };
        let dtype = self.dtype();
        let s = src.cpu_storage("copy_");
        let Storage::Cpu(c) = &*s else { unreachable!() };
        let vals = c.convert_layout(&b, dtype);
        self.modify_storage("copy_", |dst, layout| scatter_into(dst, layout, &vals));
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

/// Writes row-major `vals` into the positions of `layout` inside `dst` (same dtype).
pub(crate) fn scatter_into(dst: &mut CpuStorage, layout: &Layout, vals: &CpuStorage) {
    fn go<T: Element>(dst: &mut [T], layout: &Layout, vals: &[T]) {
        if let Some(r) = layout.contiguous_range() {
            dst[r].copy_from_slice(vals);
            return;
        }
        let mut i = 0;
        for_each_offset(layout.shape(), [layout.strides()], [layout.offset()], |[o]| {
            dst[o] = vals[i];
            i += 1;
        });
    }
    let dtype = dst.dtype();
    let vals = if vals.dtype() == dtype {
        std::borrow::Cow::Borrowed(vals)
    } else {
        std::borrow::Cow::Owned(vals.convert_layout(&Layout::contiguous(&[vals.len()]), dtype))
    };
    with_cpu!(dst, T, d => go::<T>(d, layout, T::slice(&vals).expect("same dtype")))
}
