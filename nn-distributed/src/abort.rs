//! A panic on one rank ends the whole job; the exit codes of the jobs this crate ends.
//!
//! Without this, a rank that panics unwinds, drops its process group and waits in
//! `MPI_Finalize` for peers that are themselves waiting in a collective for it: the job
//! hangs until someone kills it. [`ProcessGroup::init`](crate::ProcessGroup::init) installs
//! a panic hook that runs the previous hook (which prints the message and location) and
//! then calls `MPI_Abort`, which makes `mpirun` terminate every rank and exit with an error.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

/// The exit code `mpirun` reports for a job ended by a panic (101, Rust's panic exit code).
pub const PANIC_EXIT_CODE: i32 = 101;

/// The exit code `mpirun` reports for a job ended by a collective that timed out
/// ([`DistError::Timeout`](crate::DistError::Timeout); 124, as GNU `timeout`'s).
pub const TIMEOUT_EXIT_CODE: i32 = 124;

/// The exit code `mpirun` reports for a job ended by ranks that called different collectives
/// ([`DistError::Mismatch`](crate::DistError::Mismatch)).
pub const MISMATCH_EXIT_CODE: i32 = 125;

/// MPI is initialised and not yet finalised: the hook may call `MPI_Abort`.
static LIVE: AtomicBool = AtomicBool::new(false);
static RANK: AtomicUsize = AtomicUsize::new(0);
static SIZE: AtomicUsize = AtomicUsize::new(1);
static INSTALL: Once = Once::new();

/// Records whether MPI is live (called by the communication thread around init and finalize).
pub(crate) fn set_live(rank: usize, size: usize, live: bool) {
    RANK.store(rank, Ordering::Relaxed);
    SIZE.store(size, Ordering::Relaxed);
    LIVE.store(live, Ordering::Release);
}

/// Installs the hook (once per process); it chains to the hook that was in place.
pub(crate) fn install() {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            if LIVE.load(Ordering::Acquire) {
                let (rank, size) = (RANK.load(Ordering::Relaxed), SIZE.load(Ordering::Relaxed));
                let _ = writeln!(
                    std::io::stderr(),
                    "nn-distributed: rank {rank} of {size} panicked; aborting the MPI job (MPI_Abort)"
                );
                let _ = std::io::stderr().flush();
                let _ = std::io::stdout().flush();
                SimpleCommunicator::world().abort(PANIC_EXIT_CODE);
            }
        }));
    });
}
