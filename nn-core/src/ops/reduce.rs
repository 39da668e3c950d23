//! Reductions: sum, mean, var, max/min (values and indices), argmax/argmin, logsumexp.

use std::sync::Arc;

use smallvec::smallvec;

use super::check_float;
use crate::autograd::{no_grad, op_result, Grads};
use crate::dtype::DType;
use crate::shape::{kept_shape, Dim, Dims, Layout};
use crate::tensor::Tensor;

/// Resolves and deduplicates reduction dims; an empty list means "all dims" (PyTorch).
#[track_caller]
pub(super) fn resolve_dims<D: Dim>(op: &str, dims: &[D], rank: usize) -> Vec<bool> {
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

pub(super) fn out_shape(shape: &[usize], mask: &[bool], keepdim: bool) -> Dims {
    if keepdim {
        kept_shape(shape, mask)
    } else {
        shape.iter().zip(mask).filter(|(_, &m)| !m).map(|(&d, _)| d).collect()
    }
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
        let _op = crate::autograd::entry::op_entry!(
            crate::names::SUM,
            [self],
            attrs = || {
                vec![
                    ("dims", crate::autograd::trace::reduced_dims(dims, self.rank())),
                    ("keepdim", crate::autograd::trace::Attr::Bool(keepdim)),
                ]
            },
            again = |c: &[Option<&crate::Tensor>]| c[0].expect("present").sum_dims(dims, keepdim)
        );
        const OP: &str = crate::names::SUM;
        check_float(OP, self);
        let mask = resolve_dims(OP, dims, self.rank());
        let oshape = out_shape(self.shape(), &mask, keepdim);
        let storage = self.storage_arc().sum(self.layout(), &mask);
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
        // Built from public ops, without a trace frame of its own: its parts are not cast.
        let _op = crate::autograd::entry::op_entry!(untraced crate::names::MEAN);
        if self.dtype().is_half() {
            // The sum in f32, as PyTorch's: rounded to f16 first, the sum of 100,000 ones
            // is inf, and so would be their mean.
            return self.to_dtype(DType::F32).sum_dims(dims, keepdim).div_scalar(n as f64).to_dtype(self.dtype());
        }
        self.sum_dims(dims, keepdim).div_scalar(n as f64)
    }

    /// Variance over several dimensions with Bessel's `correction` (1 = unbiased, the
    /// PyTorch default; 0 = biased).
    #[track_caller]
    pub fn var_dims<D: Dim>(&self, dims: &[D], correction: usize, keepdim: bool) -> Tensor {
        let mask = resolve_dims("var", dims, self.rank());
        let n: usize = self.shape().iter().zip(&mask).filter(|(_, &m)| m).map(|(&d, _)| d).product();
        // Built from public ops, without a trace frame of its own: its parts are not cast.
        let _op = crate::autograd::entry::op_entry!(untraced crate::names::VAR);
        if self.dtype().is_half() {
            // In f32, as the mean (a sum of squares overflows f16 sooner still).
            return self.to_dtype(DType::F32).var_dims(dims, correction, keepdim).to_dtype(self.dtype());
        }
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
        let _op = crate::autograd::entry::enter_uncast(crate::names::ARGMAX, &[self], &[], || {
            vec![
                ("dim", crate::autograd::trace::int(dim.resolve(self.rank().max(1), "argmax"))),
                ("keepdim", crate::autograd::trace::Attr::Bool(keepdim)),
            ]
        });
        self.arg_extreme("argmax", dim, keepdim, true)
    }

    /// Index of the smallest element along `dim` (first one on ties), as `i64`.
    #[track_caller]
    pub fn argmin<D: Dim>(&self, dim: D, keepdim: bool) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::ARGMIN, &[self], &[], || {
            vec![
                ("dim", crate::autograd::trace::int(dim.resolve(self.rank().max(1), "argmin"))),
                ("keepdim", crate::autograd::trace::Attr::Bool(keepdim)),
            ]
        });
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
        // Move `dim` last: the backend scans contiguous rows of `n`.
        let mut perm: Vec<usize> = (0..x.rank()).filter(|&i| i != d).collect();
        perm.push(d);
        let moved = x.layout().permute(&perm);
        Tensor::from_storage(x.storage_arc().arg_extreme(&moved, n, largest), &oshape)
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
        let _op = crate::autograd::entry::enter_uncast(crate::names::MAX_DIM, &[self], &[], Vec::new);
        self.extreme_dim(dim, keepdim, true)
    }

    /// Minimum along `dim`: `(values, indices)`.
    #[track_caller]
    pub fn min_dim<D: Dim>(&self, dim: D, keepdim: bool) -> (Tensor, Tensor) {
        let _op = crate::autograd::entry::enter_uncast(crate::names::MIN_DIM, &[self], &[], Vec::new);
        self.extreme_dim(dim, keepdim, false)
    }

    #[track_caller]
    fn extreme_dim<D: Dim>(&self, dim: D, keepdim: bool, largest: bool) -> (Tensor, Tensor) {
        let op = if largest { "max" } else { "min" };
        check_float(op, self);
        if self.rank() == 0 {
            dim.resolve(0, op); // 0 or -1 only, as PyTorch
            return (self.clone(), Tensor::full_on(&[], 0.0, DType::I64, self.device()));
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

    /// The largest element, as a 0-d tensor. On ties the gradient is shared evenly by
    /// the tied elements, as PyTorch's `max()` without a dim.
    #[track_caller]
    pub fn max(&self) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::MAX, &[self], &[], Vec::new);
        self.extreme_all(true)
    }

    /// The smallest element, as a 0-d tensor (ties share the gradient, like [`max`](Tensor::max)).
    #[track_caller]
    pub fn min(&self) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::MIN, &[self], &[], Vec::new);
        self.extreme_all(false)
    }

    /// Full reduction to the largest (or smallest) element.
    ///
    /// The gradient is spread evenly over every element equal to the result (NaN matching
    /// NaN), as PyTorch's full `max()`/`min()` do; `max_dim` would send it all to the
    /// first tied element.
    #[track_caller]
    fn extreme_all(&self, largest: bool) -> Tensor {
        let op = if largest { "max" } else { "min" };
        let v = no_grad(|| self.reshape(&[self.numel()]).extreme_dim(0usize, false, largest).0);
        op_result(op, v.storage_arc(), v.layout().clone(), &[self], || {
            let (x, v) = (self.saved_for_backward(), v.clone());
            move |g: &Tensor, _: &[bool]| -> Grads {
                let hit = Tensor::where_cond(&v.ne(&v), &x.ne(&x), &x.eq(&v)).to_dtype(g.dtype());
                let share = g / &hit.sum();
                smallvec![Some(&hit * &share)]
            }
        })
    }

    /// `log(sum(exp(x)))` along `dim`, computed stably; `-inf` along an empty dim.
    #[track_caller]
    pub fn logsumexp<D: Dim>(&self, dim: D, keepdim: bool) -> Tensor {
        let _op = crate::autograd::entry::op_entry!(
            crate::names::LOGSUMEXP,
            [self],
            attrs = || {
                vec![
                    ("dim", crate::autograd::trace::int(dim.resolve(self.rank(), "logsumexp"))),
                    ("keepdim", crate::autograd::trace::Attr::Bool(keepdim)),
                ]
            },
            again = |c: &[Option<&crate::Tensor>]| c[0].expect("present").logsumexp(dim, keepdim)
        );
        let d = dim.resolve(self.rank(), "logsumexp");
        if self.shape().get(d) == Some(&0) {
            // The log of an empty sum: -inf, as PyTorch (its gradient is empty, like the input).
            return self.sum_dim(d, keepdim) + f64::NEG_INFINITY;
        }
        let m = no_grad(|| self.max_dim(d, true).0);
        let m = no_grad(|| {
            // A row whose max is +inf or -inf would give inf - inf = NaN; shift by 0 there,
            // as PyTorch does (both signs: a row holding +inf must give +inf).
            let inf = m.abs().eq(&m.scalar_like(f64::INFINITY));
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

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    /// `[[1, 5, 2], [7, 0, 3]]`: distinct values, so max/min have no ties.
    const X: [f64; 6] = [1.0, 5.0, 2.0, 7.0, 0.0, 3.0];
    /// Gradcheck input: 2 x 3 x 2, distinct values.
    const G: [f64; 12] = [0.3, -1.2, 2.0, -0.7, 1.1, 0.4, -0.15, 0.9, 1.6, -2.1, 0.05, 0.75];

    fn x() -> Tensor {
        t64(&X, &[2, 3])
    }

    #[test]
    fn sum_forward() {
        let x = x();
        assert_eq!(x.sum().shape(), &[] as &[usize]);
        assert_eq!(x.sum().item(), 18.0);
        assert_eq!(x.sum_dim(1, false).to_vec_f64(), vec![8.0, 10.0]);
        assert_eq!(x.sum_dim(-1, false).to_vec_f64(), vec![8.0, 10.0]);
        assert_eq!(x.sum_dim(0, false).to_vec_f64(), vec![8.0, 5.0, 5.0]);
        assert_eq!(x.sum_dim(0, true).shape(), &[1, 3]);
        assert_eq!(x.sum_dim(1, true).shape(), &[2, 1]);
        let y = t64(&G, &[2, 3, 2]);
        let s = y.sum_dims(&[0, 2], false);
        assert_eq!(s.shape(), &[3]);
        assert_close64(
            &s.to_vec_f64(),
            &[0.3 - 1.2 - 0.15 + 0.9, 2.0 - 0.7 + 1.6 - 2.1, 1.1 + 0.4 + 0.05 + 0.75],
            1e-15,
        );
        assert_eq!(y.sum_dims(&[0, 2], true).shape(), &[1, 3, 1]);
        assert_eq!(y.sum_dims::<usize>(&[], false).item(), y.sum().item());
        assert_eq!(y.sum_dims(&[-1i64, 0], false).to_vec_f64(), s.to_vec_f64());
    }

    #[test]
    fn sum_backward() {
        let x = leaf(&X, &[2, 3]);
        // (sum x)^2: the incoming gradient is 2 * 18.
        x.sum().square().backward();
        assert_eq!(grad(&x), vec![36.0; 6]);
        let x = leaf(&X, &[2, 3]);
        x.sum_dim(1, false).exp().mean().backward();
        let (a, b) = (8f64.exp() / 2.0, 10f64.exp() / 2.0);
        assert_close64(&grad(&x), &[a, a, a, b, b, b], 1e-12);
        let y = leaf(&G, &[2, 3, 2]);
        (y.sum_dims(&[0, 2], true) * t64(&[1.0, -2.0, 3.0], &[1, 3, 1])).sum().backward();
        assert_eq!(grad(&y), [1.0, 1.0, -2.0, -2.0, 3.0, 3.0].repeat(2));
    }

    #[test]
    fn sum_gradcheck() {
        let g = t64(&G, &[2, 3, 2]);
        gradcheck(|t| t[0].sum(), std::slice::from_ref(&g)).unwrap();
        gradcheck(|t| t[0].sum_dim(1, false), std::slice::from_ref(&g)).unwrap();
        gradcheck(|t| t[0].sum_dim(-1, true), std::slice::from_ref(&g)).unwrap();
        gradcheck(|t| t[0].sum_dims(&[0, 2], false).exp(), std::slice::from_ref(&g)).unwrap();
    }

    #[test]
    fn mean_forward_backward_gradcheck() {
        let x = x();
        assert_eq!(x.mean().item(), 3.0);
        assert_eq!(x.mean_dim(0, false).to_vec_f64(), vec![4.0, 2.5, 2.5]);
        assert_eq!(x.mean_dim(1, true).to_vec_f64(), vec![8.0 / 3.0, 10.0 / 3.0]);
        assert_eq!(x.mean_dim(1, true).shape(), &[2, 1]);
        assert_eq!(t64(&G, &[2, 3, 2]).mean_dims(&[0, 2], false).shape(), &[3]);
        let x = leaf(&X, &[2, 3]);
        (x.mean_dim(0, false) * t64(&[2.0, -4.0, 6.0], &[3])).sum().backward();
        assert_eq!(grad(&x), vec![1.0, -2.0, 3.0, 1.0, -2.0, 3.0]);
        let x = leaf(&X, &[2, 3]);
        x.mean().exp().backward();
        assert_close64(&grad(&x), &[3f64.exp() / 6.0; 6], 1e-12);
        let g = t64(&G, &[2, 3, 2]);
        gradcheck(|t| t[0].mean(), std::slice::from_ref(&g)).unwrap();
        gradcheck(|t| t[0].mean_dim(1, false), std::slice::from_ref(&g)).unwrap();
        gradcheck(|t| t[0].mean_dims(&[0, 2], true).square(), std::slice::from_ref(&g)).unwrap();
    }

    #[test]
    fn var_forward_backward_gradcheck() {
        let x = x();
        // Row 0: mean 8/3, squared deviations sum to 78/9; row 1: mean 10/3, 222/9.
        assert_close64(&x.var_dims(&[1], 1, false).to_vec_f64(), &[78.0 / 18.0, 222.0 / 18.0], 1e-14);
        assert_close64(&x.var_dims(&[1], 0, true).to_vec_f64(), &[78.0 / 27.0, 222.0 / 27.0], 1e-14);
        assert_eq!(x.var_dims(&[1], 0, true).shape(), &[2, 1]);
        // All six: mean 3, squared deviations 4 + 4 + 1 + 16 + 9 + 0 = 34.
        assert_close64(&x.var_dims::<usize>(&[], 1, false).to_vec_f64(), &[6.8], 1e-14);
        let x = leaf(&X, &[2, 3]);
        (x.var_dims(&[1], 1, false) * t64(&[1.0, 2.0], &[2])).sum().backward();
        // d var / d x_i = 2 (x_i - mean) / (n - 1), times the row weight.
        let e = [-5.0 / 3.0, 7.0 / 3.0, -2.0 / 3.0, 22.0 / 3.0, -20.0 / 3.0, -2.0 / 3.0];
        assert_close64(&grad(&x), &e, 1e-14);
        let g = t64(&G, &[2, 3, 2]);
        gradcheck(|t| t[0].var_dims(&[1], 1, false), std::slice::from_ref(&g)).unwrap();
        gradcheck(|t| t[0].var_dims(&[0, 2], 0, true), std::slice::from_ref(&g)).unwrap();
    }

    #[test]
    fn max_min_forward() {
        let x = x();
        assert_eq!(x.max().item(), 7.0);
        assert_eq!(x.min().item(), 0.0);
        assert_eq!(x.max().shape(), &[] as &[usize]);
        let (v, i) = x.max_dim(1, false);
        assert_eq!((v.to_vec_f64(), i.to_vec_i64()), (vec![5.0, 7.0], vec![1, 0]));
        assert_eq!(i.dtype(), DType::I64);
        let (v, i) = x.min_dim(1, true);
        assert_eq!((v.to_vec_f64(), i.to_vec_i64()), (vec![1.0, 0.0], vec![0, 1]));
        assert_eq!((v.shape(), i.shape()), (&[2, 1][..], &[2, 1][..]));
        let (v, i) = x.max_dim(0, false);
        assert_eq!((v.to_vec_f64(), i.to_vec_i64()), (vec![7.0, 5.0, 3.0], vec![1, 0, 1]));
        let (v, i) = x.min_dim(-2, false);
        assert_eq!((v.to_vec_f64(), i.to_vec_i64()), (vec![1.0, 0.0, 2.0], vec![0, 1, 0]));
        assert_eq!(x.argmax(1, false).to_vec_i64(), vec![1, 0]);
        assert_eq!(x.argmin(0, true).to_vec_i64(), vec![0, 1, 0]);
        assert_eq!(x.argmin(0, true).shape(), &[1, 3]);
    }

    #[test]
    fn max_min_backward() {
        let x = leaf(&X, &[2, 3]);
        // (max - 2 min)^2 = 49: d/dmax = 14, d/dmin = -28.
        (x.max() - x.min() * 2.0).square().backward();
        assert_eq!(grad(&x), vec![0.0, 0.0, 0.0, 14.0, -28.0, 0.0]);
        let x = leaf(&X, &[2, 3]);
        let (v, _) = x.max_dim(1, false);
        let (u, _) = x.min_dim(0, true);
        ((v * t64(&[2.0, -3.0], &[2])).sum() + u.exp().sum()).backward();
        // max_dim routes to (0, 1) and (1, 0); min_dim over rows to (0, 0), (1, 1), (0, 2).
        let e = [1f64.exp(), 2.0, 2f64.exp(), -3.0, 1.0, 0.0];
        assert_close64(&grad(&x), &e, 1e-14);
    }

    #[test]
    fn max_min_gradcheck() {
        let g = t64(&G, &[2, 3, 2]);
        gradcheck(|t| t[0].max(), std::slice::from_ref(&g)).unwrap();
        gradcheck(|t| t[0].min(), std::slice::from_ref(&g)).unwrap();
        gradcheck(|t| t[0].max_dim(1, false).0, std::slice::from_ref(&g)).unwrap();
        gradcheck(|t| t[0].min_dim(-1, true).0, std::slice::from_ref(&g)).unwrap();
    }

    #[test]
    fn full_max_spreads_the_gradient_over_ties_like_pytorch() {
        // torch.tensor([1., 3., 3.]).max().backward() gives [0, 0.5, 0.5]; max_dim instead
        // sends everything to the returned index.
        let x = leaf(&[1.0, 3.0, 3.0, -1.0], &[2, 2]);
        (x.max() * 4.0).backward();
        assert_eq!(grad(&x), vec![0.0, 2.0, 2.0, 0.0]);
        let x = leaf(&[-1.0, 3.0, -1.0], &[3]);
        x.min().backward();
        assert_eq!(grad(&x), vec![0.5, 0.0, 0.5]);
        let x = leaf(&[3.0, 3.0], &[2]);
        x.max_dim(0, false).0.backward();
        assert_eq!(grad(&x), vec![1.0, 0.0]);
    }

    #[test]
    fn max_and_argmax_propagate_nan() {
        let x = Tensor::from_vec(vec![1.0, f32::NAN, 3.0, f32::NAN], &[4]);
        assert!(x.max().item().is_nan());
        assert!(x.min().item().is_nan());
        assert_eq!(x.argmax(0, false).to_vec_i64(), vec![1]);
        // NaN counts as the extreme for argmin too (torch.argmin), first NaN wins.
        assert_eq!(x.argmin(0, false).to_vec_i64(), vec![1]);
    }

    #[test]
    fn logsumexp_forward_backward_gradcheck() {
        let x = x();
        assert_close64(&x.logsumexp(1, false).to_vec_f64(), &[5.065883903757429, 7.0190450078792574], 1e-14);
        assert_eq!(x.logsumexp(-1, true).shape(), &[2, 1]);
        let big = Tensor::from_vec(vec![1000.0, 1000.0], &[2]);
        assert_close64(&big.logsumexp(0, false).to_vec_f64(), &[1000.6931471805599], 1e-7);
        let x = leaf(&X, &[2, 3]);
        (x.logsumexp(1, false) * t64(&[1.0, -2.0], &[2])).sum().backward();
        // The gradient is the softmax of each row, times the row weight.
        let e = [
            0.017147825545520388,
            0.9362395518765056,
            0.04661262257797389,
            -2.0 * 0.9811352024343174,
            -2.0 * 0.0008946794968705335,
            -2.0 * 0.017970118068812067,
        ];
        assert_close64(&grad(&x), &e, 1e-12);
        let g = t64(&G, &[2, 3, 2]);
        gradcheck(|t| t[0].logsumexp(1, false), std::slice::from_ref(&g)).unwrap();
        gradcheck(|t| t[0].logsumexp(0, true).exp(), std::slice::from_ref(&g)).unwrap();
    }

    #[test]
    fn logsumexp_handles_infinities_like_pytorch() {
        let ninf = f32::NEG_INFINITY;
        let x = Tensor::from_vec(vec![ninf, ninf, f32::INFINITY, 1.0, ninf, 1.0], &[3, 2]);
        let y = x.logsumexp(1, false).to_vec();
        assert_eq!(y[0], ninf, "an all -inf row gives -inf");
        assert_eq!(y[1], f32::INFINITY, "a row holding +inf gives +inf, not NaN");
        assert_eq!(y[2], 1.0);
    }

    #[test]
    fn reductions_of_empty_tensors() {
        let e = Tensor::zeros(&[0, 3]).requires_grad_(true);
        assert_eq!(e.sum().item(), 0.0);
        assert_eq!(e.sum_dim(0, false).to_vec(), vec![0.0; 3]);
        assert_eq!(e.sum_dim(1, false).shape(), &[0]);
        assert!(e.mean().item().is_nan());
        e.sum().backward();
        assert_eq!(e.grad().unwrap().shape(), &[0, 3]);
    }

    #[test]
    #[should_panic(expected = "max: expected a non-empty dimension 0, got shape [0]")]
    fn max_of_empty_tensor_panics() {
        Tensor::zeros(&[0, 3]).max();
    }

    #[test]
    fn reductions_of_rank0_tensors() {
        let s = Tensor::from_vec_f64(vec![2.5], &[]).requires_grad_(true);
        for y in
            [s.sum(), s.mean(), s.max(), s.min(), s.sum_dim(0, false), s.max_dim(0, false).0, s.logsumexp(0, false)]
        {
            assert_eq!(y.shape(), &[] as &[usize]);
            assert_eq!(y.item(), 2.5);
        }
        assert_eq!(s.max_dim(0, true).1.to_vec_i64(), vec![0]);
        assert_eq!(s.argmax(0, false).to_vec_i64(), vec![0]);
        (s.sum() * 3.0 + s.logsumexp(-1, false)).backward();
        assert_eq!(s.grad().unwrap().item(), 4.0);
    }

    #[test]
    fn reductions_on_noncontiguous_inputs() {
        type Op = fn(&Tensor) -> Tensor;
        let ops: [Op; 12] = [
            |x| x.sum(),
            |x| x.sum_dim(0, false),
            |x| x.sum_dims(&[0, 2], true),
            |x| x.mean(),
            |x| x.mean_dim(-1, false),
            |x| x.var_dims(&[1], 1, false),
            |x| x.max(),
            |x| x.min(),
            |x| x.max_dim(1, false).0,
            |x| x.min_dim(2, true).0,
            |x| x.logsumexp(1, false),
            |x| x.argmax(1, false).to_dtype(DType::F64),
        ];
        let g = t64(&G, &[2, 3, 2]);
        for op in ops {
            check_noncontig(|t| op(&t[0]), std::slice::from_ref(&g));
            let p = g.permute(&[2, 0, 1]);
            assert_close64(&op(&p).to_vec_f64(), &op(&p.contiguous()).to_vec_f64(), 1e-15);
            let n = g.narrow(1, 1, 2);
            assert_close64(&op(&n).to_vec_f64(), &op(&n.contiguous()).to_vec_f64(), 1e-15);
            let e = g.narrow(0, 1, 1).expand(&[3, 3, 2]);
            assert_close64(&op(&e).to_vec_f64(), &op(&e.contiguous()).to_vec_f64(), 1e-15);
        }
    }

    #[test]
    fn large_sums_are_accurate_and_take_the_parallel_path() {
        let rows = 4;
        let n = super::super::PAR_THRESHOLD;
        let x = Tensor::full(&[rows, n], 0.1);
        let s = x.sum_dim(1, false).to_vec();
        // Accumulated in f64: 32768 * 0.1f32 to f32 precision.
        assert!(s.iter().all(|&v| (v as f64 - n as f64 * 0.1f32 as f64).abs() < 1e-3), "{s:?}");
        assert_eq!(x.t().sum_dim(0, false).to_vec(), s);
    }

    #[test]
    fn reductions_on_meta_give_shapes() {
        let m = Tensor::full_on(&[2, 3, 4], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        assert_eq!(m.sum_dims(&[0, 2], true).shape(), &[1, 3, 1]);
        assert_eq!(m.mean_dim(1, false).shape(), &[2, 4]);
        assert_eq!(m.var_dims(&[2], 1, false).shape(), &[2, 3]);
        assert_eq!(m.logsumexp(-1, false).shape(), &[2, 3]);
        let (v, i) = m.max_dim(1, false);
        assert_eq!(
            (v.shape(), v.device(), i.dtype(), i.device()),
            (&[2, 4][..], Device::Meta, DType::I64, Device::Meta)
        );
        assert_eq!(m.max().device(), Device::Meta);
        let s = m.sum();
        assert_eq!((s.shape(), s.device()), (&[] as &[usize], Device::Meta));
        s.backward();
        assert_eq!(m.grad().unwrap().shape(), &[2, 3, 4]);
    }

    #[test]
    #[should_panic(expected = "sum: dimension 2 out of range for a tensor of rank 2 (expected -2..=1)")]
    fn reduction_dim_out_of_range_names_the_op() {
        Tensor::zeros(&[2, 3]).sum_dim(2, false);
    }

    #[test]
    #[should_panic(expected = "sum: dimension 1 appears more than once in [1, -1]")]
    fn duplicate_reduction_dims_panic() {
        Tensor::zeros(&[2, 3]).sum_dims(&[1i32, -1], false);
    }

    #[test]
    #[should_panic(expected = "sum: expected a floating-point tensor (f32, f64, bf16 or f16), got i64")]
    fn sum_of_integers_names_the_op() {
        Tensor::from_vec_i64(vec![1, 2], &[2]).sum();
    }

    /// The log of an empty sum is -inf, as PyTorch's `logsumexp` of `[0]`.
    #[test]
    fn logsumexp_of_an_empty_dim_is_minus_infinity() {
        let x = leaf(&[], &[0]);
        let y = x.logsumexp(0, false);
        assert_eq!((y.shape(), y.item()), (&[] as &[usize], f64::NEG_INFINITY));
        y.backward();
        assert_eq!(x.grad().unwrap().shape(), &[0]);
        assert_eq!(Tensor::zeros(&[2, 0]).logsumexp(1, true).to_vec(), vec![f32::NEG_INFINITY; 2]);
    }
}
