//! A mini-batch loader with seeded, per-epoch shuffling.

use nn_core::Tensor;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::DistributedSampler;

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
    sampler: Option<DistributedSampler>,
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
        DataLoader { x, y, batch_size, seed: None, drop_last: false, sampler: None }
    }

    /// Shuffles every epoch with a permutation derived from `seed` and the epoch number.
    ///
    /// # Panics
    /// When the loader reads through a [`DistributedSampler`] (shuffle the sampler).
    #[track_caller]
    pub fn shuffle(mut self, seed: u64) -> Self {
        assert!(self.sampler.is_none(), "DataLoader: the sampler option is mutually exclusive with shuffle");
        self.seed = Some(seed);
        self
    }

    /// Reads only this process's share of the samples, in the sampler's order (which
    /// shuffles, or not, for all ranks alike): the loader of one rank of a data-parallel job.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// use nn_data::{DataLoader, DistributedSampler};
    /// let x = Tensor::arange(0.0, 10.0, 1.0).reshape(&[10, 1]);
    /// let y = Tensor::from_vec_i64((0..10).collect(), &[10]);
    /// let sampler = DistributedSampler::new(10, 2, 1).shuffle(false);
    /// let loader = DataLoader::new(x, y, 2).distributed(sampler);
    /// let batches: Vec<Vec<i64>> = loader.epoch(0).map(|(_, yb)| yb.to_vec_i64()).collect();
    /// assert_eq!(batches, [vec![1, 3], vec![5, 7], vec![9]]);
    /// ```
    ///
    /// # Panics
    /// When the sampler was made for another number of samples, or the loader shuffles
    /// itself (PyTorch: "sampler option is mutually exclusive with shuffle").
    #[track_caller]
    pub fn distributed(mut self, sampler: DistributedSampler) -> Self {
        assert!(self.seed.is_none(), "DataLoader: the sampler option is mutually exclusive with shuffle");
        assert_eq!(
            sampler.dataset_len(),
            self.x.shape()[0],
            "DataLoader: the sampler covers {} samples but the dataset has {}",
            sampler.dataset_len(),
            self.x.shape()[0]
        );
        self.sampler = Some(sampler);
        self
    }

    /// Drops a last, smaller batch.
    pub fn drop_last(mut self, drop: bool) -> Self {
        self.drop_last = drop;
        self
    }

    /// Number of samples an epoch visits (this rank's share with a [`DistributedSampler`]).
    pub fn len(&self) -> usize {
        match &self.sampler {
            Some(s) => s.num_samples(),
            None => self.x.shape()[0],
        }
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
        let mut order: Vec<i64> = match &self.sampler {
            Some(s) => s.indices(epoch).into_iter().map(|i| i as i64).collect(),
            None => (0..n as i64).collect(),
        };
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
