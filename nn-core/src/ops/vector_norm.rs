//! Vector norms (`torch.linalg.vector_norm`): L1, L2 and infinity, over all elements or one dim.

use smallvec::smallvec;

use super::check_float;
use crate::autograd::{no_grad, op_result, Grads};
use crate::shape::{Dim, Dims};
use crate::tensor::Tensor;

const OP: &str = crate::names::NORM;

/// The order of a vector norm: PyTorch's `ord` of `torch.linalg.vector_norm` (`p` of
/// `Tensor.norm`), for the three orders models use.
///
/// ```
/// use nn_core::{ops::NormOrd, Tensor};
/// let x = Tensor::from_vec(vec![3.0, -4.0], &[2]);
/// assert_eq!(x.norm(NormOrd::L1).item(), 7.0);
/// assert_eq!(x.norm(NormOrd::L2).item(), 5.0);
/// assert_eq!(x.norm(NormOrd::Inf).item(), 4.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum NormOrd {
    /// `sum |x|` (`ord=1`).
    L1,
    /// `sqrt(sum x^2)` (`ord=2`, PyTorch's default).
    #[default]
    L2,
    /// `max |x|` (`ord=inf`).
    Inf,
}

impl Tensor {
    /// The vector norm of all elements, as a 0-d tensor (`torch.linalg.vector_norm(x, ord)`,
    /// `x.norm(p)`): `sum |x|` for [`NormOrd::L1`], `sqrt(sum x^2)` for [`NormOrd::L2`],
    /// `max |x|` for [`NormOrd::Inf`]. The input's shape does not matter (it is flattened).
    ///
    /// Gradients, as PyTorch's: `sign(x) * g` for L1 (0 at 0); `x / ||x|| * g` for L2, and
    /// 0 where the norm is 0 (the subgradient); for the infinity norm the gradient goes to
    /// the elements with `|x| == max |x|`, shared evenly among ties, times `sign(x)`.
    ///
    /// ```
    /// use nn_core::{ops::NormOrd, Tensor};
    /// let x = Tensor::from_vec(vec![1.0, -2.0, 2.0, 4.0], &[2, 2]).requires_grad_(true);
    /// let n = x.norm(NormOrd::L2);
    /// assert_eq!((n.shape(), n.item()), (&[] as &[usize], 5.0));
    /// n.backward();
    /// assert_eq!(x.grad().unwrap().to_vec(), vec![0.2, -0.4, 0.4, 0.8]);
    /// ```
    ///
    /// # Panics
    /// On a non-float tensor, and for [`NormOrd::Inf`] of an empty tensor (a maximum of
    /// nothing, which PyTorch refuses too).
    #[track_caller]
    pub fn norm(&self, ord: NormOrd) -> Tensor {
        self.vector_norm(ord, None, false)
    }

    /// The vector norm along one dimension (`torch.linalg.vector_norm(x, ord, dim, keepdim)`):
    /// `[d0, .., dn]` reduces to the shape without `dim` (or with it kept as 1). Formulas and
    /// gradients as [`norm`](Tensor::norm), per slice.
    ///
    /// ```
    /// use nn_core::{ops::NormOrd, Tensor};
    /// let x = Tensor::from_vec(vec![3.0, 4.0, -1.0, 0.0, 0.0, 2.0], &[2, 3]);
    /// assert_eq!(x.norm_dim(NormOrd::L2, 0, false).to_vec(), vec![3.0, 4.0, 2.236068]);
    /// assert_eq!(x.norm_dim(NormOrd::L1, -1, true).to_vec(), vec![8.0, 2.0]);
    /// assert_eq!(x.norm_dim(NormOrd::L1, -1, true).shape(), &[2, 1]);
    /// assert_eq!(x.norm_dim(NormOrd::Inf, 1, false).to_vec(), vec![4.0, 2.0]);
    /// ```
    ///
    /// # Panics
    /// On a non-float tensor, a `dim` out of range, and for [`NormOrd::Inf`] along an empty
    /// dimension.
    #[track_caller]
    pub fn norm_dim<D: Dim>(&self, ord: NormOrd, dim: D, keepdim: bool) -> Tensor {
        let d = dim.resolve(self.rank(), OP);
        self.vector_norm(ord, Some(d), keepdim)
    }

