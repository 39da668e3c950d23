//! Gradient clipping.

use crate::autograd::no_grad;
use crate::module::Parameter;

/// Scales the gradients of `params` in place so that their global L2 norm is at most
/// `max_norm`; returns the norm before clipping (`torch.nn.utils.clip_grad_norm_`: the
/// scale is `min(1, max_norm / (norm + 1e-6))`).
///
/// ```
/// use nn_core::{optim::clip_grad_norm_, Parameter, Tensor};
/// let p = Parameter::new(Tensor::zeros(&[2]));
/// p.set_grad(Some(Tensor::from_vec(vec![3.0, 4.0], &[2])));
/// let norm = clip_grad_norm_(&[p.clone()], 1.0);
/// assert!((norm - 5.0).abs() < 1e-6);
/// let g = p.grad().unwrap().to_vec();
/// assert!((g[0] - 0.6).abs() < 1e-5 && (g[1] - 0.8).abs() < 1e-5);
/// ```
///
/// A non-finite norm is PyTorch's case too: an infinite one scales the gradients by 0 (the
/// infinite entries become NaN), a NaN one makes them all NaN (the step that follows shows
/// it; check the returned norm to skip it).
///
/// # Panics
/// When `max_norm` is NaN or negative (clipping did nothing, or flipped every gradient's
/// sign).
#[track_caller]
pub fn clip_grad_norm_(params: &[Parameter], max_norm: f64) -> f64 {
    check_max_norm(max_norm);
    let grads: Vec<_> = params.iter().filter_map(|p| p.grad().map(|g| (p, g))).collect();
    // Squares summed on each gradient's device (in f64 on the CPU); on a GPU every
    // gradient's sum is added there, and the host reads one number per device (one wait).
    let mut total_sq = 0.0;
    let mut on_devices: Vec<((crate::Device, crate::DType), crate::Tensor)> = Vec::new();
    for (_, g) in &grads {
        match g.device() {
            crate::Device::Cpu => total_sq += g.to_vec_f64().iter().map(|v| v * v).sum::<f64>(),
            d => no_grad(|| {
                let wide = if g.dtype() == crate::DType::F64 { crate::DType::F64 } else { crate::DType::F32 };
                let s = g.to_dtype(wide).square().sum();
                let d = (d, wide);
                match on_devices.iter_mut().find(|(e, _)| *e == d) {
                    Some((_, acc)) => *acc = &*acc + &s,
                    None => on_devices.push((d, s)),
                }
            }),
        }
    }
    total_sq += on_devices.iter().map(|(_, s)| s.item()).sum::<f64>();
    let total = total_sq.sqrt();
    if let Some(coef) = clip_coefficient(total, max_norm) {
        no_grad(|| {
            for (p, g) in grads {
                p.set_grad(Some(&g * coef));
            }
        });
    }
    total
}

/// The factor [`clip_grad_norm_`] scales the gradients by, given their total L2 `norm`:
/// `None` when they are left as they are (`max_norm / (norm + 1e-6)` is at least 1), else
/// `Some(max_norm / (norm + 1e-6))`. For clipping written elsewhere (gradients sharded
/// over ranks) that must agree with PyTorch's, NaN included.
///
/// A NaN `norm` (a NaN gradient) gives `Some(NaN)`: every gradient becomes NaN, as PyTorch's
/// `clamp` of a NaN coefficient makes them, so the step that follows shows it. (A `min(1.0)`
/// returns 1 for NaN, and the healthy gradients would step unclipped.) An infinite `norm`
/// gives `Some(0.0)`.
///
/// ```
/// use nn_core::optim::clip_coefficient;
/// assert_eq!(clip_coefficient(0.5, 1.0), None);
/// assert!((clip_coefficient(5.0, 1.0).unwrap() - 0.2).abs() < 1e-6);
/// assert!(clip_coefficient(f64::NAN, 1.0).unwrap().is_nan());
/// assert_eq!(clip_coefficient(f64::INFINITY, 1.0), Some(0.0));
/// ```
///
/// # Panics
/// When `max_norm` is NaN or negative, as [`clip_grad_norm_`].
#[track_caller]
pub fn clip_coefficient(norm: f64, max_norm: f64) -> Option<f64> {
    check_max_norm(max_norm);
    let coef = max_norm / (norm + 1e-6);
    (coef.is_nan() || coef < 1.0).then_some(coef)
}

/// Refuses a `max_norm` that would make clipping do nothing (NaN) or flip every gradient's
/// sign (negative).
#[track_caller]
fn check_max_norm(max_norm: f64) {
    if max_norm.is_nan() || max_norm < 0.0 {
        panic!("clip_grad_norm_: max_norm must be non-negative, got {max_norm}");
    }
}
