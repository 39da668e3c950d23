//! # nn-core
//!
//! The foundation of the `nn` framework: a CPU [`Tensor`] with strided views and
//! reverse-mode automatic differentiation, and the [`Module`] trait whose
//! `#[derive(Module)]` registers model state at compile time — with PyTorch's semantics
//! and names throughout.
//!
//! Defining, printing and inspecting a model (layers proper live in `nn-layers`; this one
//! is built from `nn-core` alone):
//!
//! ```
//! use nn_core::prelude::*;
//! use nn_core::ExtraRepr;
//!
//! #[derive(Module)]
//! #[module(extra_repr)]
//! struct Affine {
//!     #[param] weight: Parameter,
//!     #[param] bias: Option<Parameter>,
//!     #[base] base: ModuleBase,
//! }
//!
//! impl ExtraRepr for Affine {
//!     fn extra_repr(&self) -> String {
//!         format!("features={}", self.weight.shape()[1])
//!     }
//! }
//!
//! // The computation (PyTorch's `def forward`); callers use `forward`, which runs hooks.
//! impl Compute for Affine {
//!     type Input = Tensor;
//!     type Output = Tensor;
//!     fn compute(&self, x: &Tensor) -> Tensor {
//!         let y = x.matmul(&self.weight.t());
//!         match &self.bias { Some(b) => y + &**b, None => y }
//!     }
//! }
//!
//! #[derive(Module)]
//! struct Net {
//!     #[module] first: Affine,
//!     #[module] second: Affine,
//!     #[buffer] scale: Tensor,
//!     #[buffer(persistent = false)] cache: Tensor,
//!     steps: usize, // plain data needs no annotation
//! }
//!
//! let affine = |i, o, bias: bool| Affine {
//!     weight: Parameter::new(Tensor::ones(&[o, i])),
//!     bias: bias.then(|| Parameter::new(Tensor::zeros(&[o]))),
//!     base: ModuleBase::new(),
//! };
//! let mut net = Net { first: affine(3, 4, true), second: affine(4, 2, false), scale: Tensor::ones(&[2]), cache: Tensor::zeros(&[1]), steps: 0 };
//!
//! assert_eq!(net.to_string(), "Net(\n  (first): Affine(features=3)\n  (second): Affine(features=4)\n)");
//! let names: Vec<String> = net.named_parameters().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["first.weight", "first.bias", "second.weight"]);
//! // Own buffers first, then children's entries, as PyTorch; the cache is not persistent.
//! assert_eq!(net.state_dict().keys().collect::<Vec<_>>(), ["scale", "first.weight", "first.bias", "second.weight"]);
//! assert_eq!(net.num_parameters(), 12 + 4 + 8);
//! assert_eq!(net.get_submodule("second").unwrap().type_name(), "Affine");
//! net.eval();
//! assert!(!net.first.base.is_training());
//! let y = net.second.forward(&net.first.forward(&Tensor::ones(&[1, 3])));
//! assert_eq!(y.to_vec(), vec![12.0, 12.0]);
//! # assert_eq!(net.steps, 0);
//! ```
//!
//! A module implements [`Compute`] (its computation, PyTorch's `def forward`) and is run
//! with [`Forward::forward`] (PyTorch's `module(x)`), which nn implements once for every
//! module and which runs the module's hooks: no module's code runs hooks, so none can
//! forget them, and no caller can go around them. A module that computes must have a
//! `#[base]` (its hooks and training flag), and a struct with a `#[base]` must compute;
//! both are compile errors. Hooks stay registered until `handle.remove()`. The reasons and
//! the rules are in [`module::forward`] and [`module::hooks`].
//!
//! Training with autograd alone:
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
//! Threads and memory on the CPU: kernels run on a team of [`set_num_threads`] threads, by
//! default `RAYON_NUM_THREADS` (the caller included; one thread inside a rayon task). Freed `f32`/`f64` buffers are
//! recycled by a pool of up to 256 MiB. On Linux with glibc, the first matrix product sets
//! `malloc`'s thresholds (`mallopt`: blocks up to 32 MiB from the heap, 256 MiB of free
//! heap kept mapped), because the GEMM library allocates its packing buffers on every call
//! and glibc's moving defaults can give those pages back to the OS and fault them in again
//! on every product. A `GLIBC_TUNABLES` that sets any `glibc.malloc.` tunable leaves
//! `malloc` as the user configured it.
//!
//! Layout of the crate: [`tensor`] (the handle), [`shape`] (layouts and broadcasting),
//! [`backend`] (the interface to device kernels, and the CPU backend), [`autograd`] (graph and engine), [`ops`] (every op with
//! its backward), [`functional`] (PyTorch-style free functions), [`optim`] (optimizers,
//! clipping, schedulers), [`amp`] (loss scaling for mixed precision), [`checkpoint`]
//! (resumable training state), [`random`] (the seeded generator) and [`testing`] (the
//! shared gradient checker).

// Proving `Tensor: Send + Sync` walks the GPU buffer's wgpu types (a tensor's slot lock
// holds the buffer), a chain deeper than rustc's default limit of 128 when built without
// incremental compilation (CI's setting).
#![recursion_limit = "256"]

// Lets `#[derive(Module)]` output (which names `::nn_core`) compile inside this crate.
#[allow(unused_extern_crates)]
extern crate self as nn_core;

pub mod amp;
pub mod autograd;
pub mod backend;
pub mod checkpoint;
pub mod cpu;
pub mod device;
pub mod dtype;
pub mod error;
pub mod functional;
pub mod gpu;
pub mod grad_checkpoint;
pub mod init;
pub mod io;
mod loss;
pub mod module;
pub mod names;
pub mod ops;
pub mod optim;
mod pickle;
pub mod pytorch_file;
pub mod random;
pub mod serialization;
pub mod shape;
pub mod shape_spec;
pub mod state_dict;
pub mod storage;
pub mod tensor;
pub mod testing;
pub use autograd::trace;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use autograd::{
    enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad, InferenceModeGuard, NoGradGuard,
};
pub use backend::cpu::team::{get_num_threads, set_num_threads};
pub use device::{default_device, with_device, Device};
pub use dtype::{DType, Element, FloatElement};
pub use error::{Error, Result};
/// Hooks on every module that runs (global hooks); see [`module::global_hooks`].
pub use module::global_hooks as hooks;
pub use module::{
    Compute, Conversion, ExtraRepr, ExtraState, Forward, HasBase, HookCall, HookConfig, HookHandle, Hooks,
    IncompatibleKeys, Item, Layer, LoadStateDictConfig, MigrateState, Module, ModuleBase, ModuleIo, Name, Parameter,
    ScopedHook,
};
pub use ops::promotion::{promote_types, result_type};
pub use random::manual_seed;
pub use shape::{Dim, Layout};
pub use shape_spec::{ShapeDim, ShapeSpec, Start};
pub use state_dict::StateDict;
pub use tensor::{Tensor, TensorId};

/// The names a model definition needs: `use nn_core::prelude::*;`.
pub mod prelude {
    pub use crate::module::ModuleExt;
    pub use crate::{Compute, DType, Device, Forward, Hooks, Layer, Module, ModuleBase, Parameter, Tensor};
}

/// `#[derive(Module)]`: the trait and its derive share the name, as serde's do.
pub use nn_derive::Module;
/// `#[derive(ModuleIo)]`: an input or output struct whose fields are all hook slots.
pub use nn_derive::ModuleIo;
