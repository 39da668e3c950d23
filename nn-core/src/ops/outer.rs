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
        for (what, t) in [("self", self), ("vec2", other)] {
            if t.rank() != 1 {
                panic!("outer: Expected 1-D argument {what}, but got {}-D (shape {:?})", t.rank(), t.shape());
            }
        }
        check_same("outer", &[self, other]);
        self.unsqueeze(1) * other.unsqueeze(0)
    }
}
