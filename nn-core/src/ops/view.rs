//! Shape ops. Views (reshape of a viewable layout, permute, transpose, narrow, expand,
//! squeeze, unsqueeze) share storage and only change the layout; `cat` and `stack` copy.

use std::sync::Arc;

use smallvec::smallvec;

use super::check_same;
use crate::autograd::{op_result, op_result_in, Grads};
use crate::backend::Storage;
use crate::shape::{Dim, Dims, Layout};
use crate::tensor::Tensor;

impl Tensor {
    /// A tensor with the same storage and a new layout (a view: an alias reading this
    /// tensor's slot), recording `backward`.
    fn view_op<B: crate::autograd::Backward>(
        &self,
        op: &'static str,
        layout: Layout,
        backward: impl FnOnce() -> B,
    ) -> Tensor {
        let view = op_result_in(op, self.slot(), layout, &[self], backward);
        // A view of a value saved for backward is one too: it keeps the version check
        // (else a backward's `b.transpose(..)` of a saved weight would read it unchecked).
        match self.0.saved_version {
            Some(v) => Tensor::in_slot_at(view.slot(), view.layout().clone(), view.0.grad_fn.clone(), Some(v)),
            None => view,
        }
    }

    /// The same elements with a new shape: a view when the layout allows it (always for
    /// contiguous tensors), a copy otherwise. One dimension may be `-1` (or `()`), inferred
    /// from the element count, as PyTorch's: see [`ShapeSpec`](crate::ShapeSpec) for the
    /// forms a shape takes.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::arange(0.0, 6.0, 1.0).reshape(&[2, 3]);
    /// assert_eq!(x.shape(), &[2, 3]);
    /// assert_eq!(x.t().reshape(&[6]).to_vec(), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    /// assert_eq!(x.reshape((3, -1)).shape(), &[3, 2]);
    /// ```
    ///
    /// # Panics
    /// When the element counts differ, or with more than one dimension to infer.
    #[track_caller]
    pub fn reshape(&self, shape: impl crate::ShapeSpec) -> Tensor {
        let shape = &crate::shape_spec::resolve(&shape, self.numel(), "reshape", self.shape())[..];
        let _op = crate::autograd::entry::enter_uncast(crate::names::RESHAPE, &[self], &[], || {
            vec![("shape", crate::autograd::trace::ints(shape))]
        });
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

    /// Like [`reshape`](Tensor::reshape) but panics instead of copying (PyTorch's `view`);
    /// `-1` infers a dimension as there.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::zeros(&[4, 6]);
    /// let (b, t) = (2, 2);
    /// assert_eq!(x.view((b, t, -1)).shape(), &[2, 2, 6]);
    /// ```
    #[track_caller]
    pub fn view(&self, shape: impl crate::ShapeSpec) -> Tensor {
        let shape = &crate::shape_spec::resolve(&shape, self.numel(), "view", self.shape())[..];
        let _op = crate::autograd::entry::enter_uncast(crate::names::RESHAPE, &[self], &[], || {
            vec![("shape", crate::autograd::trace::ints(shape))]
        });
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
            // The dims are still checked: a 0-d tensor has dims 0 and -1 only.
            start.resolve(0, "flatten");
            end.resolve(0, "flatten");
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
        let _op = crate::autograd::entry::enter_uncast(crate::names::PERMUTE, &[self], &[], || {
            vec![("perm", crate::autograd::trace::ints(perm))]
        });
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
        if self.rank() == 0 {
            // A 0-d tensor (dims 0 and -1 both resolve to 0) is its own transpose, as in
            // PyTorch; there is no permutation to swap in.
            return self.clone();
        }
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

    /// Elements `start..start + len` along `dim` (a view); `start` may be negative, counting
    /// from the end, as PyTorch's.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::arange(0.0, 6.0, 1.0).reshape(&[2, 3]);
    /// assert_eq!(x.narrow(1, 1, 2).to_vec(), vec![1.0, 2.0, 4.0, 5.0]);
    /// // A negative start counts from the end: the last column, PyTorch's `x[:, -1:]`.
    /// assert_eq!(x.narrow(1, -1, 1).to_vec(), vec![2.0, 5.0]);
    /// ```
    #[track_caller]
    pub fn narrow<D: Dim>(&self, dim: D, start: impl crate::Start, len: usize) -> Tensor {
        if self.rank() == 0 {
            panic!("narrow: cannot be applied to a 0-d tensor (it has no dimension to narrow)");
        }
        let start = start.resolve(self.shape()[dim.resolve(self.rank(), "narrow")], "narrow");
        let _op = crate::autograd::entry::enter_uncast(crate::names::NARROW, &[self], &[], || {
            vec![
                ("dim", crate::autograd::trace::int(dim.resolve(self.rank(), "narrow"))),
                ("start", crate::autograd::trace::int(start)),
                ("len", crate::autograd::trace::int(len)),
            ]
        });
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
        if n == 0 {
            // One empty piece, as PyTorch's (code zipping the pieces expects one).
            return vec![self.narrow(d, 0, 0)];
        }
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
    /// // -1 keeps a size, as PyTorch's `expand(4, -1, 3)`.
    /// assert_eq!(Tensor::zeros(&[2, 1]).expand((4, -1, 3)).shape(), &[4, 2, 3]);
    /// ```
    #[track_caller]
    pub fn expand(&self, shape: impl crate::ShapeSpec) -> Tensor {
        let shape = &crate::shape_spec::resolve_expand(&shape, self.shape())[..];
        let _op = crate::autograd::entry::enter_uncast(crate::names::EXPAND, &[self], &[], || {
            vec![("shape", crate::autograd::trace::ints(shape))]
        });
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
            dim.resolve(0, "squeeze");
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
        let again =
            |c: &[Option<&crate::Tensor>]| Tensor::cat(&c.iter().map(|t| t.expect("present")).collect::<Vec<_>>(), dim);
        let attrs = || {
            let rank = tensors.iter().find(|t| t.shape() != [0]).or(tensors.first()).map_or(1, |t| t.rank());
            vec![("dim", crate::autograd::trace::int(dim.resolve(rank, "cat")))]
        };
        let _op = match crate::autograd::entry::enter(crate::names::CAT, tensors, &[], attrs, again) {
            crate::autograd::entry::Entered::Done(y) => return y,
            crate::autograd::entry::Entered::Run(op) => op,
        };
        const OP: &str = crate::names::CAT;
        if tensors.is_empty() {
            panic!("{OP}: expected a non-empty list of tensors");
        }
        let (device, dtype) = check_same(OP, tensors);
        // PyTorch's legacy rule: a 1-D empty operand (`shape [0]`) is skipped whatever the
        // others' shapes, so `cat([torch.zeros(0), x], 1)` is `x`.
        let skipped = |t: &Tensor| t.shape() == [0];
        let first = *tensors.iter().find(|t| !skipped(t)).unwrap_or(&tensors[0]);
        if first.rank() == 0 {
            panic!("{OP}: zero-dimensional tensors cannot be concatenated");
        }
        let d = dim.resolve(first.rank(), OP);
        let mut shape: Dims = first.shape().into();
        shape[d] = 0;
        for (i, t) in tensors.iter().enumerate() {
            if skipped(t) && !std::ptr::eq(*t, first) {
                continue;
            }
            let ok = t.rank() == first.rank()
                && t.shape().iter().zip(first.shape()).enumerate().all(|(k, (a, b))| k == d || a == b);
            if !ok {
                panic!(
                    "{OP}: sizes must match except in dimension {d}; tensor 0 has shape {:?}, tensor {i} has shape {:?}",
                    first.shape(),
                    t.shape()
                );
            }
            shape[d] = shape[d].saturating_add(t.shape()[d]);
        }
        crate::shape::numel_of(OP, &shape);
        let out_layout = Layout::contiguous(&shape);
        let mut storage = Storage::full(device, dtype, out_layout.numel(), 0.0);
        // Each operand's length along `d`; `None` for a skipped one.
        let sizes: Vec<Option<usize>> =
            tensors.iter().map(|t| (!skipped(t) || std::ptr::eq(*t, first)).then(|| t.shape()[d])).collect();
        let mut start = 0;
        for (t, len) in tensors.iter().zip(&sizes) {
            if let Some(len) = *len {
                storage.write_from(&out_layout.narrow(d, start, len), &t.storage_arc(), t.layout());
                start += len;
            }
        }
        op_result(OP, Arc::new(storage), out_layout, tensors, || {
            move |g: &Tensor, needs: &[bool]| -> Grads {
                let mut start = 0;
                sizes
                    .iter()
                    .zip(needs)
                    .map(|(&len, &need)| match len {
                        Some(len) => {
                            let r = need.then(|| g.narrow(d, start, len));
                            start += len;
                            r
                        }
                        None => need.then(|| Tensor::full_on(&[0], 0.0, g.dtype(), g.device())),
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
        let args: Vec<Option<&Tensor>> = tensors.iter().map(|t| Some(*t)).collect();
        let _op = crate::autograd::entry::op_entry!(untraced crate::names::STACK, args = &args, again = |c| {
            Tensor::stack(&c.iter().map(|t| t.expect("present")).collect::<Vec<_>>(), dim)
        });
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
    let target = Layout::contiguous(shape).narrow(dim, start, g.shape()[dim]);
    let mut out = Storage::full(g.device(), g.dtype(), shape.iter().product(), 0.0);
    out.write_from(&target, &g.storage_arc(), g.layout());
    Tensor::from_storage(out, shape)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::testing::gradcheck;
    use crate::testing::support::{check_noncontig, grad, leaf, t64, transposed_storage};
    use crate::{DType, Device, Tensor};

    /// `[[0, 1, 2], [3, 4, 5]]`.
    fn x23() -> Tensor {
        leaf(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[2, 3])
    }

    /// `0..12` as `[2, 3, 2]`.
    fn x322() -> Tensor {
        leaf(&(0..12).map(f64::from).collect::<Vec<_>>(), &[2, 3, 2])
    }

    /// Weights `1, 2, 3, ...` shaped like `y`, so each output position is told apart.
    fn ramp(y: &Tensor) -> Tensor {
        t64(&(1..=y.numel()).map(|v| v as f64).collect::<Vec<_>>(), y.shape())
    }

    /// Backward of `(y * ramp).sum()`: each input gets the weights of the outputs it feeds.
    fn backward_ramp(y: &Tensor) {
        (y * &ramp(y)).sum().backward();
    }

    fn shares_storage(a: &Tensor, b: &Tensor) -> bool {
        Arc::ptr_eq(&a.storage_arc(), &b.storage_arc())
    }

    fn g322() -> Tensor {
        t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4, -0.15, 0.9, 1.6, -2.1, 0.05, 0.75], &[2, 3, 2])
    }

    #[test]
    fn reshape_and_view_forward_backward_gradcheck() {
        let x = x23();
        let y = x.reshape(&[3, 2]);
        assert_eq!(y.shape(), &[3, 2]);
        assert_eq!(y.to_vec_f64(), x.to_vec_f64());
        assert!(shares_storage(&x, &y), "reshape of a contiguous tensor is a view");
        let v = x.view(&[6]);
        assert!(shares_storage(&x, &v));
        backward_ramp(&(&y.exp() + &v.reshape(&[3, 2])));
        let e: Vec<f64> = (0..6).map(|i| (i as f64).exp() * (i + 1) as f64 + (i + 1) as f64).collect();
        crate::testing::support::assert_close64(&grad(&x), &e, 1e-14);
        let g = g322();
        gradcheck(|t| t[0].reshape(&[3, 4]), std::slice::from_ref(&g)).unwrap();
        gradcheck(|t| t[0].view(&[4, 3]), std::slice::from_ref(&g)).unwrap();
    }

    #[test]
    fn reshape_of_a_transposed_tensor_copies_in_logical_order() {
        let x = x23();
        let y = x.t().reshape(&[6]);
        assert_eq!(y.to_vec_f64(), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        assert!(!shares_storage(&x, &y));
        backward_ramp(&y);
        assert_eq!(grad(&x), vec![1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
        gradcheck(|t| t[0].transpose(0, 2).reshape(&[12]), &[g322()]).unwrap();
    }

    #[test]
    fn flatten_forward_backward_gradcheck() {
        let x = x322();
        let y = x.flatten(1, 2);
        assert_eq!(y.shape(), &[2, 6]);
        assert_eq!(x.flatten(0, -1).shape(), &[12]);
        assert_eq!(x.flatten(0, 1).shape(), &[6, 2]);
        assert_eq!(x.flatten(1, 1).shape(), &[2, 3, 2]);
        assert_eq!(y.to_vec_f64(), x.to_vec_f64());
        backward_ramp(&y.square());
        let e: Vec<f64> = (0..12).map(|i| 2.0 * i as f64 * (i + 1) as f64).collect();
        assert_eq!(grad(&x), e);
        gradcheck(|t| t[0].flatten(0, 1), &[g322()]).unwrap();
    }

    #[test]
    fn permute_forward_backward_gradcheck() {
        let x = x322();
        let y = x.permute(&[2, 0, 1]);
        assert_eq!(y.shape(), &[2, 2, 3]);
        // y[a, b, c] = x[b, c, a] = 6b + 2c + a.
        assert_eq!(y.to_vec_f64(), vec![0., 2., 4., 6., 8., 10., 1., 3., 5., 7., 9., 11.]);
        assert!(shares_storage(&x, &y) && !y.is_contiguous());
        backward_ramp(&y);
        assert_eq!(grad(&x), vec![1., 7., 2., 8., 3., 9., 4., 10., 5., 11., 6., 12.]);
        gradcheck(|t| t[0].permute(&[1, 2, 0]).exp(), &[g322()]).unwrap();
    }

    #[test]
    fn transpose_and_t_forward_backward_gradcheck() {
        for y in [x23().transpose(0, 1), x23().transpose(-1, 0)] {
            assert_eq!(y.shape(), &[3, 2]);
            assert_eq!(y.to_vec_f64(), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        }
        let x = x23();
        backward_ramp(&x.t());
        assert_eq!(grad(&x), vec![1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
        let v = leaf(&[1.0, 2.0], &[2]);
        assert_eq!(v.t().shape(), &[2]);
        let g = g322();
        gradcheck(|t| t[0].transpose(0, 2), std::slice::from_ref(&g)).unwrap();
        gradcheck(|t| t[0].narrow(2, 0, 1).reshape(&[2, 3]).t().exp(), std::slice::from_ref(&g)).unwrap();
    }

    #[test]
    fn narrow_forward_backward_gradcheck() {
        let x = x23();
        let y = x.narrow(1, 1, 2);
        assert_eq!(y.to_vec_f64(), vec![1.0, 2.0, 4.0, 5.0]);
        assert!(shares_storage(&x, &y));
        assert_eq!(x.narrow(0, 1, 1).to_vec_f64(), vec![3.0, 4.0, 5.0]);
        assert_eq!(x.narrow(-1, 3, 0).shape(), &[2, 0]);
        backward_ramp(&y.exp());
        let e = [0.0, 1f64.exp(), 2.0 * 2f64.exp(), 0.0, 3.0 * 4f64.exp(), 4.0 * 5f64.exp()];
        crate::testing::support::assert_close64(&grad(&x), &e, 1e-14);
        gradcheck(|t| t[0].narrow(1, 1, 2), &[g322()]).unwrap();
        gradcheck(|t| t[0].narrow(0, 1, 1).narrow(2, 1, 1), &[g322()]).unwrap();
    }

    #[test]
    fn split_and_chunk_forward_backward_gradcheck() {
        let x = x23();
        let parts = x.split(2, 1);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].to_vec_f64(), vec![0.0, 1.0, 3.0, 4.0]);
        assert_eq!((parts[1].shape(), parts[1].to_vec_f64()), (&[2, 1][..], vec![2.0, 5.0]));
        (parts[0].sum() + parts[1].sum() * 10.0).backward();
        assert_eq!(grad(&x), vec![1.0, 1.0, 10.0, 1.0, 1.0, 10.0]);

        let y = leaf(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[3, 2]);
        let c = y.chunk(2, 0);
        assert_eq!(c.iter().map(|t| t.shape()[0]).collect::<Vec<_>>(), vec![2, 1]);
        assert_eq!(c[1].to_vec_f64(), vec![4.0, 5.0]);
        assert_eq!(y.chunk(3, -1).len(), 2, "chunk never returns more than the size");
        assert_eq!(
            x23().chunk(3, 1).iter().map(|t| t.to_vec_f64()).collect::<Vec<_>>(),
            vec![vec![0.0, 3.0], vec![1.0, 4.0], vec![2.0, 5.0]]
        );
        (c[0].exp().sum() + c[1].sum() * -2.0).backward();
        let e = [1.0, 1f64.exp(), 2f64.exp(), 3f64.exp(), -2.0, -2.0];
        crate::testing::support::assert_close64(&grad(&y), &e, 1e-14);
        gradcheck(|t| Tensor::cat(&t[0].split(2, 1).iter().rev().collect::<Vec<_>>(), 1), &[g322()]).unwrap();
        gradcheck(|t| t[0].chunk(2, 0)[1].exp(), &[g322()]).unwrap();
    }

    #[test]
    fn expand_forward_backward_gradcheck() {
        let x = leaf(&[1.0, 2.0], &[2, 1]);
        let y = x.expand(&[2, 3]);
        assert_eq!(y.to_vec_f64(), vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
        assert_eq!(y.strides(), &[1, 0]);
        backward_ramp(&y);
        assert_eq!(grad(&x), vec![6.0, 15.0]);
        let r = leaf(&[1.0, 2.0, 3.0], &[3]);
        let z = r.expand(&[2, 3]);
        assert_eq!(z.to_vec_f64(), vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
        backward_ramp(&z);
        assert_eq!(grad(&r), vec![5.0, 7.0, 9.0]);
        let s = Tensor::from_vec_f64(vec![0.5], &[]).requires_grad_(true);
        backward_ramp(&s.expand(&[2, 2]));
        assert_eq!(s.grad().unwrap().to_vec_f64(), vec![10.0]);
        gradcheck(|t| t[0].expand(&[2, 2, 3, 2]).exp(), &[t64(&[0.1, 0.2, 0.3, -0.4, 0.5, 0.6], &[1, 3, 2])]).unwrap();
        assert_eq!(x.expand_as(&Tensor::zeros(&[2, 4])).shape(), &[2, 4]);
    }

    #[test]
    fn unsqueeze_squeeze_forward_backward_gradcheck() {
        let x = x23();
        assert_eq!(x.unsqueeze(0).shape(), &[1, 2, 3]);
        assert_eq!(x.unsqueeze(1).shape(), &[2, 1, 3]);
        assert_eq!(x.unsqueeze(2).shape(), &[2, 3, 1]);
        assert_eq!(x.unsqueeze(-1).shape(), &[2, 3, 1]);
        assert_eq!(x.unsqueeze(-3).shape(), &[1, 2, 3]);
        let u = x.unsqueeze(1).unsqueeze(3);
        assert_eq!(u.shape(), &[2, 1, 3, 1]);
        assert_eq!(u.squeeze().shape(), &[2, 3]);
        assert_eq!(u.squeeze_dim(1).shape(), &[2, 3, 1]);
        assert_eq!(u.squeeze_dim(-1).shape(), &[2, 1, 3]);
        assert_eq!(u.squeeze_dim(0).shape(), &[2, 1, 3, 1], "a dim of size != 1 is left alone");
        assert_eq!(u.squeeze().to_vec_f64(), x.to_vec_f64());
        backward_ramp(&u.squeeze_dim(3));
        assert_eq!(grad(&x), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let g = g322();
        gradcheck(|t| t[0].unsqueeze(1).exp(), std::slice::from_ref(&g)).unwrap();
        gradcheck(|t| t[0].narrow(1, 0, 1).squeeze(), std::slice::from_ref(&g)).unwrap();
        gradcheck(|t| t[0].narrow(2, 1, 1).squeeze_dim(-1), std::slice::from_ref(&g)).unwrap();
    }

    #[test]
    fn cat_forward_backward_gradcheck() {
        let a = leaf(&[1.0, 2.0, 3.0], &[1, 3]);
        let b = leaf(&[4.0, 5.0, 6.0, 7.0, 8.0, 9.0], &[2, 3]);
        let y = Tensor::cat(&[&a, &b], 0);
        assert_eq!(y.shape(), &[3, 3]);
        assert_eq!(y.to_vec_f64(), (1..=9).map(f64::from).collect::<Vec<_>>());
        backward_ramp(&y);
        assert_eq!(grad(&a), vec![1.0, 2.0, 3.0]);
        assert_eq!(grad(&b), vec![4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);

        let c = leaf(&[1.0, 2.0], &[2, 1]);
        let d = leaf(&[3.0, 4.0, 5.0, 6.0], &[2, 2]);
        let z = Tensor::cat(&[&d, &c, &d], -1);
        assert_eq!(z.shape(), &[2, 5]);
        assert_eq!(z.to_vec_f64(), vec![3.0, 4.0, 1.0, 3.0, 4.0, 5.0, 6.0, 2.0, 5.0, 6.0]);
        backward_ramp(&z);
        assert_eq!(grad(&c), vec![3.0, 8.0]);
        // d appears twice: gradients from both copies add up.
        assert_eq!(grad(&d), vec![1.0 + 4.0, 2.0 + 5.0, 6.0 + 9.0, 7.0 + 10.0]);
        // A tensor with 0 rows along the cat dim contributes nothing.
        let e = Tensor::zeros(&[0, 3]).to_dtype(DType::F64);
        assert_eq!(Tensor::cat(&[&e, &b.detach()], 0).to_vec_f64(), b.to_vec_f64());
        let g = g322();
        gradcheck(|t| Tensor::cat(&[&t[0], &t[1].exp()], 1), &[g.clone(), g.narrow(1, 0, 1).contiguous()]).unwrap();
    }

    #[test]
    fn stack_forward_backward_gradcheck() {
        let a = leaf(&[1.0, 2.0], &[2]);
        let b = leaf(&[3.0, 4.0], &[2]);
        let s0 = Tensor::stack(&[&a, &b], 0);
        assert_eq!((s0.shape(), s0.to_vec_f64()), (&[2, 2][..], vec![1.0, 2.0, 3.0, 4.0]));
        let s1 = Tensor::stack(&[&a, &b], -1);
        assert_eq!((s1.shape(), s1.to_vec_f64()), (&[2, 2][..], vec![1.0, 3.0, 2.0, 4.0]));
        backward_ramp(&s1);
        assert_eq!(grad(&a), vec![1.0, 3.0]);
        assert_eq!(grad(&b), vec![2.0, 4.0]);
        let g = t64(&[0.1, 0.2, 0.3, 0.4], &[2, 2]);
        gradcheck(|t| Tensor::stack(&[&t[0], &t[1].square()], 1), &[g.clone(), g.t().contiguous()]).unwrap();
    }

    #[test]
    fn contiguous_copies_only_when_needed() {
        let x = x23();
        assert!(shares_storage(&x, &x.contiguous()));
        let t = x.t();
        let c = t.contiguous();
        assert!(c.is_contiguous() && !shares_storage(&x, &c));
        assert_eq!(c.to_vec_f64(), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        backward_ramp(&c.exp());
        let e: Vec<f64> = [1, 3, 5, 2, 4, 6].iter().zip(0..6).map(|(&w, i)| w as f64 * (i as f64).exp()).collect();
        crate::testing::support::assert_close64(&grad(&x), &e, 1e-14);
        gradcheck(|t| t[0].permute(&[2, 1, 0]).contiguous().exp(), &[g322()]).unwrap();
        // A narrow with an offset is copied to a fresh buffer of its own size.
        let n = x23().narrow(0, 1, 1).contiguous();
        assert_eq!((n.layout().offset(), n.storage_arc().len()), (0, 3));
    }

    #[test]
    fn view_ops_on_noncontiguous_inputs() {
        type Op = fn(&Tensor) -> Tensor;
        let ops: [Op; 14] = [
            |x| x.reshape(&[3, 4]),
            |x| x.flatten(0, 1),
            |x| x.permute(&[2, 0, 1]),
            |x| x.transpose(0, 2),
            |x| x.narrow(1, 1, 2),
            |x| x.split(2, 1)[1].clone(),
            |x| x.chunk(2, 2)[0].clone(),
            |x| x.narrow(0, 0, 1).expand(&[3, 3, 2]),
            |x| x.unsqueeze(1),
            |x| x.narrow(2, 0, 1).squeeze(),
            |x| x.narrow(2, 0, 1).squeeze_dim(2),
            |x| Tensor::cat(&[x, &x.exp()], 1),
            |x| Tensor::stack(&[x, x], 3),
            |x| x.contiguous(),
        ];
        let g = g322();
        for (i, op) in ops.iter().enumerate() {
            check_noncontig(|t| op(&t[0]), std::slice::from_ref(&g));
            let p = transposed_storage(&g);
            assert_eq!(op(&p).to_vec_f64(), op(&g).to_vec_f64(), "op {i}");
        }
    }

    #[test]
    fn views_of_rank0_tensors() {
        let s = Tensor::from_vec_f64(vec![3.0], &[]).requires_grad_(true);
        assert_eq!(s.reshape(&[1, 1]).shape(), &[1, 1]);
        assert_eq!(s.reshape(&[1, 1]).reshape(&[]).shape(), &[] as &[usize]);
        assert_eq!(s.unsqueeze(0).shape(), &[1]);
        assert_eq!(s.unsqueeze(-1).shape(), &[1]);
        assert_eq!(s.flatten(0, -1).shape(), &[1]);
        assert_eq!(s.t().shape(), &[] as &[usize]);
        assert_eq!(s.permute(&[]).shape(), &[] as &[usize]);
        assert_eq!(s.transpose(0, -1).shape(), &[] as &[usize]);
        assert_eq!(s.squeeze().shape(), &[] as &[usize]);
        assert_eq!(s.squeeze_dim(0).shape(), &[] as &[usize]);
        assert_eq!(Tensor::from_vec(vec![1.0], &[1, 1]).squeeze().shape(), &[] as &[usize]);
        let e = s.expand(&[2, 3]);
        assert_eq!(e.to_vec_f64(), vec![3.0; 6]);
        let st = Tensor::stack(&[&s, &s], 0);
        assert_eq!((st.shape(), st.to_vec_f64()), (&[2][..], vec![3.0, 3.0]));
        (e.sum() + st.sum()).backward();
        assert_eq!(s.grad().unwrap().item(), 8.0);
    }

    #[test]
    fn view_ops_on_meta() {
        let m = Tensor::full_on(&[2, 3, 4], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        assert_eq!(m.reshape(&[6, 4]).shape(), &[6, 4]);
        assert_eq!(m.permute(&[2, 0, 1]).shape(), &[4, 2, 3]);
        assert_eq!(m.permute(&[2, 0, 1]).reshape(&[24]).device(), Device::Meta);
        assert_eq!(m.narrow(2, 1, 2).shape(), &[2, 3, 2]);
        let c = Tensor::cat(&[&m, &m], 1);
        assert_eq!((c.shape(), c.device(), c.dtype()), (&[2, 6, 4][..], Device::Meta, DType::F32));
        assert_eq!(Tensor::stack(&[&m, &m], 0).shape(), &[2, 2, 3, 4]);
        let y = m.narrow(2, 1, 2).flatten(0, 1).contiguous();
        assert_eq!(y.shape(), &[6, 2]);
        y.sum().backward();
        assert_eq!((m.grad().unwrap().shape(), m.grad().unwrap().device()), (&[2, 3, 4][..], Device::Meta));
    }

    #[test]
    fn integer_and_bool_tensors_reshape_and_cat() {
        let i = Tensor::from_vec_i64(vec![1, 2, 3, 4], &[2, 2]);
        assert_eq!(i.t().reshape(&[4]).to_vec_i64(), vec![1, 3, 2, 4]);
        assert_eq!(Tensor::cat(&[&i, &i.t()], 0).to_vec_i64(), vec![1, 2, 3, 4, 1, 3, 2, 4]);
        let b = Tensor::from_vec_bool(vec![true, false], &[2]);
        assert_eq!(Tensor::stack(&[&b, &b], 1).to_vec_bool(), vec![true, true, false, false]);
    }

    #[test]
    #[should_panic(expected = "reshape: shape [4] is invalid for input of shape [2, 3] (6 elements)")]
    fn reshape_with_wrong_numel_names_both_shapes() {
        Tensor::zeros(&[2, 3]).reshape(&[4]);
    }

    #[test]
    #[should_panic(expected = "view: size [6] is not compatible with the strides [1, 3] of input shape [3, 2]")]
    fn view_of_non_viewable_layout_panics() {
        Tensor::zeros(&[2, 3]).t().view(&[6]);
    }

    #[test]
    #[should_panic(expected = "narrow: start 2 + length 2 exceeds size 3 of dimension 1 (shape [2, 3])")]
    fn narrow_out_of_range_names_the_shape() {
        Tensor::zeros(&[2, 3]).narrow(1, 2, 2);
    }

    #[test]
    #[should_panic(expected = "transpose: dimension 2 out of range for a tensor of rank 2 (expected -2..=1)")]
    fn transpose_dim_out_of_range_names_the_op() {
        Tensor::zeros(&[2, 3]).transpose(0, 2);
    }

    #[test]
    #[should_panic(
        expected = "cat: sizes must match except in dimension 0; tensor 0 has shape [1, 3], tensor 1 has shape [2, 2]"
    )]
    fn cat_with_mismatched_sizes_names_both_shapes() {
        Tensor::cat(&[&Tensor::zeros(&[1, 3]), &Tensor::zeros(&[2, 2])], 0);
    }

    #[test]
    #[should_panic(expected = "cat: expected all tensors of one dtype, got f32 (shape [1]) and i64 (shape [1])")]
    fn cat_with_mixed_dtypes_panics() {
        Tensor::cat(&[&Tensor::zeros(&[1]), &Tensor::from_vec_i64(vec![1], &[1])], 0);
    }

    #[test]
    #[should_panic(expected = "stack: expects each tensor to be equal size, but got [2] at entry 0 and [3] at entry 1")]
    fn stack_with_mismatched_shapes_panics() {
        Tensor::stack(&[&Tensor::zeros(&[2]), &Tensor::zeros(&[3])], 0);
    }

    #[test]
    #[should_panic(expected = "expand: shape [2, 3] cannot be expanded to [4, 3]")]
    fn expand_of_a_non_singleton_dim_panics() {
        Tensor::zeros(&[2, 3]).expand(&[4, 3]);
    }

    #[test]
    #[should_panic(expected = "permute: [0, 0] is not a permutation of the 2 dims of shape [2, 3]")]
    fn permute_with_a_repeated_dim_panics() {
        Tensor::zeros(&[2, 3]).permute(&[0, 0]);
    }

    #[test]
    #[should_panic(expected = "t: expects a tensor with <= 2 dimensions, got 3 (shape [1, 2, 3])")]
    fn t_of_rank3_panics() {
        Tensor::zeros(&[1, 2, 3]).t();
    }

    #[test]
    #[should_panic(expected = "flatten: start dim 2 comes after end dim 1")]
    fn flatten_with_reversed_dims_panics() {
        Tensor::zeros(&[1, 2, 3]).flatten(2, 1);
    }

    /// PyTorch's legacy `cat` rule: a `[0]` operand is skipped whatever the others' rank,
    /// and gets an empty gradient.
    #[test]
    fn cat_skips_one_dimensional_empty_operands() {
        let e = leaf(&[], &[0]);
        let x = x23();
        let y = Tensor::cat(&[&e, &x, &e], 1);
        assert_eq!((y.shape(), y.to_vec_f64()), (&[2, 3][..], x.to_vec_f64()));
        y.sum().backward();
        assert_eq!((e.grad().unwrap().shape(), grad(&x)), (&[0][..], vec![1.0; 6]));
        assert_eq!(Tensor::cat(&[&e, &e], 0).shape(), &[0]);
    }

    /// Empty operands, at any dim (`stack` of two `[0, 1, 0]` at -1 too, which must not
    /// panic inside a kernel).
    #[test]
    fn stack_and_cat_of_empty_tensors() {
        let a = Tensor::zeros(&[0, 1, 0]);
        assert_eq!(Tensor::stack(&[&a, &a], -1).shape(), &[0, 1, 0, 2]);
        assert_eq!(Tensor::cat(&[&a, &a], -1).shape(), &[0, 1, 0]);
        let b = Tensor::zeros(&[2, 0]);
        let c = Tensor::cat(&[&b, &Tensor::ones(&[2, 1]), &b], 1);
        assert_eq!(c.to_vec(), vec![1.0, 1.0]);
    }

    #[test]
    #[should_panic(expected = "narrow: cannot be applied to a 0-d tensor")]
    fn narrow_refuses_a_0d_tensor() {
        Tensor::scalar(1.0).narrow(0, 0, 1);
    }
}
