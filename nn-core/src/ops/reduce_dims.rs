//! The reductions over several dims PyTorch takes a tuple for (`any`, `all`, `logsumexp`),
//! `argmax`/`argmin` of the flattened tensor, and `masked_fill` with a tensor value.

use super::reduce::{out_shape, resolve_dims};
use crate::autograd::no_grad;
use crate::dtype::DType;
use crate::shape::Dim;
use crate::tensor::Tensor;

impl Tensor {
    /// [`any`](Tensor::any) over several dims (`torch.any(x, dim=(0, 2))`; every dim when
    /// `dims` is empty).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let m = Tensor::from_vec_bool(vec![true, false, false, false, false, false], &[1, 2, 3]);
    /// assert_eq!(m.any_dims(&[0, 2], false).to_vec_bool(), [true, false]);
    /// assert_eq!(m.all_dims(&[1, 2], true).shape(), [1, 1, 1]);
    /// ```
    #[track_caller]
    pub fn any_dims<D: Dim>(&self, dims: &[D], keepdim: bool) -> Tensor {
        self.bool_reduce_dims("any", dims, keepdim, Tensor::any_dim)
    }

    /// [`all`](Tensor::all) over several dims (`torch.all(x, dim=(0, 2))`).
    #[track_caller]
    pub fn all_dims<D: Dim>(&self, dims: &[D], keepdim: bool) -> Tensor {
        self.bool_reduce_dims("all", dims, keepdim, Tensor::all_dim)
    }

    #[track_caller]
    fn bool_reduce_dims<D: Dim>(
        &self,
        op: &str,
        dims: &[D],
        keepdim: bool,
        one: fn(&Tensor, usize, bool) -> Tensor,
    ) -> Tensor {
        let mask = resolve_dims(op, dims, self.rank());
        if self.rank() == 0 {
            return one(self, 0, keepdim);
        }
        let kept = (0..self.rank()).filter(|&d| mask[d]).fold(self.clone(), |y, d| one(&y, d, true));
        kept.reshape(out_shape(self.shape(), &mask, keepdim).as_slice())
    }

    /// [`logsumexp`](Tensor::logsumexp) over several dims (`torch.logsumexp(x, (1, 2))`):
    /// `log(sum(exp(x)))` over all of them at once, shifted by their maximum; `-inf` where
    /// the reduced elements are none.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![0.0, 0.0, 0.0, 0.0], &[1, 2, 2]);
    /// let y = x.logsumexp_dims(&[1, 2], false);
    /// assert!((y.to_vec()[0] - 4f32.ln()).abs() < 1e-6);
    /// ```
    #[track_caller]
    pub fn logsumexp_dims<D: Dim>(&self, dims: &[D], keepdim: bool) -> Tensor {
        let mask = resolve_dims("logsumexp", dims, self.rank());
        let reduced: Vec<usize> = (0..self.rank()).filter(|&d| mask[d]).collect();
        if let [d] = reduced.as_slice() {
            return self.logsumexp(*d, keepdim);
        }
        let _op = crate::autograd::entry::op_entry!(untraced crate::names::LOGSUMEXP, [Some(self)],
            again = |c| c[0].expect("present").logsumexp_dims(dims, keepdim));
        let out = out_shape(self.shape(), &mask, keepdim);
        if reduced.is_empty() || reduced.iter().any(|&d| self.shape()[d] == 0) {
            // No dim (a 0-d input) or an empty one: as the one-dim form.
            return if self.rank() == 0 {
                self.logsumexp(0, keepdim)
            } else {
                self.sum_dims(&reduced, keepdim) + f64::NEG_INFINITY
            };
        }
        let m = no_grad(|| {
            let m = self.amax(&reduced, true);
            // A max of +-inf would give inf - inf = NaN: shift by 0 there, as PyTorch.
            let inf = m.abs().eq(&m.scalar_like(f64::INFINITY));
            m.masked_fill(&inf, 0.0)
        });
        ((self - &m).exp().sum_dims(&reduced, true).log() + &m).reshape(out.as_slice())
    }

    /// The index of the largest element of the flattened tensor, as a 0-d `i64` tensor
    /// (PyTorch's `x.argmax()` without `dim`; the first one on ties, NaN as the largest).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 5.0, 2.0, 7.0, 0.0, 3.0], &[2, 3]);
    /// assert_eq!(x.argmax_flat().to_vec_i64(), [3]);
    /// assert_eq!(x.argmin_flat().to_vec_i64(), [4]);
    /// ```
    #[track_caller]
    pub fn argmax_flat(&self) -> Tensor {
        self.reshape(&[self.numel()]).argmax(0, false)
    }

    /// The index of the smallest element of the flattened tensor (PyTorch's `x.argmin()`).
    #[track_caller]
    pub fn argmin_flat(&self) -> Tensor {
        self.reshape(&[self.numel()]).argmin(0, false)
    }

