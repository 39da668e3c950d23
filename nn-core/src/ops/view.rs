//! Shape ops. Views (reshape of a viewable layout, permute, transpose, narrow, expand,
//! squeeze, unsqueeze) share storage and only change the layout; `cat` and `stack` copy.

use std::sync::Arc;

use smallvec::smallvec;

use super::check_same;
use crate::autograd::{op_result, Grads};
use crate::device::Device;
use crate::shape::{Dim, Dims, Layout};
use crate::storage::{CpuStorage, Storage};
use crate::tensor::Tensor;

impl Tensor {
    /// A tensor with the same storage and a new layout (a view), recording `backward`.
    fn view_op<B: crate::autograd::Backward>(
        &self,
        op: &'static str,
        layout: Layout,
        backward: impl FnOnce() -> B,
    ) -> Tensor {
        op_result(op, self.storage_arc(), layout, &[self], backward)
    }

    /// The same elements with a new shape: a view when the layout allows it (always for
    /// contiguous tensors), a copy otherwise.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::arange(0.0, 6.0, 1.0).reshape(&[2, 3]);
    /// assert_eq!(x.shape(), &[2, 3]);
    /// assert_eq!(x.t().reshape(&[6]).to_vec(), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    /// ```
    ///
    /// # Panics
    /// When the element counts differ.
    #[track_caller]
    pub fn reshape(&self, shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        if n != self.numel() {
            panic!(
                "reshape: shape {:?} is invalid for input of shape {:?} ({} elements)",
                shape,
                self.shape(),
                self.numel()
            );
        }
        if self.shape() == shape {
            return self.clone();
        }
        let src = match self.layout().reshape_view(shape) {
            Some(l) => return self.reshape_as_view(l),
            None => self.contiguous(),
        };
        let l = src.layout().reshape_view(shape).expect("contiguous layouts always reshape");
        src.reshape_as_view(l)
    }

    fn reshape_as_view(&self, layout: Layout) -> Tensor {
        self.view_op("reshape", layout, || {
            let shape: Dims = self.shape().into();
            move |g: &Tensor, _: &[bool]| -> Grads { smallvec![Some(g.reshape(&shape))] }
        })
    }

    /// Like [`reshape`](Tensor::reshape) but panics instead of copying (PyTorch's `view`).
    #[track_caller]
    pub fn view(&self, shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        if n != self.numel() {
            panic!(
                "view: shape {:?} is invalid for input of shape {:?} ({} elements)",
                shape,
                self.shape(),
                self.numel()
            );
        }
        match self.layout().reshape_view(shape) {
            Some(l) => self.reshape_as_view(l),
            None => panic!(
                "view: size {:?} is not compatible with the strides {:?} of input shape {:?}; use `reshape` (which copies)",
                shape,
                self.strides(),
                self.shape()
            ),
        }
    }

    /// Flattens dims `start..=end` into one (negative dims count from the back).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// assert_eq!(Tensor::zeros(&[2, 3, 4, 5]).flatten(1, -1).shape(), &[2, 60]);
    /// ```
    #[track_caller]
    pub fn flatten<D1: Dim, D2: Dim>(&self, start: D1, end: D2) -> Tensor {
        if self.rank() == 0 {
            return self.reshape(&[1]);
        }
        let (s, e) = (start.resolve(self.rank(), "flatten"), end.resolve(self.rank(), "flatten"));
        if s > e {
            panic!("flatten: start dim {s} comes after end dim {e}");
        }
        let sh = self.shape();
        let mut shape: Dims = sh[..s].into();
        shape.push(sh[s..=e].iter().product());
        shape.extend_from_slice(&sh[e + 1..]);
        self.reshape(&shape)
    }

    /// Reorders dimensions: output dim `i` is input dim `perm[i]` (a view).
    ///
    /// # Panics
    /// When `perm` is not a permutation of `0..rank`.
    #[track_caller]
    pub fn permute(&self, perm: &[usize]) -> Tensor {
        let r = self.rank();
        let mut seen = vec![false; r];
        if perm.len() != r || perm.iter().any(|&p| p >= r || std::mem::replace(&mut seen[p], true)) {
            panic!("permute: {perm:?} is not a permutation of the {r} dims of shape {:?}", self.shape());
        }
        let layout = self.layout().permute(perm);
        self.view_op("permute", layout, || {
            let mut inv = vec![0; r];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            move |g: &Tensor, _: &[bool]| -> Grads { smallvec![Some(g.permute(&inv))] }
        })
    }

