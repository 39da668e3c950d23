//! The global random number generator behind `randn`, `rand`, init functions and dropout.
//!
//! One process-wide ChaCha8 stream, like PyTorch's default CPU generator: seeding it with
//! [`manual_seed`] makes every random draw that follows reproducible, and its full state can
//! be saved and restored ([`rng_state`], [`set_rng_state`]) so that a resumed training run
//! continues bit for bit.
//!
//! Because the generator is shared, another thread's draws interleave with this one's. Code
//! that needs a stream no other thread can touch runs inside [`fork_rng`]: there the calling
//! thread draws from a private copy, and [`manual_seed`], [`rng_state`] and [`set_rng_state`]
//! act on that copy. Activation checkpointing ([`crate::grad_checkpoint`]) recomputes inside
//! one, so a recomputed dropout mask cannot be disturbed by, or disturb, another thread.

use std::cell::RefCell;
use std::sync::{LazyLock, Mutex};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// PyTorch's default seed, used until [`manual_seed`] is called.
const DEFAULT_SEED: u64 = 67280421310721;

static RNG: LazyLock<Mutex<ChaCha8Rng>> = LazyLock::new(|| Mutex::new(ChaCha8Rng::seed_from_u64(DEFAULT_SEED)));

thread_local! {
    /// This thread's private generator inside [`fork_rng`]; `None` outside.
    static FORK: RefCell<Option<ChaCha8Rng>> = const { RefCell::new(None) };
}

/// Seeds the global generator (inside [`fork_rng`], this thread's private one).
///
/// ```
/// use nn_core::{manual_seed, Tensor};
/// manual_seed(7);
/// let a = Tensor::randn(&[4]).to_vec();
/// manual_seed(7);
/// assert_eq!(Tensor::randn(&[4]).to_vec(), a);
/// ```
pub fn manual_seed(seed: u64) {
    replace(ChaCha8Rng::seed_from_u64(seed));
}

/// Installs `r` as the generator this thread draws from: its fork if it has one, else the
/// global one.
fn replace(r: ChaCha8Rng) {
    let r = FORK.with_borrow_mut(|fork| match fork {
        Some(f) => {
            *f = r;
            None
        }
        None => Some(r),
    });
    if let Some(r) = r {
        *lock() = r;
    }
}

fn lock() -> std::sync::MutexGuard<'static, ChaCha8Rng> {
    RNG.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` with exclusive access to the generator this thread draws from: the global one,
/// or inside [`fork_rng`] this thread's private one.
pub fn with_rng<R>(f: impl FnOnce(&mut ChaCha8Rng) -> R) -> R {
    // The fork is taken out while `f` runs, so a draw nested in `f` (there is none today)
    // would fall through to the global generator rather than panic on a double borrow.
    match FORK.with_borrow_mut(Option::take) {
        Some(mut r) => {
            let out = f(&mut r);
            FORK.with_borrow_mut(|fork| *fork = Some(r));
            out
        }
        None => f(&mut lock()),
    }
}

/// Runs `f` with the calling thread drawing from a private copy of its current generator,
/// PyTorch's `torch.random.fork_rng` made thread-safe: draws inside advance only the copy,
/// so the generator outside is left as it was, and no other thread's draws land in the
/// copy's stream. [`manual_seed`], [`rng_state`] and [`set_rng_state`] inside act on the
/// copy. Forks nest; other threads (including those `f` spawns) keep the global generator.
///
/// ```
/// use nn_core::{manual_seed, random, Tensor};
/// manual_seed(3);
/// let inside = random::fork_rng(|| {
///     manual_seed(11);
///     Tensor::rand(&[3]).to_vec()
/// });
/// manual_seed(11);
/// assert_eq!(Tensor::rand(&[3]).to_vec(), inside, "the same stream, reseeded inside");
/// manual_seed(3);
/// let outside = Tensor::rand(&[3]).to_vec();
/// manual_seed(3);
/// random::fork_rng(|| Tensor::rand(&[100]));
/// assert_eq!(Tensor::rand(&[3]).to_vec(), outside, "the fork's draws left the generator alone");
/// ```
pub fn fork_rng<R>(f: impl FnOnce() -> R) -> R {
    let copy = with_rng(|r| r.clone());
    fork_with(copy, f)
}

/// Runs `f` with this thread drawing from `state`'s generator, privately ([`fork_rng`]).
pub(crate) fn fork_rng_at<R>(state: &RngState, f: impl FnOnce() -> R) -> R {
    fork_with(state.generator(), f)
}

fn fork_with<R>(r: ChaCha8Rng, f: impl FnOnce() -> R) -> R {
    /// Puts the outer fork (or none) back, also when `f` panics.
    struct Restore(Option<ChaCha8Rng>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            FORK.with_borrow_mut(|fork| *fork = outer);
        }
    }
    let _restore = Restore(FORK.with_borrow_mut(|fork| fork.replace(r)));
    f()
}

/// A snapshot of a generator (seed, stream and position in the stream).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RngState {
    /// The 32-byte ChaCha key.
    pub seed: [u8; 32],
    /// The stream number.
    pub stream: u64,
    /// The position in the stream, in 32-bit words.
    pub word_pos: u128,
}

impl RngState {
    fn generator(&self) -> ChaCha8Rng {
        let mut r = ChaCha8Rng::from_seed(self.seed);
        r.set_stream(self.stream);
        r.set_word_pos(self.word_pos);
        r
    }
}

/// The current state of the global generator (inside [`fork_rng`], of this thread's
/// private one).
pub fn rng_state() -> RngState {
    with_rng(|r| RngState { seed: r.get_seed(), stream: r.get_stream(), word_pos: r.get_word_pos() })
}

/// Restores a state captured by [`rng_state`] (inside [`fork_rng`], into this thread's
/// private generator).
///
/// ```
/// use nn_core::{random, Tensor};
/// let s = random::rng_state();
/// let a = Tensor::rand(&[3]).to_vec();
/// random::set_rng_state(&s);
/// assert_eq!(Tensor::rand(&[3]).to_vec(), a);
/// ```
pub fn set_rng_state(state: &RngState) {
    replace(state.generator());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::support::rng_lock;
    use crate::Tensor;

    #[test]
    fn a_fork_is_untouched_by_other_threads_draws() {
        let _rng = rng_lock();
        let expected = fork_rng(|| {
            manual_seed(5);
            Tensor::rand(&[64]).to_vec()
        });
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    Tensor::rand(&[16]);
                }
            });
            for _ in 0..50 {
                let got = fork_rng(|| {
                    manual_seed(5);
                    (0..8).flat_map(|_| Tensor::rand(&[8]).to_vec()).collect::<Vec<_>>()
                });
                assert_eq!(got, expected);
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }

    #[test]
    fn a_fork_is_restored_after_a_panic_and_forks_nest() {
        let _rng = rng_lock();
        manual_seed(9);
        let before = rng_state();
        let r = std::panic::catch_unwind(|| {
            fork_rng(|| {
                manual_seed(1);
                panic!("inside")
            })
        });
        assert!(r.is_err());
        assert_eq!(rng_state(), before, "the panicking fork's seed did not leak out");
        fork_rng(|| {
            manual_seed(2);
            let outer = rng_state();
            fork_rng(|| manual_seed(3));
            assert_eq!(rng_state(), outer, "the inner fork left the outer one alone");
        });
        assert_eq!(rng_state(), before);
    }
}
