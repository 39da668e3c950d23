//! Sampling category indices from weights: `multinomial`.

use super::check_float;
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
