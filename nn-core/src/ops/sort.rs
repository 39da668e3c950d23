//! Sorting along one dimension: `sort`, `argsort` and `topk`. The values' gradient is
//! scattered back to the positions they came from.

use std::sync::Arc;

use smallvec::smallvec;

use super::cumulative::lines_of;
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
        let n = self.shape().get(d).copied().unwrap_or(1);
        sort_lines("argsort", &self.detach(), d, SortSpec { k: n, descending, sorted: true }).1
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
        let (index, in_shape): (Tensor, Dims) = (indices.clone(), x.shape().into());
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
