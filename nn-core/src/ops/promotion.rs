//! PyTorch's type promotion (`torch.result_type`): the dtype an elementwise op on tensors
//! of different dtypes computes and returns in.
//!
//! Dtypes fall in three categories, bool < integer < floating. The result is the highest
//! category among the operands; a tensor with dimensions outranks a 0-dim one, which is
//! a *wrapped number*: it can raise the category but not the width within it, so
//! `bf16[3] * f32[]` is bf16, `i64[3] * f32[]` is f32 and `f32[3] * f64[3]` is f64. Two
//! half types of different formats (f16 with bf16) meet at f32.
//!
//! ```
//! use nn_core::{result_type, DType, Tensor};
//! let half = Tensor::ones(&[3]).to_dtype(DType::BF16);
//! assert_eq!(result_type(&half, &Tensor::full(&[], 2.0)), DType::BF16);
//! let mask = Tensor::from_vec_bool(vec![true, false, true], &[3]);
//! assert_eq!(result_type(&Tensor::ones(&[3]), &mask), DType::F32);
//! let ids = Tensor::from_vec_i64(vec![1, 2, 3], &[3]);
//! assert_eq!(result_type(&ids, &Tensor::ones(&[3]).to_dtype(DType::F64)), DType::F64);
//! // The elementwise ops promote: a float times a bool mask is a float.
//! assert_eq!((Tensor::full(&[3], 2.0) * &mask).to_vec(), [2.0, 0.0, 2.0]);
//! ```

use crate::dtype::DType;
use crate::tensor::Tensor;

/// The category of a dtype: bool 0, integer 1, floating 2.
fn category(d: DType) -> u8 {
    match d {
        DType::Bool => 0,
        DType::I64 => 1,
        DType::F16 | DType::BF16 | DType::F32 | DType::F64 => 2,
    }
}

/// PyTorch's `torch.promote_types`: the smallest dtype both convert to without losing their
/// category (bool < i64 < the floats; f16 with bf16 is f32; floats by width).
pub fn promote_types(a: DType, b: DType) -> DType {
    if a == b {
        return a;
    }
    match (category(a), category(b)) {
        (ca, cb) if ca != cb => {
            if ca > cb {
                a
            } else {
                b
            }
        }
        // Both floating, of different dtypes.
        _ => {
            let width = |d: DType| d.size_in_bytes();
            match width(a).cmp(&width(b)) {
                std::cmp::Ordering::Greater => a,
                std::cmp::Ordering::Less => b,
                // f16 and bf16: neither holds the other.
                std::cmp::Ordering::Equal => DType::F32,
            }
        }
    }
}

/// The dtype PyTorch computes `a op b` in for an elementwise op (`torch.result_type(a, b)`):
/// see the [module docs](self).
pub fn result_type(a: &Tensor, b: &Tensor) -> DType {
    let (da, db) = (a.dtype(), b.dtype());
    if da == db {
        return da;
    }
    // A 0-dim tensor beside a tensor with dimensions is a wrapped number: it raises the
    // category only (PyTorch's `combine_categories(dim_result, zero_dim_result)`).
    let (dim, zero) = match (a.rank(), b.rank()) {
        (0, r) if r > 0 => (db, da),
        (r, 0) if r > 0 => (da, db),
        _ => return promote_types(da, db),
    };
    if category(dim) == 2 {
        dim
    } else if dim == DType::Bool || category(zero) == 2 {
        promote_types(dim, zero)
    } else {
        dim
    }
}

/// [`result_type`] of any number of operands (PyTorch's `at::native::result_type` over a
/// list): the operands with dimensions promote among themselves, the 0-dim ones among
/// themselves, and a 0-dim result raises the other's category only.
pub(crate) fn result_type_of(operands: &[&Tensor]) -> DType {
    let fold =
        |zero: bool| operands.iter().filter(|t| (t.rank() == 0) == zero).map(|t| t.dtype()).reduce(promote_types);
    match (fold(false), fold(true)) {
        (Some(dim), Some(zero)) if category(dim) != 2 && (dim == DType::Bool || category(zero) == 2) => {
            promote_types(dim, zero)
        }
        (Some(dim), _) => dim,
        (None, Some(zero)) => zero,
        (None, None) => DType::F32,
    }
}

