//! Activation functions, as table-driven unary ops (see `unary.rs`).

use super::unary::{c, unary, unary_op, UnaryOp};
use crate::dtype::FloatElement;
use crate::tensor::Tensor;

unary_op!(Relu, "relu", |s, x| if x > T::zero() { x } else { T::zero() }, |s, x, y| if x > T::zero() {
    T::one()
} else {
    T::zero()
});

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

unary_op!(Sigmoid, "sigmoid", |s, x| sigmoid(x), |s, x, y| y * (T::one() - y));
unary_op!(Tanh, "tanh", |s, x| x.tanh(), |s, x, y| T::one() - y * y);
unary_op!(Silu, "silu", |s, x| x * sigmoid(x), |s, x, y| {
    let sg = sigmoid(x);
    sg * (T::one() + x * (T::one() - sg))
});
unary_op!(
    /// Exact GELU: `x * Phi(x)` with the normal CDF through `erf`.
    Gelu,
    "gelu",
    |s, x| c::<T>(0.5) * x * (T::one() + (x * c::<T>(std::f64::consts::FRAC_1_SQRT_2)).erf()),
    |s, x, y| {
        let cdf = c::<T>(0.5) * (T::one() + (x * c::<T>(std::f64::consts::FRAC_1_SQRT_2)).erf());
        let pdf = (c::<T>(-0.5) * x * x).exp() * c::<T>(0.398_942_280_401_432_7);
        cdf + x * pdf
    }
);

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

unary_op!(
    /// GELU with PyTorch's `approximate="tanh"` formula.
    GeluTanh,
    "gelu_tanh",
    |s, x| {
        let inner = c::<T>(SQRT_2_OVER_PI) * (x + c::<T>(0.044715) * x * x * x);
        c::<T>(0.5) * x * (T::one() + inner.tanh())
    },
    |s, x, y| {
        let inner = c::<T>(SQRT_2_OVER_PI) * (x + c::<T>(0.044715) * x * x * x);
        let t = inner.tanh();
        let dinner = c::<T>(SQRT_2_OVER_PI) * (T::one() + c::<T>(3.0 * 0.044715) * x * x);
        c::<T>(0.5) * (T::one() + t) + c::<T>(0.5) * x * (T::one() - t * t) * dinner
    }
);

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
    /// `max(x, 0)` elementwise (gradient 0 at 0, as PyTorch).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// assert_eq!(Tensor::from_vec(vec![-1.0, 2.0], &[2]).relu().to_vec(), vec![0.0, 2.0]);
    /// ```
    pub fn relu(&self) -> Tensor {
        unary(self, Relu)
    }

    /// `x` where positive, `negative_slope * x` elsewhere.
    pub fn leaky_relu(&self, negative_slope: f64) -> Tensor {
        unary(self, LeakyRelu(negative_slope))
    }

    /// `1 / (1 + e^-x)`, stable for large `|x|`.
    pub fn sigmoid(&self) -> Tensor {
        unary(self, Sigmoid)
    }

    /// Hyperbolic tangent.
    pub fn tanh(&self) -> Tensor {
        unary(self, Tanh)
    }

    /// `x * sigmoid(x)` (also called swish).
    pub fn silu(&self) -> Tensor {
        unary(self, Silu)
    }

    /// Exact GELU, `x * Phi(x)`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let y = Tensor::from_vec(vec![1.0], &[1]).gelu().to_vec()[0];
    /// assert!((y - 0.841_344_7).abs() < 1e-6);
    /// ```
    pub fn gelu(&self) -> Tensor {
        unary(self, Gelu)
    }

    /// GELU with the chosen formula.
    pub fn gelu_with(&self, approximate: GeluApproximate) -> Tensor {
        match approximate {
            GeluApproximate::None => unary(self, Gelu),
            GeluApproximate::Tanh => unary(self, GeluTanh),
        }
    }
}
