//! Tensor operations, one family per file, each with its forward, backward and tests.
//!
//! Conventions shared by every op:
//! - Inputs may be any strided view; outputs are fresh contiguous tensors unless the op is
//!   a view.
//! - Mixing devices or dtypes panics with a message naming the op and both operands.
//! - On the meta device, ops compute output shapes and dtypes without touching values.

pub(crate) mod activation;
pub(crate) mod amax;
pub(crate) mod attention;
pub(crate) mod binary;
pub(crate) mod clamp;
pub(crate) mod conv;
pub(crate) mod conv_transpose;
pub(crate) mod cumulative;
pub(crate) mod dropout;
pub(crate) mod einsum;
pub(crate) mod index;
pub(crate) mod indexing;
pub(crate) mod inplace;
pub(crate) mod interpolate;
pub(crate) mod matmul;
pub(crate) mod multinomial;
pub(crate) mod norm;
pub(crate) mod outer;
pub(crate) mod pad;
pub(crate) mod padding_modes;
pub(crate) mod pool;
pub(crate) mod predicates;
pub mod promotion;
pub(crate) mod quantile;
pub(crate) mod reduce;
pub(crate) mod reduce_dims;
pub(crate) mod repeat;
pub(crate) mod scalar_compare;
pub(crate) mod shift;
pub(crate) mod softmax;
pub(crate) mod sort;
pub(crate) mod special;
pub(crate) mod triangular;
pub(crate) mod unary;
pub(crate) mod vector_norm;
pub(crate) mod view;
pub(crate) mod volumetric;

pub use activation::GeluApproximate;
pub use attention::AttentionConfig;
pub use conv::Conv2dConfig;
pub use conv_transpose::{ConvTranspose1dConfig, ConvTranspose2dConfig};
pub use indexing::{Idx, IntoIndex, ELLIPSIS, NEW_AXIS};
pub use inplace::Operand;
pub use interpolate::{InterpolateMode, InterpolateSize};
pub use pad::PadMode;
pub use pool::Pool2dConfig;
pub use scalar_compare::Scalar;
pub use volumetric::{Conv3dConfig, Pool3dConfig};

pub use vector_norm::NormOrd;

use crate::device::Device;
use crate::dtype::DType;
use crate::tensor::Tensor;

/// The CPU backend's threading threshold: tests size inputs on both sides of it, so the
/// parallel kernels are checked too.
#[cfg(test)]
pub(crate) use crate::backend::cpu::parts::PAR_THRESHOLD;

/// Checks that all operands share one device and one dtype; returns them.
#[track_caller]
pub(crate) fn check_same(op: &str, ts: &[&Tensor]) -> (Device, DType) {
    let (d0, t0) = (ts[0].device(), ts[0].dtype());
    for t in &ts[1..] {
        if t.device() != d0 {
            panic!(
                "{op}: expected all tensors on one device, got {d0} (shape {:?}) and {} (shape {:?})",
                ts[0].shape(),
                t.device(),
                t.shape()
            );
        }
        if t.dtype() != t0 {
            panic!(
                "{op}: expected all tensors of one dtype, got {t0} (shape {:?}) and {} (shape {:?}); convert with `to_dtype`",
                ts[0].shape(),
                t.dtype(),
                t.shape()
            );
        }
    }
    (d0, t0)
}

/// Panics unless the dtype is a compute float.
#[track_caller]
pub(crate) fn check_float(op: &str, t: &Tensor) {
    let d = t.dtype();
    if !d.is_compute_float() {
        panic!("{op}: expected a floating-point tensor (f32, f64, bf16 or f16), got {d} (shape {:?})", t.shape());
    }
}
