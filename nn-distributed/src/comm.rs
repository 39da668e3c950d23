//! The communication thread: the one thread that calls MPI, fed by a channel.
//!
//! It initialises MPI itself (so it is MPI's "main thread"), then runs the collectives it
//! receives one after the other, in the order they were sent, and finalises MPI when the
//! last [`ProcessGroup`](crate::ProcessGroup) handle is dropped. rsmpi's communicators are
//! not `Send`; keeping them on this thread also keeps every other thread free of MPI calls,
//! so a collective waiting for a slower peer never blocks the thread running backward, and
//! every rank issues its collectives in one well-defined order: the order of the channel.
//! The only MPI call made elsewhere is `MPI_Abort`, from the panic hook
//! ([`abort`](crate::abort)), which is why MPI is asked for `MPI_THREAD_MULTIPLE`.
//!
//! Each collective carries its sequence number and timeout; it runs as a non-blocking MPI
//! collective under the [`watchdog`](crate::watchdog), which ends the job with an error
//! instead of waiting forever for a rank that does not come.
//!
//! **Dependencies.** This module uses `watchdog` (which runs each collective), `reduce_op`,
//! `abort` and `error`; none of them uses this one. `group` and the wrappers use it.

use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::JoinHandle;
use std::time::Duration;

use mpi::collective::SystemOperation;
use mpi::datatype::Equivalence;
use mpi::traits::*;
use mpi::Threading;
use nn_core::storage::{CpuStorage, Storage};
use nn_core::{DType, Device, Tensor};

use crate::error::{DistError, Result};
use crate::reduce_op::ReduceOp;
use crate::watchdog::{Call, Fingerprint, Kind, Watchdog};

/// Values on the wire: what a tensor of each dtype travels as. `f16`/`bf16` travel as
/// `f32` and `bool` as `i64`, converted exactly both ways.
#[derive(Debug)]
pub(crate) enum Buf {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I64(Vec<i64>),
}

impl Buf {
    /// An empty buffer of `t`'s wire type, with room for `cap` values.
    pub(crate) fn for_dtype(dtype: DType, cap: usize) -> Buf {
        match wire_dtype(dtype) {
            DType::F64 => Buf::F64(Vec::with_capacity(cap)),
            DType::I64 => Buf::I64(Vec::with_capacity(cap)),
            _ => Buf::F32(Vec::with_capacity(cap)),
        }
    }

    /// Appends `t`'s values (row-major, converted to the wire type), straight from its
    /// buffer when it is contiguous and of the wire type (gradients, parameters).
    pub(crate) fn extend_from(&mut self, t: &Tensor) {
        let storage = t.storage_arc();
        if let (Storage::Cpu(c), Some(r)) = (&*storage, t.layout().contiguous_range()) {
            match (&mut *self, c) {
                (Buf::F32(v), CpuStorage::F32(s)) => return v.extend_from_slice(&s[r]),
                (Buf::F64(v), CpuStorage::F64(s)) => return v.extend_from_slice(&s[r]),
                (Buf::I64(v), CpuStorage::I64(s)) => return v.extend_from_slice(&s[r]),
                _ => {}
            }
        }
        match self {
            Buf::F32(v) => v.extend(t.to_vec_of::<f32>()),
            Buf::F64(v) => v.extend(t.to_vec_of::<f64>()),
            Buf::I64(v) => v.extend(t.to_vec_of::<i64>()),
        }
    }

    /// Appends `n` zeros.
    pub(crate) fn extend_zeros(&mut self, n: usize) {
        match self {
            Buf::F32(v) => v.resize(v.len() + n, 0.0),
            Buf::F64(v) => v.resize(v.len() + n, 0.0),
            Buf::I64(v) => v.resize(v.len() + n, 0),
        }
    }

    /// The wire dtype.
    fn wire(&self) -> DType {
        match self {
            Buf::F32(_) => DType::F32,
            Buf::F64(_) => DType::F64,
            Buf::I64(_) => DType::I64,
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Buf::F32(v) => v.len(),
            Buf::F64(v) => v.len(),
            Buf::I64(v) => v.len(),
        }
    }

    /// The values `start .. start + numel(shape)` as a tensor of `shape` and `dtype`.
    pub(crate) fn tensor(&self, start: usize, shape: &[usize], dtype: DType) -> Tensor {
        let n: usize = shape.iter().product();
        let t = match self {
            Buf::F32(v) => Tensor::from_vec(v[start..start + n].to_vec(), shape),
            Buf::F64(v) => Tensor::from_vec_f64(v[start..start + n].to_vec(), shape),
            Buf::I64(v) => Tensor::from_vec_i64(v[start..start + n].to_vec(), shape),
        };
        t.to_dtype(dtype)
    }
}

