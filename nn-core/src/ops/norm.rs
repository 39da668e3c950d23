//! Layer normalisation and batch normalisation, composed from differentiable primitives
//! (so their gradients are exact by construction and covered by the primitives' checks).

use std::sync::Arc;

use smallvec::smallvec;

use crate::autograd::{no_grad, op_result, Grads};
use crate::backend::Storage;
use crate::shape::{Dims, Layout};
use crate::tensor::Tensor;

/// [`Tensor::layer_norm`] through the backend's fused kernels (one pass per row forward
/// and backward instead of ten and twenty tensor ops), for checked operands of one dtype
/// and device with `n > 0` elements per row. `None` where the backend has no fused
/// kernel for them: the caller composes the same values from primitives.
fn layer_norm_fused(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    ns: &[usize],
    (eps, centered): (f64, bool),
) -> Option<Tensor> {
    let name = if centered { "layer_norm" } else { "rms_norm" };
    let n = ns.iter().product();
    let same = |t: Option<&Tensor>| t.is_none_or(|t| t.dtype() == x.dtype() && t.device() == x.device());
    if n == 0 || x.numel() == 0 || !same(weight) || !same(bias) {
        return None;
    }
    let parts = |t: Option<&Tensor>| t.map(|t| (t.storage_arc(), t.layout().clone()));
    let (xs, ws, bs) = (x.storage_arc(), parts(weight), parts(bias));
    fn as_ref(p: &Option<(Arc<Storage>, Layout)>) -> Option<(&Storage, &Layout)> {
        p.as_ref().map(|(s, l)| (&**s, l))
    }
    let [y, mean, rstd] = xs.layer_norm_rows(x.layout(), as_ref(&ws), as_ref(&bs), n, (eps, centered))?;
    let inputs: Vec<&Tensor> = [Some(x), weight, bias].into_iter().flatten().collect();
    Some(op_result(name, Arc::new(y), Layout::contiguous(x.shape()), &inputs, || {
        let (xl, has_bias) = (x.layout().clone(), bias.is_some());
        let (shape, param_shape): (Dims, Dims) = (x.shape().into(), ns.into());
        move |g: &Tensor, needs: &[bool]| -> Grads {
            let need_w = ws.is_some() && needs[1];
            let need_b = has_bias && needs[needs.len() - 1];
            let [gx, gw, gb] = xs
                .layer_norm_rows_backward(
                    &xl,
                    (&g.storage_arc(), g.layout()),
                    (&mean, &rstd),
                    as_ref(&ws),
                    (n, centered),
                    [needs[0], need_w, need_b],
                )
                .unwrap_or_else(|| panic!("{name}: the backend that ran the fused forward runs its backward"));
            let wrap = |s: Option<Storage>, shape: &[usize]| {
                s.map(|s| Tensor::from_parts(Arc::new(s), Layout::contiguous(shape), None))
            };
            let mut grads: Grads = smallvec![wrap(gx, &shape)];
            if ws.is_some() {
                grads.push(wrap(gw, &param_shape));
            }
            if has_bias {
                grads.push(wrap(gb, &param_shape));
            }
            grads
        }
    }))
}

/// The shape rules of [`Tensor::layer_norm`] and [`Tensor::rms_norm`]: `x` ends with the
/// (non-empty) `normalized_shape`, and each given parameter has exactly that shape; a
/// panic naming `op` and both shapes otherwise.
#[track_caller]
fn check_normalized(op: &str, x: &Tensor, ns: &[usize], params: [(&str, Option<&Tensor>); 2]) {
    let (r, k) = (x.rank(), ns.len());
    if k == 0 || k > r || x.shape()[r - k..] != *ns {
        panic!("{op}: input of shape {:?} does not end with normalized_shape {:?}", x.shape(), ns);
    }
    for (name, p) in params {
        if let Some(p) = p.filter(|p| p.shape() != ns) {
            panic!("{op}: {name} of shape {:?} for normalized_shape {:?}", p.shape(), ns);
        }
    }
}

