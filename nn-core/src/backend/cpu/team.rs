//! The CPU kernels' threads: a fork-join team in the manner of OpenMP, which the calling
//! thread joins.
//!
//! Kernels used to split work with rayon. Called from the program's own thread (as a
//! training loop is), a rayon parallel loop hands the whole loop to the pool and puts the
//! caller to sleep until it is done; the pool's workers fall asleep a few microseconds
//! after each loop. A training step runs hundreds of kernels, so each paid two wake-ups
//! (measured on a 2-core Zen 4: a Transformer step took longer on 2 threads than on 1,
//! and the MLP at batch 64 too), and with `RAYON_NUM_THREADS=2` three threads (the caller
//! and two workers) competed for two cores.
//!
//! The team instead has `threads - 1` helper threads; the caller runs tasks beside them
//! and waits only for the tasks already started. Between loops a helper spins for
//! [`SPIN`] before parking, so the loops of one training step find it awake, as OpenMP's
//! workers are (PyTorch's CPU kernels run on OpenMP).
//!
//! Cores far apart. On a VM the vCPUs may sit on one core complex of the host or on two,
//! and the host moves them (on the 2-vCPU Zen 4 the placement changed every few tens of
//! seconds). Far apart, a cache line takes five times as long to cross (a round trip of
//! 320-360 ns against 55-90), and whatever one thread wrote reaches the other through
//! memory: the CNN step at 2 threads took 1.8-2.5 ms far and 0.84-0.90 ms near, where one
//! thread takes 1.25-1.58, and sending only its three 4.5M-multiply-add GEMMs to the team
//! still took 1.7-2.1 ms. So the team times how long each loop's opening takes to reach a
//! spinning helper; while that says far, loops run on their caller alone, except work big
//! enough to pay for the distance ([`threads_for_large`]: GEMMs of
//! [`FAR_PAR_MADDS`](super::gemm::FAR_PAR_MADDS)), and every [`PROBE`] an empty loop
//! measures the distance again, so the team notices the cores coming near.
//!
//! The team's size is [`set_num_threads`]'s, or until that is called rayon's:
//! `RAYON_NUM_THREADS`, or rayon's global pool as the program configured it, read when the
//! first parallel kernel runs. A kernel called from inside a
//! rayon task (user code in `par_iter`, `ThreadPool::install`) or from a kernel already
//! running on the team, or while another thread holds the team, runs on its own thread:
//! threads are never oversubscribed and nothing nests.

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Mutex, OnceLock, TryLockError};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long an idle helper spins for the next loop before parking (OpenMP runtimes spin
/// for hundreds of milliseconds; the serial stretches of a training step between two
/// parallel kernels are well under this).
const SPIN: Duration = Duration::from_millis(1);

/// Above this moving average of the delay from a loop's opening to a spinning helper seeing
/// it, in nanoseconds, the team's cores count as far apart (measured on the 2-vCPU Zen 4:
/// 110-155 near, 300-350 far; the delay counts two clock reads besides the cache line).
const FAR_NS: u32 = 230;
/// Below this the cores count as near again (the gap keeps the mode from flapping).
const NEAR_NS: u32 = 180;
/// While far, how often an empty loop measures the distance again.
const PROBE: Duration = Duration::from_millis(10);

/// `state`: set while a loop accepts helpers; the low bits count the helpers inside it.
const OPEN: usize = 1 << (usize::BITS - 1);

/// One parallel loop: `f(i)` for every `i < tasks`, claimed one at a time.
struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    tasks: usize,
    next: AtomicUsize,
    /// The first panic of a task, re-raised on the caller.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Job<'_> {
    /// Claims and runs tasks until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, SeqCst);
            if i >= self.tasks {
                return;
            }
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| (self.f)(i))) {
                self.panic.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(p);
            }
        }
    }
}