/// The dtype a tensor of `dtype` travels as.
pub(crate) fn wire_dtype(dtype: DType) -> DType {
    match dtype {
        DType::F64 => DType::F64,
        DType::I64 | DType::Bool => DType::I64,
        _ => DType::F32,
    }
}

/// `t` as a wire buffer; panics with `op`'s name on a meta tensor.
pub(crate) fn to_wire(t: &Tensor, op: &str) -> Buf {
    if t.device() == Device::Meta {
        panic!("{op}: the tensor of shape {:?} is on the meta device and has no values to send", t.shape());
    }
    let mut b = Buf::for_dtype(t.dtype(), t.numel());
    b.extend_from(t);
    b
}

/// One collective for the communication thread.
pub(crate) enum Op {
    AllReduce {
        buf: Buf,
        op: ReduceOp,
    },
    Broadcast {
        buf: Buf,
        root: usize,
    },
    AllGather {
        buf: Buf,
    },
    /// The element-wise mean over the ranks of `buf` (of `world_size` equal blocks), of
    /// which each rank receives its own block (`MPI_Ireduce_scatter_block`, then a division
    /// by the world size).
    ReduceScatterAvg {
        buf: Buf,
    },
    Barrier,
}

impl Op {
    /// What the ranks compare before running it as their collective number `seq`.
    fn fingerprint(&self, seq: u64) -> Fingerprint {
        let (kind, buf) = match self {
            Op::AllReduce { buf, op } => (Kind::AllReduce(*op), Some(buf)),
            Op::Broadcast { buf, root } => (Kind::Broadcast { root: *root }, Some(buf)),
            Op::AllGather { buf } => (Kind::AllGather, Some(buf)),
            Op::ReduceScatterAvg { buf } => (Kind::ReduceScatter, Some(buf)),
            Op::Barrier => (Kind::Barrier, None),
        };
        Fingerprint { seq, kind, wire: buf.map(Buf::wire), len: buf.map_or(0, Buf::len) }
    }
}

/// A collective as sent to the communication thread.
pub(crate) struct Job {
    pub(crate) op: Op,
    /// Its sequence number in the group (from 1, in the order of the channel).
    pub(crate) seq: u64,
    pub(crate) timeout: Duration,
    pub(crate) reply: SyncSender<Buf>,
}

/// What the thread reports once MPI is up.
pub(crate) struct Started {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) threading: Threading,
}

/// Starts the communication thread and waits until MPI is initialised on it.
pub(crate) fn spawn() -> Result<(Sender<Job>, JoinHandle<()>, Started)> {
    let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
    let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<Started>>(1);
    let handle = std::thread::Builder::new()
        .name("nn-distributed-comm".into())
        .spawn(move || run(ready_tx, jobs_rx))
        .map_err(DistError::Thread)?;
    match ready_rx.recv() {
        Ok(Ok(started)) => Ok((jobs_tx, handle, started)),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        // The thread panicked while initialising: the panic hook has reported it.
        Err(_) => {
            let _ = handle.join();
            Err(DistError::Thread(std::io::Error::other("the communication thread stopped while initialising MPI")))
        }
    }
}

fn run(ready: SyncSender<Result<Started>>, jobs: Receiver<Job>) {
    let Some((universe, threading)) = mpi::initialize_with_threading(Threading::Multiple) else {
        let _ = ready.send(Err(DistError::AlreadyInitialized));
        return;
    };
    let watchdog = Watchdog::new(universe.world());
    let world = watchdog.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    crate::abort::set_live(rank, size, true);
    if ready.send(Ok(Started { rank, size, threading })).is_ok() {
        while let Ok(job) = jobs.recv() {
            let call = Call::start(job.op.fingerprint(job.seq), job.timeout);
            let out = execute(&watchdog, size, job.op, call);
            // The caller may have dropped its `Work` without waiting: nothing to do then.
            let _ = job.reply.send(out);
        }
    }
    crate::abort::set_live(rank, size, false);
    drop(watchdog);
    drop(universe); // MPI_Finalize
}

