//! The crate's error type.

use std::time::Duration;

/// Errors of process-group set-up, of wrapping a model for data-parallel training, and of
/// collectives that failed.
///
/// A collective that times out or that the ranks do not agree on ([`DistError::Timeout`],
/// [`DistError::Mismatch`]) is not returned to the caller: the rank that detects it prints
/// the error on stderr and ends the whole job with `MPI_Abort` (exit codes
/// [`TIMEOUT_EXIT_CODE`](crate::TIMEOUT_EXIT_CODE) and
/// [`MISMATCH_EXIT_CODE`](crate::MISMATCH_EXIT_CODE)), because the other ranks cannot go on
/// either. Other failures inside a collective (a network error) end the job through MPI's
/// default error handler, as a panic on any rank does (see
/// [`ProcessGroup::init`](crate::ProcessGroup::init)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DistError {
    /// MPI was initialised before, in this process: by an earlier `ProcessGroup::init`
    /// (a process has one group, for its whole life; clone it to share it) or by other code.
    #[error(
        "ProcessGroup::init: MPI is already initialised in this process (a process has one group for its whole \
         life: clone the `ProcessGroup` to share it)"
    )]
    AlreadyInitialized,
    /// The communication thread could not be started.
    #[error("ProcessGroup::init: cannot start the communication thread: {0}")]
    Thread(#[source] std::io::Error),
    /// The ranks hold models of different structure.
    #[error("DistributedDataParallel::new: the model differs across ranks: {0}")]
    ModelMismatch(String),
    /// The ranks passed different parameters to a
    /// [`ZeroRedundancyOptimizer`](crate::ZeroRedundancyOptimizer).
    #[error("ZeroRedundancyOptimizer::new: the parameters differ across ranks: {0}")]
    ShardMismatch(String),
    /// A [`ZeroRedundancyOptimizer`](crate::ZeroRedundancyOptimizer)'s parameter groups
    /// hold one parameter twice (or two on one storage), two under one name, or a group's
    /// invalid rate ([`nn_core::optim::check_param_groups`]).
    #[error("ZeroRedundancyOptimizer::new: {0}")]
    ParamGroups(#[source] nn_core::Error),
    /// A [`FullyShardedDataParallel`](crate::FullyShardedDataParallel) call refused its
    /// input (the model, a state dict, a sharded checkpoint); every rank gets the same error.
    #[error("{at}: {message}")]
    Fsdp {
        /// The call that failed.
        at: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A configuration value is out of range.
    #[error("DistributedDataParallel::new: invalid configuration: {0}")]
    InvalidConfig(String),
    /// A collective timeout of zero, which would fail every collective.
    #[error(
        "{at}: the timeout is 0 s, which would fail every collective; give a positive duration (`ProcessGroup::init` \
         uses PyTorch's default of 30 minutes)"
    )]
    ZeroTimeout {
        /// The call that was given it.
        at: &'static str,
    },
    /// A collective did not complete within its timeout on the rank that reports it.
    #[error("{op} #{seq} timed out after {timeout:?} on rank {rank} of {world_size}: {}", describe_missing(missing))]
    Timeout {
        /// The collective (`all_reduce`, `broadcast`, `all_gather`, `reduce_scatter`, `barrier`).
        op: &'static str,
        /// Its sequence number: the group's collectives are numbered from 1, in the order
        /// they are issued, the same on every rank.
        seq: u64,
        /// The rank that waited.
        rank: usize,
        /// The number of ranks.
        world_size: usize,
        /// The timeout that passed.
        timeout: Duration,
        /// The ranks that had not called this collective when the timeout passed, in order;
        /// empty when every rank had, but the collective still did not complete.
        missing: Vec<usize>,
    },
    /// Two ranks called different collectives (or the same one with different sizes,
    /// dtypes, reductions or roots) as their collective number `seq`.
    #[error(
        "rank {other_rank} called {other_called} while rank {rank} called {called}: every rank must call the same \
         collectives, in the same order, on tensors of the same shape and dtype"
    )]
    Mismatch {
        /// The sequence number of the collective (the same on both ranks).
        seq: u64,
        /// The rank that reports the mismatch.
        rank: usize,
        /// What it called, e.g. `all_reduce #4 (sum of 10 f32 values)`.
        called: String,
        /// The first rank that called something else.
        other_rank: usize,
        /// What that rank called, e.g. `broadcast #4 (10 f32 values from rank 0)`.
        other_called: String,
    },
}

/// The ranks that did not arrive, for [`DistError::Timeout`].
fn describe_missing(missing: &[usize]) -> String {
    match missing {
        [] => "every rank arrived, but it did not complete (a rank died or stopped inside it)".into(),
        [r] => format!("rank {r} did not arrive (it is slow, stuck or dead, or called fewer collectives)"),
        _ => {
            let list: Vec<String> = missing.iter().map(usize::to_string).collect();
            format!("ranks {} did not arrive (slow, stuck or dead, or they called fewer collectives)", list.join(", "))
        }
    }
}

/// `Result` with [`DistError`].
pub type Result<T> = std::result::Result<T, DistError>;