struct Team {
    /// Helper threads (the caller is the team's last member), set once they are spawned.
    helpers: OnceLock<Vec<Thread>>,
    /// Per helper: parked (or about to park), to be unparked by the next loop.
    parked: Vec<AtomicBool>,
    /// Per helper: the last epoch it has done with (a probe's timed loop waits for the
    /// helpers to be awake and waiting again).
    woke: Vec<AtomicU64>,
    /// Bumped for every loop, so helpers see there is work.
    epoch: AtomicU64,
    /// [`OPEN`] and the count of helpers inside the current loop.
    state: AtomicUsize,
    /// The current loop, valid while `state` has [`OPEN`] or counts a helper.
    job: AtomicUsize,
    /// Held by the thread running a loop; others run theirs alone.
    owner: Mutex<()>,
    /// When the current loop was opened, in nanoseconds since `base`.
    opened: AtomicU64,
    /// How far apart the team's cores are, as measured by the helpers.
    distance: Distance,
    /// When the distance was last probed while far, in nanoseconds since `base`.
    probed: AtomicU64,
    /// The clock's origin.
    base: Instant,
}

thread_local! {
    /// Set on helpers, and on a caller while it runs a loop: a kernel called here runs
    /// on this thread.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// The team loops run on now: the one of [`set_num_threads`]'s size, or of rayon's
/// (`RAYON_NUM_THREADS`) until that is called.
static CURRENT: AtomicPtr<Team> = AtomicPtr::new(std::ptr::null_mut());

/// Every team started, by size: a size asked for again reuses its team (a team's threads
/// live as long as the process; those of a team not current stay parked).
static TEAMS: Mutex<Vec<&'static Team>> = Mutex::new(Vec::new());

fn team() -> &'static Team {
    let current = CURRENT.load(SeqCst);
    if !current.is_null() {
        // SAFETY: `CURRENT` only ever holds teams leaked by `Team::start`.
        return unsafe { &*current };
    }
    make_current(rayon::current_num_threads().max(1), false)
}

/// Makes the team of `threads` threads (the caller included) current, starting it if no
/// team of that size was; with `replace` false, a team made current meanwhile stays.
fn make_current(threads: usize, replace: bool) -> &'static Team {
    let mut teams = TEAMS.lock().unwrap_or_else(|e| e.into_inner());
    let current = CURRENT.load(SeqCst);
    if !replace && !current.is_null() {
        // SAFETY: as in `team`.
        return unsafe { &*current };
    }
    let team = match teams.iter().find(|t| t.parked.len() + 1 == threads) {
        Some(t) => *t,
        None => {
            let t = Team::start(threads - 1);
            teams.push(t);
            t
        }
    };
    CURRENT.store(team as *const Team as *mut Team, SeqCst);
    team
}

/// Sets how many threads the CPU kernels run on, the calling thread included (PyTorch's
/// `torch.set_num_threads`); until it is called, `RAYON_NUM_THREADS` or rayon's global
/// pool decides, as rayon's own count does. Loops already running finish on the threads
/// they started with.
///
/// Kernels whose sums depend on how their work is split cut it by this count: a run
/// repeats bit for bit at the same count, so set it once, before training.
///
/// ```
/// nn_core::set_num_threads(1);
/// assert_eq!(nn_core::get_num_threads(), 1);
/// ```
///
/// # Panics
/// When `n` is 0 (PyTorch: "Expected positive number of threads").
#[track_caller]
pub fn set_num_threads(n: usize) {
    if n == 0 {
        panic!("set_num_threads: expected a positive number of threads, got 0");
    }
    make_current(n, true);
}

/// How many threads the CPU kernels run on, the calling thread included (PyTorch's
/// `torch.get_num_threads`): [`set_num_threads`]'s count (fewer where the system refused
/// threads), else rayon's.
pub fn get_num_threads() -> usize {
    team().helpers().len() + 1
}

