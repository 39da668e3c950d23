//! Indexing ops: `index_select`, `gather`, and their adjoints `index_add` and
//! `scatter_add`; `embedding` lookup is built on `index_select`.

use std::sync::Arc;

use smallvec::smallvec;

use super::{check_same, cpu};
use crate::autograd::{op_result, Grads};
use crate::device::Device;
use crate::dtype::{DType, Element};

use crate::shape::{for_each_offset, Dim, Dims, Layout};
use crate::storage::{with_cpu, with_float, Storage};
use crate::tensor::Tensor;

/// The index values, checked to be `i64` and within `0..size` (negative indices count from
/// the back, as in PyTorch).
#[track_caller]
fn checked_indices(op: &str, index: &Tensor, size: usize, dim: usize) -> Vec<usize> {
    if index.dtype() != DType::I64 {
        panic!("{op}: index must be an i64 tensor, got {}", index.dtype());
    }
    index
        .to_vec_i64()
        .into_iter()
        .map(|i| {
            let j = if i < 0 { i + size as i64 } else { i };
            if j < 0 || j >= size as i64 {
                panic!("{op}: index {i} is out of bounds for dimension {dim} with size {size}");
            }
            j as usize
        })
        .collect()
}

/// `(outer, size, inner)` for `shape` split around `dim`.
fn split_at(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    (shape[..dim].iter().product(), shape[dim], shape[dim + 1..].iter().product())
}

impl Tensor {
    /// Selects entries `index[0], index[1], ...` along `dim` (`index`: 1-D `i64`).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::arange(0.0, 6.0, 1.0).reshape(&[3, 2]);
    /// let i = Tensor::from_vec_i64(vec![2, 0, 2], &[3]);
    /// assert_eq!(x.index_select(0, &i).to_vec(), vec![4.0, 5.0, 0.0, 1.0, 4.0, 5.0]);
    /// ```
    #[track_caller]
    pub fn index_select<D: Dim>(&self, dim: D, index: &Tensor) -> Tensor {
        const OP: &str = "index_select";
        if index.rank() > 1 {
            panic!("{OP}: index must be 1-D, got shape {:?}", index.shape());
        }
        let x = if self.rank() == 0 { self.reshape(&[1]) } else { self.clone() };
        let d = dim.resolve(x.rank(), OP);
        let mut shape: Dims = x.shape().into();
        shape[d] = index.numel();
        let storage = if self.device() == Device::Meta || index.device() == Device::Meta {
            if self.device() != index.device() {
                panic!("{OP}: input on {} but index on {}", self.device(), index.device());
            }
            Storage::Meta { dtype: self.dtype(), len: shape.iter().product() }
        } else {
            let idx = checked_indices(OP, index, x.shape()[d], d);
            let (outer, n, inner) = split_at(x.shape(), d);
            let s = x.storage_arc();
            Storage::Cpu(with_cpu!(cpu(&s), T, v => {
                let src = crate::storage::strided_to_vec(v, x.layout());
                let mut out = Vec::with_capacity(outer * idx.len() * inner);
                for o in 0..outer {
                    for &i in &idx {
                        let base = (o * n + i) * inner;
                        out.extend_from_slice(&src[base..base + inner]);
                    }
                }
                T::into_storage(out)
            }))
        };
        op_result(OP, Arc::new(storage), Layout::contiguous(&shape), &[&x], || {
            let index = index.detach();
            let in_shape: Dims = x.shape().into();
            move |g: &Tensor, _: &[bool]| -> Grads {
                let z = Tensor::full_on(&in_shape, 0.0, g.dtype(), g.device());
                smallvec![Some(z.index_add(d, &index, g))]
            }
        })
    }

