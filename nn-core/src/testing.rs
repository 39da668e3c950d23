//! Test helpers shared by every crate of the workspace: the finite-difference gradient
//! check and tolerant comparisons.

use crate::autograd::no_grad;
use crate::dtype::DType;
use crate::tensor::Tensor;

/// Tolerances of [`gradcheck_with`]. The defaults are PyTorch's `gradcheck` defaults
/// (`eps = 1e-6`, `atol = 1e-5`, `rtol = 1e-3`).
#[derive(Clone, Copy, Debug)]
pub struct GradcheckConfig {
    /// Central-difference step.
    pub eps: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance (of the numerical value).
    pub rtol: f64,
}

impl Default for GradcheckConfig {
    fn default() -> Self {
        GradcheckConfig { eps: 1e-6, atol: 1e-5, rtol: 1e-3 }
    }
}

/// Compares the analytical gradient of `f` (through `backward`) with central finite
/// differences, in `f64`, for every floating-point input.
///
/// The output is reduced as `sum(f(inputs) * r)` with fixed, varied weights `r`, so the
/// gradient entering `f`'s backward is not all ones and a rule that ignores it fails.
/// Non-floating inputs (indices, masks) are passed through unchanged. Inputs keep their
/// device: on a GPU the check runs there (in `f64`, where the adapter offers it).
///
/// ```
/// use nn_core::{testing::gradcheck, Tensor};
/// let x = Tensor::from_vec(vec![0.3, -1.2, 2.0], &[3]);
/// gradcheck(|t| (&t[0] * &t[0]).exp(), &[x]).unwrap();
/// ```
pub fn gradcheck(f: impl Fn(&[Tensor]) -> Tensor, inputs: &[Tensor]) -> Result<(), String> {
    gradcheck_with(f, inputs, GradcheckConfig::default())
}

/// [`gradcheck`] with explicit tolerances.
pub fn gradcheck_with(f: impl Fn(&[Tensor]) -> Tensor, inputs: &[Tensor], opt: GradcheckConfig) -> Result<(), String> {
    let is_float = |t: &Tensor| t.dtype().is_float();
    let base: Vec<Tensor> = inputs
        .iter()
        .map(|t| {
            if is_float(t) {
                Tensor::from_vec_f64(t.to_vec_f64(), t.shape()).to_device(t.device())
            } else {
                t.clone()
            }
        })
        .collect();
    let leaves: Vec<Tensor> = base
        .iter()
        .map(|t| if is_float(t) { t.detached_for_keeping().requires_grad_(true) } else { t.clone() })
        .collect();
    let out = f(&leaves);
    if out.dtype() != DType::F64 {
        return Err(format!("gradcheck: f returned dtype {} for f64 inputs", out.dtype()));
    }
    let weights = projection(out.shape()).to_device(out.device());
    let loss = (&out * &weights).sum();
    if !loss.requires_grad() {
        return Err("gradcheck: the output does not depend on any input through the graph".into());
    }
    loss.backward();
    let eval = |xs: &[Tensor]| -> f64 { no_grad(|| (&f(xs) * &weights).sum().item()) };
    for (i, leaf) in leaves.iter().enumerate() {
        if !is_float(leaf) {
            continue;
        }
        let analytic = leaf.grad().map(|g| g.to_vec_f64()).unwrap_or_else(|| vec![0.0; leaf.numel()]);
        let values = base[i].to_vec_f64();
        for j in 0..values.len() {
            let probe = |delta: f64| {
                let mut v = values.clone();
                v[j] += delta;
                let mut xs = base.clone();
                xs[i] = Tensor::from_vec_f64(v, leaf.shape()).to_device(leaf.device());
                eval(&xs)
            };
            let numeric = (probe(opt.eps) - probe(-opt.eps)) / (2.0 * opt.eps);
            let a = analytic[j];
            // Negated so that a NaN on either side fails the check.
            #[allow(clippy::neg_cmp_op_on_partial_ord)]
            let mismatch = !((a - numeric).abs() <= opt.atol + opt.rtol * numeric.abs());
            if mismatch {
                return Err(format!(
                    "gradcheck: input {i} (shape {:?}), element {j}: analytical {a:.8e} vs numerical {numeric:.8e}",
                    leaf.shape()
                ));
            }
        }
    }
    Ok(())
}

