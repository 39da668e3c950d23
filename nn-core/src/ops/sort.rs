//! Sorting along one dimension: `sort`, `argsort` and `topk`. The values' gradient is
//! scattered back to the positions they came from.

use std::sync::Arc;

use smallvec::smallvec;

use super::cumulative::lines_of;
use crate::autograd::trace::{self, Attr};
use crate::autograd::{op_result, Grads};
use crate::backend::SortSpec;
use crate::shape::{Dim, Dims, Layout};
use crate::tensor::Tensor;

impl Tensor {
    /// Sorts along `dim`, `torch.sort(x, dim, descending, stable=True)`: `(values,
    /// indices)`, both of the input's shape, with `values = x.gather(dim, indices)` and
    /// `indices` (`i64`) the positions along `dim`. The sort is stable (equal elements
    /// keep their order, in both directions) and NaN sorts above every number. Any dtype;
    /// the gradient of the values goes back to the positions in `indices`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![3.0, 1.0, 2.0, 1.0], &[4]);
    /// let (v, i) = x.sort(0, false);
    /// assert_eq!(v.to_vec(), vec![1.0, 1.0, 2.0, 3.0]);
    /// assert_eq!(i.to_vec_i64(), vec![1, 3, 2, 0]);
    /// assert_eq!(x.sort(-1, true).1.to_vec_i64(), vec![0, 2, 1, 3]);
    /// ```
    ///
    /// # Panics
    /// When `dim` is out of range.
    #[track_caller]
    pub fn sort<D: Dim>(&self, dim: D, descending: bool) -> (Tensor, Tensor) {
        let d = dim.resolve(self.rank(), "sort");
        let _op = crate::autograd::entry::enter_uncast(crate::names::SORT, &[self], &[], || {
            vec![("dim", trace::int(d)), ("descending", Attr::Bool(descending))]
        });
        let n = self.shape().get(d).copied().unwrap_or(1);
        sort_lines("sort", self, d, SortSpec { k: n, descending, sorted: true })
    }

    /// The indices that sort along `dim`: [`sort`](Tensor::sort)'s second result
    /// (`torch.argsort(x, dim, descending, stable=True)`), `i64` of the input's shape.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![0.5, -1.0, 2.0, 9.0, 7.0, 8.0], &[2, 3]);
    /// assert_eq!(x.argsort(1, false).to_vec_i64(), vec![1, 0, 2, 1, 2, 0]);
    /// assert_eq!(x.argsort(0, true).to_vec_i64(), vec![1, 1, 1, 0, 0, 0]);
    /// ```
    ///
    /// # Panics
    /// When `dim` is out of range.
    #[track_caller]
    pub fn argsort<D: Dim>(&self, dim: D, descending: bool) -> Tensor {
        let d = dim.resolve(self.rank(), "argsort");
        let _op = crate::autograd::entry::enter_uncast(crate::names::ARGSORT, &[self], &[], || {
            vec![("dim", trace::int(d)), ("descending", Attr::Bool(descending))]
        });
        let n = self.shape().get(d).copied().unwrap_or(1);
        sort_lines("argsort", &self.detached_for_keeping(), d, SortSpec { k: n, descending, sorted: true }).1
    }

    /// The `k` largest (or smallest, `largest = false`) elements along `dim`,
    /// `torch.topk(x, k, dim, largest, sorted)`: `(values, indices)` of the input's shape
    /// with `dim` of size `k`, `indices` (`i64`) their positions along `dim`. With `sorted`
    /// they come largest first (smallest first when `!largest`); otherwise in their input
    /// order (PyTorch leaves that order unspecified). Among equal elements the earlier one
    /// is taken first; NaN counts as the largest. The gradient of the values goes back to
    /// the positions in `indices`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 5.0, 2.0, 4.0, 0.0, 3.0], &[2, 3]);
    /// let (v, i) = x.topk(2, 1, true, true);
    /// assert_eq!(v.to_vec(), vec![5.0, 2.0, 4.0, 3.0]);
    /// assert_eq!(i.to_vec_i64(), vec![1, 2, 0, 2]);
    /// assert_eq!(x.topk(1, 0, false, true).0.to_vec(), vec![1.0, 0.0, 2.0]);
    /// assert_eq!(x.topk(2, 1, true, false).1.to_vec_i64(), vec![1, 2, 0, 2]);
    /// ```
    ///
    /// # Panics
    /// When `dim` is out of range or `k` exceeds the size of `dim`.
    #[track_caller]
    pub fn topk<D: Dim>(&self, k: usize, dim: D, largest: bool, sorted: bool) -> (Tensor, Tensor) {
        let d = dim.resolve(self.rank(), "topk");
        let _op = crate::autograd::entry::enter_uncast(crate::names::TOPK, &[self], &[], || {
            vec![
                ("k", trace::int(k)),
                ("dim", trace::int(d)),
                ("largest", Attr::Bool(largest)),
                ("sorted", Attr::Bool(sorted)),
            ]
        });
        let n = self.shape().get(d).copied().unwrap_or(1);
        if k > n {
            panic!(
                "topk: selected index k out of range: k = {k} but dimension {d} has size {n} (input of shape {:?})",
                self.shape()
            );
        }
        sort_lines("topk", self, d, SortSpec { k, descending: largest, sorted })
    }
}

