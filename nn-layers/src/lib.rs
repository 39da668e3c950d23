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
mod conv_transpose;
mod dropout;
mod embedding;
mod encoder_decoder;
mod lazy;
mod lazy_layers;
mod linear;
mod norm;
mod param_containers;
pub mod parametrizations;
mod pool;
mod recurrent;
mod repr;
mod reset;
mod transformer;
mod transformer_decoder;
mod upsample;
mod volumetric;

pub use activation::{LeakyReLU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Softplus, Tanh, GELU};
pub use attention::{AttentionInput, MultiheadAttention, NonDynamicallyQuantizableLinear};
pub use containers::{ModuleDict, ModuleList, Sequential};
pub use conv::{Conv1d, Conv1dConfig, Conv2d, Conv2dAxesConfig, Conv2dConfig, LazyConv2d};
pub use conv_transpose::{
    ConvTranspose1d, ConvTranspose1dConfig, ConvTranspose2d, ConvTranspose2dAxesConfig, ConvTranspose2dConfig,
};
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use encoder_decoder::{Transformer, TransformerConfig, TransformerInput};
pub use lazy_layers::{LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d, LazyConv1d, LazyConv3d};
pub use linear::{Bilinear, Conv1D, Flatten, Identity, LazyLinear, Linear};
pub use nn_core::module::parametrize;
pub use nn_core::ops::GeluApproximate;
pub use norm::{
    BatchNorm1d, BatchNorm2d, BatchNorm3d, BatchNormConfig, BatchStatsSync, GroupNorm, LayerNorm, RMSNorm,
    RMSNormConfig,
};
pub use param_containers::{ParameterDict, ParameterList};
pub use pool::{
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AvgPool1d, AvgPool1dConfig, AvgPool2d, AvgPool2dConfig, MaxPool1d,
    MaxPool1dConfig, MaxPool2d, MaxPool2dConfig,
};
pub use recurrent::{GRUConfig, LSTMConfig, LSTMInput, RNNConfig, RNNInput, RnnNonlinearity, GRU, LSTM, RNN};
pub use reset::ResetParameters;
pub use transformer::{
    Activation, EncoderInput, TransformerEncoder, TransformerEncoderLayer, TransformerEncoderLayerConfig,
};
pub use transformer_decoder::{
    DecoderInput, TransformerDecoder, TransformerDecoderLayer, TransformerDecoderLayerConfig,
};
pub use upsample::{Upsample, UpsampleConfig};
pub use volumetric::{AvgPool3d, AvgPool3dConfig, Conv3d, Conv3dConfig, MaxPool3d, MaxPool3dConfig};
