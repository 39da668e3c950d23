//! Loss functions with PyTorch's semantics and reductions (`torch.nn.functional`).

use crate::dtype::DType;
use crate::tensor::Tensor;

mod weighted;
pub use weighted::{binary_cross_entropy_with_logits_weighted, cross_entropy_weighted, nll_loss_weighted};

/// How a loss reduces its per-element values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reduction {
    /// The mean (over non-ignored targets, for the classification losses). The default.
    #[default]
    Mean,
    /// The sum.
    Sum,
    /// No reduction: one value per element (per sample for the classification losses).
    None,
}

fn reduce(per: Tensor, reduction: Reduction) -> Tensor {
    match reduction {
        Reduction::Mean => per.mean(),
        Reduction::Sum => per.sum(),
        Reduction::None => per,
    }
}

/// Options of [`cross_entropy_with`] and [`nll_loss_with`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClassLossConfig {
    /// Reduction (default mean over the non-ignored samples).
    pub reduction: Reduction,
    /// Target value whose samples contribute nothing (PyTorch's default is -100).
    pub ignore_index: i64,
    /// Label smoothing in `[0, 1]` (cross-entropy only; default 0).
    pub label_smoothing: f64,
}

impl Default for ClassLossConfig {
    fn default() -> Self {
        ClassLossConfig { reduction: Reduction::Mean, ignore_index: -100, label_smoothing: 0.0 }
    }
}

/// Validates `[N, C]` (or `[N, C, d...]`) scores against `[N]` (or `[N, d...]`) targets
/// and returns them flattened to `[M, C]` and `[M]`.
#[track_caller]
fn flatten_class(op: &str, input: &Tensor, target: &Tensor) -> (Tensor, Tensor, usize) {
    if target.dtype() != DType::I64 {
        panic!("{op}: target must hold class indices as i64, got {} (shape {:?})", target.dtype(), target.shape());
    }
    let ok_rank = input.rank() >= 1 && (input.rank() == target.rank() + 1 || (input.rank() == 1 && target.rank() == 0));
    let mut expect: Vec<usize> = input.shape().to_vec();
    if input.rank() >= 2 {
        expect.remove(1);
    } else {
        expect.clear();
    }
    if !ok_rank || target.shape() != expect.as_slice() {
        panic!(
            "{op}: input {:?} and target {:?} do not match (expected a target of shape {expect:?})",
            input.shape(),
            target.shape()
        );
    }
    let c = if input.rank() == 1 { input.shape()[0] } else { input.shape()[1] };
    let x = match input.rank() {
        1 => input.unsqueeze(0),
        2 => input.clone(),
        r => {
            let mut perm: Vec<usize> = vec![0];
            perm.extend(2..r);
            perm.push(1);
            input.permute(&perm).reshape(&[input.numel() / c, c])
        }
    };
    (x, target.reshape(&[target.numel()]), c)
}

/// Negative log-likelihood of log-probabilities `input` (`[N, C]`) at class indices
/// `target` (`[N]`, `i64`), mean over the batch.
#[track_caller]
pub fn nll_loss(input: &Tensor, target: &Tensor) -> Tensor {
    nll_loss_with(input, target, ClassLossConfig::default())
}

/// [`nll_loss`] with options: a reduction and `ignore_index`.
///
/// # Panics
/// With a `label_smoothing` other than 0: PyTorch's `nll_loss` has no such option (it is
/// `cross_entropy`'s), and smoothing silently not applied would be a different loss.
#[track_caller]
pub fn nll_loss_with(input: &Tensor, target: &Tensor, opt: ClassLossConfig) -> Tensor {
    if opt.label_smoothing != 0.0 {
        panic!(
            "nll_loss: label_smoothing {} is cross_entropy's option (nll_loss does not smooth); use \
             cross_entropy_with on the logits",
            opt.label_smoothing
        );
    }
    let _op = crate::autograd::entry::op_entry!(untraced crate::names::NLL_LOSS, [Some(input), Some(target)],
        again = |c| nll_loss_with(c[0].expect("present"), c[1].expect("present"), opt));
    let (x, t, c) = flatten_class("nll_loss", input, target);
    if target.device() != input.device() {
        panic!(
            "nll_loss: expected the input and the target on one device, got {} (input) and {} (target)",
            input.device(),
            target.device()
        );
    }
    let (idx, mask) = class_targets("nll_loss", &t, c, opt.ignore_index, x.dtype());
    let per = (-x.gather(1, &idx).reshape(&[t.numel()])).masked_fill(&ignored(&mask), 0.0);
    finish_class(per, &mask, input, target, opt.reduction)
}

