//! Quantiles with PyTorch's default linear interpolation (`torch.quantile`).

use std::sync::Arc;

use smallvec::smallvec;

use super::check_float;
use crate::autograd::{op_result, Grads};
use crate::shape::{Dim, Dims, Layout};
use crate::tensor::Tensor;

const OP: &str = crate::names::QUANTILE;

impl Tensor {
    /// The `q`-th quantile with linear interpolation, `torch.quantile(x, q, dim, keepdim)`:
    /// for each slice sorted ascending, `rank = q (n - 1)` and the result is
    /// `lerp(sorted[floor(rank)], sorted[ceil(rank)], rank - floor(rank))`.
    ///
    /// `dim = None` takes the quantile of all elements (a 0-d result, or all dims kept as 1
    /// with `keepdim`); `Some(d)` reduces dimension `d` (negative counts from the back).
    /// The dim is an `i64` so that `None` needs no type annotation. The rank and the
    /// interpolation are computed in the input's precision, as PyTorch's. A slice holding
    /// a NaN gives NaN. The gradient flows to the two neighbours with weights
    /// `1 - (rank - floor(rank))` and `rank - floor(rank)`, as through PyTorch's sort and
    /// lerp. Among equal values the earlier one counts as the lower neighbour (the sort is
    /// stable; PyTorch's default sort leaves that order unspecified); a NaN slice's
    /// gradient goes to its last NaN.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![4.0, 1.0, 3.0, 2.0, 10.0, 0.0, 5.0, 5.0], &[2, 4]);
    /// assert_eq!(x.quantile(0.5, Some(1), false).to_vec(), vec![2.5, 5.0]);
    /// assert_eq!(x.quantile(0.25, Some(-1), true).shape(), &[2, 1]);
    /// assert_eq!(x.quantile(0.0, None, false).item(), 0.0);
    /// assert_eq!(x.quantile(1.0, None, true).shape(), &[1, 1]);
    /// ```
    ///
    /// # Panics
    /// When `q` is outside `[0, 1]` (or NaN), the tensor is empty or not floating-point, or
    /// `dim` is out of range.
    #[track_caller]
    pub fn quantile(&self, q: f64, dim: Option<i64>, keepdim: bool) -> Tensor {
        let _op = crate::autograd::entry::op_entry!(untraced OP, [Some(self)], again = |x| x[0].expect("present").quantile(q, dim, keepdim));
        check_float(OP, self);
        if !(0.0..=1.0).contains(&q) {
            panic!("{OP}: q must be in [0, 1], got {q} (input of shape {:?})", self.shape());
        }
        if self.numel() == 0 {
            panic!("{OP}: expected a non-empty input, got shape {:?}", self.shape());
        }
        match dim {
            None => {
                let y = quantile_along(&self.reshape(&[self.numel()]), q, 0);
                y.reshape(&if keepdim { vec![1; self.rank()] } else { vec![] })
            }
            Some(d) => {
                let d = d.resolve(self.rank(), OP);
                if self.rank() == 0 {
                    return quantile_along(&self.reshape(&[1]), q, 0).reshape(&[]);
                }
                let y = quantile_along(self, q, d);
                if keepdim {
                    y
                } else {
                    y.squeeze_dim(d)
                }
            }
        }
    }
}

