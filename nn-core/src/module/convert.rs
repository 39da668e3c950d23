//! Moving and converting a whole module ([`Module::to_device`](super::Module::to_device),
//! [`to_dtype`](super::Module::to_dtype), [`to_empty`](super::Module::to_empty)): every
//! check runs before any tensor changes, then each parameter and buffer (and its gradient)
//! is replaced in place, so handles held elsewhere see the move.

use super::{for_each_tensor, refuse_uninitialized, walk, Conversion, Item, Module};
use crate::autograd::no_grad;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The body of [`Module::try_to_device`](super::Module::try_to_device).
pub(super) fn try_to_device(m: &mut dyn Module, device: Device) -> Result<()> {
    check_move(&*m, device)?;
    // A meta tensor has no values: moved to a real device it would be zeros, a model
    // that never loaded its weights (PyTorch: "Cannot copy out of meta tensor").
    if device != Device::Meta {
        let mut on_meta = None;
        walk(&*m, &mut String::new(), &mut |path, item| {
            let t = match item {
                Item::Param(p) => p.tensor(),
                Item::Buffer { tensor, .. } => tensor,
                Item::Module(_) => return,
            };
            if on_meta.is_none() && t.device() == Device::Meta {
                on_meta = Some(path.to_string());
            }
        });
        if let Some(path) = on_meta {
            return Err(Error::ConversionRefused {
                conversion: format!("to_device({device})"),
                reason: format!(
                    "`{path}` is on the meta device and has no values to move (a model built on meta that \
                     did not load them); load a state dict with every key first, or use `to_empty` to make \
                     zero-filled storage to initialise yourself (a non-persistent buffer, which no state \
                     dict holds, needs `to_empty` or its module built on the device)"
                ),
            });
        }
    }
    for_each_tensor(&*m, &mut |t| {
        if t.device() != device {
            no_grad(|| t.set_data(&t.to_device(device)));
            // The gradient moves too, as with PyTorch's `Module.to` (left behind, it
            // could not be accumulated into, nor set again in another dtype).
            if let Some(g) = t.grad_unchecked() {
                t.set_grad(Some(g.to_device(device)));
            }
        }
    });
    Ok(())
}

/// The body of [`Module::to_dtype`](super::Module::to_dtype).
#[track_caller]
pub(super) fn to_dtype(m: &mut dyn Module, dtype: DType) {
    assert!(dtype.is_float(), "to_dtype: modules can only be converted to floating-point dtypes, got {dtype}");
    if m.first_uninitialized().is_some() {
        refuse_uninitialized(
            &*m,
            &format!("to_dtype({dtype})"),
            &format!("so they would be made in f32 when it runs, not in {dtype}"),
        );
    }
    for (path, m) in m.named_modules() {
        if let Err(e) = m.check_conversion(Conversion::DType(dtype)) {
            let at = if path.is_empty() { String::new() } else { format!(" at `{path}`") };
            panic!("{e} ({}{at})", m.type_name());
        }
    }
    for_each_tensor(&*m, &mut |t| {
        if t.dtype().is_float() && t.dtype() != dtype {
            no_grad(|| t.set_data(&t.to_dtype(dtype)));
            if let Some(g) = t.grad_unchecked() {
                t.set_grad(Some(g.to_dtype(dtype)));
            }
        }
    });
}

/// The body of [`Module::to_empty`](super::Module::to_empty).
pub(super) fn to_empty(m: &mut dyn Module, device: Device) -> Result<()> {
    check_move(&*m, device)?;
    for_each_tensor(&*m, &mut |t| {
        no_grad(|| t.set_data(&Tensor::full_on(t.shape(), 0.0, t.dtype(), device)));
        t.set_grad(None);
    });
    Ok(())
}

/// What moving `m` to `device` checks before anything moves (both
/// [`Module::try_to_device`] and [`Module::to_empty`]): the device exists, no lazy
/// sub-module is unrun (its parameters would be made on the CPU later, after the rest
/// moved; PyTorch records the move for them), and no sub-module refuses.
fn check_move(m: &dyn Module, device: Device) -> Result<()> {
    device.check()?;
    if let Some((_, lazy)) = m.first_uninitialized() {
        return Err(Error::Uninitialized { module: lazy.type_name() });
    }
    for (_, sub) in m.named_modules() {
        sub.check_conversion(Conversion::Device(device))?;
    }
    Ok(())
}