impl Team {
    /// A team of `n` helpers (fewer when threads cannot be had), started and leaked: the
    /// process keeps it.
    fn start(n: usize) -> &'static Team {
        let team: &'static Team = Box::leak(Box::new(Team {
            helpers: OnceLock::new(),
            parked: (0..n).map(|_| AtomicBool::new(false)).collect(),
            woke: (0..n).map(|_| AtomicU64::new(0)).collect(),
            epoch: AtomicU64::new(0),
            state: AtomicUsize::new(0),
            job: AtomicUsize::new(0),
            owner: Mutex::new(()),
            opened: AtomicU64::new(0),
            distance: Distance::new(),
            probed: AtomicU64::new(0),
            base: Instant::now(),
        }));
        let mut helpers = Vec::with_capacity(n);
        for i in 0..n {
            let spawned = std::thread::Builder::new().name(format!("nn-cpu-{i}")).spawn(move || helper(team, i));
            match spawned {
                Ok(h) => helpers.push(h.thread().clone()),
                // No thread to be had: a smaller team (every loop still completes, the
                // caller claims whatever no helper does).
                Err(_) => break,
            }
        }
        team.helpers.get_or_init(|| helpers);
        team
    }

    fn helpers(&self) -> &[Thread] {
        self.helpers.get().map_or(&[], Vec::as_slice)
    }

    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// While far: whether the cores are still far, after measuring again when a probe is
    /// due. A probe needs the helpers spinning: if one is parked, an empty loop wakes it
    /// and this call goes on at once; a later call, once every helper is awake and done
    /// with that loop, opens a second empty loop, whose delay the helpers record. (Waiting
    /// here for a parked helper to wake would idle the caller on the kernels' path.)
    /// While another thread runs a loop on the team, the probe waits for a later call (its
    /// empty loops would run here).
    fn still_far(&self) -> bool {
        let now = self.now_ns();
        let last = self.probed.load(SeqCst);
        let team_free = || !matches!(self.owner.try_lock(), Err(TryLockError::WouldBlock));
        if now.saturating_sub(last) >= PROBE.as_nanos() as u64 && team_free() {
            let n = self.helpers().len() + 1;
            let epoch = self.epoch.load(SeqCst);
            let helpers = || self.parked.iter().zip(&self.woke).take(n - 1);
            // A helper still to see the last loop is on its way (it flags itself parked
            // for a moment while it wakes): wait for it rather than open another.
            if helpers().all(|(_, w)| w.load(SeqCst) >= epoch) {
                if helpers().all(|(p, _)| !p.load(SeqCst)) {
                    if self.probed.compare_exchange(last, now, SeqCst, SeqCst).is_ok() {
                        self.run_on(n, |_| {});
                    }
                } else {
                    self.run_on(n, |_| {});
                }
            }
        }
        self.distance.far()
    }
}

/// How far apart the team's cores are: a moving average of the delay from a loop's opening
/// to a spinning helper seeing it, and the mode it implies (see the module docs).
struct Distance {
    /// The average, in sixteenths of a nanosecond.
    delay: AtomicU32,
    /// Set while the average says far apart.
    far: AtomicBool,
}

impl Distance {
    /// Near, until measured otherwise.
    fn new() -> Distance {
        Distance { delay: AtomicU32::new(NEAR_NS * 16), far: AtomicBool::new(false) }
    }

    /// Folds one delay into the average (over about eight samples) and sets the mode:
    /// far above [`FAR_NS`], near below [`NEAR_NS`], unchanged between. Helpers racing
    /// here may drop a sample, which is harmless.
    fn record(&self, ns: u64) {
        // Past 10 us the helper was descheduled: that says nothing of the distance. Below
        // that, a sample counts at most twice the far threshold, so that one interrupted
        // helper cannot move the average across on its own.
        if ns > 10_000 {
            return;
        }
        let sample = (ns as u32).min(2 * FAR_NS) * 16;
        let old = self.delay.load(SeqCst);
        let avg = old - old / 8 + sample / 8;
        self.delay.store(avg, SeqCst);
        if avg > FAR_NS * 16 {
            self.far.store(true, SeqCst);
        } else if avg < NEAR_NS * 16 {
            self.far.store(false, SeqCst);
        }
    }

