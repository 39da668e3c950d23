//! Reductions: sum, mean, var, max/min (values and indices), argmax/argmin, logsumexp.

use std::sync::Arc;

use rayon::prelude::*;
use smallvec::smallvec;

use super::{check_float, cpu};
use crate::autograd::{no_grad, op_result, Grads};
use crate::device::Device;
use crate::dtype::{DType, Element, FloatElement};
use crate::shape::{contiguous_strides, for_each_offset, Dim, Dims, Layout};
use crate::storage::{with_cpu, with_float, CpuStorage, Storage};
use crate::tensor::Tensor;

/// Resolves and deduplicates reduction dims; an empty list means "all dims" (PyTorch).
#[track_caller]
fn resolve_dims<D: Dim>(op: &str, dims: &[D], rank: usize) -> Vec<bool> {
    let mut mask = vec![dims.is_empty(); rank];
    for &d in dims {
        let d = d.resolve(rank, op);
        if rank > 0 {
            if mask[d] && !dims.is_empty() {
                panic!("{op}: dimension {d} appears more than once in {dims:?}");
            }
            mask[d] = true;
        }
    }
    mask
}

fn kept_shape(shape: &[usize], mask: &[bool]) -> Dims {
    shape.iter().zip(mask).map(|(&d, &m)| if m { 1 } else { d }).collect()
}

fn out_shape(shape: &[usize], mask: &[bool], keepdim: bool) -> Dims {
    if keepdim {
        kept_shape(shape, mask)
    } else {
        shape.iter().zip(mask).filter(|(_, &m)| !m).map(|(&d, _)| d).collect()
    }
}

/// Sums `v` (viewed through `layout`) over the masked dims into a row-major buffer of the
/// kept shape. Accumulates in `f64` for accuracy at any length.
fn sum_kernel<T: FloatElement>(v: &[T], layout: &Layout, mask: &[bool]) -> Vec<T> {
    let shape = layout.shape();
    let kept = kept_shape(shape, mask);
    let n_out: usize = kept.iter().product();
    // Fast path: contiguous input reduced over a suffix of dims -> independent rows.
    let first_reduced = mask.iter().position(|&m| m).unwrap_or(mask.len());
    let suffix = mask[first_reduced..].iter().all(|&m| m);
    if let (Some(r), true) = (layout.contiguous_range(), suffix) {
        let src = &v[r];
        let row: usize = shape[first_reduced..].iter().product();
        let sum_row = |c: &[T]| T::from_f64(c.iter().map(|x| x.as_f64()).sum::<f64>());
        if row == 0 {
            return vec![T::zero(); n_out];
        }
        return if src.len() >= super::PAR_THRESHOLD && n_out > 1 {
            src.par_chunks(row).map(sum_row).collect()
        } else {
            src.chunks(row).map(sum_row).collect()
        };
    }
    let mut acc = vec![0f64; n_out];
    let mut ostrides = contiguous_strides(&kept);
    for (s, &m) in ostrides.iter_mut().zip(mask) {
        if m {
            *s = 0;
        }
    }
    for_each_offset(shape, [layout.strides(), &ostrides], [layout.offset(), 0], |[i, o]| acc[o] += v[i].as_f64());
    acc.into_iter().map(T::from_f64).collect()
}

impl Tensor {
    /// Sum of all elements, as a 0-d tensor.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let s = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]).sum();
    /// assert_eq!(s.shape(), &[] as &[usize]);
    /// assert_eq!(s.item(), 6.0);
    /// ```
    pub fn sum(&self) -> Tensor {
        self.sum_dims::<usize>(&[], false)
    }

    /// Sum over one dimension (negative counts from the back).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    /// assert_eq!(x.sum_dim(1, false).to_vec(), vec![3.0, 7.0]);
    /// assert_eq!(x.sum_dim(0, true).shape(), &[1, 2]);
    /// ```
    #[track_caller]
    pub fn sum_dim<D: Dim>(&self, dim: D, keepdim: bool) -> Tensor {
        self.sum_dims(&[dim], keepdim)
    }

