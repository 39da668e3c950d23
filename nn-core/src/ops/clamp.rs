//! Clamping into bounds given as tensors (`torch.clamp(x, min_tensor, max_tensor)`).

use smallvec::smallvec;

use super::check_same;
use crate::autograd::{no_grad, op_result, Grads};
use crate::shape::{broadcast_shapes, Dims};
use crate::tensor::Tensor;

const OP: &str = crate::names::CLAMP;

impl Tensor {
    /// Clamps elementwise into bounds given as tensors, `torch.clamp(x, min, max)` with
    /// tensor `min`/`max`: `y = min(max(x, lo), hi)`, all three broadcast together (the
    /// result has the broadcast shape). Either bound may be `None`; where `lo > hi` the
    /// result is `hi`, and a NaN in `x` or a bound gives NaN, as PyTorch.
    ///
    /// Gradients follow PyTorch 2.15, each summed back over the dims it was broadcast along:
    /// - one bound: `maximum`'s (or `minimum`'s) rule: half to each side where `x` equals
    ///   the bound, to the side taken otherwise, and to both where either is NaN;
    /// - both bounds: to `lo` where `x < lo <= hi`, to `hi` where `x > hi >= lo` or where the
    ///   bounds cross (`lo > hi`), to `x` where neither `x < lo` nor `x > hi` holds (so also
    ///   where `x` or a bound is NaN); where `x` equals a bound and `lo < hi`, half to `x`
    ///   and half to that bound. A NaN bound gets no gradient.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![-2.0, 0.5, 3.0, 1.0, 1.0, 1.0], &[2, 3]);
    /// let lo = Tensor::from_vec(vec![-1.0, 0.0, 0.0], &[3]);
    /// let hi = Tensor::from_vec(vec![1.0, 2.0], &[2, 1]);
    /// let y = x.clamp_tensor(Some(&lo), Some(&hi));
    /// assert_eq!(y.to_vec(), vec![-1.0, 0.5, 1.0, 1.0, 1.0, 1.0]);
    /// assert_eq!(x.clamp_tensor(None, Some(&hi)).to_vec(), vec![-2.0, 0.5, 1.0, 1.0, 1.0, 1.0]);
    /// ```
    ///
    /// # Panics
    /// When both bounds are `None`, the input is not `f32`/`f64`, the shapes do not
    /// broadcast together, or the tensors differ in dtype or device.
    #[track_caller]
    pub fn clamp_tensor(&self, min: Option<&Tensor>, max: Option<&Tensor>) -> Tensor {
        // Mixed dtypes promote as PyTorch's clamp promotes them (`result_type` of all three).
        let operands: Vec<&Tensor> = std::iter::once(self).chain(min).chain(max).collect();
        let to = super::promotion::result_type_of(&operands);
        if to.is_compute_float() && operands.iter().any(|t| t.dtype() != to) {
            let cast = |t: &Tensor| t.to_dtype(to);
            return cast(self).clamp_tensor(min.map(cast).as_ref(), max.map(cast).as_ref());
        }
        // The bounds present are recorded after the input; the flags say which they are.
        let _op = crate::autograd::entry::enter_uncast(crate::names::CLAMP_TENSOR, &[self], &[min, max], || {
            use crate::autograd::trace::Attr::Bool;
            vec![("has_min", Bool(min.is_some())), ("has_max", Bool(max.is_some()))]
        });
        if min.is_none() && max.is_none() {
            panic!("{OP}: at least one of 'min' or 'max' must not be None (input of shape {:?})", self.shape());
        }
        super::check_float(OP, self);
        let bounds: Vec<&Tensor> = min.into_iter().chain(max).collect();
        let mut all = vec![self];
        all.extend(&bounds);
        check_same(OP, &all);
        let mut shape: Dims = self.shape().into();
        for b in &bounds {
            shape = broadcast_shapes(&shape, b.shape()).unwrap_or_else(|| {
                panic!(
                    "{OP}: input of shape {:?} and bounds of shapes {:?} cannot be broadcast together",
                    self.shape(),
                    bounds.iter().map(|b| b.shape().to_vec()).collect::<Vec<_>>()
                )
            });
        }
        // maximum and minimum propagate NaN from either side, as PyTorch's clamp does.
        let y = no_grad(|| {
            let y = min.map_or_else(|| self.clone(), |lo| self.maximum(lo));
            max.map_or(y.clone(), |hi| y.minimum(hi))
        });
        debug_assert_eq!(y.shape(), shape.as_slice());
        op_result(OP, y.storage_arc(), y.layout().clone(), &all, || {
            let x = self.saved_for_backward();
            let (lo, hi) = (min.map(Tensor::saved_for_backward), max.map(Tensor::saved_for_backward));
            let shapes: Vec<Dims> = all.iter().map(|t| t.shape().into()).collect();
            move |g: &Tensor, needs: &[bool]| -> Grads {
                let w = ClampWeights::new(&x, lo.as_ref(), hi.as_ref());
                let mut grads: Grads = smallvec![None; needs.len()];
                let parts = [Some(w.x), w.lo, w.hi];
                for (k, weight) in parts.into_iter().flatten().enumerate() {
                    if needs[k] {
                        grads[k] = Some((g * &weight).sum_to_shape(&shapes[k]));
                    }
                }
                grads
            }
        })
    }
}

