//! `ProcessGroup`: the processes of one MPI job and the tensor collectives among them.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use mpi::Threading;
use nn_core::{DType, Tensor};

use crate::comm::{self, to_wire, Buf, Job, Op};
use crate::error::{DistError, Result};
use crate::reduce_op::ReduceOp;

/// The timeout of every collective unless told otherwise: 30 minutes, PyTorch's default
/// (`datetime.timedelta(minutes=30)` in `init_process_group`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The processes of an MPI job (PyTorch's default process group after
/// `dist.init_process_group("mpi")`): each learns its [`rank`](ProcessGroup::rank) and the
/// [`world_size`](ProcessGroup::world_size), and they exchange tensors with collectives.
///
/// Started under `mpirun -np N`, a program has `N` ranks; started on its own, it is a
/// one-process world (rank 0 of 1), where every collective returns its input, so the same
/// binary runs with and without `mpirun`.
///
/// A collective is a meeting: every rank must call the same collectives, in the same order,
/// with tensors of the same shape and dtype (the result is the same on every rank). The
/// collectives run on one communication thread per process, in the order they are issued;
/// the `_async` forms return a [`Work`] at once, to be waited for later, which is how
/// [`DistributedDataParallel`](crate::DistributedDataParallel) overlaps gradient reduction
/// with backward.
///
/// The handle is cheap to clone (clones are the same group). Dropping the last one
/// finalises MPI, which every rank must do: keep the group alive to the end of `main`.
///
/// ```
/// use nn_core::Tensor;
/// use nn_distributed::{ProcessGroup, ReduceOp};
///
/// let group = ProcessGroup::init()?; // run without `mpirun`: a world of one
/// let r = group.rank() as f32;
/// let t = Tensor::from_vec(vec![r, 1.0], &[2]);
/// let n = group.world_size() as f32;
/// // Sum over ranks 0..n: [n(n-1)/2, n].
/// assert_eq!(group.all_reduce(&t, ReduceOp::Sum).to_vec(), [n * (n - 1.0) / 2.0, n]);
/// assert_eq!(group.all_gather(&t).len(), group.world_size());
/// assert_eq!(group.broadcast(&t, 0).to_vec(), [0.0, 1.0]); // rank 0's values everywhere
/// group.barrier();
/// # Ok::<(), nn_distributed::DistError>(())
/// ```
///
/// # Timeouts
///
/// No collective waits forever: each one that has not completed within the
/// group's timeout ([`DEFAULT_TIMEOUT`], 30 minutes, or the one given to
/// [`init_with`](ProcessGroup::init_with) or [`with_timeout`](ProcessGroup::with_timeout))
/// ends the job with an error naming the collective, its sequence number (the group's
/// collectives are numbered from 1 in the order they are issued, the same on every rank) and
/// the ranks that never called it. Before each collective the ranks exchange small arrival
/// messages; a rank that called another collective, or the same one with another length,
/// dtype, reduction or root, is reported at once, naming both calls. The failing rank
/// prints a [`DistError::Timeout`] or [`DistError::Mismatch`] and calls `MPI_Abort`. The
/// cost is one small-message exchange per collective, which `examples/ddp_bench.rs`
/// measures (see the `watchdog` module's notes in the source).
#[derive(Clone)]
pub struct ProcessGroup {
    inner: Arc<Inner>,
    /// The timeout of this handle's collectives.
    timeout: Duration,
}