/// Fixed weights in `[0.5, 1.5)` with alternating signs, so each output element enters the
/// checked sum with a different coefficient.
fn projection(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| {
            let h = ((i as u64).wrapping_mul(2654435761) % 1000) as f64 / 1000.0;
            (0.5 + h) * if i % 2 == 0 { 1.0 } else { -1.0 }
        })
        .collect();
    Tensor::from_vec_f64(v, shape)
}

/// Asserts that two slices agree elementwise within `atol + rtol * |expected|`.
///
/// # Panics
/// On a length mismatch or the first element out of tolerance, naming its index.
#[track_caller]
pub fn assert_close(actual: &[f32], expected: &[f32], atol: f32, rtol: f32) {
    assert_eq!(actual.len(), expected.len(), "assert_close: lengths differ");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        let ok = (a - e).abs() <= atol + rtol * e.abs() || (a.is_nan() && e.is_nan());
        assert!(ok, "assert_close: element {i}: {a} vs expected {e} (atol {atol}, rtol {rtol})");
    }
}

/// Helpers shared by the crate's unit tests (not part of the public API).
#[cfg(test)]
pub(crate) mod support {
    use std::sync::{Mutex, MutexGuard};

    use super::{assert_close, gradcheck};
    use crate::tensor::Tensor;

    /// Serialises the tests that draw from the global generator, so that a test seeding it
    /// is not perturbed by another test drawing on a parallel thread.
    pub(crate) fn rng_lock() -> MutexGuard<'static, ()> {
        static LOCK: Mutex<()> = Mutex::new(());
        LOCK.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An `f64` leaf that requires grad.
    pub(crate) fn leaf(v: &[f64], shape: &[usize]) -> Tensor {
        Tensor::from_vec_f64(v.to_vec(), shape).requires_grad_(true)
    }

    /// An `f64` tensor that does not require grad.
    pub(crate) fn t64(v: &[f64], shape: &[usize]) -> Tensor {
        Tensor::from_vec_f64(v.to_vec(), shape)
    }

    /// The accumulated gradient of `t` as `f64` values.
    #[track_caller]
    pub(crate) fn grad(t: &Tensor) -> Vec<f64> {
        t.grad().expect("the tensor has no gradient").to_vec_f64()
    }