    /// Swaps two dimensions (a view).
    #[track_caller]
    pub fn transpose<D1: Dim, D2: Dim>(&self, d0: D1, d1: D2) -> Tensor {
        let (a, b) = (d0.resolve(self.rank(), "transpose"), d1.resolve(self.rank(), "transpose"));
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// Transpose of a matrix (a view); tensors of rank below 2 are returned as they are.
    ///
    /// # Panics
    /// For rank above 2, like PyTorch (use [`transpose`](Tensor::transpose)).
    #[track_caller]
    pub fn t(&self) -> Tensor {
        match self.rank() {
            0 | 1 => self.clone(),
            2 => self.transpose(0, 1),
            r => panic!(
                "t: expects a tensor with <= 2 dimensions, got {r} (shape {:?}); use `transpose(d0, d1)`",
                self.shape()
            ),
        }
    }

    /// Elements `start..start + len` along `dim` (a view).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::arange(0.0, 6.0, 1.0).reshape(&[2, 3]);
    /// assert_eq!(x.narrow(1, 1, 2).to_vec(), vec![1.0, 2.0, 4.0, 5.0]);
    /// ```
    #[track_caller]
    pub fn narrow<D: Dim>(&self, dim: D, start: usize, len: usize) -> Tensor {
        let d = dim.resolve(self.rank(), "narrow");
        let size = self.shape()[d];
        if start.checked_add(len).is_none_or(|end| end > size) {
            panic!(
                "narrow: start {start} + length {len} exceeds size {size} of dimension {d} (shape {:?})",
                self.shape()
            );
        }
        let layout = self.layout().narrow(d, start, len);
        self.view_op("narrow", layout, || {
            let shape: Dims = self.shape().into();
            move |g: &Tensor, _: &[bool]| -> Grads { smallvec![Some(pad_narrow(g, &shape, d, start))] }
        })
    }

    /// Splits into pieces of `size` along `dim` (the last may be smaller).
    #[track_caller]
    pub fn split<D: Dim>(&self, size: usize, dim: D) -> Vec<Tensor> {
        let d = dim.resolve(self.rank(), "split");
        if size == 0 {
            panic!("split: size must be positive");
        }
        let n = self.shape()[d];
        (0..n).step_by(size).map(|s| self.narrow(d, s, size.min(n - s))).collect()
    }

    /// Splits into `chunks` nearly equal pieces along `dim` (as `torch.chunk`).
    #[track_caller]
    pub fn chunk<D: Dim>(&self, chunks: usize, dim: D) -> Vec<Tensor> {
        if chunks == 0 {
            panic!("chunk: number of chunks must be positive");
        }
        let d = dim.resolve(self.rank(), "chunk");
        let n = self.shape()[d];
        self.split(n.div_ceil(chunks).max(1), d)
    }

    /// Broadcasts to `shape` without copying (stride 0 on repeated dims).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0], &[2, 1]).expand(&[2, 3]);
    /// assert_eq!(x.strides(), &[1, 0]);
    /// assert_eq!(x.to_vec(), vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn expand(&self, shape: &[usize]) -> Tensor {
        if self.shape() == shape {
            return self.clone();
        }
        let Some(layout) = self.layout().broadcast_to(shape) else {
            panic!("expand: shape {:?} cannot be expanded to {:?}", self.shape(), shape);
        };
        self.view_op("expand", layout, || {
            let shape: Dims = self.shape().into();
            move |g: &Tensor, _: &[bool]| -> Grads { smallvec![Some(g.sum_to_shape(&shape))] }
        })
    }

    /// Broadcasts to the shape of `other`.
    #[track_caller]
    pub fn expand_as(&self, other: &Tensor) -> Tensor {
        self.expand(other.shape())
    }

    /// Inserts a dimension of size 1 at `dim` (`0..=rank`; negative counts from the back).
    #[track_caller]
    pub fn unsqueeze<D: Dim>(&self, dim: D) -> Tensor {
        let d = dim.resolve(self.rank() + 1, "unsqueeze");
        let mut shape: Dims = self.shape().into();
        shape.insert(d, 1);
        self.reshape(&shape)
    }

    /// Removes dimension `dim` if its size is 1 (otherwise returns the tensor unchanged,
    /// like PyTorch).
    #[track_caller]
    pub fn squeeze_dim<D: Dim>(&self, dim: D) -> Tensor {
        if self.rank() == 0 {
            return self.clone();
        }
        let d = dim.resolve(self.rank(), "squeeze");
        if self.shape()[d] != 1 {
            return self.clone();
        }
        let mut shape: Dims = self.shape().into();
        shape.remove(d);
        self.reshape(&shape)
    }

