//! Tensor operations, one family per file, each with its forward, backward and tests.
//!
//! Conventions shared by every op:
//! - Inputs may be any strided view; outputs are fresh contiguous tensors unless the op is
//!   a view.
//! - Mixing devices or dtypes panics with a message naming the op and both operands.
//! - On the meta device, ops compute output shapes and dtypes without touching values.

pub(crate) mod activation;
pub(crate) mod attention;
pub(crate) mod binary;
pub(crate) mod conv;
pub(crate) mod dropout;
pub(crate) mod index;
pub(crate) mod matmul;
pub(crate) mod norm;
pub(crate) mod pool;
pub(crate) mod reduce;
pub(crate) mod softmax;
pub(crate) mod unary;
pub(crate) mod view;

pub use activation::GeluApproximate;
pub use attention::AttentionOptions;
pub use conv::Conv2dOptions;
pub use pool::Pool2dOptions;

use rayon::prelude::*;

use crate::device::Device;
use crate::dtype::DType;
use crate::shape::{for_each_offset, Layout};
use crate::storage::{CpuStorage, Storage};
use crate::tensor::Tensor;

/// Below this many elements, elementwise kernels stay on one thread.
pub(crate) const PAR_THRESHOLD: usize = 1 << 15;

/// The CPU buffer behind an `Arc<Storage>` known to be on the CPU.
pub(crate) fn cpu(s: &Storage) -> &CpuStorage {
    match s {
        Storage::Cpu(c) => c,
        Storage::Meta { .. } => unreachable!("meta storage reached a CPU kernel"),
    }
}

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
        panic!(
            "{op}: expected a floating-point tensor (f32 or f64), got {d}{}",
            if d.is_float() { "; convert with `.to_dtype(DType::F32)` first" } else { "" }
        );
    }
}

/// Elementwise map of one strided input to a contiguous vector.
pub(crate) fn map1<T: Copy + Send + Sync, U: Send>(a: &[T], la: &Layout, f: impl Fn(T) -> U + Sync + Send) -> Vec<U> {
    if let Some(r) = la.contiguous_range() {
        let src = &a[r];
        if src.len() >= PAR_THRESHOLD {
            let mut out = Vec::with_capacity(src.len());
            src.par_iter().map(|&x| f(x)).collect_into_vec(&mut out);
            return out;
        }
        return src.iter().map(|&x| f(x)).collect();
    }
    let mut out = Vec::with_capacity(la.numel());
    for_each_offset(la.shape(), [la.strides()], [la.offset()], |[o]| out.push(f(a[o])));
    out
}

/// Elementwise map of two strided inputs with the same shape (broadcast already applied).
pub(crate) fn map2<T: Copy + Send + Sync, U: Send>(
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    f: impl Fn(T, T) -> U + Sync + Send,
) -> Vec<U> {
    debug_assert_eq!(la.shape(), lb.shape());
    if let (Some(ra), Some(rb)) = (la.contiguous_range(), lb.contiguous_range()) {
        let (sa, sb) = (&a[ra], &b[rb]);
        if sa.len() >= PAR_THRESHOLD {
            let mut out = Vec::with_capacity(sa.len());
            sa.par_iter().zip(sb.par_iter()).map(|(&x, &y)| f(x, y)).collect_into_vec(&mut out);
            return out;
        }
        return sa.iter().zip(sb).map(|(&x, &y)| f(x, y)).collect();
    }
    let mut out = Vec::with_capacity(la.numel());
    for_each_offset(la.shape(), [la.strides(), lb.strides()], [la.offset(), lb.offset()], |[i, j]| {
        out.push(f(a[i], b[j]))
    });
    out
}

/// Elementwise map of three strided inputs with the same shape.
#[allow(clippy::too_many_arguments)]
pub(crate) fn map3<T: Copy + Send + Sync, U: Send>(
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    c: &[T],
    lc: &Layout,
    f: impl Fn(T, T, T) -> U + Sync + Send,
) -> Vec<U> {
    if let (Some(ra), Some(rb), Some(rc)) = (la.contiguous_range(), lb.contiguous_range(), lc.contiguous_range()) {
        let (sa, sb, sc) = (&a[ra], &b[rb], &c[rc]);
        if sa.len() >= PAR_THRESHOLD {
            let mut out = Vec::with_capacity(sa.len());
            sa.par_iter()
                .zip(sb.par_iter())
                .zip(sc.par_iter())
                .map(|((&x, &y), &z)| f(x, y, z))
                .collect_into_vec(&mut out);
            return out;
        }
        return sa.iter().zip(sb).zip(sc).map(|((&x, &y), &z)| f(x, y, z)).collect();
    }
    let mut out = Vec::with_capacity(la.numel());
    for_each_offset(
        la.shape(),
        [la.strides(), lb.strides(), lc.strides()],
        [la.offset(), lb.offset(), lc.offset()],
        |[i, j, k]| out.push(f(a[i], b[j], c[k])),
    );
    out
}
