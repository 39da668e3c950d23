//! Mixed-precision training (PyTorch's `torch.amp`): [`autocast`], which runs matrix
//! products, convolutions and attention in a half dtype and the losses in `f32` (one
//! table of ops, [`POLICIES`]), and [`GradScaler`], dynamic loss scaling that keeps small
//! gradients from flushing to zero in half precision and skips the steps whose gradients
//! overflowed.

mod grad_scaler;

// The autocast state is a per-thread mode beside grad mode (`autograd::autocast`), where
// the ops and the backward pass reach it without importing this module.
pub use crate::autograd::autocast::{
    autocast, autocast_dtype, autocast_enabled, policy, AutocastGuard, CastPolicy, GPU_POLICIES, POLICIES,
};
pub use grad_scaler::{GradScaler, GradScalerConfig, GradScalerState, StepOutcome};
