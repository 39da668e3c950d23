//! Comparisons with a Rust scalar (`x == 0`, `ids < 2.5`, `mask != true`), with PyTorch's
//! type promotion for a wrapped number: the scalar takes the tensor's dtype within its
//! category (an `i64` tensor against `3`, a `bf16` one against `0.1`), and a float scalar
//! against an integer or bool tensor compares in the default float dtype (`f32`), as
//! PyTorch's `result_type` says; a bool tensor against an integer compares as `i64`.

use crate::dtype::DType;
use crate::tensor::Tensor;

/// A Rust scalar as an operand: its category (bool < integer < float) decides the
/// promotion, as a Python number's does in PyTorch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
}

impl From<bool> for Scalar {
    fn from(v: bool) -> Scalar {
        Scalar::Bool(v)
    }
}

macro_rules! int_scalar {
    ($($t:ty),*) => {$(
        impl From<$t> for Scalar {
            fn from(v: $t) -> Scalar {
                Scalar::Int(i64::from(v))
            }
        }
    )*};
}
int_scalar!(i8, i16, i32, i64, u8, u16, u32);

impl From<f32> for Scalar {
    fn from(v: f32) -> Scalar {
        Scalar::Float(f64::from(v))
    }
}

impl From<f64> for Scalar {
    fn from(v: f64) -> Scalar {
        Scalar::Float(v)
    }
}

impl Tensor {
    /// The two operands of a comparison of `self` with `s`, promoted as PyTorch promotes
    /// a tensor and a wrapped number.
    fn with_scalar(&self, s: Scalar) -> (Tensor, Tensor) {
        let t = self.dtype();
        match s {
            Scalar::Float(v) if !t.is_float() => {
                let x = self.to_dtype(DType::F32);
                let s = x.scalar_like(v);
                (x, s)
            }
            Scalar::Float(v) => (self.clone(), self.scalar_like(v)),
            Scalar::Int(v) if t == DType::Bool => {
                let x = self.to_dtype(DType::I64);
                let s = Tensor::from_vec_i64(vec![v], &[]).to_device(self.device());
                (x, s)
            }
            Scalar::Int(v) if t == DType::I64 => {
                // Exact: through `f64` an integer past 2^53 would round.
                (self.clone(), Tensor::from_vec_i64(vec![v], &[]).to_device(self.device()))
            }
            Scalar::Int(v) => (self.clone(), self.scalar_like(v as f64)),
            Scalar::Bool(b) => (self.clone(), self.scalar_like(f64::from(u8::from(b)))),
        }
    }

    /// `self == s` elementwise, as a `Bool` tensor, `s` a Rust scalar (PyTorch's `x == 0`).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let ids = Tensor::from_vec_i64(vec![0, 3, 0], &[3]);
    /// assert_eq!(ids.eq_scalar(0).to_vec_bool(), [true, false, true]);
    /// // A float against integers compares as floats, as in PyTorch.
    /// assert_eq!(ids.lt_scalar(2.5).to_vec_bool(), [true, false, true]);
    /// assert_eq!(Tensor::from_vec(vec![0.5, 2.0], &[2]).ge_scalar(1).to_vec_bool(), [false, true]);
    /// ```
    #[track_caller]
    pub fn eq_scalar(&self, s: impl Into<Scalar>) -> Tensor {
        let (a, b) = self.with_scalar(s.into());
        a.eq(&b)
    }
}

/// The other comparisons with a scalar, each `Tensor::$tensor_op` on the promoted operands.
macro_rules! scalar_comparisons {
    ($($name:ident => $op:ident, $doc:literal;)*) => {
        impl Tensor {$(
            #[doc = $doc]
            #[track_caller]
            pub fn $name(&self, s: impl Into<Scalar>) -> Tensor {
                let (a, b) = self.with_scalar(s.into());
                a.$op(&b)
            }
        )*}
    };
}

scalar_comparisons! {
    ne_scalar => ne, "`self != s` elementwise (NaN is unequal to everything).";
    lt_scalar => lt, "`self < s` elementwise.";
    le_scalar => le, "`self <= s` elementwise.";
    gt_scalar => gt, "`self > s` elementwise.";
    ge_scalar => ge, "`self >= s` elementwise.";
}

#[cfg(test)]
mod tests {
    use crate::{DType, Tensor};

    #[test]
    fn promotion_follows_pytorch_for_each_category() {
        // torch.tensor([1, 2, 3]) < 2.5 -> [True, True, False]; torch.tensor([1, 2, 3]) == 2
        // -> [False, True, False]; a bool tensor == 2 -> all False (1 != 2).
        let i = Tensor::from_vec_i64(vec![1, 2, 3], &[3]);
        assert_eq!(i.lt_scalar(2.5).to_vec_bool(), [true, true, false]);
        assert_eq!(i.eq_scalar(2).to_vec_bool(), [false, true, false]);
        assert_eq!(i.ne_scalar(2).to_vec_bool(), [true, false, true]);
        let b = Tensor::from_vec_bool(vec![true, false], &[2]);
        assert_eq!(b.eq_scalar(2).to_vec_bool(), [false, false]);
        assert_eq!(b.eq_scalar(1).to_vec_bool(), [true, false]);
        assert_eq!(b.eq_scalar(true).to_vec_bool(), [true, false]);
        // Exact beyond 2^53 on i64.
        let big = Tensor::from_vec_i64(vec![(1 << 53) + 1], &[1]);
        assert_eq!(big.eq_scalar((1i64 << 53) + 1).to_vec_bool(), [true]);
        // A float tensor takes the scalar in its own dtype (bf16 rounds 0.1).
        let h = Tensor::from_vec(vec![0.1, 0.2], &[2]).to_dtype(DType::BF16);
        assert_eq!(h.eq_scalar(0.1).to_vec_bool(), [true, false]);
        let f = Tensor::from_vec(vec![f32::NAN, 1.0], &[2]);
        assert_eq!(f.ne_scalar(1.0).to_vec_bool(), [true, false]);
        assert_eq!(f.gt_scalar(0).to_vec_bool(), [false, true]);
        assert_eq!(f.le_scalar(1).to_vec_bool(), [false, true]);
    }
}
