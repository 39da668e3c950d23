//! # nn
//!
//! Facade crate: everything of [`nn_core`] at the root, layers under [`layers`]. New to nn
//! from PyTorch? Read [`from_pytorch`]: every common `nn.Module` idiom beside its nn form.
//!
//! ```
//! use nn::Tensor;
//! let x = Tensor::ones(&[2, 2]);
//! assert_eq!(x.sum().item(), 4.0);
//! ```

pub use nn_core::*;
pub use nn_layers as layers;

pub mod from_pytorch;
