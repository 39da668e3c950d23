//! # The nn guide
//!
//! A tour of the framework in chapters, from tensors to distributed training. Every
//! snippet is a doctest that runs and asserts (`cargo test -p nn --doc guide`), so what
//! the guide says is what the code does. The snippets use small tensors and the tiny
//! fixtures committed in the repository; those that write files use the system's temporary
//! directory and remove what they write.
//!
//! | chapter | what it covers |
//! |---|---|
//! | [Tensors and autograd](tensors) | creation, dtypes and devices, broadcasting, views, indexing with `Tensor::i`; `requires_grad`, `backward`, `grad`, `no_grad`, `detach` |
//! | [Modules and the derive](modules) | `#[derive(Module)]` with `#[param]`, `#[buffer]`, `#[module]`, `#[base]`; names, state dicts, train/eval, hooks, deep copies, the compile errors |
//! | [Training and checkpoints](training) | optimizers, parameter groups, schedulers, gradient clipping, a `Checkpoint` saved and resumed bit for bit |
//! | [Saving and loading](saving) | safetensors state dicts, strict and non-strict loads, PyTorch's `.pt` files, the meta device and `assign` |
//! | [Mixed precision](mixed_precision) | `amp::autocast` and `GradScaler` |
//! | [The GPU](gpu) | the `gpu` feature, moving a model, what happens without an adapter |
//! | [ONNX export](onnx) | `nn::onnx::export`, user-written forwards, what is refused |
//! | [Distributed training](distributed) | nn-distributed: DDP, ZeRO and FSDP under `mpirun` |
//! | [Reference models](models) | nn-models: `from_pretrained`, generation with a KV cache, the tokenizer |
//!
//! Coming from PyTorch? [Coming from PyTorch](crate::from_pytorch) puts every common
//! `nn.Module` idiom beside its nn form, with the same kind of tested snippets. The API
//! reference is the rest of this crate's documentation: nn-core at the root,
//! [`layers`](crate::layers), [`data`](crate::data), [`onnx`](crate::onnx) and
//! [`models`](crate::models).
//!
//! The snippets start with `use nn::prelude::*;`, which brings in the `Module` trait and
//! its derive, `Compute`, `Forward`, `Hooks`, `Layer`, `ModuleBase`, `Parameter`, `Tensor`,
//! `DType` and `Device`:
//! ```
//! use nn::prelude::*;
//! use nn::layers::Linear;
//!
//! let model = Linear::new(3, 2);
//! let y = model.forward(&Tensor::ones(&[4, 3]));
//! assert_eq!((y.shape(), y.dtype(), y.device()), (&[4, 2][..], DType::F32, Device::Cpu));
//! ```

pub mod distributed;
pub mod gpu;
pub mod mixed_precision;
pub mod models;
pub mod modules;
pub mod onnx;
pub mod saving;
pub mod tensors;
pub mod training;