/// Runs one collective: the arrival check, then the collective, each within the deadline.
fn execute(watchdog: &Watchdog, size: usize, op: Op, call: Call) -> Buf {
    watchdog.arrive(&call);
    let world = watchdog.world();
    match op {
        Op::AllReduce { buf, op } => match buf {
            Buf::F32(v) => Buf::F32(all_reduce(watchdog, &call, size, v, op)),
            Buf::F64(v) => Buf::F64(all_reduce(watchdog, &call, size, v, op)),
            Buf::I64(v) => Buf::I64(all_reduce(watchdog, &call, size, v, op)),
        },
        Op::Broadcast { mut buf, root } => {
            let root = world.process_at_rank(root as mpi::Rank);
            mpi::request::scope(|scope| match &mut buf {
                Buf::F32(v) => watchdog.complete(root.immediate_broadcast_into(scope, &mut v[..]), &call),
                Buf::F64(v) => watchdog.complete(root.immediate_broadcast_into(scope, &mut v[..]), &call),
                Buf::I64(v) => watchdog.complete(root.immediate_broadcast_into(scope, &mut v[..]), &call),
            });
            buf
        }
        Op::AllGather { buf } => match buf {
            Buf::F32(v) => Buf::F32(all_gather(watchdog, &call, size, &v)),
            Buf::F64(v) => Buf::F64(all_gather(watchdog, &call, size, &v)),
            Buf::I64(v) => Buf::I64(all_gather(watchdog, &call, size, &v)),
        },
        Op::ReduceScatterAvg { buf } => match buf {
            Buf::F32(v) => Buf::F32(reduce_scatter_avg(watchdog, &call, size, &v)),
            Buf::F64(v) => Buf::F64(reduce_scatter_avg(watchdog, &call, size, &v)),
            Buf::I64(_) => unreachable!("FullyShardedDataParallel reduces floating-point gradients only"),
        },
        // Every rank has heard from every other: the arrival exchange was the barrier.
        Op::Barrier => Buf::F32(Vec::new()),
    }
}

/// Element types of the wire buffers.
trait Wire: Equivalence + Copy + Default {
    /// Divides by the world size (`ReduceOp::Avg`; integers never get here).
    fn div_world(self, size: usize) -> Self;
}

impl Wire for f32 {
    fn div_world(self, size: usize) -> Self {
        self / size as f32
    }
}

impl Wire for f64 {
    fn div_world(self, size: usize) -> Self {
        self / size as f64
    }
}

impl Wire for i64 {
    fn div_world(self, _: usize) -> Self {
        unreachable!("ReduceOp::Avg on integers is refused before it is sent")
    }
}

fn all_reduce<T: Wire>(watchdog: &Watchdog, call: &Call, size: usize, v: Vec<T>, op: ReduceOp) -> Vec<T> {
    let mut out = vec![T::default(); v.len()];
    let sys = match op {
        ReduceOp::Sum | ReduceOp::Avg => SystemOperation::sum(),
        ReduceOp::Product => SystemOperation::product(),
        ReduceOp::Min => SystemOperation::min(),
        ReduceOp::Max => SystemOperation::max(),
    };
    mpi::request::scope(|scope| {
        watchdog.complete(watchdog.world().immediate_all_reduce_into(scope, &v[..], &mut out[..], sys), call)
    });
    if op == ReduceOp::Avg {
        for x in &mut out {
            *x = x.div_world(size);
        }
    }
    out
}

fn all_gather<T: Wire>(watchdog: &Watchdog, call: &Call, size: usize, v: &[T]) -> Vec<T> {
    let mut out = vec![T::default(); v.len() * size];
    mpi::request::scope(|scope| {
        watchdog.complete(watchdog.world().immediate_all_gather_into(scope, v, &mut out[..]), call)
    });
    out
}

/// Sums `v` (`size` equal blocks) over the ranks, keeps this rank's block and divides it by
/// the world size.
fn reduce_scatter_avg<T: Wire>(watchdog: &Watchdog, call: &Call, size: usize, v: &[T]) -> Vec<T> {
    assert_eq!(v.len() % size, 0, "reduce_scatter: {} values do not split into {size} equal blocks", v.len());
    let mut out = vec![T::default(); v.len() / size];
    mpi::request::scope(|scope| {
        watchdog.complete(
            watchdog.world().immediate_reduce_scatter_block_into(scope, v, &mut out[..], SystemOperation::sum()),
            call,
        )
    });
    for x in &mut out {
        *x = x.div_world(size);
    }
    out
}
