//! Parameter initialisation with PyTorch's formulas (`torch.nn.init`). Every function
//! writes in place under `no_grad` and draws from the global generator
//! ([`crate::manual_seed`]).

use crate::autograd::no_grad;
use crate::tensor::Tensor;

/// Which fan a Kaiming initialisation preserves the variance of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FanMode {
    /// Fan in: variance preserved in the forward pass (PyTorch's default).
    #[default]
    FanIn,
    /// Fan out: variance preserved in the backward pass.
    FanOut,
}

/// The non-linearity a gain is computed for (`torch.nn.init.calculate_gain`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Nonlinearity {
    /// Gain 1 (also for convolutions and sigmoid).
    Linear,
    /// Gain 1.
    Sigmoid,
    /// Gain 5/3.
    Tanh,
    /// Gain sqrt(2).
    Relu,
    /// Gain sqrt(2 / (1 + slope^2)).
    LeakyRelu(f64),
    /// Gain 3/4.
    Selu,
}

/// The recommended gain for a non-linearity.
///
/// ```
/// use nn_core::init::{calculate_gain, Nonlinearity};
/// assert!((calculate_gain(Nonlinearity::Relu) - 2f64.sqrt()).abs() < 1e-12);
/// assert!((calculate_gain(Nonlinearity::LeakyRelu(5f64.sqrt())) - (1.0f64 / 3.0).sqrt()).abs() < 1e-12);
/// ```
pub fn calculate_gain(nonlinearity: Nonlinearity) -> f64 {
    match nonlinearity {
        Nonlinearity::Linear | Nonlinearity::Sigmoid => 1.0,
        Nonlinearity::Tanh => 5.0 / 3.0,
        Nonlinearity::Relu => 2f64.sqrt(),
        Nonlinearity::LeakyRelu(s) => (2.0 / (1.0 + s * s)).sqrt(),
        Nonlinearity::Selu => 0.75,
    }
}

/// `(fan_in, fan_out)` of a weight: `shape[1] * receptive` and `shape[0] * receptive`,
/// where `receptive` is the product of the dims after the second.
///
/// # Panics
/// For tensors with fewer than 2 dimensions, as PyTorch.
#[track_caller]
pub fn calculate_fan_in_and_fan_out(shape: &[usize]) -> (usize, usize) {
    if shape.len() < 2 {
        panic!("fan in and fan out can not be computed for a tensor with fewer than 2 dimensions (shape {shape:?})");
    }
    let receptive: usize = shape[2..].iter().product();
    (shape[1] * receptive, shape[0] * receptive)
}

fn fan(shape: &[usize], mode: FanMode) -> usize {
    let (i, o) = calculate_fan_in_and_fan_out(shape);
    match mode {
        FanMode::FanIn => i,
        FanMode::FanOut => o,
    }
}

/// Fills with samples of `U(low, high)`.
pub fn uniform_(t: &Tensor, low: f64, high: f64) {
    no_grad(|| t.copy_(&Tensor::uniform(t.shape(), low, high)));
}

/// Fills with samples of `N(mean, std^2)`.
pub fn normal_(t: &Tensor, mean: f64, std: f64) {
    no_grad(|| t.copy_(&Tensor::normal(t.shape(), mean, std)));
}

/// Fills with `value`.
pub fn constant_(t: &Tensor, value: f64) {
    no_grad(|| t.fill_(value));
}

/// Fills with zeros.
pub fn zeros_(t: &Tensor) {
    constant_(t, 0.0);
}

/// Fills with ones.
pub fn ones_(t: &Tensor) {
    constant_(t, 1.0);
}

/// Kaiming (He) uniform: `U(-b, b)` with `b = gain * sqrt(3 / fan)`.
///
/// ```
/// use nn_core::{init, Tensor};
/// let w = Tensor::zeros(&[256, 100]);
/// init::kaiming_uniform_(&w, init::FanMode::FanIn, init::Nonlinearity::Relu);
/// let bound = (2.0f64).sqrt() * (3.0f64 / 100.0).sqrt();
/// assert!(w.to_vec().iter().all(|&v| (v as f64).abs() <= bound));
/// ```
pub fn kaiming_uniform_(t: &Tensor, mode: FanMode, nonlinearity: Nonlinearity) {
    let bound = calculate_gain(nonlinearity) * (3.0 / fan(t.shape(), mode) as f64).sqrt();
    uniform_(t, -bound, bound);
}

/// Kaiming (He) normal: `N(0, (gain / sqrt(fan))^2)`.
pub fn kaiming_normal_(t: &Tensor, mode: FanMode, nonlinearity: Nonlinearity) {
    let std = calculate_gain(nonlinearity) / (fan(t.shape(), mode) as f64).sqrt();
    normal_(t, 0.0, std);
}

/// Xavier (Glorot) uniform: `U(-a, a)` with `a = gain * sqrt(6 / (fan_in + fan_out))`.
pub fn xavier_uniform_(t: &Tensor, gain: f64) {
    let (i, o) = calculate_fan_in_and_fan_out(t.shape());
    let a = gain * (6.0 / (i + o) as f64).sqrt();
    uniform_(t, -a, a);
}

/// Xavier (Glorot) normal: `N(0, gain^2 * 2 / (fan_in + fan_out))`.
pub fn xavier_normal_(t: &Tensor, gain: f64) {
    let (i, o) = calculate_fan_in_and_fan_out(t.shape());
    normal_(t, 0.0, gain * (2.0 / (i + o) as f64).sqrt());
}

/// The default init of PyTorch's `Linear`/`Conv` weights: `kaiming_uniform_(a = sqrt(5))`,
/// i.e. `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`.
pub fn default_weight_(t: &Tensor) {
    kaiming_uniform_(t, FanMode::FanIn, Nonlinearity::LeakyRelu(5f64.sqrt()));
}

/// The default init of PyTorch's `Linear`/`Conv` biases: `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`
/// (zero bound for an empty weight).
pub fn default_bias_(bias: &Tensor, fan_in: usize) {
    let bound = if fan_in > 0 { 1.0 / (fan_in as f64).sqrt() } else { 0.0 };
    uniform_(bias, -bound, bound);
}
