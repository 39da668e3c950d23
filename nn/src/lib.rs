//! # nn
//!
//! Facade crate: everything of [`nn_core`] at the root, layers under [`layers`], datasets
//! and loaders under [`data`], ONNX export under [`onnx`], the reference models (GPT-2,
//! BERT, Llama, ResNet) under [`models`]. New to nn from PyTorch? Read [`from_pytorch`]:
//! every common `nn.Module` idiom beside its nn form. The [`guide`] goes through the framework
//! chapter by chapter, from tensors to distributed training, each snippet a test.
//!
//! ```
//! use nn::Tensor;
//! let x = Tensor::ones(&[2, 2]);
//! assert_eq!(x.sum().item(), 4.0);
//! ```

pub use nn_core::*;
pub use nn_data as data;
pub use nn_layers as layers;
pub use nn_models as models;
pub use nn_onnx as onnx;

pub mod from_pytorch;
pub mod guide;
