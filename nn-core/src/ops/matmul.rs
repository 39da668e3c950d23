//! Matrix multiplication (batched, broadcasting) and `addmm`, with strides passed straight
//! to the backend: a transposed view is multiplied without a copy.

use std::sync::Arc;

use smallvec::smallvec;

use super::{check_float, check_same};
use crate::autograd::{op_result, Grads};
use crate::shape::{broadcast_shapes, Dims, Layout};
use crate::tensor::Tensor;

impl Tensor {
    /// Matrix product with PyTorch's `matmul` semantics: 1-D operands are promoted (and the
    /// added dim removed), leading batch dims broadcast.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    /// let b = Tensor::from_vec(vec![5.0, 6.0], &[2]);
    /// assert_eq!(a.matmul(&b).to_vec(), vec![17.0, 39.0]);
    /// assert_eq!(a.matmul(&a.t()).to_vec(), vec![5.0, 11.0, 11.0, 25.0]);
    /// ```
    ///
    /// # Panics
    /// When the inner dimensions differ:
    /// `matmul: [32, 100] x [784, 256]: inner dimensions 100 and 784 differ`.
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Tensor {
        let again = |c: &[Option<&crate::Tensor>]| c[0].expect("present").matmul(c[1].expect("present"));
        let _op =
            crate::autograd::entry::op_entry!(crate::names::MATMUL, [self, other], attrs = Vec::new, again = again);
        let (ra, rb) = (self.rank(), other.rank());
        if ra == 0 || rb == 0 {
            panic!(
                "matmul: both arguments need at least 1 dimension, got shapes {:?} and {:?}",
                self.shape(),
                other.shape()
            );
        }
        let inner_a = self.shape()[ra - 1];
        let inner_b = other.shape()[if rb == 1 { 0 } else { rb - 2 }];
        if inner_a != inner_b {
            panic!("matmul: {:?} x {:?}: inner dimensions {inner_a} and {inner_b} differ", self.shape(), other.shape());
        }
        if ra > 2 && rb == 2 {
            // `[..., m, k] x [k, n]` (every Linear on a sequence): one `[B m, k] x [k, n]`
            // GEMM (as PyTorch does). Against a GEMM per batch entry it is big enough to be
            // split over threads, and its weight gradient is one GEMM over `B m` instead of
            // B products and a sum (per batch entry, the Transformer layer step gains
            // nothing from a second thread: the `compare.py` row `transformer_step`).
            return fold_rows(self, |x| Some(x.matmul(other))).expect("matmul always runs");
        }
        let a = if ra == 1 { self.unsqueeze(0) } else { self.clone() };
        let b = if rb == 1 { other.unsqueeze(1) } else { other.clone() };
        let mut out = bmm(&a, &b);
        if rb == 1 {
            out = out.squeeze_dim(-1);
        }
        if ra == 1 {
            out = out.squeeze_dim(if rb == 1 { -1 } else { -2 });
        }
        out
    }
}

/// Runs `f` on `x` (`[..., k]`, rank >= 2) with its batch dims folded into the rows
/// (`[rows, k]`, a view when `x` is contiguous) and unfolds `f`'s `[rows, n]` result to
/// `[..., n]`; `None` when `f` declines.
fn fold_rows(x: &Tensor, f: impl FnOnce(&Tensor) -> Option<Tensor>) -> Option<Tensor> {
    let lead = &x.shape()[..x.rank() - 1];
    if x.rank() == 2 {
        return f(x);
    }
    let rows: usize = lead.iter().product();
    let y = f(&x.reshape(&[rows, x.shape()[x.rank() - 1]]))?;
    let mut shape = lead.to_vec();
    shape.push(y.shape()[1]);
    Some(y.reshape(&shape))
}

impl Tensor {
    /// `x @ weight^T + bias` (`x: [..., k]`, rank >= 2) as one fused op: batch dims folded
    /// into rows, the GEMM accumulating into the bias rows ([`addmm_t`](Tensor::addmm_t)).
    /// `None` when the operands do not fit that path (the caller then runs the plain ops,
    /// whose panics name the mismatch). The one place that decides fusing `linear`.
    pub(crate) fn fused_linear(&self, weight: &Tensor, bias: &Tensor) -> Option<Tensor> {
        if self.rank() < 2 {
            return None;
        }
        fold_rows(self, |x| x.addmm_t(weight, bias))
    }

    /// `self [m, k] @ weight[n, k]^T + bias [n]` as one `addmm` of the backend (the
    /// bias broadcast over the rows, `weight^T` a strided view: no copies).
    /// `None` (the caller falls back to the two ops, and their error messages) unless the
    /// shapes fit and all three share a float dtype and a device.
    pub(crate) fn addmm_t(&self, weight: &Tensor, bias: &Tensor) -> Option<Tensor> {
        const OP: &str = crate::names::LINEAR;
        let fits = self.rank() == 2
            && weight.rank() == 2
            && bias.rank() == 1
            && self.shape()[1] == weight.shape()[1]
            && bias.shape()[0] == weight.shape()[0];
        let same = [weight, bias].iter().all(|t| t.dtype() == self.dtype() && t.device() == self.device());
        if !fits || !same || !self.dtype().is_compute_float() {
            return None;
        }
        let (m, n) = (self.shape()[0], weight.shape()[0]);
        crate::shape::numel_of(OP, &[m, n]);
        let lw = weight.layout().permute(&[1, 0]);
        let lb = bias.layout().broadcast_to(&[m, n]).expect("bias [n] broadcasts to [m, n]");
        let out = crate::autograd::kept_outputs::computed(OP, m * n, || {
            Arc::new(bias.storage_arc().addmm(
                &lb,
                (&self.storage_arc(), self.layout()),
                (&weight.storage_arc(), &lw),
                (1.0, 1.0),
            ))
        });
        let (x, w) = (self.saved_for_backward(), weight.saved_for_backward());
        Some(op_result(OP, out, Layout::contiguous(&[m, n]), &[self, weight, bias], || {
            move |g: &Tensor, needs: &[bool]| -> Grads {
                smallvec![
                    needs[0].then(|| g.matmul(&w)),
                    // [n, m] x [m, k]: the gradient comes out in the weight's own layout.
                    needs[1].then(|| g.t().matmul(&x)),
                    needs[2].then(|| g.sum_dims(&[0usize], false)),
                ]
            }
        }))
    }