    /// Asserts `|a - e| <= tol * (1 + |e|)` elementwise (NaN matches NaN).
    #[track_caller]
    pub(crate) fn assert_close64(actual: &[f64], expected: &[f64], tol: f64) {
        assert_eq!(actual.len(), expected.len(), "assert_close64: lengths differ ({actual:?} vs {expected:?})");
        for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
            let ok = (a - e).abs() <= tol * (1.0 + e.abs()) || (a.is_nan() && e.is_nan()) || a == e;
            assert!(ok, "assert_close64: element {i}: {a} vs expected {e} (tol {tol})\n actual {actual:?}\n expected {expected:?}");
        }
    }

    /// A copy of `t` (same dtype and values, no graph) whose storage is strided: each value
    /// sits at an odd position of a buffer twice as large, with NaN in the gaps, so a kernel
    /// that ignores strides or the offset reads garbage.
    pub(crate) fn noncontig(t: &Tensor) -> Tensor {
        let vals = t.detach().to_vec_f64();
        let buf: Vec<f64> = vals.iter().flat_map(|&v| [f64::NAN, v]).collect();
        let mut shape = t.shape().to_vec();
        shape.push(2);
        let base = Tensor::from_vec_f64(buf, &shape).to_dtype(t.dtype());
        let out = base.narrow(-1, 1, 1).reshape(t.shape());
        assert_eq!(out.layout().offset(), 1, "noncontig: expected a view at offset 1");
        assert!(t.numel() <= 1 || !out.is_contiguous(), "noncontig: expected a strided view");
        assert!(out.is_leaf() && !out.requires_grad());
        out
    }

    /// A copy of `t` (rank >= 2) stored transposed in its last two dims: `t.t()` of a
    /// contiguous buffer.
    pub(crate) fn transposed_storage(t: &Tensor) -> Tensor {
        assert!(t.rank() >= 2, "transposed_storage: needs rank >= 2");
        t.detach().transpose(-1, -2).contiguous().transpose(-1, -2)
    }

    /// Evaluates `f` on `inputs` (f64 copies requiring grad where floating) and on copies
    /// where input `i` is [`noncontig`], asserting equal outputs and equal gradients of
    /// `sum(f(..) * r)` for fixed varied weights `r`.
    #[track_caller]
    pub(crate) fn check_noncontig(f: impl Fn(&[Tensor]) -> Tensor, inputs: &[Tensor]) {
        let run = |xs: Vec<Tensor>| -> (Vec<f64>, Vec<Vec<f64>>) {
            let xs: Vec<Tensor> =
                xs.into_iter().map(|t| if t.dtype().is_float() { t.requires_grad_(true) } else { t }).collect();
            let out = f(&xs);
            let vals = out.to_vec_f64();
            let w = Tensor::from_vec_f64((0..out.numel()).map(|i| 0.5 + (i % 7) as f64 * 0.25).collect(), out.shape())
                .to_dtype(out.dtype());
            if out.requires_grad() {
                (&out * &w).sum().backward();
            }
            let grads =
                xs.iter().map(|t| t.grad().map(|g| g.to_vec_f64()).unwrap_or_default()).collect::<Vec<Vec<f64>>>();
            (vals, grads)
        };
        let fresh = |t: &Tensor| Tensor::from_vec_f64(t.to_vec_f64(), t.shape()).to_dtype(t.dtype());
        let (ref_vals, ref_grads) = run(inputs.iter().map(fresh).collect());
        for i in 0..inputs.len() {
            let xs: Vec<Tensor> =
                inputs.iter().enumerate().map(|(j, t)| if j == i { noncontig(t) } else { fresh(t) }).collect();
            let (vals, grads) = run(xs);
            assert_close64(&vals, &ref_vals, 1e-12);
            for (g, rg) in grads.iter().zip(&ref_grads) {
                assert_close64(g, rg, 1e-12);
            }
        }
    }

    /// Forward check of an elementwise op in `f32` and `f64` against hand-computed values.
    #[track_caller]
    pub(crate) fn check_unary_forward(op: impl Fn(&Tensor) -> Tensor, x: &[f64], y: &[f64]) {
        let n = x.len();
        let x32 = Tensor::from_vec(x.iter().map(|&v| v as f32).collect(), &[n]);
        let y32: Vec<f32> = y.iter().map(|&v| v as f32).collect();
        assert_close(&op(&x32).to_vec(), &y32, 1e-6, 1e-5);
        let out = op(&t64(x, &[n]));
        assert_eq!(out.dtype(), crate::DType::F64);
        assert_close64(&out.to_vec_f64(), y, 1e-9);
    }

    /// Backward check of an elementwise op through `op(x).exp().mean()`, whose gradient is
    /// `exp(y) * dy(x) / n` with `y` the hand-computed forward values.
    #[track_caller]
    pub(crate) fn check_unary_backward(op: impl Fn(&Tensor) -> Tensor, x: &[f64], y: &[f64], dy: impl Fn(f64) -> f64) {
        let n = x.len();
        let xs = Tensor::from_vec(x.iter().map(|&v| v as f32).collect(), &[n]).requires_grad_(true);
        op(&xs).exp().mean().backward();
        let expected: Vec<f32> = x.iter().zip(y).map(|(&x, &y)| (y.exp() * dy(x) / n as f64) as f32).collect();
        assert_close(&xs.grad().expect("grad").to_vec(), &expected, 1e-6, 1e-4);
    }

    /// Finite-difference check of an elementwise op at `x` (f64).
    #[track_caller]
    pub(crate) fn check_unary_gradcheck(op: impl Fn(&Tensor) -> Tensor, x: &[f64]) {
        gradcheck(|t| op(&t[0]), &[t64(x, &[x.len()])]).unwrap();
        // And on a 2-D input: the rule must not depend on the shape.
        if x.len().is_multiple_of(2) {
            gradcheck(|t| op(&t[0]), &[t64(x, &[2, x.len() / 2])]).unwrap();
        }
    }

    /// Three tests for an elementwise op: forward values, backward through
    /// `.exp().mean()`, and a finite-difference check.
    macro_rules! unary_suite {
        ($name:ident: $op:expr, x = $x:expr, y = $y:expr, dy = $dy:expr $(,)?) => {
            mod $name {
                #[allow(unused_imports)]
                use super::*;
                const X: &[f64] = &$x;
                const Y: &[f64] = &$y;
                #[test]
                fn forward() {
                    $crate::testing::support::check_unary_forward($op, X, Y);
                }
                #[test]
                fn backward_through_exp_mean() {
                    $crate::testing::support::check_unary_backward($op, X, Y, $dy);
                }
                #[test]
                fn gradcheck_f64() {
                    $crate::testing::support::check_unary_gradcheck($op, X);
                }
            }
        };
    }
    pub(crate) use unary_suite;
}
