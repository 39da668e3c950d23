//! Element types: the [`DType`] tag and the sealed [`Element`] / [`FloatElement`] traits
//! that tie each Rust element type to its tag.

use std::fmt;

use half::{bf16, f16};

/// The element type of a tensor.
///
/// `F32` and `F64` are the compute types (every op supports them; gradient checks run in
/// `F64`). `F16` and `BF16` are the half types of mixed precision
/// ([`autocast`](crate::amp::autocast)): every floating-point op takes them, computing in
/// `f32` on the CPU and rounding its result, as PyTorch's CPU kernels do. `I64` holds
/// indices and labels (and PyTorch's `num_batches_tracked`). `Bool` is produced by
/// comparisons and used as a mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float, the default.
    F32,
    /// 64-bit IEEE float.
    F64,
    /// 64-bit signed integer.
    I64,
    /// 16-bit IEEE half-precision float.
    F16,
    /// bfloat16.
    BF16,
    /// Boolean, one byte per element.
    Bool,
}

impl DType {
    /// Bytes per element.
    ///
    /// ```
    /// use nn_core::DType;
    /// assert_eq!(DType::BF16.size_in_bytes(), 2);
    /// assert_eq!(DType::I64.size_in_bytes(), 8);
    /// ```
    pub const fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::F16 | DType::BF16 => 2,
            DType::Bool => 1,
        }
    }

    /// True for the floating-point types (`F32`, `F64`, `F16`, `BF16`), the ones that
    /// `to_dtype` on a module converts and that may require gradients.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// True for the types floating-point ops take: all four floats (the half types
    /// compute through `f32`, see [`DType`]).
    pub const fn is_compute_float(self) -> bool {
        self.is_float()
    }

    /// True for the half types, `F16` and `BF16`.
    ///
    /// ```
    /// use nn_core::DType;
    /// assert!(DType::BF16.is_half() && DType::F16.is_half() && !DType::F32.is_half());
    /// ```
    pub const fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    /// The short name used in messages and printouts (`"f32"`, `"i64"`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::Bool => "bool",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that can be stored in a tensor. Sealed: implemented for `f32`, `f64`,
/// `i64`, `half::f16`, `half::bf16` and `bool`.
pub trait Element: Copy + Send + Sync + fmt::Debug + PartialOrd + 'static + sealed::Sealed {
    /// The dtype tag of this element type.
    const DTYPE: DType;
    /// Converts to `f64` (lossless for every type but `i64` above 2^53).
    fn as_f64(self) -> f64;
    /// Converts from `f64` with the usual `as` rounding (saturating for integers).
    fn from_f64(v: f64) -> Self;
}

/// An element type arithmetic kernels run in: `f32` and `f64`.
pub trait FloatElement: Element + num_traits::Float + num_traits::FloatConst + std::iter::Sum + fmt::Display {
    /// `libm`'s error function at this precision.
    fn erf(self) -> Self;
    /// `libm`'s complementary error function `1 - erf(x)` at this precision (for exact
    /// GELU, whose `1 + erf(x / sqrt 2)` cancels to 0 for negative `x` where `erfc(-x /
    /// sqrt 2)` keeps the digits).
    fn erfc(self) -> Self;
    /// Converts from `f32` (exact for both types).
    fn from_f32(v: f32) -> Self;
}

macro_rules! impl_element {
    ($t:ty, $variant:ident, $to:expr, $from:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            #[inline(always)]
            fn as_f64(self) -> f64 {
                ($to)(self)
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                ($from)(v)
            }
        }
    };
}

impl_element!(f32, F32, |x: f32| x as f64, |v: f64| v as f32);
impl_element!(f64, F64, |x: f64| x, |v: f64| v);
impl_element!(i64, I64, |x: i64| x as f64, |v: f64| v as i64);
// f64 to a half type goes through f32, as PyTorch's conversions do (its half types are
// built from a `float`): 1 + 2^-11 + 2^-40 becomes f16 1.0, not the nearer 1 + 2^-10.
// (`bf16::from_f64` of half 2.7 also drops the low mantissa bits before rounding, turning
// 1 + 2^-8 + 2^-22 into 1.0 where PyTorch gives 1.0078125.)
impl_element!(f16, F16, |x: f16| x.to_f64(), |v: f64| f16::from_f32(v as f32));
impl_element!(bf16, BF16, |x: bf16| x.to_f64(), |v: f64| bf16::from_f32(v as f32));
impl_element!(bool, Bool, |x: bool| if x { 1.0 } else { 0.0 }, |v: f64| v != 0.0);

impl FloatElement for f32 {
    #[inline(always)]
    fn erf(self) -> Self {
        libm::erff(self)
    }
    #[inline(always)]
    fn erfc(self) -> Self {
        libm::erfcf(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl FloatElement for f64 {
    #[inline(always)]
    fn erf(self) -> Self {
        libm::erf(self)
    }
    #[inline(always)]
    fn erfc(self) -> Self {
        libm::erfc(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v as f64
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Tensor};

    /// f64 (and scalars) to a half type round as PyTorch 2.15 does, through f32:
    /// `torch.tensor([1 + 2**-8 + 2**-22], dtype=torch.float64).to(torch.bfloat16)` is
    /// 1.0078125 and `torch.tensor([1 + 2**-11 + 2**-40], dtype=torch.float64).to(torch.float16)`
    /// is 1.0.
    #[test]
    fn f64_to_half_types_round_as_pytorch() {
        let b = 1.0 + 2f64.powi(-8) + 2f64.powi(-22);
        let h = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        let t = Tensor::from_vec_f64(vec![b, h], &[2]);
        assert_eq!(t.to_dtype(DType::BF16).to_vec_f64()[0], 1.0078125);
        assert_eq!(t.to_dtype(DType::F16).to_vec_f64()[1], 1.0);
        assert_eq!(Tensor::full_dtype(&[1], b, DType::BF16).to_vec_f64(), vec![1.0078125]);
        assert_eq!(Tensor::full_dtype(&[1], h, DType::F16).to_vec_f64(), vec![1.0]);
    }
}
