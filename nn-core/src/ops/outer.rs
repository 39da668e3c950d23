//! The outer product of two vectors.

use super::check_same;
use crate::tensor::Tensor;

impl Tensor {
    /// The outer product of two 1-D tensors, `torch.outer(a, b)`: `[n] x [m] -> [n, m]`
    /// with `y[i][j] = a[i] * b[j]` (a broadcast product, so both get gradients: `g b` and
    /// `g^T a`).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let a = Tensor::from_vec(vec![1.0, 2.0], &[2]);
    /// let b = Tensor::from_vec(vec![3.0, 4.0, 5.0], &[3]);
    /// let y = a.outer(&b);
    /// assert_eq!(y.shape(), &[2, 3]);
    /// assert_eq!(y.to_vec(), vec![3.0, 4.0, 5.0, 6.0, 8.0, 10.0]);
    /// ```
    ///
    /// # Panics
    /// When either operand is not 1-D, or they differ in dtype or device.
    #[track_caller]
    pub fn outer(&self, other: &Tensor) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::OUTER, &[self, other], &[], Vec::new);
        for (what, t) in [("self", self), ("vec2", other)] {
            if t.rank() != 1 {
                panic!("outer: Expected 1-D argument {what}, but got {}-D (shape {:?})", t.rank(), t.shape());
            }
        }
        check_same("outer", &[self, other]);
        self.unsqueeze(1) * other.unsqueeze(0)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, grad, leaf, t64};
    use crate::Tensor;

    #[test]
    fn outer_forward_backward_and_gradcheck() {
        let a = leaf(&[1.0, -2.0], &[2]);
        let b = leaf(&[0.5, 3.0, -1.0], &[3]);
        let y = a.outer(&b);
        assert_eq!(y.to_vec_f64(), vec![0.5, 3.0, -1.0, -1.0, -6.0, 2.0]);
        y.exp().mean().backward();
        let g: Vec<f64> = y.to_vec_f64().iter().map(|v| v.exp() / 6.0).collect();
        let ga = [g[0] * 0.5 + g[1] * 3.0 - g[2], g[3] * 0.5 + g[4] * 3.0 - g[5]];
        assert_close64(&grad(&a), &ga, 1e-15);
        let gb: Vec<f64> = (0..3).map(|j| g[j] - 2.0 * g[3 + j]).collect();
        assert_close64(&grad(&b), &gb, 1e-15);
        gradcheck(|t| t[0].outer(&t[1]).sin(), &[t64(&[0.3, -1.2, 2.0], &[3]), t64(&[0.7, 0.1], &[2])]).unwrap();
        assert_eq!(Tensor::ones(&[0]).outer(&Tensor::ones(&[2])).shape(), &[0, 2]);
    }

    #[test]
    #[should_panic(expected = "outer: Expected 1-D argument self, but got 2-D (shape [2, 1])")]
    fn outer_of_a_matrix_panics() {
        Tensor::ones(&[2, 1]).outer(&Tensor::ones(&[2]));
    }

    #[test]
    #[should_panic(expected = "outer: Expected 1-D argument vec2, but got 0-D")]
    fn outer_with_a_scalar_panics() {
        Tensor::ones(&[2]).outer(&Tensor::scalar(1.0));
    }
}
