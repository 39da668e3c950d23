//! # Tensors and autograd
//!
//! A [`Tensor`](crate::Tensor) is a handle on shared storage with a strided layout, a
//! [`DType`](crate::DType), a [`Device`](crate::Device) and autograd state. Rust's
//! `clone()` gives another handle on the same tensor (a second Python name for one
//! `torch.Tensor`); PyTorch's `clone()` is [`Tensor::copy`](crate::Tensor::copy).
//!
//! ## Creating tensors
//!
//! Values are row-major and `f32` unless a constructor says otherwise; the random
//! factories draw from one seeded generator ([`manual_seed`](crate::manual_seed)):
//! ```
//! use nn::{DType, Tensor};
//!
//! let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
//! assert_eq!((x.shape(), x.dtype(), x.numel()), (&[2, 3][..], DType::F32, 6));
//! assert_eq!(Tensor::zeros(&[2, 2]).sum().item(), 0.0);
//! assert_eq!(Tensor::full(&[3], 0.5).to_vec(), [0.5; 3]);
//! assert_eq!(Tensor::arange(0.0, 2.0, 0.5).to_vec(), [0.0, 0.5, 1.0, 1.5]);
//! assert_eq!(Tensor::eye(2).to_vec(), [1.0, 0.0, 0.0, 1.0]);
//! let ids = Tensor::from_vec_i64(vec![3, 1], &[2]); // class indices, token ids
//! let mask = Tensor::from_vec_bool(vec![true, false], &[2]);
//! assert_eq!((ids.dtype(), mask.dtype()), (DType::I64, DType::Bool));
//!
//! nn::manual_seed(0);
//! let a = Tensor::randn(&[4]);
//! nn::manual_seed(0);
//! assert_eq!(Tensor::randn(&[4]).to_vec(), a.to_vec()); // same seed, same draws
//! assert_eq!(Tensor::scalar(2.5).item(), 2.5);
//! ```
//!
//! ## Dtypes and devices
//!
//! `f32`, `f64`, `f16`, `bf16`, `i64` and `bool`. [`to_dtype`](crate::Tensor::to_dtype)
//! converts (a recorded op: gradients flow back through it); the `_dtype` constructors
//! take one. An elementwise op on two dtypes computes in PyTorch's result type
//! ([`result_type`](crate::result_type): `f32 * bool` is f32, `f32 * f64` is f64, a 0-dim
//! operand does not widen); the matrix products and fused norms take one dtype, as
//! PyTorch's. Devices are `Cpu`, `Meta` (shapes and dtypes,
//! no values) and, with the `gpu` feature, `Gpu(n)` (see [the GPU chapter](super::gpu));
//! [`with_device`](crate::with_device) sets where the factories create tensors, as
//! `with torch.device(...)`:
//! ```
//! use nn::{DType, Device, Tensor};
//!
//! let x = Tensor::from_vec(vec![1.5, -2.0], &[2]);
//! assert_eq!(x.to_dtype(DType::F64).to_vec_f64(), [1.5, -2.0]);
//! assert_eq!(x.to_dtype(DType::I64).to_vec_i64(), [1, -2]); // truncates, as PyTorch
//! assert_eq!(Tensor::zeros_dtype(&[2], DType::BF16).dtype(), DType::BF16);
//! assert_eq!((&x + &x.to_dtype(DType::F64)).dtype(), DType::F64); // PyTorch's promotion
//! let mixed = std::panic::catch_unwind(|| x.reshape(&[1, 2]).matmul(&x.reshape(&[2, 1]).to_dtype(DType::F64)));
//! assert!(mixed.is_err());
//!
//! assert_eq!(x.device(), Device::Cpu);
//! assert_eq!("gpu:1".parse::<Device>(), Ok(Device::Gpu(1))); // PyTorch's "cuda:1"
//! let big = nn::with_device(Device::Meta, || Tensor::zeros(&[100_000, 100_000]));
//! assert_eq!((big.device(), big.numel()), (Device::Meta, 10_000_000_000)); // nothing allocated
//! ```
//!
//! ## Arithmetic and broadcasting
//!
//! The operators take tensors by reference or by value (`&a + &b`, `&a * 2.0`) and broadcast with NumPy's
//! rules, as PyTorch does: dimensions are aligned from the right, and a size of 1
//! stretches. Shapes that do not broadcast panic, naming the op and both shapes:
//! ```
//! use nn::Tensor;
//!
//! let col = Tensor::from_vec(vec![0.0, 10.0, 20.0], &[3, 1]);
//! let row = Tensor::from_vec(vec![1.0, 2.0], &[2]);
//! let grid = &col + &row; // [3, 1] + [2] -> [3, 2]
//! assert_eq!(grid.shape(), &[3, 2]);
//! assert_eq!(grid.to_vec(), [1.0, 2.0, 11.0, 12.0, 21.0, 22.0]);
//! assert_eq!((&grid * 0.5).sum_dim(0, false).to_vec(), [16.5, 18.0]);
//! assert_eq!(grid.matmul(&Tensor::ones(&[2, 1])).shape(), &[3, 1]);
//!
//! let bad = std::panic::catch_unwind(|| &col + &Tensor::ones(&[2, 2]));
//! let msg = bad.unwrap_err().downcast::<String>().unwrap();
//! assert!(msg.contains("shapes [3, 1] and [2, 2] cannot be broadcast together"), "{msg}");
//! ```
//!
//! ## Views
//!
//! `narrow`, `t`, `transpose`, `permute`, `expand`, `chunk` and `reshape`/`view` of a
//! contiguous tensor change the layout and share the storage: an in-place update through a
//! view is seen by the tensor, as in PyTorch. [`copy`](crate::Tensor::copy) makes a tensor
//! of its own, [`contiguous`](crate::Tensor::contiguous) one in row-major order:
//! ```
//! use nn::Tensor;
//!
//! let x = Tensor::arange(0.0, 6.0, 1.0).reshape(&[2, 3]);
//! let t = x.t();
//! assert!(t.is_alias_of(&x) && !t.is_contiguous());
//! assert_eq!(t.to_vec(), [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
//! assert_eq!(x.view((3, -1)).shape(), &[3, 2]); // one size inferred
//! assert_eq!(x.permute(&[1, 0]).contiguous().to_vec(), t.to_vec());
//!
//! x.narrow(1, 0, 1).fill_(-1.0); // x[:, 0:1] = -1
//! assert_eq!(x.to_vec(), [-1.0, 1.0, 2.0, -1.0, 4.0, 5.0]);
//! let own = x.copy();
//! own.zero_();
//! assert_eq!(x.sum().item(), 10.0); // the copy did not write `x`
//! ```
//!
//! ## Indexing: `Tensor::i`
//!
//! [`Tensor::i`](crate::Tensor::i) is PyTorch's `x[...]`, one index or a tuple: integers
//! drop their dimension (negative from the end), ranges slice (`1..`, `..-1`, clamped as
//! Python's), `..` is `:`, [`Idx::step`](crate::ops::Idx::step) is `::2`,
//! [`NEW_AXIS`](crate::ops::NEW_AXIS) is `None`, [`ELLIPSIS`](crate::ops::ELLIPSIS) is
//! `...`, and one `i64` tensor selects positions. Integers and ranges give views, so an
//! assignment is a write through one:
//! ```
//! use nn::ops::{Idx, ELLIPSIS, NEW_AXIS};
//! use nn::Tensor;
//!
//! let x = Tensor::arange(0.0, 24.0, 1.0).reshape(&[2, 3, 4]);
//! assert_eq!(x.i((.., -1, ..)).shape(), &[2, 4]);              // x[:, -1, :]
//! assert_eq!(x.i((1, 0, 2)).item(), 14.0);                     // x[1, 0, 2]
//! assert_eq!(x.i((0, 1.., ..-1)).shape(), &[2, 3]);            // x[0, 1:, :-1]
//! assert_eq!(x.i((ELLIPSIS, Idx::step(.., 2))).shape(), &[2, 3, 2]); // x[..., ::2]
//! assert_eq!(x.i((NEW_AXIS, 0)).shape(), &[1, 3, 4]);          // x[None, 0]
//! let rows = Tensor::from_vec_i64(vec![2, 0], &[2]);
//! assert_eq!(x.i((0, &rows)).i((.., 0)).to_vec(), [8.0, 0.0]); // x[0, [2, 0]][:, 0]
//!
//! x.i((.., 0, 0)).fill_(100.0);                                // x[:, 0, 0] = 100
//! assert_eq!((x.i((0, 0, 0)).item(), x.i((1, 0, 0)).item()), (100.0, 100.0));
//! ```
//!
//! ## Autograd
//!
//! A tensor made with `requires_grad_(true)` is a leaf the graph records ops from;
//! [`backward`](crate::Tensor::backward) on a one-element result sums the gradients into
//! each leaf's [`grad`](crate::Tensor::grad) (accumulating across passes until cleared, as
//! PyTorch's `.grad`). [`no_grad`](crate::no_grad) runs a closure without recording, and
//! [`detach`](crate::Tensor::detach) gives an alias cut from the graph:
//! ```
//! use nn::Tensor;
//!
//! let w = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]).requires_grad_(true);
//! let x = Tensor::from_vec(vec![4.0, 5.0, 6.0], &[3]);
//! let y = (&w * &x).sum() + w.square().sum(); // y = w·x + |w|²
//! assert!(w.is_leaf() && !y.is_leaf() && y.requires_grad());
//! y.backward();
//! assert_eq!(w.grad().unwrap().to_vec(), [6.0, 9.0, 12.0]); // x + 2w
//! assert!(x.grad().is_none()); // x does not require grad
//!
//! (&w * 2.0).sum().backward(); // accumulates, as PyTorch's `.grad` does
//! assert_eq!(w.grad().unwrap().to_vec(), [8.0, 11.0, 14.0]);
//! w.zero_grad();
//! assert!(w.grad().is_none());
//!
//! // No graph inside `no_grad` (PyTorch's `with torch.no_grad():`), nor from a detached alias.
//! let z = nn::no_grad(|| &w * 3.0);
//! assert!(!z.requires_grad() && z.is_leaf());
//! let d = w.detach();
//! assert!(!d.requires_grad() && d.is_alias_of(&w));
//! // A gradient step: in-place updates of a leaf that requires grad go inside `no_grad`.
//! (&w * &x).sum().backward();
//! nn::no_grad(|| w.add_(&(w.grad().unwrap() * -0.25)));
//! assert_eq!(w.to_vec(), [0.0, 0.75, 1.5]);
//! ```
//!
//! A non-scalar result takes its incoming gradient through
//! [`backward_with`](crate::Tensor::backward_with); intermediate gradients are kept on
//! request with [`retain_grad`](crate::Tensor::retain_grad), and
//! [`Tensor::register_hook`](crate::Tensor::register_hook) sees (and may replace) the
//! gradient of any tensor. [`inference_mode`](crate::inference_mode) is PyTorch's
//! `torch.inference_mode()`. The ops with their backward, and the shared gradient checker
//! they are tested with, are in [`ops`](crate::ops) and [`testing`](crate::testing).
