//! Layers and containers for the `nn` framework, with PyTorch's names, shapes, defaults,
//! initialisation and printouts, each defined with `#[derive(Module)]`.
//!
//! ```
//! use nn_core::{Forward, Module, Tensor};
//! use nn_layers::{Linear, ReLU, Sequential};
//! let net = Sequential::new().add(Linear::new(784, 256)).add(ReLU::new()).add(Linear::new(256, 10));
//! assert_eq!(net.num_parameters(), 784 * 256 + 256 + 256 * 10 + 10);
//! assert_eq!(net.forward(&Tensor::zeros(&[1, 784])).shape(), &[1, 10]);
//! ```

mod activation;
mod containers;
mod linear;

pub use activation::ReLU;
pub use containers::{ModuleDict, ModuleList, Sequential};
pub use linear::Linear;