impl Tensor {
    /// Layer normalisation over the trailing `normalized_shape` dims:
    /// `(x - mean) / sqrt(var + eps) * weight + bias` with the biased variance, as
    /// PyTorch's `F.layer_norm`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let y = Tensor::from_vec(vec![1.0, 3.0], &[1, 2]).layer_norm(&[2], None, None, 0.0);
    /// assert_eq!(y.to_vec(), vec![-1.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn layer_norm(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Tensor {
        // Under GPU autocast (PyTorch's CUDA list): in f32.
        let again = |c: &[Option<&crate::Tensor>]| c[0].expect("present").layer_norm(normalized_shape, c[1], c[2], eps);
        let _op = crate::autograd::entry::op_entry!(crate::names::LAYER_NORM, [self]; [weight, bias], attrs = || {
            use crate::autograd::trace::Attr;
            vec![
                ("normalized_shape", crate::autograd::trace::ints(normalized_shape)),
                ("eps", Attr::Float(eps)),
                ("has_weight", Attr::Bool(weight.is_some())),
                ("has_bias", Attr::Bool(bias.is_some())),
            ]
        }, again = again);
        if let Some(y) =
            half_with_f32_params(self, [weight, bias], |x, [w, b]| x.layer_norm(normalized_shape, w, b, eps))
        {
            return y;
        }
        check_normalized("layer_norm", self, normalized_shape, [("weight", weight), ("bias", bias)]);
        let (r, k) = (self.rank(), normalized_shape.len());
        if let Some(y) = layer_norm_fused(self, weight, bias, normalized_shape, (eps, true)) {
            return y;
        }
        let dims: Vec<usize> = (r - k..r).collect();
        let mean = self.mean_dims(&dims, true);
        let centered = self - &mean;
        let var = centered.square().mean_dims(&dims, true);
        let mut y = &centered * &(var + eps).sqrt().recip();
        if let Some(w) = weight {
            y = &y * w;
        }
        if let Some(b) = bias {
            y = &y + b;
        }
        y
    }

    /// RMS normalisation over the trailing `normalized_shape` dims, PyTorch's
    /// `F.rms_norm`: `x / sqrt(mean(x^2) + eps) * weight`, `eps` defaulting (`None`) to
    /// the machine epsilon of the type it computes in: `f64::EPSILON` for f64 inputs,
    /// `f32::EPSILON` for f32, bf16 and f16 ones. That is what PyTorch 2.15 computes (its
    /// kernel takes the epsilon of the half types' f32 compute type, while its docs say
    /// `torch.finfo(x.dtype).eps`, which is 2^-7 for bf16 and would shift a bf16 row of
    /// 0.1s from 1.0 to 0.75).
    ///
    /// On the CPU one fused pass per row forward and backward (the kernel of
    /// [`layer_norm`](Tensor::layer_norm), without the mean); elsewhere, and while a trace
    /// records (export sees the standard ops), the composition of `square`, `mean`,
    /// `sqrt` and products.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let y = Tensor::from_vec(vec![3.0, 4.0], &[1, 2]).rms_norm(&[2], None, Some(0.0));
    /// let r = (12.5f32).sqrt(); // the root mean square of 3 and 4
    /// assert_eq!(y.to_vec(), vec![3.0 / r, 4.0 / r]);
    /// ```
    #[track_caller]
    pub fn rms_norm(&self, normalized_shape: &[usize], weight: Option<&Tensor>, eps: Option<f64>) -> Tensor {
        // The compute type's epsilon (PyTorch's `numeric_limits<opmath_t>::epsilon()`):
        // half types compute in f32.
        let eps = eps.unwrap_or(match self.dtype() {
            crate::DType::F64 => f64::EPSILON,
            _ => f64::from(f32::EPSILON),
        });
        // Under GPU autocast (PyTorch's CUDA list): in f32, with f32's `eps` by default.
        let _op = crate::autograd::entry::op_entry!(untraced crate::names::RMS_NORM, [Some(self), weight],
            again = |c| c[0].expect("present").rms_norm(normalized_shape, c[1], Some(eps)));
        if let Some(y) =
            half_with_f32_params(self, [weight, None], |x, [w, _]| x.rms_norm(normalized_shape, w, Some(eps)))
        {
            return y;
        }
        check_normalized("rms_norm", self, normalized_shape, [("weight", weight), ("bias", None)]);
        let (r, k) = (self.rank(), normalized_shape.len());
        if !self.dtype().is_compute_float() {
            panic!("rms_norm: expected a floating-point input, got {} of shape {:?}", self.dtype(), self.shape());
        }
        if !crate::autograd::trace::is_tracing() {
            if let Some(y) = layer_norm_fused(self, weight, None, normalized_shape, (eps, false)) {
                return y;
            }
        }
        let dims: Vec<usize> = (r - k..r).collect();
        let y = self * &(self.square().mean_dims(&dims, true) + eps).sqrt().recip();
        match weight {
            Some(w) => &y * w,
            None => y,
        }
    }

    /// Batch normalisation over `[N, C, ...]`, per channel `C`.
    ///
    /// In training (or without running statistics) the batch mean and biased variance
    /// normalise the input, and the running statistics, when given, are updated in place:
    /// `running = (1 - momentum) * running + momentum * batch` with the *unbiased* batch
    /// variance, as PyTorch. In evaluation the running statistics normalise the input.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 3.0], &[2, 1]);
    /// let (rm, rv) = (Tensor::zeros(&[1]), Tensor::ones(&[1]));
    /// // eps must be positive in training (PyTorch's rule); 1e-30 leaves these values exact.
    /// let y = x.batch_norm(Some(&rm), Some(&rv), None, None, true, 0.1, 1e-30);
    /// assert_eq!(y.to_vec(), vec![-1.0, 1.0]);
    /// assert!((rm.to_vec()[0] - 0.2).abs() < 1e-6); // 0.9 * 0 + 0.1 * 2
    /// assert!((rv.to_vec()[0] - 1.1).abs() < 1e-6); // 0.9 * 1 + 0.1 * 2 (unbiased)
    /// ```
    #[allow(clippy::too_many_arguments)]
    #[track_caller]
    pub fn batch_norm(
        &self,
        running_mean: Option<&Tensor>,
        running_var: Option<&Tensor>,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        training: bool,
        momentum: f64,
        eps: f64,
    ) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(
            crate::names::BATCH_NORM,
            &[self],
            &[running_mean, running_var, weight, bias],
            || {
                use crate::autograd::trace::Attr;
                let has = |t: Option<&Tensor>| Attr::Bool(t.is_some());
                vec![
                    ("training", Attr::Bool(training)),
                    ("eps", Attr::Float(eps)),
                    ("has_running_stats", has(running_mean.and(running_var))),
                    ("has_weight", has(weight)),
                    ("has_bias", has(bias)),
                ]
            },
        );
        const OP: &str = crate::names::BATCH_NORM;
        // PyTorch's checks: an eps of 0 would divide by a zero variance in training.
        if training && eps.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            panic!("{OP}: eps must be positive during training, got {eps}");
        }
        if eps.is_nan() || eps < 0.0 {
            panic!("{OP}: eps must be non-negative, got {eps}");
        }
        // An empty input normalises to an empty output and leaves the running statistics
        // as they are, as PyTorch (which also takes a 1-D empty input here).
        if self.numel() == 0 && self.rank() < 2 {
            return self * 1.0;
        }
        if self.rank() < 2 {
            panic!("{OP}: expected an input of at least 2 dims [N, C, ...], got shape {:?}", self.shape());
        }
        let c = self.shape()[1];
        for (name, t) in
            [("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)]
        {
            if let Some(t) = t {
                if t.shape() != [c] {
                    panic!(
                        "{OP}: {name} of shape {:?} for an input with {c} channels (shape {:?})",
                        t.shape(),
                        self.shape()
                    );
                }
            }
        }
        // One without the other: in eval mode there is nothing to normalise with, and in
        // training the one given would not be updated (PyTorch updates it alone).
        if running_mean.is_some() != running_var.is_some() {
            panic!("{OP}: running_mean and running_var must both be given or both be absent");
        }
        // A half input with f32 statistics and parameters (a bf16 activation into an f32
        // BatchNorm, as under autocast): computed in f32, the running statistics updated in
        // place in f32, the result in the input's dtype, as PyTorch's mixed-type batch norm.
        let stats = [running_mean, running_var, weight, bias];
        if self.dtype().is_half() && stats.iter().flatten().any(|t| t.dtype() != self.dtype()) {
            if let Some(t) = stats.iter().flatten().find(|t| t.dtype() != crate::DType::F32) {
                panic!(
                    "{OP}: a {} input takes statistics and parameters of its own dtype or all f32, got a {} one",
                    self.dtype(),
                    t.dtype()
                );
            }
            let x = self.to_dtype(crate::DType::F32);
            return x
                .batch_norm(running_mean, running_var, weight, bias, training, momentum, eps)
                .to_dtype(self.dtype());
        }
        // Otherwise one dtype, as PyTorch's kernel: the elementwise steps below would
        // promote, and the running statistics would be updated from another dtype's values.
        if let Some(t) = stats.iter().flatten().find(|t| t.dtype() != self.dtype()) {
            panic!(
                "{OP}: expected statistics and parameters of the input's dtype {}, got a {} one (only a half input \
                 takes f32 ones); convert the module with `to_dtype`",
                self.dtype(),
                t.dtype()
            );
        }
        let mut bshape = vec![1; self.rank()];
        bshape[1] = c;
        let dims: Vec<usize> = (0..self.rank()).filter(|&d| d != 1).collect();
        let per_channel = self.numel() / c.max(1);
        let use_batch = training || running_mean.is_none();
        let y = if self.numel() == 0 {
            self * 1.0
        } else if use_batch {
            if training && per_channel == 1 {
                panic!(
                    "{OP}: expected more than 1 value per channel when training, got input of shape {:?}",
                    self.shape()
                );
            }
            let mean = self.mean_dims(&dims, true);
            let centered = self - &mean;
            let var = centered.square().mean_dims(&dims, true);
            if let (true, Some(rm), Some(rv)) = (training, running_mean, running_var) {
                no_grad(|| {
                    let n = per_channel as f64;
                    let unbiased = var.reshape(&[c]) * (n / (n - 1.0).max(1.0));
                    rm.copy_(&(rm * (1.0 - momentum) + mean.reshape(&[c]) * momentum));
                    rv.copy_(&(rv * (1.0 - momentum) + unbiased * momentum));
                });
            }
            &centered * &(var + eps).sqrt().recip()
        } else {
            let rm = running_mean.expect("checked").reshape(&bshape);
            let rv = running_var.expect("checked").reshape(&bshape);
            (self - &rm) * (rv + eps).sqrt().recip()
        };
        let mut y = y;
        if let Some(w) = weight {
            y = &y * &w.reshape(&bshape);
        }
        if let Some(b) = bias {
            y = &y + &b.reshape(&bshape);
        }
        y
    }
}