    /// Sum over several dimensions; an empty list sums everything.
    #[track_caller]
    pub fn sum_dims<D: Dim>(&self, dims: &[D], keepdim: bool) -> Tensor {
        const OP: &str = "sum";
        check_float(OP, self);
        let mask = resolve_dims(OP, dims, self.rank());
        let oshape = out_shape(self.shape(), &mask, keepdim);
        let numel: usize = oshape.iter().product();
        let storage = match &*self.storage_arc() {
            Storage::Meta { dtype, .. } => Storage::Meta { dtype: *dtype, len: numel },
            Storage::Cpu(c) => {
                Storage::Cpu(with_float!(c, OP, T, v => T::into_storage(sum_kernel(v, self.layout(), &mask))))
            }
        };
        op_result(OP, Arc::new(storage), Layout::contiguous(&oshape), &[self], || {
            let in_shape: Dims = self.shape().into();
            let kept = kept_shape(self.shape(), &mask);
            move |g: &Tensor, _: &[bool]| -> Grads { smallvec![Some(g.reshape(&kept).expand(&in_shape))] }
        })
    }

    /// Mean of all elements, as a 0-d tensor.
    pub fn mean(&self) -> Tensor {
        self.mean_dims::<usize>(&[], false)
    }

    /// Mean over one dimension.
    #[track_caller]
    pub fn mean_dim<D: Dim>(&self, dim: D, keepdim: bool) -> Tensor {
        self.mean_dims(&[dim], keepdim)
    }

    /// Mean over several dimensions; an empty list averages everything.
    #[track_caller]
    pub fn mean_dims<D: Dim>(&self, dims: &[D], keepdim: bool) -> Tensor {
        let mask = resolve_dims("mean", dims, self.rank());
        let n: usize = self.shape().iter().zip(&mask).filter(|(_, &m)| m).map(|(&d, _)| d).product();
        self.sum_dims(dims, keepdim).div_scalar(n as f64)
    }

    /// Variance over several dimensions with Bessel's `correction` (1 = unbiased, the
    /// PyTorch default; 0 = biased).
    #[track_caller]
    pub fn var_dims<D: Dim>(&self, dims: &[D], correction: usize, keepdim: bool) -> Tensor {
        let mask = resolve_dims("var", dims, self.rank());
        let n: usize = self.shape().iter().zip(&mask).filter(|(_, &m)| m).map(|(&d, _)| d).product();
        let mean = self.mean_dims(dims, true);
        let sq = (self - &mean).square().sum_dims(dims, keepdim);
        sq.div_scalar(n.saturating_sub(correction) as f64)
    }

    /// Reduces a broadcast gradient back to `shape` by summing the broadcast dimensions.
    pub(crate) fn sum_to_shape(&self, shape: &[usize]) -> Tensor {
        if self.shape() == shape {
            return self.clone();
        }
        let lead = self.rank() - shape.len();
        let dims: Vec<usize> =
            (0..self.rank()).filter(|&i| i < lead || (shape[i - lead] == 1 && self.shape()[i] != 1)).collect();
        let s = if dims.is_empty() { self.clone() } else { self.sum_dims(&dims, true) };
        s.reshape(shape)
    }

    /// Index of the largest element along `dim` (first one on ties; NaN counts as
    /// largest), as `i64`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 5.0, 2.0, 7.0, 0.0, 3.0], &[2, 3]);
    /// assert_eq!(x.argmax(1, false).to_vec_i64(), vec![1, 0]);
    /// ```
    #[track_caller]
    pub fn argmax<D: Dim>(&self, dim: D, keepdim: bool) -> Tensor {
        self.arg_extreme("argmax", dim, keepdim, true)
    }

    /// Index of the smallest element along `dim` (first one on ties), as `i64`.
    #[track_caller]
    pub fn argmin<D: Dim>(&self, dim: D, keepdim: bool) -> Tensor {
        self.arg_extreme("argmin", dim, keepdim, false)
    }

