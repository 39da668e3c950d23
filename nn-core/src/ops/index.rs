//! Indexing ops: `index_select`, `gather`, and their adjoints `index_add` and
//! `scatter_add`; `embedding` lookup is built on `index_select`.

use std::sync::Arc;

use smallvec::smallvec;

use super::check_same;
use crate::autograd::{op_result, Grads};
use crate::backend::IndexArg;
use crate::dtype::DType;
use crate::shape::{Dim, Dims, Layout};
use crate::tensor::Tensor;

/// Panics unless `index` holds `i64` values (their range is checked by the backend, which
/// reads them).
#[track_caller]
fn check_index_dtype(op: &str, index: &Tensor) {
    if index.dtype() != DType::I64 {
        panic!("{op}: index must be an i64 tensor, got {}", index.dtype());
    }
}

impl Tensor {
    /// Selects entries `index[0], index[1], ...` along `dim` (`index`: 1-D `i64`).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::arange(0.0, 6.0, 1.0).reshape(&[3, 2]);
    /// let i = Tensor::from_vec_i64(vec![2, 0, 2], &[3]);
    /// assert_eq!(x.index_select(0, &i).to_vec(), vec![4.0, 5.0, 0.0, 1.0, 4.0, 5.0]);
    /// ```
    #[track_caller]
    pub fn index_select<D: Dim>(&self, dim: D, index: &Tensor) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::INDEX_SELECT, &[self, index], &[], || {
            vec![("dim", crate::autograd::trace::int(dim.resolve(self.rank().max(1), "index_select")))]
        });
        const OP: &str = crate::names::INDEX_SELECT;
        if index.rank() > 1 {
            panic!("{OP}: index must be 1-D, got shape {:?}", index.shape());
        }
        if self.rank() == 0 && index.numel() != 1 {
            // Read as a `[1]` tensor, index [0, 0] would give two values; PyTorch refuses.
            panic!("{OP}: index to a 0-d tensor can have only 1 value, got {}", index.numel());
        }
        if self.rank() == 0 {
            // A 0-d input is read as `[1]` and the result is 0-d again, as PyTorch's.
            let _ = dim.resolve(1, OP);
            return self.reshape(&[1]).index_select(0, index).reshape(&[]);
        }
        let x = self.clone();
        let d = dim.resolve(x.rank(), OP);
        let mut shape: Dims = x.shape().into();
        shape[d] = index.numel();
        crate::shape::numel_of(OP, &shape);
        if self.device() != index.device() {
            panic!("{OP}: input on {} but index on {}", self.device(), index.device());
        }
        check_index_dtype(OP, index);
        let indices = IndexArg { op: OP, dim: d, index: &index.storage_arc(), layout: index.layout() };
        let storage = x.storage_arc().index_select(x.layout(), indices);
        op_result(OP, Arc::new(storage), Layout::contiguous(&shape), &[&x], || {
            let index = index.saved_for_backward();
            let in_shape: Dims = x.shape().into();
            move |g: &Tensor, _: &[bool]| -> Grads {
                let z = Tensor::full_on(&in_shape, 0.0, g.dtype(), g.device());
                smallvec![Some(z.index_add(d, &index, g))]
            }
        })
    }

    /// Returns `self` with `source` slices added at `index` along `dim` (functional
    /// `index_add_`): `out[.., index[j], ..] += source[.., j, ..]`.
    #[track_caller]
    pub fn index_add<D: Dim>(&self, dim: D, index: &Tensor, source: &Tensor) -> Tensor {
        if self.rank() == 0 {
            // PyTorch reads a 0-d input (and a 0-d source) as `[1]`; the result is 0-d.
            let _ = dim.resolve(1, crate::names::INDEX_ADD);
            let source = if source.rank() == 0 { source.reshape(&[1usize]) } else { source.clone() };
            return self.reshape(&[1usize]).index_add(0usize, index, &source).reshape(&[] as &[usize]);
        }
        let _op = crate::autograd::entry::enter_uncast(crate::names::INDEX_ADD, &[self, index, source], &[], Vec::new);
        const OP: &str = crate::names::INDEX_ADD;
        check_same(OP, &[self, source]);
        let d = dim.resolve(self.rank(), OP);
        let mut expect: Dims = self.shape().into();
        expect[d] = index.numel();
        if source.shape() != expect.as_slice() || index.rank() > 1 {
            panic!(
                "{OP}: source of shape {:?} and index of shape {:?} do not fit input of shape {:?} along dim {d} (source should be {:?})",
                source.shape(),
                index.shape(),
                self.shape(),
                expect.as_slice()
            );
        }
        check_index_dtype(OP, index);
        let indices = IndexArg { op: OP, dim: d, index: &index.storage_arc(), layout: index.layout() };
        let storage = self.storage_arc().index_add(self.layout(), (&source.storage_arc(), source.layout()), indices);
        op_result(OP, Arc::new(storage), Layout::contiguous(self.shape()), &[self, source], || {
            let index = index.saved_for_backward();
            move |g: &Tensor, needs: &[bool]| -> Grads {
                smallvec![needs[0].then(|| g.clone()), needs[1].then(|| g.index_select(d, &index))]
            }
        })
    }

    /// `out[i][j][k] = self[i][index[i][j][k]][k]` for `dim = 1` (and likewise for other
    /// dims): picks one entry per index position. `index` has the rank of `self`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    /// let i = Tensor::from_vec_i64(vec![1, 0], &[2, 1]);
    /// assert_eq!(x.gather(1, &i).to_vec(), vec![2.0, 3.0]);
    /// ```
    #[track_caller]
    pub fn gather<D: Dim>(&self, dim: D, index: &Tensor) -> Tensor {
        if self.rank() == 0 && index.rank() <= 1 {
            // A 0-d input is read as `[1]`; the result has the index's shape, as PyTorch's.
            let _ = dim.resolve(1, "gather");
            return self.reshape(&[1]).gather(0, &index.reshape(&[index.numel()])).reshape(index.shape());
        }
        let _op = crate::autograd::entry::enter_uncast(crate::names::GATHER, &[self, index], &[], || {
            vec![("dim", crate::autograd::trace::int(dim.resolve(self.rank().max(1), "gather")))]
        });
        const OP: &str = crate::names::GATHER;
        let d = dim.resolve(self.rank().max(1), OP);
        check_index_shape(OP, self, index, d);
        let indices = IndexArg { op: OP, dim: d, index: &index.storage_arc(), layout: index.layout() };
        let storage = self.storage_arc().gather(self.layout(), indices);
        op_result(OP, Arc::new(storage), Layout::contiguous(index.shape()), &[self], || {
            let index = index.saved_for_backward();
            let in_shape: Dims = self.shape().into();
            move |g: &Tensor, _: &[bool]| -> Grads {
                let z = Tensor::full_on(&in_shape, 0.0, g.dtype(), g.device());
                smallvec![Some(z.scatter_add(d, &index, g))]
            }
        })
    }

    /// Returns `self` with `src[p]` added at position `p` with dim `dim` replaced by
    /// `index[p]` (functional `scatter_add_`); the adjoint of [`gather`](Tensor::gather).
    #[track_caller]
    pub fn scatter_add<D: Dim>(&self, dim: D, index: &Tensor, src: &Tensor) -> Tensor {
        // On the GPU's promote list (PyTorch's CUDA list): `self` and `src` to the widest.
        // On the GPU's promote list; `index` (i64) is never cast.
        let again = |c: &[Option<&crate::Tensor>]| {
            c[0].expect("present").scatter_add(dim, c[1].expect("present"), c[2].expect("present"))
        };
        let _op = crate::autograd::entry::op_entry!(
            crate::names::SCATTER_ADD,
            [self, index, src],
            attrs = Vec::new,
            again = again
        );
        const OP: &str = crate::names::SCATTER_ADD;
        check_same(OP, &[self, src]);
        let d = dim.resolve(self.rank().max(1), OP);
        check_index_shape(OP, self, index, d);
        if src.shape() != index.shape() {
            panic!("{OP}: src of shape {:?} must match index of shape {:?}", src.shape(), index.shape());
        }
        let indices = IndexArg { op: OP, dim: d, index: &index.storage_arc(), layout: index.layout() };
        let storage = self.storage_arc().scatter_add(self.layout(), (&src.storage_arc(), src.layout()), indices);
        op_result(OP, Arc::new(storage), Layout::contiguous(self.shape()), &[self, src], || {
            let index = index.saved_for_backward();
            move |g: &Tensor, needs: &[bool]| -> Grads {
                smallvec![needs[0].then(|| g.clone()), needs[1].then(|| g.gather(d, &index))]
            }
        })
    }

    /// Embedding lookup: rows of `weight` (`[num_embeddings, dim]`) picked by `indices`
    /// (`i64`, any shape); the output has shape `indices.shape() + [dim]`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let w = Tensor::arange(0.0, 6.0, 1.0).reshape(&[3, 2]);
    /// let ids = Tensor::from_vec_i64(vec![2, 0], &[1, 2]);
    /// let e = Tensor::embedding(&ids, &w);
    /// assert_eq!(e.shape(), &[1, 2, 2]);
    /// assert_eq!(e.to_vec(), vec![4.0, 5.0, 0.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn embedding(indices: &Tensor, weight: &Tensor) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::EMBEDDING, &[indices, weight], &[], Vec::new);
        if weight.rank() != 2 {
            panic!("embedding: weight must be 2-D [num_embeddings, embedding_dim], got shape {:?}", weight.shape());
        }
        if indices.dtype() != DType::I64 {
            panic!("embedding: indices must be an i64 tensor, got {}", indices.dtype());
        }
        let n = weight.shape()[0];
        if let Some(bad) = indices.storage_arc().first_outside(indices.layout(), n, "embedding") {
            panic!("embedding: index {bad} is out of range for {n} embeddings");
        }
        let flat = indices.reshape(&[indices.numel()]);
        let mut shape: Dims = indices.shape().into();
        shape.push(weight.shape()[1]);
        weight.index_select(0, &flat).reshape(&shape)
    }
}

