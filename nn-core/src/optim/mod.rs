//! Optimizers (SGD, Adam, AdamW) with parameter groups, gradient clipping and learning-rate
//! schedulers, with PyTorch's update rules step for step.
//!
//! Optimizers hold [`Parameter`] handles — the same tensors the model reads — and update
//! them in place. Frozen parameters (`requires_grad == false`) and parameters without a
//! gradient are skipped. State is keyed by parameter *path* (`"encoder.fc.weight"`) when the
//! optimizer is built from `named_parameters()`, so a checkpoint survives reordering.
//!
//! Loss scaling for mixed precision, which wraps an optimizer's step, is
//! [`amp::GradScaler`](crate::amp::GradScaler).

mod adam;
mod clip;
mod groups;
mod scheduler;
mod sgd;
mod state;
mod update;

pub use adam::{Adam, AdamConfig, AdamW, AdamWConfig};
pub use clip::{clip_coefficient, clip_grad_norm_};
pub use scheduler::{CosineAnnealingLR, LinearLR, LrScheduler, SchedulerState, StepLR};
pub use sgd::{Sgd, SgdConfig};

pub(crate) use groups::{build_groups, Group};
pub use groups::{check_param_groups, IntoParamGroups, ParamGroup};
pub(crate) use state::{
    bufs_from_tensors, bufs_to_tensors, check_state_paths, hyper_entry, read_hyper, step_from_tensor,
};
pub use state::{HyperParams, OptimizerState};
pub(crate) use update::{check_steppable, update_param};

use crate::error::Result;
use crate::module::Parameter;

/// The largest epoch, step or scheduler count a checkpoint (or an optimizer state) may
/// hold: 2^53, up to which every whole number is exact in an `f64` (where PyTorch keeps
/// its counts). No training run gets near it; a larger count is a corrupt file, and
/// refusing it keeps every `+ 1` on a loaded counter from overflowing.
pub const MAX_COUNTER: u64 = 1 << 53;
/// `x >= 0` and finite: PyTorch's hyper-parameter checks (`0.0 <= x`), which also refuse
/// NaN; infinity too here (an infinite `eps` made Adam a silent no-op, an infinite rate
/// NaN weights), as `load_state_dict` refuses it.
pub(crate) fn non_negative(x: f64) -> bool {
    x >= 0.0 && x.is_finite()
}

/// An optimizer: `step` updates the parameters from their gradients.
pub trait Optimizer {
    /// One update of every parameter that has a gradient and requires grad.
    fn step(&mut self);

    /// Clears the gradients of every parameter.
    fn zero_grad(&self);

    /// Every parameter this optimizer updates, group by group, under the name its state
    /// is keyed by (`"<path>"` in `"<path>.exp_avg"`). What [`GradScaler`] unscales and
    /// checks for inf/NaN.
    ///
    /// [`GradScaler`]: crate::amp::GradScaler
    ///
    /// ```
    /// use nn_core::optim::{Optimizer, Sgd, SgdConfig};
    /// use nn_core::{Parameter, Tensor};
    /// let w = Parameter::new(Tensor::ones(&[2]));
    /// let opt = Sgd::new(vec![("fc.weight".to_string(), w.clone())], SgdConfig::default());
    /// let params = opt.named_parameters();
    /// assert_eq!(params.len(), 1);
    /// assert_eq!((params[0].0.as_str(), params[0].1.id()), ("fc.weight", w.id()));
    /// ```
    fn named_parameters(&self) -> Vec<(String, Parameter)>;

    /// [`named_parameters`](Optimizer::named_parameters) without the names (for
    /// [`clip_grad_norm_`]).
    fn parameters(&self) -> Vec<Parameter> {
        self.named_parameters().into_iter().map(|(_, p)| p).collect()
    }

    /// Number of parameter groups.
    fn num_groups(&self) -> usize;

    /// The learning rate of group `i`.
    fn group_lr(&self, i: usize) -> f64;

    /// Sets the learning rate of group `i` (what schedulers do).
    fn set_group_lr(&mut self, i: usize, lr: f64);

    /// The learning rate group `i` had when the first scheduler was attached to it
    /// (PyTorch's `group["initial_lr"]`): every later scheduler starts from it, so a
    /// warm-up and a decay built one after the other share one base. `None` until a
    /// scheduler is attached; saved and restored with the state.
    fn group_initial_lr(&self, i: usize) -> Option<f64>;

    /// Sets [`group_initial_lr`](Optimizer::group_initial_lr) (what a scheduler does when
    /// it is attached to a group that has none).
    fn set_group_initial_lr(&mut self, i: usize, lr: f64);

