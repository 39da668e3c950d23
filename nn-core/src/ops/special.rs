//! Special functions, elementwise: the error function `erf` and its inverse `erfinv`
//! (table-driven like [`super::unary`]).

use super::unary::{c, unary, unary_op};
use crate::backend::cpu::vector_fns;
use crate::backend::{UnaryOp, Wgsl};
use crate::dtype::FloatElement;
use crate::tensor::Tensor;

/// `2 / sqrt(pi)`.
const TWO_OVER_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;
/// `sqrt(pi) / 2`.
const SQRT_PI_OVER_TWO: f64 = 0.886_226_925_452_758;

unary_op!(
    /// `erf(x)`; `d/dx = 2 / sqrt(pi) exp(-x^2)`.
    Erf,
    "erf",
    |s, x| x.erf(),
    |s, x, y| c::<T>(TWO_OVER_SQRT_PI) * (-(x * x)).exp(),
    wgsl = Wgsl::unary("erf_(x)", "1.1283791670955126 * exp(-x * x)", true),
    fast = vector_fns::erf,
    fast_df = vector_fns::erf_grad
);
unary_op!(
    /// `erfinv(y)`; `d/dy = sqrt(pi) / 2 exp(erfinv(y)^2)`.
    Erfinv,
    "erfinv",
    |s, x| T::from_f64(erfinv_f64(x.as_f64())),
    |s, x, y| c::<T>(SQRT_PI_OVER_TWO) * (y * y).exp(),
    wgsl = Wgsl::unary("erfinv_(x)", "0.886226925452758 * exp(y * y)", true)
);

/// The inverse error function in `f64`: PyTorch's starting point (a rational
/// approximation, Pavlis' `erfinv.m`) refined by Newton steps (two near 0, as PyTorch's,
/// three in the tails, where the start is farther off), on `erf` near 0 and
/// on `erfc` of `|y|` beyond `0.5` (where `1 - |y|` is exact and `erf(x) - y` would
/// cancel), so the result is accurate to a few ulp up to `|y| -> 1`. `f32` rounds this
/// value once.
pub(crate) fn erfinv_f64(y: f64) -> f64 {
    let a = y.abs();
    if a.is_nan() || a > 1.0 {
        return f64::NAN;
    }
    if a == 1.0 {
        return f64::INFINITY.copysign(y);
    }
    const A: [f64; 4] = [0.886226899, -1.645349621, 0.914624893, -0.140543331];
    const B: [f64; 4] = [-2.118377725, 1.442710462, -0.329097515, 0.012229801];
    const C: [f64; 4] = [-1.970840454, -1.624906493, 3.429567803, 1.641345311];
    const D: [f64; 2] = [3.543889200, 1.637067800];
    let mut x = if a <= 0.7 {
        let z = a * a;
        let num = ((A[3] * z + A[2]) * z + A[1]) * z + A[0];
        let den = (((B[3] * z + B[2]) * z + B[1]) * z + B[0]) * z + 1.0;
        a * num / den
    } else {
        let z = (-((1.0 - a) / 2.0).ln()).sqrt();
        let num = ((C[3] * z + C[2]) * z + C[1]) * z + C[0];
        let den = (D[1] * z + D[0]) * z + 1.0;
        num / den
    };
    for _ in 0..if a <= 0.7 { 2 } else { 3 } {
        let slope = TWO_OVER_SQRT_PI * (-x * x).exp();
        let residual = if a <= 0.5 { libm::erf(x) - a } else { (1.0 - a) - libm::erfc(x) };
        x -= residual / slope;
    }
    x.copysign(y)
}

impl Tensor {
    /// The error function elementwise, `torch.erf`:
    /// `erf(x) = 2 / sqrt(pi) * integral_0^x exp(-t^2) dt`, same shape. Computed with
    /// `libm` (within an ulp in `f32` and `f64`); the gradient is
    /// `2 / sqrt(pi) exp(-x^2)`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let y = Tensor::from_vec_f64(vec![0.0, 0.5, -2.0], &[3]).erf().to_vec_f64();
    /// assert_eq!(y[0], 0.0);
    /// assert!((y[1] - 0.5204998778130465).abs() < 1e-16);
    /// assert!((y[2] + 0.9953222650189527).abs() < 1e-16);
    /// ```
    ///
    /// # Panics
    /// When the tensor is not `f32`/`f64`.
    #[track_caller]
    pub fn erf(&self) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::ERF, &[self], &[], Vec::new);
        unary(self, Erf)
    }

    /// The inverse error function elementwise, `torch.erfinv`: `erf(erfinv(y)) = y` for
    /// `y` in `(-1, 1)`, `±inf` at `±1`, NaN outside `[-1, 1]`; same shape. The gradient is
    /// `sqrt(pi) / 2 exp(erfinv(y)^2)`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let y = Tensor::from_vec_f64(vec![0.5, -0.9, 1.0, 1.5], &[4]).erfinv().to_vec_f64();
    /// assert!((y[0] - 0.4769362762044699).abs() < 1e-16);
    /// assert!((y[1] + 1.1630871536766743).abs() < 1e-15);
    /// assert_eq!(y[2], f64::INFINITY);
    /// assert!(y[3].is_nan());
    /// ```
    ///
    /// # Panics
    /// When the tensor is not `f32`/`f64`.
    #[track_caller]
    pub fn erfinv(&self) -> Tensor {
        let _op = crate::autograd::entry::op_entry!(
            crate::names::ERFINV,
            [self],
            attrs = Vec::new,
            again = |c: &[Option<&crate::Tensor>]| c[0].expect("present").erfinv()
        );
        unary(self, Erfinv)
    }
}

