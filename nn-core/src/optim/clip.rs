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
pub fn clip_grad_norm_(params: &[Parameter], max_norm: f64) -> f64 {
    let grads: Vec<_> = params.iter().filter_map(|p| p.grad().map(|g| (p, g))).collect();
    // Squares summed on each gradient's device (in f64 on the CPU); from a GPU the host
    // reads one number per gradient.
    let sum_sq = |g: &crate::Tensor| match g.device() {
        crate::Device::Cpu => g.to_vec_f64().iter().map(|v| v * v).sum::<f64>(),
        _ => no_grad(|| g.square().sum().item()),
    };
    let total: f64 = grads.iter().map(|(_, g)| sum_sq(g)).sum::<f64>().sqrt();
    let coef = (max_norm / (total + 1e-6)).min(1.0);
    if coef < 1.0 {
        no_grad(|| {
            for (p, g) in grads {
                p.set_grad(Some(&g * coef));
            }
        });
    }
    total
}
