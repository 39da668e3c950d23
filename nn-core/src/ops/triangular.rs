//! Lower and upper triangles of (batched) matrices: `tril` and `triu`.

use smallvec::smallvec;

use crate::autograd::{no_grad, op_result, Grads};
use crate::tensor::Tensor;

/// Keeps the elements `[.., i, j]` with `j - i <= diagonal` (`lower`) or `j - i >= diagonal`
/// (upper) and zeroes the rest; the gradient is masked the same way.
#[track_caller]
fn triangle(x: &Tensor, op: &'static str, diagonal: i64, lower: bool) -> Tensor {
    if x.rank() < 2 {
        panic!("{op}: expected a matrix or a batch of matrices (at least 2 dims), got shape {:?}", x.shape());
    }
    let (rows, cols) = (x.shape()[x.rank() - 2], x.shape()[x.rank() - 1]);
    let keep: Vec<bool> = (0..rows as i64)
        .flat_map(|i| (0..cols as i64).map(move |j| if lower { j - i <= diagonal } else { j - i >= diagonal }))
        .collect();
    let mask = Tensor::from_vec_bool(keep, &[rows, cols]).to_device(x.device());
    let y = no_grad(|| Tensor::where_cond(&mask, x, &x.scalar_like(0.0)));
    op_result(op, y.storage_arc(), y.layout().clone(), &[x], || {
        move |g: &Tensor, _: &[bool]| -> Grads { smallvec![Some(triangle(g, op, diagonal, lower))] }
    })
}

