//! Metadata (shape, dtype, device, identity) and reading values out.

use std::sync::Arc;

use crate::backend::Storage;
use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::Error;
use crate::shape::Layout;

use super::{Tensor, TensorId};

impl Tensor {
    /// The unique identity of this tensor (shared by its clones).
    pub fn id(&self) -> TensorId {
        self.0.id
    }

    /// The size of each dimension.
    pub fn shape(&self) -> &[usize] {
        self.0.layout.shape()
    }

    /// The strides of each dimension, in elements.
    pub fn strides(&self) -> &[usize] {
        self.0.layout.strides()
    }

    /// The layout (shape, strides, offset).
    pub fn layout(&self) -> &Layout {
        &self.0.layout
    }

    /// Number of dimensions (0 for a scalar).
    pub fn rank(&self) -> usize {
        self.0.layout.rank()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.0.layout.numel()
    }

    /// True when the elements are row-major without gaps.
    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.storage_arc().dtype()
    }

    /// The device holding the values.
    pub fn device(&self) -> Device {
        self.storage_arc().device()
    }

    /// The storage buffer (shared with views).
    pub fn storage_arc(&self) -> Arc<Storage> {
        let slot = self.0.storage.read().unwrap_or_else(|e| e.into_inner());
        if let Some(saved) = self.0.saved_version {
            let now = slot.version.load(std::sync::atomic::Ordering::Acquire);
            if now != saved {
                panic!(
                    "backward: one of the values needed for gradient computation (a tensor of shape {:?}, which shares \
                     its storage with its views) has been modified by an in-place operation: it is at version {now}, \
                     saved at version {saved}; update it after backward (an optimizer step, `copy_`, `add_`)",
                    self.shape()
                );
            }
        }
        slot.get()
    }

    /// The CPU buffer, or a panic naming `op` when the tensor is on the meta device.
    #[track_caller]
    pub(crate) fn cpu_storage(&self, op: &str) -> Arc<Storage> {
        let s = self.storage_arc();
        if let Storage::Meta { .. } = &*s {
            panic!("{}", Error::MetaHasNoValues { op: leak(op), shape: self.shape().to_vec() });
        }
        s
    }

    /// The values, row-major, converted to `T`.
    #[track_caller]
    pub fn to_vec_of<T: Element>(&self) -> Vec<T> {
        crate::autograd::trace::on_access(crate::autograd::trace::OpKind::HostRead, "to_vec", self);
        crate::autograd::forward_checks::check_host_read(self, "to_vec", std::panic::Location::caller());
        self.cpu_storage("to_vec").to_vec_of(self.layout()).expect("checked: not on the meta device")
    }

    /// The values as `f32`, row-major, whatever the dtype.
    ///
    /// # Panics
    /// On a meta tensor (it has no values).
    #[track_caller]
    pub fn to_vec(&self) -> Vec<f32> {
        self.to_vec_of::<f32>()
    }

    /// The values as `f64`.
    #[track_caller]
    pub fn to_vec_f64(&self) -> Vec<f64> {
        self.to_vec_of::<f64>()
    }

    /// The values as `i64` (floats truncate toward zero).
    #[track_caller]
    pub fn to_vec_i64(&self) -> Vec<i64> {
        self.to_vec_of::<i64>()
    }

    /// The values as booleans (non-zero is `true`).
    #[track_caller]
    pub fn to_vec_bool(&self) -> Vec<bool> {
        self.to_vec_of::<bool>()
    }

    /// The single value of a one-element tensor, as `f64`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// assert_eq!(Tensor::from_vec(vec![1.0, 2.0], &[2]).sum().item(), 3.0);
    /// ```
    #[track_caller]
    pub fn item(&self) -> f64 {
        if self.numel() != 1 {
            panic!(
                "item: a tensor with {} elements (shape {:?}) cannot be converted to a scalar",
                self.numel(),
                self.shape()
            );
        }
        self.to_vec_f64()[0]
    }
}

/// Turns a runtime op name into a `'static` one for error values (only on the panic path).
fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}
