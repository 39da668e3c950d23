//! One parameter's step: the checks an optimizer makes before it takes a parameter's state,
//! and [`update_param`], which hands the parameter, its gradient and its state to the
//! backend's update ([`Storage::update`](crate::backend::Storage::update)) with the
//! optimizer's rule.

use crate::backend::update::{UpdateRule, UpdateState};
use crate::module::Parameter;

/// The dtype and device panics of [`update_param`], checked before an optimizer takes a
/// parameter's buffers out of its state: a panic there, caught, would drop them (Adam
/// would keep the step count and restart the moments from zero, a far larger step).
#[track_caller]
pub(crate) fn check_steppable(p: &Parameter) {
    if !p.requires_grad() {
        return;
    }
    let Some(g) = p.grad() else { return };
    if !matches!(p.dtype(), crate::DType::F32 | crate::DType::F64) {
        panic!("optimizer: parameters must be f32 or f64, got {}", p.dtype());
    }
    if g.dtype() != p.dtype() {
        panic!("optimizer: parameter is {} but its gradient is {}", p.dtype(), g.dtype());
    }
    if p.device() == crate::Device::Meta || g.device() == crate::Device::Meta {
        panic!("optimizer: gradient of a meta parameter has no values");
    }
}

/// `rule`'s step of one parameter, in place, if it requires grad and has a gradient.
/// Its `n_bufs` state buffers are created (zeros) on first use; when the parameter has
/// since been moved or cast (`to_device`, `to_dtype` on its module), they are moved and
/// cast with it, values kept ([`UpdateState::conform`]).
pub(crate) fn update_param<R: UpdateRule>(p: &Parameter, state: &mut Option<UpdateState>, n_bufs: usize, rule: &R) {
    if !p.requires_grad() {
        return;
    }
    let Some(g) = p.grad() else { return };
    check_steppable(p);
    let g = g.contiguous();
    if !p.is_contiguous() {
        // Rare (a strided leaf): update a contiguous copy and write it back.
        let tmp = p.detached_for_keeping().contiguous();
        let q = Parameter::with_requires_grad(tmp.clone(), true);
        q.set_grad(Some(g));
        update_param(&q, state, n_bufs, rule);
        crate::no_grad(|| p.copy_(&tmp));
        return;
    }
    let (n, dtype, device) = (p.numel(), p.dtype(), p.device());
    let fresh = state.is_none();
    let mut st = match state.take() {
        Some(s) => s.conform(n, dtype, device),
        None => UpdateState::zeros(n_bufs, n, dtype, device),
    };
    // The backend reads the gradient's buffer from its start: a contiguous view into a
    // larger buffer (a gradient set to a slice of another tensor) is copied first, so it is
    // never read shifted.
    let g = if g.layout().offset() == 0 && g.storage_arc().len() == n { g } else { g.copy() };
    let gs = g.storage_arc();
    p.modify_storage("optimizer step", |ps, layout| {
        let start = layout.offset();
        ps.update(start..start + n, &gs, &mut st, fresh, rule)
    });
    *state = Some(st);
}
