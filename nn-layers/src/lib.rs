//! Layers and containers for the `nn` framework, with PyTorch's parameter names, shapes,
//! defaults, initialisation and printouts, each defined with `#[derive(Module)]`, so a
//! PyTorch `state_dict` saved as safetensors loads unchanged and gives the same outputs.
//! Each implements `Compute`; callers run it with `forward`, which fires its hooks.
//!
//! ```
//! use nn_core::{Forward, Module, Tensor};
//! use nn_layers::{Linear, ReLU, Sequential};
//! let net = Sequential::new().add(Linear::new(784, 256)).add(ReLU::new()).add(Linear::new(256, 10));
//! assert_eq!(net.num_parameters(), 784 * 256 + 256 + 256 * 10 + 10);
//! assert_eq!(net.forward(&Tensor::zeros(&[1, 784])).shape(), &[1, 10]);
//! ```

mod activation;
mod attention;
mod containers;
mod conv;
mod dropout;
mod embedding;
mod lazy;
mod linear;
mod norm;
mod pool;
mod repr;
mod transformer;
mod upsample;

pub use activation::{LeakyReLU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Tanh, GELU};
pub use attention::{AttentionInput, MultiheadAttention, NonDynamicallyQuantizableLinear};
pub use containers::{ModuleDict, ModuleList, Sequential};
pub use conv::{Conv1d, Conv1dConfig, Conv2d, Conv2dConfig, LazyConv2d};
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use linear::{Bilinear, Flatten, Identity, LazyLinear, Linear};
pub use nn_core::ops::GeluApproximate;
pub use norm::{BatchNorm1d, BatchNorm2d, BatchNormConfig, BatchStatsSync, GroupNorm, LayerNorm};
pub use pool::{AdaptiveAvgPool2d, AvgPool2d, MaxPool2d};
pub use transformer::{
    Activation, EncoderInput, TransformerEncoder, TransformerEncoderLayer, TransformerEncoderLayerConfig,
};
pub use upsample::{Upsample, UpsampleConfig};
