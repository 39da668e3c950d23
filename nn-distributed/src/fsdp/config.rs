//! The options of a `FullyShardedDataParallel` and the counts of what it has communicated:
//! plain data, depending on nothing in the crate, so that the wrapper (`mod.rs`), its
//! construction (`wrap.rs`) and its runtime (`runtime.rs`) all use them.

use std::time::Duration;

/// Options of [`FullyShardedDataParallel`](crate::FullyShardedDataParallel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsdpConfig {
    /// Start the all-gather of the next unit when a unit's forward starts (PyTorch's
    /// `forward_prefetch`; default `true`). Off, each unit gathers when it is reached.
    pub forward_prefetch: bool,
    /// Free each unit's gathered parameters when its forward returns, and gather them
    /// again when backward reaches the unit's output (PyTorch's `reshard_after_forward`,
    /// its `FULL_SHARD`; default `true`). The values autograd saved from the parameters
    /// are freed with them: the parameters share their storage with their views
    /// ([`Tensor::share_storage_with_views`](nn_core::Tensor::share_storage_with_views)).
    /// Off (PyTorch's `SHARD_GRAD_OP`), what autograd saved keeps each unit's full
    /// parameters alive from its forward until its backward has used them: no gather in
    /// backward, more memory.
    ///
    /// The gather before a unit's backward is triggered by the gradient of the unit's
    /// output (for a tuple, its first element). A unit whose other outputs carry gradients
    /// into its own ops before the first one's arrives would reach freed parameters; its
    /// backward then panics on a meta tensor. Turn this off for such models.
    pub reshard_after_forward: bool,
    /// With [`reshard_after_forward`](FsdpConfig::reshard_after_forward), start the
    /// all-gather of the unit whose backward comes next when a unit's backward starts
    /// (PyTorch's `BackwardPrefetch.BACKWARD_PRE`; default `true`).
    pub backward_prefetch: bool,
    /// The timeout of the wrapper's collectives; `None` (the default) keeps the group's.
    pub timeout: Option<Duration>,
}

impl Default for FsdpConfig {
    fn default() -> Self {
        FsdpConfig { forward_prefetch: true, reshard_after_forward: true, backward_prefetch: true, timeout: None }
    }
}

/// What a [`FullyShardedDataParallel`](crate::FullyShardedDataParallel) has communicated so
/// far (cumulative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsdpStats {
    /// Units gathered for a forward.
    pub gathers: usize,
    /// Of those, the ones whose all-gather had been started before the unit was reached
    /// (prefetched: it overlapped the previous unit's computation).
    pub prefetched: usize,
    /// Units gathered again for their backward
    /// ([`FsdpConfig::reshard_after_forward`]).
    pub backward_gathers: usize,
    /// Of those, the ones whose all-gather had been started before the unit's backward was
    /// reached ([`FsdpConfig::backward_prefetch`]).
    pub backward_prefetched: usize,
    /// Units whose gradients were reduce-scattered.
    pub reduce_scatters: usize,
    /// Of those, the ones whose reduce-scatter started while backward was still producing
    /// other units' gradients (it overlapped computation).
    pub overlapped_reduce_scatters: usize,
}
