//! The classification losses with PyTorch's class `weight=` and probability targets, and
//! the binary cross-entropy with an element `weight=`.

use super::{class_targets, flatten_class, ignored, reduce, ClassLossConfig, Reduction};
use crate::tensor::Tensor;

/// `weight` checked as a class weight of `c` classes for `input`: 1-D, `c` long, of the
/// input's dtype and device.
#[track_caller]
fn check_class_weight(op: &str, weight: &Tensor, c: usize, input: &Tensor) {
    if weight.shape() != [c] {
        panic!("{op}: weight of shape {:?} for {c} classes: expected a 1-D weight of {c} values", weight.shape());
    }
    if weight.dtype() != input.dtype() || weight.device() != input.device() {
        panic!(
            "{op}: weight is {} on {}, the input {} on {}: expected one dtype and device",
            weight.dtype(),
            weight.device(),
            input.dtype(),
            input.device()
        );
    }
}

/// [`nll_loss_with`](super::nll_loss_with) with PyTorch's class `weight` (`[C]`): each
/// sample's loss is scaled by its target's weight, and the mean divides by the sum of the
/// weights of the kept targets (`F.nll_loss(input, target, weight=w)`).
///
/// ```
/// use nn_core::{functional::{nll_loss_weighted, ClassLossConfig}, Tensor};
/// let logp = Tensor::from_vec(vec![-0.5, -1.0, -2.0, -0.25], &[2, 2]);
/// let t = Tensor::from_vec_i64(vec![0, 1], &[2]);
/// let w = Tensor::from_vec(vec![1.0, 3.0], &[2]);
/// let loss = nll_loss_weighted(&logp, &t, Some(&w), ClassLossConfig::default());
/// assert!((loss.item() - (0.5 * 1.0 + 0.25 * 3.0) / 4.0).abs() < 1e-7);
/// ```
///
/// # Panics
/// As `nll_loss_with`, and when `weight` is not a 1-D tensor of one value per class of the
/// input's dtype and device.
#[track_caller]
pub fn nll_loss_weighted(input: &Tensor, target: &Tensor, weight: Option<&Tensor>, opt: ClassLossConfig) -> Tensor {
    let Some(weight) = weight else { return super::nll_loss_with(input, target, opt) };
    const OP: &str = crate::names::NLL_LOSS;
    if opt.label_smoothing != 0.0 {
        // nll_loss_with's refusal, with its message.
        return super::nll_loss_with(input, target, opt);
    }
    let (x, t, c) = flatten_class(OP, input, target);
    check_class_weight(OP, weight, c, input);
    let (idx, mask) = class_targets(OP, &t, c, opt.ignore_index, x.dtype());
    let n = t.numel();
    let wt = weight.gather(0, &idx.reshape(&[n])) * &mask;
    let per = (-x.gather(1, &idx).reshape(&[n]) * &wt).masked_fill(&ignored(&mask), 0.0);
    match opt.reduction {
        Reduction::Mean => per.sum() / wt.sum(),
        Reduction::Sum => per.sum(),
        Reduction::None => per.reshape(target.shape()),
    }
}

