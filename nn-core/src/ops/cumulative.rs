//! Cumulative ops along one dimension: `cumsum` and `cumprod`, with their adjoints (a
//! running sum from the back, and PyTorch's zero-aware product rule).

use std::sync::Arc;

use smallvec::smallvec;

use crate::autograd::entry::op_entry;
use crate::autograd::{op_result, trace, Grads};
use crate::backend::Scan;
use crate::dtype::DType;
use crate::shape::{Dim, Layout};
use crate::tensor::Tensor;

/// `shape` viewed as `[outer, shape[d], inner]` (a 0-d tensor is one line of one).
pub(crate) fn lines_of(shape: &[usize], d: usize) -> (usize, usize, usize) {
    if shape.is_empty() {
        return (1, 1, 1);
    }
    (shape[..d].iter().product(), shape[d], shape[d + 1..].iter().product())
}

/// The operand of a scan: `bool` counts as `i64` (PyTorch's result dtype); a half-type
/// input is scanned in `f32` (see [`scan_half`]).
fn scan_input(x: &Tensor) -> Tensor {
    match x.dtype() {
        DType::Bool => x.to_dtype(DType::I64),
        _ => x.clone(),
    }
}

/// A scan of an `f16`/`bf16` input: the running values are kept in `f32` and each output
/// rounded once to the input's dtype (PyTorch's CPU kernels accumulate halves in `f32`
/// too); `None` for other dtypes.
fn scan_half(x: &Tensor, scan: impl FnOnce(&Tensor) -> Tensor) -> Option<Tensor> {
    x.dtype().is_half().then(|| scan(&x.to_dtype(DType::F32)).to_dtype(x.dtype()))
}

impl Tensor {
    /// Running sum along `dim`, `torch.cumsum`: `y[.., i, ..] = sum_{j <= i} x[.., j, ..]`,
    /// same shape. Floats accumulate in `f64` and round once per output (PyTorch's CPU
    /// kernel); `f16` and `bf16` accumulate in `f32`; `i64` and `bool` inputs give `i64`
    /// (wrapping on overflow). The gradient is the running sum of the incoming gradient
    /// from the back.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    /// assert_eq!(x.cumsum(1).to_vec(), vec![1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
    /// assert_eq!(x.cumsum(0).to_vec(), vec![1.0, 2.0, 3.0, 5.0, 7.0, 9.0]);
    /// let mask = Tensor::from_vec_bool(vec![false, true, true], &[3]);
    /// assert_eq!(mask.cumsum(-1).to_vec_i64(), vec![0, 1, 2]);
    /// ```
    ///
    /// # Panics
    /// When `dim` is out of range.
    #[track_caller]
    pub fn cumsum<D: Dim>(&self, dim: D) -> Tensor {
        let d = dim.resolve(self.rank(), crate::names::CUMSUM);
        let again = |c: &[Option<&Tensor>]| c[0].expect("present").cumsum(dim);
        let _op = op_entry!(crate::names::CUMSUM, [self], attrs = || vec![("dim", trace::int(d))], again = again);
        scan_half(self, |x| cumsum_along(x, d, false)).unwrap_or_else(|| cumsum_along(&scan_input(self), d, false))
    }

