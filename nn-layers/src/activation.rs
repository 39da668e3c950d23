//! Activation functions as modules (stateless, so `Sequential` numbers them like PyTorch).

use nn_core::ops::GeluApproximate;
use nn_core::{Compute, ExtraRepr, Module, ModuleBase, Tensor};

use crate::repr::py_float;

macro_rules! simple_activation {
    ($(#[$doc:meta])* $name:ident, |$x:ident| $body:expr) => {
        $(#[$doc])*
        #[derive(Module, Default)]
        pub struct $name {
            #[base]
            base: ModuleBase,
        }

        impl $name {
            /// The activation.
            pub fn new() -> Self {
                Self::default()
            }
        }

        impl Compute for $name {
            type Input = Tensor;
            type Output = Tensor;
            fn compute(&self, $x: &Tensor) -> Tensor {
                $body
            }
        }
    };
}

simple_activation!(
    /// `max(x, 0)` (PyTorch's `nn.ReLU`).
    ReLU, |x| x.relu());
simple_activation!(
    /// `x * sigmoid(x)` (PyTorch's `nn.SiLU`).
    SiLU, |x| x.silu());
simple_activation!(
    /// `1 / (1 + e^-x)` (PyTorch's `nn.Sigmoid`).
    Sigmoid, |x| x.sigmoid());
simple_activation!(
    /// `tanh(x)` (PyTorch's `nn.Tanh`).
    Tanh, |x| x.tanh());

/// `x` where positive, `negative_slope * x` elsewhere (PyTorch's `nn.LeakyReLU`, default
/// slope 0.01).
#[derive(Module)]
#[module(extra_repr)]
pub struct LeakyReLU {
    #[base]
    base: ModuleBase,
    negative_slope: f64,
}

impl Default for LeakyReLU {
    fn default() -> Self {
        Self::new(0.01)
    }
}

impl LeakyReLU {
    /// With the given slope for negative inputs.
    pub fn new(negative_slope: f64) -> Self {
        LeakyReLU { base: ModuleBase::default(), negative_slope }
    }
}

impl ExtraRepr for LeakyReLU {
    fn extra_repr(&self) -> String {
        format!("negative_slope={}", py_float(self.negative_slope))
    }
}

impl Compute for LeakyReLU {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        x.leaky_relu(self.negative_slope)
    }
}

/// `ln(1 + e^(beta x)) / beta`, linear where `beta x > threshold` (PyTorch's
/// `nn.Softplus`, defaults `beta = 1`, `threshold = 20`).
///
/// ```
/// use nn_layers::Softplus;
/// use nn_core::{Forward, Tensor};
/// let y = Softplus::default().forward(&Tensor::from_vec(vec![0.0, 25.0], &[2])).to_vec();
/// assert!((y[0] - 2f32.ln()).abs() < 1e-7 && y[1] == 25.0);
/// assert_eq!(Softplus::new(2.0, 10.0).to_string(), "Softplus(beta=2.0, threshold=10.0)");
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct Softplus {
    #[base]
    base: ModuleBase,
    beta: f64,
    threshold: f64,
}

impl Default for Softplus {
    fn default() -> Self {
        Self::new(1.0, 20.0)
    }
}

impl Softplus {
    /// With PyTorch's `beta` and `threshold`. Panics when `beta` is zero or not finite
    /// (the division by it would make every output infinite or NaN).
    #[track_caller]
    pub fn new(beta: f64, threshold: f64) -> Self {
        assert!(beta != 0.0 && beta.is_finite(), "Softplus: beta must be finite and nonzero, got {beta}");
        Softplus { base: ModuleBase::default(), beta, threshold }
    }
}

impl ExtraRepr for Softplus {
    fn extra_repr(&self) -> String {
        format!("beta={}, threshold={}", py_float(self.beta), py_float(self.threshold))
    }
}

impl Compute for Softplus {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        x.softplus(self.beta, self.threshold)
    }
}

/// GELU, exact by default or with the tanh approximation (PyTorch's `nn.GELU`).
#[derive(Module, Default)]
#[module(extra_repr)]
pub struct GELU {
    #[base]
    base: ModuleBase,
    approximate: GeluApproximate,
}

impl GELU {
    /// Exact GELU (`approximate='none'`).
    pub fn new() -> Self {
        Self::default()
    }

    /// GELU with the chosen formula.
    pub fn with_approximate(approximate: GeluApproximate) -> Self {
        GELU { base: ModuleBase::default(), approximate }
    }
}

impl ExtraRepr for GELU {
    fn extra_repr(&self) -> String {
        match self.approximate {
            GeluApproximate::None => "approximate='none'".into(),
            GeluApproximate::Tanh => "approximate='tanh'".into(),
        }
    }
}

impl Compute for GELU {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        x.gelu_with(self.approximate)
    }
}

/// Softmax along `dim` (PyTorch's `nn.Softmax`).
#[derive(Module)]
#[module(extra_repr)]
pub struct Softmax {
    #[base]
    base: ModuleBase,
    dim: i64,
}

impl Softmax {
    /// Softmax along `dim` (negative counts from the back).
    pub fn new(dim: i64) -> Self {
        Softmax { base: ModuleBase::default(), dim }
    }
}

impl ExtraRepr for Softmax {
    fn extra_repr(&self) -> String {
        format!("dim={}", self.dim)
    }
}

impl Compute for Softmax {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        x.softmax(self.dim)
    }
}

/// Log-softmax along `dim` (PyTorch's `nn.LogSoftmax`).
#[derive(Module)]
#[module(extra_repr)]
pub struct LogSoftmax {
    #[base]
    base: ModuleBase,
    dim: i64,
}

impl LogSoftmax {
    /// Log-softmax along `dim`.
    pub fn new(dim: i64) -> Self {
        LogSoftmax { base: ModuleBase::default(), dim }
    }
}

impl ExtraRepr for LogSoftmax {
    fn extra_repr(&self) -> String {
        format!("dim={}", self.dim)
    }
}

impl Compute for LogSoftmax {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        x.log_softmax(self.dim)
    }
}
