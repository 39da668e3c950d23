//! Reordering elements along dimensions: `flip` and `roll`, composed from
//! `index_select`, `narrow` and `cat` (so they run, and differentiate, on every device).

use crate::autograd::trace::Attr;
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
        let _op = crate::autograd::entry::enter_uncast(crate::names::FLIP, &[self], &[], || {
            vec![("dims", Attr::Ints(dims.to_vec()))]
        });
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
        // One gather per reversed dim (dims of size 0 or 1 have nothing to reverse).
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
            // Nothing reversed: the identity gather along dim 0, still a copy, as PyTorch's
            // flip always returns.
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
        let _op = crate::autograd::entry::enter_uncast(crate::names::ROLL, &[self], &[], || {
            vec![("shifts", Attr::Ints(shifts.to_vec())), ("dims", Attr::Ints(dims.to_vec()))]
        });
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
        if self.rank() == 0 {
            panic!(
                "roll: dimension {} specified, but a 0-d tensor has no dimensions (roll it with dims = [])",
                dims[0]
            );
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

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::{check_noncontig, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    fn ramp(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        t64(&(0..n).map(|i| i as f64).collect::<Vec<_>>(), shape)
    }

    #[test]
    fn flip_forward_on_each_dim_set() {
        let x = ramp(&[2, 3, 2]);
        assert_eq!(x.flip(&[0]).to_vec_f64(), vec![6., 7., 8., 9., 10., 11., 0., 1., 2., 3., 4., 5.]);
        assert_eq!(x.flip(&[1]).to_vec_f64(), vec![4., 5., 2., 3., 0., 1., 10., 11., 8., 9., 6., 7.]);
        assert_eq!(x.flip(&[-1]).to_vec_f64(), vec![1., 0., 3., 2., 5., 4., 7., 6., 9., 8., 11., 10.]);
        let all: Vec<f64> = (0..12).rev().map(|i| i as f64).collect();
        assert_eq!(x.flip(&[0, 1, 2]).to_vec_f64(), all);
        // A copy even when nothing moves.
        let same = x.flip(&[]);
        assert_eq!(same.to_vec_f64(), x.to_vec_f64());
        assert!(!std::sync::Arc::ptr_eq(&same.storage_arc(), &x.storage_arc()));
        let i = Tensor::from_vec_i64(vec![1, 2, 3], &[3]);
        assert_eq!(i.flip(&[0]).to_vec_i64(), vec![3, 2, 1]);
        assert_eq!(t64(&[4.0], &[]).flip(&[0]).item(), 4.0);
    }

    #[test]
    fn roll_forward_with_dims_and_flattened() {
        let x = ramp(&[3, 4]);
        assert_eq!(x.roll(&[1], &[0]).to_vec_f64(), vec![8., 9., 10., 11., 0., 1., 2., 3., 4., 5., 6., 7.]);
        assert_eq!(x.roll(&[-1], &[1]).to_vec_f64(), vec![1., 2., 3., 0., 5., 6., 7., 4., 9., 10., 11., 8.]);
        assert_eq!(x.roll(&[5], &[1]).to_vec_f64(), x.roll(&[1], &[1]).to_vec_f64(), "shifts wrap");
        assert_eq!(x.roll(&[2, 1], &[1, 0]).to_vec_f64(), x.roll(&[1], &[0]).roll(&[2], &[1]).to_vec_f64());
        let flat = x.roll(&[-3], &[]);
        assert_eq!(flat.shape(), &[3, 4]);
        assert_eq!(flat.to_vec_f64(), vec![3., 4., 5., 6., 7., 8., 9., 10., 11., 0., 1., 2.]);
        let same = x.roll(&[4], &[1]);
        assert_eq!(same.to_vec_f64(), x.to_vec_f64());
        assert!(!std::sync::Arc::ptr_eq(&same.storage_arc(), &x.storage_arc()), "a copy");
        assert_eq!(Tensor::zeros(&[0, 2]).roll(&[1], &[0]).shape(), &[0, 2]);
    }

    #[test]
    fn flip_and_roll_backward_move_the_gradient_back() {
        let x = leaf(&[0.5, -1.0, 2.0, 0.25], &[2, 2]);
        let w = t64(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
        (x.flip(&[1]) * &w).exp().mean().backward();
        let y = [-1.0, 0.5, 0.25, 2.0];
        let g: Vec<f64> = (0..4).map(|i| (y[i] * (i + 1) as f64).exp() * (i + 1) as f64 / 4.0).collect();
        assert_eq!(grad(&x), vec![g[1], g[0], g[3], g[2]]);
        let x = leaf(&[0.5, -1.0, 2.0], &[3]);
        (x.roll(&[1], &[]) * t64(&[1.0, 2.0, 3.0], &[3])).sum().backward();
        assert_eq!(grad(&x), vec![2.0, 3.0, 1.0]);
    }

    #[test]
    fn flip_and_roll_gradcheck_views_and_meta() {
        let x = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4, -0.15, 0.9, 1.6, -2.1, 0.05, 0.75], &[2, 3, 2]);
        gradcheck(|t| t[0].flip(&[0, 2]).exp(), std::slice::from_ref(&x)).unwrap();
        gradcheck(|t| t[0].roll(&[1, -2], &[1, 2]).sin(), std::slice::from_ref(&x)).unwrap();
        gradcheck(|t| t[0].roll(&[7], &[]), std::slice::from_ref(&x)).unwrap();
        check_noncontig(|t| t[0].flip(&[1]), std::slice::from_ref(&x));
        check_noncontig(|t| t[0].roll(&[2], &[1]), std::slice::from_ref(&x));
        let m = Tensor::full_on(&[2, 3], 0.0, DType::F32, Device::Meta);
        assert_eq!(m.flip(&[0, 1]).shape(), &[2, 3]);
        assert_eq!(m.roll(&[1], &[]).device(), Device::Meta);
    }

    #[test]
    #[should_panic(expected = "flip: dim 0 appears multiple times in the list of dims [0, -2]")]
    fn flip_with_a_repeated_dim_panics() {
        Tensor::zeros(&[2, 3]).flip(&[0, -2]);
    }

    #[test]
    #[should_panic(expected = "roll: shifts and dimensions must align. shifts: 2, dims: 1")]
    fn roll_with_unmatched_lengths_panics() {
        Tensor::zeros(&[2, 3]).roll(&[1, 2], &[0]);
    }

    #[test]
    #[should_panic(expected = "roll: shifts and dimensions must align. shifts: 2, dims: 0")]
    fn roll_flattened_needs_one_shift() {
        Tensor::zeros(&[2, 3]).roll(&[1, 2], &[]);
    }

    #[test]
    #[should_panic(expected = "flip: dimension 2 out of range for a tensor of rank 2")]
    fn flip_dim_out_of_range_panics() {
        Tensor::zeros(&[2, 3]).flip(&[2]);
    }

    #[test]
    #[should_panic(expected = "roll: dimension 0 specified, but a 0-d tensor has no dimensions")]
    fn roll_refuses_a_dim_of_a_0d_tensor() {
        Tensor::scalar(1.0).roll(&[1], &[0]);
    }
}