    /// Running product along `dim`, `torch.cumprod`: `y[.., i, ..] = prod_{j <= i}
    /// x[.., j, ..]`, same shape (dtypes as [`cumsum`](Tensor::cumsum)).
    ///
    /// The gradient is PyTorch's: `dx_k = sum_{j >= k} g_j y_j / x_k` before the first
    /// zero of a line, `sum_{j >= z} g_j prod_{i <= j, i != z} x_i` at that first zero `z`,
    /// and 0 after it (exact with zeros in the input, where dividing by `x` would not be).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![2.0, 3.0, 0.0, 4.0], &[4]).requires_grad_(true);
    /// let y = x.cumprod(0);
    /// assert_eq!(y.to_vec(), vec![2.0, 6.0, 0.0, 0.0]);
    /// y.sum().backward();
    /// // d/dx0 = 1 + 3, d/dx1 = 2, d/dx2 = 2*3 + 2*3*4, d/dx3 = 0.
    /// assert_eq!(x.grad().unwrap().to_vec(), vec![4.0, 2.0, 30.0, 0.0]);
    /// ```
    ///
    /// # Panics
    /// As [`cumsum`](Tensor::cumsum).
    #[track_caller]
    pub fn cumprod<D: Dim>(&self, dim: D) -> Tensor {
        let d = dim.resolve(self.rank(), crate::names::CUMPROD);
        let again = |c: &[Option<&Tensor>]| c[0].expect("present").cumprod(dim);
        let _op = op_entry!(crate::names::CUMPROD, [self], attrs = || vec![("dim", trace::int(d))], again = again);
        scan_half(self, |x| cumprod_along(x, d)).unwrap_or_else(|| cumprod_along(&scan_input(self), d))
    }
}

/// The backend scan of `x` along `d`, with no graph.
fn scan(x: &Tensor, d: usize, scan: Scan) -> Arc<crate::backend::Storage> {
    Arc::new(x.storage_arc().scan(x.layout(), lines_of(x.shape(), d), scan))
}

/// `cumsum` along `d` (from the back when `reverse`); each direction's adjoint is the
/// other.
fn cumsum_along(x: &Tensor, d: usize, reverse: bool) -> Tensor {
    let name = if reverse { "cumsum_reverse" } else { "cumsum" };
    let storage = scan(x, d, Scan { prod: false, reverse });
    op_result(name, storage, Layout::contiguous(x.shape()), &[x], || {
        move |g: &Tensor, _: &[bool]| -> Grads { smallvec![Some(cumsum_along(g, d, !reverse))] }
    })
}

fn cumprod_along(x: &Tensor, d: usize) -> Tensor {
    let storage = scan(x, d, Scan { prod: true, reverse: false });
    let layout = Layout::contiguous(x.shape());
    let y = Tensor::from_parts(storage.clone(), layout.clone(), None);
    op_result("cumprod", storage, layout, &[x], || {
        let x = x.saved_for_backward();
        move |g: &Tensor, _: &[bool]| -> Grads { smallvec![Some(cumprod_backward(g, &x, &y, d))] }
    })
}