    fn far(&self) -> bool {
        self.far.load(SeqCst)
    }
}

/// A helper's life: wait for a loop, join it, repeat.
fn helper(team: &'static Team, i: usize) {
    INSIDE.with(|c| c.set(true));
    let mut seen = 0;
    loop {
        let spun;
        (seen, spun) = wait_for_loop(team, i, seen);
        if spun {
            team.distance.record(team.now_ns().saturating_sub(team.opened.load(SeqCst)));
        }
        let s = team.state.fetch_add(1, SeqCst);
        if s & OPEN != 0 {
            // SAFETY: the loop is open and counts this helper, so the caller keeps the
            // job alive until this helper leaves (`state` back without it).
            let job = unsafe { &*(team.job.load(SeqCst) as *const Job<'static>) };
            job.work();
        }
        team.state.fetch_sub(1, SeqCst);
        // Back to waiting: a probe's timed loop may open now.
        team.woke[i].store(seen, SeqCst);
    }
}

/// Spins, then parks, until the epoch moves past `seen`; the new epoch, and whether it
/// was seen while spinning (then the delay measures the distance between the cores).
fn wait_for_loop(team: &Team, i: usize, seen: u64) -> (u64, bool) {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let e = team.epoch.load(SeqCst);
        if e != seen {
            return (e, true);
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) && start.elapsed() > SPIN {
            break;
        }
        std::hint::spin_loop();
    }
    loop {
        team.parked[i].store(true, SeqCst);
        let e = team.epoch.load(SeqCst);
        if e != seen {
            team.parked[i].store(false, SeqCst);
            return (e, false);
        }
        std::thread::park();
    }
}

/// How many threads a loop started here would run on (1: it would run on this thread, as
/// every loop does while the team's cores are far apart, see the module docs).
///
/// Timing decides it: a kernel whose result depends on how its work is split (partial
/// sums per block, added at the end) splits by [`parts`] instead, so that its values do
/// not change with the measurement.
pub(crate) fn threads() -> usize {
    #[cfg(test)]
    if SERIAL.with(Cell::get) {
        return 1;
    }
    threads_with(false)
}

/// How many parts a kernel whose result depends on its split (sums over blocks of rows
/// or samples, added in block order) cuts its work into: the team's size, whether the
/// loop then runs on the team or on this thread ([`threads`], which the measured distance
/// between cores decides). One inside a team loop or a rayon task, as [`threads`]. With
/// the split by [`threads`], the same program gave different values from run to run (a
/// 2-epoch MNIST CNN: held-out loss 0.0518 or 0.0540 at 2 threads, 2-vCPU Zen 5).
pub(crate) fn parts() -> usize {
    if INSIDE.with(Cell::get) || rayon::current_thread_index().is_some() {
        return 1;
    }
    team().helpers().len() + 1
}

#[cfg(test)]
thread_local! {
    /// Test-only switch standing for a team measured far apart: [`threads`] says 1 while
    /// [`parts`] keeps the team's size.
    static SERIAL: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` as if the team's cores were far apart ([`threads`] is 1; [`parts`] is not
/// changed): for tests that a kernel's values do not depend on whether its loop ran on
/// the team.
#[cfg(test)]
pub(crate) fn as_if_far<R>(f: impl FnOnce() -> R) -> R {
    SERIAL.with(|s| s.set(true));
    let r = f();
    SERIAL.with(|s| s.set(false));
    r
}

/// [`threads`] for work that pays for cores far apart (the team's size wherever its cores
/// are, one thread inside a loop or a rayon task).
pub(crate) fn threads_for_large() -> usize {
    threads_with(true)
}

fn threads_with(large: bool) -> usize {
    if INSIDE.with(Cell::get) || rayon::current_thread_index().is_some() {
        return 1;
    }
    let team = team();
    let n = team.helpers().len() + 1;
    if n > 1 && !large && team.distance.far() && team.still_far() {
        return 1;
    }
    n
}

/// Runs `f(i)` for every `i < tasks`, on the team when it is free and there is more than
/// one task, else on this thread; returns when all have run. A panic in a task is raised
/// here once every task has finished (the first one, when several panic).
pub(crate) fn run(tasks: usize, f: impl Fn(usize) + Sync) {
    run_with(threads(), tasks, f)
}

/// [`run`] for work that pays for cores far apart (see [`threads_for_large`]).
pub(crate) fn run_large(tasks: usize, f: impl Fn(usize) + Sync) {
    run_with(threads_for_large(), tasks, f)
}

/// [`run`] on `threads` threads (the team, or this thread when 1).
///
/// Several tasks run here are marked as inside a loop, as on the team: the kernels they
/// call split their work the same way either way ([`parts`] is 1 in both), so whether
/// the team ran the loop, which timing decides, never changes a value.
pub(super) fn run_with(threads: usize, tasks: usize, f: impl Fn(usize) + Sync) {
    if tasks <= 1 {
        return (0..tasks).for_each(f);
    }
    if threads == 1 {
        return on_this_thread(tasks, f);
    }
    team().run_on(tasks, f)
}

impl Team {
    /// Runs the `tasks` (more than one) on this team, as [`run_with`] does on the process's.
    fn run_on(&self, tasks: usize, f: impl Fn(usize) + Sync) {
        let team = self;
        let owner = match team.owner.try_lock() {
            Ok(guard) => guard,
            // The lock guards no data, so a poisoned one is as good (and `run` releases it
            // before re-raising a task's panic, so it is not poisoned here).
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            // The team runs another thread's loop: this one runs here, and so do the loops
            // its tasks start, as inside a team loop.
            Err(TryLockError::WouldBlock) => return on_this_thread(tasks, f),
        };
        let job = Job { f: &f, tasks, next: AtomicUsize::new(0), panic: Mutex::new(None) };
        team.job.store(&job as *const Job<'_> as usize, SeqCst);
        team.state.fetch_or(OPEN, SeqCst);
        team.opened.store(team.now_ns(), SeqCst);
        team.epoch.fetch_add(1, SeqCst);
        for (h, p) in team.helpers().iter().zip(&team.parked) {
            if p.swap(false, SeqCst) {
                h.unpark();
            }
        }
        INSIDE.with(|c| c.set(true));
        job.work();
        INSIDE.with(|c| c.set(false));
        // Every task is claimed: close the loop to latecomers, then wait for the helpers
        // still running a task (they hold a reference to `job`).
        team.state.fetch_and(!OPEN, SeqCst);
        while team.state.load(SeqCst) != 0 {
            std::hint::spin_loop();
        }
        let panic = job.panic.into_inner().unwrap_or_else(|e| e.into_inner());
        // Released before a task's panic is re-raised: unwinding with the guard would poison
        // the lock, and every later loop would take it for busy and run on one thread.
        drop(owner);
        if let Some(p) = panic {
            resume_unwind(p);
        }
    }
}

/// Runs every task on this thread, marked as inside a loop (so [`threads`] is 1 in the
/// tasks and loops they start run here too), the mark undone on return or unwind.
fn on_this_thread(tasks: usize, f: impl Fn(usize)) {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            INSIDE.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(INSIDE.with(|c| c.replace(true)));
    (0..tasks).for_each(f)
}

mod chunks;

pub(crate) use chunks::{fill, for_chunks, for_chunks2, for_chunks_n, for_chunks_with, for_parts, GRAIN};

#[cfg(test)]
mod tests {
    use super::*;

    /// Values do not depend on whether a loop ran on the team, which the measured
    /// distance between its cores decides at run time: a bias gradient's sum over rows, a
    /// layer norm's backward (its weight and bias gradients), a convolution's weight
    /// gradient and f32 products, computed on the team and as if its cores were far
    /// apart, agree bit for bit. (Split by the loop's thread count, the sums, the norm's
    /// gradients and the products differed: a 2-epoch MNIST CNN ended at 0.0518 or 0.0540.)
    #[test]
    fn values_do_not_depend_on_whether_the_team_runs_a_loop() {
        use crate::ops::Conv2dConfig;
        use crate::Tensor;
        crate::manual_seed(3);
        let (x, w, b) = (Tensor::randn(&[300, 512]), Tensor::randn(&[512]), Tensor::randn(&[512]));
        let (img, k) = (Tensor::randn(&[32, 8, 26, 26]), Tensor::randn(&[16, 8, 3, 3]));
        let (p, q) = (Tensor::randn(&[200, 384]), Tensor::randn(&[384, 160]));
        let values = || -> Vec<Vec<f32>> {
            let (wl, bl, kl) =
                (w.detach().requires_grad_(true), b.detach().requires_grad_(true), k.detach().requires_grad_(true));
            let y = x.layer_norm(&[512], Some(&wl), Some(&bl), 1e-5);
            (&y * &x).sum().backward();
            img.conv2d(&kl, None, Conv2dConfig::default()).square().sum().backward();
            let grads = [&wl, &bl, &kl].map(|t| t.grad().expect("a gradient").to_vec());
            let mut out = vec![x.sum_dims(&[0usize], false).to_vec(), p.matmul(&q).to_vec(), y.to_vec()];
            out.extend(grads);
            out
        };
        let on_team = values();
        let serial = as_if_far(values);
        for (i, (a, b)) in on_team.iter().zip(&serial).enumerate() {
            let (a, b): (Vec<u32>, Vec<u32>) =
                (a.iter().map(|v| v.to_bits()).collect(), b.iter().map(|v| v.to_bits()).collect());
            assert!(a == b, "result {i} depends on whether the team ran the loop ({} threads)", parts());
        }
    }

    /// While another thread's loop holds the team, a loop runs on its caller, its tasks
    /// see one thread (their loops stay there too), and a panicking task leaves the
    /// caller's thread count as it was.
    #[test]
    fn a_loop_started_while_the_team_is_busy_runs_here() {
        let before = threads();
        let owner = team().owner.lock().unwrap_or_else(|e| e.into_inner());
        let ran = AtomicUsize::new(0);
        run(8, |_| {
            assert_eq!(threads(), 1);
            ran.fetch_add(1, SeqCst);
        });
        assert_eq!(ran.load(SeqCst), 8);
        assert!(catch_unwind(|| run(4, |i| assert!(i != 2))).is_err());
        drop(owner);
        assert_eq!(threads(), before);
    }

    /// Far after a run of far delays, not after one outlier; near again after near ones;
    /// between the thresholds the mode stays; a descheduled helper's delay is ignored.
    #[test]
    fn the_distance_follows_the_delays_with_hysteresis() {
        let d = Distance::new();
        assert!(!d.far());
        d.record(9_000);
        assert!(!d.far(), "one interrupted helper made the cores far");
        for _ in 0..40 {
            d.record(130);
        }
        assert!(!d.far());
        for _ in 0..40 {
            d.record(1_000_000);
        }
        assert!(!d.far(), "descheduled helpers counted");
        for _ in 0..40 {
            d.record(330);
        }
        assert!(d.far(), "330 ns delays (the far placement) not seen as far");
        for _ in 0..40 {
            d.record(205);
        }
        assert!(d.far(), "a delay between the thresholds changed the mode");
        for _ in 0..40 {
            d.record(130);
        }
        assert!(!d.far(), "130 ns delays (the near placement) not seen as near");
        for _ in 0..40 {
            d.record(205);
        }
        assert!(!d.far(), "a delay between the thresholds changed the mode");
    }

    /// While far, a due probe finding its helper parked wakes it and returns at once
    /// (no timed loop in that call); a later call, the helper awake, opens the timed loop.
    /// (On a busy machine the helper may park again first and be woken again.)
    #[test]
    fn a_probe_wakes_a_parked_helper_without_waiting_then_measures() {
        let team = Team::start(1);
        assert_eq!(team.helpers().len(), 1, "no helper thread could be started");
        for _ in 0..40 {
            team.distance.record(330);
        }
        assert!(team.distance.far());
        let start = Instant::now();
        while !team.parked[0].load(SeqCst) || team.now_ns() < PROBE.as_nanos() as u64 {
            assert!(start.elapsed() < Duration::from_secs(10), "the idle helper never parked");
            std::thread::sleep(Duration::from_millis(1));
        }
        let epoch = team.epoch.load(SeqCst);
        team.still_far();
        assert_eq!(team.epoch.load(SeqCst), epoch + 1, "the parked helper was not woken");
        assert_eq!(team.probed.load(SeqCst), 0, "the waking call also ran the timed loop");
        while team.probed.load(SeqCst) == 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "no timed loop after the helper woke");
            team.still_far();
        }
    }

    /// The loops for large work run every task once, and never on fewer threads than
    /// the others.
    #[test]
    fn large_loops_run_every_task() {
        assert!(threads_for_large() >= threads());
        let counts: Vec<AtomicUsize> = (0..100).map(|_| AtomicUsize::new(0)).collect();
        run_large(counts.len(), |i| {
            counts[i].fetch_add(1, SeqCst);
        });
        assert!(counts.iter().all(|c| c.load(SeqCst) == 1));
    }

    #[test]
    fn every_task_runs_once_and_panics_reach_the_caller() {
        let counts: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
        for _ in 0..50 {
            run(counts.len(), |i| {
                counts[i].fetch_add(1, SeqCst);
            });
        }
        assert!(counts.iter().all(|c| c.load(SeqCst) == 50));
        let err = catch_unwind(|| run(64, |i| assert!(i != 37, "task {i} failed"))).unwrap_err();
        assert_eq!(err.downcast_ref::<String>().map(String::as_str), Some("task 37 failed"));
        // The panic did not poison the team's lock (later loops would all run on one
        // thread, silently).
        assert!(!team().owner.is_poisoned());
        // The team still works after a panic.
        let sum = AtomicUsize::new(0);
        run(100, |i| {
            sum.fetch_add(i, SeqCst);
        });
        assert_eq!(sum.load(SeqCst), 4950);
    }

    #[test]
    fn chunks_cover_the_buffer_and_loops_nest_and_race_safely() {
        let mut v = vec![0usize; 10_007];
        for_chunks(&mut v, 100, |q, part| {
            // A nested loop runs on this thread.
            assert_eq!(threads(), 1);
            run(part.len(), |_| {});
            for (j, x) in part.iter_mut().enumerate() {
                *x = q * 100 + j;
            }
        });
        assert!(v.iter().enumerate().all(|(i, &x)| i == x));
        // Loops started from several threads at once all complete.
        std::thread::scope(|s| {
            for t in 0..4 {
                s.spawn(move || {
                    for _ in 0..200 {
                        let mut out = Vec::new();
                        fill(&mut out, 40_000, 1000, |r| r.map(|i| i * t));
                        assert!(out.iter().enumerate().all(|(i, &x)| x == i * t));
                    }
                });
            }
        });
        let (mut a, mut b) = (vec![0u8; 30], vec![0u32; 15]);
        for_chunks2((&mut a, 2), (&mut b, 1), |q, x, y| {
            x.fill(q as u8);
            y[0] = q as u32;
        });
        assert_eq!(a[29], 14);
        assert_eq!(b[14], 14);
    }
}
