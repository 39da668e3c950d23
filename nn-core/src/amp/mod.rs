//! Mixed-precision training (PyTorch's `torch.amp`): [`autocast`], which runs matrix
//! products, convolutions and attention in a half dtype and the losses in `f32` (one
//! table of ops, [`POLICIES`], with [`CPU_POLICIES`] and [`GPU_POLICIES`] for what only
//! one device's list has), and [`GradScaler`], dynamic loss scaling that keeps small
//! gradients from flushing to zero in half precision and skips the steps whose gradients
//! overflowed.
//!
//! Autocast applies to the ops you call, not to the ops an op is built from. PyTorch casts
//! at its dispatcher, which sees `aten::mean` as one op; nn's `mean` is a `sum` and a
//! division, and that `sum` (on the GPU's `f32` list) must not turn a `bf16` mean into an
//! `f32` one. Every public op built from listed ops marks itself as running while a scope
//! is on, and the ops it calls run in the dtypes they are given.

mod grad_scaler;

// The autocast state is a per-thread mode beside grad mode (`autograd::autocast`), where
// the ops and the backward pass reach it without importing this module.
pub use crate::autograd::autocast::{
    autocast, autocast_dtype, autocast_enabled, policy, AutocastGuard, CastPolicy, CPU_POLICIES, GPU_POLICIES, POLICIES,
};
pub use grad_scaler::{GradScaler, GradScalerConfig, GradScalerState, StepOutcome};
