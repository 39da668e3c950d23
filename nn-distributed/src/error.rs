//! The crate's error type.

/// Errors of process-group set-up and of wrapping a model for data-parallel training.
///
/// Failures inside a collective (a peer that died, a network error) are not reported here:
/// MPI's default error handler ends the whole job, as a panic on any rank does (see
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
    /// A configuration value is out of range.
    #[error("DistributedDataParallel::new: invalid configuration: {0}")]
    InvalidConfig(String),
}

/// `Result` with [`DistError`].
pub type Result<T> = std::result::Result<T, DistError>;
