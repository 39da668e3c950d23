//! Activation functions, as table-driven unary ops (see `unary.rs`).

use super::unary::{c, unary, unary_op, UnaryOp};
use crate::backend::cpu::{poly_tables, tune, vector_fns};
use crate::backend::{F32GradLoop, F32Loop, Wgsl};
use crate::dtype::FloatElement;
use crate::tensor::Tensor;

unary_op!(
    Relu,
    crate::names::RELU,
    // NaN propagates, as PyTorch's relu (a `max(x, 0)` drops it), and so does the gradient
    // there: PyTorch's `threshold_backward` zeroes it where `x <= 0` only, which NaN is not.
    // NaN is tested on the bits in WGSL (`isnan_`).
    |s, x| if x > T::zero() || x.is_nan() { x } else { T::zero() },
    |s, x, y| if x <= T::zero() { T::zero() } else { T::one() },
    wgsl =
        Wgsl::unary("select(0.0, x, x > 0.0 || isnan_(f32(x)))", "select(0.0, 1.0, x > 0.0 || isnan_(f32(x)))", false)
);

/// The CPU's stable sigmoid of the WGSL expression `$z` (a string literal, read four
/// times): `1 / (1 + e^-z)` for `z >= 0`, `e^z / (1 + e^z)` below (never exponentiates a
/// large positive number).
macro_rules! wgsl_sigmoid {
    ($z:literal) => {
        concat!("select(exp(", $z, ") / (1.0 + exp(", $z, ")), 1.0 / (1.0 + exp(-(", $z, "))), (", $z, ") >= 0.0)")
    };
}

/// The CPU's stable sigmoid, in WGSL.
const SIGMOID: &str = wgsl_sigmoid!("x");

#[inline(always)]
fn sigmoid<T: FloatElement>(x: T) -> T {
    // Stable on both tails: never exponentiates a large positive number.
    if x >= T::zero() {
        T::one() / (T::one() + (-x).exp())
    } else {
        let e = x.exp();
        e / (T::one() + e)
    }
}

unary_op!(
    Sigmoid,
    crate::names::SIGMOID,
    |s, x| sigmoid(x),
    |s, x, y| y * (T::one() - y),
    wgsl = Wgsl::unary(SIGMOID, "y * (1.0 - y)", true),
    fast = vector_fns::sigmoid,
    tune = tune::SIGMOID
);
unary_op!(
    Tanh,
    crate::names::TANH,
    |s, x| x.tanh(),
    |s, x, y| T::one() - y * y,
    wgsl = Wgsl::unary("tanh_(x)", "1.0 - y * y", true),
    fast = vector_fns::tanh,
    algos = (
        tune::Plain(vector_fns::tanh),
        tune::Plain(vector_fns::tanh_f32),
        tune::Table(&poly_tables::TANH_OVER_X, vector_fns::tanh_table)
    ),
    tune = tune::TANH
);
unary_op!(Silu, crate::names::SILU, |s, x| x * sigmoid(x), |s, x, y| {
    let sg = sigmoid(x);
    sg * (T::one() + x * (T::one() - sg))
}, wgsl = Wgsl::unary(
    "x * select(exp(x) / (1.0 + exp(x)), 1.0 / (1.0 + exp(-x)), x >= 0.0)",
    "select(exp(x) / (1.0 + exp(x)), 1.0 / (1.0 + exp(-x)), x >= 0.0) * (1.0 + x * (1.0 - select(exp(x) / (1.0 + exp(x)), 1.0 / (1.0 + exp(-x)), x >= 0.0)))",
    true
), fast = vector_fns::silu, pieces = poly_tables::SIGMOID, tune = tune::SILU, fast_df = vector_fns::silu_grad);
unary_op!(
    /// Exact GELU: `x * Phi(x)` with the normal CDF through `erf`.
    Gelu,
    "gelu",
    // Phi(x) = erfc(-x / sqrt 2) / 2: no cancellation on the negative tail, where
    // PyTorch's 1 + erf(x / sqrt 2) gives 0 below x = -8 in f64.
    |s, x| c::<T>(0.5) * x * (-x * c::<T>(std::f64::consts::FRAC_1_SQRT_2)).erfc(),
    |s, x, y| {
        let cdf = c::<T>(0.5) * (-x * c::<T>(std::f64::consts::FRAC_1_SQRT_2)).erfc();
        let pdf = (c::<T>(-0.5) * x * x).exp() * c::<T>(0.398_942_280_401_432_7);
        cdf + x * pdf
    },
    wgsl = Wgsl::unary(
        "0.5 * x * erfc_(-x * 0.7071067811865476)",
        "0.5 * erfc_(-x * 0.7071067811865476) + x * exp(-0.5 * x * x) * 0.3989422804014327",
        true
    ),
    fast = vector_fns::gelu,
    pieces = poly_tables::NORMAL_CDF,
    tune = tune::GELU,
    fast_df = vector_fns::gelu_grad
);

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