/// A norm of a half-type input with parameters of another floating dtype (`f32`: the usual
/// case under autocast, a `bf16` activation into a layer's `f32` weight), which PyTorch's
/// norms take: computed in `f32`, the result in the input's dtype (`None` for any other
/// combination, which the norm checks as usual).
pub(crate) fn half_with_f32_params(
    x: &Tensor,
    params: [Option<&Tensor>; 2],
    run: impl FnOnce(&Tensor, [Option<&Tensor>; 2]) -> Tensor,
) -> Option<Tensor> {
    let mixed = params.iter().flatten().any(|p| p.dtype() != x.dtype() && p.dtype().is_float());
    if !x.dtype().is_half() || !mixed {
        return None;
    }
    let f32 = |t: &Tensor| t.to_dtype(crate::DType::F32);
    let p = params.map(|p| p.map(f32));
    Some(run(&f32(x), [p[0].as_ref(), p[1].as_ref()]).to_dtype(x.dtype()))
}

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    /// `(x - mean) / std` of `[1, 2, 3, 4]` (and of any affine image of it).
    const XH: [f64; 4] = [-1.3416407864998738, -0.4472135954999579, 0.4472135954999579, 1.3416407864998738];
    const ROWS: [f64; 8] = [1.0, 2.0, 3.0, 4.0, 2.0, 4.0, 6.0, 8.0];

    fn g() -> Tensor {
        t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4, -0.15, 0.9, 1.6, -2.1, 0.05, 0.75], &[2, 3, 2])
    }

    /// A long f32 row (2^22 values of 0.1) normalises as it should: layer norm to 0, RMS
    /// norm to 1. Run in f32 alone, 8 lanes along the row, the fused kernel's sums would
    /// round more the longer the row.
    #[test]
    fn long_rows_normalise_accurately() {
        let n = 1 << 22;
        let x = Tensor::full(&[1, n], 0.1);
        let ln = x.layer_norm(&[n], None, None, 1e-5).to_vec();
        assert!(ln.iter().all(|v| v.abs() < 1e-3), "layer norm {:?}", &ln[..4]);
        let rms = x.rms_norm(&[n], None, None).to_vec();
        assert!(rms.iter().all(|v| (v - 1.0).abs() < 1e-5), "rms norm {:?}", &rms[..4]);
    }

    /// `eps = None` is the compute type's epsilon, f32's for half inputs, as PyTorch 2.15
    /// computes it: `F.rms_norm(torch.full((1, 4), 0.1, dtype=torch.bfloat16), (4,))` is
    /// 1.0 (with bf16's own epsilon, 2^-7, it would be 0.7496), and with f16 0.01s 0.9995
    /// (0.3048 with f16's 2^-10).
    #[test]
    fn rms_norm_default_eps_is_the_compute_types() {
        let bf = Tensor::full_dtype(&[1, 4], 0.1, DType::BF16).rms_norm(&[4], None, None);
        assert_eq!(bf.to_vec_f64(), vec![1.0; 4]);
        let h = Tensor::full_dtype(&[1, 4], 0.01, DType::F16).rms_norm(&[4], None, None);
        assert!(h.to_vec_f64().iter().all(|v| (v - 0.9995).abs() < 1e-3), "{:?}", h.to_vec_f64());
        let f = Tensor::full(&[1, 4], 1e-4).rms_norm(&[4], None, None).to_vec_f64();
        let want = 1e-4f32 / (1e-8f32 + f32::EPSILON).sqrt();
        assert!(f.iter().all(|&v| (v - f64::from(want)).abs() < 1e-4), "{f:?} against {want}");
    }

    #[test]
    fn layer_norm_forward() {
        let x = t64(&ROWS, &[2, 4]);
        let y = x.layer_norm(&[4], None, None, 0.0);
        assert_close64(&y.to_vec_f64(), &[XH, XH].concat(), 1e-15);
        let w = t64(&[1.0, 2.0, 0.5, -1.0], &[4]);
        let b = t64(&[0.0, 0.1, 0.2, 0.3], &[4]);
        let ya = x.layer_norm(&[4], Some(&w), Some(&b), 0.0).to_vec_f64();
        let e: Vec<f64> =
            (0..8).map(|i| XH[i % 4] * [1.0, 2.0, 0.5, -1.0][i % 4] + [0.0, 0.1, 0.2, 0.3][i % 4]).collect();
        assert_close64(&ya, &e, 1e-15);
        // eps goes inside the square root: [1, 3] has variance 1.
        let r = t64(&[1.0, 3.0], &[1, 2]).layer_norm(&[2], None, None, 1.0).to_vec_f64();
        assert_close64(&r, &[-std::f64::consts::FRAC_1_SQRT_2, std::f64::consts::FRAC_1_SQRT_2], 1e-15);
        // Normalising over the last two dims of [2, 3, 2]: each sample has mean 0, var 1.
        let z = g().layer_norm(&[3, 2], None, None, 0.0);
        assert_close64(&z.mean_dims(&[1, 2], false).to_vec_f64(), &[0.0, 0.0], 1e-15);
        assert_close64(&z.var_dims(&[1, 2], 0, false).to_vec_f64(), &[1.0, 1.0], 1e-14);
        let f = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[1, 4]).layer_norm(&[4], None, None, 1e-5);
        crate::testing::assert_close(&f.to_vec(), &[-1.3416348, -0.44721162, 0.44721162, 1.3416348], 1e-6, 1e-5);
    }

    #[test]
    fn layer_norm_backward() {
        let x = leaf(&ROWS, &[2, 4]);
        (x.layer_norm(&[4], None, None, 0.0) * t64(&[1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, -1.0], &[2, 4]))
            .sum()
            .backward();
        // (w - mean(w) - xh * mean(w xh)) / std, per row.
        let e = [
            0.2683281572999747,
            -0.35777087639996635,
            -0.08944271909999159,
            0.17888543819998318,
            -0.1341640786499874,
            -0.044721359549995794,
            0.49193495504995377,
            -0.3130495168499705,
        ];
        assert_close64(&grad(&x), &e, 1e-14);
        // Affine parameters: d/dweight = sum over rows of xh * w_out, d/dbias = sum of w_out.
        let x = t64(&ROWS, &[2, 4]);
        let (w, b) = (leaf(&[1.0, 2.0, 0.5, -1.0], &[4]), leaf(&[0.0; 4], &[4]));
        (x.layer_norm(&[4], Some(&w), Some(&b), 0.0) * t64(&[1.0, 2.0, 3.0, 4.0, 1.0, 1.0, 1.0, 1.0], &[2, 4]))
            .sum()
            .backward();
        assert_close64(&grad(&w), &[XH[0] * 2.0, XH[1] * 3.0, XH[2] * 4.0, XH[3] * 5.0], 1e-14);
        assert_eq!(grad(&b), vec![2.0, 3.0, 4.0, 5.0]);
    }

    /// The composite layer norm (the primitives the fused kernels replace).
    fn composite(x: &Tensor, k: usize, w: Option<&Tensor>, b: Option<&Tensor>, eps: f64) -> Tensor {
        let dims: Vec<usize> = (x.rank() - k..x.rank()).collect();
        let c = x - &x.mean_dims(&dims, true);
        let mut y = &c * &(c.square().mean_dims(&dims, true) + eps).sqrt().recip();
        if let Some(w) = w {
            y = &y * w;
        }
        if let Some(b) = b {
            y = &y + b;
        }
        y
    }

    /// The fused kernels against the composite, forward and every gradient: f32 and f64,
    /// each weight/bias combination, one and two normalized dims, a strided input, and
    /// enough rows that the kernels split over threads.
    #[test]
    fn fused_layer_norm_matches_the_composite() {
        crate::manual_seed(3);
        for dtype in [DType::F32, DType::F64] {
            let tol = if dtype == DType::F32 { 2e-5 } else { 1e-12 };
            for (shape, ns) in [(vec![3, 5, 40], vec![40]), (vec![600, 2, 64], vec![2, 64]), (vec![4, 7], vec![7])] {
                // A transposed-and-back view: same values, strided layout.
                let base = (Tensor::randn(&shape) * 3.0 + 1.5).to_dtype(dtype);
                let r = shape.len();
                let xs = [base.clone(), base.transpose(0, r - 1).contiguous().transpose(0, r - 1)];
                for x in xs {
                    for (has_w, has_b) in [(true, true), (true, false), (false, true), (false, false)] {
                        let w = has_w.then(|| (Tensor::randn(&ns) + 1.0).to_dtype(dtype).requires_grad_(true));
                        let b = has_b.then(|| Tensor::randn(&ns).to_dtype(dtype).requires_grad_(true));
                        let gy = Tensor::randn(x.shape()).to_dtype(dtype);
                        let run = |f: &dyn Fn(&Tensor) -> Tensor| {
                            let x = x.detach().requires_grad_(true);
                            for p in [&w, &b].into_iter().flatten() {
                                p.zero_grad();
                            }
                            let y = f(&x);
                            (&y * &gy).sum().backward();
                            let pg = [&w, &b].into_iter().flatten().map(|p| grad(p)).collect::<Vec<_>>();
                            (y.to_vec_f64(), grad(&x), pg)
                        };
                        let fused = run(&|x| x.layer_norm(&ns, w.as_ref(), b.as_ref(), 1e-5));
                        let reference = run(&|x| composite(x, ns.len(), w.as_ref(), b.as_ref(), 1e-5));
                        assert_close64(&fused.0, &reference.0, tol);
                        assert_close64(&fused.1, &reference.1, tol);
                        for (f, r) in fused.2.iter().zip(&reference.2) {
                            // Parameter gradients sum over every row.
                            assert_close64(f, r, tol * 50.0);
                        }
                    }
                }
            }
        }
    }

    /// The fused RMS norm against its composition, forward and both gradients, f32 and
    /// f64, with and without a weight, one and two normalized dims, enough rows to split;
    /// its gradcheck; its default epsilon; a while-tracing call composes.
    #[test]
    fn fused_rms_norm_matches_the_composite() {
        crate::manual_seed(4);
        for dtype in [DType::F32, DType::F64] {
            let tol = if dtype == DType::F32 { 2e-5 } else { 1e-12 };
            for (shape, ns) in [(vec![3, 5, 40], vec![40]), (vec![600, 2, 64], vec![2, 64]), (vec![4, 7], vec![7])] {
                let x0 = (Tensor::randn(&shape) * 3.0 + 0.5).to_dtype(dtype);
                for has_w in [true, false] {
                    let w = has_w.then(|| (Tensor::randn(&ns) + 1.0).to_dtype(dtype).requires_grad_(true));
                    let gy = Tensor::randn(x0.shape()).to_dtype(dtype);
                    let run = |f: &dyn Fn(&Tensor) -> Tensor| {
                        let x = x0.detach().requires_grad_(true);
                        if let Some(w) = &w {
                            w.zero_grad();
                        }
                        let y = f(&x);
                        (&y * &gy).sum().backward();
                        (y.to_vec_f64(), grad(&x), w.as_ref().map(grad))
                    };
                    let dims: Vec<usize> = (shape.len() - ns.len()..shape.len()).collect();
                    let composite = |x: &Tensor| {
                        let y = x * &(x.square().mean_dims(&dims, true) + 1e-6).sqrt().recip();
                        match &w {
                            Some(w) => &y * w,
                            None => y,
                        }
                    };
                    let fused = run(&|x| x.rms_norm(&ns, w.as_ref(), Some(1e-6)));
                    let reference = run(&composite);
                    assert_close64(&fused.0, &reference.0, tol);
                    assert_close64(&fused.1, &reference.1, tol);
                    if let (Some(f), Some(r)) = (&fused.2, &reference.2) {
                        assert_close64(f, r, tol * 50.0);
                    }
                }
            }
        }
        let w = t64(&[1.0, -0.5], &[2]).requires_grad_(true);
        gradcheck(|t| t[0].rms_norm(&[2], Some(&t[1]), Some(1e-3)), &[g(), w]).unwrap();
        gradcheck(|t| t[0].rms_norm(&[3, 2], None, None).exp(), &[g()]).unwrap();
        // eps defaults to the dtype's epsilon: a zero row stays finite (0 / sqrt(eps)).
        let z = Tensor::zeros(&[1, 3]).rms_norm(&[3], None, None).to_vec();
        assert_eq!(z, vec![0.0; 3]);
        let e = std::panic::catch_unwind(|| Tensor::ones(&[2, 3]).rms_norm(&[2], None, None)).expect_err("a bad shape");
        assert_eq!(
            e.downcast_ref::<String>().map(String::as_str),
            Some("rms_norm: input of shape [2, 3] does not end with normalized_shape [2]")
        );
    }

    #[test]
    fn layer_norm_gradcheck() {
        let (w, b) = (t64(&[0.5, -1.5], &[2]), t64(&[0.25, 0.75], &[2]));
        gradcheck(|t| t[0].layer_norm(&[2], Some(&t[1]), Some(&t[2]), 1e-5), &[g(), w, b]).unwrap();
        gradcheck(|t| t[0].layer_norm(&[3, 2], None, None, 1e-3).exp(), &[g()]).unwrap();
    }

    /// The smallest positive eps (training needs one, as PyTorch): it leaves these
    /// variances, and so the expected values, unchanged in f64.
    const TINY: f64 = f64::MIN_POSITIVE;

    #[test]
    fn batch_norm_training_normalises_and_updates_running_stats() {
        // x: [N = 4, C = 2]; channel 0 holds 1, 2, 3, 4 and channel 1 holds 2, 4, 6, 8.
        let x = t64(&[1.0, 2.0, 2.0, 4.0, 3.0, 6.0, 4.0, 8.0], &[4, 2]);
        let (rm, rv) = (Tensor::zeros(&[2]).to_dtype(DType::F64), Tensor::ones(&[2]).to_dtype(DType::F64));
        let y = x.batch_norm(Some(&rm), Some(&rv), None, None, true, 0.1, TINY);
        let e: Vec<f64> = (0..8).map(|i| XH[i / 2]).collect();
        assert_close64(&y.to_vec_f64(), &e, 1e-15);
        assert_close64(&rm.to_vec_f64(), &[0.25, 0.5], 1e-15);
        // Unbiased batch variances 5/3 and 20/3.
        assert_close64(&rv.to_vec_f64(), &[1.0666666666666667, 1.5666666666666667], 1e-15);
        // A second step moves them again.
        x.batch_norm(Some(&rm), Some(&rv), None, None, true, 0.1, TINY);
        assert_close64(&rm.to_vec_f64(), &[0.475, 0.95], 1e-15);
        // 4-D input [N, C, H, W]: statistics over N, H and W.
        let x4 = t64(&[1.0, 2.0, 10.0, 20.0, 3.0, 4.0, 30.0, 40.0], &[2, 2, 1, 2]);
        let y4 =
            x4.batch_norm(None, None, Some(&t64(&[1.0, 2.0], &[2])), Some(&t64(&[0.0, -1.0], &[2])), true, 0.1, TINY);
        let e4 =
            [XH[0], XH[1], 2.0 * XH[0] - 1.0, 2.0 * XH[1] - 1.0, XH[2], XH[3], 2.0 * XH[2] - 1.0, 2.0 * XH[3] - 1.0];
        assert_close64(&y4.to_vec_f64(), &e4, 1e-15);
    }

    #[test]
    fn batch_norm_eval_uses_running_stats() {
        let x = t64(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
        let (rm, rv) = (t64(&[1.0, 2.0], &[2]), t64(&[4.0, 0.25], &[2]));
        let y = x.batch_norm(Some(&rm), Some(&rv), None, None, false, 0.1, 0.0);
        assert_eq!(y.to_vec_f64(), vec![0.0, 0.0, 1.0, 4.0]);
        assert_eq!((rm.to_vec_f64(), rv.to_vec_f64()), (vec![1.0, 2.0], vec![4.0, 0.25]), "eval does not update");
        let (w, b) = (t64(&[2.0, -1.0], &[2]), t64(&[0.5, 0.5], &[2]));
        let y = x.batch_norm(Some(&rm), Some(&rv), Some(&w), Some(&b), false, 0.1, 0.0);
        assert_eq!(y.to_vec_f64(), vec![0.5, 0.5, 2.5, -3.5]);
        // Without running stats, eval normalises with the batch statistics.
        let z = t64(&[1.0, 5.0, 3.0, 7.0], &[2, 2]).batch_norm(None, None, None, None, false, 0.1, 0.0);
        assert_eq!(z.to_vec_f64(), vec![-1.0, -1.0, 1.0, 1.0]);
    }

    #[test]
    fn batch_norm_backward() {
        // Eval mode is affine in x: d/dx = w_out * weight / sqrt(running_var + eps).
        let x = leaf(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
        let (rm, rv) = (t64(&[1.0, 2.0], &[2]), t64(&[4.0, 0.25], &[2]));
        let w = leaf(&[2.0, -1.0], &[2]);
        let y = x.batch_norm(Some(&rm), Some(&rv), Some(&w), None, false, 0.1, 0.0);
        (y * t64(&[1.0, 2.0, 3.0, 4.0], &[2, 2])).sum().backward();
        assert_eq!(grad(&x), vec![1.0, -4.0, 3.0, -8.0]);
        // d/dweight = sum_n w_out * (x - rm) / sqrt(rv)
        assert_eq!(grad(&w), vec![3.0 * 1.0, 4.0 * 4.0]);
        // Training mode: the same formula as layer norm, per channel.
        let x = leaf(&[1.0, 2.0, 2.0, 4.0, 3.0, 6.0, 4.0, 8.0], &[4, 2]);
        (x.batch_norm(None, None, None, None, true, 0.1, TINY)
            * t64(&[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, -1.0], &[4, 2]))
        .sum()
        .backward();
        let e = [
            0.2683281572999747,
            -0.1341640786499874,
            -0.35777087639996635,
            -0.044721359549995794,
            -0.08944271909999159,
            0.49193495504995377,
            0.17888543819998318,
            -0.3130495168499705,
        ];
        assert_close64(&grad(&x), &e, 1e-14);
    }

    #[test]
    fn batch_norm_gradcheck() {
        let x = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4, -0.15, 0.9, 1.6, -2.1, 0.05, 0.75], &[2, 3, 2]);
        let (w, b) = (t64(&[0.5, -1.5, 2.0], &[3]), t64(&[0.25, 0.75, -0.5], &[3]));
        gradcheck(
            |t| t[0].batch_norm(None, None, Some(&t[1]), Some(&t[2]), true, 0.1, 1e-5),
            &[x.clone(), w.clone(), b.clone()],
        )
        .unwrap();
        let (rm, rv) = (t64(&[0.1, -0.2, 0.3], &[3]), t64(&[1.5, 0.5, 2.0], &[3]));
        gradcheck(|t| t[0].batch_norm(Some(&rm), Some(&rv), Some(&t[1]), Some(&t[2]), false, 0.1, 1e-5), &[x, w, b])
            .unwrap();
    }

    #[test]
    fn norms_on_noncontiguous_inputs() {
        let (w, b) = (t64(&[0.5, -1.5], &[2]), t64(&[0.25, 0.75], &[2]));
        check_noncontig(|t| t[0].layer_norm(&[2], Some(&t[1]), Some(&t[2]), 1e-5), &[g(), w, b]);
        check_noncontig(|t| t[0].batch_norm(None, None, None, None, true, 0.1, 1e-5), &[g()]);
        let p = g().permute(&[0, 2, 1]);
        assert_eq!(
            p.layer_norm(&[3], None, None, 1e-5).to_vec_f64(),
            p.contiguous().layer_norm(&[3], None, None, 1e-5).to_vec_f64()
        );
    }

    #[test]
    fn norms_on_meta() {
        let m = Tensor::full_on(&[4, 3, 5], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        let w = Tensor::full_on(&[5], 1.0, DType::F32, Device::Meta);
        let y = m.layer_norm(&[5], Some(&w), None, 1e-5);
        assert_eq!((y.shape(), y.device()), (&[4, 3, 5][..], Device::Meta));
        let rm = Tensor::full_on(&[3], 0.0, DType::F32, Device::Meta);
        let rv = Tensor::full_on(&[3], 1.0, DType::F32, Device::Meta);
        let z = m.batch_norm(Some(&rm), Some(&rv), None, None, false, 0.1, 1e-5);
        assert_eq!((z.shape(), z.device()), (&[4, 3, 5][..], Device::Meta));
        (y.sum() + z.sum()).backward();
        assert_eq!(m.grad().unwrap().shape(), &[4, 3, 5]);
    }

    #[test]
    #[should_panic(expected = "layer_norm: input of shape [2, 3] does not end with normalized_shape [4]")]
    fn layer_norm_shape_mismatch_panics() {
        Tensor::zeros(&[2, 3]).layer_norm(&[4], None, None, 1e-5);
    }

    #[test]
    #[should_panic(expected = "layer_norm: weight of shape [2] for normalized_shape [3]")]
    fn layer_norm_weight_shape_mismatch_panics() {
        Tensor::zeros(&[2, 3]).layer_norm(&[3], Some(&Tensor::ones(&[2])), None, 1e-5);
    }

    #[test]
    #[should_panic(
        expected = "batch_norm: expected more than 1 value per channel when training, got input of shape [1, 3]"
    )]
    fn batch_norm_needs_more_than_one_value_per_channel() {
        Tensor::zeros(&[1, 3]).batch_norm(None, None, None, None, true, 0.1, 1e-5);
    }

    #[test]
    #[should_panic(expected = "batch_norm: weight of shape [3] for an input with 2 channels (shape [4, 2])")]
    fn batch_norm_parameter_shape_mismatch_panics() {
        Tensor::zeros(&[4, 2]).batch_norm(None, None, Some(&Tensor::ones(&[3])), None, true, 0.1, 1e-5);
    }

    /// A lone running statistic in training is refused, not left as it is (only a pair is
    /// updated).
    #[test]
    #[should_panic(expected = "batch_norm: running_mean and running_var must both be given or both be absent")]
    fn batch_norm_in_training_refuses_one_running_statistic_without_the_other() {
        let rm = Tensor::zeros(&[2]);
        Tensor::randn(&[4, 2]).batch_norm(Some(&rm), None, None, None, true, 0.1, 1e-5);
    }

    /// A `[2, 2]` weight for 4 channels is refused, not read row-major.
    #[test]
    #[should_panic(expected = "group_norm: weight of shape [2, 2] for an input with 4 channels (shape [2, 4, 3])")]
    fn group_norm_refuses_affine_parameters_not_of_shape_c() {
        crate::functional::group_norm(&Tensor::randn(&[2, 4, 3]), 2, Some(&Tensor::ones(&[2, 2])), None, 1e-5);
    }

    /// An empty input passes through (its gradients empty or zero) and leaves the running
    /// statistics alone, as PyTorch; eps is checked as PyTorch checks it.
    #[test]
    fn batch_norm_of_empty_inputs_and_eps_checks() {
        let (rm, rv) = (t64(&[0.0, 0.0], &[2]), t64(&[1.0, 1.0], &[2]));
        let w = leaf(&[1.0, 2.0], &[2]);
        let y = Tensor::zeros(&[0, 2]).to_dtype(DType::F64).batch_norm(
            Some(&rm),
            Some(&rv),
            Some(&w),
            None,
            true,
            0.1,
            1e-5,
        );
        assert_eq!(y.shape(), &[0, 2]);
        y.sum().backward();
        assert_eq!((grad(&w), rm.to_vec_f64(), rv.to_vec_f64()), (vec![0.0; 2], vec![0.0; 2], vec![1.0; 2]));
        assert_eq!(Tensor::zeros(&[0]).batch_norm(None, None, None, None, true, 0.1, 1e-5).shape(), &[0]);
        let refuse = |training: bool, eps: f64| {
            let x = Tensor::ones(&[3, 2]);
            let e = std::panic::catch_unwind(|| x.batch_norm(None, None, None, None, training, 0.1, eps)).unwrap_err();
            e.downcast_ref::<String>().cloned().unwrap()
        };
        assert_eq!(refuse(true, 0.0), "batch_norm: eps must be positive during training, got 0");
        assert_eq!(refuse(false, -1.0), "batch_norm: eps must be non-negative, got -1");
    }

    /// PyTorch refuses a group norm over no channels or no positions; an empty batch runs.
    #[test]
    fn group_norm_refuses_zero_channels_or_positions() {
        use crate::functional::group_norm;
        assert_eq!(group_norm(&Tensor::zeros(&[0, 4, 3]), 2, None, None, 1e-5).shape(), &[0, 4, 3]);
        for (shape, want) in [
            (vec![2, 0, 3], "expected the number of channels to be greater than 0, got shape [2, 0, 3]"),
            (vec![2, 4, 3, 0], "expected the spatial size (H x W ...) to be greater than 0, got shape [2, 4, 3, 0]"),
        ] {
            let e = std::panic::catch_unwind(|| group_norm(&Tensor::zeros(&shape), 2, None, None, 1e-5)).unwrap_err();
            assert_eq!(e.downcast_ref::<String>().unwrap(), &format!("group_norm: {want}"));
        }
    }
}
