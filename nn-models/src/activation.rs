//! The activations Hugging Face configs name (`hidden_act`, `activation_function`).

use nn_core::ops::GeluApproximate;
use nn_core::Tensor;
use serde::{Deserialize, Serialize};

/// An activation by its Hugging Face name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub enum Activation {
    /// `"gelu"`: the exact GELU, `x Φ(x)`.
    #[serde(rename = "gelu")]
    Gelu,
    /// `"gelu_new"` (GPT-2's): the tanh approximation.
    #[serde(rename = "gelu_new")]
    GeluNew,
    /// `"gelu_pytorch_tanh"`: the tanh approximation, as PyTorch computes it.
    #[serde(rename = "gelu_pytorch_tanh")]
    GeluPytorchTanh,
    /// `"relu"`.
    #[serde(rename = "relu")]
    Relu,
    /// `"silu"` (also `"swish"`): `x σ(x)`.
    #[serde(rename = "silu", alias = "swish")]
    Silu,
    /// `"tanh"`.
    #[serde(rename = "tanh")]
    Tanh,
}

impl Activation {
    /// Applies the activation elementwise.
    pub fn apply(self, x: &Tensor) -> Tensor {
        match self {
            Activation::Gelu => x.gelu_with(GeluApproximate::None),
            Activation::GeluNew | Activation::GeluPytorchTanh => x.gelu_with(GeluApproximate::Tanh),
            Activation::Relu => x.relu(),
            Activation::Silu => x.silu(),
            Activation::Tanh => x.tanh(),
        }
    }
}