unary_op!(
    /// GELU with PyTorch's `approximate="tanh"` formula.
    GeluTanh,
    "gelu_tanh",
    // x (1 + tanh u) / 2 = x sigmoid(2u): the same function, without the cancellation of
    // 1 + tanh u for negative u (which gives 0 below x = -6 in f64).
    |s, x| {
        let inner = c::<T>(SQRT_2_OVER_PI) * (x + c::<T>(0.044715) * x * x * x);
        if x == T::neg_infinity() {
            T::nan() // PyTorch's -inf * 0
        } else {
            x * sigmoid(inner + inner)
        }
    },
    |s, x, y| {
        let inner = c::<T>(SQRT_2_OVER_PI) * (x + c::<T>(0.044715) * x * x * x);
        let sg = sigmoid(inner + inner);
        let dinner = c::<T>(SQRT_2_OVER_PI) * (T::one() + c::<T>(3.0 * 0.044715) * x * x);
        if x.is_infinite() {
            T::nan() // PyTorch's inf * 0
        } else {
            sg + x * sg * (T::one() - sg) * (dinner + dinner)
        }
    },
    // The CPU's form, `x sigmoid(2u)` with the stable sigmoid (`0.5 x (1 + tanh u)` gives
    // -0 at x = -5.5 in f32, for -5.9e-9), and its derivative `s + x s (1 - s) 2u'`, with
    // 2u = 2 sqrt(2/pi) (x + 0.044715 x^3) (2 sqrt(2/pi) in f32 is twice sqrt(2/pi) in f32:
    // the CPU's `inner + inner`) and 2u' = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2).
    wgsl = Wgsl::unary(
        concat!("x * ", wgsl_sigmoid!("1.5957691216057308 * (x + 0.044715 * x * x * x)")),
        // Multiplied in the CPU's order, `s + ((x s) (1 - s)) 2u'`: as `s (1 + x (1 - s) 2u')`
        // the product overflows to -inf for x below -1.2e13, where s is 0, and gives NaN.
        concat!(
            wgsl_sigmoid!("1.5957691216057308 * (x + 0.044715 * x * x * x)"),
            " + x * ",
            wgsl_sigmoid!("1.5957691216057308 * (x + 0.044715 * x * x * x)"),
            " * (1.0 - ",
            wgsl_sigmoid!("1.5957691216057308 * (x + 0.044715 * x * x * x)"),
            ") * (1.5957691216057308 * (1.0 + 0.134145 * x * x))"
        ),
        true
    ),
    fast = vector_fns::gelu_tanh,
    tune = tune::GELU_TANH,
    fast_df = vector_fns::gelu_tanh_grad
);

