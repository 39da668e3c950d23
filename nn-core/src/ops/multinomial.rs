//! Sampling category indices from weights: `multinomial`.

use super::check_float;
use crate::autograd::trace;
use crate::shape::Dims;
use crate::tensor::Tensor;

const OP: &str = "multinomial";

impl Tensor {
    /// Draws `num_samples` category indices per row of non-negative weights,
    /// `torch.multinomial(input, num_samples, replacement)`: a 1-D input `[n]` gives
    /// `[num_samples]`, a 2-D input `[rows, n]` gives `[rows, num_samples]` (`i64`).
    /// Category `i` of a row is drawn with probability `w_i / sum(w)` (weights need not
    /// sum to one). Without `replacement` each category is drawn at most once per row:
    /// the draw is sequential, each next category drawn from the remaining weights (when
    /// a row has fewer positive weights than `num_samples`, its zero-weight categories
    /// come last, as in PyTorch).
    ///
    /// The draws come from the global generator in row order ([`crate::manual_seed`]
    /// makes them reproducible), on the host for every device: one seed gives the same
    /// samples on the CPU and a GPU. Not differentiable.
    ///
    /// ```
    /// use nn_core::{manual_seed, Tensor};
    /// let w = Tensor::from_vec(vec![0.0, 10.0, 0.0, 1.0, 1.0, 0.0], &[2, 3]);
    /// manual_seed(3);
    /// let s = w.multinomial(4, true);
    /// assert_eq!(s.shape(), &[2, 4]);
    /// let v = s.to_vec_i64();
    /// assert!(v[..4].iter().all(|&i| i == 1));
    /// assert!(v[4..].iter().all(|&i| i == 0 || i == 1));
    /// let mut once = w.narrow(0, 1, 1).multinomial(2, false).to_vec_i64();
    /// once.sort();
    /// assert_eq!(once, vec![0, 1]);
    /// manual_seed(3);
    /// assert_eq!(w.multinomial(4, true).to_vec_i64(), v);
    /// ```
    ///
    /// # Panics
    /// When the input is not 1-D or 2-D or not floating-point, `num_samples` is 0, or
    /// without `replacement` exceeds the number of categories; and, once the values are
    /// read, when a row holds a negative, infinite or NaN weight or sums to zero (PyTorch's
    /// messages).
    #[track_caller]
    pub fn multinomial(&self, num_samples: usize, replacement: bool) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(OP, &[self], &[], || {
            vec![("num_samples", trace::int(num_samples)), ("replacement", trace::Attr::Bool(replacement))]
        });
        if !matches!(self.rank(), 1 | 2) {
            panic!("{OP}: prob_dist must be 1 or 2 dim, got shape {:?}", self.shape());
        }
        check_float(OP, self);
        if num_samples == 0 {
            panic!("{OP}: cannot sample n_sample <= 0 samples");
        }
        let n = self.shape()[self.rank() - 1];
        if !replacement && num_samples > n {
            panic!(
                "{OP}: cannot sample n_sample > prob_dist.size(-1) samples without replacement \
                 (n_sample = {num_samples}, {n} categories)"
            );
        }
        let rows = if self.rank() == 2 { self.shape()[0] } else { 1 };
        if n == 0 && rows > 0 {
            panic!("{OP}: invalid multinomial distribution (sum of probabilities <= 0): rows of 0 categories");
        }
        let mut shape: Dims = self.shape().into();
        *shape.last_mut().expect("rank 1 or 2") = num_samples;
        let storage = self.storage_arc().multinomial(self.layout(), n, num_samples, replacement);
        Tensor::from_storage(storage, &shape)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::support::rng_lock;
    use crate::{manual_seed, DType, Device, Tensor};

    /// Pearson's statistic of `counts` against `n` draws from `p` (normalised here).
    fn chi_square(counts: &[usize], p: &[f64], n: usize) -> f64 {
        let total: f64 = p.iter().sum();
        counts
            .iter()
            .zip(p)
            .filter(|(_, &w)| w > 0.0)
            .map(|(&c, &w)| {
                let e = n as f64 * w / total;
                (c as f64 - e).powi(2) / e
            })
            .sum()
    }

    fn counts(samples: &[i64], k: usize) -> Vec<usize> {
        let mut c = vec![0; k];
        for &s in samples {
            c[s as usize] += 1;
        }
        c
    }