    /// [`masked_fill`](Tensor::masked_fill) with a 0-d tensor `value` (PyTorch's
    /// `x.masked_fill(mask, torch.tensor(v))`): differentiable in `self` and in `value`,
    /// which receives the gradient of every filled element.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]);
    /// let v = Tensor::from_vec(vec![-1.0], &[]).requires_grad_(true);
    /// let y = x.masked_fill_tensor(&Tensor::from_vec_bool(vec![true, false, true], &[3]), &v);
    /// assert_eq!(y.to_vec(), [-1.0, 2.0, -1.0]);
    /// y.sum().backward();
    /// assert_eq!(v.grad().unwrap().to_vec(), [2.0]);
    /// ```
    ///
    /// # Panics
    /// As `masked_fill`, and when `value` is not 0-d (PyTorch's rule).
    #[track_caller]
    pub fn masked_fill_tensor(&self, mask: &Tensor, value: &Tensor) -> Tensor {
        if value.rank() != 0 {
            panic!(
                "masked_fill: only supports a 0-dimensional value tensor, but got one with {} dimension(s) (shape {:?})",
                value.rank(),
                value.shape()
            );
        }
        if mask.dtype() != DType::Bool {
            // masked_fill's refusal, with its message.
            return self.masked_fill(mask, 0.0);
        }
        // The mask broadcasts with `self` as in `masked_fill` (PyTorch's out-of-place form).
        let value = if value.dtype() == self.dtype() { value.clone() } else { value.to_dtype(self.dtype()) };
        Tensor::where_cond(mask, &value, self)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::t64;
    use crate::Tensor;

    #[test]
    fn logsumexp_over_several_dims_matches_the_one_dim_form_and_gradchecks() {
        let x = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4, 0.9, -0.1, 1.7, 0.25, -0.6, 1.4], &[2, 3, 2]);
        let two = x.logsumexp_dims(&[1, 2], false).to_vec_f64();
        let flat = x.reshape(&[2, 6]).logsumexp(1, false).to_vec_f64();
        assert!(two.iter().zip(&flat).all(|(a, b)| (a - b).abs() < 1e-14), "{two:?} vs {flat:?}");
        gradcheck(|t| t[0].logsumexp_dims(&[0, 2], true), &[x]).unwrap();
        let inf = t64(&[f64::INFINITY, 1.0, f64::NEG_INFINITY, f64::NEG_INFINITY], &[2, 1, 2]);
        assert_eq!(inf.logsumexp_dims(&[1, 2], false).to_vec_f64(), [f64::INFINITY, f64::NEG_INFINITY]);
    }

    #[test]
    fn masked_fill_tensor_fills_with_the_value() {
        let x = t64(&[0.3, -1.2, 2.0, -0.7], &[2, 2]);
        let mask = Tensor::from_vec_bool(vec![true, false, false, true], &[2, 2]);
        let v = t64(&[-5.5], &[]);
        assert_eq!(x.masked_fill_tensor(&mask, &v).to_vec_f64(), [-5.5, -1.2, 2.0, -5.5]);
        assert_eq!(Tensor::where_cond(&mask, &v, &x).to_vec_f64(), [-5.5, -1.2, 2.0, -5.5]);
        let (x, v) = (x.requires_grad_(true), v.requires_grad_(true));
        assert_eq!(x.masked_fill_tensor(&mask, &v).to_vec_f64(), [-5.5, -1.2, 2.0, -5.5]);
        // Past the vector width (an OpInfo sample: [5, 5]).
        let x = t64(&(0..25).map(f64::from).collect::<Vec<_>>(), &[5, 5]);
        let mask = Tensor::from_vec_bool((0..25).map(|i| i % 3 == 0).collect(), &[5, 5]);
        let want: Vec<f64> = (0..25).map(|i| if i % 3 == 0 { -5.5 } else { f64::from(i) }).collect();
        assert_eq!(Tensor::where_cond(&mask, &t64(&[-5.5], &[]), &x).to_vec_f64(), want);
    }

    #[test]
    fn masked_fill_tensor_gradcheck() {
        let x = t64(&[0.3, -1.2, 2.0, -0.7], &[2, 2]);
        let mask = Tensor::from_vec_bool(vec![true, false, false, true], &[2, 2]);
        gradcheck(|t| t[0].masked_fill_tensor(&mask, &t[1]), &[x, t64(&[0.5], &[])]).unwrap();
    }

    #[test]
    #[should_panic(expected = "masked_fill: only supports a 0-dimensional value tensor")]
    fn masked_fill_tensor_needs_a_0d_value() {
        Tensor::ones(&[2]).masked_fill_tensor(&Tensor::from_vec_bool(vec![true, false], &[2]), &Tensor::ones(&[1]));
    }
}
