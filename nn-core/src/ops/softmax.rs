//! Numerically stable softmax and log-softmax along a dimension.

use std::sync::Arc;

use rayon::prelude::*;
use smallvec::smallvec;

use super::check_float;
use crate::autograd::{op_result, Grads};
use crate::dtype::{Element, FloatElement};
use crate::shape::{Dim, Layout};
use crate::storage::{with_float, Storage};
use crate::tensor::Tensor;

/// Softmax (or log-softmax) of contiguous `x` viewed as `[outer, n, inner]` along `n`.
/// Each line subtracts its maximum first, so no `exp` overflows.
fn softmax_kernel<T: FloatElement>(x: &[T], outer: usize, n: usize, inner: usize, log: bool) -> Vec<T> {
    let mut out = vec![T::zero(); x.len()];
    if x.is_empty() {
        return out;
    }
    let block = n * inner;
    let run = |(xs, ys): (&[T], &mut [T])| {
        for j in 0..inner {
            let mut m = T::neg_infinity();
            for i in 0..n {
                let v = xs[i * inner + j];
                if v > m || v.is_nan() {
                    m = v;
                }
            }
            if m == T::neg_infinity() {
                m = T::zero(); // all -inf: exp gives 0/0 = NaN below, as PyTorch
            }
            let mut s = T::zero();
            for i in 0..n {
                let e = (xs[i * inner + j] - m).exp();
                ys[i * inner + j] = e;
                s = s + e;
            }
            if log {
                let ls = s.ln();
                for i in 0..n {
                    ys[i * inner + j] = xs[i * inner + j] - m - ls;
                }
            } else {
                let r = s.recip();
                for i in 0..n {
                    ys[i * inner + j] = ys[i * inner + j] * r;
                }
            }
        }
    };
    if x.len() >= super::PAR_THRESHOLD && outer > 1 {
        x.par_chunks(block).zip(out.par_chunks_mut(block)).for_each(run);
    } else {
        x.chunks(block).zip(out.chunks_mut(block)).for_each(run);
    }
    out
}

fn softmax_impl<D: Dim>(x: &Tensor, dim: D, log: bool) -> Tensor {
    let op = if log { "log_softmax" } else { "softmax" };
    check_float(op, x);
    let x0 = if x.rank() == 0 { x.reshape(&[1]) } else { x.clone() };
    let d = dim.resolve(x0.rank(), op);
    let shape = x0.shape();
    let (outer, n, inner) = (shape[..d].iter().product(), shape[d], shape[d + 1..].iter().product());
    let storage = Arc::new(match &*x.storage_arc() {
        Storage::Meta { dtype, .. } => Storage::Meta { dtype: *dtype, len: x.numel() },
        Storage::Cpu(c) => Storage::Cpu(with_float!(c, op, T, v => {
            let contiguous = crate::storage::strided_to_vec(v, x.layout());
            T::into_storage(softmax_kernel(&contiguous, outer, n, inner, log))
        })),
    });
    let y = storage.clone();
    op_result(op, storage, Layout::contiguous(x.shape()), &[x], || {
        let shape: crate::shape::Dims = x.shape().into();
        move |g: &Tensor, _: &[bool]| -> Grads {
            let y = Tensor::from_parts(y.clone(), Layout::contiguous(&shape), None);
            let (g1, y1) = if shape.is_empty() { (g.reshape(&[1]), y.reshape(&[1])) } else { (g.clone(), y) };
            let gx = if log {
                &g1 - &(y1.exp() * g1.sum_dim(d, true))
            } else {
                let gy = &g1 * &y1;
                &gy - &(&y1 * gy.sum_dim(d, true))
            };
            smallvec![Some(gx.reshape(&shape))]
        }
    })
}

impl Tensor {
    /// `exp(x) / sum(exp(x))` along `dim`, computed stably (the maximum is subtracted
    /// first).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let p = Tensor::from_vec(vec![1000.0, 1000.0], &[2]).softmax(0);
    /// assert_eq!(p.to_vec(), vec![0.5, 0.5]);
    /// ```
    #[track_caller]
    pub fn softmax<D: Dim>(&self, dim: D) -> Tensor {
        softmax_impl(self, dim, false)
    }

    /// `x - log(sum(exp(x)))` along `dim`, computed stably.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let l = Tensor::from_vec(vec![0.0, 0.0], &[2]).log_softmax(-1);
    /// assert!((l.to_vec()[0] + std::f32::consts::LN_2).abs() < 1e-7);
    /// ```
    #[track_caller]
    pub fn log_softmax<D: Dim>(&self, dim: D) -> Tensor {
        softmax_impl(self, dim, true)
    }
}
