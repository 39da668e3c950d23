//! # Mixed precision
//!
//! Two pieces, as in PyTorch's `torch.amp`: [`amp::autocast`](crate::amp::autocast), a
//! scope in which the ops that gain from a half dtype (matrix products, linear layers,
//! convolutions, attention) cast their arguments to `bf16` or `f16` and the ops that need
//! range (the losses) run in `f32`; and [`GradScaler`](crate::amp::GradScaler), dynamic
//! loss scaling for `f16`, whose narrow exponent flushes small gradients to zero.
//! Parameters stay `f32` and receive `f32` gradients.
//!
//! ## Autocast
//!
//! [`autocast(device, dtype, || ..)`](crate::amp::autocast) is
//! `with torch.autocast(device, dtype=...):`; the guard
//! [`AutocastGuard`](crate::amp::AutocastGuard) is the same scope until it drops, and
//! `AutocastGuard::with_enabled(.., false)` turns it off inside one (`enabled=False`).
//! What each op does is one table, PyTorch's lists:
//! [`amp::policy(device, op)`](crate::amp::policy) reads it ([`POLICIES`](crate::amp::POLICIES),
//! with [`CPU_POLICIES`](crate::amp::CPU_POLICIES) and [`GPU_POLICIES`](crate::amp::GPU_POLICIES)
//! for the entries one device's list alone has). Ops not listed run in the dtype they get,
//! and mixed dtypes promote as outside the scope (PyTorch's type promotion):
//! ```
//! use nn::prelude::*;
//! use nn::amp::{autocast, policy, AutocastGuard, CastPolicy};
//! use nn::layers::Linear;
//!
//! let model = Linear::new(4, 3);
//! let (x, y) = (Tensor::randn(&[2, 4]), Tensor::from_vec_i64(vec![0, 2], &[2]));
//! let loss = autocast(Device::Cpu, DType::BF16, || {
//!     let logits = model.forward(&x);
//!     assert_eq!(logits.dtype(), DType::BF16); // linear: the lower-precision list
//!     assert_eq!(logits.relu().dtype(), DType::BF16); // not listed: the input's dtype
//!     nn::functional::cross_entropy(&logits, &y) // losses: f32
//! });
//! assert_eq!(loss.dtype(), DType::F32);
//! loss.backward();
//! assert_eq!(model.weight.dtype(), DType::F32);
//! assert_eq!(model.weight.grad().unwrap().dtype(), DType::F32);
//!
//! {
//!     let _bf16 = AutocastGuard::new(Device::Cpu, DType::BF16);
//!     assert_eq!(model.forward(&x).dtype(), DType::BF16);
//!     let _off = AutocastGuard::with_enabled(Device::Cpu, DType::BF16, false);
//!     assert_eq!(model.forward(&x).dtype(), DType::F32);
//! }
//! assert_eq!(policy(Device::Cpu, "linear"), Some(CastPolicy::Lower));
//! assert_eq!(policy(Device::Cpu, "softmax"), None); // f32 on the GPU only, as in PyTorch
//! assert_eq!(policy(Device::Gpu(0), "softmax"), Some(CastPolicy::F32));
//! ```
//! `autocast(Device::Gpu(0), ..)` is `torch.autocast("cuda")`: one scope for every
//! `gpu:n`, with PyTorch's CUDA lists. Autocast casts the ops you call, not the ops an op
//! is built from: a `bf16` `mean` stays `bf16` on the GPU though its `sum` is on the GPU's
//! `f32` list. The half types compute in `f32` and round each result once, except where a
//! kernel has them natively (`bf16` products on CPUs with AVX512-BF16, `f16` products on
//! GPUs with `SHADER_F16`).
//!
//! ## Loss scaling: `GradScaler`
//!
//! `scale(&loss).backward()` multiplies the gradients by the scale (65536 by default);
//! `unscale_` divides them back (needed only to clip or inspect them); `step` skips the
//! optimizer's step when a gradient is inf or NaN and says which it did; `update` halves
//! the scale after an overflow and doubles it after 2000 clean steps
//! ([`GradScalerConfig`](crate::amp::GradScalerConfig) changes these):
//! ```
//! use nn::prelude::*;
//! use nn::amp::{autocast, GradScaler, StepOutcome};
//! use nn::layers::Linear;
//! use nn::optim::{clip_grad_norm_, AdamW, AdamWConfig, Optimizer};
//!
//! let model = Linear::new(4, 2);
//! let mut opt = AdamW::new(model.named_parameters(), AdamWConfig::default());
//! let mut scaler = GradScaler::new();
//! let (x, y) = (Tensor::randn(&[8, 4]), Tensor::from_vec_i64(vec![0, 1, 0, 1, 0, 1, 0, 1], &[8]));
//! for _ in 0..3 {
//!     opt.zero_grad();
//!     let loss = autocast(Device::Cpu, DType::F16, || nn::functional::cross_entropy(&model.forward(&x), &y));
//!     scaler.scale(&loss).backward();
//!     scaler.unscale_(&mut opt);
//!     clip_grad_norm_(&model.parameters(), 1.0);
//!     assert_eq!(scaler.step(&mut opt), StepOutcome::Stepped);
//!     scaler.update();
//! }
//! assert_eq!(scaler.get_scale(), 65536.0);
//!
//! // An overflow: the step is skipped (weights and optimizer state untouched), the scale halves.
//! let before = model.weight.to_vec();
//! opt.zero_grad();
//! scaler.scale(&(model.forward(&x).sum() * f64::INFINITY)).backward();
//! assert_eq!(scaler.step(&mut opt), StepOutcome::Skipped);
//! scaler.update();
//! assert_eq!((model.weight.to_vec(), scaler.get_scale()), (before, 32768.0));
//! ```
//! Calls out of order (`unscale_` twice, `step` twice before `update`) panic with
//! PyTorch's message. The scaler's state belongs in the training checkpoint:
//! [`Checkpoint::with_scaler`](crate::checkpoint::Checkpoint::with_scaler) saves it and
//! [`restore_with_scaler`](crate::checkpoint::Checkpoint::restore_with_scaler) restores it
//! with the rest (a plain `restore` of such a checkpoint is refused: it would restart the
//! scale silently):
//! ```
//! use nn::prelude::*;
//! use nn::amp::GradScaler;
//! use nn::checkpoint::Checkpoint;
//! use nn::layers::Linear;
//! use nn::optim::{Optimizer, Sgd, SgdConfig};
//!
//! let mut model = Linear::new(2, 1);
//! let mut opt = Sgd::new(model.named_parameters(), SgdConfig::default());
//! let mut scaler = GradScaler::new();
//! scaler.update_with(1024.0)?;
//! let ck = Checkpoint::new(model.state_dict(), Some(opt.state_dict()), None, 0, 1).with_scaler(scaler.state_dict());
//!
//! let mut fresh = GradScaler::new();
//! assert!(ck.restore(&mut model, Some(&mut opt), None).is_err()); // the scaler would be lost
//! ck.restore_with_scaler(&mut model, Some(&mut opt), None, &mut fresh)?;
//! assert_eq!(fresh.get_scale(), 1024.0);
//! # Ok::<(), nn::Error>(())
//! ```
//! The examples take `--amp bf16` and `--amp f16` (`mnist`, `char_transformer`); with
//! data-parallel training, nn-distributed's `ShardedGradScaler` agrees on overflows across
//! the ranks (see [the distributed chapter](super::distributed)).