/// The local gradients of [`Tensor::clamp_tensor`] for `x` and each bound present, as
/// 0/0.5/1 masks in the broadcast of their shapes.
struct ClampWeights {
    x: Tensor,
    lo: Option<Tensor>,
    hi: Option<Tensor>,
}

impl ClampWeights {
    fn new(x: &Tensor, lo: Option<&Tensor>, hi: Option<&Tensor>) -> Self {
        let f = |v: f64| x.scalar_like(v);
        let sel = |mask: &Tensor, a: f64, b: f64| Tensor::where_cond(mask, &f(a), &f(b));
        let and = |a: &Tensor, b: &Tensor| Tensor::where_cond(a, b, a);
        let or = |a: &Tensor, b: &Tensor| Tensor::where_cond(a, a, b);
        match (lo, hi) {
            // `maximum`'s rule: a tie halves, NaN on either side passes to both.
            (Some(lo), None) => {
                let tie = x.eq(lo);
                ClampWeights {
                    x: Tensor::where_cond(&tie, &f(0.5), &sel(&x.lt(lo), 0.0, 1.0)),
                    lo: Some(Tensor::where_cond(&tie, &f(0.5), &sel(&x.gt(lo), 0.0, 1.0))),
                    hi: None,
                }
            }
            (None, Some(hi)) => {
                let tie = x.eq(hi);
                ClampWeights {
                    x: Tensor::where_cond(&tie, &f(0.5), &sel(&x.gt(hi), 0.0, 1.0)),
                    lo: None,
                    hi: Some(Tensor::where_cond(&tie, &f(0.5), &sel(&x.lt(hi), 0.0, 1.0))),
                }
            }
            (Some(lo), Some(hi)) => {
                let ordered = lo.lt(hi);
                let tie_lo = and(&x.eq(lo), &ordered);
                let tie_hi = and(&x.eq(hi), &ordered);
                let inside = and(&x.lt(lo).logical_not(), &x.gt(hi).logical_not());
                let below = and(&x.lt(lo), &lo.le(hi));
                let above = or(&and(&x.gt(hi), &lo.le(hi)), &lo.gt(hi));
                ClampWeights {
                    x: Tensor::where_cond(&inside, &sel(&or(&tie_lo, &tie_hi), 0.5, 1.0), &f(0.0)),
                    lo: Some(Tensor::where_cond(&tie_lo, &f(0.5), &sel(&below, 1.0, 0.0))),
                    hi: Some(Tensor::where_cond(&tie_hi, &f(0.5), &sel(&above, 1.0, 0.0))),
                }
            }
            (None, None) => unreachable!("a bound is given"),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::{grad, leaf, t64};
    use crate::Tensor;

    #[test]
    fn clamp_tensor_forward_broadcasts_and_follows_pytorch_when_bounds_cross() {
        let x = t64(&[-2.0, 0.5, 3.0, 1.5], &[2, 2]);
        let lo = t64(&[-1.0, 1.0], &[2]);
        let hi = t64(&[2.0, 0.0], &[2, 1]);
        // Row 1 has hi = 0 < lo = 1 in column 1: the result is hi there.
        let y = x.clamp_tensor(Some(&lo), Some(&hi));
        assert_eq!(y.to_vec_f64(), vec![-1.0, 1.0, 0.0, 0.0]);
        assert_eq!(x.clamp_tensor(Some(&lo), None).to_vec_f64(), vec![-1.0, 1.0, 3.0, 1.5]);
        assert_eq!(x.clamp_tensor(None, Some(&hi)).to_vec_f64(), vec![-2.0, 0.5, 0.0, 0.0]);
        // The result takes the broadcast shape of all three.
        let s = t64(&[5.0], &[]).clamp_tensor(Some(&lo), Some(&hi));
        assert_eq!((s.shape(), s.to_vec_f64()), (&[2, 2][..], vec![2.0, 2.0, 0.0, 0.0]));
        let n = t64(&[f64::NAN, 1.0, 1.0], &[3]).clamp_tensor(Some(&t64(&[0.0, f64::NAN, 0.0], &[3])), None);
        assert!(n.to_vec_f64()[..2].iter().all(|v| v.is_nan()) && n.to_vec_f64()[2] == 1.0);
    }

    #[test]
    fn clamp_tensor_gradients_go_to_the_taken_side() {
        let x = leaf(&[-2.0, 0.5, 3.0, 1.0, 1.0], &[5]);
        let lo = leaf(&[-1.0, 0.0, 0.0, 1.0, 2.0], &[5]);
        let hi = leaf(&[1.0, 1.0, 2.0, 1.0, 0.0], &[5]);
        let w = t64(&[1.0, 2.0, 3.0, 4.0, 5.0], &[5]);
        (x.clamp_tensor(Some(&lo), Some(&hi)) * &w).sum().backward();
        // Position 3: x = lo = hi, the gradient goes to x only; position 4: lo > hi, to hi.
        assert_eq!(grad(&x), vec![0.0, 2.0, 0.0, 4.0, 0.0]);
        assert_eq!(grad(&lo), vec![1.0, 0.0, 0.0, 0.0, 0.0]);
        assert_eq!(grad(&hi), vec![0.0, 0.0, 3.0, 0.0, 5.0]);
        // Broadcast bounds collect their gradient over the broadcast dims.
        let x = leaf(&[-2.0, 0.5, 3.0, -1.5], &[2, 2]);
        let lo = leaf(&[-1.0], &[1]);
        (x.clamp_tensor(Some(&lo), None).exp().mean()).backward();
        let e = (-1f64).exp() / 4.0;
        assert_eq!(grad(&lo), vec![2.0 * e]);
        assert_eq!(grad(&x), vec![0.0, 0.5f64.exp() / 4.0, 3f64.exp() / 4.0, 0.0]);
    }

    /// Every ordering of `x`, `lo` and `hi` over {0, 1, 2, NaN}: the gradients PyTorch 2.15
    /// gives `torch.clamp(x, lo, hi)` (recorded with `tests/fixtures/pytorch`'s torch; `h` is
    /// 0.5), then the one-bound forms, which follow `maximum`/`minimum`.
    #[test]
    fn clamp_tensor_gradients_match_pytorch_at_ties_and_nan() {
        let vals = [0.0, 1.0, 2.0, f64::NAN];
        let mut cols = [vec![], vec![], vec![]];
        for a in vals {
            for b in vals {
                for c in vals {
                    cols[0].push(a);
                    cols[1].push(b);
                    cols[2].push(c);
                }
            }
        }
        let expect = |s: &str| -> Vec<f64> {
            s.chars()
                .map(|c| match c {
                    'h' => 0.5,
                    '1' => 1.0,
                    _ => 0.0,
                })
                .collect()
        };
        let [x, lo, hi] = cols.map(|c| leaf(&c, &[64]));
        x.clamp_tensor(Some(&lo), Some(&hi)).sum().backward();
        assert_eq!(grad(&x), expect("1hh10000000011110h1101h10000011100h100h1001100111111111111111111"));
        assert_eq!(grad(&lo), expect("0hh0011000100000000000h00010000000000000000000000000000000000000"));
        assert_eq!(grad(&hi), expect("00001000110000001h0010001100000011h011h0110000000000100011000000"));
        // torch.clamp(x, lo) and torch.clamp(x, None, hi) on [0.5, 2, -1, 0], [nan, nan, 0, 0].
        let x = leaf(&[0.5, 2.0, -1.0, 0.0], &[4]);
        let b = leaf(&[f64::NAN, f64::NAN, 0.0, 0.0], &[4]);
        x.clamp_tensor(Some(&b), None).sum().backward();
        assert_eq!((grad(&x), grad(&b)), (vec![1.0, 1.0, 0.0, 0.5], vec![1.0, 1.0, 1.0, 0.5]));
        let x = leaf(&[0.5, 2.0, -1.0, 0.0], &[4]);
        let b = leaf(&[f64::NAN, f64::NAN, 0.0, 0.0], &[4]);
        x.clamp_tensor(None, Some(&b)).sum().backward();
        assert_eq!((grad(&x), grad(&b)), (vec![1.0, 1.0, 1.0, 0.5], vec![1.0, 1.0, 0.0, 0.5]));
    }

    #[test]
    fn clamp_tensor_gradcheck() {
        let x = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4], &[2, 3]);
        let lo = t64(&[-0.5, 0.0, 0.8], &[3]);
        let hi = t64(&[1.0, 0.2], &[2, 1]);
        gradcheck(|t| t[0].clamp_tensor(Some(&t[1]), Some(&t[2])).exp(), &[x.clone(), lo.clone(), hi.clone()]).unwrap();
        gradcheck(|t| t[0].clamp_tensor(Some(&t[1]), None), &[x.clone(), lo]).unwrap();
        gradcheck(|t| t[0].clamp_tensor(None, Some(&t[1])).sin(), &[x, hi]).unwrap();
    }

