//! PyTorch's `_Orthogonal`: a weight kept orthogonal (orthonormal columns, or rows for a wide
//! weight) as `base @ map(original)`, `map` the matrix exponential of a skew-symmetric matrix
//! or a product of Householder reflections, `base` a buffer (PyTorch's default
//! `use_trivialization=True`).

use nn_core::module::parametrize::Parametrization;
use nn_core::prelude::*;
use nn_core::{no_grad, DType};

/// How the original maps to an orthogonal matrix (PyTorch's `orthogonal_map`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrthogonalMap {
    /// `matrix_exp(A - A^T)` of the original's lower triangle `A` (PyTorch's default for a
    /// real weight; `"matrix_exp"`).
    MatrixExp,
    /// The Householder reflections stored below the original's diagonal (`"householder"`).
    Householder,
}

/// PyTorch's `_Orthogonal` (what [`orthogonal`](super::orthogonal) registers): the weight
/// as `base @ map(original)`, with orthonormal columns (rows for a wide weight); `map` is an
/// [`OrthogonalMap`], `base` a buffer (PyTorch's `use_trivialization=True`).
#[derive(Module)]
#[module(name = "_Orthogonal")]
pub struct Orthogonal {
    /// The orthogonal matrix the map's output multiplies, `[n, n]` with `n` the weight's
    /// larger side.
    #[buffer]
    base: Tensor,
    map: OrthogonalMap,
    shape: Vec<usize>,
}

impl Orthogonal {
    /// For a weight of `shape` (a matrix) in `like`'s dtype and device; `base` is zero until
    /// [`right_inverse`](Parametrization::right_inverse) sets it (registration calls it).
    pub fn new(shape: &[usize], map: OrthogonalMap, like: &Tensor) -> Orthogonal {
        let n = shape[0].max(shape[1]);
        let base = Tensor::zeros(&[n, n]).to_dtype(like.dtype()).to_device(like.device());
        Orthogonal { base, map, shape: shape.to_vec() }
    }
}

/// The `[n, k]` identity (ones on the main diagonal) in `like`'s dtype and device.
fn eye(n: usize, k: usize, like: &Tensor) -> Tensor {
    Tensor::eye(n.max(k)).narrow(0, 0, n).narrow(1, 0, k).to_dtype(like.dtype()).to_device(like.device())
}

/// The matrix exponential of the square `a`, by scaling and squaring with a degree-18 Taylor
/// polynomial (the truncation error is below 1e-22 relative to the scaled matrix's norm,
/// under half): ops with gradients, so the exponential is differentiable.
pub(crate) fn matrix_exp(a: &Tensor) -> Tensor {
    let n = a.shape()[0];
    let rows = no_grad(|| a.abs().sum_dim(1, false).max().item());
    let squarings = if rows > 0.5 { (rows / 0.5).log2().ceil() as i32 } else { 0 };
    let scaled = a / 2f64.powi(squarings);
    let id = eye(n, n, a);
    let mut e = id.clone();
    for j in (1..=18).rev() {
        e = &id + &(scaled.matmul(&e) / f64::from(j));
    }
    for _ in 0..squarings {
        e = e.matmul(&e);
    }
    e
}

/// `H_1 H_2 ... H_k` applied to `eye(n, k)`, `H_i = I - tau_i v_i v_i^T` with `v_i` the
/// `i`-th column of `a` below the diagonal and a 1 on it (`torch.linalg.householder_product`).
fn householder_product(a: &Tensor, tau: &Tensor) -> Tensor {
    let (n, k) = (a.shape()[0], a.shape()[1]);
    let v = &a.tril(-1) + &eye(n, k, a);
    let mut q = eye(n, k, a);
    for i in (0..k).rev() {
        let vi = v.narrow(1, i, 1);
        let ti = tau.narrow(0, i, 1);
        q = &q - &(&vi * &ti).matmul(&vi.t().matmul(&q));
    }
    q
}