struct Inner {
    rank: usize,
    size: usize,
    threading: Threading,
    queue: Mutex<Option<Queue>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// The channel to the communication thread and the number of collectives sent on it.
struct Queue {
    jobs: Sender<Job>,
    issued: u64,
}

impl Drop for Inner {
    /// Closes the channel, so the communication thread finalises MPI, and waits for it.
    fn drop(&mut self) {
        self.queue.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = self.thread.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("rank", &self.inner.rank)
            .field("world_size", &self.inner.size)
            .field("threading", &self.inner.threading)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl ProcessGroup {
    /// Initialises MPI (on a communication thread started here) and returns this process's
    /// group: all the processes `mpirun` started (`MPI_COMM_WORLD`), or this one alone.
    ///
    /// Also installs a panic hook: a panic on any thread of any rank prints its message,
    /// then calls `MPI_Abort`, which ends every rank of the job at once (exit code
    /// [`PANIC_EXIT_CODE`](crate::PANIC_EXIT_CODE)) instead of leaving the others waiting
    /// forever in their next collective. A panic caught with `catch_unwind` ends the job too.
    ///
    /// # Errors
    /// [`DistError::AlreadyInitialized`](crate::DistError::AlreadyInitialized) when MPI was
    /// initialised before in this process (one group per process: clone it to share it), and
    /// [`DistError::Thread`](crate::DistError::Thread) when the thread cannot start. An MPI
    /// installation that cannot start at all (no `mpirun` daemon reachable for a lone
    /// process) makes MPI itself print the cause and exit.
    ///
    /// Every collective has [`DEFAULT_TIMEOUT`] (30 minutes) to complete; see
    /// [`init_with`](ProcessGroup::init_with).
    pub fn init() -> Result<ProcessGroup> {
        Self::init_with(DEFAULT_TIMEOUT)
    }

    /// [`init`](ProcessGroup::init) with another timeout for every collective (PyTorch's
    /// `init_process_group(timeout=...)`): a collective that has not completed `timeout`
    /// after this rank started it ends the job, naming the collective, its sequence number
    /// and the ranks that did not arrive (see [Timeouts](ProcessGroup#timeouts)). A
    /// collective's clock starts when the communication thread starts it, after the ones
    /// issued before it. [`with_timeout`](ProcessGroup::with_timeout) gives a handle with
    /// another timeout later, and [`DdpConfig::timeout`](crate::DdpConfig::timeout) one for
    /// a wrapper.
    ///
    /// ```
    /// use std::time::Duration;
    /// use nn_distributed::{DistError, ProcessGroup};
    ///
    /// assert!(matches!(ProcessGroup::init_with(Duration::ZERO), Err(DistError::ZeroTimeout { .. })));
    /// let group = ProcessGroup::init_with(Duration::from_secs(60))?;
    /// assert_eq!(group.timeout(), Duration::from_secs(60));
    /// # Ok::<(), nn_distributed::DistError>(())
    /// ```
    ///
    /// # Errors
    /// [`DistError::ZeroTimeout`] for a zero `timeout` (MPI is then left uninitialised), and
    /// those of `init`.
    pub fn init_with(timeout: Duration) -> Result<ProcessGroup> {
        check_timeout(timeout, "ProcessGroup::init_with")?;
        crate::abort::install();
        let (jobs, thread, started) = comm::spawn()?;
        Ok(ProcessGroup {
            inner: Arc::new(Inner {
                rank: started.rank,
                size: started.size,
                threading: started.threading,
                queue: Mutex::new(Some(Queue { jobs, issued: 0 })),
                thread: Mutex::new(Some(thread)),
            }),
            timeout,
        })
    }

    /// The same group with another timeout for the collectives issued through the returned
    /// handle (and its clones); this handle keeps its own. Sequence numbers stay shared.
    ///
    /// # Errors
    /// [`DistError::ZeroTimeout`] for a zero `timeout`.
    pub fn with_timeout(&self, timeout: Duration) -> Result<ProcessGroup> {
        check_timeout(timeout, "ProcessGroup::with_timeout")?;
        Ok(ProcessGroup { inner: self.inner.clone(), timeout })
    }

    /// The timeout of this handle's collectives.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How many collectives this process has issued on the group so far, through every
    /// handle (PyTorch's sequence number): the next one is number `sequence_number() + 1`,
    /// the number an error about it would give. Ranks that call the same collectives agree
    /// on it.
    pub fn sequence_number(&self) -> u64 {
        self.inner.queue.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map_or(0, |q| q.issued)
    }

    /// This process's rank, `0..world_size()`.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// The number of processes.
    pub fn world_size(&self) -> usize {
        self.inner.size
    }

    /// Sends a collective to the communication thread; the receiver yields its result.
    ///
    /// # Panics
    /// When the communication thread has stopped (it only stops by panicking, and that
    /// panic has already ended the job).
    pub(crate) fn submit(&self, op: Op) -> Receiver<Buf> {
        let (reply, rx) = mpsc::sync_channel(1);
        let mut queue = self.inner.queue.lock().unwrap_or_else(|e| e.into_inner());
        let sent = queue.as_mut().is_some_and(|q| {
            q.issued += 1;
            q.jobs.send(Job { op, seq: q.issued, timeout: self.timeout, reply }).is_ok()
        });
        if !sent {
            panic!("nn-distributed: the communication thread has stopped");
        }
        rx
    }

    /// The element-wise reduction of `t` over all ranks, on every rank (PyTorch's
    /// `dist.all_reduce`, which reduces in place: write `t.copy_(&group.all_reduce(&t, op))`
    /// for that). The result has `t`'s shape and dtype; it is the same, bit for bit, on every
    /// rank.
    ///
    /// # Panics
    /// On a meta tensor, and for [`ReduceOp::Avg`] of an integer or boolean tensor.
    #[track_caller]
    pub fn all_reduce(&self, t: &Tensor, op: ReduceOp) -> Tensor {
        self.all_reduce_async(t, op).wait()
    }

    /// [`all_reduce`](ProcessGroup::all_reduce) without waiting: the values of `t` are
    /// copied now, the reduction runs on the communication thread, [`Work::wait`] returns it.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// use nn_distributed::{ProcessGroup, ReduceOp};
    /// let group = ProcessGroup::init()?;
    /// let work = group.all_reduce_async(&Tensor::ones(&[3]), ReduceOp::Avg);
    /// // ... compute something else meanwhile ...
    /// assert_eq!(work.wait().to_vec(), [1.0; 3]);
    /// # Ok::<(), nn_distributed::DistError>(())
    /// ```
    ///
    /// # Panics
    /// As `all_reduce`.
    #[track_caller]
    pub fn all_reduce_async(&self, t: &Tensor, op: ReduceOp) -> Work {
        if op == ReduceOp::Avg && !t.dtype().is_float() {
            panic!("all_reduce: ReduceOp::Avg needs a floating-point tensor, got {}", t.dtype());
        }
        let buf = to_wire(t, "all_reduce");
        let rx = self.submit(Op::AllReduce { buf, op });
        Work { rx, shape: t.shape().to_vec(), dtype: t.dtype(), what: "all_reduce" }
    }

    /// Rank `root`'s `t`, on every rank (PyTorch's `dist.broadcast`). Every rank passes a
    /// tensor of the same shape and dtype; only the root's values are used.
    ///
    /// # Panics
    /// When `root` is not a rank, and on a meta tensor.
    #[track_caller]
    pub fn broadcast(&self, t: &Tensor, root: usize) -> Tensor {
        self.check_root(root, "broadcast");
        let buf = to_wire(t, "broadcast");
        let rx = self.submit(Op::Broadcast { buf, root });
        Work { rx, shape: t.shape().to_vec(), dtype: t.dtype(), what: "broadcast" }.wait()
    }

    /// Every rank's `t`, in rank order, on every rank (PyTorch's `dist.all_gather`).
    ///
    /// # Panics
    /// On a meta tensor.
    #[track_caller]
    pub fn all_gather(&self, t: &Tensor) -> Vec<Tensor> {
        let buf = to_wire(t, "all_gather");
        let rx = self.submit(Op::AllGather { buf });
        let all = recv(&rx, "all_gather");
        (0..self.world_size()).map(|r| all.tensor(r * t.numel(), t.shape(), t.dtype())).collect()
    }

    /// Returns once every rank has called it (PyTorch's `dist.barrier`).
    pub fn barrier(&self) {
        let rx = self.submit(Op::Barrier);
        recv(&rx, "barrier");
    }

    #[track_caller]
    fn check_root(&self, root: usize, op: &str) {
        if root >= self.world_size() {
            panic!("{op}: root {root} is not a rank of a world of {}", self.world_size());
        }
    }
}

/// A collective in flight, from an `_async` call (PyTorch's `Work` handle).
#[must_use = "a collective's result is only available through `wait`"]
pub struct Work {
    rx: Receiver<Buf>,
    shape: Vec<usize>,
    dtype: DType,
    what: &'static str,
}

impl Work {
    /// Waits for the collective and returns its result (the input's shape and dtype). A
    /// collective that does not complete within the group's timeout ends the job instead.
    pub fn wait(self) -> Tensor {
        recv(&self.rx, self.what).tensor(0, &self.shape, self.dtype)
    }
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work").field("op", &self.what).field("shape", &self.shape).finish()
    }
}

/// `Err` for a zero timeout given to `at`.
pub(crate) fn check_timeout(timeout: Duration, at: &'static str) -> Result<()> {
    if timeout.is_zero() {
        return Err(DistError::ZeroTimeout { at });
    }
    Ok(())
}

/// Waits for a collective's result.
pub(crate) fn recv(rx: &Receiver<Buf>, what: &str) -> Buf {
    rx.recv().unwrap_or_else(|_| panic!("{what}: the communication thread stopped before finishing"))
}