/// `a` and `b` converted to their [`result_type`] when they differ and it is a floating
/// dtype (what the elementwise float kernels compute in); `None` when nothing converts:
/// equal dtypes, or an integer or bool result, which the float-only kernels refuse by name.
pub(crate) fn promoted(a: &Tensor, b: &Tensor) -> Option<(Tensor, Tensor)> {
    if a.dtype() == b.dtype() || a.device() != b.device() {
        return None;
    }
    let to = result_type(a, b);
    to.is_compute_float().then(|| (a.to_dtype(to), b.to_dtype(to)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(d: DType, rank: usize) -> Tensor {
        Tensor::zeros(&vec![2; rank]).to_dtype(d)
    }

    /// PyTorch 2.15's `torch.result_type` for every pair of nn's dtypes, at ranks 1 and 0
    /// (recorded with `torch.result_type(torch.zeros(2, dtype=a), torch.zeros(2 or (), dtype=b))`).
    #[test]
    fn result_types_are_pytorchs() {
        use DType::*;
        // (a, b, both with dims, a with dims and b 0-dim)
        let table = [
            (F32, F32, F32, F32),
            (F32, F64, F64, F32),
            (F32, F16, F32, F32),
            (F32, BF16, F32, F32),
            (F32, I64, F32, F32),
            (F32, Bool, F32, F32),
            (F64, F32, F64, F64),
            (F64, F64, F64, F64),
            (F64, F16, F64, F64),
            (F64, BF16, F64, F64),
            (F64, I64, F64, F64),
            (F64, Bool, F64, F64),
            (F16, F32, F32, F16),
            (F16, F64, F64, F16),
            (F16, F16, F16, F16),
            (F16, BF16, F32, F16),
            (F16, I64, F16, F16),
            (F16, Bool, F16, F16),
            (BF16, F32, F32, BF16),
            (BF16, F64, F64, BF16),
            (BF16, F16, F32, BF16),
            (BF16, BF16, BF16, BF16),
            (BF16, I64, BF16, BF16),
            (BF16, Bool, BF16, BF16),
            (I64, F32, F32, F32),
            (I64, F64, F64, F64),
            (I64, F16, F16, F16),
            (I64, BF16, BF16, BF16),
            (I64, I64, I64, I64),
            (I64, Bool, I64, I64),
            (Bool, F32, F32, F32),
            (Bool, F64, F64, F64),
            (Bool, F16, F16, F16),
            (Bool, BF16, BF16, BF16),
            (Bool, I64, I64, I64),
            (Bool, Bool, Bool, Bool),
        ];
        for (a, b, dims, zero) in table {
            assert_eq!(result_type(&t(a, 1), &t(b, 1)), dims, "{a} {b} with dims");
            assert_eq!(result_type(&t(a, 1), &t(b, 0)), zero, "{a}[2] with a 0-dim {b}");
            assert_eq!(result_type(&t(b, 0), &t(a, 1)), zero, "a 0-dim {b} with {a}[2]");
        }
    }

    #[test]
    fn mixed_float_arithmetic_promotes_and_keeps_gradients() {
        let a = Tensor::from_vec(vec![1.0, 2.0], &[2]).requires_grad_(true);
        let b = Tensor::from_vec_f64(vec![3.0, 4.0], &[2]).requires_grad_(true);
        let y = &a * &b;
        assert_eq!(y.dtype(), DType::F64);
        y.sum().backward();
        assert_eq!(a.grad().unwrap().dtype(), DType::F32);
        assert_eq!(a.grad().unwrap().to_vec(), [3.0, 4.0]);
        assert_eq!(b.grad().unwrap().to_vec_of::<f64>(), [1.0, 2.0]);
    }
}