/// The first `spec.k` of each line of `x` along `d` after sorting, with the values'
/// backward.
fn sort_lines(op: &'static str, x: &Tensor, d: usize, spec: SortSpec) -> (Tensor, Tensor) {
    let mut shape: Dims = x.shape().into();
    if let Some(s) = shape.get_mut(d) {
        *s = spec.k;
    } else if spec.k == 0 {
        // A 0-d input has one element: `k = 0` keeps none, as a 1-D empty result.
        shape.push(0);
    }
    let (values, indices) = x.storage_arc().sort(x.layout(), lines_of(x.shape(), d), spec);
    let indices = Tensor::from_storage(indices, &shape);
    let values = op_result(op, Arc::new(values), Layout::contiguous(&shape), &[x], || {
        // Its own handle (as every saved value): the caller's `indices` may be written in
        // place (`add_` to make them global ids), which must not move the gradient.
        let (index, in_shape): (Tensor, Dims) = (indices.saved_for_backward(), x.shape().into());
        move |g: &Tensor, _: &[bool]| -> Grads {
            let zero = Tensor::full_on(&in_shape, 0.0, g.dtype(), g.device());
            if in_shape.is_empty() {
                // A 0-d input: its one element was kept (k = 1) or not (k = 0).
                return smallvec![Some(if g.numel() == 1 { g.reshape(&[]) } else { zero })];
            }
            smallvec![Some(zero.scatter_add(d, &index, g))]
        }
    });
    (values, indices)
}

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    /// 2 x 4 with a tie in row 1.
    const X: [f64; 8] = [0.3, -1.2, 2.0, -0.7, 1.1, 0.4, 1.1, -2.5];

    #[test]
    fn sort_forward_both_directions_and_dims() {
        let x = t64(&X, &[2, 4]);
        let (v, i) = x.sort(1, false);
        assert_eq!(v.to_vec_f64(), vec![-1.2, -0.7, 0.3, 2.0, -2.5, 0.4, 1.1, 1.1]);
        assert_eq!(i.to_vec_i64(), vec![1, 3, 0, 2, 3, 1, 0, 2]);
        assert_eq!(i.dtype(), DType::I64);
        let (v, i) = x.sort(-1, true);
        assert_eq!(v.to_vec_f64(), vec![2.0, 0.3, -0.7, -1.2, 1.1, 1.1, 0.4, -2.5]);
        assert_eq!(i.to_vec_i64(), vec![2, 0, 3, 1, 0, 2, 1, 3], "stable: the earlier 1.1 first");
        let (v, i) = x.sort(0, true);
        assert_eq!(v.to_vec_f64(), vec![1.1, 0.4, 2.0, -0.7, 0.3, -1.2, 1.1, -2.5]);
        assert_eq!(i.to_vec_i64(), vec![1, 1, 0, 0, 0, 0, 1, 1]);
        assert_eq!(x.argsort(1, true).to_vec_i64(), vec![2, 0, 3, 1, 0, 2, 1, 3]);
        // Values are the input gathered at the indices.
        assert_eq!(x.gather(1, &x.argsort(1, false)).to_vec_f64(), x.sort(1, false).0.to_vec_f64());
    }

    #[test]
    fn sort_puts_nan_above_everything_and_sorts_integers() {
        let x = t64(&[1.0, f64::NAN, -3.0, f64::INFINITY], &[4]);
        let (v, i) = x.sort(0, false);
        assert_eq!(i.to_vec_i64(), vec![2, 0, 3, 1]);
        assert!(v.to_vec_f64()[3].is_nan());
        assert_eq!(x.sort(0, true).1.to_vec_i64(), vec![1, 3, 0, 2]);
        assert_eq!(x.topk(1, 0, true, true).1.to_vec_i64(), vec![1]);
        let big = Tensor::from_vec_i64(vec![(1 << 53) + 1, 1 << 53, -5], &[3]);
        let (v, i) = big.sort(0, false);
        assert_eq!((v.to_vec_i64(), i.to_vec_i64()), (vec![-5, 1 << 53, (1 << 53) + 1], vec![2, 1, 0]));
        let b = Tensor::from_vec_bool(vec![true, false, true], &[3]);
        assert_eq!(b.argsort(0, false).to_vec_i64(), vec![1, 0, 2]);
    }

    #[test]
    fn topk_forward_largest_smallest_and_unsorted() {
        let x = t64(&X, &[2, 4]);
        let (v, i) = x.topk(2, 1, true, true);
        assert_eq!((v.shape(), v.to_vec_f64()), (&[2, 2][..], vec![2.0, 0.3, 1.1, 1.1]));
        assert_eq!(i.to_vec_i64(), vec![2, 0, 0, 2]);
        let (v, i) = x.topk(3, -1, false, true);
        assert_eq!(v.to_vec_f64(), vec![-1.2, -0.7, 0.3, -2.5, 0.4, 1.1]);
        assert_eq!(i.to_vec_i64(), vec![1, 3, 0, 3, 1, 0]);
        // Unsorted: the same elements in their input order.
        let (v, i) = x.topk(3, 1, true, false);
        assert_eq!(i.to_vec_i64(), vec![0, 2, 3, 0, 1, 2]);
        assert_eq!(v.to_vec_f64(), vec![0.3, 2.0, -0.7, 1.1, 0.4, 1.1]);
        let (v, i) = x.topk(1, 0, true, true);
        assert_eq!((v.shape(), i.to_vec_i64()), (&[1, 4][..], vec![1, 1, 0, 0]));
        let (v, i) = x.topk(0, 1, true, true);
        assert_eq!((v.shape(), i.shape()), (&[2, 0][..], &[2, 0][..]));
    }

    #[test]
    fn rank0_empty_noncontiguous_and_meta_inputs() {
        let s = t64(&[2.5], &[]);
        let (v, i) = s.sort(0, false);
        assert_eq!((v.shape(), v.item(), i.to_vec_i64()), (&[] as &[usize], 2.5, vec![0]));
        let (v, _) = s.topk(1, -1, true, true);
        assert_eq!((v.shape(), v.item()), (&[] as &[usize], 2.5));
        assert_eq!(Tensor::zeros(&[0, 3]).sort(0, false).0.shape(), &[0, 3]);
        let x = t64(&X, &[2, 4]);
        check_noncontig(|t| t[0].sort(1, true).0, std::slice::from_ref(&x));
        check_noncontig(|t| t[0].topk(2, 0, false, true).0, std::slice::from_ref(&x));
        let p = x.t();
        assert_eq!(p.sort(1, false).1.to_vec_i64(), p.contiguous().sort(1, false).1.to_vec_i64());
        let m = Tensor::full_on(&[2, 5], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        let (v, i) = m.topk(3, 1, true, true);
        assert_eq!((v.shape(), i.dtype(), i.device()), (&[2, 3][..], DType::I64, Device::Meta));
        v.sum().backward();
        assert_eq!(m.grad().unwrap().shape(), &[2, 5]);
    }

    #[test]
    fn values_backward_scatters_to_the_source_positions() {
        let x = leaf(&X, &[2, 4]);
        let (v, _) = x.topk(2, 1, true, true); // [2.0, 0.3], [1.1, 1.1] from (2, 0), (0, 2)
        v.exp().mean().backward();
        let e = |a: f64| a.exp() / 4.0;
        assert_close64(&grad(&x), &[e(0.3), 0.0, e(2.0), 0.0, e(1.1), 0.0, e(1.1), 0.0], 1e-15);
        let x = leaf(&X, &[2, 4]);
        let (v, _) = x.sort(0, false);
        (v * t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[2, 4])).sum().backward();
        // Column 0 (0.3 < 1.1): 0.3 gets weight 1, 1.1 weight 5; columns 2 and 3 swap.
        assert_eq!(grad(&x), vec![1.0, 2.0, 7.0, 8.0, 5.0, 6.0, 3.0, 4.0]);
    }

    #[test]
    fn sort_and_topk_gradcheck() {
        let x = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4, -0.15, 0.9, 1.6, -2.1, 0.05, 0.75], &[2, 3, 2]);
        for d in 0..3 {
            gradcheck(|t| t[0].sort(d, false).0, std::slice::from_ref(&x)).unwrap();
            gradcheck(|t| t[0].sort(d, true).0.exp(), std::slice::from_ref(&x)).unwrap();
            gradcheck(|t| t[0].topk(1, d, true, true).0, std::slice::from_ref(&x)).unwrap();
            gradcheck(|t| t[0].topk(2, d, false, false).0.sin(), std::slice::from_ref(&x)).unwrap();
        }
    }

    #[test]
    #[should_panic(
        expected = "topk: selected index k out of range: k = 5 but dimension 1 has size 4 (input of shape [2, 4])"
    )]
    fn topk_with_k_above_the_size_names_both() {
        Tensor::zeros(&[2, 4]).topk(5, 1, true, true);
    }

    #[test]
    #[should_panic(expected = "sort: dimension -3 out of range for a tensor of rank 2 (expected -2..=1)")]
    fn sort_dim_out_of_range_panics() {
        Tensor::zeros(&[2, 4]).sort(-3, false);
    }
}