/// Where the 0/1 `mask` of kept targets is 0: the rows whose loss is 0 whatever the input
/// holds there (filled, not multiplied by the mask: an ignored row's `-inf` log-probability
/// times 0 would be NaN, where PyTorch never reads the row).
fn ignored(mask: &Tensor) -> Tensor {
    mask.eq(&Tensor::full_on(&[], 0.0, mask.dtype(), mask.device()))
}

/// The gather indices (`[n, 1]`, `ignore_index` replaced by 0) and the 0/1 mask of kept
/// targets (`[n]`, in `dtype`) of flat class targets `t`, on `t`'s device. On a GPU the
/// bounds check runs on the device, and a bad target is reported at the next host read.
#[track_caller]
fn class_targets(op: &str, t: &Tensor, c: usize, ignore_index: i64, dtype: DType) -> (Tensor, Tensor) {
    let n = t.numel();
    let (idx, mask) = t.storage_arc().class_targets(t.layout(), c, ignore_index, dtype, op);
    (Tensor::from_storage(idx, &[n, 1]), Tensor::from_storage(mask, &[n]))
}

fn finish_class(per: Tensor, mask: &Tensor, input: &Tensor, target: &Tensor, reduction: Reduction) -> Tensor {
    match reduction {
        // The totals in f32 for a half input, as PyTorch's: in f16 the count of kept
        // targets is exact only to 2048 and the summed loss overflows at 65504.
        Reduction::Mean if per.dtype().is_half() => {
            (per.to_dtype(DType::F32).sum() / mask.to_dtype(DType::F32).sum()).to_dtype(per.dtype())
        }
        Reduction::Mean => per.sum() / mask.sum(),
        Reduction::Sum => per.sum(),
        Reduction::None => {
            let _ = input;
            per.reshape(target.shape())
        }
    }
}

/// Cross-entropy between `logits` (`[N, C]` or `[N, C, d...]`) and class indices
/// (`[N]` / `[N, d...]`, `i64`), mean over the batch: `nll_loss(log_softmax(logits))`.
///
/// ```
/// use nn_core::{functional::cross_entropy, Tensor};
/// let logits = Tensor::from_vec(vec![2.0, 0.0, 0.0, 0.0, 0.0, 2.0], &[2, 3]);
/// let t = Tensor::from_vec_i64(vec![0, 2], &[2]);
/// let expect = -(2f64.exp() / (2f64.exp() + 2.0)).ln();
/// assert!((cross_entropy(&logits, &t).item() - expect).abs() < 1e-6);
/// ```
#[track_caller]
pub fn cross_entropy(logits: &Tensor, target: &Tensor) -> Tensor {
    cross_entropy_with(logits, target, ClassLossConfig::default())
}

/// [`cross_entropy`] with a reduction, `ignore_index` and label smoothing (PyTorch's
/// formula: `(1 - s) * nll + s * mean over classes of -log p`).
#[track_caller]
pub fn cross_entropy_with(logits: &Tensor, target: &Tensor, opt: ClassLossConfig) -> Tensor {
    let _op = crate::autograd::entry::op_entry!(untraced crate::names::CROSS_ENTROPY, [Some(logits), Some(target)],
        again = |c| cross_entropy_with(c[0].expect("present"), c[1].expect("present"), opt));
    if !(0.0..=1.0).contains(&opt.label_smoothing) {
        panic!("cross_entropy: label_smoothing must be in [0, 1], got {}", opt.label_smoothing);
    }
    let (x, t, c) = flatten_class("cross_entropy", logits, target);
    let logp = x.log_softmax(1);
    if opt.label_smoothing == 0.0 {
        let nll = nll_loss_with(&logp, &t, opt);
        return if matches!(opt.reduction, Reduction::None) { nll.reshape(target.shape()) } else { nll };
    }
    let nll = nll_loss_with(&logp, &t, ClassLossConfig { reduction: Reduction::None, label_smoothing: 0.0, ..opt });
    let (_, mask) = class_targets("cross_entropy", &t, c, opt.ignore_index, x.dtype());
    let smooth = (-logp.sum_dim(1, false)).masked_fill(&ignored(&mask), 0.0) * (1.0 / c as f64);
    let per = nll * (1.0 - opt.label_smoothing) + smooth * opt.label_smoothing;
    finish_class(per, &mask, logits, target, opt.reduction)
}

#[track_caller]
fn check_same_shape(op: &str, a: &Tensor, b: &Tensor) {
    if a.shape() != b.shape() {
        panic!("{op}: input {:?} and target {:?} must have the same shape", a.shape(), b.shape());
    }
}

