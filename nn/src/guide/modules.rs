//! # Modules and the derive
//!
//! A model is a struct with `#[derive(Module)]`. The derive reads the field annotations at
//! compile time and writes the traversal PyTorch builds at run time from attribute
//! assignments: dotted names, [`state_dict`](crate::Module::state_dict) and loading,
//! device and dtype moves, train/eval, deep copies and the printout.
//!
//! | annotation | field type | PyTorch |
//! |---|---|---|
//! | `#[param]` | `Parameter`, `Option<Parameter>` | `nn.Parameter` attribute |
//! | `#[buffer]` | `Tensor`, `Option<Tensor>` | `register_buffer(name, t)` |
//! | `#[buffer(persistent = false)]` | as `#[buffer]`, not saved | `register_buffer(..., persistent=False)` |
//! | `#[module]` | a module, `Option` of one, `ModuleList`, `ModuleDict`, ... | a sub-module attribute |
//! | `#[base]` | `ModuleBase` | the hooks and the training flag of a module that computes |
//! | none | plain data (`usize`, `String`, a config) | any other attribute |
//!
//! ## Defining, calling, inspecting
//!
//! The computation is [`Compute::compute`](crate::Compute::compute) (PyTorch's
//! `def forward`); callers use [`Forward::forward`](crate::Forward::forward) (PyTorch's
//! `module(x)`), which runs the hooks around it:
//! ```
//! use nn::prelude::*;
//! use nn::layers::{Dropout, Linear};
//!
//! #[derive(Module)]
//! struct Block {
//!     #[module] fc: Linear,
//!     #[module] drop: Dropout,
//!     #[param] gain: Parameter,
//!     #[buffer] steps: Tensor,
//!     #[buffer(persistent = false)] scratch: Tensor,
//!     #[base] base: ModuleBase,
//!     width: usize, // plain data
//! }
//!
//! impl Compute for Block {
//!     type Input = Tensor;
//!     type Output = Tensor;
//!     fn compute(&self, x: &Tensor) -> Tensor {
//!         self.drop.forward(&self.fc.forward(x).relu()) * &*self.gain
//!     }
//! }
//!
//! let mut block = Block {
//!     fc: Linear::new(4, 3),
//!     drop: Dropout::new(0.5),
//!     gain: Parameter::new(Tensor::ones(&[3])),
//!     steps: Tensor::zeros(&[1]),
//!     scratch: Tensor::zeros(&[3]),
//!     base: ModuleBase::new(),
//!     width: 3,
//! };
//! assert_eq!(block.forward(&Tensor::ones(&[2, 4])).shape(), &[2, block.width]);
//!
//! let names: Vec<String> = block.named_parameters().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["gain", "fc.weight", "fc.bias"]); // own entries first, as PyTorch
//! assert_eq!(block.num_parameters(), 3 + 4 * 3 + 3);
//! assert_eq!(block.named_buffers().len(), 2);
//! // The non-persistent buffer moves with the module but is not saved.
//! assert_eq!(block.state_dict().keys().collect::<Vec<_>>(), ["gain", "steps", "fc.weight", "fc.bias"]);
//! // print(model): PyTorch's printout of the registered sub-modules.
//! assert_eq!(block.to_string(), "Block(\n  (fc): Linear(in_features=4, out_features=3, bias=True)\n  (drop): Dropout(p=0.5, inplace=False)\n)");
//!
//! // Train and eval set the flag on the whole tree: dropout is the identity in eval.
//! block.eval();
//! assert!(!block.is_training() && !block.drop.is_training());
//! let x = Tensor::ones(&[1, 4]);
//! assert_eq!(block.forward(&x).to_vec(), block.forward(&x).to_vec());
//! block.train();
//! assert!(block.drop.is_training());
//! block.to_dtype(DType::F64); // model.double(): parameters and buffers
//! assert_eq!((block.fc.weight.dtype(), block.scratch.dtype()), (DType::F64, DType::F64));
//! ```
//!
//! Built-in containers register their items: [`Sequential`](crate::layers::Sequential),
//! [`ModuleList`](crate::layers::ModuleList), [`ModuleDict`](crate::layers::ModuleDict),
//! [`ParameterList`](crate::layers::ParameterList) and
//! [`ParameterDict`](crate::layers::ParameterDict) (PyTorch's keys: `blocks.0.weight`).
//! The tree is reachable by path: [`get_submodule`](crate::Module::get_submodule),
//! `get_submodule_as::<Linear>`, `set_submodule`, and
//! [`requires_grad_`](crate::Module::requires_grad_) on any subtree to freeze it:
//! ```
//! use nn::prelude::*;
//! use nn::layers::{Linear, ModuleList, ReLU, Sequential};
//!
//! #[derive(Module)]
//! struct Net {
//!     #[module] body: Sequential,
//!     #[module] heads: ModuleList<Linear>,
//! }
//! let net = Net {
//!     body: Sequential::new().add(Linear::new(4, 8)).add(ReLU::new()),
//!     heads: (0..2).map(|_| Linear::new(8, 1)).collect(),
//! };
//! let paths: Vec<String> = net.named_modules().into_iter().map(|(p, _)| p).collect();
//! assert_eq!(paths, ["", "body", "body.0", "body.1", "heads", "heads.0", "heads.1"]);
//! assert_eq!(net.get_submodule_as::<Linear>("heads.1").unwrap().in_features(), 8);
//! net.get_submodule("body").unwrap().requires_grad_(false);
//! assert_eq!(net.num_trainable_parameters(), 2 * (8 + 1));
//! ```
//!
//! ## Hooks
//!
//! Forward pre-hooks, forward hooks and full backward hooks register on any module that
//! runs, including the `&dyn Module` items of `named_modules()`, and stay until
//! [`HookHandle::remove`](crate::HookHandle::remove) (or the end of the scope of
//! `handle.scoped()`). A hook that returns `Some(t)` replaces the value it sees:
//! ```
//! use std::sync::{Arc, Mutex};
//! use nn::prelude::*;
//! use nn::layers::{Linear, ReLU, Sequential};
//!
//! let model = Sequential::new().add(Linear::new(4, 8)).add(ReLU::new()).add(Linear::new(8, 2));
//! let shapes = Arc::new(Mutex::new(Vec::new()));
//! let log = shapes.clone();
//! let relu = model.get_submodule("1").unwrap();
//! let handle = relu.register_forward_hook(move |_input, out| {
//!     log.lock().unwrap().push(out.shape().to_vec());
//!     None // keep the output
//! })?;
//! model.forward(&Tensor::ones(&[3, 4]));
//! handle.remove();
//! model.forward(&Tensor::ones(&[3, 4])); // not seen: the hook is gone
//! assert_eq!(*shapes.lock().unwrap(), [vec![3, 8]]);
//!
//! // A pre-hook that replaces the input: here the model sees zeros.
//! let zero = model.register_forward_pre_hook(|x| Some(Tensor::zeros(x.shape())))?.scoped();
//! let y = model.forward(&Tensor::ones(&[1, 4]));
//! drop(zero);
//! let no_hook = model.forward(&Tensor::zeros(&[1, 4]));
//! assert_eq!(y.to_vec(), no_hook.to_vec());
//! # Ok::<(), nn::Error>(())
//! ```
//! Gradient hooks on tensors and parameters, global hooks on every module
//! ([`nn::hooks`](crate::hooks)) and state-dict hooks are in
//! [Coming from PyTorch](crate::from_pytorch).
//!
//! ## Copies
//!
//! Modules are not `Clone`: a clone would hold the original's `Parameter` handles and
//! training it would train the original. [`deep_copy`](crate::Module::deep_copy) is
//! `copy.deepcopy(model)`: new parameters and buffers with equal values, ties inside the
//! model kept, plain fields cloned; gradients and hooks are not copied:
//! ```
//! use nn::prelude::*;
//! use nn::layers::Linear;
//!
//! let online = Linear::new(2, 2);
//! let target = online.deep_copy();
//! assert_eq!(target.weight.to_vec(), online.weight.to_vec());
//! assert_ne!(target.weight.id(), online.weight.id());
//! nn::no_grad(|| target.weight.mul_(0.0)); // the copy moves alone
//! assert_ne!(online.weight.to_vec(), vec![0.0; 4]);
//! ```
//!
//! ## What does not compile
//!
//! A field that holds modules, tensors or parameters without an annotation would be
//! invisible to `parameters()`, `state_dict()` and `to_device()` (PyTorch's silent bug
//! with a plain list of layers). The derive makes it a compile error that says what to
//! write:
//! ```compile_fail,E0277
//! use nn::prelude::*;
//! use nn::layers::Linear;
//!
//! #[derive(Module)]
//! struct Net {
//!     layers: Vec<Linear>, // error: holds modules but is not registered
//! }
//! ```
//! ```text
//! error[E0277]: field of type `Vec<Linear>` holds modules but is not registered
//!  --> src/model.rs:6:5
//!   |
//! 6 |     layers: Vec<Linear>,
//!   |     ^^^^^^^^^^^^^^^^^^^ invisible to `parameters()`, `state_dict()` and `to_device()`
//!   |
//!   = note: write `#[module] layers: ModuleList<Linear>`
//! ```
//! An unannotated `Tensor` gets `write #[buffer] running_mean: Tensor for state saved
//! with the model, or #[param] running_mean: Parameter if it is trained`, an unannotated
//! `Parameter` gets `write #[param] gain: Parameter`:
//! ```compile_fail,E0277
//! use nn::prelude::*;
//!
//! #[derive(Module)]
//! struct Norm {
//!     running_mean: Tensor, // error: holds a tensor but is not registered
//! }
//! ```
//! So do a `#[base]` without a `Compute` impl (and the reverse), a `Clone` impl on a
//! module, and a direct call of `compute` under `-D warnings` (it would skip the hooks).
//! The whole list, each case with its reviewed message, is the trybuild suite in
//! `tests/ui/`; the derive's attributes are in nn-derive's README.
