//! # nn-core
//!
//! The foundation of the `nn` framework: a CPU [`Tensor`] with strided views and
//! reverse-mode automatic differentiation, with PyTorch's semantics and names.
//!
//! ```
//! use nn_core::{manual_seed, Tensor};
//!
//! manual_seed(0);
//! // A tiny least-squares fit: y = 2x, learn w from w = 0.
//! let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3, 1]);
//! let y = &x * 2.0;
//! let w = Tensor::zeros(&[1, 1]).requires_grad_(true);
//! for _ in 0..50 {
//!     let loss = (x.matmul(&w) - &y).square().mean();
//!     loss.backward();
//!     nn_core::no_grad(|| w.add_(&(w.grad().unwrap() * -0.1)));
//!     w.zero_grad();
//! }
//! assert!((w.item() - 2.0).abs() < 1e-4);
//! ```
//!
//! Layout of the crate: [`tensor`] (the handle), [`shape`] (layouts and broadcasting),
//! [`storage`] (backend buffers), [`autograd`] (graph and engine), [`ops`] (every op with
//! its backward), [`functional`] (PyTorch-style free functions), [`random`] (the seeded
//! generator) and [`testing`] (the shared gradient checker).

// Lets `#[derive(Module)]` output (which names `::nn_core`) compile inside this crate.
#[allow(unused_extern_crates)]
extern crate self as nn_core;

pub mod autograd;
pub mod checkpoint;
pub mod device;
pub mod dtype;
pub mod error;
pub mod functional;
pub mod init;
pub mod io;
mod loss;
pub mod module;
pub mod ops;
pub mod optim;
pub mod random;
pub mod serialization;
pub mod shape;
pub mod state_dict;
pub mod storage;
pub mod tensor;
pub mod testing;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use autograd::{enable_grad, is_grad_enabled, no_grad, NoGradGuard};
pub use device::Device;
pub use dtype::{DType, Element, FloatElement};
pub use error::{Error, Result};
pub use module::{ExtraRepr, Forward, HookHandle, IncompatibleKeys, Item, Layer, Module, ModuleBase, Name, Parameter};
pub use random::manual_seed;
pub use shape::{Dim, Layout};
pub use state_dict::StateDict;
pub use tensor::{Tensor, TensorId};

/// `#[derive(Module)]`: the trait and its derive share the name, as serde's do.
pub use nn_derive::Module;