/// Squared error `(input - target)^2`, reduced (`F.mse_loss(input, target, reduction=..)`);
/// `input` and `target` have the same shape. [`Tensor::mse_loss`] is the default
/// (mean) form.
///
/// ```
/// use nn_core::{functional::{mse_loss, Reduction}, Tensor};
/// let (x, t) = (Tensor::from_vec(vec![1.0, 4.0], &[2]), Tensor::from_vec(vec![0.0, 2.0], &[2]));
/// assert_eq!(mse_loss(&x, &t, Reduction::Mean).item(), 2.5);
/// assert_eq!(mse_loss(&x, &t, Reduction::Sum).item(), 5.0);
/// assert_eq!(mse_loss(&x, &t, Reduction::None).to_vec(), vec![1.0, 4.0]);
/// ```
#[track_caller]
pub fn mse_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Tensor {
    let _op = crate::autograd::entry::op_entry!(untraced crate::names::MSE_LOSS, [Some(input), Some(target)],
        again = |c| mse_loss(c[0].expect("present"), c[1].expect("present"), reduction));
    check_same_shape("mse_loss", input, target);
    reduce((input - target).square(), reduction)
}

/// Absolute error `|input - target|`, reduced (`F.l1_loss(input, target, reduction=..)`);
/// `input` and `target` have the same shape. [`Tensor::l1_loss`] is the default (mean)
/// form.
///
/// ```
/// use nn_core::{functional::{l1_loss, Reduction}, Tensor};
/// let (x, t) = (Tensor::from_vec(vec![1.0, 4.0], &[2]), Tensor::from_vec(vec![0.0, 2.0], &[2]));
/// assert_eq!(l1_loss(&x, &t, Reduction::Mean).item(), 1.5);
/// assert_eq!(l1_loss(&x, &t, Reduction::Sum).item(), 3.0);
/// ```
#[track_caller]
pub fn l1_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Tensor {
    let _op = crate::autograd::entry::op_entry!(untraced crate::names::L1_LOSS, [Some(input), Some(target)],
        again = |c| l1_loss(c[0].expect("present"), c[1].expect("present"), reduction));
    check_same_shape("l1_loss", input, target);
    reduce((input - target).abs(), reduction)
}

impl Tensor {
    /// Mean squared error against `target`, `mean((self - target)^2)`: PyTorch's default
    /// form `F.mse_loss(input, target)` (reduction `'mean'`), the same as
    /// [`functional::mse_loss`](crate::functional::mse_loss) with [`Reduction::Mean`].
    /// Both tensors have the same shape; the result is 0-d.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 4.0, 0.0, 1.0], &[2, 2]);
    /// let t = Tensor::from_vec(vec![0.0, 2.0, 2.0, 0.0], &[2, 2]);
    /// assert_eq!(x.mse_loss(&t).item(), 2.5); // (1 + 4 + 4 + 1) / 4
    /// ```
    ///
    /// # Panics
    /// When the shapes differ.
    #[track_caller]
    pub fn mse_loss(&self, target: &Tensor) -> Tensor {
        mse_loss(self, target, Reduction::Mean)
    }

    /// Mean absolute error against `target`, `mean(|self - target|)`: PyTorch's default
    /// form `F.l1_loss(input, target)` (reduction `'mean'`), the same as
    /// [`functional::l1_loss`](crate::functional::l1_loss) with [`Reduction::Mean`].
    /// Both tensors have the same shape; the result is 0-d.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 4.0, 0.0, 1.0], &[2, 2]);
    /// let t = Tensor::from_vec(vec![0.0, 2.0, 2.0, 0.0], &[2, 2]);
    /// assert_eq!(x.l1_loss(&t).item(), 1.5); // (1 + 2 + 2 + 1) / 4
    /// ```
    ///
    /// # Panics
    /// When the shapes differ.
    #[track_caller]
    pub fn l1_loss(&self, target: &Tensor) -> Tensor {
        l1_loss(self, target, Reduction::Mean)
    }
}

