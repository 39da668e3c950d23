//! Reordering elements along dimensions: `flip` and `roll`, composed from
//! `index_select`, `narrow` and `cat` (so they run, and differentiate, on every device).

use crate::shape::{Dim, Dims};
use crate::tensor::Tensor;

impl Tensor {
    /// Reverses the order of elements along each of `dims`, `torch.flip(x, dims)`: same
    /// shape, `y[.., i, ..] = x[.., n - 1 - i, ..]` in every listed dim (negative dims count
    /// from the back). A copy, never a view; the gradient is the incoming gradient flipped
    /// the same way.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    /// assert_eq!(x.flip(&[1]).to_vec(), vec![3.0, 2.0, 1.0, 6.0, 5.0, 4.0]);
    /// assert_eq!(x.flip(&[0, -1]).to_vec(), vec![6.0, 5.0, 4.0, 3.0, 2.0, 1.0]);
    /// ```
    ///
    /// # Panics
    /// When a dim is out of range or listed twice.
    #[track_caller]
    pub fn flip(&self, dims: &[i64]) -> Tensor {
        let mut seen: Dims = Dims::new();
        for &d in dims {
            let d = d.resolve(self.rank(), "flip");
            if seen.contains(&d) {
                panic!("flip: dim {d} appears multiple times in the list of dims {dims:?}");
            }
            seen.push(d);
        }
        if self.rank() == 0 {
            return self.reshape(&[1]).flip(&[]).reshape(&[]);
        }
        // The index_select along dim 0 with the identity order, when nothing is reversed:
        // a copy, as PyTorch's flip always returns.
        let mut y = self.clone();
        let mut copied = false;
        for &d in &seen {
            let n = self.shape()[d];
            if n > 1 {
                y = y.index_select(d, &reversed(n, self));
                copied = true;
            }
        }
        if !copied {
            let n = self.shape()[0];
            y = y.index_select(0, &Tensor::from_vec_i64((0..n as i64).collect(), &[n]).to_device(self.device()));
        }
        y
    }

    /// Shifts elements along dims cyclically, `torch.roll(x, shifts, dims)`: along each
    /// `dims[k]` (in order), `y[.., (i + shifts[k]) mod n, ..] = x[.., i, ..]`. With `dims`
    /// empty, `shifts` must hold one shift, applied to the flattened tensor, whose shape is
    /// then restored. Negative shifts go the other way; the gradient is rolled back.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    /// assert_eq!(x.roll(&[1], &[1]).to_vec(), vec![3.0, 1.0, 2.0, 6.0, 4.0, 5.0]);
    /// assert_eq!(x.roll(&[-1, 1], &[1, 0]).to_vec(), vec![5.0, 6.0, 4.0, 2.0, 3.0, 1.0]);
    /// assert_eq!(x.roll(&[2], &[]).to_vec(), vec![5.0, 6.0, 1.0, 2.0, 3.0, 4.0]);
    /// ```
    ///
    /// # Panics
    /// When `shifts` and `dims` differ in length (or `dims` is empty and `shifts` does not
    /// hold exactly one shift), or a dim is out of range.
    #[track_caller]
    pub fn roll(&self, shifts: &[i64], dims: &[i64]) -> Tensor {
        if dims.is_empty() {
            if shifts.len() != 1 {
                panic!(
                    "roll: shifts and dimensions must align. shifts: {}, dims: 0 (with no dims, give one shift \
                     for the flattened tensor)",
                    shifts.len()
                );
            }
            return self.reshape(&[self.numel()]).roll(shifts, &[0]).reshape(self.shape());
        }
        if shifts.len() != dims.len() {
            panic!("roll: shifts and dimensions must align. shifts: {}, dims: {}", shifts.len(), dims.len());
        }
        let mut y = self.clone();
        let mut moved = false;
        for (&s, &d) in shifts.iter().zip(dims) {
            let d = d.resolve(self.rank(), "roll");
            let n = self.shape().get(d).copied().unwrap_or(1);
            let s = if n == 0 { 0 } else { s.rem_euclid(n as i64) as usize };
            if s != 0 {
                y = Tensor::cat(&[&y.narrow(d, n - s, s), &y.narrow(d, 0, n - s)], d);
                moved = true;
            }
        }
        if !moved {
            // Still a copy, as PyTorch's roll.
            return self.flip(&[]);
        }
        y
    }
}

/// `n - 1, n - 2, ..., 0` as an `i64` index on `like`'s device.
fn reversed(n: usize, like: &Tensor) -> Tensor {
    Tensor::from_vec_i64((0..n as i64).rev().collect(), &[n]).to_device(like.device())
}
