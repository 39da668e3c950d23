//! Mixed-precision training (PyTorch's `torch.amp`): [`GradScaler`], dynamic loss scaling
//! that keeps small gradients from flushing to zero in half precision and skips the steps
//! whose gradients overflowed.

mod grad_scaler;

pub use grad_scaler::{GradScaler, GradScalerConfig, GradScalerState, StepOutcome};
