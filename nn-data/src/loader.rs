//! A mini-batch loader with seeded, per-epoch shuffling.

use nn_core::Tensor;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Iterates `(inputs, targets)` mini-batches over tensors whose first dim is the sample.
///
/// Shuffling is a pure function of `(seed, epoch)`: it does not consume the global
/// generator, so a resumed run sees exactly the batches of an uninterrupted one given the
/// epoch number alone.
#[derive(Clone)]
pub struct DataLoader {
    x: Tensor,
    y: Tensor,
    batch_size: usize,
    seed: Option<u64>,
    drop_last: bool,
}

impl DataLoader {
    /// Batches of `batch_size` in order.
    ///
    /// # Panics
    /// When `batch_size` is 0 or the tensors disagree on the number of samples.
    #[track_caller]
    pub fn new(x: Tensor, y: Tensor, batch_size: usize) -> Self {
        assert!(batch_size > 0, "DataLoader: batch_size must be positive");
        assert!(
            x.rank() > 0 && y.rank() > 0 && x.shape()[0] == y.shape()[0],
            "DataLoader: inputs {:?} and targets {:?} must have the same number of samples",
            x.shape(),
            y.shape()
        );
        DataLoader { x, y, batch_size, seed: None, drop_last: false }
    }

    /// Shuffles every epoch with a permutation derived from `seed` and the epoch number.
    pub fn shuffle(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Drops a last, smaller batch.
    pub fn drop_last(mut self, drop: bool) -> Self {
        self.drop_last = drop;
        self
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.x.shape()[0]
    }

    /// True when there is no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of batches per epoch.
    pub fn num_batches(&self) -> usize {
        if self.drop_last {
            self.len() / self.batch_size
        } else {
            self.len().div_ceil(self.batch_size)
        }
    }

    /// The batches of epoch `epoch`.
    pub fn epoch(&self, epoch: u64) -> impl Iterator<Item = (Tensor, Tensor)> + '_ {
        let n = self.len();
        let mut order: Vec<i64> = (0..n as i64).collect();
        if let Some(seed) = self.seed {
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            order.shuffle(&mut rng);
        }
        let order = Tensor::from_vec_i64(order, &[n]);
        (0..self.num_batches()).map(move |b| {
            let start = b * self.batch_size;
            let idx = order.narrow(0, start, self.batch_size.min(n - start));
            (self.x.index_select(0, &idx), self.y.index_select(0, &idx))
        })
    }
}
