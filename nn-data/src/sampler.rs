//! `DistributedSampler`: each process of a data-parallel job reads its own share of the
//! dataset (PyTorch's `torch.utils.data.DistributedSampler`).

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Splits the sample indices `0..len` among `num_replicas` processes, rank-strided, with
/// PyTorch's `DistributedSampler` rules:
///
/// - every epoch, all ranks draw the same permutation (seeded with `seed + epoch`, so it is
///   a pure function of the epoch number) unless shuffling is off;
/// - without `drop_last`, the list is padded by repeating its head until it divides
///   evenly, so every rank gets `ceil(len / num_replicas)` samples (a few samples are seen
///   twice per epoch); with `drop_last`, the tail is dropped instead and every rank gets
///   `floor(len / num_replicas)`;
/// - rank `r` takes positions `r, r + num_replicas, r + 2 num_replicas, ...`.
///
/// Every rank gets the same number of samples, hence the same number of batches: a
/// data-parallel step is a collective, so one rank with an extra batch would wait forever.
///
/// ```
/// use nn_data::DistributedSampler;
/// // 10 samples over 3 processes, in order: padded to 12 with samples 0 and 1.
/// let on = |rank| DistributedSampler::new(10, 3, rank).shuffle(false).indices(0);
/// assert_eq!(on(0), [0, 3, 6, 9]);
/// assert_eq!(on(1), [1, 4, 7, 0]);
/// assert_eq!(on(2), [2, 5, 8, 1]);
/// // drop_last: 9 samples are used, 3 per rank.
/// assert_eq!(DistributedSampler::new(10, 3, 2).shuffle(false).drop_last(true).indices(0), [2, 5, 8]);
/// // Shuffled (the default): disjoint shares of one permutation, a new one every epoch.
/// let s: Vec<DistributedSampler> = (0..2).map(|r| DistributedSampler::new(8, 2, r).seed(7)).collect();
/// let mut all: Vec<usize> = s.iter().flat_map(|s| s.indices(3)).collect();
/// all.sort();
/// assert_eq!(all, (0..8).collect::<Vec<_>>());
/// assert_ne!(s[0].indices(3), s[0].indices(4));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistributedSampler {
    len: usize,
    num_replicas: usize,
    rank: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
}

impl DistributedSampler {
    /// The share of process `rank` among `num_replicas` of a dataset of `len` samples, with
    /// PyTorch's defaults: shuffled with seed 0, padded rather than dropped.
    ///
    /// # Panics
    /// When `num_replicas` is 0 or `rank` is not below it (PyTorch's `ValueError`).
    #[track_caller]
    pub fn new(len: usize, num_replicas: usize, rank: usize) -> Self {
        assert!(num_replicas > 0, "DistributedSampler: num_replicas must be positive");
        assert!(
            rank < num_replicas,
            "DistributedSampler: invalid rank {rank}, rank should be in the interval [0, {}]",
            num_replicas - 1
        );
        DistributedSampler { len, num_replicas, rank, shuffle: true, seed: 0, drop_last: false }
    }