#[cfg(test)]
mod tests {
    use super::erfinv_f64;
    use crate::testing::support::{t64, unary_suite};
    use crate::{DType, Tensor};

    const SQRT_PI: f64 = 1.772_453_850_905_516;

    // Values from torch.erf / torch.erfinv in f64.
    unary_suite!(
        erf: |x: &Tensor| x.erf(),
        x = [-0.9, -0.3, 0.0, 0.2, 0.75],
        y = [-0.7969082124228322, -0.3286267594591274, 0.0, 0.22270258921047847, 0.7111556336535151],
        dy = |x: f64| 2.0 / SQRT_PI * (-x * x).exp(),
    );
    unary_suite!(
        erfinv: |x: &Tensor| x.erfinv(),
        x = [-0.9, -0.3, 0.0, 0.2, 0.75],
        y = [-1.1630871536766743, -0.2724627147267543, 0.0, 0.1791434546212917, 0.8134198475976185],
        dy = |x: f64| SQRT_PI / 2.0 * erfinv_f64(x).powi(2).exp(),
    );

    #[test]
    fn erfinv_inverts_erf_to_full_precision_up_to_the_ends() {
        // Round trips in f64, including |y| close to 1 where erf(x) - y would cancel.
        for y in [1e-300, 1e-12, 0.001, 0.3, 0.5, 0.5000001, 0.7, 0.9, 0.99, 0.999999, 1.0 - 1e-12, 1.0 - 2e-16] {
            let x = erfinv_f64(y);
            let back = if y <= 0.5 { libm::erf(x) } else { 1.0 - libm::erfc(x) };
            assert!((back - y).abs() <= 2.0 * f64::EPSILON * y, "erf(erfinv({y})) = {back}");
            if y > 0.5 {
                // The tail is exact relative to 1 - y.
                let rel = (libm::erfc(x) - (1.0 - y)).abs() / (1.0 - y);
                assert!(rel < 1e-14, "erfc(erfinv({y})) off by {rel}");
            }
            assert_eq!(erfinv_f64(-y), -x, "odd");
        }
        assert_eq!(erfinv_f64(-1.0), f64::NEG_INFINITY);
        assert!(erfinv_f64(1.0 + 1e-15).is_nan() && erfinv_f64(f64::NAN).is_nan());
        assert_eq!(erfinv_f64(-0.0).to_bits(), (-0.0f64).to_bits());
    }

    #[test]
    fn f32_values_are_within_an_ulp_of_the_f64_ones() {
        let xs: Vec<f32> = (0..400).map(|i| -0.9975 + i as f32 * 0.005).collect();
        let x32 = Tensor::from_vec(xs.clone(), &[400]);
        let x64 = x32.to_dtype(DType::F64);
        for (y32, y64) in [(x32.erf(), x64.erf()), (x32.erfinv(), x64.erfinv())] {
            for (a, b) in y32.to_vec().iter().zip(y64.to_vec_f64()) {
                let ulp = (b as f32).abs().max(f32::MIN_POSITIVE) * f32::EPSILON;
                assert!(((*a as f64) - b).abs() <= ulp as f64, "{a} vs {b}");
            }
        }
        let e = Tensor::from_vec(vec![f32::INFINITY, f32::NEG_INFINITY, f32::NAN], &[3]).erf().to_vec();
        assert_eq!(&e[..2], &[1.0, -1.0]);
        assert!(e[2].is_nan());
    }

    #[test]
    fn erf_of_erfinv_chain_has_unit_gradient() {
        let x = t64(&[-0.8, 0.1, 0.6], &[3]).requires_grad_(true);
        x.erfinv().erf().sum().backward();
        for g in x.grad().unwrap().to_vec_f64() {
            assert!((g - 1.0).abs() < 1e-14, "{g}");
        }
    }

    #[test]
    #[should_panic(expected = "erfinv: expected a floating-point tensor (f32, f64, bf16 or f16), got i64")]
    fn erfinv_of_integers_panics() {
        Tensor::from_vec_i64(vec![0], &[1]).erfinv();
    }
}
