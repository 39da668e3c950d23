//! `ShardedGradScaler`: loss scaling whose skip decision every rank shares.

use std::collections::HashSet;

use nn_core::amp::{GradScaler, GradScalerState, StepOutcome};
use nn_core::optim::Optimizer;
use nn_core::{Tensor, TensorId};

use crate::group::ProcessGroup;
use crate::reduce_op::ReduceOp;

/// A [`GradScaler`] for optimizers whose gradients are split over the ranks (PyTorch's
/// `ShardedGradScaler`): a [`FullyShardedDataParallel`](crate::FullyShardedDataParallel)'s
/// shards, or a [`ZeroRedundancyOptimizer`](crate::ZeroRedundancyOptimizer) over sharded
/// gradients.
///
/// With a plain `GradScaler`, each rank looks only at its own part of the gradients: an
/// overflow in one rank's shard makes that rank skip its step and back off its scale while
/// the others step and keep theirs, and the ranks drift apart without an error. Here the
/// finding is all-reduced (a logical or over the ranks) before the step, so every rank
/// skips the same steps and holds the same scale. A collective: every rank calls
/// [`unscale_`](ShardedGradScaler::unscale_) and [`step`](ShardedGradScaler::step) for the
/// same optimizers in the same order.
///
/// ```
/// use nn_core::amp::GradScaler;
/// use nn_core::optim::{Sgd, SgdConfig};
/// use nn_core::{Parameter, Tensor};
/// use nn_distributed::{ProcessGroup, ShardedGradScaler};
///
/// let group = ProcessGroup::init()?;
/// let w = Parameter::new(Tensor::ones(&[2]));
/// let mut opt = Sgd::new(vec![w.clone()], SgdConfig::default());
/// let mut scaler = ShardedGradScaler::new(GradScaler::new(), &group);
/// w.set_grad(Some(Tensor::from_vec(vec![1.0, f32::INFINITY], &[2])));
/// assert!(!scaler.step(&mut opt).stepped()); // skipped on every rank
/// scaler.update();
/// assert_eq!(scaler.get_scale(), 32768.0);
/// # Ok::<(), nn_distributed::DistError>(())
/// ```
pub struct ShardedGradScaler {
    scaler: GradScaler,
    group: ProcessGroup,
    /// Parameters of the optimizers whose finding was combined since the last `update`.
    combined: HashSet<TensorId>,
}

impl std::fmt::Debug for ShardedGradScaler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedGradScaler")
            .field("scaler", &self.scaler)
            .field("rank", &self.group.rank())
            .field("world_size", &self.group.world_size())
            .finish()
    }
}

impl ShardedGradScaler {
    /// Shares `scaler`'s decisions over `group`'s ranks.
    pub fn new(scaler: GradScaler, group: &ProcessGroup) -> Self {
        ShardedGradScaler { scaler, group: group.clone(), combined: HashSet::new() }
    }

    /// The scaler inside (its scale and settings are the same on every rank).
    pub fn inner(&self) -> &GradScaler {
        &self.scaler
    }

    /// The current scale ([`GradScaler::get_scale`]).
    pub fn get_scale(&self) -> f64 {
        self.scaler.get_scale()
    }

    /// Multiplies the loss by the scale ([`GradScaler::scale`]).
    pub fn scale(&self, loss: &Tensor) -> Tensor {
        self.scaler.scale(loss)
    }

    /// Unscales `optimizer`'s gradients and combines, over the ranks, whether any held inf
    /// or NaN ([`GradScaler::unscale_and_combine`]); returns the combined finding. A
    /// collective.
    ///
    /// # Panics
    /// As [`GradScaler::unscale_`].
    #[track_caller]
    pub fn unscale_(&mut self, optimizer: &mut dyn Optimizer) -> bool {
        let group = &self.group;
        let found = self.scaler.unscale_and_combine(optimizer, &mut |local| {
            let flag = Tensor::from_vec(vec![if local { 1.0 } else { 0.0 }], &[1]);
            group.all_reduce(&flag, ReduceOp::Max).to_vec()[0] > 0.0
        });
        self.combined.extend(optimizer.parameters().iter().map(|p| p.id()));
        found
    }

    /// Unscales and combines (unless [`unscale_`](ShardedGradScaler::unscale_) did in
    /// this iteration), then steps `optimizer` unless some rank found inf or NaN
    /// ([`GradScaler::step`]). A collective.
    ///
    /// # Panics
    /// As [`GradScaler::step`].
    #[track_caller]
    pub fn step(&mut self, optimizer: &mut dyn Optimizer) -> StepOutcome {
        let params = optimizer.parameters();
        if self.scaler.is_enabled() && !params.iter().all(|p| self.combined.contains(&p.id())) {
            self.unscale_(optimizer);
        }
        self.scaler.step(optimizer)
    }

    /// Adapts the scale ([`GradScaler::update`]): the same on every rank, since each saw
    /// the same combined findings.
    ///
    /// # Panics
    /// As [`GradScaler::update`].
    #[track_caller]
    pub fn update(&mut self) {
        self.scaler.update();
        self.combined.clear();
    }

    /// The state to save ([`GradScaler::state_dict`]), the same on every rank.
    pub fn state_dict(&self) -> GradScalerState {
        self.scaler.state_dict()
    }

    /// Restores a saved state ([`GradScaler::load_state_dict`]).
    ///
    /// # Errors
    /// As [`GradScaler::load_state_dict`]; nothing changed then.
    pub fn load_state_dict(&mut self, state: &GradScalerState) -> nn_core::Result<()> {
        self.scaler.load_state_dict(state)?;
        self.combined.clear();
        Ok(())
    }
}