    /// Shuffle every epoch (default `true`).
    pub fn shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// The shuffling seed (default 0); it must be the same on every rank.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Drop the tail that does not divide evenly instead of padding (default `false`).
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// The dataset's length.
    pub fn dataset_len(&self) -> usize {
        self.len
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes.
    pub fn num_replicas(&self) -> usize {
        self.num_replicas
    }

    /// Samples per rank and epoch (the same on every rank).
    pub fn num_samples(&self) -> usize {
        if self.drop_last {
            self.len / self.num_replicas
        } else {
            self.len.div_ceil(self.num_replicas)
        }
    }

    /// Samples per epoch over all ranks, padding included.
    pub fn total_size(&self) -> usize {
        self.num_samples() * self.num_replicas
    }

    /// This rank's sample indices for `epoch`, in the order to visit them.
    pub fn indices(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len).collect();
        if self.shuffle {
            let mut rng = ChaCha8Rng::seed_from_u64(self.seed.wrapping_add(epoch));
            order.shuffle(&mut rng);
        }
        let total = self.total_size();
        if total > order.len() {
            // Pad by repeating the list from its start, as often as needed.
            let head = order.clone();
            order.extend(head.iter().cycle().take(total - head.len()));
        } else {
            order.truncate(total);
        }
        order.into_iter().skip(self.rank).step_by(self.num_replicas).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::DistributedSampler;

    fn shares(len: usize, world: usize, drop_last: bool, shuffle: bool, epoch: u64) -> Vec<Vec<usize>> {
        (0..world)
            .map(|r| {
                DistributedSampler::new(len, world, r).shuffle(shuffle).drop_last(drop_last).seed(11).indices(epoch)
            })
            .collect()
    }

    #[test]
    fn padding_repeats_the_head_of_the_permutation() {
        // PyTorch: DistributedSampler(range(10), num_replicas=4, shuffle=False) ranks 0..3.
        assert_eq!(shares(10, 4, false, false, 0), [vec![0, 4, 8], vec![1, 5, 9], vec![2, 6, 0], vec![3, 7, 1]]);
        // Fewer samples than ranks: the list is repeated more than once.
        assert_eq!(shares(2, 5, false, false, 0), [vec![0], vec![1], vec![0], vec![1], vec![0]]);
        // A shuffled run pads with the head of that epoch's permutation.
        let s = shares(10, 4, false, true, 5);
        let flat: Vec<usize> = (0..3).flat_map(|i| s.iter().map(move |r| r[i])).collect();
        assert_eq!(flat[10..], flat[..2]);
        let mut first: Vec<usize> = flat[..10].to_vec();
        first.sort();
        assert_eq!(first, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn drop_last_drops_the_uneven_tail() {
        // PyTorch: DistributedSampler(range(10), num_replicas=4, shuffle=False, drop_last=True).
        assert_eq!(shares(10, 4, true, false, 0), [vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]);
        let s = DistributedSampler::new(10, 4, 0).drop_last(true);
        assert_eq!((s.num_samples(), s.total_size()), (2, 8));
        let s = DistributedSampler::new(10, 4, 0);
        assert_eq!((s.num_samples(), s.total_size()), (3, 12));
        // Evenly divisible: both modes agree.
        assert_eq!(shares(12, 4, true, true, 2), shares(12, 4, false, true, 2));
        // Fewer samples than ranks with drop_last: nobody gets any.
        assert!(shares(3, 4, true, true, 0).iter().all(Vec::is_empty));
    }

    #[test]
    fn ranks_get_disjoint_equal_shares_of_one_permutation() {
        for (len, world) in [(60_000, 2), (60_000, 3), (101, 3), (7, 7)] {
            let s = shares(len, world, true, true, 1);
            assert!(s.iter().all(|r| r.len() == len / world));
            let mut all: Vec<usize> = s.concat();
            all.sort();
            all.dedup();
            assert_eq!(all.len(), len / world * world, "len {len}, world {world}: shares overlap");
        }
    }

    #[test]
    fn shuffling_is_a_pure_function_of_seed_and_epoch() {
        let s = DistributedSampler::new(100, 2, 1).seed(3);
        assert_eq!(s.indices(4), s.indices(4));
        assert_ne!(s.indices(4), s.indices(5));
        assert_ne!(s.indices(4), s.clone().seed(4).indices(4));
        // seed + epoch, as PyTorch: (seed 3, epoch 5) is (seed 4, epoch 4).
        assert_eq!(s.indices(5), s.clone().seed(4).indices(4));
        assert_ne!(s.indices(0), (0..50).map(|i| 2 * i + 1).collect::<Vec<_>>(), "shuffled by default");
    }

    #[test]
    fn a_loader_reads_its_ranks_share_in_equal_batches() {
        use crate::DataLoader;
        use nn_core::Tensor;
        let n = 23;
        let x = Tensor::arange(0.0, n as f64, 1.0).reshape(&[n, 1]);
        let y = Tensor::from_vec_i64((0..n as i64).collect(), &[n]);
        let mut seen = Vec::new();
        for rank in 0..3 {
            let sampler = DistributedSampler::new(n, 3, rank).seed(5);
            let loader = DataLoader::new(x.clone(), y.clone(), 4).distributed(sampler.clone());
            assert_eq!((loader.len(), loader.num_batches()), (8, 2));
            let got: Vec<i64> = loader
                .epoch(2)
                .flat_map(|(xb, yb)| {
                    assert_eq!(xb.to_vec().iter().map(|v| *v as i64).collect::<Vec<_>>(), yb.to_vec_i64());
                    yb.to_vec_i64()
                })
                .collect();
            let want: Vec<i64> = sampler.indices(2).into_iter().map(|i| i as i64).collect();
            assert_eq!(got, want);
            seen.extend(got);
        }
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), n, "padding repeats samples; together the ranks see all of them");
    }

    #[test]
    #[should_panic(expected = "the sampler option is mutually exclusive with shuffle")]
    fn a_loader_does_not_shuffle_through_a_sampler() {
        use crate::DataLoader;
        use nn_core::Tensor;
        let (x, y) = (Tensor::zeros(&[4, 1]), Tensor::from_vec_i64(vec![0; 4], &[4]));
        let _ = DataLoader::new(x, y, 2).shuffle(1).distributed(DistributedSampler::new(4, 2, 0));
    }

    #[test]
    #[should_panic(expected = "DistributedSampler: invalid rank 3, rank should be in the interval [0, 2]")]
    fn a_rank_outside_the_world_panics() {
        DistributedSampler::new(10, 3, 3);
    }

    #[test]
    #[should_panic(expected = "num_replicas must be positive")]
    fn an_empty_world_panics() {
        DistributedSampler::new(10, 0, 0);
    }
}