/// PyTorch's softplus, `ln(1 + e^(beta x)) / beta`, linear (`x`) where `beta x >
/// threshold`.
#[derive(Clone, Copy)]
pub(crate) struct Softplus {
    /// `beta`.
    pub beta: f64,
    /// Above `beta x > threshold`, the identity.
    pub threshold: f64,
}
impl UnaryOp for Softplus {
    const NAME: &'static str = "softplus";
    fn f<T: FloatElement>(&self, x: T) -> T {
        let bx = x * c(self.beta);
        if bx > c(self.threshold) {
            x
        } else if bx > T::zero() {
            // `bx + ln(1 + e^-bx)`: `e^bx` overflowed to inf (f64 past 709) under a large
            // threshold, as the f32 path's and the GPU's forms do not.
            (bx + (-bx).exp().ln_1p()) / c(self.beta)
        } else {
            bx.exp().ln_1p() / c(self.beta)
        }
    }
    fn df<T: FloatElement>(&self, x: T, _y: T) -> T {
        let bx = x * c(self.beta);
        if bx > c(self.threshold) {
            T::one()
        } else {
            sigmoid(bx)
        }
    }
    fn wgsl(&self) -> Option<(Wgsl, [f64; 2])> {
        // log(1 + e^bx) as max(bx, 0) + log1p(e^-|bx|) (no overflow), as the CPU's; log1p(u)
        // as u (1 - u/2) below 1e-4, where log(1 + u) rounds u away (softplus(-30) would be
        // 0, and with it a confident logit's binary cross-entropy).
        let f = concat!(
            "select((max(x * p0, 0.0) + select(log(1.0 + exp(-abs(x * p0))), ",
            "exp(-abs(x * p0)) * (1.0 - 0.5 * exp(-abs(x * p0))), exp(-abs(x * p0)) < 1e-4)) / p0, x, x * p0 > p1)"
        );
        let df = "select(1.0 / (1.0 + exp(-x * p0)), 1.0, x * p0 > p1)";
        Some((Wgsl::unary(f, df, true), [self.beta, self.threshold]))
    }
    #[inline(always)]
    fn f32_loop<L: F32Loop>(&self, l: L) -> L::Out {
        let Softplus { beta, threshold } = *self;
        l.run(
            #[inline(always)]
            move |x| vector_fns::softplus(x, beta, threshold),
        )
    }
    #[inline(always)]
    fn df32_loop<L: F32GradLoop>(&self, l: L) -> L::Out {
        let Softplus { beta, threshold } = *self;
        l.run(
            #[inline(always)]
            move |x, _| vector_fns::softplus_grad(x, beta, threshold),
        )
    }
}

/// `x` where positive, `slope * x` elsewhere.
#[derive(Clone, Copy)]
pub(crate) struct LeakyRelu(pub f64);
impl UnaryOp for LeakyRelu {
    const NAME: &'static str = "leaky_relu";
    fn f<T: FloatElement>(&self, x: T) -> T {
        if x > T::zero() {
            x
        } else {
            x * c(self.0)
        }
    }
    fn df<T: FloatElement>(&self, x: T, _y: T) -> T {
        if x > T::zero() {
            T::one()
        } else {
            c(self.0)
        }
    }
    fn wgsl(&self) -> Option<(Wgsl, [f64; 2])> {
        Some((Wgsl::unary("select(x * p0, x, x > 0.0)", "select(p0, 1.0, x > 0.0)", false), [self.0, 0.0]))
    }
}

/// Which GELU formula to use, as PyTorch's `approximate` argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GeluApproximate {
    /// `x * Phi(x)` with the exact normal CDF (PyTorch's default, `"none"`).
    #[default]
    None,
    /// The tanh approximation (`"tanh"`).
    Tanh,
}