/// The orthogonal matrix of the QR decomposition of the square `q` with a positive diagonal
/// in R (PyTorch's `_make_orthogonal`), by modified Gram-Schmidt in f64 on the host.
fn make_orthogonal(q: &Tensor) -> Tensor {
    let n = q.shape()[0];
    let m = q.to_dtype(DType::F64).to_vec_f64();
    let mut cols: Vec<Vec<f64>> = (0..n).map(|j| (0..n).map(|i| m[i * n + j]).collect()).collect();
    for j in 0..n {
        let (done, rest) = cols.split_at_mut(j);
        let c = &mut rest[0];
        for p in done.iter() {
            let dot: f64 = p.iter().zip(c.iter()).map(|(a, b)| a * b).sum();
            for (x, y) in c.iter_mut().zip(p) {
                *x -= dot * y;
            }
        }
        let norm = c.iter().map(|x| x * x).sum::<f64>().sqrt();
        for x in c.iter_mut() {
            *x /= norm;
        }
    }
    let out = (0..n * n).map(|idx| cols[idx % n][idx / n]).collect();
    Tensor::from_vec_f64(out, &[n, n]).to_dtype(q.dtype()).to_device(q.device())
}

impl Parametrization for Orthogonal {
    fn forward(&self, originals: &[Tensor], _training: bool) -> Tensor {
        let [x] = originals else { panic!("_Orthogonal takes one original, got {}", originals.len()) };
        let (rows, cols) = (x.shape()[0], x.shape()[1]);
        let transposed = rows < cols;
        let x = if transposed { x.t() } else { x.clone() };
        let (n, k) = (rows.max(cols), rows.min(cols));
        let q = match self.map {
            OrthogonalMap::MatrixExp => {
                let mut l = x.tril(0);
                if n != k {
                    let zeros = Tensor::zeros(&[n, n - k]).to_dtype(x.dtype()).to_device(x.device());
                    l = Tensor::cat(&[&l, &zeros], 1);
                }
                let q = matrix_exp(&(&l - &l.t()));
                if n != k {
                    q.narrow(1, 0, k)
                } else {
                    q
                }
            }
            OrthogonalMap::Householder => {
                let a = x.tril(-1);
                let tau = 2.0 / &((&a * &a).sum_dim(0, false) + 1.0);
                let q = householder_product(&a, &tau);
                // The diagonal's signs, truncated to integers as PyTorch's `.int()`, no graph.
                let diag = no_grad(|| (&x * &eye(n, k, &x)).sum_dim(0, false).to_vec_f64());
                let signs = Tensor::from_vec_f64(diag.iter().map(|d| d.trunc()).collect(), &[1, k]);
                q * &signs.to_dtype(x.dtype()).to_device(x.device())
            }
        };
        let q = self.base.matmul(&q);
        if transposed {
            q.t()
        } else {
            q
        }
    }

    /// Sets `base` from `value` (orthogonalized, completed to `[n, n]` with random columns
    /// when the weight is not square) and returns the original that maps to it: `-I`.
    fn right_inverse(&self, value: &Tensor) -> Option<Vec<Tensor>> {
        assert_eq!(value.shape(), self.shape.as_slice(), "_Orthogonal: a value of another shape");
        let (rows, cols) = (value.shape()[0], value.shape()[1]);
        let q = if rows < cols { value.t() } else { value.clone() };
        let (n, k) = (rows.max(cols), rows.min(cols));
        let base = if n == k {
            let eps = if value.dtype() == DType::F64 { f64::EPSILON } else { f64::from(f32::EPSILON) };
            let tol = 10.0 * n as f64 * eps;
            let err = (q.t().matmul(&q) - &eye(n, n, &q)).abs().max().item();
            if err <= tol {
                q.detach().copy()
            } else {
                make_orthogonal(&q)
            }
        } else {
            let extra = Tensor::randn(&[n, n - k]).to_dtype(q.dtype()).to_device(q.device());
            make_orthogonal(&Tensor::cat(&[&q, &extra], 1))
        };
        self.base.set_data(&base);
        Some(vec![&eye(rows, cols, value) * -1.0])
    }
}