#[track_caller]
fn check_index_shape(op: &str, x: &Tensor, index: &Tensor, d: usize) {
    if index.dtype() != DType::I64 {
        panic!("{op}: index must be an i64 tensor, got {}", index.dtype());
    }
    let ok = index.rank() == x.rank()
        && index.shape().iter().zip(x.shape()).enumerate().all(|(k, (&i, &s))| k == d || i <= s);
    if !ok {
        panic!(
            "{op}: index of shape {:?} does not fit input of shape {:?} (same rank, and no larger outside dim {d})",
            index.shape(),
            x.shape()
        );
    }
    if index.device() != x.device() {
        panic!("{op}: input on {} but index on {}", x.device(), index.device());
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::{check_noncontig, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    /// A 0-d input reads as `[1]` (PyTorch: `torch.tensor(1.).index_add(0, torch.tensor([0]),
    /// torch.tensor(2.), alpha=1)` is `tensor(3.)`), and its gradient reaches both tensors.
    #[test]
    fn index_add_of_a_0d_input_is_0d() {
        let x = leaf(&[1.0], &[]);
        let s = leaf(&[2.0], &[]);
        let y = x.index_add(0, &Tensor::from_vec_i64(vec![0], &[1]), &s);
        assert_eq!((y.shape().to_vec(), y.to_vec_f64()), (vec![], vec![3.0]));
        (&y * 5.0).sum().backward();
        assert_eq!((grad(&x), grad(&s)), (vec![5.0], vec![5.0]));
    }

    /// The gradient of a stack of empty tensors reads views past the end of an empty buffer.
    #[test]
    fn stack_of_empty_tensors_has_a_backward() {
        let a = Tensor::zeros(&[0, 1, 0]).to_dtype(DType::F64).requires_grad_(true);
        let b = Tensor::zeros(&[0, 1, 0]).to_dtype(DType::F64).requires_grad_(true);
        let y = Tensor::stack(&[&a, &b], -1);
        assert_eq!(y.shape(), [0, 1, 0, 2]);
        y.sum().backward();
        assert_eq!(a.grad().unwrap().shape(), [0, 1, 0]);
    }

    fn ramp(shape: &[usize]) -> Vec<f64> {
        (0..shape.iter().product::<usize>()).map(|i| i as f64).collect()
    }

    /// `[[0, 1], [2, 3], [4, 5]]`, requiring grad.
    fn x32() -> Tensor {
        leaf(&ramp(&[3, 2]), &[3, 2])
    }

    /// Weights `1, 2, 3, ...` shaped like `y`.
    fn w(y: &Tensor) -> Tensor {
        t64(&(1..=y.numel()).map(|v| v as f64).collect::<Vec<_>>(), y.shape())
    }

    fn idx(v: &[i64], shape: &[usize]) -> Tensor {
        Tensor::from_vec_i64(v.to_vec(), shape)
    }

    fn g32() -> Tensor {
        t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4], &[3, 2])
    }

    #[test]
    fn index_select_forward() {
        let x = x32();
        let y = x.index_select(0, &idx(&[2, 0, 2], &[3]));
        assert_eq!((y.shape(), y.to_vec_f64()), (&[3, 2][..], vec![4.0, 5.0, 0.0, 1.0, 4.0, 5.0]));
        let c = x.index_select(1, &idx(&[1], &[1]));
        assert_eq!((c.shape(), c.to_vec_f64()), (&[3, 1][..], vec![1.0, 3.0, 5.0]));
        assert_eq!(x.index_select(-1, &idx(&[1, 0], &[2])).to_vec_f64(), vec![1.0, 0.0, 3.0, 2.0, 5.0, 4.0]);
        assert_eq!(x.index_select(0, &idx(&[], &[0])).shape(), &[0, 2]);
    }

    #[test]
    fn index_select_backward_accumulates_repeated_indices() {
        let x = x32();
        let y = x.index_select(0, &idx(&[2, 0, 2], &[3]));
        (&y * &w(&y)).sum().backward();
        assert_eq!(grad(&x), vec![3.0, 4.0, 0.0, 0.0, 6.0, 8.0]);
    }

    #[test]
    fn index_select_gradcheck() {
        gradcheck(|t| t[0].index_select(0, &idx(&[2, 0, 2], &[3])), &[g32()]).unwrap();
        gradcheck(|t| t[0].index_select(1, &idx(&[1, 1, 0], &[3])).exp(), &[g32()]).unwrap();
    }

    #[test]
    fn index_add_forward() {
        let base = t64(&ramp(&[3, 2]), &[3, 2]);
        let src = t64(&[10.0, 20.0, 30.0, 40.0, 50.0, 60.0], &[3, 2]);
        let y = base.index_add(0, &idx(&[0, 2, 0], &[3]), &src);
        assert_eq!(y.to_vec_f64(), vec![60.0, 81.0, 2.0, 3.0, 34.0, 45.0]);
        let z = base.index_add(1, &idx(&[1], &[1]), &t64(&[1.0, 2.0, 3.0], &[3, 1]));
        assert_eq!(z.to_vec_f64(), vec![0.0, 2.0, 2.0, 5.0, 4.0, 8.0]);
        assert_eq!(base.to_vec_f64(), ramp(&[3, 2]), "index_add is functional");
    }

    #[test]
    fn index_add_backward() {
        let base = x32();
        let src = leaf(&[10.0, 20.0, 30.0, 40.0, 50.0, 60.0], &[3, 2]);
        let y = base.index_add(0, &idx(&[0, 2, 0], &[3]), &src);
        (&y * &w(&y)).sum().backward();
        assert_eq!(grad(&base), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(grad(&src), vec![1.0, 2.0, 5.0, 6.0, 1.0, 2.0]);
    }

    #[test]
    fn index_add_gradcheck() {
        let src = t64(&[0.5, -0.25, 1.5, 0.75], &[2, 2]);
        gradcheck(|t| t[0].index_add(0, &idx(&[1, 1], &[2]), &t[1]).square(), &[g32(), src]).unwrap();
    }

    #[test]
    fn gather_forward() {
        let x = x32();
        let i = idx(&[1, 0, 0, 0, 1, 1], &[3, 2]);
        assert_eq!(x.gather(1, &i).to_vec_f64(), vec![1.0, 0.0, 2.0, 2.0, 5.0, 5.0]);
        // The index may be smaller than the input outside `dim`.
        let y = x.gather(0, &idx(&[2, 0], &[1, 2]));
        assert_eq!((y.shape(), y.to_vec_f64()), (&[1, 2][..], vec![4.0, 1.0]));
        assert_eq!(x.gather(-1, &idx(&[1, 0, 0], &[3, 1])).to_vec_f64(), vec![1.0, 2.0, 4.0]);
    }

    /// A negative index is out of bounds, as in PyTorch (counted from the back,
    /// `lengths - 1` of an empty sequence would read the last, padding, position).
    #[test]
    fn negative_indices_are_out_of_bounds() {
        let x = x32();
        let msg = |f: &dyn Fn()| {
            let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("must panic");
            e.downcast_ref::<String>().cloned().unwrap_or_default()
        };
        let i = idx(&[-1], &[1]);
        let m = msg(&|| drop(x.index_select(0, &i)));
        assert!(m.contains("index_select: index -1 is out of bounds for dimension 0 with size 3"), "{m}");
        let m = msg(&|| drop(x.gather(1, &idx(&[0, -1, 1], &[3, 1]))));
        assert!(m.contains("gather: index -1 is out of bounds for dimension 1 with size 2"), "{m}");
        let m =
            msg(&|| drop(Tensor::zeros(&[3, 2]).scatter_add(1, &idx(&[-1, 0, 0], &[3, 1]), &Tensor::ones(&[3, 1]))));
        assert!(m.contains("index -1 is out of bounds"), "{m}");
        let m = msg(&|| drop(Tensor::zeros(&[3, 2]).index_add(0, &i, &Tensor::ones(&[1, 2]))));
        assert!(m.contains("index -1 is out of bounds"), "{m}");
    }

    #[test]
    fn gather_backward() {
        let x = x32();
        let y = x.gather(1, &idx(&[1, 0, 0, 0, 1, 1], &[3, 2]));
        (&y * &w(&y)).sum().backward();
        assert_eq!(grad(&x), vec![2.0, 1.0, 7.0, 0.0, 0.0, 11.0]);
    }

    #[test]
    fn gather_gradcheck() {
        gradcheck(|t| t[0].gather(1, &idx(&[1, 0, 0, 0, 1, 1], &[3, 2])).exp(), &[g32()]).unwrap();
        gradcheck(|t| t[0].gather(0, &idx(&[2, 2], &[1, 2])), &[g32()]).unwrap();
    }

    #[test]
    fn scatter_add_forward() {
        let base = t64(&ramp(&[3, 2]), &[3, 2]);
        let src = t64(&[10.0, 20.0, 30.0, 40.0, 50.0, 60.0], &[3, 2]);
        let y = base.scatter_add(1, &idx(&[1, 0, 0, 0, 1, 1], &[3, 2]), &src);
        assert_eq!(y.to_vec_f64(), vec![20.0, 11.0, 72.0, 3.0, 4.0, 115.0]);
        let z = base.scatter_add(0, &idx(&[2, 0], &[1, 2]), &t64(&[1.0, 2.0], &[1, 2]));
        assert_eq!(z.to_vec_f64(), vec![0.0, 3.0, 2.0, 3.0, 5.0, 5.0]);
    }

    #[test]
    fn scatter_add_backward() {
        let base = x32();
        let src = leaf(&[10.0, 20.0, 30.0, 40.0, 50.0, 60.0], &[3, 2]);
        let y = base.scatter_add(1, &idx(&[1, 0, 0, 0, 1, 1], &[3, 2]), &src);
        (&y * &w(&y)).sum().backward();
        assert_eq!(grad(&base), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(grad(&src), vec![2.0, 1.0, 3.0, 3.0, 6.0, 6.0]);
    }

    #[test]
    fn scatter_add_gradcheck() {
        let src = t64(&[0.5, -0.25, 1.5, 0.75], &[2, 2]);
        gradcheck(|t| t[0].scatter_add(0, &idx(&[2, 0, 2, 2], &[2, 2]), &t[1]).exp(), &[g32(), src]).unwrap();
    }

    #[test]
    fn embedding_forward() {
        let wt = t64(&ramp(&[4, 3]), &[4, 3]);
        let e = Tensor::embedding(&idx(&[3, 1, 1, 0], &[2, 2]), &wt);
        assert_eq!(e.shape(), &[2, 2, 3]);
        assert_eq!(e.to_vec_f64(), vec![9., 10., 11., 3., 4., 5., 3., 4., 5., 0., 1., 2.]);
        let s = Tensor::embedding(&idx(&[2], &[]), &wt);
        assert_eq!((s.shape(), s.to_vec_f64()), (&[3][..], vec![6.0, 7.0, 8.0]));
    }

    #[test]
    fn embedding_backward_accumulates_repeated_ids() {
        let wt = leaf(&ramp(&[4, 3]), &[4, 3]);
        let e = Tensor::embedding(&idx(&[3, 1, 1, 0], &[2, 2]), &wt);
        (&e * &w(&e)).sum().backward();
        assert_eq!(grad(&wt), vec![10., 11., 12., 11., 13., 15., 0., 0., 0., 1., 2., 3.]);
    }

    #[test]
    fn embedding_gradcheck() {
        let wt = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4, -0.15, 0.9], &[4, 2]);
        gradcheck(|t| Tensor::embedding(&idx(&[3, 1, 1], &[3]), &t[0]).tanh(), &[wt]).unwrap();
    }

    #[test]
    fn index_ops_on_noncontiguous_inputs_and_indices() {
        let x = g32();
        let i1 = idx(&[2, 0, 2], &[3]);
        let ig = idx(&[1, 0, 0, 0, 1, 1], &[3, 2]);
        let src = t64(&[0.5, -0.25, 1.5, 0.75, 2.5, -1.0], &[3, 2]);
        check_noncontig(|t| t[0].index_select(0, &t[1]), &[x.clone(), i1.clone()]);
        check_noncontig(|t| t[0].index_add(0, &t[1], &t[2]), &[x.clone(), i1.clone(), src.clone()]);
        check_noncontig(|t| t[0].gather(1, &t[1]), &[x.clone(), ig.clone()]);
        check_noncontig(|t| t[0].scatter_add(1, &t[1], &t[2]), &[x.clone(), ig.clone(), src.clone()]);
        check_noncontig(|t| Tensor::embedding(&t[1], &t[0]), &[x.clone(), ig.clone()]);
        // Transposed inputs and indices against contiguous copies.
        let xt = t64(&[0.3, 2.0, 1.1, -1.2, -0.7, 0.4], &[2, 3]).t(); // == x
        let it = idx(&[1, 0, 1, 0, 0, 1], &[2, 3]).t(); // == ig
        assert_eq!(xt.gather(1, &it).to_vec_f64(), x.gather(1, &ig).to_vec_f64());
        assert_eq!(x.scatter_add(1, &it, &xt).to_vec_f64(), x.scatter_add(1, &ig, &x).to_vec_f64());
        assert_eq!(xt.index_select(0, &i1).to_vec_f64(), x.index_select(0, &i1).to_vec_f64());
        let i2 = idx(&[1, 9, 0, 9], &[2, 2]).narrow(1, 0, 1).reshape(&[2]); // [1, 0] at stride 2
        assert!(!i2.is_contiguous());
        assert_eq!(xt.index_select(1, &i2).to_vec_f64(), x.index_select(1, &idx(&[1, 0], &[2])).to_vec_f64());
        let ex = x.narrow(0, 1, 1).expand(&[3, 2]);
        assert_eq!(ex.gather(1, &ig).to_vec_f64(), ex.contiguous().gather(1, &ig).to_vec_f64());
    }

    #[test]
    fn index_ops_on_meta() {
        let m = Tensor::full_on(&[5, 3], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        let i = Tensor::full_on(&[2, 4], 0.0, DType::I64, Device::Meta);
        let e = Tensor::embedding(&i, &m);
        assert_eq!((e.shape(), e.device()), (&[2, 4, 3][..], Device::Meta));
        let i1 = Tensor::full_on(&[7], 0.0, DType::I64, Device::Meta);
        assert_eq!(m.index_select(0, &i1).shape(), &[7, 3]);
        let ig = Tensor::full_on(&[5, 2], 0.0, DType::I64, Device::Meta);
        assert_eq!(m.gather(1, &ig).shape(), &[5, 2]);
        e.sum().backward();
        assert_eq!(m.grad().unwrap().shape(), &[5, 3]);
    }

    #[test]
    fn gather_and_scatter_on_rank0() {
        let s = Tensor::from_vec_f64(vec![2.5], &[]).requires_grad_(true);
        let i = idx(&[0], &[]);
        let g = s.gather(0, &i);
        assert_eq!((g.shape(), g.item()), (&[] as &[usize], 2.5));
        (g * 3.0).backward();
        assert_eq!(s.grad().unwrap().item(), 3.0);
        let z = s.detach().scatter_add(0, &i, &t64(&[1.0], &[]));
        assert_eq!(z.item(), 3.5);
    }

    #[test]
    #[should_panic(expected = "index_select: index 3 is out of bounds for dimension 0 with size 3")]
    fn index_select_out_of_bounds_panics() {
        x32().index_select(0, &idx(&[0, 3], &[2]));
    }

    #[test]
    #[should_panic(expected = "gather: index -3 is out of bounds for dimension 1 with size 2")]
    fn gather_out_of_bounds_panics() {
        x32().gather(1, &idx(&[0, -3, 0, 0, 0, 0], &[3, 2]));
    }

    #[test]
    #[should_panic(expected = "embedding: index 4 is out of range for 4 embeddings")]
    fn embedding_index_out_of_range_panics() {
        Tensor::embedding(&idx(&[0, 4], &[2]), &Tensor::zeros(&[4, 3]));
    }

    #[test]
    #[should_panic(expected = "embedding: index -1 is out of range for 4 embeddings")]
    fn embedding_rejects_negative_ids() {
        Tensor::embedding(&idx(&[-1], &[1]), &Tensor::zeros(&[4, 3]));
    }

    #[test]
    #[should_panic(expected = "gather: index must be an i64 tensor, got f32")]
    fn gather_with_float_index_panics() {
        x32().gather(1, &Tensor::zeros(&[3, 2]));
    }

    #[test]
    #[should_panic(expected = "gather: index of shape [4, 1] does not fit input of shape [3, 2]")]
    fn gather_with_too_large_index_panics() {
        x32().gather(1, &idx(&[0; 4], &[4, 1]));
    }

    #[test]
    #[should_panic(
        expected = "index_add: source of shape [2, 2] and index of shape [3] do not fit input of shape [3, 2] along dim 0 (source should be [3, 2])"
    )]
    fn index_add_with_wrong_source_shape_panics() {
        x32().index_add(0, &idx(&[0, 1, 2], &[3]), &Tensor::zeros(&[2, 2]).to_dtype(DType::F64));
    }

    #[test]
    #[should_panic(expected = "scatter_add: src of shape [2, 2] must match index of shape [3, 2]")]
    fn scatter_add_with_wrong_src_shape_panics() {
        x32().scatter_add(1, &idx(&[0; 6], &[3, 2]), &Tensor::zeros(&[2, 2]).to_dtype(DType::F64));
    }

    #[test]
    #[should_panic(expected = "embedding: weight must be 2-D [num_embeddings, embedding_dim], got shape [4]")]
    fn embedding_with_1d_weight_panics() {
        Tensor::embedding(&idx(&[0], &[1]), &Tensor::zeros(&[4]));
    }

    /// A 0-d input reads as `[1]` and `index_select` gives a 0-d result, `gather` the
    /// index's shape, as PyTorch.
    #[test]
    fn index_select_and_gather_of_a_0d_input() {
        let s = Tensor::from_vec_f64(vec![2.5], &[]).requires_grad_(true);
        let y = s.index_select(0, &idx(&[0], &[1]));
        assert_eq!((y.shape(), y.item()), (&[] as &[usize], 2.5));
        (y * 2.0).backward();
        assert_eq!(s.grad().unwrap().item(), 2.0);
        let g = s.gather(-1, &idx(&[0], &[1]));
        assert_eq!((g.shape(), g.to_vec_f64()), (&[1][..], vec![2.5]));
    }
}
