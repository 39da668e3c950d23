//! Deadlines and arrival checks for collectives: what turns a hang into an error.
//!
//! Every collective runs as a non-blocking MPI operation (`MPI_Iallreduce`, `MPI_Ibcast`,
//! `MPI_Iallgather`) that the communication thread tests until it completes or its deadline
//! (the group's timeout after the thread starts it) passes. Before starting it, each rank
//! sends every other rank an *arrival*, a fingerprint of five integers (sequence number,
//! collective, wire dtype, length, reduction or root), on a communicator of its own, and
//! waits for theirs. The arrivals are what make the failure explicable:
//!
//! - a rank that times out names the ranks whose arrival it never received (they are slow,
//!   stuck or dead, or have called fewer collectives); when every rank arrived, the
//!   collective itself stopped (a rank died inside it);
//! - a rank that receives an arrival different from its own (another collective, or the same
//!   one with another length, dtype, reduction or root) reports both calls, before MPI could
//!   match the two collectives with each other and corrupt or truncate data.
//!
//! Either way the rank prints the error ([`DistError::Timeout`], [`DistError::Mismatch`]) on
//! stderr and ends the job with `MPI_Abort` (its other ranks may be waiting for it too).
//!
//! **Cost.** Per collective, each rank sends and receives `world_size - 1` messages of 40
//! bytes, and starts the collective once every rank has arrived: one small-message latency
//! more than the collective alone, and traffic that grows with the world size, which suits
//! the worlds this crate targets (up to tens of ranks). `examples/ddp_bench.rs` measures
//! it: its last line times an all-reduce of one value, where the exchange's fixed cost
//! shows most, and its DDP step times show what the exchange adds to training (one run is
//! recorded in `benches/results/undated-16core-host-collective-timeouts.md`). A barrier is
//! the arrival exchange itself (every rank has heard from every other), so a barrier costs
//! nothing more. The waiting thread tests its requests with a `yield` between tests, as
//! MPI's blocking calls spin; after a second of waiting (a slower rank, not a transfer) it
//! sleeps 1 ms between tests instead, so a long wait does not hold a core.
//!
//! **Dependencies.** This module uses `abort` (the exit codes), `error` and `reduce_op`,
//! and nothing of `comm`: the communication thread (`comm`) runs each collective under a
//! [`Watchdog`], so `comm` depends on this module and not the other way round.

use std::io::Write;
use std::time::{Duration, Instant};

use mpi::request::{Request, Scope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use nn_core::DType;

use crate::abort::{MISMATCH_EXIT_CODE, TIMEOUT_EXIT_CODE};
use crate::error::DistError;
use crate::reduce_op::ReduceOp;

/// Waiting this long means waiting for a rank, not for data: the poll loop starts sleeping.
const SPIN: Duration = Duration::from_secs(1);
/// The sleep between tests after [`SPIN`].
const NAP: Duration = Duration::from_millis(1);
/// Between printing an error and `MPI_Abort`, which kills every rank: the other ranks that
/// time out in the same collective (their deadlines pass within milliseconds of this one's)
/// or see the same mismatch print their view of it too.
const GRACE: Duration = Duration::from_millis(500);

/// Which collective a rank called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    AllReduce(ReduceOp),
    Broadcast {
        root: usize,
    },
    AllGather,
    /// A mean over the ranks, each keeping its block.
    ReduceScatter,
    Barrier,
}

/// What one rank called as one collective: what the arrivals carry and compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    pub(crate) seq: u64,
    pub(crate) kind: Kind,
    /// The wire dtype (`F32`, `F64` or `I64`; a barrier has none).
    pub(crate) wire: Option<DType>,
    /// Values sent by each rank.
    pub(crate) len: usize,
}

const WIRES: [DType; 3] = [DType::F32, DType::F64, DType::I64];
const REDUCTIONS: [ReduceOp; 5] = [ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg];