    /// The optimizer's state: per-parameter buffers keyed `"<path>.<buffer>"`, and the
    /// hyper-parameters that schedulers change.
    fn state_dict(&self) -> OptimizerState;

    /// Restores a state saved by [`state_dict`](Optimizer::state_dict), matching
    /// parameters by path.
    ///
    /// The optimizer continues with the state's hyper-parameters
    /// ([`OptimizerState::hyper_params`]: momentum, betas, weight decay, ...), as
    /// PyTorch's `load_state_dict` restores its `param_groups`: buffers saved under a
    /// momentum of 0.9 are never read as if the momentum were another. To change one on
    /// purpose, edit the state before loading it.
    ///
    /// Every entry is checked before anything is kept: the group count, finite and
    /// non-negative learning rates, hyper-parameters of this kind of optimizer that it
    /// accepts when built (an Adam state is refused by an AdamW), buffers on the CPU with a
    /// floating dtype, the parameter's shape and finite values (non-negative for second
    /// moments), and step counts that are whole numbers in `0..=`[`MAX_COUNTER`].
    /// A state holding NaN or infinite buffers (a diverged run) is refused.
    ///
    /// # Errors
    /// [`Error::OptimizerState`](crate::Error::OptimizerState) naming the offending key when the state names parameters
    /// this optimizer does not hold or fails one of the checks above; the optimizer is
    /// unchanged then.
    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;
    use crate::DType;

    /// A gradient set to a contiguous view into a larger buffer (an offset slice) steps
    /// the parameter by that slice's values, not by the buffer's first elements.
    #[test]
    fn a_gradient_viewing_part_of_a_buffer_steps_by_its_own_values() {
        let p = Parameter::new(Tensor::zeros(&[2]));
        let whole = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[4]);
        p.set_grad(Some(whole.narrow(0, 2, 2)));
        let mut opt = Sgd::new(vec![p.clone()], SgdConfig { lr: 1.0, ..Default::default() });
        opt.step();
        assert_eq!(p.to_vec(), [-3.0, -4.0]);
    }

    /// A parameter large enough that its update runs in parts on the team gets, element
    /// for element, the bits a small parameter holding the same values gets in one call
    /// (SGD with momentum, Nesterov and weight decay; Adam with AMSGrad; AdamW), f32 and
    /// f64, over a few steps with changing gradients.
    #[test]
    fn updates_in_parts_match_one_call_bit_for_bit() {
        let n = 3 * crate::backend::cpu::parts::PAR_THRESHOLD + 17;
        type Make = fn(Vec<Parameter>) -> Box<dyn Optimizer>;
        let makers: [Make; 3] = [
            |p| {
                let c = SgdConfig { lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.01, ..Default::default() };
                Box::new(Sgd::new(p, c))
            },
            |p| Box::new(Adam::new(p, AdamConfig { amsgrad: true, weight_decay: 0.1, ..Default::default() })),
            |p| Box::new(AdamW::new(p, AdamWConfig::default())),
        ];
        for dtype in [DType::F32, DType::F64] {
            for make in makers {
                let values: Vec<f64> = (0..n).map(|i| ((i * 37) % 101) as f64 / 50.0 - 1.0).collect();
                let big = Parameter::new(Tensor::from_vec_f64(values.clone(), &[n]).to_dtype(dtype));
                // The first and the last 40 elements, each in a small parameter.
                let ends = [0..40, n - 40..n];
                let small: Vec<Parameter> = ends
                    .iter()
                    .map(|r| Parameter::new(Tensor::from_vec_f64(values[r.clone()].to_vec(), &[40]).to_dtype(dtype)))
                    .collect();
                let (mut ob, mut os) = (make(vec![big.clone()]), make(small.clone()));
                for step in 0..3 {
                    let grad: Vec<f64> = (0..n).map(|i| ((i * 13 + step * 7) % 29) as f64 / 10.0 - 1.4).collect();
                    big.set_grad(Some(Tensor::from_vec_f64(grad.clone(), &[n]).to_dtype(dtype)));
                    for (p, r) in small.iter().zip(&ends) {
                        p.set_grad(Some(Tensor::from_vec_f64(grad[r.clone()].to_vec(), &[40]).to_dtype(dtype)));
                    }
                    ob.step();
                    os.step();
                }
                let all = big.to_vec_f64();
                for (p, r) in small.iter().zip(&ends) {
                    assert_eq!(all[r.clone()], p.to_vec_f64()[..], "{dtype:?}");
                }
            }
        }
    }
}