/// [`cross_entropy_with`](super::cross_entropy_with) with PyTorch's class `weight` (`[C]`,
/// or `None`), and for class-index or probability targets: an `i64` target holds class
/// indices (as `cross_entropy_with`), a float target of the logits' shape holds class
/// probabilities (PyTorch's soft targets: `-sum(w * p * log_softmax(x))` over the class
/// dim, the mean over every other element). Label smoothing follows PyTorch's formula for
/// each (for probabilities it mixes the targets with the uniform distribution).
///
/// ```
/// use nn_core::{functional::{cross_entropy_weighted, ClassLossConfig}, Tensor};
/// let logits = Tensor::from_vec(vec![2.0, 0.0, 0.0, 1.0], &[2, 2]);
/// // A one-hot probability target is its class index.
/// let p = Tensor::from_vec(vec![1.0, 0.0, 0.0, 1.0], &[2, 2]);
/// let t = Tensor::from_vec_i64(vec![0, 1], &[2]);
/// let cfg = ClassLossConfig::default();
/// let (soft, hard) = (cross_entropy_weighted(&logits, &p, None, cfg), cross_entropy_weighted(&logits, &t, None, cfg));
/// assert!((soft.item() - hard.item()).abs() < 1e-6);
/// ```
///
/// # Panics
/// As `cross_entropy_with`; when `weight` is not one value per class of the logits' dtype
/// and device; for probability targets, when they differ from the logits in shape or
/// dtype, or `ignore_index` is set (PyTorch ignores it there; a target that was meant to
/// be skipped would count).
#[track_caller]
pub fn cross_entropy_weighted(
    logits: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    opt: ClassLossConfig,
) -> Tensor {
    const OP: &str = crate::names::CROSS_ENTROPY;
    if !(0.0..=1.0).contains(&opt.label_smoothing) {
        panic!("{OP}: label_smoothing must be in [0, 1], got {}", opt.label_smoothing);
    }
    if target.dtype().is_float() {
        return probability_targets(logits, target, weight, opt);
    }
    let Some(weight) = weight else { return super::cross_entropy_with(logits, target, opt) };
    let (x, t, c) = flatten_class(OP, logits, target);
    check_class_weight(OP, weight, c, logits);
    let logp = x.log_softmax(1);
    let ls = opt.label_smoothing;
    let nll = nll_loss_weighted(&logp, &t, Some(weight), ClassLossConfig { label_smoothing: 0.0, ..opt });
    let nll = if opt.reduction == Reduction::None { nll.reshape(target.shape()) } else { nll };
    if ls == 0.0 {
        return nll;
    }
    let (idx, mask) = class_targets(OP, &t, c, opt.ignore_index, x.dtype());
    let smooth = (-(&logp * &weight.reshape(&[1, c])).sum_dim(1, false)).masked_fill(&ignored(&mask), 0.0);
    let ret = match opt.reduction {
        Reduction::Mean => smooth.sum() / (weight.gather(0, &idx.reshape(&[t.numel()])) * &mask).sum(),
        Reduction::Sum => smooth.sum(),
        Reduction::None => smooth.reshape(target.shape()),
    };
    nll * (1.0 - ls) + ret * (ls / c as f64)
}

/// PyTorch's `cross_entropy_loss_prob_target`.
#[track_caller]
fn probability_targets(logits: &Tensor, target: &Tensor, weight: Option<&Tensor>, opt: ClassLossConfig) -> Tensor {
    const OP: &str = crate::names::CROSS_ENTROPY;
    if target.shape() != logits.shape() || target.dtype() != logits.dtype() {
        panic!(
            "{OP}: probability targets must have the logits' shape and dtype: got {:?} {} for logits {:?} {}",
            target.shape(),
            target.dtype(),
            logits.shape(),
            logits.dtype()
        );
    }
    if opt.ignore_index != ClassLossConfig::default().ignore_index {
        panic!(
            "{OP}: ignore_index {} applies to class-index targets only; with probability targets no element is \
             ignored (PyTorch ignores the option silently)",
            opt.ignore_index
        );
    }
    if logits.rank() == 0 {
        panic!("{OP}: expected logits with a class dim, got a 0-d tensor");
    }
    let class_dim = if logits.rank() == 1 { 0 } else { 1 };
    let c = logits.shape()[class_dim];
    let logp = logits.log_softmax(class_dim);
    let ls = opt.label_smoothing;
    let p = if ls > 0.0 { target * (1.0 - ls) + ls / c as f64 } else { target.clone() };
    let prod = &logp * &p;
    let prod = match weight {
        Some(w) => {
            check_class_weight(OP, w, c, logits);
            let mut shape = vec![1; logits.rank()];
            shape[class_dim] = c;
            // Out of place: `*=` would write into a tensor the backward of `logp * p` reads.
            &prod * &w.reshape(shape.as_slice())
        }
        None => prod,
    };
    match opt.reduction {
        Reduction::Mean if logits.numel() == 0 => prod.sum() * f64::NAN,
        Reduction::Mean => -prod.sum() / (logits.numel() / c.max(1)) as f64,
        Reduction::Sum => -prod.sum(),
        Reduction::None => -prod.sum_dim(class_dim, false),
    }
}

/// [`binary_cross_entropy_with_logits`](super::binary_cross_entropy_with_logits) with
/// PyTorch's element `weight` (broadcast to the input's shape, each element's loss scaled
/// by it before the reduction; `None` for none).
///
/// ```
/// use nn_core::{functional::{binary_cross_entropy_with_logits_weighted as bce, Reduction}, Tensor};
/// let (x, t) = (Tensor::from_vec(vec![0.0, 0.0], &[2]), Tensor::from_vec(vec![1.0, 0.0], &[2]));
/// let w = Tensor::from_vec(vec![2.0, 0.0], &[2]);
/// let loss = bce(&x, &t, Some(&w), None, Reduction::Sum);
/// assert!((loss.item() - 2.0 * 2f64.ln()).abs() < 1e-6);
/// ```
///
/// # Panics
/// As `binary_cross_entropy_with_logits`, and when `weight` does not broadcast to the
/// input's shape (one that widens it would average more losses than there are).
#[track_caller]
pub fn binary_cross_entropy_with_logits_weighted(
    input: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    pos_weight: Option<&Tensor>,
    reduction: Reduction,
) -> Tensor {
    let Some(w) = weight else { return super::binary_cross_entropy_with_logits(input, target, pos_weight, reduction) };
    if crate::shape::broadcast_shapes(w.shape(), input.shape()).as_deref() != Some(input.shape()) {
        panic!(
            "binary_cross_entropy_with_logits: weight of shape {:?} does not broadcast to the input's shape {:?}",
            w.shape(),
            input.shape()
        );
    }
    let per = super::binary_cross_entropy_with_logits(input, target, pos_weight, Reduction::None) * w;
    reduce(per, reduction)
}