    /// Returns `self` with `source` slices added at `index` along `dim` (functional
    /// `index_add_`): `out[.., index[j], ..] += source[.., j, ..]`.
    #[track_caller]
    pub fn index_add<D: Dim>(&self, dim: D, index: &Tensor, source: &Tensor) -> Tensor {
        const OP: &str = "index_add";
        let (device, dtype) = check_same(OP, &[self, source]);
        let d = dim.resolve(self.rank(), OP);
        let mut expect: Dims = self.shape().into();
        expect[d] = index.numel();
        if source.shape() != expect.as_slice() || index.rank() > 1 {
            panic!(
                "{OP}: source of shape {:?} and index of shape {:?} do not fit input of shape {:?} along dim {d} (source should be {:?})",
                source.shape(),
                index.shape(),
                self.shape(),
                expect.as_slice()
            );
        }
        let storage = if device == Device::Meta {
            Storage::Meta { dtype, len: self.numel() }
        } else {
            let idx = checked_indices(OP, index, self.shape()[d], d);
            let (outer, n, inner) = split_at(self.shape(), d);
            let (s, ss) = (self.storage_arc(), source.storage_arc());
            Storage::Cpu(with_float!(cpu(&s), OP, T, v => {
                let mut out = crate::storage::strided_to_vec(v, self.layout());
                let src = crate::storage::strided_to_vec(T::slice(cpu(&ss)).expect("same dtype"), source.layout());
                let k = idx.len();
                for o in 0..outer {
                    for (j, &i) in idx.iter().enumerate() {
                        let dst = (o * n + i) * inner;
                        let from = (o * k + j) * inner;
                        for t in 0..inner {
                            out[dst + t] = out[dst + t] + src[from + t];
                        }
                    }
                }
                T::into_storage(out)
            }))
        };
        op_result(OP, Arc::new(storage), Layout::contiguous(self.shape()), &[self, source], || {
            let index = index.detach();
            move |g: &Tensor, needs: &[bool]| -> Grads {
                smallvec![needs[0].then(|| g.clone()), needs[1].then(|| g.index_select(d, &index))]
            }
        })
    }

    /// `out[i][j][k] = self[i][index[i][j][k]][k]` for `dim = 1` (and likewise for other
    /// dims): picks one entry per index position. `index` has the rank of `self`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    /// let i = Tensor::from_vec_i64(vec![1, 0], &[2, 1]);
    /// assert_eq!(x.gather(1, &i).to_vec(), vec![2.0, 3.0]);
    /// ```
    #[track_caller]
    pub fn gather<D: Dim>(&self, dim: D, index: &Tensor) -> Tensor {
        const OP: &str = "gather";
        let d = dim.resolve(self.rank().max(1), OP);
        check_index_shape(OP, self, index, d);
        let storage = if self.device() == Device::Meta {
            Storage::Meta { dtype: self.dtype(), len: index.numel() }
        } else {
            let idx = checked_indices(OP, index, self.shape().get(d).copied().unwrap_or(1), d);
            let mut strides: Dims = self.strides().into();
            let step = strides.get(d).copied().unwrap_or(0);
            if !strides.is_empty() {
                strides[d] = 0;
            }
            let s = self.storage_arc();
            Storage::Cpu(with_cpu!(cpu(&s), T, v => {
                let mut out = Vec::with_capacity(index.numel());
                let mut j = 0;
                let il = Layout::contiguous(index.shape());
                for_each_offset(index.shape(), [il.strides(), &strides], [0, self.layout().offset()], |[_, o]| {
                    out.push(v[o + idx[j] * step]);
                    j += 1;
                });
                T::into_storage(out)
            }))
        };
        op_result(OP, Arc::new(storage), Layout::contiguous(index.shape()), &[self], || {
            let index = index.detach();
            let in_shape: Dims = self.shape().into();
            move |g: &Tensor, _: &[bool]| -> Grads {
                let z = Tensor::full_on(&in_shape, 0.0, g.dtype(), g.device());
                smallvec![Some(z.scatter_add(d, &index, g))]
            }
        })
    }

