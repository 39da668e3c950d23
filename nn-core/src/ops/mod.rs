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
mod conv_cpu;
pub(crate) mod dropout;
pub(crate) mod index;
pub(crate) mod inplace;
pub(crate) mod matmul;
pub(crate) mod norm;
pub(crate) mod pool;
pub(crate) mod predicates;
pub(crate) mod quantile;
pub(crate) mod reduce;
pub(crate) mod softmax;
pub(crate) mod triangular;
pub(crate) mod unary;
pub(crate) mod vector_norm;
pub(crate) mod view;

pub use activation::GeluApproximate;
pub use attention::AttentionOptions;
pub use conv::Conv2dOptions;
pub use inplace::Operand;
pub use pool::Pool2dOptions;
pub use vector_norm::NormOrd;

use rayon::prelude::*;

use crate::device::Device;
use crate::dtype::{DType, Element};
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
            "{op}: expected a floating-point tensor (f32 or f64), got {d} (shape {:?}){}",
            t.shape(),
            if d.is_float() { "; convert with `.to_dtype(DType::F32)` first" } else { "" }
        );
    }
}

/// Elementwise map of one strided input to a contiguous vector.
pub(crate) fn map1<T: Copy + Send + Sync, U: Element>(
    a: &[T],
    la: &Layout,
    f: impl Fn(T) -> U + Sync + Send,
) -> Vec<U> {
    if let Some(r) = la.contiguous_range() {
        let src = &a[r];
        if src.len() >= PAR_THRESHOLD {
            let mut out = U::alloc_buffer(src.len());
            src.par_iter().map(|&x| f(x)).collect_into_vec(&mut out);
            return out;
        }
        let mut out = U::alloc_buffer(src.len());
        out.extend(src.iter().map(|&x| f(x)));
        return out;
    }
    let mut out = U::alloc_buffer(la.numel());
    let shape = la.shape();
    if shape.is_empty() {
        out.push(f(a[la.offset()]));
        return out;
    }
    let r = shape.len() - 1;
    let (len, sa) = (shape[r], la.strides()[r]);
    for_each_offset(&shape[..r], [&la.strides()[..r]], [la.offset()], |[i]| {
        if sa == 1 {
            out.extend(a[i..i + len].iter().map(|&x| f(x)));
        } else {
            out.extend((0..len).map(|k| f(a[i + k * sa])));
        }
    });
    out
}

/// Elementwise map of two strided inputs with the same shape (broadcast already applied).
pub(crate) fn map2<T: Copy + Send + Sync, U: Element>(
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
            let mut out = U::alloc_buffer(sa.len());
            sa.par_iter().zip(sb.par_iter()).map(|(&x, &y)| f(x, y)).collect_into_vec(&mut out);
            return out;
        }
        let mut out = U::alloc_buffer(sa.len());
        out.extend(sa.iter().zip(sb).map(|(&x, &y)| f(x, y)));
        return out;
    }
    // Outer dims by odometer, the innermost as a run: contiguous (stride 1) or broadcast
    // (stride 0) operands become slice loops the compiler can vectorise.
    let mut out = U::alloc_buffer(la.numel());
    let shape = la.shape();
    if shape.is_empty() {
        out.push(f(a[la.offset()], b[lb.offset()]));
        return out;
    }
    let r = shape.len() - 1;
    let (len, sa, sb) = (shape[r], la.strides()[r], lb.strides()[r]);
    for_each_offset(
        &shape[..r],
        [&la.strides()[..r], &lb.strides()[..r]],
        [la.offset(), lb.offset()],
        |[i, j]| match (sa, sb) {
            (1, 1) => out.extend(a[i..i + len].iter().zip(&b[j..j + len]).map(|(&x, &y)| f(x, y))),
            (1, 0) => {
                let y = b[j];
                out.extend(a[i..i + len].iter().map(|&x| f(x, y)));
            }
            (0, 1) => {
                let x = a[i];
                out.extend(b[j..j + len].iter().map(|&y| f(x, y)));
            }
            _ => out.extend((0..len).map(|k| f(a[i + k * sa], b[j + k * sb]))),
        },
    );
    out
}

/// Elementwise map of three strided inputs with the same shape.
#[allow(clippy::too_many_arguments)]
pub(crate) fn map3<T: Copy + Send + Sync, U: Element>(
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
            let mut out = U::alloc_buffer(sa.len());
            sa.par_iter()
                .zip(sb.par_iter())
                .zip(sc.par_iter())
                .map(|((&x, &y), &z)| f(x, y, z))
                .collect_into_vec(&mut out);
            return out;
        }
        let mut out = U::alloc_buffer(sa.len());
        out.extend(sa.iter().zip(sb).zip(sc).map(|((&x, &y), &z)| f(x, y, z)));
        return out;
    }
    let mut out = U::alloc_buffer(la.numel());
    let shape = la.shape();
    if shape.is_empty() {
        out.push(f(a[la.offset()], b[lb.offset()], c[lc.offset()]));
        return out;
    }
    let r = shape.len() - 1;
    let (len, sa, sb, sc) = (shape[r], la.strides()[r], lb.strides()[r], lc.strides()[r]);
    for_each_offset(
        &shape[..r],
        [&la.strides()[..r], &lb.strides()[..r], &lc.strides()[..r]],
        [la.offset(), lb.offset(), lc.offset()],
        |[i, j, k]| {
            if (sa, sb, sc) == (1, 1, 1) {
                out.extend(
                    a[i..i + len].iter().zip(&b[j..j + len]).zip(&c[k..k + len]).map(|((&x, &y), &z)| f(x, y, z)),
                );
            } else {
                out.extend((0..len).map(|t| f(a[i + t * sa], b[j + t * sb], c[k + t * sc])));
            }
        },
    );
    out
}