    #[track_caller]
    fn arg_extreme<D: Dim>(&self, op: &'static str, dim: D, keepdim: bool, largest: bool) -> Tensor {
        let rank = self.rank();
        let d = dim.resolve(rank, op);
        let x = if rank == 0 { self.reshape(&[1]) } else { self.clone() };
        let n = x.shape()[d];
        if n == 0 {
            panic!("{op}: expected a non-empty dimension {d}, got shape {:?}", self.shape());
        }
        let mut mask = vec![false; x.rank()];
        mask[d] = true;
        let oshape = if rank == 0 { Dims::new() } else { out_shape(self.shape(), &mask, keepdim) };
        if self.device() == Device::Meta {
            return Tensor::full_on(&oshape, 0.0, DType::I64, Device::Meta);
        }
        // Move `dim` last, then scan contiguous rows.
        let mut perm: Vec<usize> = (0..x.rank()).filter(|&i| i != d).collect();
        perm.push(d);
        let moved = x.layout().permute(&perm);
        let s = x.storage_arc();
        let idx: Vec<i64> = with_cpu!(cpu(&s), T, v => {
            let rows = crate::storage::strided_to_vec(v, &moved);
            rows.chunks(n)
                .map(|row| {
                    let mut best = 0usize;
                    for (i, val) in row.iter().enumerate().skip(1) {
                        let b = &row[best];
                        // NaN (val != val) wins over everything and keeps the first NaN.
                        #[allow(clippy::eq_op)]
                        let val_nan = val != val;
                        #[allow(clippy::eq_op)]
                        let b_nan = b != b;
                        let better = if b_nan { false } else if val_nan { true } else if largest { val > b } else { val < b };
                        if better {
                            best = i;
                        }
                    }
                    best as i64
                })
                .collect()
        });
        Tensor::from_cpu(CpuStorage::I64(idx), &oshape)
    }

    /// Maximum along `dim`: `(values, indices)`; the gradient flows to the returned
    /// indices.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 5.0, 2.0, 7.0, 0.0, 3.0], &[2, 3]);
    /// let (v, i) = x.max_dim(1, false);
    /// assert_eq!(v.to_vec(), vec![5.0, 7.0]);
    /// assert_eq!(i.to_vec_i64(), vec![1, 0]);
    /// ```
    #[track_caller]
    pub fn max_dim<D: Dim>(&self, dim: D, keepdim: bool) -> (Tensor, Tensor) {
        self.extreme_dim(dim, keepdim, true)
    }

    /// Minimum along `dim`: `(values, indices)`.
    #[track_caller]
    pub fn min_dim<D: Dim>(&self, dim: D, keepdim: bool) -> (Tensor, Tensor) {
        self.extreme_dim(dim, keepdim, false)
    }

    #[track_caller]
    fn extreme_dim<D: Dim>(&self, dim: D, keepdim: bool, largest: bool) -> (Tensor, Tensor) {
        let op = if largest { "max" } else { "min" };
        check_float(op, self);
        if self.rank() == 0 {
            return (self.clone(), Tensor::from_cpu(CpuStorage::I64(vec![0]), &[]));
        }
        let d = dim.resolve(self.rank(), op);
        let idx = self.arg_extreme(op, d, true, largest);
        let vals = self.gather(d, &idx);
        if keepdim {
            (vals, idx)
        } else {
            (vals.squeeze_dim(d), idx.squeeze_dim(d))
        }
    }

    /// The largest element, as a 0-d tensor.
    #[track_caller]
    pub fn max(&self) -> Tensor {
        self.reshape(&[self.numel()]).max_dim(0, false).0
    }

    /// The smallest element, as a 0-d tensor.
    #[track_caller]
    pub fn min(&self) -> Tensor {
        self.reshape(&[self.numel()]).min_dim(0, false).0
    }

    /// `log(sum(exp(x)))` along `dim`, computed stably.
    #[track_caller]
    pub fn logsumexp<D: Dim>(&self, dim: D, keepdim: bool) -> Tensor {
        let d = dim.resolve(self.rank(), "logsumexp");
        let m = no_grad(|| self.max_dim(d, true).0);
        let m = no_grad(|| {
            // An all -inf row would give (-inf) - (-inf) = NaN; shift by 0 there.
            let inf = m.eq(&m.scalar_like(f64::NEG_INFINITY));
            m.masked_fill(&inf, 0.0)
        });
        let out = (self - &m).exp().sum_dim(d, true).log() + &m;
        if keepdim {
            out
        } else {
            out.squeeze_dim(d)
        }
    }
}
