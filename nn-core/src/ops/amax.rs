//! `amax`/`amin` (the extreme over several dims, the gradient split over ties) and `std`.

use smallvec::smallvec;

use super::check_float;
use super::reduce::{out_shape, resolve_dims};
use crate::autograd::{no_grad, op_result, Grads};
use crate::shape::{kept_shape, Dim};
use crate::tensor::Tensor;

impl Tensor {
    /// The largest element over `dims` (every dim when `dims` is empty), as PyTorch's
    /// `amax`. Unlike [`max_dim`](Tensor::max_dim) it returns no indices and its gradient
    /// is split evenly over the elements equal to the result (PyTorch's rule; where the
    /// result is NaN no element equals it, and the gradient is NaN, as in PyTorch).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 5.0, 5.0, 7.0, 0.0, 3.0], &[2, 3]).requires_grad_(true);
    /// let m = x.amax(&[1], false);
    /// assert_eq!(m.to_vec(), [5.0, 7.0]);
    /// m.sum().backward();
    /// assert_eq!(x.grad().unwrap().to_vec(), [0.0, 0.5, 0.5, 1.0, 0.0, 0.0]);
    /// assert_eq!(x.amax(&[0, 1], true).to_vec(), [7.0]);
    /// ```
    ///
    /// # Panics
    /// On a non-float tensor, a repeated or out-of-range dim, or a reduced dim of size 0
    /// (a maximum of nothing, which PyTorch refuses too).
    #[track_caller]
    pub fn amax<D: Dim>(&self, dims: &[D], keepdim: bool) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::AMAX, &[self], &[], Vec::new);
        self.extreme_dims(crate::names::AMAX, dims, keepdim, true)
    }

    /// The smallest element over `dims`, as PyTorch's `amin` (see [`amax`](Tensor::amax)).
    #[track_caller]
    pub fn amin<D: Dim>(&self, dims: &[D], keepdim: bool) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::AMIN, &[self], &[], Vec::new);
        self.extreme_dims(crate::names::AMIN, dims, keepdim, false)
    }

    #[track_caller]
    fn extreme_dims<D: Dim>(&self, op: &'static str, dims: &[D], keepdim: bool, largest: bool) -> Tensor {
        check_float(op, self);
        let mask = resolve_dims(op, dims, self.rank());
        let reduced: Vec<usize> = (0..self.rank()).filter(|&d| mask[d]).collect();
        if let Some(&d) = reduced.iter().find(|&&d| self.shape()[d] == 0) {
            panic!("{op}: expected reduction dim {d} to have non-zero size (input of shape {:?})", self.shape());
        }
        let kept = no_grad(|| {
            reduced.iter().fold(self.clone(), |v, &d| if largest { v.max_dim(d, true).0 } else { v.min_dim(d, true).0 })
        });
        let y = kept.reshape(out_shape(self.shape(), &mask, keepdim).as_slice());
        let kept_dims = kept_shape(self.shape(), &mask);
        op_result(op, y.storage_arc(), y.layout().clone(), &[self], || {
            let (x, m) = (self.saved_for_backward(), kept);
            move |g: &Tensor, _: &[bool]| -> Grads {
                // PyTorch's `scale_grad_by_count(grad, result == self, dims)`.
                let hit = x.eq(&m).to_dtype(g.dtype());
                let count = if reduced.is_empty() { hit.clone() } else { hit.sum_dims(&reduced, true) };
                smallvec![Some(&hit * &(&g.reshape(kept_dims.as_slice()) / &count))]
            }
        })
    }

    /// Standard deviation over `dims` with Bessel's `correction` (1 = unbiased, the
    /// PyTorch default), `var_dims(dims, correction, keepdim).sqrt()` with PyTorch's
    /// gradient: zero where the deviation is 0 (a constant row), where the square root's
    /// would be infinite times zero.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 3.0, 2.0, 2.0], &[2, 2]).requires_grad_(true);
    /// let s = x.std_dims(&[1], 1, false);
    /// assert_eq!(s.to_vec(), [2f32.sqrt(), 0.0]);
    /// s.sum().backward();
    /// let g = x.grad().unwrap().to_vec();
    /// assert!((g[0] + 0.5f32.sqrt()).abs() < 1e-6 && g[2..] == [0.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn std_dims<D: Dim>(&self, dims: &[D], correction: usize, keepdim: bool) -> Tensor {
        let _op = crate::autograd::entry::op_entry!(untraced crate::names::STD);
        let var = self.var_dims(dims, correction, keepdim);
        let y = no_grad(|| var.sqrt());
        op_result(crate::names::STD, y.storage_arc(), y.layout().clone(), &[&var], || {
            let s = y.clone();
            move |g: &Tensor, _: &[bool]| -> Grads {
                let zero = s.eq_scalar(0);
                smallvec![Some((g / &(&s * 2.0)).masked_fill(&zero, 0.0))]
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::{grad, leaf, t64};

    #[test]
    fn amax_and_amin_split_the_gradient_over_ties() {
        let x = leaf(&[1.0, 4.0, 4.0, -2.0, 0.0, -2.0], &[2, 3]);
        let y = x.amin(&[1i64], true);
        assert_eq!((y.shape().to_vec(), y.to_vec_f64()), (vec![2, 1], vec![1.0, -2.0]));
        y.sum().backward();
        assert_eq!(grad(&x), [1.0, 0.0, 0.0, 0.5, 0.0, 0.5]);
        let x = leaf(&[1.0, 4.0, 4.0, -2.0, 0.0, 4.0], &[2, 3]);
        let y = x.amax(&[] as &[i64], false);
        assert_eq!((y.shape().to_vec(), y.to_vec_f64()), (vec![], vec![4.0]));
        y.backward();
        let third = 1.0 / 3.0;
        assert_eq!(grad(&x), [0.0, third, third, 0.0, 0.0, third]);
    }

    #[test]
    fn amax_amin_and_std_gradcheck() {
        let x = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4, 0.9, -0.1, 1.7, 0.25, -0.6, 1.4], &[2, 3, 2]);
        gradcheck(|t| t[0].amax(&[0i64, 2], false), std::slice::from_ref(&x)).unwrap();
        gradcheck(|t| t[0].amin(&[-1i64], true), std::slice::from_ref(&x)).unwrap();
        gradcheck(|t| t[0].std_dims(&[1i64], 1, false), std::slice::from_ref(&x)).unwrap();
        gradcheck(|t| t[0].std_dims(&[0i64, 1, 2], 0, true), &[x]).unwrap();
    }

    #[test]
    #[should_panic(expected = "amax: expected reduction dim 1 to have non-zero size")]
    fn amax_of_an_empty_dim_panics() {
        crate::Tensor::zeros(&[2, 0]).amax(&[1i64], false);
    }
}