impl Tensor {
    /// The lower triangle of the last two dims (`torch.tril`): `[.., i, j]` is kept where
    /// `j - i <= diagonal` and zeroed elsewhere. `diagonal = 0` keeps the main diagonal,
    /// positive values keep that many diagonals above it, negative values drop diagonals
    /// below it. Any dtype; batched over leading dims; the gradient is `tril` of the
    /// incoming gradient.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::arange(1.0, 10.0, 1.0).reshape(&[3, 3]);
    /// assert_eq!(x.tril(0).to_vec(), vec![1.0, 0.0, 0.0, 4.0, 5.0, 0.0, 7.0, 8.0, 9.0]);
    /// assert_eq!(x.tril(-1).to_vec(), vec![0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 7.0, 8.0, 0.0]);
    /// // A causal attention mask:
    /// let causal = Tensor::ones(&[3, 3]).tril(0).eq(&Tensor::scalar(0.0));
    /// assert_eq!(causal.to_vec_bool(), vec![false, true, true, false, false, true, false, false, false]);
    /// ```
    ///
    /// # Panics
    /// When the tensor has fewer than 2 dims.
    #[track_caller]
    pub fn tril(&self, diagonal: i64) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::TRIL, &[self], &[], || {
            vec![("diagonal", crate::autograd::trace::Attr::Int(diagonal))]
        });
        triangle(self, "tril", diagonal, true)
    }

    /// The upper triangle of the last two dims (`torch.triu`): `[.., i, j]` is kept where
    /// `j - i >= diagonal` and zeroed elsewhere. Otherwise as [`tril`](Tensor::tril).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::arange(1.0, 7.0, 1.0).reshape(&[2, 3]);
    /// assert_eq!(x.triu(0).to_vec(), vec![1.0, 2.0, 3.0, 0.0, 5.0, 6.0]);
    /// assert_eq!(x.triu(1).to_vec(), vec![0.0, 2.0, 3.0, 0.0, 0.0, 6.0]);
    /// ```
    ///
    /// # Panics
    /// When the tensor has fewer than 2 dims.
    #[track_caller]
    pub fn triu(&self, diagonal: i64) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::TRIU, &[self], &[], || {
            vec![("diagonal", crate::autograd::trace::Attr::Int(diagonal))]
        });
        triangle(self, "triu", diagonal, false)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    /// `[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]`.
    fn x34() -> Tensor {
        t64(&(1..=12).map(f64::from).collect::<Vec<_>>(), &[3, 4])
    }

    #[test]
    fn tril_forward_at_every_diagonal() {
        let x = x34();
        let cases: [(i64, [f64; 12]); 6] = [
            (0, [1., 0., 0., 0., 5., 6., 0., 0., 9., 10., 11., 0.]),
            (1, [1., 2., 0., 0., 5., 6., 7., 0., 9., 10., 11., 12.]),
            (-1, [0., 0., 0., 0., 5., 0., 0., 0., 9., 10., 0., 0.]),
            (-2, [0., 0., 0., 0., 0., 0., 0., 0., 9., 0., 0., 0.]),
            (-3, [0.; 12]),
            (3, [1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12.]),
        ];
        for (k, e) in cases {
            assert_eq!(x.tril(k).to_vec_f64(), e.to_vec(), "tril({k})");
        }
    }

    #[test]
    fn triu_forward_at_every_diagonal() {
        let x = x34();
        let cases: [(i64, [f64; 12]); 5] = [
            (0, [1., 2., 3., 4., 0., 6., 7., 8., 0., 0., 11., 12.]),
            (1, [0., 2., 3., 4., 0., 0., 7., 8., 0., 0., 0., 12.]),
            (-1, [1., 2., 3., 4., 5., 6., 7., 8., 0., 10., 11., 12.]),
            (4, [0.; 12]),
            (-2, [1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12.]),
        ];
        for (k, e) in cases {
            assert_eq!(x.triu(k).to_vec_f64(), e.to_vec(), "triu({k})");
        }
    }

    #[test]
    fn batched_strided_and_other_dtypes() {
        // Two 2 x 2 matrices, the second stored transposed.
        let b = t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[2, 2, 2]);
        assert_eq!(b.tril(0).to_vec_f64(), vec![1.0, 0.0, 3.0, 4.0, 5.0, 0.0, 7.0, 8.0]);
        assert_eq!(b.transpose(1, 2).triu(0).to_vec_f64(), vec![1.0, 3.0, 0.0, 4.0, 5.0, 7.0, 0.0, 8.0]);
        let i = Tensor::from_vec_i64(vec![1, 2, 3, 4], &[2, 2]);
        assert_eq!((i.triu(0).dtype(), i.triu(0).to_vec_i64()), (DType::I64, vec![1, 2, 0, 4]));
        let m = Tensor::from_vec_bool(vec![true; 4], &[2, 2]);
        assert_eq!(m.tril(-1).to_vec_bool(), vec![false, false, true, false]);
        // NaN and inf in the zeroed part are gone, as in PyTorch.
        let n = t64(&[1.0, f64::NAN, f64::INFINITY, 2.0], &[2, 2]);
        assert_eq!(n.tril(0).to_vec_f64(), vec![1.0, 0.0, f64::INFINITY, 2.0]);
        assert_eq!(Tensor::zeros(&[0, 3]).tril(0).shape(), &[0, 3]);
        let g = t64(&(0..24).map(|v| v as f64 * 0.1 - 1.0).collect::<Vec<_>>(), &[2, 3, 4]);
        check_noncontig(|t| t[0].tril(1), std::slice::from_ref(&g));
        check_noncontig(|t| t[0].triu(-1), std::slice::from_ref(&g));
    }

    #[test]
    fn backward_masks_the_gradient_the_same_way() {
        let x = leaf(&(1..=12).map(|v| f64::from(v) * 0.1).collect::<Vec<_>>(), &[3, 4]);
        let y = x.tril(0);
        assert_eq!(y.grad_fn_name(), Some("tril"));
        y.exp().mean().backward();
        let e: Vec<f64> = (0..12)
            .map(|k| {
                let (i, j) = (k / 4, k % 4);
                let v = if j <= i { (k + 1) as f64 * 0.1 } else { 0.0 };
                if j <= i {
                    v.exp() / 12.0
                } else {
                    0.0
                }
            })
            .collect();
        assert_close64(&grad(&x), &e, 1e-15);
        let x = leaf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[1, 2, 3]);
        (x.triu(1) * t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[1, 2, 3])).sum().backward();
        assert_eq!(grad(&x), vec![0.0, 2.0, 3.0, 0.0, 0.0, 6.0]);
    }

    #[test]
    fn gradcheck_f64() {
        let g = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4, -0.15, 0.9, 1.6, -2.1, 0.05, 0.75], &[2, 2, 3]);
        for k in [-1, 0, 1, 2] {
            gradcheck(|t| t[0].tril(k).exp(), std::slice::from_ref(&g)).unwrap();
            gradcheck(|t| t[0].triu(k).exp(), std::slice::from_ref(&g)).unwrap();
        }
    }

    #[test]
    fn meta_tensors_keep_their_shape() {
        let m = Tensor::full_on(&[2, 3, 3], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        let y = m.tril(0);
        assert_eq!((y.shape(), y.device()), (&[2, 3, 3][..], Device::Meta));
        y.sum().backward();
        assert_eq!(m.grad().unwrap().shape(), &[2, 3, 3]);
    }

    #[test]
    #[should_panic(expected = "tril: expected a matrix or a batch of matrices (at least 2 dims), got shape [3]")]
    fn tril_of_a_vector_panics() {
        Tensor::zeros(&[3]).tril(0);
    }

    #[test]
    #[should_panic(expected = "triu: expected a matrix or a batch of matrices (at least 2 dims), got shape []")]
    fn triu_of_a_scalar_panics() {
        Tensor::scalar(1.0).triu(0);
    }
}