/// Binary cross-entropy on logits, computed stably as
/// `max(x, 0) - x * t + log(1 + exp(-|x|))` (with `pos_weight`, PyTorch's weighted form).
#[track_caller]
pub fn binary_cross_entropy_with_logits(
    input: &Tensor,
    target: &Tensor,
    pos_weight: Option<&Tensor>,
    reduction: Reduction,
) -> Tensor {
    let run = |i: &Tensor, t: &Tensor, w: Option<&Tensor>| binary_cross_entropy_with_logits(i, t, w, reduction);
    let _op = crate::autograd::entry::op_entry!(untraced crate::names::BINARY_CROSS_ENTROPY_WITH_LOGITS,
        [Some(input), Some(target), pos_weight], again = |c| run(c[0].expect("present"), c[1].expect("present"), c[2]));
    check_same_shape("binary_cross_entropy_with_logits", input, target);
    // softplus(-x) = log(1 + exp(-x)) = -log_sigmoid(x), through `log1p` (PyTorch's
    // `log_sigmoid`): as `log(1 + exp(-|x|))` it would round to 0 past |x| of about 17 in f32
    // and 37 in f64, where PyTorch's loss is e^-|x|. No threshold: the identity is used
    // only where the f32 and f64 forms are exact.
    let softplus_neg = (-input).softplus(1.0, f64::INFINITY);
    let per = match pos_weight {
        None => (1.0 - target) * input + &softplus_neg,
        Some(pw) => {
            // PyTorch weights in place, so `pos_weight` broadcasts to the input's shape only;
            // one that widens it (`[4]` against `[4, 1]`) would silently average 16 losses.
            if crate::shape::broadcast_shapes(pw.shape(), input.shape()).as_deref() != Some(input.shape()) {
                panic!(
                    "binary_cross_entropy_with_logits: pos_weight of shape {:?} does not broadcast to the input's \
                     shape {:?}",
                    pw.shape(),
                    input.shape()
                );
            }
            let lw = (pw - 1.0) * target + 1.0;
            (1.0 - target) * input + lw * &softplus_neg
        }
    };
    reduce(per, reduction)
}