    #[track_caller]
    fn vector_norm(&self, ord: NormOrd, dim: Option<usize>, keepdim: bool) -> Tensor {
        check_float(OP, self);
        // Built from public ops, without a trace frame of its own: its parts are not cast.
        let again = |c: &[Option<&Tensor>]| c[0].expect("present").vector_norm(ord, dim, keepdim);
        let _op = crate::autograd::entry::op_entry!(untraced OP, [Some(self)], again = again);
        // The reduced dims (empty: all, as `sum_dims`) and the output shape with them kept.
        let dims: Vec<usize> = if self.rank() == 0 { vec![] } else { dim.into_iter().collect() };
        let kept: Dims =
            self.shape().iter().enumerate().map(|(i, &s)| if dim.is_none_or(|d| d == i) { 1 } else { s }).collect();
        let keepdim = keepdim && dim.is_some();
        match ord {
            NormOrd::L1 => self.abs().sum_dims(&dims, keepdim),
            NormOrd::L2 => {
                let n = no_grad(|| self.square().sum_dims(&dims, keepdim).sqrt());
                op_result(OP, n.storage_arc(), n.layout().clone(), &[self], || {
                    let (x, n) = (self.saved_for_backward(), n.reshape(&kept));
                    move |g: &Tensor, _: &[bool]| -> Grads {
                        let zero = n.scalar_like(0.0);
                        let scale = Tensor::where_cond(&n.eq(&zero), &zero, &(g.reshape(n.shape()) / &n));
                        smallvec![Some(&x * &scale)]
                    }
                })
            }
            NormOrd::Inf => {
                let extent: usize = dim.map_or(self.numel(), |d| self.shape().get(d).copied().unwrap_or(1));
                if extent == 0 {
                    panic!(
                        "{OP}: the infinity norm of an empty slice is undefined (a maximum of nothing), input of shape {:?}{}",
                        self.shape(),
                        dim.map(|d| format!(" along dim {d}")).unwrap_or_default()
                    );
                }
                // max |x| with the gradient shared evenly by ties (amax's backward); `abs`
                // contributes sign(x).
                let a = self.abs();
                let m = no_grad(|| match dim {
                    Some(d) if self.rank() > 0 => a.max_dim(d, keepdim).0,
                    _ => a.max(),
                });
                op_result(OP, m.storage_arc(), m.layout().clone(), &[&a], || {
                    let (a, m) = (a.saved_for_backward(), m.reshape(&kept));
                    move |g: &Tensor, _: &[bool]| -> Grads {
                        // The maxima, NaN matching NaN (a NaN norm comes from the NaNs).
                        let hit = Tensor::where_cond(&m.ne(&m), &a.ne(&a), &a.eq(&m)).to_dtype(g.dtype());
                        let count = hit.sum_dims(&dims, true);
                        smallvec![Some(&hit * &(g.reshape(&kept) / count))]
                    }
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::NormOrd::{self, Inf, L1, L2};
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    /// `[[3, -4, 0], [1, 2, -2]]`.
    const X: [f64; 6] = [3.0, -4.0, 0.0, 1.0, 2.0, -2.0];
    /// Gradcheck input: 2 x 3 x 2, distinct nonzero absolute values.
    const G: [f64; 12] = [0.3, -1.2, 2.0, -0.7, 1.1, 0.4, -0.15, 0.9, 1.6, -2.1, 0.05, 0.75];

    #[test]
    fn norm_forward_over_all_elements() {
        let x = t64(&X, &[2, 3]);
        assert_eq!(x.norm(L1).item(), 12.0);
        assert_close64(&[x.norm(L2).item()], &[34f64.sqrt()], 1e-15);
        assert_eq!(x.norm(Inf).item(), 4.0);
        for ord in [L1, L2, Inf] {
            assert_eq!(x.norm(ord).shape(), &[] as &[usize]);
        }
        assert_eq!(NormOrd::default(), L2);
        let f = Tensor::from_vec(vec![3.0, 4.0], &[2]);
        assert_eq!((f.norm(L2).dtype(), f.norm(L2).item()), (DType::F32, 5.0));
        let s = t64(&[-2.5], &[]);
        assert_eq!([s.norm(L1).item(), s.norm(L2).item(), s.norm(Inf).item()], [2.5; 3]);
    }

    #[test]
    fn norm_dim_forward() {
        let x = t64(&X, &[2, 3]);
        assert_eq!(x.norm_dim(L1, 1, false).to_vec_f64(), vec![7.0, 5.0]);
        assert_close64(&x.norm_dim(L2, 1, false).to_vec_f64(), &[5.0, 3.0], 1e-15);
        assert_eq!(x.norm_dim(Inf, 1, false).to_vec_f64(), vec![4.0, 2.0]);
        assert_eq!(x.norm_dim(L1, 0, true).to_vec_f64(), vec![4.0, 6.0, 2.0]);
        assert_close64(&x.norm_dim(L2, -2, false).to_vec_f64(), &[10f64.sqrt(), 20f64.sqrt(), 2.0], 1e-15);
        assert_eq!(x.norm_dim(Inf, 0, true).to_vec_f64(), vec![3.0, 4.0, 2.0]);
        for ord in [L1, L2, Inf] {
            assert_eq!(x.norm_dim(ord, 0, true).shape(), &[1, 3]);
            assert_eq!(x.norm_dim(ord, 1, true).shape(), &[2, 1]);
            assert_eq!(x.norm_dim(ord, -1, false).shape(), &[2]);
        }
        let s = t64(&[-2.5], &[]);
        assert_eq!(s.norm_dim(Inf, 0, true).shape(), &[] as &[usize]);
        assert_eq!(s.norm_dim(L2, -1, false).item(), 2.5);
    }

    #[test]
    fn norm_backward_through_exp_mean() {
        // L2 along rows [3, -4, 0] and [1, 2, -2]: norms 5 and 3, gradient x / n.
        let x = leaf(&X, &[2, 3]);
        x.norm_dim(L2, 1, false).exp().mean().backward();
        let (a, b) = (5f64.exp() / 2.0, 3f64.exp() / 2.0);
        let e = [a * 0.6, a * -0.8, 0.0, b / 3.0, b * 2.0 / 3.0, b * -2.0 / 3.0];
        assert_close64(&grad(&x), &e, 1e-14);
        // L1 over all: sign(x), 0 at the zero.
        let x = leaf(&X, &[2, 3]);
        x.norm(L1).exp().mean().backward();
        let c = 12f64.exp();
        assert_close64(&grad(&x), &[c, -c, 0.0, c, c, -c], 1e-14);
        // Inf along columns [3, 1], [-4, 2], [0, -2]: maxima at (0, 0), (0, 1), (1, 2).
        let x = leaf(&X, &[2, 3]);
        x.norm_dim(Inf, 0, true).exp().mean().backward();
        let e = [3f64.exp() / 3.0, -(4f64.exp()) / 3.0, 0.0, 0.0, 0.0, -(2f64.exp()) / 3.0];
        assert_close64(&grad(&x), &e, 1e-14);
    }

    #[test]
    fn l2_gradient_at_zero_is_zero_like_pytorch() {
        let x = leaf(&[0.0, 0.0, 3.0, 4.0], &[2, 2]);
        (x.norm_dim(L2, 1, false) * t64(&[2.0, 1.0], &[2])).sum().backward();
        assert_close64(&grad(&x), &[0.0, 0.0, 0.6, 0.8], 1e-15);
        assert_eq!(grad(&x)[..2], [0.0, 0.0], "exactly zero, not NaN");
        let z = leaf(&[0.0; 3], &[3]);
        z.norm(L2).backward();
        assert_eq!(grad(&z), vec![0.0; 3]);
    }

    #[test]
    fn inf_gradient_splits_evenly_among_ties_like_amax() {
        // torch.linalg.vector_norm(x, inf) for x = [1, -3, 3, 2]: ties at -3 and 3 share
        // the gradient, with their signs: [0, -0.5, 0.5, 0].
        let x = leaf(&[1.0, -3.0, 3.0, 2.0], &[4]);
        (x.norm(Inf) * 4.0).backward();
        assert_eq!(grad(&x), vec![0.0, -2.0, 2.0, 0.0]);
        let x = leaf(&[2.0, -2.0, 2.0, 1.0, 0.0, 1.0], &[2, 3]);
        x.norm_dim(Inf, 1, false).exp().sum().backward();
        let (a, b) = (2f64.exp() / 3.0, 1f64.exp() / 2.0);
        assert_close64(&grad(&x), &[a, -a, a, b, 0.0, b], 1e-15);
    }

    #[test]
    fn norm_gradcheck() {
        let g = t64(&G, &[2, 3, 2]);
        for ord in [L1, L2, Inf] {
            gradcheck(|t| t[0].norm(ord), std::slice::from_ref(&g)).unwrap();
            gradcheck(|t| t[0].norm_dim(ord, 1, false).exp(), std::slice::from_ref(&g)).unwrap();
            gradcheck(|t| t[0].norm_dim(ord, -1, true), std::slice::from_ref(&g)).unwrap();
            gradcheck(|t| t[0].norm_dim(ord, 0, false), std::slice::from_ref(&g)).unwrap();
        }
    }

    #[test]
    fn norm_propagates_nan_like_pytorch() {
        let x = t64(&[1.0, f64::NAN, 2.0, 3.0], &[2, 2]);
        for ord in [L1, L2, Inf] {
            let v = x.norm_dim(ord, 1, false).to_vec_f64();
            assert!(v[0].is_nan() && !v[1].is_nan(), "{ord:?}: {v:?}");
            assert!(x.norm(ord).item().is_nan());
        }
    }

    #[test]
    fn norms_of_empty_and_noncontiguous_and_meta_tensors() {
        let e = Tensor::zeros(&[0, 3]);
        assert_eq!(e.norm(L2).item(), 0.0);
        assert_eq!(e.norm_dim(L1, 0, false).to_vec(), vec![0.0; 3]);
        assert_eq!(e.norm_dim(Inf, 1, false).shape(), &[0]);
        let g = t64(&G, &[2, 3, 2]);
        for ord in [L1, L2, Inf] {
            check_noncontig(|t| t[0].norm(ord), std::slice::from_ref(&g));
            check_noncontig(|t| t[0].norm_dim(ord, 1, true), std::slice::from_ref(&g));
            let p = g.permute(&[2, 0, 1]);
            assert_close64(
                &p.norm_dim(ord, 2, false).to_vec_f64(),
                &p.contiguous().norm_dim(ord, 2, false).to_vec_f64(),
                1e-15,
            );
        }
        let m = Tensor::full_on(&[2, 3, 4], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        for ord in [L1, L2, Inf] {
            let y = m.norm_dim(ord, 1, false);
            assert_eq!((y.shape(), y.device()), (&[2, 4][..], Device::Meta));
            y.sum().backward();
            assert_eq!(m.grad().unwrap().shape(), &[2, 3, 4]);
            assert_eq!(m.norm(ord).shape(), &[] as &[usize]);
        }
    }

    #[test]
    #[should_panic(
        expected = "norm: the infinity norm of an empty slice is undefined (a maximum of nothing), input of shape [0, 3] along dim 0"
    )]
    fn inf_norm_of_an_empty_dim_panics() {
        Tensor::zeros(&[0, 3]).norm_dim(Inf, 0, false);
    }

    #[test]
    #[should_panic(expected = "norm: expected a floating-point tensor (f32, f64, bf16 or f16), got i64 (shape [2])")]
    fn norm_of_integers_names_the_op_and_shape() {
        Tensor::from_vec_i64(vec![3, 4], &[2]).norm(L2);
    }

    #[test]
    #[should_panic(expected = "norm: dimension 2 out of range for a tensor of rank 2 (expected -2..=1)")]
    fn norm_dim_out_of_range_panics() {
        Tensor::zeros(&[2, 3]).norm_dim(L1, 2, false);
    }
}