    #[test]
    fn with_replacement_matches_the_distribution() {
        let _rng = rng_lock();
        manual_seed(42);
        let p = [0.1, 0.0, 0.4, 0.2, 0.3];
        let n = 20_000;
        let s = Tensor::from_vec_f64(p.to_vec(), &[5]).multinomial(n, true);
        assert_eq!((s.shape(), s.dtype()), (&[n][..], DType::I64));
        let c = counts(&s.to_vec_i64(), 5);
        assert_eq!(c[1], 0, "a zero weight is never drawn");
        // 3 degrees of freedom: P(chi2 > 16.27) = 0.001.
        let chi = chi_square(&c, &p, n);
        assert!(chi < 16.27, "chi-square {chi} for counts {c:?}");
        // Unnormalised weights, f32, rows of a 2-D input: each row its own distribution.
        let w = Tensor::from_vec(vec![1.0, 3.0, 0.0, 0.0, 0.0, 5.0], &[2, 3]);
        let s = w.multinomial(4000, true).to_vec_i64();
        let (r0, r1) = (counts(&s[..4000], 3), counts(&s[4000..], 3));
        assert_eq!(r1, vec![0, 0, 4000]);
        assert!(chi_square(&r0, &[1.0, 3.0, 0.0], 4000) < 10.83, "{r0:?}"); // 1 dof, 0.001
    }

    #[test]
    fn without_replacement_draws_distinct_categories_with_the_right_first_draw() {
        let _rng = rng_lock();
        manual_seed(7);
        let p = [0.5, 0.25, 0.125, 0.125];
        let rows = 8000;
        let w = Tensor::from_vec_f64(p.repeat(rows), &[rows, 4]);
        let s = w.multinomial(3, false);
        assert_eq!(s.shape(), &[rows, 3]);
        let v = s.to_vec_i64();
        for r in v.chunks(3) {
            assert!(r[0] != r[1] && r[1] != r[2] && r[0] != r[2], "repeated category in {r:?}");
        }
        // The first draw follows p; the second, given the first was 0, follows p without 0.
        let first: Vec<i64> = v.chunks(3).map(|r| r[0]).collect();
        assert!(chi_square(&counts(&first, 4), &p, rows) < 16.27);
        let second: Vec<i64> = v.chunks(3).filter(|r| r[0] == 0).map(|r| r[1]).collect();
        let chi = chi_square(&counts(&second, 4), &[0.0, 0.25, 0.125, 0.125], second.len());
        assert!(chi < 13.82, "{chi}"); // 2 dof
                                       // All categories of a full draw; zero weights come last when they must be drawn.
        let mut all = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]).multinomial(3, false).to_vec_i64();
        all.sort();
        assert_eq!(all, vec![0, 1, 2]);
        let z = Tensor::from_vec(vec![0.0, 1.0, 0.0, 1.0], &[4]).multinomial(4, false).to_vec_i64();
        assert_eq!(&z[2..], &[0, 2]);
    }

    #[test]
    fn a_seed_reproduces_the_draws() {
        let _rng = rng_lock();
        let w = Tensor::from_vec(vec![0.2, 0.5, 0.3, 1.0, 1.0, 1.0], &[2, 3]);
        manual_seed(5);
        let a = (w.multinomial(6, true).to_vec_i64(), w.multinomial(2, false).to_vec_i64());
        manual_seed(5);
        let b = (w.multinomial(6, true).to_vec_i64(), w.multinomial(2, false).to_vec_i64());
        assert_eq!(a, b);
        manual_seed(6);
        assert_ne!(w.multinomial(6, true).to_vec_i64(), a.0);
    }

    #[test]
    fn meta_and_empty_inputs_draw_nothing() {
        let m = Tensor::full_on(&[3, 4], 1.0, DType::F32, Device::Meta).multinomial(2, true);
        assert_eq!((m.shape(), m.dtype(), m.device()), (&[3, 2][..], DType::I64, Device::Meta));
        assert_eq!(Tensor::zeros(&[0, 4]).multinomial(2, false).shape(), &[0, 2]);
    }

    #[test]
    #[should_panic(expected = "multinomial: probability tensor contains either `inf`, `nan` or element < 0")]
    fn negative_weight_panics() {
        Tensor::from_vec(vec![0.5, -0.1], &[2]).multinomial(1, true);
    }

    #[test]
    #[should_panic(expected = "multinomial: probability tensor contains either `inf`, `nan` or element < 0")]
    fn nan_weight_panics() {
        Tensor::from_vec(vec![1.0, 0.5, f32::NAN, 1.0], &[2, 2]).multinomial(1, true);
    }

    #[test]
    #[should_panic(expected = "multinomial: invalid multinomial distribution (sum of probabilities <= 0)")]
    fn all_zero_row_panics() {
        Tensor::from_vec(vec![1.0, 0.5, 0.0, 0.0], &[2, 2]).multinomial(1, false);
    }

    #[test]
    #[should_panic(
        expected = "multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement (n_sample = 4, 3 categories)"
    )]
    fn too_many_samples_without_replacement_panics() {
        Tensor::ones(&[3]).multinomial(4, false);
    }

    #[test]
    #[should_panic(expected = "multinomial: prob_dist must be 1 or 2 dim, got shape [2, 2, 2]")]
    fn rank3_panics() {
        Tensor::ones(&[2, 2, 2]).multinomial(1, true);
    }

    #[test]
    #[should_panic(expected = "multinomial: cannot sample n_sample <= 0 samples")]
    fn zero_samples_panics() {
        Tensor::ones(&[2]).multinomial(0, true);
    }
}