    /// `self + mat1 @ mat2` in one op: PyTorch's `torch.addmm(input, mat1, mat2)` with
    /// `beta = alpha = 1` (also [`functional::addmm`](crate::functional::addmm)). See
    /// [`addmm_with`](Tensor::addmm_with) for the shapes.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let bias = Tensor::from_vec(vec![10.0, 20.0], &[2]);
    /// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    /// let y = bias.addmm(&a, &Tensor::eye(2));
    /// assert_eq!(y.to_vec(), vec![11.0, 22.0, 13.0, 24.0]);
    /// ```
    #[track_caller]
    pub fn addmm(&self, mat1: &Tensor, mat2: &Tensor) -> Tensor {
        self.addmm_with(mat1, mat2, 1.0, 1.0)
    }

    /// `beta * self + alpha * (mat1 @ mat2)` in one op, PyTorch's
    /// `torch.addmm(input, mat1, mat2, beta=beta, alpha=alpha)`: `mat1: [m, k]`,
    /// `mat2: [k, n]`, `self` broadcastable to `[m, n]` (a bias row `[n]`, a column `[m, 1]`,
    /// a scalar or the full matrix); the result is `[m, n]`. One GEMM accumulates into a
    /// copy of the broadcast input. With `beta = 0` the input is ignored (its NaN do not
    /// propagate), as PyTorch documents.
    ///
    /// Gradients: `beta * g` summed back to `self`'s shape, `alpha * g @ mat2^T` and
    /// `alpha * mat1^T @ g`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let c = Tensor::from_vec(vec![1.0, 2.0], &[2, 1]);
    /// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    /// let b = Tensor::from_vec(vec![1.0, 0.0, 1.0, 0.0, 1.0, 1.0], &[2, 3]);
    /// let y = c.addmm_with(&a, &b, 0.5, 2.0); // 0.5 c + 2 (a @ b), a @ b = [[1, 2, 3], [3, 4, 7]]
    /// assert_eq!(y.shape(), &[2, 3]);
    /// assert_eq!(y.to_vec(), vec![2.5, 4.5, 6.5, 7.0, 9.0, 15.0]);
    /// ```
    ///
    /// # Panics
    /// When `mat1` or `mat2` is not 2-D, their inner dimensions differ, `self` does not
    /// broadcast to `[m, n]`, or the dtypes or devices differ.
    #[track_caller]
    pub fn addmm_with(&self, mat1: &Tensor, mat2: &Tensor, beta: f64, alpha: f64) -> Tensor {
        let again = |c: &[Option<&crate::Tensor>]| {
            c[0].expect("present").addmm_with(c[1].expect("present"), c[2].expect("present"), beta, alpha)
        };
        let _op = crate::autograd::entry::op_entry!(
            crate::names::ADDMM,
            [self, mat1, mat2],
            attrs = || {
                vec![
                    ("beta", crate::autograd::trace::Attr::Float(beta)),
                    ("alpha", crate::autograd::trace::Attr::Float(alpha)),
                ]
            },
            again = again
        );
        const OP: &str = crate::names::ADDMM;
        check_same(OP, &[self, mat1, mat2]);
        check_float(OP, self);
        if mat1.rank() != 2 || mat2.rank() != 2 {
            panic!("{OP}: mat1 and mat2 must be matrices, got shapes {:?} and {:?}", mat1.shape(), mat2.shape());
        }
        let (m, k, n) = (mat1.shape()[0], mat1.shape()[1], mat2.shape()[1]);
        if mat2.shape()[0] != k {
            panic!(
                "{OP}: mat1 {:?} @ mat2 {:?}: inner dimensions {k} and {} differ",
                mat1.shape(),
                mat2.shape(),
                mat2.shape()[0]
            );
        }
        let Some(li) = self.layout().broadcast_to(&[m, n]) else {
            panic!(
                "{OP}: input of shape {:?} cannot be broadcast to the product's shape [{m}, {n}] (mat1 {:?} @ mat2 {:?})",
                self.shape(),
                mat1.shape(),
                mat2.shape()
            );
        };
        let storage = crate::autograd::kept_outputs::computed(OP, m * n, || {
            Arc::new(self.storage_arc().addmm(
                &li,
                (&mat1.storage_arc(), mat1.layout()),
                (&mat2.storage_arc(), mat2.layout()),
                (beta, alpha),
            ))
        });
        op_result(OP, storage, Layout::contiguous(&[m, n]), &[self, mat1, mat2], || {
            let (a, b, in_shape): (Tensor, Tensor, Dims) =
                (mat1.saved_for_backward(), mat2.saved_for_backward(), self.shape().into());
            let scale = |t: Tensor, s: f64| if s == 1.0 { t } else { t * s };
            move |g: &Tensor, needs: &[bool]| -> Grads {
                smallvec![
                    needs[0].then(|| scale(g.clone(), beta).sum_to_shape(&in_shape)),
                    needs[1].then(|| scale(g.matmul(&b.t()), alpha)),
                    needs[2].then(|| scale(a.t().matmul(g), alpha)),
                ]
            }
        })
    }
}