/// PyTorch's `cumprod_backward`, composed from ops that run on every device (no value is
/// read back to decide a branch): the two cases of the rule in [`Tensor::cumprod`] are
/// computed for every line and selected by masks.
fn cumprod_backward(g: &Tensor, x: &Tensor, y: &Tensor, d: usize) -> Tensor {
    let (zero, one) = (x.scalar_like(0.0), x.scalar_like(1.0));
    let is_zero = x.eq(&zero).to_dtype(x.dtype());
    // How many zeros up to and including each position.
    let zeros_so_far = cumsum_along(&is_zero, d, false);
    let before = zeros_so_far.eq(&zero);
    let first_zero = (&is_zero * &zeros_so_far).eq(&one);
    // Before the first zero every x is non-zero: the quotient rule holds.
    let safe_x = Tensor::where_cond(&before, x, &one);
    let before_grad = cumsum_along(&(g * y), d, true) / safe_x;
    // At the first zero: the running products with that zero replaced by one.
    let x_without = Tensor::where_cond(&first_zero, &one, x);
    let y_without = scan(&x_without, d, Scan { prod: true, reverse: false });
    let y_without = Tensor::from_parts(y_without, Layout::contiguous(x.shape()), None);
    let at_zero_grad = cumsum_along(&(g * &y_without), d, true);
    Tensor::where_cond(&before, &before_grad, &Tensor::where_cond(&first_zero, &at_zero_grad, &zero))
}

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    /// 2 x 3 x 2, no zeros.
    const X: [f64; 12] = [0.5, -1.5, 2.0, 0.25, -0.75, 1.25, 1.5, 0.8, -2.0, 0.6, 1.1, -0.4];

    #[test]
    fn cumsum_forward_along_each_dim() {
        let x = t64(&X, &[2, 3, 2]);
        let s2 = x.cumsum(2).to_vec_f64();
        assert_close64(&s2, &[0.5, -1.0, 2.0, 2.25, -0.75, 0.5, 1.5, 2.3, -2.0, -1.4, 1.1, 0.7], 1e-15);
        let s1 = x.cumsum(1).to_vec_f64();
        assert_close64(&s1, &[0.5, -1.5, 2.5, -1.25, 1.75, 0.0, 1.5, 0.8, -0.5, 1.4, 0.6, 1.0], 1e-15);
        let s0 = x.cumsum(-3).to_vec_f64();
        assert_close64(&s0[6..], &[2.0, -0.7, 0.0, 0.85, 0.35, 0.85], 1e-15);
        assert_eq!(x.cumsum(1).shape(), &[2, 3, 2]);
        // f32 accumulates in f64 and rounds each output once.
        let f = Tensor::from_vec(vec![1e8, 1.0, -1e8, 1.0], &[4]).cumsum(0).to_vec();
        assert_eq!(f, vec![1e8, 1e8, 1.0, 2.0]);
    }

    #[test]
    fn cumprod_forward_with_and_without_zeros() {
        let x = t64(&[2.0, -3.0, 0.5, 4.0, 0.0, 5.0, 2.0, 1.5], &[2, 4]);
        assert_eq!(x.cumprod(1).to_vec_f64(), vec![2.0, -6.0, -3.0, -12.0, 0.0, 0.0, 0.0, 0.0]);
        assert_eq!(x.cumprod(0).to_vec_f64(), vec![2.0, -3.0, 0.5, 4.0, 0.0, -15.0, 1.0, 6.0]);
    }

    #[test]
    fn integer_and_bool_scans_give_i64() {
        let i = Tensor::from_vec_i64(vec![3, -1, 4, 2], &[2, 2]);
        assert_eq!(i.cumsum(0).to_vec_i64(), vec![3, -1, 7, 1]);
        assert_eq!(i.cumprod(1).to_vec_i64(), vec![3, -3, 4, 8]);
        let b = Tensor::from_vec_bool(vec![true, false, true, true], &[4]);
        let c = b.cumsum(0);
        assert_eq!((c.dtype(), c.to_vec_i64()), (DType::I64, vec![1, 1, 2, 3]));
        assert_eq!(b.cumprod(0).to_vec_i64(), vec![1, 0, 0, 0]);
        // Position ids from an attention mask, as HF models compute them.
        let mask = Tensor::from_vec_i64(vec![0, 0, 1, 1, 1], &[1, 5]);
        assert_eq!(mask.cumsum(-1).to_vec_i64(), vec![0, 0, 1, 2, 3]);
    }

    #[test]
    fn cumsum_backward_through_exp_mean() {
        let x = leaf(&[0.5, -1.0, 2.0], &[3]);
        let y = x.cumsum(0); // [0.5, -0.5, 1.5]
        y.exp().mean().backward();
        let e: Vec<f64> = [0.5f64, -0.5, 1.5].iter().map(|v| v.exp() / 3.0).collect();
        assert_close64(&grad(&x), &[e[0] + e[1] + e[2], e[1] + e[2], e[2]], 1e-15);
    }

    #[test]
    fn cumprod_backward_through_exp_mean_with_a_zero() {
        // y = [2, 0, 0, 0]; dy_j/dx_k for the zero at 1: y0 and (x0, x0 x2, x0 x2 x3).
        let x = leaf(&[2.0, 0.0, 3.0, -1.0], &[4]);
        let y = x.cumprod(0);
        assert_eq!(y.to_vec_f64(), vec![2.0, 0.0, 0.0, 0.0]);
        y.exp().mean().backward();
        let (e2, e0) = (2f64.exp() / 4.0, 1.0 / 4.0);
        let expected = [e2, e0 * (2.0 + 6.0 - 6.0), 0.0, 0.0];
        assert_close64(&grad(&x), &expected, 1e-15);
    }

    #[test]
    fn cumprod_gradient_is_exact_for_zeros_anywhere() {
        let rows: [[f64; 5]; 6] = [
            [0.5, -1.5, 2.0, 0.25, 1.2],
            [0.0, -1.5, 2.0, 0.25, 1.2],
            [0.5, -1.5, 2.0, 0.25, 0.0],
            [0.5, 0.0, 2.0, 0.0, 1.2],
            [0.0, 0.0, 0.0, 0.0, 0.0],
            [1.5, 0.7, 0.0, 0.9, -1.1],
        ];
        for r in rows {
            gradcheck(|t| t[0].cumprod(0), &[t64(&r, &[5])]).unwrap_or_else(|e| panic!("{r:?}: {e}"));
        }
        let flat: Vec<f64> = rows.iter().flatten().copied().collect();
        gradcheck(|t| t[0].cumprod(1), &[t64(&flat, &[6, 5])]).unwrap();
        // (sin, not exp: exp(2^4) would drown the finite differences in rounding.)
        gradcheck(|t| t[0].cumprod(0).sin(), &[t64(&flat, &[6, 5])]).unwrap();
    }

    #[test]
    fn cumsum_and_cumprod_gradcheck() {
        let x = t64(&X, &[2, 3, 2]);
        for d in 0..3 {
            gradcheck(|t| t[0].cumsum(d), std::slice::from_ref(&x)).unwrap();
            gradcheck(|t| t[0].cumprod(d), std::slice::from_ref(&x)).unwrap();
            gradcheck(|t| t[0].cumsum(d).cumprod(d).sin(), std::slice::from_ref(&x)).unwrap();
        }
        gradcheck(|t| t[0].cumsum(0), &[t64(&[1.5], &[])]).unwrap();
    }

    #[test]
    fn scans_on_views_rank0_empty_and_meta() {
        let x = t64(&X, &[2, 3, 2]);
        check_noncontig(|t| t[0].cumsum(1), std::slice::from_ref(&x));
        check_noncontig(|t| t[0].cumprod(2), std::slice::from_ref(&x));
        let p = x.permute(&[2, 0, 1]);
        assert_eq!(p.cumprod(2).to_vec_f64(), p.contiguous().cumprod(2).to_vec_f64());
        let s = t64(&[2.5], &[]);
        assert_eq!((s.cumsum(0).shape(), s.cumprod(-1).item()), (&[] as &[usize], 2.5));
        assert_eq!(Tensor::zeros(&[0, 3]).cumsum(1).shape(), &[0, 3]);
        let m = Tensor::full_on(&[2, 3], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        let y = m.cumprod(1);
        assert_eq!((y.shape(), y.device()), (&[2, 3][..], Device::Meta));
        y.sum().backward();
        assert_eq!(m.grad().unwrap().shape(), &[2, 3]);
    }

    #[test]
    #[should_panic(expected = "cumsum: dimension 2 out of range for a tensor of rank 2 (expected -2..=1)")]
    fn cumsum_dim_out_of_range_panics() {
        Tensor::zeros(&[2, 3]).cumsum(2);
    }

    /// Half inputs scan in f32 and round each output once; the gradient reaches the half
    /// input in its dtype.
    #[test]
    fn half_scans_accumulate_in_f32() {
        let v: Vec<f32> = (0..40).map(|i| 1.0 + 0.01 * ((i * 7 % 13) as f32)).collect();
        for h in [DType::BF16, DType::F16] {
            let x = Tensor::from_vec(v.clone(), &[2, 20]).to_dtype(h).requires_grad_(true);
            let wide = x.detach().to_dtype(DType::F32);
            for (got, want) in [(x.cumsum(1), wide.cumsum(1)), (x.cumprod(1), wide.cumprod(1))] {
                assert_eq!(got.dtype(), h);
                assert_eq!(got.to_vec(), want.to_dtype(h).to_vec(), "{h}");
            }
            x.cumsum(1).sum().backward();
            let g = x.grad().expect("a gradient");
            assert_eq!(g.dtype(), h);
            assert_eq!(g.to_vec()[..3], [20.0, 19.0, 18.0]);
        }
    }
}
