//! Numerically stable softmax and log-softmax along a dimension.

use std::sync::Arc;

use smallvec::smallvec;

use super::check_float;
use crate::autograd::{op_result, Grads};
use crate::shape::{Dim, Layout};
use crate::tensor::Tensor;

fn softmax_impl<D: Dim>(x: &Tensor, dim: D, log: bool) -> Tensor {
    let op = if log { crate::names::LOG_SOFTMAX } else { crate::names::SOFTMAX };
    check_float(op, x);
    let x0 = if x.rank() == 0 { x.reshape(&[1]) } else { x.clone() };
    let d = dim.resolve(x0.rank(), op);
    let shape = x0.shape();
    let (outer, n, inner) = (shape[..d].iter().product(), shape[d], shape[d + 1..].iter().product());
    let storage = Arc::new(x.storage_arc().softmax(x.layout(), (outer, n, inner), log));
    let y = storage.clone();
    op_result(op, storage, Layout::contiguous(x.shape()), &[x], || {
        let shape: crate::shape::Dims = x.shape().into();
        move |g: &Tensor, _: &[bool]| -> Grads {
            if inner == 1 && n > 0 && g.dtype() == y.dtype() {
                if let Some(gx) = g.storage_arc().softmax_rows_backward(g.layout(), &y, n, log) {
                    return smallvec![Some(Tensor::from_parts(Arc::new(gx), Layout::contiguous(&shape), None))];
                }
            }
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
        // Under GPU autocast (PyTorch's CUDA list): in f32.
        let _op = crate::autograd::entry::op_entry!(
            crate::names::SOFTMAX,
            [self],
            attrs = || { vec![("dim", crate::autograd::trace::int(dim.resolve(self.rank(), "softmax")))] },
            again = |c: &[Option<&crate::Tensor>]| c[0].expect("present").softmax(dim)
        );
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
        // Under GPU autocast (PyTorch's CUDA list): in f32.
        let _op = crate::autograd::entry::op_entry!(
            crate::names::LOG_SOFTMAX,
            [self],
            attrs = || { vec![("dim", crate::autograd::trace::int(dim.resolve(self.rank(), "log_softmax")))] },
            again = |c: &[Option<&crate::Tensor>]| c[0].expect("present").log_softmax(dim)
        );
        softmax_impl(self, dim, true)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64};
    use crate::testing::{assert_close, gradcheck};
    use crate::{DType, Device, Tensor};

    const P: [f64; 3] = [0.09003057317038046, 0.24472847105479767, 0.6652409557748219];

    fn g() -> Tensor {
        t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4, -0.15, 0.9, 1.6, -2.1, 0.05, 0.75], &[2, 3, 2])
    }

    #[test]
    fn softmax_forward() {
        let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]);
        let p32: Vec<f32> = P.iter().map(|&v| v as f32).collect();
        assert_close(&x.softmax(0).to_vec(), &p32, 1e-7, 1e-6);
        assert_close64(&t64(&[1.0, 2.0, 3.0], &[3]).softmax(-1).to_vec_f64(), &P, 1e-15);
        // Along dim 0 of [[1, 2], [3, 5]]: columns are independent.
        let y = t64(&[1.0, 2.0, 3.0, 5.0], &[2, 2]).softmax(0).to_vec_f64();
        assert_close64(&y, &[0.11920292202211755, 0.04742587317756679, 0.8807970779778824, 0.9525741268224333], 1e-15);
        // Rows sum to one along the middle dim of a 3-D tensor.
        let s = g().softmax(1).sum_dim(1, false).to_vec_f64();
        assert_close64(&s, &[1.0; 4], 1e-15);
    }

    #[test]
    fn log_softmax_forward() {
        let l = t64(&[1.0, 2.0, 3.0], &[3]).log_softmax(0).to_vec_f64();
        assert_close64(&l, &[-2.40760596444438, -1.4076059644443801, -0.4076059644443803], 1e-15);
        let l32 = Tensor::from_vec(vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0], &[2, 3]).log_softmax(1).to_vec();
        assert_close(&l32, &[-2.407606, -1.4076059, -0.40760595, -2.407606, -1.4076059, -0.40760595], 1e-6, 1e-6);
    }

    #[test]
    fn softmax_backward() {
        let x = leaf(&[1.0, 2.0, 3.0], &[3]);
        (x.softmax(0) * t64(&[1.0, -1.0, 2.0], &[3])).sum().backward();
        // y_i (w_i - sum_j w_j y_j)
        assert_close64(&grad(&x), &[-0.01582593550447035, -0.5324762950097619, 0.5483022305142321], 1e-14);
    }

    #[test]
    fn log_softmax_backward() {
        let x = leaf(&[1.0, 2.0, 3.0], &[3]);
        (x.log_softmax(0) * t64(&[1.0, -1.0, 2.0], &[3])).sum().backward();
        // w_i - y_i sum_j w_j
        assert_close64(&grad(&x), &[0.8199388536592391, -1.4894569421095953, 0.6695180884503562], 1e-14);
    }

    #[test]
    fn softmax_and_log_softmax_gradcheck() {
        for d in [0i64, 1, 2, -1] {
            gradcheck(|t| t[0].softmax(d), &[g()]).unwrap();
            gradcheck(|t| t[0].log_softmax(d), &[g()]).unwrap();
        }
        gradcheck(|t| t[0].softmax(1).log(), &[g()]).unwrap();
    }

    /// The fused last-dim backward against the composite formula, on enough f32 rows to
    /// split over threads and on a strided upstream gradient.
    #[test]
    fn fused_softmax_backward_matches_the_composite() {
        crate::manual_seed(5);
        let x = Tensor::randn(&[300, 3, 70]) * 2.0;
        let g = Tensor::randn(&[70, 3, 300]).transpose(0, 2);
        for log in [false, true] {
            let xl = x.detach().requires_grad_(true);
            let y = if log { xl.log_softmax(-1) } else { xl.softmax(-1) };
            y.backward_with(&g, false);
            let y = y.detach();
            let expect =
                if log { &g - &(y.exp() * g.sum_dim(2, true)) } else { &y * &(&g - &(&g * &y).sum_dim(2, true)) };
            crate::testing::assert_close(&xl.grad().unwrap().to_vec(), &expect.to_vec(), 1e-6, 1e-5);
        }
    }

    #[test]
    fn softmax_is_stable_for_large_and_infinite_inputs() {
        let x = Tensor::from_vec(vec![1000.0, 1001.0, -1000.0], &[3]);
        let p = x.softmax(0).to_vec();
        assert_close(&p, &[0.26894142, 0.7310586, 0.0], 1e-7, 1e-6);
        let l = x.log_softmax(0).to_vec();
        assert_close(&l, &[-1.3132616, -0.31326166, -2001.3132], 1e-5, 1e-6);
        // Masked (-inf) entries get probability 0 and log-probability -inf.
        let m = Tensor::from_vec(vec![0.0, f32::NEG_INFINITY, 0.0], &[3]);
        assert_eq!(m.softmax(0).to_vec(), vec![0.5, 0.0, 0.5]);
        assert_eq!(m.log_softmax(0).to_vec()[1], f32::NEG_INFINITY);
        // Fully masked rows give NaN, as PyTorch.
        let all = Tensor::full(&[2], f64::NEG_INFINITY);
        assert!(all.softmax(0).to_vec().iter().all(|v| v.is_nan()));
        // The gradient through a masked entry is 0, not NaN.
        let x = leaf(&[0.5, 0.0, -0.5], &[3]);
        let mask = Tensor::from_vec_bool(vec![false, true, false], &[3]);
        (x.masked_fill(&mask, f64::NEG_INFINITY).softmax(0) * t64(&[1.0, 2.0, 3.0], &[3])).sum().backward();
        let gx = grad(&x);
        assert_eq!(gx[1], 0.0);
        assert!(gx.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn softmax_of_rank0_is_one() {
        let s = Tensor::from_vec_f64(vec![3.0], &[]).requires_grad_(true);
        let y = s.softmax(0);
        assert_eq!((y.shape(), y.item()), (&[] as &[usize], 1.0));
        assert_eq!(s.log_softmax(-1).item(), 0.0);
        (y * 5.0).backward();
        assert_eq!(s.grad().unwrap().item(), 0.0);
    }

    #[test]
    fn softmax_on_noncontiguous_inputs() {
        for d in [0usize, 1, 2] {
            check_noncontig(|t| t[0].softmax(d), &[g()]);
            check_noncontig(|t| t[0].log_softmax(d), &[g()]);
            let p = g().permute(&[2, 0, 1]);
            assert_eq!(p.softmax(d).to_vec_f64(), p.contiguous().softmax(d).to_vec_f64());
            let e = g().narrow(0, 0, 1).expand(&[3, 3, 2]);
            assert_eq!(e.log_softmax(d).to_vec_f64(), e.contiguous().log_softmax(d).to_vec_f64());
        }
    }

    #[test]
    fn large_softmax_takes_the_parallel_path() {
        let rows = 64;
        let n = super::super::PAR_THRESHOLD / rows * 2;
        let x = Tensor::arange(0.0, (rows * n) as f64, 1.0).reshape(&[rows, n]) * 1e-3;
        let s = x.softmax(1).sum_dim(1, false).to_vec();
        assert_close(&s, &vec![1.0; rows], 1e-5, 0.0);
        let first = x.narrow(0, 0, 1).softmax(1).to_vec();
        assert_eq!(x.softmax(1).narrow(0, 0, 1).to_vec(), first);
    }

    #[test]
    fn softmax_on_meta_and_empty() {
        let m = Tensor::full_on(&[2, 7], 0.0, DType::F64, Device::Meta).requires_grad_(true);
        let y = m.log_softmax(1);
        assert_eq!((y.shape(), y.dtype(), y.device()), (&[2, 7][..], DType::F64, Device::Meta));
        (y.sum() + m.softmax(0).sum()).backward();
        assert_eq!((m.grad().unwrap().shape(), m.grad().unwrap().device()), (&[2, 7][..], Device::Meta));
        assert_eq!(Tensor::zeros(&[0, 4]).softmax(1).shape(), &[0, 4]);
    }

    #[test]
    #[should_panic(expected = "softmax: dimension 2 out of range for a tensor of rank 2 (expected -2..=1)")]
    fn softmax_dim_out_of_range_names_the_op() {
        Tensor::zeros(&[2, 3]).softmax(2);
    }

    #[test]
    #[should_panic(expected = "log_softmax: expected a floating-point tensor (f32, f64, bf16 or f16), got i64")]
    fn log_softmax_of_integers_panics() {
        Tensor::from_vec_i64(vec![1, 2], &[2]).log_softmax(0);
    }
}
