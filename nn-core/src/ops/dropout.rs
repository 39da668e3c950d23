//! Dropout with inverted scaling: kept elements are multiplied by `1 / (1 - p)` so the
//! expected value is unchanged, and evaluation mode is the identity.

use crate::tensor::Tensor;

impl Tensor {
    /// Zeroes each element with probability `p` (drawn from the global generator) and
    /// scales the rest by `1 / (1 - p)`; returns the input unchanged when `training` is
    /// false or `p == 0`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::ones(&[1000]);
    /// let y = x.dropout(0.5, true).to_vec();
    /// assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
    /// assert_eq!(x.dropout(0.5, false).to_vec(), x.to_vec());
    /// ```
    ///
    /// # Panics
    /// When `p` is outside `[0, 1]`.
    #[track_caller]
    pub fn dropout(&self, p: f64, training: bool) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::DROPOUT, &[self], &[], || {
            vec![
                ("p", crate::autograd::trace::Attr::Float(p)),
                ("training", crate::autograd::trace::Attr::Bool(training)),
            ]
        });
        if !(0.0..=1.0).contains(&p) {
            panic!("dropout: probability has to be between 0 and 1, but got {p}");
        }
        if !training || p == 0.0 {
            return self.clone();
        }
        super::check_float("dropout", self);
        if p == 1.0 {
            return self * 0.0;
        }
        let dtype = self.dtype();
        let mask = Tensor::from_storage(self.storage_arc().dropout_mask(self.numel(), 1.0 - p, dtype), self.shape());
        if dtype.is_half() {
            // A 0/1 mask, then the scale applied in f32: each kept value rounds once (see
            // `Storage::dropout_mask`).
            return (self * &mask) * (1.0 / (1.0 - p));
        }
        self * &mask
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, grad, leaf, noncontig, rng_lock, t64};
    use crate::{manual_seed, DType, Device, Tensor};

    /// In a half type each kept value is `x / (1 - p)` computed in `f32` and rounded once
    /// (PyTorch's `input * mask * scale`), not `x` times the scale rounded to the half type
    /// (for p = 0.1, bf16's 1.109375 instead of 1.1111). The gradient is scaled the same way.
    #[test]
    fn half_dropout_scales_in_f32_and_rounds_once() {
        let _rng = rng_lock();
        for dt in [DType::BF16, DType::F16] {
            manual_seed(3);
            let x = Tensor::from_vec((0..4000).map(|i| 1.0 + i as f32 / 997.0).collect(), &[4000]).to_dtype(dt);
            let x = x.requires_grad_(true);
            let y = x.dropout(0.1, true);
            assert_eq!(y.dtype(), dt);
            let (xs, ys) = (x.to_vec(), y.to_vec());
            let kept = ys.iter().filter(|&&v| v != 0.0).count() as f64 / ys.len() as f64;
            assert!((kept - 0.9).abs() < 0.03, "{dt}: kept {kept}");
            for (xv, yv) in xs.iter().zip(&ys) {
                let want = Tensor::from_vec(vec![xv * (1.0 / 0.9f64) as f32], &[1]).to_dtype(dt).to_vec()[0];
                assert!(*yv == 0.0 || *yv == want, "{dt}: {xv} gave {yv}, not 0 or {want}");
            }
            y.sum().backward();
            let g = x.grad().unwrap().to_vec();
            let one = Tensor::from_vec(vec![(1.0 / 0.9f64) as f32], &[1]).to_dtype(dt).to_vec()[0];
            for (gv, yv) in g.iter().zip(&ys) {
                assert_eq!(*gv, if *yv == 0.0 { 0.0 } else { one }, "{dt} gradient");
            }
        }
    }

    #[test]
    fn dropout_zeroes_with_probability_p_and_scales_the_rest() {
        let _rng = rng_lock();
        manual_seed(0);
        let n = 10_000;
        let y = Tensor::ones(&[n]).dropout(0.25, true).to_vec();
        assert!(y.iter().all(|&v| v == 0.0 || v == 4.0 / 3.0), "values are 0 or 1 / (1 - p)");
        let zeros = y.iter().filter(|&&v| v == 0.0).count() as f64 / n as f64;
        assert!((zeros - 0.25).abs() < 0.02, "dropped fraction {zeros}");
        let mean = y.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        assert!((mean - 1.0).abs() < 0.03, "inverted scaling keeps the mean: {mean}");
        let x = t64(&[1.0, -2.0, 3.0, 4.0], &[2, 2]);
        let z = x.dropout(0.5, true).to_vec_f64();
        for (zi, xi) in z.iter().zip(x.to_vec_f64()) {
            assert!(*zi == 0.0 || *zi == 2.0 * xi, "{zi} from {xi}");
        }
    }

    #[test]
    fn dropout_identity_cases() {
        let x = t64(&[1.0, 2.0], &[2]).requires_grad_(true);
        assert_eq!(x.dropout(0.5, false).id(), x.id(), "eval mode returns the input");
        assert_eq!(x.dropout(0.0, true).id(), x.id(), "p = 0 returns the input");
        let all = x.dropout(1.0, true);
        assert_eq!(all.to_vec_f64(), vec![0.0, 0.0]);
        all.sum().backward();
        assert_eq!(grad(&x), vec![0.0, 0.0]);
    }

    #[test]
    fn dropout_backward_uses_the_same_mask() {
        let _rng = rng_lock();
        manual_seed(3);
        let x = leaf(&[0.5, -1.0, 1.5, 2.0, -0.25, 0.75, 1.0, -2.0], &[2, 4]);
        let y = x.dropout(0.5, true);
        let yv = y.to_vec_f64();
        assert!(yv.contains(&0.0) && yv.iter().any(|&v| v != 0.0), "seed 3 keeps some and drops some: {yv:?}");
        y.exp().mean().backward();
        // d/dx mean(exp(mask * x)) = exp(y) * mask / n, with mask = y / x in {0, 2}.
        let e: Vec<f64> = yv.iter().zip(x.to_vec_f64()).map(|(&y, x)| y.exp() * (y / x) / 8.0).collect();
        assert_close64(&grad(&x), &e, 1e-15);
    }

    #[test]
    fn dropout_gradcheck_with_a_fixed_seed() {
        let _rng = rng_lock();
        // Reseeding inside `f` gives every evaluation the same mask.
        let f = |t: &[Tensor]| {
            manual_seed(11);
            t[0].dropout(0.4, true).tanh()
        };
        gradcheck(f, &[t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4], &[2, 3])]).unwrap();
    }

    #[test]
    fn dropout_is_reproducible_under_manual_seed() {
        let _rng = rng_lock();
        let x = Tensor::ones(&[64]);
        manual_seed(42);
        let a = x.dropout(0.5, true).to_vec();
        manual_seed(42);
        let b = x.dropout(0.5, true).to_vec();
        assert_eq!(a, b);
        let c = x.dropout(0.5, true).to_vec();
        assert_ne!(a, c, "the stream moves on");
        manual_seed(43);
        assert_ne!(a, x.dropout(0.5, true).to_vec());
    }

    #[test]
    fn dropout_masks_in_logical_order_for_strided_inputs() {
        let _rng = rng_lock();
        let x = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4], &[2, 3]);
        manual_seed(5);
        let a = x.dropout(0.5, true).to_vec_f64();
        manual_seed(5);
        let b = noncontig(&x).dropout(0.5, true).to_vec_f64();
        assert_eq!(a, b);
        manual_seed(5);
        let t = x.t().contiguous().t(); // same values, transposed storage
        assert_eq!(t.dropout(0.5, true).to_vec_f64(), a);
    }

    #[test]
    fn dropout_keeps_dtype_and_works_on_meta() {
        let _rng = rng_lock();
        assert_eq!(Tensor::ones(&[3]).dropout(0.5, true).dtype(), DType::F32);
        let m = Tensor::full_on(&[2, 3], 0.0, DType::F64, Device::Meta).requires_grad_(true);
        let y = m.dropout(0.3, true);
        assert_eq!((y.shape(), y.dtype(), y.device()), (&[2, 3][..], DType::F64, Device::Meta));
        assert!(y.requires_grad());
        let s = Tensor::from_vec_f64(vec![2.0], &[]).dropout(0.5, true);
        assert_eq!(s.shape(), &[] as &[usize]);
        assert!(s.item() == 0.0 || s.item() == 4.0);
    }

    #[test]
    #[should_panic(expected = "dropout: probability has to be between 0 and 1, but got 1.5")]
    fn dropout_probability_out_of_range_panics() {
        Tensor::ones(&[2]).dropout(1.5, true);
    }

    #[test]
    #[should_panic(expected = "dropout: probability has to be between 0 and 1, but got -0.1")]
    fn dropout_negative_probability_panics_even_in_eval() {
        Tensor::ones(&[2]).dropout(-0.1, false);
    }
}
