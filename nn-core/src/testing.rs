//! Test helpers shared by every crate of the workspace: the finite-difference gradient
//! check and tolerant comparisons.

use crate::autograd::no_grad;
use crate::dtype::DType;
use crate::tensor::Tensor;

/// Tolerances of [`gradcheck_with`]. The defaults are PyTorch's `gradcheck` defaults
/// (`eps = 1e-6`, `atol = 1e-5`, `rtol = 1e-3`).
#[derive(Clone, Copy, Debug)]
pub struct GradcheckOptions {
    /// Central-difference step.
    pub eps: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance (of the numerical value).
    pub rtol: f64,
}

impl Default for GradcheckOptions {
    fn default() -> Self {
        GradcheckOptions { eps: 1e-6, atol: 1e-5, rtol: 1e-3 }
    }
}

/// Compares the analytical gradient of `f` (through `backward`) with central finite
/// differences, in `f64`, for every floating-point input.
///
/// The output is reduced as `sum(f(inputs) * r)` with fixed, varied weights `r`, so the
/// gradient entering `f`'s backward is not all ones and a rule that ignores it fails.
/// Non-floating inputs (indices, masks) are passed through unchanged.
///
/// ```
/// use nn_core::{testing::gradcheck, Tensor};
/// let x = Tensor::from_vec(vec![0.3, -1.2, 2.0], &[3]);
/// gradcheck(|t| (&t[0] * &t[0]).exp(), &[x]).unwrap();
/// ```
pub fn gradcheck(f: impl Fn(&[Tensor]) -> Tensor, inputs: &[Tensor]) -> Result<(), String> {
    gradcheck_with(f, inputs, GradcheckOptions::default())
}

/// [`gradcheck`] with explicit tolerances.
pub fn gradcheck_with(f: impl Fn(&[Tensor]) -> Tensor, inputs: &[Tensor], opt: GradcheckOptions) -> Result<(), String> {
    let is_float = |t: &Tensor| t.dtype().is_float();
    let base: Vec<Tensor> = inputs
        .iter()
        .map(|t| if is_float(t) { Tensor::from_vec_f64(t.to_vec_f64(), t.shape()) } else { t.clone() })
        .collect();
    let leaves: Vec<Tensor> =
        base.iter().map(|t| if is_float(t) { t.detach().requires_grad_(true) } else { t.clone() }).collect();
    let out = f(&leaves);
    if out.dtype() != DType::F64 {
        return Err(format!("gradcheck: f returned dtype {} for f64 inputs", out.dtype()));
    }
    let weights = projection(out.shape());
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
                xs[i] = Tensor::from_vec_f64(v, leaf.shape());
                eval(&xs)
            };
            let numeric = (probe(opt.eps) - probe(-opt.eps)) / (2.0 * opt.eps);
            let a = analytic[j];
            if !((a - numeric).abs() <= opt.atol + opt.rtol * numeric.abs()) {
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