#[cfg(test)]
mod tests {
    use super::{cross_entropy_with, l1_loss, mse_loss, nll_loss_with, ClassLossConfig, Reduction};
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, grad, leaf, t64};
    use crate::Tensor;

    const X: [f64; 6] = [0.5, -1.0, 2.0, 3.0, 0.0, -2.5];
    const T: [f64; 6] = [1.0, 1.0, 1.5, 2.0, -1.0, 0.5];

    #[test]
    fn default_forms_equal_the_mean_reduction() {
        let (x, t) = (t64(&X, &[2, 3]), t64(&T, &[2, 3]));
        // Differences [-0.5, -2, 0.5, 1, 1, -3]: squares sum to 15.5, absolute values to 8.
        let mse = x.mse_loss(&t);
        assert_eq!((mse.shape(), mse.item()), (&[] as &[usize], 15.5 / 6.0));
        assert_eq!(mse.item(), mse_loss(&x, &t, Reduction::Mean).item());
        let l1 = x.l1_loss(&t);
        assert_eq!((l1.shape(), l1.item()), (&[] as &[usize], 8.0 / 6.0));
        assert_eq!(l1.item(), l1_loss(&x, &t, Reduction::Mean).item());
        assert_eq!(mse_loss(&x, &t, Reduction::Sum).item(), 15.5);
        assert_eq!(l1_loss(&x, &t, Reduction::None).to_vec_f64(), vec![0.5, 2.0, 0.5, 1.0, 1.0, 3.0]);
    }

    #[test]
    fn default_forms_have_the_mean_reductions_gradients() {
        type F = fn(&Tensor, &Tensor) -> Tensor;
        let cases: [(F, F); 2] = [
            (Tensor::mse_loss, |a, b| mse_loss(a, b, Reduction::Mean)),
            (Tensor::l1_loss, |a, b| l1_loss(a, b, Reduction::Mean)),
        ];
        for (method, reference) in cases {
            let (x1, t1, x2, t2) = (leaf(&X, &[2, 3]), leaf(&T, &[2, 3]), leaf(&X, &[2, 3]), leaf(&T, &[2, 3]));
            method(&x1, &t1).exp().backward();
            reference(&x2, &t2).exp().backward();
            assert_eq!(grad(&x1), grad(&x2));
            assert_eq!(grad(&t1), grad(&t2));
            gradcheck(|t| method(&t[0], &t[1]), &[t64(&X, &[2, 3]), t64(&T, &[2, 3])]).unwrap();
        }
        // d/dx mean((x - t)^2) = 2 (x - t) / n, here through exp(loss).
        let (x, t) = (leaf(&X, &[2, 3]), t64(&T, &[2, 3]));
        x.mse_loss(&t).exp().backward();
        let k = (15.5f64 / 6.0).exp() / 3.0;
        assert_close64(&grad(&x), &[-0.5 * k, -2.0 * k, 0.5 * k, k, k, -3.0 * k], 1e-14);
        let x = leaf(&X, &[2, 3]);
        x.l1_loss(&t).exp().backward();
        let k = (8.0f64 / 6.0).exp() / 6.0;
        assert_close64(&grad(&x), &[-k, -k, k, k, k, -k], 1e-14);
    }

    #[test]
    #[should_panic(expected = "mse_loss: input [2, 3] and target [3] must have the same shape")]
    fn mse_loss_with_mismatched_shapes_panics() {
        t64(&X, &[2, 3]).mse_loss(&t64(&[1.0, 2.0, 3.0], &[3]));
    }

    #[test]
    #[should_panic(expected = "l1_loss: input [6] and target [2, 3] must have the same shape")]
    fn l1_loss_with_mismatched_shapes_panics() {
        t64(&X, &[6]).l1_loss(&t64(&T, &[2, 3]));
    }

    /// An ignored row contributes 0 whatever its logits hold: a pad logit masked to -inf
    /// would otherwise give NaN (its -inf log-probability times the 0 mask), where PyTorch
    /// never reads it.
    #[test]
    fn ignored_rows_with_infinite_logits_contribute_nothing() {
        let inf = f64::NEG_INFINITY;
        let logits = t64(&[inf, 1.0, 2.0, 0.0, 1.0, 2.0], &[2, 3]);
        let target = Tensor::from_vec_i64(vec![-100, 2], &[2]);
        for smoothing in [0.0, 0.1] {
            let cfg = |reduction| ClassLossConfig { reduction, label_smoothing: smoothing, ..Default::default() };
            let alone = cross_entropy_with(&logits.narrow(0, 1, 1), &target.narrow(0, 1, 1), cfg(Reduction::Mean));
            let both = cross_entropy_with(&logits, &target, cfg(Reduction::Mean));
            assert_eq!(both.item(), alone.item(), "smoothing {smoothing}");
            let rows = cross_entropy_with(&logits, &target, cfg(Reduction::None)).to_vec_f64();
            assert_eq!(rows[0], 0.0, "smoothing {smoothing}");
        }
        let nll = nll_loss_with(&logits.log_softmax(1), &target, ClassLossConfig::default());
        assert!(nll.item().is_finite());
    }

    #[test]
    #[should_panic(expected = "nll_loss: label_smoothing 0.1 is cross_entropy's option")]
    fn nll_loss_refuses_label_smoothing() {
        let cfg = ClassLossConfig { label_smoothing: 0.1, ..Default::default() };
        nll_loss_with(&t64(&[-1.0, -0.5], &[1, 2]), &Tensor::from_vec_i64(vec![0], &[1]), cfg);
    }

    /// A confident, right positive logit loses `e^-x`, as PyTorch's `log_sigmoid` gives:
    /// through `log(1 + exp(-|x|))` the loss would be 0 in f32 past x of about 17 (f64: 37).
    /// (For a negative logit and target 0, PyTorch's `(1 - t) x - log_sigmoid(x)` rounds
    /// to 0 too: `-30 + 30.000...`.)
    #[test]
    fn bce_with_logits_keeps_the_loss_of_confident_logits() {
        let x = Tensor::from_vec(vec![30.0, -30.0], &[2]);
        let t = Tensor::from_vec(vec![1.0, 0.0], &[2]);
        for (w, pw) in [(None, 1.0), (Some(Tensor::from_vec(vec![3.0, 3.0], &[2])), 3.0)] {
            let got = super::binary_cross_entropy_with_logits(&x, &t, w.as_ref(), Reduction::None).to_vec();
            let want = pw * (-30f64).exp();
            assert!((got[0] as f64 - want).abs() < 1e-6 * want, "{} against {want}", got[0]);
            assert!((0.0..1e-12).contains(&got[1]), "{}", got[1]);
        }
        let got =
            super::binary_cross_entropy_with_logits(&t64(&[40.0], &[1]), &t64(&[1.0], &[1]), None, Reduction::None);
        let want = (-40f64).exp();
        assert!((got.to_vec_f64()[0] - want).abs() < 1e-15 * want, "{:?}", got.to_vec_f64());
    }

    #[test]
    #[should_panic(expected = "pos_weight of shape [4] does not broadcast to the input's shape [4, 1]")]
    fn a_pos_weight_that_widens_the_input_is_refused() {
        let x = Tensor::zeros(&[4, 1]);
        super::binary_cross_entropy_with_logits(&x, &x, Some(&Tensor::ones(&[4])), Reduction::Mean);
    }
}
