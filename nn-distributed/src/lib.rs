//! # nn-distributed
//!
//! Data-parallel training for the `nn` framework across processes and machines, on MPI
//! (OpenMPI or any MPI, through the [`mpi`] crate): PyTorch's `torch.distributed` with its
//! `DistributedDataParallel`, on an existing distributed engine rather than a home-made one.
//!
//! - [`ProcessGroup`]: `init()`, `rank()`, `world_size()` and the tensor collectives
//!   `all_reduce` (also asynchronous), `broadcast`, `all_gather`, `barrier` (and, inside the
//!   crate, the reduce-scatter FSDP uses). A program started
//!   without `mpirun` is a one-process world; a panic on any rank ends the whole job. No
//!   collective hangs: one that has not completed within the timeout (30 minutes, or
//!   [`ProcessGroup::init_with`]'s) ends the job with an error naming it, its sequence
//!   number and the ranks that did not arrive; ranks that call different collectives are
//!   reported at once.
//! - [`DistributedDataParallel`]: wraps a model; construction broadcasts rank 0's parameters
//!   and buffers; backward averages gradients in buckets launched as soon as they are
//!   complete, overlapping communication with the rest of backward; `no_sync` for gradient
//!   accumulation; buffers broadcast at each forward; unused parameters are an error naming
//!   them unless `find_unused_parameters` is set. Its `state_dict` keys are the model's own.
//! - [`SyncBatchNorm`]: batch-norm statistics over every rank's batch.
//! - [`ZeroRedundancyOptimizer`]: any nn optimizer with its state sharded over the ranks
//!   (ZeRO stage 1); after each step every rank broadcasts the parameters it updated.
//! - [`FullyShardedDataParallel`]: parameters, gradients and optimizer state sharded over
//!   the ranks (ZeRO stage 3). A [`FsdpPolicy`] picks units (sub-modules of given types, or
//!   above a parameter count); each unit's parameters are stored flat and sharded, gathered
//!   in a forward pre-hook (the next unit's all-gather prefetched meanwhile) and set back to
//!   meta tensors after the unit's forward; gradients are reduce-scattered unit by unit
//!   while backward runs; the optimizer steps the local shards. `full_state_dict` /
//!   `load_full_state_dict` gather and scatter the model's own state dict; sharded
//!   checkpoints save and resume per rank, refusing another world size, rank or model.
//!
//! The data side is `nn_data::DistributedSampler`, which gives each rank its share of every
//! epoch. A training program (run with `mpirun -np 2 ./train`, or alone):
//!
//! ```
//! use nn_core::functional::cross_entropy;
//! use nn_core::optim::{Optimizer, Sgd, SgdConfig};
//! use nn_core::{manual_seed, Forward, Module, Tensor};
//! use nn_data::{DataLoader, DistributedSampler};
//! use nn_distributed::{DistributedDataParallel, ProcessGroup};
//! use nn_layers::{Linear, ReLU, Sequential};
//!
//! let group = ProcessGroup::init()?;
//! manual_seed(0);
//! let (x, y) = (Tensor::randn(&[64, 8]), Tensor::from_vec_i64((0..64).map(|i| i % 2).collect(), &[64]));
//! let sampler = DistributedSampler::new(64, group.world_size(), group.rank()).seed(7);
//! let loader = DataLoader::new(x, y, 16 / group.world_size()).distributed(sampler);
//! let model = Sequential::new().add(Linear::new(8, 16)).add(ReLU::new()).add(Linear::new(16, 2));
//! let ddp = DistributedDataParallel::new(model, &group)?;
//! let mut opt = Sgd::new(ddp.parameters(), SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() });
//! for epoch in 0..3 {
//!     for (xb, yb) in loader.epoch(epoch) {
//!         opt.zero_grad();
//!         cross_entropy(&ddp.forward(&xb), &yb).backward();
//!         opt.step();
//!     }
//! }
//! if group.rank() == 0 {
//!     // Only rank 0 prints and saves: every replica holds the same weights.
//!     assert_eq!(ddp.state_dict().len(), 4);
//! }
//! # Ok::<(), nn_distributed::DistError>(())
//! ```
//!
//! Building this crate needs an MPI installation and libclang (Debian:
//! `apt-get install openmpi-bin libopenmpi-dev libclang-dev pkg-config`); it is a workspace
//! of its own so that the rest of `nn` builds without them. The crate's README (`nn-distributed/README.md`) says how
//! to run it on one machine and on several (`mpirun --hostfile`).

// The modules depend on each other one way only (no import circles), from the bottom up:
// `abort`, `error` and `reduce_op` use none of the others; `watchdog` uses those three;
// `comm` (the communication thread) uses `watchdog`; `group` uses `comm`; `structure`,
// `reducer`, `sync_bn` and `scaler` use `group` (and `comm`); `ddp` uses `reducer` and
// `structure`; `zero` uses `ddp`, `reducer` and `structure`; `fsdp` uses `comm`, `group` and
// `structure` (its own files are layered too: see its module docs).
mod abort;
mod comm;
mod ddp;
mod error;
mod fsdp;
mod group;
mod reduce_op;
mod reducer;
mod scaler;
mod structure;
mod sync_bn;
mod watchdog;
mod zero;

pub use abort::{MISMATCH_EXIT_CODE, PANIC_EXIT_CODE, TIMEOUT_EXIT_CODE};
pub use ddp::{DdpConfig, DistributedDataParallel};
pub use error::{DistError, Result};
pub use fsdp::{FsdpConfig, FsdpPolicy, FsdpStats, FullyShardedDataParallel};
pub use group::{ProcessGroup, Work, DEFAULT_TIMEOUT};
pub use reduce_op::ReduceOp;
pub use reducer::ReductionStats;
pub use scaler::ShardedGradScaler;
pub use sync_bn::SyncBatchNorm;
pub use zero::ZeroRedundancyOptimizer;