/// `[..., m, k] x [..., k, n]` with broadcast batch dims.
#[track_caller]
fn bmm(a: &Tensor, b: &Tensor) -> Tensor {
    const OP: &str = crate::names::MATMUL;
    check_same(OP, &[a, b]);
    check_float(OP, a);
    let (ra, rb) = (a.rank(), b.rank());
    let (m, k, n) = (a.shape()[ra - 2], a.shape()[ra - 1], b.shape()[rb - 1]);
    let Some(batch) = broadcast_shapes(&a.shape()[..ra - 2], &b.shape()[..rb - 2]) else {
        panic!("matmul: {:?} x {:?}: batch dimensions cannot be broadcast together", a.shape(), b.shape());
    };
    let mut shape = batch.clone();
    shape.extend_from_slice(&[m, n]);
    // Operands with k = 0 (or broadcast batch dims) can each be valid while the product
    // is not: check before anything is allocated or handed to the GEMM.
    crate::shape::numel_of(OP, &shape);
    let len = shape.iter().product();
    let storage = crate::autograd::kept_outputs::computed(OP, len, || {
        Arc::new(a.storage_arc().matmul(a.layout(), &b.storage_arc(), b.layout(), &batch, (m, k, n)))
    });
    op_result(OP, storage, Layout::contiguous(&shape), &[a, b], || {
        let (a, b) = (a.saved_for_backward(), b.saved_for_backward());
        move |g: &Tensor, needs: &[bool]| -> Grads {
            smallvec![
                needs[0].then(|| bmm(g, &b.transpose(-1, -2)).sum_to_shape(a.shape())),
                needs[1].then(|| {
                    if is_transposed_matrix(&b) {
                        // `b` is a transposed view (`x @ W^T`): produce the gradient in W's own
                        // row-major layout, so it reaches W without a transposing copy.
                        let r = b.rank();
                        let mut t_shape = b.shape().to_vec();
                        t_shape.swap(r - 2, r - 1);
                        bmm(&g.transpose(-1, -2), &a).sum_to_shape(&t_shape).transpose(-1, -2)
                    } else {
                        bmm(&a.transpose(-1, -2), g).sum_to_shape(b.shape())
                    }
                }),
            ]
        }
    })
}