    /// Removes every dimension of size 1.
    pub fn squeeze(&self) -> Tensor {
        let shape: Dims = self.shape().iter().copied().filter(|&d| d != 1).collect();
        self.reshape(&shape)
    }

    /// Concatenates tensors along `dim`; all other dims must agree.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let a = Tensor::ones(&[1, 2]);
    /// let b = Tensor::zeros(&[2, 2]);
    /// let c = Tensor::cat(&[&a, &b], 0);
    /// assert_eq!(c.shape(), &[3, 2]);
    /// assert_eq!(c.to_vec(), vec![1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn cat<D: Dim>(tensors: &[&Tensor], dim: D) -> Tensor {
        const OP: &str = "cat";
        if tensors.is_empty() {
            panic!("{OP}: expected a non-empty list of tensors");
        }
        let (device, dtype) = check_same(OP, tensors);
        let first = tensors[0];
        if first.rank() == 0 {
            panic!("{OP}: zero-dimensional tensors cannot be concatenated");
        }
        let d = dim.resolve(first.rank(), OP);
        let mut shape: Dims = first.shape().into();
        shape[d] = 0;
        for (i, t) in tensors.iter().enumerate() {
            let ok = t.rank() == first.rank()
                && t.shape().iter().zip(first.shape()).enumerate().all(|(k, (a, b))| k == d || a == b);
            if !ok {
                panic!(
                    "{OP}: sizes must match except in dimension {d}; tensor 0 has shape {:?}, tensor {i} has shape {:?}",
                    first.shape(),
                    t.shape()
                );
            }
            shape[d] += t.shape()[d];
        }
        let out_layout = Layout::contiguous(&shape);
        let storage = if device == Device::Meta {
            Storage::Meta { dtype, len: out_layout.numel() }
        } else {
            let mut out = CpuStorage::zeros(dtype, out_layout.numel());
            let mut start = 0;
            for t in tensors {
                let len = t.shape()[d];
                let target = out_layout.narrow(d, start, len);
                let s = t.storage_arc();
                crate::tensor::scatter_into(&mut out, &target, &super::cpu(&s).gather_layout(t.layout()));
                start += len;
            }
            Storage::Cpu(out)
        };
        let sizes: Vec<usize> = tensors.iter().map(|t| t.shape()[d]).collect();
        op_result(OP, Arc::new(storage), out_layout, tensors, || {
            move |g: &Tensor, needs: &[bool]| -> Grads {
                let mut start = 0;
                sizes
                    .iter()
                    .zip(needs)
                    .map(|(&len, &need)| {
                        let r = need.then(|| g.narrow(d, start, len));
                        start += len;
                        r
                    })
                    .collect()
            }
        })
    }

    /// Stacks equally shaped tensors along a new dimension `dim`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let s = Tensor::stack(&[&Tensor::ones(&[2]), &Tensor::zeros(&[2])], 1);
    /// assert_eq!(s.shape(), &[2, 2]);
    /// assert_eq!(s.to_vec(), vec![1.0, 0.0, 1.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn stack<D: Dim>(tensors: &[&Tensor], dim: D) -> Tensor {
        if tensors.is_empty() {
            panic!("stack: expected a non-empty list of tensors");
        }
        for (i, t) in tensors.iter().enumerate() {
            if t.shape() != tensors[0].shape() {
                panic!(
                    "stack: expects each tensor to be equal size, but got {:?} at entry 0 and {:?} at entry {i}",
                    tensors[0].shape(),
                    t.shape()
                );
            }
        }
        let d = dim.resolve(tensors[0].rank() + 1, "stack");
        let us: Vec<Tensor> = tensors.iter().map(|t| t.unsqueeze(d)).collect();
        Tensor::cat(&us.iter().collect::<Vec<_>>(), d)
    }
}

/// Zeros of `shape` with `g` written at `start..` along `dim` (backward of `narrow`).
fn pad_narrow(g: &Tensor, shape: &[usize], dim: usize, start: usize) -> Tensor {
    let out = Tensor::full_on(shape, 0.0, g.dtype(), g.device());
    if g.device() == Device::Meta {
        return out;
    }
    let target = Layout::contiguous(shape).narrow(dim, start, g.shape()[dim]);
    let s = g.storage_arc();
    let vals = super::cpu(&s).gather_layout(g.layout());
    out.modify_storage("narrow backward", |dst, _| crate::tensor::scatter_into(dst, &target, &vals));
    out
}