impl Fingerprint {
    /// The collective's name.
    pub(crate) fn name(&self) -> &'static str {
        match self.kind {
            Kind::AllReduce(_) => "all_reduce",
            Kind::Broadcast { .. } => "broadcast",
            Kind::AllGather => "all_gather",
            Kind::ReduceScatter => "reduce_scatter",
            Kind::Barrier => "barrier",
        }
    }

    /// `all_reduce #4 (sum of 10 f32 values)`.
    pub(crate) fn describe(&self) -> String {
        let values = match self.wire {
            Some(w) => format!("{} {w} value{}", self.len, if self.len == 1 { "" } else { "s" }),
            None => String::new(),
        };
        let detail = match self.kind {
            Kind::AllReduce(op) => format!(" ({} of {values})", format!("{op:?}").to_lowercase()),
            Kind::Broadcast { root } => format!(" ({values} from rank {root})"),
            Kind::AllGather => format!(" ({values} from each rank)"),
            Kind::ReduceScatter => format!(" (mean of {values}, one block per rank)"),
            Kind::Barrier => String::new(),
        };
        format!("{} #{}{detail}", self.name(), self.seq)
    }

    /// The wire form: five integers.
    fn encode(&self) -> [i64; 5] {
        let (kind, arg) = match self.kind {
            Kind::AllReduce(op) => (1, REDUCTIONS.iter().position(|&r| r == op).unwrap_or(0) as i64),
            Kind::Broadcast { root } => (2, root as i64),
            Kind::AllGather => (3, 0),
            Kind::Barrier => (4, 0),
            Kind::ReduceScatter => (5, 0),
        };
        let wire = self.wire.and_then(|w| WIRES.iter().position(|&x| x == w)).map_or(-1, |i| i as i64);
        [self.seq as i64, kind, arg, wire, self.len as i64]
    }

    /// The inverse of [`encode`](Fingerprint::encode); `None` for values it never writes.
    fn decode(v: &[i64]) -> Option<Fingerprint> {
        let &[seq, kind, arg, wire, len] = v else { return None };
        let kind = match kind {
            1 => Kind::AllReduce(*REDUCTIONS.get(usize::try_from(arg).ok()?)?),
            2 => Kind::Broadcast { root: usize::try_from(arg).ok()? },
            3 => Kind::AllGather,
            4 => Kind::Barrier,
            5 => Kind::ReduceScatter,
            _ => return None,
        };
        let wire = if wire < 0 { None } else { Some(*WIRES.get(wire as usize)?) };
        Some(Fingerprint { seq: seq as u64, kind, wire, len: usize::try_from(len).ok()? })
    }
}

/// One collective being run: its fingerprint and deadline.
pub(crate) struct Call {
    pub(crate) me: Fingerprint,
    pub(crate) timeout: Duration,
    /// `None` when the timeout is too large to add to now (it never passes).
    pub(crate) deadline: Option<Instant>,
}

impl Call {
    /// Starts the clock for `me`.
    pub(crate) fn start(me: Fingerprint, timeout: Duration) -> Call {
        Call { me, timeout, deadline: Instant::now().checked_add(timeout) }
    }
}

/// The communicators of the communication thread: the collectives' and the arrivals'.
pub(crate) struct Watchdog {
    world: SimpleCommunicator,
    /// A duplicate of `world`: arrival messages never match a collective's traffic.
    arrivals: SimpleCommunicator,
    rank: usize,
    size: usize,
}

impl Watchdog {
    pub(crate) fn new(world: SimpleCommunicator) -> Watchdog {
        let arrivals = world.duplicate();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        Watchdog { world, arrivals, rank, size }
    }

    /// The communicator the collectives run on.
    pub(crate) fn world(&self) -> &SimpleCommunicator {
        &self.world
    }

    /// Sends this rank's arrival for `call` to every other rank and waits until theirs are
    /// all in, each equal to this one; ends the job on a mismatch (as soon as one arrives)
    /// or when the deadline passes.
    pub(crate) fn arrive(&self, call: &Call) {
        if self.size == 1 {
            return;
        }
        let mine = call.me.encode();
        let mut inbox = vec![[0i64; 5]; self.size];
        let mut heard: Vec<bool> = (0..self.size).map(|r| r == self.rank).collect();
        mpi::request::scope(|scope| {
            let mut sends: Vec<_> = (0..self.size)
                .filter(|&r| r != self.rank)
                .map(|r| Some(self.arrivals.process_at_rank(r as mpi::Rank).immediate_send(scope, &mine[..])))
                .collect();
            let mut recvs: Vec<_> = inbox
                .iter_mut()
                .enumerate()
                .filter(|(r, _)| *r != self.rank)
                .map(|(r, slot)| {
                    (
                        r,
                        Some(
                            self.arrivals.process_at_rank(r as mpi::Rank).immediate_receive_into(scope, &mut slot[..]),
                        ),
                    )
                })
                .collect();
            let all_in = poll(call.deadline, || {
                for (r, slot) in &mut recvs {
                    let Some(req) = slot.take() else { continue };
                    match req.test_with_data() {
                        Ok((_, theirs)) => {
                            heard[*r] = true;
                            let theirs = Fingerprint::decode(theirs);
                            if theirs != Some(call.me) {
                                self.mismatch(call, *r, theirs);
                            }
                        }
                        Err(req) => *slot = Some(req),
                    }
                }
                let mut sent = true;
                for s in &mut sends {
                    sent &= test(s); // every send is tested, each call drives them on
                }
                sent && heard.iter().all(|&h| h)
            });
            if !all_in {
                let missing = (0..self.size).filter(|&r| !heard[r]).collect();
                self.timeout(call, missing);
            }
        });
    }