/// True when the last two dims are the transpose of a matrix with contiguous rows: a
/// transposed row-major matrix (`W^T`), or a transposed view of rows spaced further apart
/// (the keys of attention heads split from `[N, S, E]`, transposed for `q k^T`). Its
/// gradient is then made in the rows' own layout, so it flows back through the views to
/// a head split whose copy runs by rows (made column-major, the copy would go element by
/// element on one thread, a measurable part of the `compare.py` row `transformer_step` at
/// 2 threads).
fn is_transposed_matrix(t: &Tensor) -> bool {
    let r = t.rank();
    let (s, st) = (t.shape(), t.strides());
    r >= 2 && s[r - 2] > 1 && s[r - 1] > 1 && st[r - 2] == 1 && st[r - 1] >= s[r - 2]
}

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64, transposed_storage};
    use crate::{DType, Device, Tensor};

    /// `[[1, 2, 3], [4, 5, 6]]`.
    const A: [f64; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    /// `[[7, 8], [9, 10], [11, 12]]`.
    const B: [f64; 6] = [7.0, 8.0, 9.0, 10.0, 11.0, 12.0];

    /// A deterministic, varied input of `shape`.
    fn vals(shape: &[usize], seed: u64) -> Tensor {
        let n: usize = shape.iter().product();
        let v = (0..n as u64).map(|i| ((i * 7919 + seed * 104729) % 23) as f64 / 11.0 - 1.0).collect();
        Tensor::from_vec_f64(v, shape)
    }

    /// Naive matmul of `[.., m, k] x [.., k, n]` with equal batch dims, for reference.
    fn naive(a: &Tensor, b: &Tensor) -> Vec<f64> {
        let (ra, rb) = (a.rank(), b.rank());
        let (m, k, n) = (a.shape()[ra - 2], a.shape()[ra - 1], b.shape()[rb - 1]);
        let batch: usize = a.shape()[..ra - 2].iter().product();
        let (av, bv) = (a.to_vec_f64(), b.to_vec_f64());
        let mut out = vec![0.0; batch * m * n];
        for p in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    out[(p * m + i) * n + j] = (0..k).map(|t| av[(p * m + i) * k + t] * bv[(p * k + t) * n + j]).sum();
                }
            }
        }
        out
    }

    #[test]
    fn matmul_2d_forward_backward_gradcheck() {
        let (a, b) = (leaf(&A, &[2, 3]), leaf(&B, &[3, 2]));
        let y = a.matmul(&b);
        assert_eq!((y.shape(), y.to_vec_f64()), (&[2, 2][..], vec![58.0, 64.0, 139.0, 154.0]));
        let y32 = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).matmul(&b.to_dtype(DType::F32));
        assert_eq!(y32.to_vec(), vec![58.0, 64.0, 139.0, 154.0]);
        (&y * &t64(&[1.0, 2.0, 3.0, 4.0], &[2, 2])).sum().backward();
        // grad_a = w b^T, grad_b = a^T w.
        assert_eq!(grad(&a), vec![23.0, 29.0, 35.0, 53.0, 67.0, 81.0]);
        assert_eq!(grad(&b), vec![13.0, 18.0, 17.0, 24.0, 21.0, 30.0]);
        gradcheck(|t| t[0].matmul(&t[1]), &[vals(&[2, 3], 1), vals(&[3, 4], 2)]).unwrap();
        gradcheck(|t| t[0].matmul(&t[1]).tanh(), &[vals(&[3, 2], 3), vals(&[2, 3], 4)]).unwrap();
    }

    #[test]
    fn matmul_1d_by_1d_is_a_dot_product() {
        let (u, v) = (leaf(&[1.0, 2.0, 3.0], &[3]), leaf(&[4.0, 5.0, 6.0], &[3]));
        let d = u.matmul(&v);
        assert_eq!((d.shape(), d.item()), (&[] as &[usize], 32.0));
        d.square().backward();
        assert_eq!(grad(&u), vec![256.0, 320.0, 384.0]);
        assert_eq!(grad(&v), vec![64.0, 128.0, 192.0]);
        gradcheck(|t| t[0].matmul(&t[1]), &[vals(&[4], 1), vals(&[4], 2)]).unwrap();
    }

    #[test]
    fn matmul_2d_by_1d_and_1d_by_2d() {
        let a = leaf(&A, &[2, 3]);
        let v = leaf(&[1.0, 0.0, -1.0], &[3]);
        let y = a.matmul(&v);
        assert_eq!((y.shape(), y.to_vec_f64()), (&[2][..], vec![-2.0, -2.0]));
        (&y * &t64(&[1.0, 2.0], &[2])).sum().backward();
        assert_eq!(grad(&v), vec![9.0, 12.0, 15.0]);
        assert_eq!(grad(&a), vec![1.0, 0.0, -1.0, 2.0, 0.0, -2.0]);

        let a = leaf(&A, &[2, 3]);
        let u = leaf(&[1.0, -1.0], &[2]);
        let z = u.matmul(&a);
        assert_eq!((z.shape(), z.to_vec_f64()), (&[3][..], vec![-3.0, -3.0, -3.0]));
        (&z * &t64(&[1.0, 2.0, 3.0], &[3])).sum().backward();
        assert_eq!(grad(&u), vec![14.0, 32.0]);
        assert_eq!(grad(&a), vec![1.0, 2.0, 3.0, -1.0, -2.0, -3.0]);
        gradcheck(|t| t[0].matmul(&t[1]), &[vals(&[2, 3], 1), vals(&[3], 2)]).unwrap();
        gradcheck(|t| t[0].matmul(&t[1]), &[vals(&[3], 3), vals(&[3, 2], 4)]).unwrap();
        // 1-D against a batch: [k] x [b, k, n] -> [b, n].
        let w = vals(&[2, 3, 2], 5);
        assert_eq!(vals(&[3], 6).matmul(&w).shape(), &[2, 2]);
        gradcheck(|t| t[0].matmul(&t[1]), &[vals(&[3], 6), w]).unwrap();
    }

    #[test]
    fn matmul_batched_forward_backward_gradcheck() {
        let a = leaf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[2, 2, 2]);
        let b = leaf(&[1.0, 0.0, 0.0, 1.0, 2.0, 0.0, 1.0, 1.0], &[2, 2, 2]);
        let y = a.matmul(&b);
        assert_eq!(y.to_vec_f64(), vec![1.0, 2.0, 3.0, 4.0, 16.0, 6.0, 22.0, 8.0]);
        y.sum().backward();
        // grad_a[p] = 1 b[p]^T (row sums of b), grad_b[p] = a[p]^T 1 (column sums of a).
        assert_eq!(grad(&a), vec![1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]);
        assert_eq!(grad(&b), vec![4.0, 4.0, 6.0, 6.0, 12.0, 12.0, 14.0, 14.0]);
        gradcheck(|t| t[0].matmul(&t[1]), &[vals(&[2, 2, 3], 1), vals(&[2, 3, 2], 2)]).unwrap();
    }

    #[test]
    fn matmul_broadcasts_batch_dims() {
        // [2, 1, 1, 2] x [3, 2, 1] -> [2, 3, 1, 1]: every row of a against every column of b.
        let a = leaf(&[1.0, 2.0, 3.0, 4.0], &[2, 1, 1, 2]);
        let b = leaf(&[1.0, 1.0, 0.0, 1.0, 2.0, -1.0], &[3, 2, 1]);
        let y = a.matmul(&b);
        assert_eq!(y.shape(), &[2, 3, 1, 1]);
        assert_eq!(y.to_vec_f64(), vec![3.0, 2.0, 0.0, 7.0, 4.0, 2.0]);
        y.sum().backward();
        // Gradients are summed back over the broadcast batch dims.
        assert_eq!(grad(&a), vec![3.0, 1.0, 3.0, 1.0]);
        assert_eq!(grad(&b), vec![4.0, 6.0, 4.0, 6.0, 4.0, 6.0]);
        // Batched against plain 2-D, both ways.
        let (p, q) = (vals(&[2, 2, 3], 1), vals(&[3, 2], 2));
        assert_close64(&p.matmul(&q).to_vec_f64(), &naive(&p, &q.expand(&[2, 3, 2]).contiguous()), 1e-14);
        gradcheck(|t| t[0].matmul(&t[1]), &[p, q]).unwrap();
        gradcheck(|t| t[0].matmul(&t[1]), &[vals(&[2, 3], 3), vals(&[2, 1, 3, 2], 4)]).unwrap();
        gradcheck(|t| t[0].matmul(&t[1]), &[vals(&[1, 2, 3], 5), vals(&[2, 3, 2], 6)]).unwrap();
    }

    #[test]
    fn fused_linear_matches_product_plus_bias_and_gradchecks() {
        use crate::functional::linear;
        let (w, b) = (vals(&[4, 3], 2), vals(&[4], 3));
        // Contiguous, transposed-storage and 3-D inputs; a transposed-view weight.
        let wt = transposed_storage(&w);
        for (x, w) in [(vals(&[5, 3], 1), &w), (transposed_storage(&vals(&[5, 3], 1)), &w), (vals(&[2, 5, 3], 1), &wt)]
        {
            let y = linear(&x, w, Some(&b));
            let reference = x.matmul(&w.t()) + &b;
            assert_eq!(y.shape(), reference.shape());
            assert_close64(&y.to_vec_f64(), &reference.to_vec_f64(), 1e-14);
            gradcheck(|t| linear(&t[0], &t[1], Some(&t[2])), &[x.clone(), w.clone(), b.clone()]).unwrap();
        }
        // f32, and only some operands needing gradients.
        let (x, w32) = (vals(&[5, 3], 1).to_dtype(DType::F32), w.to_dtype(DType::F32).requires_grad_(true));
        let y = linear(&x, &w32, Some(&b.to_dtype(DType::F32)));
        assert_eq!(y.dtype(), DType::F32);
        y.sum().backward();
        assert_close64(&grad(&w32), &x.sum_dims(&[0usize], true).expand(&[4, 3]).to_vec_f64(), 1e-5);
        // Meta gives shapes only; a bad shape still names matmul.
        let xm = Tensor::full_on(&[5, 3], 0.0, DType::F32, Device::Meta);
        let (wm, bm) = (
            Tensor::full_on(&[4, 3], 0.0, DType::F32, Device::Meta),
            Tensor::full_on(&[4], 0.0, DType::F32, Device::Meta),
        );
        assert_eq!(linear(&xm, &wm, Some(&bm)).shape(), &[5, 4]);
        let err = std::panic::catch_unwind(|| linear(&vals(&[5, 2], 1), &w, Some(&b))).unwrap_err();
        assert!(err.downcast_ref::<String>().is_some_and(|m| m.contains("matmul: [5, 2] x [3, 4]")), "{err:?}");
    }

    #[test]
    fn addmm_forward_with_every_input_broadcast() {
        use crate::functional::{addmm, addmm_with};
        // a @ b = [[58, 64], [139, 154]].
        let (a, b) = (t64(&A, &[2, 3]), t64(&B, &[3, 2]));
        let cases: [(Tensor, [f64; 4]); 5] = [
            (t64(&[1.0, 2.0, 3.0, 4.0], &[2, 2]), [59.0, 66.0, 142.0, 158.0]),
            (t64(&[10.0, 20.0], &[2]), [68.0, 84.0, 149.0, 174.0]),
            (t64(&[10.0, 20.0], &[2, 1]), [68.0, 74.0, 159.0, 174.0]),
            (t64(&[1.0], &[]), [59.0, 65.0, 140.0, 155.0]),
            (t64(&[1.0], &[1, 1]), [59.0, 65.0, 140.0, 155.0]),
        ];
        for (c, e) in cases {
            let y = c.addmm(&a, &b);
            assert_eq!((y.shape(), y.to_vec_f64()), (&[2, 2][..], e.to_vec()), "input {:?}", c.shape());
            assert_eq!(addmm(&c, &a, &b).to_vec_f64(), e.to_vec());
        }
        // 0.5 c + 2 (a @ b).
        let c = t64(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
        assert_eq!(c.addmm_with(&a, &b, 0.5, 2.0).to_vec_f64(), vec![116.5, 129.0, 279.5, 310.0]);
        assert_eq!(addmm_with(&c, &a, &b, -1.0, 0.0).to_vec_f64(), vec![-1.0, -2.0, -3.0, -4.0]);
        // beta = 0 ignores the input, NaN included (PyTorch's documented semantics).
        let nan = t64(&[f64::NAN; 2], &[2]);
        assert_eq!(nan.addmm_with(&a, &b, 0.0, 1.0).to_vec_f64(), vec![58.0, 64.0, 139.0, 154.0]);
        // f32; strided operands (transposed storage, an expanded input) give the same.
        let f = |t: &Tensor| t.to_dtype(DType::F32);
        assert_eq!(f(&c).addmm(&f(&a), &f(&b)).to_vec(), vec![59.0, 66.0, 142.0, 158.0]);
        let (at, bt) = (transposed_storage(&a), transposed_storage(&b));
        let ct = c.t();
        assert_eq!(ct.addmm_with(&at, &bt, 2.0, 1.0).to_vec_f64(), vec![60.0, 70.0, 143.0, 162.0]);
        let ex = t64(&[10.0, 20.0], &[2]).expand(&[2, 2]);
        assert_eq!(ex.addmm(&a, &b).to_vec_f64(), vec![68.0, 84.0, 149.0, 174.0]);
        // An empty inner dimension leaves beta * input.
        let e = t64(&[1.0, 2.0], &[2]).addmm_with(
            &Tensor::zeros(&[3, 0]).to_dtype(DType::F64),
            &t64(&[], &[0, 2]),
            3.0,
            1.0,
        );
        assert_eq!((e.shape(), e.to_vec_f64()), (&[3, 2][..], vec![3.0, 6.0, 3.0, 6.0, 3.0, 6.0]));
        assert_eq!(t64(&[], &[0]).addmm(&t64(&[], &[2, 0]), &t64(&[], &[0, 0])).shape(), &[2, 0]);
    }

    #[test]
    fn addmm_in_bf16_is_the_f32_result_rounded_once() {
        // Small integers and quarters: every product, sum and scaled input is exact in f32,
        // so the f32 result rounded to bf16 once is the one right answer, whatever the order
        // of the sums. Covers the bf16 GEMM's epilogue (bias and rounding) on AVX512-BF16.
        let (m, k, n) = (37, 70, 45);
        let grid = |r: usize, c: usize, f: &dyn Fn(usize, usize) -> f32| -> Tensor {
            Tensor::from_vec((0..r * c).map(|i| f(i / c, i % c)).collect(), &[r, c])
        };
        let a = grid(m, k, &|i, j| ((i * 7 + j * 3) % 11) as f32 - 5.0);
        let w = grid(n, k, &|i, j| ((i * 5 + j * 2) % 9) as f32 - 4.0);
        let full = grid(m, n, &|i, j| ((i * 5 + j) % 13) as f32 * 0.25 - 1.0);
        let row = grid(1, n, &|_, j| (j % 7) as f32 * 0.5).reshape(&[n]);
        let column_major = grid(n, m, &|i, j| ((i + 3 * j) % 5) as f32 * 0.25).t();
        let bf = |t: &Tensor| t.to_dtype(DType::BF16);
        for input in [&full, &row, &column_major] {
            for (beta, alpha) in [(0.0, 1.0), (1.0, 1.0), (0.5, 2.0), (-1.0, 0.25)] {
                let want = input.addmm_with(&a, &w.t(), beta, alpha).to_dtype(DType::BF16);
                let got = bf(input).addmm_with(&bf(&a), &bf(&w).t(), beta, alpha);
                assert_eq!(got.dtype(), DType::BF16);
                assert_eq!(
                    got.to_vec(),
                    want.to_vec(),
                    "input {:?} strides {:?}, beta {beta}, alpha {alpha}",
                    input.shape(),
                    input.strides()
                );
            }
        }
    }

    #[test]
    fn addmm_backward_matches_the_composed_ops() {
        let (a0, b0) = (vals(&[3, 4], 1), vals(&[4, 2], 2));
        for (shape, beta, alpha) in
            [(vec![3, 2], 1.0, 1.0), (vec![2], 0.5, -2.0), (vec![3, 1], 0.0, 0.25), (vec![], 2.0, 1.0)]
        {
            let c0 = vals(&shape, 3);
            let leaves =
                || (leaf(&c0.to_vec_f64(), &shape), leaf(&a0.to_vec_f64(), &[3, 4]), leaf(&b0.to_vec_f64(), &[4, 2]));
            let (c, a, b) = leaves();
            let y = c.addmm_with(&a, &b, beta, alpha);
            assert_eq!(y.grad_fn_name(), Some("addmm"));
            y.exp().mean().backward();
            let (rc, ra, rb) = leaves();
            (&rc * beta + ra.matmul(&rb) * alpha).exp().mean().backward();
            assert_close64(&grad(&c), &grad(&rc), 1e-14);
            assert_close64(&grad(&a), &grad(&ra), 1e-14);
            assert_close64(&grad(&b), &grad(&rb), 1e-14);
            if beta == 0.0 {
                assert_eq!(grad(&c), vec![0.0; 3], "beta = 0: no gradient to the input");
            }
            gradcheck(|t| t[0].addmm_with(&t[1], &t[2], beta, alpha).exp(), &[c0.clone(), a0.clone(), b0.clone()])
                .unwrap();
        }
        // Only some operands requiring grad; a transposed-view operand.
        let w = leaf(&B, &[3, 2]);
        let x = t64(&A, &[2, 3]);
        t64(&[1.0, 1.0], &[2]).addmm(&x, &w.t().contiguous().t()).sum().backward();
        assert_eq!(grad(&w), vec![5.0, 5.0, 7.0, 7.0, 9.0, 9.0]);
    }

    #[test]
    fn addmm_on_meta_gives_shapes() {
        let m = |s: &[usize]| Tensor::full_on(s, 0.0, DType::F32, Device::Meta);
        let (a, b) = (m(&[5, 3]).requires_grad_(true), m(&[3, 4]));
        let y = m(&[4]).addmm(&a, &b);
        assert_eq!((y.shape(), y.device()), (&[5, 4][..], Device::Meta));
        y.sum().backward();
        assert_eq!(a.grad().unwrap().shape(), &[5, 3]);
    }

    #[test]
    #[should_panic(expected = "addmm: mat1 and mat2 must be matrices, got shapes [3] and [3, 2]")]
    fn addmm_of_a_vector_panics() {
        Tensor::zeros(&[2]).addmm(&Tensor::zeros(&[3]), &Tensor::zeros(&[3, 2]));
    }

    #[test]
    #[should_panic(expected = "addmm: mat1 [2, 3] @ mat2 [2, 2]: inner dimensions 3 and 2 differ")]
    fn addmm_inner_dimension_mismatch_panics() {
        Tensor::zeros(&[2]).addmm(&Tensor::zeros(&[2, 3]), &Tensor::zeros(&[2, 2]));
    }

    #[test]
    #[should_panic(
        expected = "addmm: input of shape [3] cannot be broadcast to the product's shape [2, 2] (mat1 [2, 3] @ mat2 [3, 2])"
    )]
    fn addmm_input_not_broadcastable_panics() {
        Tensor::zeros(&[3]).addmm(&Tensor::zeros(&[2, 3]), &Tensor::zeros(&[3, 2]));
    }

    #[test]
    #[should_panic(expected = "addmm: input of shape [2, 2, 2] cannot be broadcast to the product's shape [2, 2]")]
    fn addmm_input_larger_than_the_product_panics() {
        Tensor::zeros(&[2, 2, 2]).addmm(&Tensor::zeros(&[2, 3]), &Tensor::zeros(&[3, 2]));
    }

    #[test]
    #[should_panic(expected = "addmm: expected all tensors of one dtype, got f64 (shape [2]) and f32 (shape [2, 3])")]
    fn addmm_dtype_mix_panics() {
        t64(&[1.0, 2.0], &[2]).addmm(&Tensor::zeros(&[2, 3]), &Tensor::zeros(&[3, 2]));
    }

    #[test]
    #[should_panic(expected = "addmm: expected a floating-point tensor (f32, f64, bf16 or f16), got i64 (shape [2])")]
    fn addmm_of_integers_panics() {
        let i = |s: &[usize]| Tensor::from_vec_i64(vec![1; s.iter().product()], s);
        i(&[2]).addmm(&i(&[2, 2]), &i(&[2, 2]));
    }

    #[test]
    fn matmul_folds_batch_dims_into_rows_against_a_matrix() {
        // [2, 3, 4, 5] x [5, 2] runs as one [24, 5] x [5, 2] product; a permuted
        // (non-viewable) left operand is copied first. Values, shape and gradients hold.
        let q = vals(&[5, 2], 2);
        for p in [vals(&[2, 3, 4, 5], 1), vals(&[4, 3, 2, 5], 1).permute(&[2, 1, 0, 3])] {
            let y = p.matmul(&q);
            assert_eq!(y.shape(), &[2, 3, 4, 2]);
            let expect = naive(&p.contiguous(), &q.expand(&[2, 3, 5, 2]).contiguous());
            assert_close64(&y.to_vec_f64(), &expect, 1e-14);
            gradcheck(|t| t[0].matmul(&t[1]), &[p, q.clone()]).unwrap();
        }
    }

    #[test]
    fn matmul_matches_a_naive_reference_on_every_kernel_path() {
        // Small batches run in parallel over the batch; a large matrix runs one GEMM.
        for (sa, sb) in
            [(vec![8, 5, 7], vec![8, 7, 3]), (vec![1, 33, 17], vec![1, 17, 9]), (vec![100, 100], vec![100, 100])]
        {
            let (a, b) = (vals(&sa, 1), vals(&sb, 2));
            assert_close64(&a.matmul(&b).to_vec_f64(), &naive(&a, &b), 1e-12);
        }
    }

    #[test]
    fn matmul_takes_strided_operands_without_changing_results() {
        let (a, b) = (vals(&[3, 4], 1), vals(&[4, 2], 2));
        let reference = a.matmul(&b).to_vec_f64();
        let at = transposed_storage(&a);
        let bt = transposed_storage(&b);
        assert!(!at.is_contiguous() && !bt.is_contiguous());
        assert_eq!(at.matmul(&bt).to_vec_f64(), reference);
        assert_eq!(b.t().matmul(&a.t()).to_vec_f64(), transposed(&reference, 3, 2));
        // Narrowed, permuted and expanded (stride 0) operands.
        let wide = vals(&[3, 6], 3);
        let n = wide.narrow(1, 1, 4);
        assert_eq!(n.matmul(&b).to_vec_f64(), n.contiguous().matmul(&b).to_vec_f64());
        let e = b.unsqueeze(0).expand(&[3, 4, 2]);
        let p = vals(&[3, 3, 4], 4).permute(&[1, 0, 2]);
        assert_eq!(p.matmul(&e).to_vec_f64(), p.contiguous().matmul(&e.contiguous()).to_vec_f64());
        let row = vals(&[1, 4], 5).expand(&[3, 4]);
        assert_eq!(row.matmul(&b).to_vec_f64(), row.contiguous().matmul(&b).to_vec_f64());
        check_noncontig(|t| t[0].matmul(&t[1]), &[a, b]);
        check_noncontig(|t| t[0].matmul(&t[1]), &[vals(&[2, 2, 3], 6), vals(&[3], 7)]);
    }

    fn transposed(v: &[f64], rows: usize, cols: usize) -> Vec<f64> {
        (0..cols).flat_map(|j| (0..rows).map(move |i| v[i * cols + j])).collect()
    }

    #[test]
    fn matmul_with_zero_sized_dims() {
        let a = Tensor::zeros(&[2, 0]).requires_grad_(true);
        let b = Tensor::zeros(&[0, 3]).requires_grad_(true);
        let y = a.matmul(&b);
        assert_eq!((y.shape(), y.to_vec()), (&[2, 3][..], vec![0.0; 6]));
        y.sum().backward();
        assert_eq!(a.grad().unwrap().shape(), &[2, 0]);
        assert_eq!(Tensor::zeros(&[0, 3]).matmul(&Tensor::ones(&[3, 2])).shape(), &[0, 2]);
        assert_eq!(Tensor::zeros(&[0, 2, 3]).matmul(&Tensor::ones(&[3, 2])).shape(), &[0, 2, 2]);
    }

    #[test]
    fn matmul_on_meta_gives_shapes() {
        let a = Tensor::full_on(&[4, 1, 5, 3], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        let b = Tensor::full_on(&[6, 3, 2], 0.0, DType::F32, Device::Meta);
        let y = a.matmul(&b);
        assert_eq!((y.shape(), y.device()), (&[4, 6, 5, 2][..], Device::Meta));
        let v = Tensor::full_on(&[3], 0.0, DType::F32, Device::Meta);
        assert_eq!(a.matmul(&v).shape(), &[4, 1, 5]);
        y.sum().backward();
        assert_eq!((a.grad().unwrap().shape(), a.grad().unwrap().device()), (&[4, 1, 5, 3][..], Device::Meta));
    }

    #[test]
    #[should_panic(expected = "matmul: [32, 100] x [784, 256]: inner dimensions 100 and 784 differ")]
    fn matmul_inner_dimension_mismatch_message() {
        Tensor::zeros(&[32, 100]).matmul(&Tensor::zeros(&[784, 256]));
    }

    #[test]
    #[should_panic(expected = "matmul: [3] x [2, 4]: inner dimensions 3 and 2 differ")]
    fn matmul_vector_mismatch_message() {
        Tensor::zeros(&[3]).matmul(&Tensor::zeros(&[2, 4]));
    }

    #[test]
    #[should_panic(expected = "matmul: [2, 2, 3] x [3, 3, 2]: batch dimensions cannot be broadcast together")]
    fn matmul_batch_mismatch_message() {
        Tensor::zeros(&[2, 2, 3]).matmul(&Tensor::zeros(&[3, 3, 2]));
    }

    #[test]
    #[should_panic(expected = "matmul: both arguments need at least 1 dimension, got shapes [] and [2]")]
    fn matmul_of_rank0_panics() {
        Tensor::scalar(1.0).matmul(&Tensor::zeros(&[2]));
    }

    #[test]
    #[should_panic(
        expected = "matmul: expected all tensors of one dtype, got f32 (shape [2, 2]) and f64 (shape [2, 2])"
    )]
    fn matmul_dtype_mix_panics() {
        Tensor::zeros(&[2, 2]).matmul(&Tensor::zeros(&[2, 2]).to_dtype(DType::F64));
    }

    #[test]
    #[should_panic(
        expected = "matmul: expected all tensors on one device, got cpu (shape [2, 2]) and meta (shape [2, 2])"
    )]
    fn matmul_device_mix_panics() {
        Tensor::zeros(&[2, 2]).matmul(&Tensor::full_on(&[2, 2], 0.0, DType::F32, Device::Meta));
    }

    /// `x W^T` with `W` much wider than `x` is tall runs as `W x^T` transposed back (the
    /// CPU's `transposed_pays`), other shapes as the product with the bias row added after
    /// (split over the team when large): matmul and addmm (beta 0, 1 and other, a
    /// broadcast bias), f32 and f64, tile edges included, against a naive product (exact:
    /// the values are quarter steps, so every sum is exact in both types).
    #[test]
    fn products_of_a_transposed_weight_with_a_bias_match_a_naive_product() {
        for (m, k, n) in [(16, 256, 64), (20, 300, 100), (64, 784, 256), (3, 5, 7), (200, 64, 300)] {
            let vals = |len: usize, seed: usize| -> Vec<f64> {
                (0..len).map(|i| ((i * 37 + seed * 11) % 23) as f64 * 0.25 - 2.5).collect()
            };
            let (xv, wv, bv) = (vals(m * k, 1), vals(n * k, 2), vals(n, 3));
            let naive: Vec<f64> =
                (0..m * n).map(|q| (0..k).map(|p| xv[(q / n) * k + p] * wv[(q % n) * k + p]).sum()).collect();
            for dtype in [DType::F64, DType::F32] {
                let x = t64(&xv, &[m, k]).to_dtype(dtype);
                let w = t64(&wv, &[n, k]).to_dtype(dtype);
                let bias = t64(&bv, &[n]).to_dtype(dtype);
                assert_eq!(x.matmul(&w.t()).to_vec_f64(), naive, "matmul {m}x{k}x{n} {dtype:?}");
                for (beta, alpha) in [(0.0, 1.0), (1.0, 1.0), (0.5, -2.0)] {
                    let want: Vec<f64> = naive.iter().enumerate().map(|(q, p)| beta * bv[q % n] + alpha * p).collect();
                    let got = bias.addmm_with(&x, &w.t(), beta, alpha).to_vec_f64();
                    assert_eq!(got, want, "addmm {m}x{k}x{n} {dtype:?} beta={beta} alpha={alpha}");
                }
            }
        }
    }

    /// `q k^T` where `k` holds heads split from `[N, S, E]` (rows of `k^T` spaced `E`
    /// apart): the gradient, made in the keys' own layout, matches the one through a
    /// contiguous copy of `k^T` (the other formula), and reaches the leaf by rows.
    #[test]
    fn the_gradient_of_a_transposed_view_of_spaced_rows_matches_a_copy() {
        let vals = |len: usize, seed: usize| -> Vec<f64> {
            (0..len).map(|i| ((i * 37 + seed * 11) % 23) as f64 * 0.25 - 2.5).collect()
        };
        let (n, s, h, d, l) = (2, 5, 2, 3, 4);
        let q = t64(&vals(n * h * l * d, 1), &[n, h, l, d]);
        let w = t64(&vals(n * h * l * s, 2), &[n, h, l, s]);
        let keys = |y: &Tensor| y.reshape(&[n, s, h, d]).transpose(1, 2).transpose(-2, -1);
        let (y1, y2) = (leaf(&vals(n * s * h * d, 3), &[n, s, h * d]), leaf(&vals(n * s * h * d, 3), &[n, s, h * d]));
        let kt = keys(&y1);
        assert!(super::is_transposed_matrix(&kt), "strides {:?}", kt.strides());
        (q.matmul(&kt) * &w).sum().backward();
        let kt2 = keys(&y2).contiguous();
        assert!(!super::is_transposed_matrix(&kt2));
        (q.matmul(&kt2) * &w).sum().backward();
        assert_close64(&grad(&y1), &grad(&y2), 1e-12);
    }
}
