//! Dropout with inverted scaling: kept elements are multiplied by `1 / (1 - p)` so the
//! expected value is unchanged, and evaluation mode is the identity.

use rand::Rng;

use crate::random::with_rng;
use crate::storage::CpuStorage;
use crate::tensor::Tensor;

impl Tensor {
    /// Zeroes each element with probability `p` (drawn from the global generator) and
    /// scales the rest by `1 / (1 - p)`; returns the input unchanged when `training` is
    /// false or `p == 0`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::ones(&[1000]);
    /// let y = x.dropout(0.5, true).to_vec();
    /// assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
    /// assert_eq!(x.dropout(0.5, false).to_vec(), x.to_vec());
    /// ```
    ///
    /// # Panics
    /// When `p` is outside `[0, 1]`.
    #[track_caller]
    pub fn dropout(&self, p: f64, training: bool) -> Tensor {
        if !(0.0..=1.0).contains(&p) {
            panic!("dropout: probability has to be between 0 and 1, but got {p}");
        }
        if !training || p == 0.0 {
            return self.clone();
        }
        super::check_float("dropout", self);
        if self.device() == crate::Device::Meta {
            return self * 1.0;
        }
        if p == 1.0 {
            return self * 0.0;
        }
        let keep = 1.0 - p;
        let scale = 1.0 / keep;
        let n = self.numel();
        let mask: Vec<f64> = with_rng(|r| (0..n).map(|_| if r.random::<f64>() < keep { scale } else { 0.0 }).collect());
        let mask = Tensor::from_cpu(CpuStorage::F64(mask), self.shape()).to_dtype(self.dtype());
        self * &mask
    }
}