    /// Returns `self` with `src[p]` added at position `p` with dim `dim` replaced by
    /// `index[p]` (functional `scatter_add_`); the adjoint of [`gather`](Tensor::gather).
    #[track_caller]
    pub fn scatter_add<D: Dim>(&self, dim: D, index: &Tensor, src: &Tensor) -> Tensor {
        const OP: &str = "scatter_add";
        let (device, dtype) = check_same(OP, &[self, src]);
        let d = dim.resolve(self.rank().max(1), OP);
        check_index_shape(OP, self, index, d);
        if src.shape() != index.shape() {
            panic!("{OP}: src of shape {:?} must match index of shape {:?}", src.shape(), index.shape());
        }
        let storage = if device == Device::Meta {
            Storage::Meta { dtype, len: self.numel() }
        } else {
            let idx = checked_indices(OP, index, self.shape().get(d).copied().unwrap_or(1), d);
            let mut ostrides = crate::shape::contiguous_strides(self.shape());
            let step = ostrides.get(d).copied().unwrap_or(0);
            if !ostrides.is_empty() {
                ostrides[d] = 0;
            }
            let (s, ss) = (self.storage_arc(), src.storage_arc());
            Storage::Cpu(with_float!(cpu(&s), OP, T, v => {
                let mut out = crate::storage::strided_to_vec(v, self.layout());
                let sv = T::slice(cpu(&ss)).expect("same dtype");
                let mut j = 0;
                for_each_offset(index.shape(), [src.strides(), &ostrides], [src.layout().offset(), 0], |[si, o]| {
                    let t = o + idx[j] * step;
                    out[t] = out[t] + sv[si];
                    j += 1;
                });
                T::into_storage(out)
            }))
        };
        op_result(OP, Arc::new(storage), Layout::contiguous(self.shape()), &[self, src], || {
            let index = index.detach();
            move |g: &Tensor, needs: &[bool]| -> Grads {
                smallvec![needs[0].then(|| g.clone()), needs[1].then(|| g.gather(d, &index))]
            }
        })
    }

    /// Embedding lookup: rows of `weight` (`[num_embeddings, dim]`) picked by `indices`
    /// (`i64`, any shape); the output has shape `indices.shape() + [dim]`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let w = Tensor::arange(0.0, 6.0, 1.0).reshape(&[3, 2]);
    /// let ids = Tensor::from_vec_i64(vec![2, 0], &[1, 2]);
    /// let e = Tensor::embedding(&ids, &w);
    /// assert_eq!(e.shape(), &[1, 2, 2]);
    /// assert_eq!(e.to_vec(), vec![4.0, 5.0, 0.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn embedding(indices: &Tensor, weight: &Tensor) -> Tensor {
        if weight.rank() != 2 {
            panic!("embedding: weight must be 2-D [num_embeddings, embedding_dim], got shape {:?}", weight.shape());
        }
        if indices.dtype() != DType::I64 {
            panic!("embedding: indices must be an i64 tensor, got {}", indices.dtype());
        }
        if indices.device() != Device::Meta {
            let n = weight.shape()[0] as i64;
            if let Some(bad) = indices.to_vec_i64().into_iter().find(|&i| i < 0 || i >= n) {
                panic!("embedding: index {bad} is out of range for {n} embeddings");
            }
        }
        let flat = indices.reshape(&[indices.numel()]);
        let mut shape: Dims = indices.shape().into();
        shape.push(weight.shape()[1]);
        weight.index_select(0, &flat).reshape(&shape)
    }
}

#[track_caller]
fn check_index_shape(op: &str, x: &Tensor, index: &Tensor, d: usize) {
    if index.dtype() != DType::I64 {
        panic!("{op}: index must be an i64 tensor, got {}", index.dtype());
    }
    let ok = index.rank() == x.rank()
        && index.shape().iter().zip(x.shape()).enumerate().all(|(k, (&i, &s))| k == d || i <= s);
    if !ok {
        panic!(
            "{op}: index of shape {:?} does not fit input of shape {:?} (same rank, and no larger outside dim {d})",
            index.shape(),
            x.shape()
        );
    }
    if index.device() != x.device() {
        panic!("{op}: input on {} but index on {}", x.device(), index.device());
    }
}