    /// PyTorch 2.15: `torch.clamp(torch.tensor(-8), torch.tensor([[-1.5]]), torch.tensor([2.0, -9.0],
    /// dtype=torch.float64))` is `[[-1.5, -9.0]]` in float64 (an OpInfo reference input).
    #[test]
    fn clamp_tensor_promotes_mixed_dtypes_as_pytorch() {
        let x = Tensor::from_vec_i64(vec![-8], &[]);
        let lo = Tensor::from_vec(vec![-1.5], &[1, 1]);
        let hi = t64(&[2.0, -9.0], &[2]);
        let y = x.clamp_tensor(Some(&lo), Some(&hi));
        assert_eq!((y.dtype(), y.shape().to_vec(), y.to_vec_f64()), (crate::DType::F64, vec![1, 2], vec![-1.5, -9.0]));
    }

    #[test]
    #[should_panic(expected = "clamp: at least one of 'min' or 'max' must not be None (input of shape [2])")]
    fn clamp_tensor_needs_a_bound() {
        Tensor::ones(&[2]).clamp_tensor(None, None);
    }

    #[test]
    #[should_panic(expected = "clamp: input of shape [2, 3] and bounds of shapes [[2]] cannot be broadcast together")]
    fn clamp_tensor_with_mismatched_shapes_panics() {
        Tensor::ones(&[2, 3]).clamp_tensor(Some(&Tensor::ones(&[2])), None);
    }
}