    /// Tests `req`, the collective of `call`, until it completes; ends the job when the
    /// deadline passes first.
    pub(crate) fn complete<'a, D: ?Sized, S: Scope<'a>>(&self, req: Request<'a, D, S>, call: &Call) {
        let mut slot = Some(req);
        if !poll(call.deadline, || test(&mut slot)) {
            self.timeout(call, Vec::new());
        }
    }

    fn timeout(&self, call: &Call, missing: Vec<usize>) -> ! {
        self.fail(
            DistError::Timeout {
                op: call.me.name(),
                seq: call.me.seq,
                rank: self.rank,
                world_size: self.size,
                timeout: call.timeout,
                missing,
            },
            TIMEOUT_EXIT_CODE,
        )
    }

    fn mismatch(&self, call: &Call, other_rank: usize, theirs: Option<Fingerprint>) -> ! {
        let other_called = match theirs {
            Some(f) => f.describe(),
            None => "an unreadable arrival (not nn-distributed's?)".into(),
        };
        let err = DistError::Mismatch {
            seq: call.me.seq,
            rank: self.rank,
            called: call.me.describe(),
            other_rank,
            other_called,
        };
        self.fail(err, MISMATCH_EXIT_CODE)
    }

    /// Prints `err` and ends the job, after [`GRACE`].
    fn fail(&self, err: DistError, code: i32) -> ! {
        let _ = std::io::stdout().flush();
        // One write, so that the lines of ranks failing together do not interleave.
        let line = format!("nn-distributed: {err}; aborting the MPI job (MPI_Abort)\n");
        let _ = std::io::stderr().write_all(line.as_bytes());
        std::thread::sleep(GRACE);
        self.world.abort(code)
    }
}

/// Tests the request in `slot`, emptying the slot once it has completed; true when empty.
fn test<'a, D: ?Sized, S: Scope<'a>>(slot: &mut Option<Request<'a, D, S>>) -> bool {
    if let Some(req) = slot.take() {
        if let Err(req) = req.test() {
            *slot = Some(req);
            return false;
        }
    }
    true
}

/// Calls `done` until it returns true (then returns true) or `deadline` passes (false).
/// Between calls it yields the core, and after [`SPIN`] sleeps [`NAP`].
fn poll(deadline: Option<Instant>, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return false;
        }
        if now - start < SPIN {
            std::thread::yield_now();
        } else {
            std::thread::sleep(NAP);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_survive_the_wire_and_describe_the_call() {
        let cases = [
            (
                Fingerprint { seq: 4, kind: Kind::AllReduce(ReduceOp::Avg), wire: Some(DType::F32), len: 10 },
                "all_reduce #4 (avg of 10 f32 values)",
            ),
            (
                Fingerprint { seq: 9, kind: Kind::Broadcast { root: 2 }, wire: Some(DType::I64), len: 1 },
                "broadcast #9 (1 i64 value from rank 2)",
            ),
            (
                Fingerprint { seq: 1, kind: Kind::AllGather, wire: Some(DType::F64), len: 3 },
                "all_gather #1 (3 f64 values from each rank)",
            ),
            (Fingerprint { seq: 2, kind: Kind::Barrier, wire: None, len: 0 }, "barrier #2"),
            (
                Fingerprint { seq: 5, kind: Kind::ReduceScatter, wire: Some(DType::F32), len: 6 },
                "reduce_scatter #5 (mean of 6 f32 values, one block per rank)",
            ),
        ];
        for (f, text) in cases {
            assert_eq!(Fingerprint::decode(&f.encode()), Some(f));
            assert_eq!(f.describe(), text);
        }
        assert_eq!(Fingerprint::decode(&[1, 7, 0, 0, 0]), None);
        assert_eq!(Fingerprint::decode(&[1, 1, 9, 0, 0]), None);
    }

    #[test]
    fn poll_stops_at_the_deadline() {
        let t = Instant::now();
        assert!(!poll(Some(t + Duration::from_millis(30)), || false));
        assert!(t.elapsed() >= Duration::from_millis(30));
        let mut n = 0;
        assert!(poll(None, || {
            n += 1;
            n == 3
        }));
    }
}
