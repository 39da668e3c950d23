//! Mixed-precision training (PyTorch's `torch.amp`): [`autocast`], which runs matrix
//! products, convolutions and attention in a half dtype and the losses in `f32` (one
//! table of ops, [`POLICIES`]), and [`GradScaler`], dynamic loss scaling that keeps small
//! gradients from flushing to zero in half precision and skips the steps whose gradients
//! overflowed.

mod autocast;
mod grad_scaler;

pub use autocast::{autocast, autocast_dtype, autocast_enabled, AutocastGuard, CastPolicy, POLICIES};
pub(crate) use autocast::{cast2, cast3, cast_call, cast_many, promote_call, Excluded};
pub use grad_scaler::{GradScaler, GradScalerConfig, GradScalerState, StepOutcome};