/// The quantile along `d` of a non-empty `x`, with `d` kept as size 1.
fn quantile_along(x: &Tensor, q: f64, d: usize) -> Tensor {
    let n = x.shape()[d];
    let mut kept: Dims = x.shape().into();
    kept[d] = 1;
    let out_len: usize = kept.iter().product();
    // `d` moved last: each row of the permuted view is one slice.
    let perm: Vec<usize> = (0..x.rank()).filter(|&i| i != d).chain([d]).collect();
    let moved = x.layout().permute(&perm);
    let [values, below, above, weights] = x.storage_arc().quantile(&moved, n, q);
    debug_assert_eq!(values.len(), out_len);
    let storage = values;
    let saved = Some((
        Tensor::from_storage(below, &kept),
        Tensor::from_storage(above, &kept),
        Tensor::from_storage(weights, &kept),
    ));
    op_result(OP, Arc::new(storage), Layout::contiguous(&kept), &[x], || {
        let in_shape: Dims = x.shape().into();
        move |g: &Tensor, _: &[bool]| -> Grads {
            let zero = Tensor::full_on(&in_shape, 0.0, g.dtype(), g.device());
            let Some((below, above, w)) = &saved else { return smallvec![Some(zero)] };
            let to_below = g * &(1.0 - w);
            smallvec![Some(zero.scatter_add(d, below, &to_below).scatter_add(d, above, &(g * w)))]
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    /// `[[4, 1, 3, 2, 7], [0, -2, 5, 9, 1]]`: sorted `[1, 2, 3, 4, 7]` and `[-2, 0, 1, 5, 9]`.
    const X: [f64; 10] = [4.0, 1.0, 3.0, 2.0, 7.0, 0.0, -2.0, 5.0, 9.0, 1.0];
    /// Gradcheck input: 2 x 3 x 4, distinct values.
    const G: [f64; 24] = [
        0.3, -1.2, 2.0, -0.7, 1.1, 0.4, -0.15, 0.9, 1.6, -2.1, 0.05, 0.75, 1.35, -0.45, 0.6, -1.8, 2.3, 0.15, -0.95,
        1.85, -0.3, 0.85, -1.55, 0.2,
    ];

    #[test]
    fn quantile_forward_along_a_dim() {
        let x = t64(&X, &[2, 5]);
        // n = 5: rank = 4 q.
        let cases = [
            (0.0, [1.0, -2.0]),
            (0.25, [2.0, 0.0]),
            (0.5, [3.0, 1.0]),
            (0.6, [3.4, 2.6]), // rank 2.4: 3 + 0.4 (4 - 3), 1 + 0.4 (5 - 1)
            (0.9, [5.8, 7.4]), // rank 3.6: 4 + 0.6 (7 - 4), 5 + 0.6 (9 - 5)
            (1.0, [7.0, 9.0]),
        ];
        for (q, e) in cases {
            assert_close64(&x.quantile(q, Some(1), false).to_vec_f64(), &e, 1e-15);
            assert_close64(&x.quantile(q, Some(-1), true).to_vec_f64(), &e, 1e-15);
        }
        assert_eq!(x.quantile(0.5, Some(1), true).shape(), &[2, 1]);
        assert_eq!(x.quantile(0.5, Some(1), false).shape(), &[2]);
        // Along dim 0 (pairs): the midpoint at q = 0.5.
        assert_eq!(x.quantile(0.5, Some(0), false).to_vec_f64(), vec![2.0, -0.5, 4.0, 5.5, 4.0]);
        assert_eq!(x.quantile(0.5, Some(-2), true).shape(), &[1, 5]);
        // f32 computes the rank and the interpolation in f32, as PyTorch: rank 2.4000001,
        // so row 1 gives 1 + 0.4000001 * 4 = 2.6000004 (torch.quantile's f32 result).
        let f = Tensor::from_vec(X.iter().map(|&v| v as f32).collect(), &[2, 5]);
        assert_eq!(f.quantile(0.6, Some(1), false).to_vec(), vec![3.4, 2.6000004]);
        assert_eq!(f.quantile(0.6, Some(1), false).dtype(), DType::F32);
    }

    #[test]
    fn quantile_forward_over_all_elements() {
        let x = t64(&X, &[2, 5]);
        // All ten sorted: [-2, 0, 1, 1, 2, 3, 4, 5, 7, 9]; rank = 9 q.
        assert_eq!(x.quantile(0.5, None, false).item(), 2.5);
        assert_eq!(x.quantile(0.5, None, false).shape(), &[] as &[usize]);
        assert_eq!(x.quantile(0.5, None, true).shape(), &[1, 1]);
        assert_close64(&[x.quantile(0.1, None, false).item()], &[-0.2], 1e-15);
        assert_eq!(x.quantile(1.0, None, false).item(), 9.0);
        let s = t64(&[3.5], &[]);
        for y in [s.quantile(0.3, None, false), s.quantile(0.3, None, true), s.quantile(0.7, Some(0), true)] {
            assert_eq!((y.shape(), y.item()), (&[] as &[usize], 3.5));
        }
        assert_eq!(t64(&[2.0, 2.0, 1.0], &[3]).quantile(0.75, Some(0), false).item(), 2.0);
    }

    #[test]
    fn quantile_is_nan_for_a_slice_with_nan_like_pytorch() {
        let x = t64(&[1.0, f64::NAN, 3.0, 1.0, 2.0, 3.0], &[2, 3]);
        let y = x.quantile(0.5, Some(1), false).to_vec_f64();
        assert!(y[0].is_nan());
        assert_eq!(y[1], 2.0);
        assert!(x.quantile(0.0, None, false).item().is_nan());
        // The gradient goes to the NaN, which PyTorch's sort puts last.
        let x = leaf(&[1.0, f64::NAN, 3.0], &[3]);
        x.quantile(0.2, Some(0), false).backward();
        assert_eq!(grad(&x), vec![0.0, 1.0, 0.0]);
    }

    #[test]
    fn quantile_backward_through_exp_mean() {
        // Row 0 at q = 0.6: rank 2.4 between 3 (index 2) and 4 (index 0), weights 0.6 / 0.4.
        // Row 1: between 1 (index 4) and 5 (index 2).
        let x = leaf(&X, &[2, 5]);
        x.quantile(0.6, Some(1), false).exp().mean().backward();
        let (a, b) = (3.4f64.exp() / 2.0, 2.6f64.exp() / 2.0);
        let e = [0.4 * a, 0.0, 0.6 * a, 0.0, 0.0, 0.0, 0.0, 0.4 * b, 0.0, 0.6 * b];
        assert_close64(&grad(&x), &e, 1e-14);
        // At an integer rank the whole gradient goes to one element.
        let x = leaf(&X, &[2, 5]);
        (x.quantile(0.5, None, true) * 3.0).exp().sum().backward();
        let mut e = vec![0.0; 10];
        // All ten sorted: rank 4.5 between 2 (index 3) and 3 (index 2).
        e[3] = 0.5 * 3.0 * 7.5f64.exp();
        e[2] = 0.5 * 3.0 * 7.5f64.exp();
        assert_close64(&grad(&x), &e, 1e-14);
        // Ties: the earlier element is "below".
        let t = leaf(&[5.0, 5.0], &[2]);
        (t.quantile(0.25, Some(0), false) * 4.0).backward();
        assert_eq!(grad(&t), vec![3.0, 1.0]);
    }

    #[test]
    fn quantile_gradcheck() {
        let g = t64(&G, &[2, 3, 4]);
        for q in [0.0, 0.3, 0.5, 0.85, 1.0] {
            gradcheck(|t| t[0].quantile(q, Some(2), false), std::slice::from_ref(&g)).unwrap();
            gradcheck(|t| t[0].quantile(q, Some(1), true).exp(), std::slice::from_ref(&g)).unwrap();
            gradcheck(|t| t[0].quantile(q, Some(0), false), std::slice::from_ref(&g)).unwrap();
            gradcheck(|t| t[0].quantile(q, None, false), std::slice::from_ref(&g)).unwrap();
        }
    }

    #[test]
    fn quantile_on_noncontiguous_and_meta_inputs() {
        let g = t64(&G, &[2, 3, 4]);
        check_noncontig(|t| t[0].quantile(0.3, Some(1), false), std::slice::from_ref(&g));
        check_noncontig(|t| t[0].quantile(0.7, None, false), std::slice::from_ref(&g));
        let p = g.permute(&[2, 0, 1]);
        assert_eq!(
            p.quantile(0.4, Some(0), false).to_vec_f64(),
            p.contiguous().quantile(0.4, Some(0), false).to_vec_f64()
        );
        let m = Tensor::full_on(&[2, 3, 4], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        let y = m.quantile(0.5, Some(1), false);
        assert_eq!((y.shape(), y.device()), (&[2, 4][..], Device::Meta));
        y.sum().backward();
        assert_eq!(m.grad().unwrap().shape(), &[2, 3, 4]);
        assert_eq!(m.quantile(0.5, None, true).shape(), &[1, 1, 1]);
    }

    #[test]
    #[should_panic(expected = "quantile: q must be in [0, 1], got 1.5 (input of shape [2, 3])")]
    fn q_above_one_panics_naming_q() {
        Tensor::zeros(&[2, 3]).quantile(1.5, None, false);
    }

    #[test]
    #[should_panic(expected = "quantile: q must be in [0, 1], got NaN (input of shape [3])")]
    fn nan_q_panics() {
        Tensor::zeros(&[3]).quantile(f64::NAN, Some(0), false);
    }

    #[test]
    #[should_panic(expected = "quantile: expected a non-empty input, got shape [2, 0]")]
    fn quantile_of_an_empty_tensor_panics() {
        Tensor::zeros(&[2, 0]).quantile(0.5, Some(0), false);
    }

    #[test]
    #[should_panic(
        expected = "quantile: expected a floating-point tensor (f32, f64, bf16 or f16), got i64 (shape [2])"
    )]
    fn quantile_of_integers_panics() {
        Tensor::from_vec_i64(vec![1, 2], &[2]).quantile(0.5, None, false);
    }

    #[test]
    #[should_panic(expected = "quantile: dimension 2 out of range for a tensor of rank 2 (expected -2..=1)")]
    fn quantile_dim_out_of_range_panics() {
        Tensor::zeros(&[2, 3]).quantile(0.5, Some(2), false);
    }
}
