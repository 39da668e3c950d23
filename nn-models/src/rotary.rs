//! Rotary position embeddings (RoPE) as Llama applies them: each head's vector is split in
//! halves `(x1, x2)` and rotated by position-dependent angles,
//! `x * cos + rotate_half(x) * sin` with `rotate_half(x) = (-x2, x1)`.

use nn_core::{DType, Device, Tensor};

/// The rotation frequencies of one head size: `theta^(-2i/d)` for `i < d/2`.
#[derive(Clone, Debug, PartialEq)]
pub struct Rotary {
    inv_freq: Vec<f32>,
}

impl Rotary {
    /// Frequencies for heads of `head_dim` (even) with base `theta`, computed in f32 as
    /// transformers does.
    ///
    /// # Panics
    /// When `head_dim` is odd.
    pub fn new(head_dim: usize, theta: f64) -> Self {
        assert!(head_dim.is_multiple_of(2), "Rotary: the head size {head_dim} must be even");
        let inv_freq = (0..head_dim / 2).map(|i| 1.0 / (theta as f32).powf((2 * i) as f32 / head_dim as f32)).collect();
        Rotary { inv_freq }
    }

    /// `cos` and `sin` of positions `start..start + len`, `[len, head_dim]` each (the
    /// frequencies repeated over both halves), in `dtype` on `device`.
    pub fn cos_sin(&self, start: usize, len: usize, dtype: DType, device: Device) -> (Tensor, Tensor) {
        self.tables(start..start + len, &[len, self.head_dim()], dtype, device)
    }

    /// The cosines and sines at given positions: `positions` holds `n * l` of them, row
    /// by row (a padded batch's rows start at different positions); `[n, 1, l, head_dim]`,
    /// broadcast over the heads.
    pub fn cos_sin_at(
        &self,
        positions: &[usize],
        n: usize,
        l: usize,
        dtype: DType,
        device: Device,
    ) -> (Tensor, Tensor) {
        assert_eq!(positions.len(), n * l, "Rotary: {} positions for {n} rows of {l}", positions.len());
        self.tables(positions.iter().copied(), &[n, 1, l, self.head_dim()], dtype, device)
    }

    fn head_dim(&self) -> usize {
        2 * self.inv_freq.len()
    }

    /// `cos` and `sin` of `positions`' angles (the frequencies repeated over both halves),
    /// shaped `shape`.
    fn tables(
        &self,
        positions: impl Iterator<Item = usize>,
        shape: &[usize],
        dtype: DType,
        device: Device,
    ) -> (Tensor, Tensor) {
        let half = self.inv_freq.len();
        let angles: Vec<f32> =
            positions.flat_map(|p| (0..2 * half).map(move |j| (p as f32) * self.inv_freq[j % half])).collect();
        let t = |v: Vec<f32>| Tensor::from_vec(v, shape).to_dtype(dtype).to_device(device);
        (t(angles.iter().map(|a| a.cos()).collect()), t(angles.iter().map(|a| a.sin()).collect()))
    }
}

/// Rotates `x` (`[N, H, L, D]`) by `cos`/`sin` (`[L, D]`, or `[N, 1, L, D]` per row).
pub fn apply_rotary(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let d = x.shape()[3];
    let (x1, x2) = (x.narrow(3, 0, d / 2), x.narrow(3, d / 2, d / 2));
    let rotated = Tensor::cat(&[&x2.neg(), &x1], 3);
    &(x * cos) + &(&rotated * sin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_zero_is_the_identity_and_rotations_keep_norms() {
        let r = Rotary::new(4, 10000.0);
        let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 0.5, -1.0, 2.0, 0.0], &[1, 1, 2, 4]);
        let (cos, sin) = r.cos_sin(0, 2, DType::F32, Device::Cpu);
        let y = apply_rotary(&x, &cos, &sin).to_vec();
        assert_eq!(&y[..4], &[1.0, 2.0, 3.0, 4.0]);
        // Position 1, pair (x0, x2) rotated by angle 1: (x0 cos 1 - x2 sin 1, x2 cos 1 + x0 sin 1).
        let (c, s) = (1f32.cos(), 1f32.sin());
        assert!((y[4] - (0.5 * c - 2.0 * s)).abs() < 1e-6 && (y[6] - (2.0 * c + 0.5 * s)).abs() < 1e-6);
        let norm = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>();
        assert!((norm(&y[4..]) - norm(&[0.5, -1.0, 2.0, 0.0])).abs() < 1e-5);
    }
}