impl Tensor {
    /// `max(x, 0)` elementwise, NaN kept (gradient 0 at 0 and at NaN, as PyTorch).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// assert_eq!(Tensor::from_vec(vec![-1.0, 2.0], &[2]).relu().to_vec(), vec![0.0, 2.0]);
    /// ```
    pub fn relu(&self) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::RELU, &[self], &[], Vec::new);
        unary(self, Relu)
    }

    /// `x` where positive, `negative_slope * x` elsewhere.
    pub fn leaky_relu(&self, negative_slope: f64) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::LEAKY_RELU, &[self], &[], || {
            vec![("negative_slope", crate::autograd::trace::Attr::Float(negative_slope))]
        });
        unary(self, LeakyRelu(negative_slope))
    }

    /// `1 / (1 + e^-x)`, stable for large `|x|`.
    pub fn sigmoid(&self) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::SIGMOID, &[self], &[], Vec::new);
        unary(self, Sigmoid)
    }

    /// Hyperbolic tangent.
    pub fn tanh(&self) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::TANH, &[self], &[], Vec::new);
        unary(self, Tanh)
    }

    /// `x * sigmoid(x)` (also called swish).
    pub fn silu(&self) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::SILU, &[self], &[], Vec::new);
        unary(self, Silu)
    }

    /// PyTorch's `softplus(x, beta, threshold)`: `ln(1 + e^(beta x)) / beta`, and `x`
    /// itself where `beta x > threshold` (PyTorch's defaults are `beta = 1`, `threshold =
    /// 20`). Panics when `beta` is zero or not finite.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let y = Tensor::from_vec(vec![0.0, 30.0], &[2]).softplus(1.0, 20.0).to_vec();
    /// assert!((y[0] - 2f32.ln()).abs() < 1e-7);
    /// assert_eq!(y[1], 30.0);
    /// ```
    #[track_caller]
    pub fn softplus(&self, beta: f64, threshold: f64) -> Tensor {
        assert!(beta != 0.0 && beta.is_finite(), "softplus: beta must be finite and nonzero, got {beta}");
        let _op = crate::autograd::entry::op_entry!(
            crate::names::SOFTPLUS,
            [self],
            attrs = || {
                vec![
                    ("beta", crate::autograd::trace::Attr::Float(beta)),
                    ("threshold", crate::autograd::trace::Attr::Float(threshold)),
                ]
            },
            again = |c: &[Option<&crate::Tensor>]| c[0].expect("present").softplus(beta, threshold)
        );
        unary(self, Softplus { beta, threshold })
    }

    /// Exact GELU, `x * Phi(x)`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let y = Tensor::from_vec(vec![1.0], &[1]).gelu().to_vec()[0];
    /// assert!((y - 0.841_344_7).abs() < 1e-6);
    /// ```
    pub fn gelu(&self) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::GELU, &[self], &[], || {
            vec![("approximate", crate::autograd::trace::Attr::Str("none"))]
        });
        unary(self, Gelu)
    }

    /// GELU with the chosen formula.
    pub fn gelu_with(&self, approximate: GeluApproximate) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::GELU, &[self], &[], || {
            vec![(
                "approximate",
                crate::autograd::trace::Attr::Str(if approximate == GeluApproximate::Tanh { "tanh" } else { "none" }),
            )]
        });
        match approximate {
            GeluApproximate::None => unary(self, Gelu),
            GeluApproximate::Tanh => unary(self, GeluTanh),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::GeluApproximate;
    use crate::backend::cpu::tune;
    use crate::testing::support::{check_noncontig, grad, leaf, t64, unary_suite};
    use crate::{DType, Device, Tensor};

    fn sigmoid(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    /// The standard normal CDF and density, written out for the GELU derivatives.
    fn phi_cdf(x: f64) -> f64 {
        0.5 * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
    }
    fn phi_pdf(x: f64) -> f64 {
        (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
    }

    // Inputs stay away from the kinks of relu/leaky_relu at 0 (the derivative is
    // discontinuous there; see `relu_has_zero_gradient_at_zero`).
    unary_suite!(
        relu: |x: &Tensor| x.relu(),
        x = [-2.0, -0.5, 0.5, 3.0],
        y = [0.0, 0.0, 0.5, 3.0],
        dy = |x: f64| if x > 0.0 { 1.0 } else { 0.0 },
    );
    unary_suite!(
        leaky_relu: |x: &Tensor| x.leaky_relu(0.1),
        x = [-2.0, -0.5, 0.5, 3.0],
        y = [-0.2, -0.05, 0.5, 3.0],
        dy = |x: f64| if x > 0.0 { 1.0 } else { 0.1 },
    );
    unary_suite!(
        sigmoid: |x: &Tensor| x.sigmoid(),
        x = [-2.0, 0.0, 1.0, 3.0],
        y = [0.11920292202211755, 0.5, 0.7310585786300049, 0.9525741268224334],
        dy = |x: f64| sigmoid(x) * (1.0 - sigmoid(x)),
    );
    unary_suite!(
        tanh: |x: &Tensor| x.tanh(),
        x = [-2.0, 0.0, 0.5, 1.0],
        y = [-0.9640275800758169, 0.0, 0.46211715726000974, 0.7615941559557649],
        dy = |x: f64| 1.0 - x.tanh().powi(2),
    );
    unary_suite!(
        silu: |x: &Tensor| x.silu(),
        x = [-2.0, 0.0, 1.0, 3.0],
        y = [-0.2384058440442351, 0.0, 0.7310585786300049, 2.8577223804673],
        dy = |x: f64| sigmoid(x) + x * sigmoid(x) * (1.0 - sigmoid(x)),
    );
    unary_suite!(
        gelu: |x: &Tensor| x.gelu(),
        x = [-1.0, -0.5, 1.0, 2.0],
        y = [-0.15865525393145707, -0.15426876936299344, 0.8413447460685429, 1.9544997361036416],
        dy = |x: f64| phi_cdf(x) + x * phi_pdf(x),
    );
    unary_suite!(
        gelu_tanh: |x: &Tensor| x.gelu_with(GeluApproximate::Tanh),
        x = [-1.0, -0.5, 1.0, 2.0],
        y = [-0.15880800939172324, -0.15428599017485606, 0.8411919906082768, 1.954597694087775],
        dy = |x: f64| {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            let t = (k * (x + 0.044715 * x.powi(3))).tanh();
            0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x)
        },
    );

    unary_suite!(
        softplus: |x: &Tensor| x.softplus(1.0, 20.0),
        x = [-2.0, 0.0, 1.0, 3.0],
        y = [0.12692801104297252, std::f64::consts::LN_2, 1.3132616875182228, 3.048587351573742],
        dy = sigmoid,
    );
    unary_suite!(
        softplus_beta: |x: &Tensor| x.softplus(2.0, 5.0),
        x = [-2.0, 0.5, 1.0, 3.0],
        y = [0.009074963958904869, 0.6566308437591114, 1.0634640055214863, 3.0],
        dy = |x: f64| if 2.0 * x > 5.0 { 1.0 } else { sigmoid(2.0 * x) },
    );

    /// PyTorch's softplus threshold: `x` itself where `beta x > threshold`, with gradient
    /// 1; a zero or infinite beta is refused by name.
    #[test]
    fn softplus_is_linear_past_the_threshold_and_refuses_a_zero_beta() {
        let x = leaf(&[21.0, 19.0], &[2]);
        let y = x.softplus(1.0, 20.0);
        assert_eq!(y.to_vec_f64()[0], 21.0);
        assert!((y.to_vec_f64()[1] - (19f64.exp()).ln_1p()).abs() < 1e-12);
        y.sum().backward();
        assert_eq!(grad(&x)[0], 1.0);
        let e = std::panic::catch_unwind(|| Tensor::ones(&[1]).softplus(0.0, 20.0)).expect_err("beta 0");
        assert_eq!(
            e.downcast_ref::<String>().map(String::as_str),
            Some("softplus: beta must be finite and nonzero, got 0")
        );
    }

    /// Under a threshold larger than the range of `exp`, f64 softplus is still `x` where
    /// it is large (not `ln(1 + inf)`), as the f32 path's.
    #[test]
    fn softplus_does_not_overflow_under_a_large_threshold() {
        let y = t64(&[800.0, 40.0, -800.0], &[3]).softplus(1.0, f64::INFINITY).to_vec_f64();
        assert_eq!(y[..2], [800.0, 40.0]);
        assert_eq!(y[2], 0.0);
        let y = Tensor::from_vec(vec![800.0, 50.0], &[2]).softplus(1.0, f64::INFINITY).to_vec();
        assert_eq!(y, [800.0, 50.0]);
    }

    /// f32 tensors take the vectorized functions: on contiguous, transposed and broadcast
    /// inputs (the strided loop) they agree, and agree with f64 within f32 rounding.
    #[test]
    fn f32_activations_match_f64_on_every_layout() {
        type Op = fn(&Tensor) -> Tensor;
        let ops: [Op; 10] = [
            |x| x.sigmoid(),
            |x| x.tanh(),
            |x| x.silu(),
            |x| x.gelu(),
            |x| x.gelu_with(GeluApproximate::Tanh),
            |x| x.softplus(1.0, 20.0),
            |x| x.exp(),
            |x| x.erf(),
            |x| x.abs().log(),
            |x| x.abs().powf(1.5),
        ];
        let v: Vec<f64> = (0..60).map(|i| (i as f64 - 29.5) * 0.37).collect();
        let base = t64(&v, &[6, 10]).to_dtype(DType::F32);
        let base64 = base.to_dtype(DType::F64); // the same (rounded) inputs
        for (k, op) in ops.iter().enumerate() {
            let want = op(&base64).to_vec_f64();
            let got = op(&base).to_vec_f64();
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() <= 2.4e-7 * b.abs().max(1e-30), "op {k}: {a} vs {b}");
                // 2 ulp
            }
            assert_eq!(op(&base.t()).to_vec(), op(&base.t().contiguous()).to_vec(), "op {k}");
            let e = base.narrow(0, 2, 1).expand(&[3, 10]);
            assert_eq!(op(&e).to_vec(), op(&e.contiguous()).to_vec(), "op {k}");
        }
    }

    #[test]
    fn gelu_default_is_the_exact_formula() {
        let x = t64(&[-1.3, 0.2, 2.7], &[3]);
        assert_eq!(x.gelu().to_vec_f64(), x.gelu_with(GeluApproximate::None).to_vec_f64());
        assert_ne!(x.gelu().to_vec_f64(), x.gelu_with(GeluApproximate::Tanh).to_vec_f64());
        assert_eq!(GeluApproximate::default(), GeluApproximate::None);
    }

    #[test]
    fn relu_has_zero_gradient_at_zero_and_leaky_relu_the_slope() {
        // PyTorch: relu'(0) = 0, leaky_relu'(0) = negative_slope.
        let x = leaf(&[0.0], &[1]);
        x.relu().sum().backward();
        assert_eq!(grad(&x), vec![0.0]);
        let x = leaf(&[0.0], &[1]);
        x.leaky_relu(0.2).sum().backward();
        assert_eq!(grad(&x), vec![0.2]);
    }

    /// NaN passes through relu and leaky_relu in every float dtype, as in PyTorch (a
    /// `max(x, 0)` would give 0); the gradient there is PyTorch's (torch 2.15): 1 for relu
    /// (`threshold_backward` zeroes it where `x <= 0` only), the slope for leaky_relu.
    #[test]
    fn relu_and_leaky_relu_propagate_nan() {
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let x = t64(&[f64::NAN, -1.0, 2.0, -0.0], &[4]).to_dtype(dtype);
            let y = x.relu().to_vec_f64();
            assert!(y[0].is_nan(), "relu {dtype}: {y:?}");
            assert_eq!(y[1..], [0.0, 2.0, 0.0], "relu {dtype}");
            let y = x.leaky_relu(0.5).to_vec_f64();
            assert!(y[0].is_nan(), "leaky_relu {dtype}: {y:?}");
            assert_eq!(y[1..3], [-0.5, 2.0], "leaky_relu {dtype}");
        }
        let x = leaf(&[f64::NAN, -1.0, 2.0], &[3]);
        x.relu().sum().backward();
        assert_eq!(grad(&x), vec![1.0, 0.0, 1.0]);
        let x = leaf(&[f64::NAN, 2.0], &[2]);
        x.leaky_relu(0.2).sum().backward();
        assert_eq!(grad(&x), vec![0.2, 1.0]);
    }

    #[test]
    fn sigmoid_silu_tanh_are_stable_at_large_magnitude() {
        let x = leaf(&[-1000.0, 1000.0, -50.0], &[3]);
        let s = x.sigmoid();
        assert_eq!(s.to_vec_f64()[..2], [0.0, 1.0]);
        assert!((s.to_vec_f64()[2] - (-50f64).exp()).abs() < 1e-30);
        assert_eq!(x.silu().to_vec_f64()[..2], [-0.0, 1000.0]);
        assert_eq!(x.tanh().to_vec_f64()[..2], [-1.0, 1.0]);
        (s + x.silu() + x.tanh()).sum().backward();
        // sigmoid' and tanh' vanish; silu' is 0 on the left tail and 1 on the right.
        let g = grad(&x);
        assert!(g.iter().all(|v| v.is_finite()), "{g:?}");
        assert_eq!(g[..2], [0.0, 1.0]);
    }

    #[test]
    fn activations_on_noncontiguous_inputs() {
        type Op = fn(&Tensor) -> Tensor;
        let ops: [Op; 7] = [
            |x| x.relu(),
            |x| x.leaky_relu(0.01),
            |x| x.sigmoid(),
            |x| x.tanh(),
            |x| x.silu(),
            |x| x.gelu(),
            |x| x.gelu_with(GeluApproximate::Tanh),
        ];
        let base = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4], &[3, 2]);
        for op in ops {
            check_noncontig(|t| op(&t[0]), std::slice::from_ref(&base));
            assert_eq!(op(&base.t()).to_vec_f64(), op(&base.t().contiguous()).to_vec_f64());
            let e = base.narrow(0, 2, 1).expand(&[2, 2]);
            assert_eq!(op(&e).to_vec_f64(), op(&e.contiguous()).to_vec_f64());
        }
    }

    #[test]
    fn activations_on_rank0_and_meta() {
        let s = Tensor::scalar(-2.0);
        assert_eq!(s.relu().item(), 0.0);
        assert_eq!(s.leaky_relu(0.5).item(), -1.0);
        assert_eq!(s.relu().shape(), &[] as &[usize]);
        let m = Tensor::full_on(&[3, 4], 0.0, DType::F32, Device::Meta);
        for y in [m.relu(), m.sigmoid(), m.gelu(), m.silu(), m.tanh(), m.leaky_relu(0.1)] {
            assert_eq!((y.shape(), y.dtype(), y.device()), (&[3, 4][..], DType::F32, Device::Meta));
        }
    }

    #[test]
    #[should_panic(expected = "relu: expected a floating-point tensor (f32, f64, bf16 or f16), got bool")]
    fn activation_on_bool_names_the_op() {
        Tensor::from_vec_bool(vec![true], &[1]).relu();
    }

    /// The ops run these functions through the AVX-512, AVX2 or baseline copy of the loop
    /// (whichever this CPU has): bit for bit the scalar values, forward and backward, on a
    /// length with a vector tail, in parallel parts (above the split threshold).
    /// A tuned kernel's first (`f64`) algorithm in the widest copy this CPU runs.
    fn reference() -> tune::Pick {
        tune::Pick { algo: 0, isa: crate::backend::cpu::isa_loops::Isa::widest() }
    }

    #[test]
    fn the_vector_loops_are_the_scalar_functions_bit_for_bit() {
        use crate::backend::cpu::powers::{pow, PowKind};
        use crate::backend::cpu::vector_fns::{
            erf, erf_grad, exp, gelu, gelu_grad, gelu_tanh, gelu_tanh_grad, log, rsqrt, sigmoid, silu, silu_grad,
            softplus, tanh,
        };
        let n = (1 << 16) + 13;
        let mut xs: Vec<f32> = (0..n).map(|i| f32::from_bits((i as u32).wrapping_mul(2_654_435_761))).collect();
        xs[..9].copy_from_slice(&[0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-45, -1e-45, 88.7, -103.9]);
        let xs: Vec<f32> = xs.into_iter().map(|v| if v.is_nan() { v } else { v.clamp(-1e5, 1e5) }).collect();
        // And activations' values (within [-4.5, 4.5], one in 500 at 50): the GELU and
        // SiLU blocks mostly in their tables' ranges, some not (`cpu::poly_tables`).
        let mut acts: Vec<f32> = (0..n).map(|i| ((i as f32 * 0.618_034).fract() - 0.5) * 9.0).collect();
        acts.iter_mut().step_by(500).for_each(|v| *v = 50.0);
        let g: Vec<f32> = (0..n).map(|i| 1.0 + (i % 7) as f32 * 0.25).collect();
        let bits = |v: &[f32]| v.iter().map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() }).collect::<Vec<_>>();
        type Op = (&'static str, fn(&Tensor) -> Tensor, fn(f32) -> f32, Option<fn(f32) -> f32>);
        let ops: [Op; 9] = [
            // The tuned kernels forced to their `f64` algorithm, the scalar function here
            // (`cpu::tune`'s tests check every variant against its own).
            ("exp", |t| tune::force_for_test(&tune::EXP, reference(), || t.exp()), exp, None),
            ("log", |t| t.log(), log, None),
            ("tanh", |t| tune::force_for_test(&tune::TANH, reference(), || t.tanh()), tanh, None),
            ("sigmoid", |t| t.sigmoid(), sigmoid, None),
            ("erf", |t| t.erf(), erf, Some(erf_grad)),
            ("gelu", |t| t.gelu(), gelu, Some(gelu_grad)),
            ("gelu_tanh", |t| t.gelu_with(GeluApproximate::Tanh), gelu_tanh, Some(gelu_tanh_grad)),
            ("silu", |t| t.silu(), silu, Some(silu_grad)),
            ("rsqrt", |t| t.rsqrt(), rsqrt, None),
        ];
        for ((name, op, f, df), xs) in ops.iter().flat_map(|o| [(o, &xs), (o, &acts)]) {
            let x = Tensor::from_vec(xs.clone(), &[n]).requires_grad_(true);
            let y = op(&x);
            let want: Vec<f32> = xs.iter().map(|&v| f(v)).collect();
            assert_eq!(bits(&y.to_vec()), bits(&want), "{name} forward");
            if let Some(df) = df {
                y.backward_with(&Tensor::from_vec(g.clone(), &[n]), false);
                let want: Vec<f32> = xs.iter().zip(&g).map(|(&v, &g)| g * df(v)).collect();
                assert_eq!(bits(&x.grad().expect("a gradient").to_vec()), bits(&want), "{name} backward");
            }
        }
        for p in [2.0, 3.0, -1.0, 0.5, 1.5] {
            let kind = PowKind::of(p).expect("finite");
            let y = Tensor::from_vec(xs.clone(), &[n]).powf(p).to_vec();
            let want: Vec<f32> = xs.iter().map(|&v| pow(v, kind)).collect();
            assert_eq!(bits(&y), bits(&want), "pow {p}");
        }
        let y = Tensor::from_vec(xs.clone(), &[n]).softplus(1.0, 20.0).to_vec();
        assert_eq!(bits(&y), bits(&xs.iter().map(|&v| softplus(v, 1.0, 20.0)).collect::<Vec<_>>()), "softplus");
    }
}
