//! The global random number generator behind `randn`, `rand`, init functions and dropout.
//!
//! One process-wide ChaCha8 stream, like PyTorch's default CPU generator: seeding it with
//! [`manual_seed`] makes every random draw that follows reproducible, and its full state can
//! be saved and restored ([`rng_state`], [`set_rng_state`]) so that a resumed training run
//! continues bit for bit.

use std::sync::{LazyLock, Mutex};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// PyTorch's default seed, used until [`manual_seed`] is called.
const DEFAULT_SEED: u64 = 67280421310721;

static RNG: LazyLock<Mutex<ChaCha8Rng>> = LazyLock::new(|| Mutex::new(ChaCha8Rng::seed_from_u64(DEFAULT_SEED)));

/// Seeds the global generator.
///
/// ```
/// use nn_core::{manual_seed, Tensor};
/// manual_seed(7);
/// let a = Tensor::randn(&[4]).to_vec();
/// manual_seed(7);
/// assert_eq!(Tensor::randn(&[4]).to_vec(), a);
/// ```
pub fn manual_seed(seed: u64) {
    *lock() = ChaCha8Rng::seed_from_u64(seed);
}

fn lock() -> std::sync::MutexGuard<'static, ChaCha8Rng> {
    RNG.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` with exclusive access to the global generator.
pub fn with_rng<R>(f: impl FnOnce(&mut ChaCha8Rng) -> R) -> R {
    f(&mut lock())
}

/// A snapshot of the global generator (seed, stream and position in the stream).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RngState {
    /// The 32-byte ChaCha key.
    pub seed: [u8; 32],
    /// The stream number.
    pub stream: u64,
    /// The position in the stream, in 32-bit words.
    pub word_pos: u128,
}

/// The current state of the global generator.
pub fn rng_state() -> RngState {
    let r = lock();
    RngState { seed: r.get_seed(), stream: r.get_stream(), word_pos: r.get_word_pos() }
}

/// Restores a state captured by [`rng_state`].
///
/// ```
/// use nn_core::{random, Tensor};
/// let s = random::rng_state();
/// let a = Tensor::rand(&[3]).to_vec();
/// random::set_rng_state(&s);
/// assert_eq!(Tensor::rand(&[3]).to_vec(), a);
/// ```
pub fn set_rng_state(state: &RngState) {
    let mut r = ChaCha8Rng::from_seed(state.seed);
    r.set_stream(state.stream);
    r.set_word_pos(state.word_pos);
    *lock() = r;
}
