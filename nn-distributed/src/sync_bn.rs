//! `SyncBatchNorm`: batch norm whose training statistics cover every rank's batch.

use std::sync::Arc;

use nn_core::autograd::custom_op;
use nn_core::{Module, Tensor};
use nn_layers::{BatchNorm1d, BatchNorm2d, BatchStatsSync};

use crate::group::ProcessGroup;
use crate::reduce_op::ReduceOp;

/// Synchronised batch norm (PyTorch's `nn.SyncBatchNorm`): in training mode, nn-layers'
/// [`BatchNorm1d`] and [`BatchNorm2d`] normalise with the mean and variance of the batches
/// of all ranks together, as one process would on the whole batch, instead of each rank's
/// share; evaluation mode is unchanged.
///
/// `SyncBatchNorm` is the communication that nn-layers' [`BatchStatsSync`] plugs into a
/// batch-norm layer: a differentiable all-reduce over the group (its backward all-reduces
/// the incoming gradients). Layers keep their type, parameters, buffers and `state_dict`
/// keys, so a checkpoint moves freely between synchronised and ordinary runs.
/// [`convert_sync_batchnorm`](SyncBatchNorm::convert_sync_batchnorm) converts every
/// batch-norm layer of a model, wherever it sits.
///
/// Each forward in training mode costs two all-reduces, each backward two more, issued on
/// the thread that runs the layer; every rank must run the same layers in the same order.
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_distributed::{ProcessGroup, SyncBatchNorm};
/// use nn_layers::{BatchNorm2d, Conv2d, ReLU, Sequential};
///
/// let group = ProcessGroup::init()?;
/// let mut model = Sequential::new().add(Conv2d::new(1, 4, 3)).add(BatchNorm2d::new(4)).add(ReLU::new());
/// assert_eq!(SyncBatchNorm::convert_sync_batchnorm(&mut model, &group), 1);
/// assert!(model.get::<BatchNorm2d>(1).unwrap().is_synced());
/// let y = model.forward(&Tensor::randn(&[2, 1, 5, 5])); // statistics over every rank's batch
/// assert_eq!(y.shape(), &[2, 4, 3, 3]);
/// # Ok::<(), nn_distributed::DistError>(())
/// ```
#[derive(Clone, Debug)]
pub struct SyncBatchNorm {
    group: ProcessGroup,
}

impl SyncBatchNorm {
    /// The synchronisation over `group`, to give to a layer's `set_stats_sync`.
    pub fn new(group: &ProcessGroup) -> Arc<SyncBatchNorm> {
        Arc::new(SyncBatchNorm { group: group.clone() })
    }

    /// Makes every [`BatchNorm1d`] and [`BatchNorm2d`] of `model` (the model itself
    /// included) synchronise over `group`, and returns how many there were (PyTorch's
    /// `SyncBatchNorm.convert_sync_batchnorm`). Call it on every rank, before or after
    /// wrapping the model in [`DistributedDataParallel`](crate::DistributedDataParallel).
    pub fn convert_sync_batchnorm<M: Module + ?Sized>(model: &mut M, group: &ProcessGroup) -> usize {
        let sync: Arc<dyn BatchStatsSync> = SyncBatchNorm::new(group);
        let mut converted = 0;
        model.apply(&mut |m| {
            if let Some(bn) = m.as_any_mut().downcast_mut::<BatchNorm2d>() {
                bn.set_stats_sync(Some(sync.clone()));
                converted += 1;
            } else if let Some(bn) = m.as_any_mut().downcast_mut::<BatchNorm1d>() {
                bn.set_stats_sync(Some(sync.clone()));
                converted += 1;
            }
        });
        converted
    }
}

impl BatchStatsSync for SyncBatchNorm {
    fn all_reduce_sum(&self, t: &Tensor) -> Tensor {
        let sum = self.group.all_reduce(t, ReduceOp::Sum);
        let group = self.group.clone();
        custom_op("sync_batch_norm_all_reduce", &[t], &sum, move |g| vec![Some(group.all_reduce(g, ReduceOp::Sum))])
    }
}