#[cfg(test)]
mod tests {
    use super::{binary_cross_entropy_with_logits_weighted, cross_entropy_weighted, nll_loss_weighted};
    use crate::functional::{ClassLossConfig, Reduction};
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, t64};
    use crate::Tensor;

    /// PyTorch 2.15 (float64): `F.cross_entropy(x, t, weight=w, ignore_index=1,
    /// label_smoothing=0.2)` and the same with probability targets `p`.
    #[test]
    fn weighted_and_soft_cross_entropy_match_torch() {
        let x = t64(&[0.5, -1.0, 2.0, 0.3, 1.2, -0.7, -0.2, 0.9, 0.1], &[3, 3]);
        let t = Tensor::from_vec_i64(vec![2, 1, 0], &[3]);
        let w = t64(&[0.5, 2.0, 1.5], &[3]);
        let cfg = ClassLossConfig { ignore_index: 1, label_smoothing: 0.2, ..ClassLossConfig::default() };
        let torch = 0.8729111452238656;
        assert_close64(&cross_entropy_weighted(&x, &t, Some(&w), cfg).to_vec_f64(), &[torch], 1e-13);
        let p = t64(&[0.2, 0.3, 0.5, 0.0, 1.0, 0.0, 0.6, 0.4, 0.0], &[3, 3]);
        let cfg = ClassLossConfig { label_smoothing: 0.1, ..ClassLossConfig::default() };
        let torch = 1.4321566946756972;
        assert_close64(&cross_entropy_weighted(&x, &p, Some(&w), cfg).to_vec_f64(), &[torch], 1e-13);
        let none = ClassLossConfig { reduction: Reduction::None, ..ClassLossConfig::default() };
        let torch = [0.36196694498573556, 0.884414580071905, 0.8389242915129255];
        assert_close64(&nll_loss_weighted(&x.log_softmax(1), &t, Some(&w), none).to_vec_f64(), &torch, 1e-13);
    }

    #[test]
    fn weighted_losses_gradcheck() {
        let x = t64(&[0.5, -1.0, 2.0, 0.3, 1.2, -0.7, -0.2, 0.9, 0.1], &[3, 3]);
        let t = Tensor::from_vec_i64(vec![2, 1, 0], &[3]);
        let w = t64(&[0.5, 2.0, 1.5], &[3]);
        let cfg = ClassLossConfig { label_smoothing: 0.3, ..ClassLossConfig::default() };
        gradcheck(|v| cross_entropy_weighted(&v[0], &t, Some(&v[1]), cfg), &[x.clone(), w.clone()]).unwrap();
        let p = t64(&[0.2, 0.3, 0.5, 0.0, 1.0, 0.0, 0.6, 0.4, 0.0], &[3, 3]);
        gradcheck(|v| cross_entropy_weighted(&v[0], &v[1], Some(&w), cfg), &[x.clone(), p]).unwrap();
        let target = t64(&[1.0, 0.0, 0.5, 0.2, 0.9, 0.0, 1.0, 1.0, 0.3], &[3, 3]);
        gradcheck(
            |v| binary_cross_entropy_with_logits_weighted(&v[0], &target, Some(&v[1]), None, Reduction::Mean),
            &[x, t64(&[0.5, 2.0, 1.5], &[3])],
        )
        .unwrap();
    }

    #[test]
    #[should_panic(expected = "ignore_index 3 applies to class-index targets only")]
    fn probability_targets_refuse_ignore_index() {
        let x = t64(&[0.5, -1.0], &[1, 2]);
        let cfg = ClassLossConfig { ignore_index: 3, ..ClassLossConfig::default() };
        cross_entropy_weighted(&x, &t64(&[0.5, 0.5], &[1, 2]), None, cfg);
    }
}
