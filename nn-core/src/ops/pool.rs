//! 2-D pooling: max (with the argmax saved for backward), average, adaptive average.
//! Each `[H, W]` plane is independent (the backend spreads planes over threads).

use std::sync::Arc;

use smallvec::smallvec;

use super::check_float;
use crate::autograd::{op_result, Grads};
pub use crate::backend::Pool2dConfig;
use crate::backend::{Argmax, AvgPool, AvgWindows, MaxPool, PoolPlanes};
use crate::shape::Layout;
use crate::tensor::Tensor;

fn pooled(input: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> Option<usize> {
    let eff = d * (k - 1) + 1;
    let span = (input + 2 * p).checked_sub(eff)?;
    let mut out = if ceil { span.div_ceil(s) + 1 } else { span / s + 1 };
    // The last window must start inside the input or the left padding (PyTorch).
    if ceil && (out - 1) * s >= input + p {
        out -= 1;
    }
    Some(out)
}

#[track_caller]
fn planes(op: &str, x: &Tensor, o: &Pool2dConfig) -> (PoolPlanes, Vec<usize>) {
    if x.rank() != 3 && x.rank() != 4 {
        panic!("{op}: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape {:?}", x.shape());
    }
    let (k, s, p, d) = (o.kernel, o.stride, o.padding, o.dilation);
    if k.0 == 0 || k.1 == 0 || s.0 == 0 || s.1 == 0 || d.0 == 0 || d.1 == 0 {
        panic!("{op}: kernel, stride and dilation must be positive, got {o:?}");
    }
    if 2 * p.0 > k.0 || 2 * p.1 > k.1 {
        panic!("{op}: padding {p:?} should be at most half of the kernel size {k:?}");
    }
    let r = x.rank();
    let (h, w) = (x.shape()[r - 2], x.shape()[r - 1]);
    let (Some(ho), Some(wo)) = (pooled(h, k.0, s.0, p.0, d.0, o.ceil_mode), pooled(w, k.1, s.1, p.1, d.1, o.ceil_mode))
    else {
        panic!("{op}: input of shape {:?} is smaller than the (dilated) window {k:?} with padding {p:?}", x.shape());
    };
    let mut shape = x.shape()[..r - 2].to_vec();
    shape.extend([ho, wo]);
    (PoolPlanes { planes: x.shape()[..r - 2].iter().product(), h, w, ho, wo }, shape)
}

impl Tensor {
    /// 2-D max pooling over `[N, C, H, W]` (or `[C, H, W]`); padded positions never win.
    ///
    /// ```
    /// use nn_core::{ops::Pool2dConfig, Tensor};
    /// let x = Tensor::arange(0.0, 16.0, 1.0).reshape(&[1, 1, 4, 4]);
    /// assert_eq!(x.max_pool2d(Pool2dConfig::new(2)).to_vec(), vec![5.0, 7.0, 13.0, 15.0]);
    /// ```
    #[track_caller]
    pub fn max_pool2d(&self, options: Pool2dConfig) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::MAX_POOL2D, &[self], &[], || {
            crate::autograd::trace::pool_attrs(&options)
        });
        self.max_pool2d_impl(options).0
    }

    /// Max pooling that also returns the flat `H * W` index of each maximum (`i64`), as
    /// PyTorch's `return_indices=True`.
    #[track_caller]
    pub fn max_pool2d_with_indices(&self, options: Pool2dConfig) -> (Tensor, Tensor) {
        let _op = crate::autograd::entry::enter_uncast(crate::names::MAX_POOL2D_WITH_INDICES, &[self], &[], || {
            crate::autograd::trace::pool_attrs(&options)
        });
        let (out, argmax) = self.max_pool2d_impl(options);
        let pl = planes("max_pool2d", self, &options).0;
        let indices = Tensor::from_storage(argmax.flat_indices(&pl, &out.storage_arc()), out.shape());
        (out, indices)
    }

    /// The pooled values and where each maximum came from, shared with backward.
    #[track_caller]
    fn max_pool2d_impl(&self, options: Pool2dConfig) -> (Tensor, Arc<Argmax>) {
        const OP: &str = crate::names::MAX_POOL2D;
        check_float(OP, self);
        let (pl, shape) = planes(OP, self, &options);
        crate::shape::numel_of(OP, &shape);
        let in_shape = self.shape().to_vec();
        let pool = MaxPool { planes: pl, options };
        let x = self.contiguous();
        let (vals, argmax) = x.storage_arc().max_pool2d(&pool);
        let argmax = Arc::new(argmax);
        let saved = argmax.clone();
        let out = op_result(OP, Arc::new(vals), Layout::contiguous(&shape), &[self], || {
            move |g: &Tensor, _: &[bool]| -> Grads {
                let dx = g.contiguous().storage_arc().max_pool2d_backward(&saved, &pool);
                smallvec![Some(Tensor::from_storage(dx, &in_shape))]
            }
        });
        (out, argmax)
    }

    /// 2-D average pooling; `count_include_pad` counts padded zeros in the divisor
    /// (PyTorch's default is `true`).
    ///
    /// ```
    /// use nn_core::{ops::Pool2dConfig, Tensor};
    /// let x = Tensor::arange(0.0, 16.0, 1.0).reshape(&[1, 1, 4, 4]);
    /// assert_eq!(x.avg_pool2d(Pool2dConfig::new(2), true).to_vec(), vec![2.5, 4.5, 10.5, 12.5]);
    /// ```
    #[track_caller]
    pub fn avg_pool2d(&self, options: Pool2dConfig, count_include_pad: bool) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::AVG_POOL2D, &[self], &[], || {
            [
                crate::autograd::trace::pool_attrs(&options),
                vec![("count_include_pad", crate::autograd::trace::Attr::Bool(count_include_pad))],
            ]
            .concat()
        });
        const OP: &str = crate::names::AVG_POOL2D;
        check_float(OP, self);
        if options.dilation != (1, 1) {
            panic!("avg_pool2d: dilation is not supported (PyTorch's avg_pool2d has none), got {:?}", options.dilation);
        }
        let (pl, shape) = planes(OP, self, &options);
        let (k, s, p) = (options.kernel, options.stride, options.padding);
        avg_pool(
            OP,
            self,
            AvgPool { planes: pl, windows: AvgWindows::Fixed { kernel: k, stride: s, padding: p, count_include_pad } },
            &shape,
        )
    }

    /// Adaptive average pooling to a fixed `(out_h, out_w)`: window `i` spans
    /// `floor(i * H / out_h) .. ceil((i + 1) * H / out_h)`, as PyTorch.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::arange(0.0, 16.0, 1.0).reshape(&[1, 1, 4, 4]);
    /// assert_eq!(x.adaptive_avg_pool2d((1, 1)).to_vec(), vec![7.5]);
    /// ```
    #[track_caller]
    pub fn adaptive_avg_pool2d(&self, output_size: (usize, usize)) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::ADAPTIVE_AVG_POOL2D, &[self], &[], || {
            vec![("output_size", crate::autograd::trace::ints(&[output_size.0, output_size.1]))]
        });
        const OP: &str = crate::names::ADAPTIVE_AVG_POOL2D;
        check_float(OP, self);
        if self.rank() != 3 && self.rank() != 4 {
            panic!("{OP}: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape {:?}", self.shape());
        }
        let (oh_n, ow_n) = output_size;
        if oh_n == 0 || ow_n == 0 {
            panic!("{OP}: output size must be positive, got {output_size:?}");
        }
        let r = self.rank();
        let (h, w) = (self.shape()[r - 2], self.shape()[r - 1]);
        let mut shape = self.shape()[..r - 2].to_vec();
        shape.extend([oh_n, ow_n]);
        let pl = PoolPlanes { planes: self.shape()[..r - 2].iter().product(), h, w, ho: oh_n, wo: ow_n };
        avg_pool(OP, self, AvgPool { planes: pl, windows: AvgWindows::Adaptive }, &shape)
    }
}

/// Average pooling of `x` as `pool` describes, into `shape`.
#[track_caller]
fn avg_pool(op: &'static str, x: &Tensor, pool: AvgPool, shape: &[usize]) -> Tensor {
    crate::shape::numel_of(op, shape);
    let storage = x.contiguous().storage_arc().avg_pool2d(&pool);
    let in_shape = x.shape().to_vec();
    op_result(op, Arc::new(storage), Layout::contiguous(shape), &[x], || {
        move |g: &Tensor, _: &[bool]| -> Grads {
            let dx = g.contiguous().storage_arc().avg_pool2d_backward(&pool);
            smallvec![Some(Tensor::from_storage(dx, &in_shape))]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::Pool2dConfig;
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    /// A 4x4 plane with distinct values: `[[3, 9, 1, 4], [7, 2, 8, 6], [0, 5, 15, 11], [13, 10, 12, 14]]`.
    const V: [f64; 16] = [3., 9., 1., 4., 7., 2., 8., 6., 0., 5., 15., 11., 13., 10., 12., 14.];
    /// A 5x5 plane with distinct values `7 i mod 25`.
    fn v5() -> Vec<f64> {
        (0..25).map(|i| ((i * 7) % 25) as f64).collect()
    }

    fn opt(k: usize, s: usize, p: usize, d: usize, ceil_mode: bool) -> Pool2dConfig {
        Pool2dConfig { kernel: (k, k), stride: (s, s), padding: (p, p), dilation: (d, d), ceil_mode }
    }

    fn ramp(n: usize) -> Vec<f64> {
        (1..=n).map(|v| v as f64).collect()
    }

    /// Distinct values spaced well apart (no ties within 1e-3), for gradchecks.
    fn distinct(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        t64(&(0..n).map(|i| ((i * 37) % n) as f64 * 0.1 - 1.0).collect::<Vec<_>>(), shape)
    }

    #[test]
    fn max_pool2d_forward() {
        let x = t64(&V, &[1, 1, 4, 4]);
        let (y, i) = x.max_pool2d_with_indices(Pool2dConfig::new(2));
        assert_eq!((y.shape(), y.to_vec_f64()), (&[1, 1, 2, 2][..], vec![9.0, 8.0, 13.0, 15.0]));
        assert_eq!(i.to_vec_i64(), vec![1, 6, 12, 10]);
        // 3x3 windows, stride 1, padding 1: padded positions never win.
        let y = x.max_pool2d(opt(3, 1, 1, 1, false));
        assert_eq!(y.shape(), &[1, 1, 4, 4]);
        assert_eq!(y.to_vec_f64(), vec![9., 9., 9., 8., 9., 15., 15., 15., 13., 15., 15., 15., 13., 15., 15., 15.]);
        // Dilation 2: taps two apart.
        let (y, i) = x.max_pool2d_with_indices(opt(2, 1, 0, 2, false));
        assert_eq!((y.to_vec_f64(), i.to_vec_i64()), (vec![15.0, 11.0, 13.0, 14.0], vec![10, 11, 12, 15]));
        // All-negative input with padding: the padding is -inf, not 0.
        let neg = t64(&[-5.0, -6.0, -7.0, -8.0], &[1, 2, 2]);
        assert_eq!(neg.max_pool2d(opt(2, 2, 1, 1, false)).to_vec_f64(), vec![-5.0, -6.0, -7.0, -8.0]);
    }

    #[test]
    fn max_pool2d_ceil_mode() {
        let x = t64(&v5(), &[1, 1, 5, 5]);
        let floor = x.max_pool2d(opt(2, 2, 0, 1, false));
        assert_eq!((floor.shape(), floor.to_vec_f64()), (&[1, 1, 2, 2][..], vec![17.0, 24.0, 20.0, 19.0]));
        let ceil = x.max_pool2d(opt(2, 2, 0, 1, true));
        assert_eq!(ceil.shape(), &[1, 1, 3, 3]);
        assert_eq!(ceil.to_vec_f64(), vec![17., 24., 13., 20., 19., 23., 22., 11., 18.]);
        let cp = x.max_pool2d(opt(3, 2, 1, 1, true));
        assert_eq!(cp.to_vec_f64(), vec![17., 24., 21., 20., 24., 23., 22., 22., 18.]);
        // The last window must start inside the input or left padding: 4x4, k2 s2 p1 ceil
        // gives 3 (not 4) per side, as PyTorch.
        assert_eq!(Tensor::zeros(&[1, 4, 4]).max_pool2d(opt(2, 2, 1, 1, true)).shape(), &[1, 3, 3]);
    }

    #[test]
    fn max_pool2d_backward() {
        let x = leaf(&V, &[1, 1, 4, 4]);
        let y = x.max_pool2d(opt(3, 1, 1, 1, false));
        (&y * &t64(&ramp(16), &[1, 1, 4, 4])).sum().backward();
        // Overlapping windows add up at their shared maxima.
        let mut e = vec![0.0; 16];
        (e[1], e[6], e[10], e[12]) = (11.0, 4.0, 99.0, 22.0);
        assert_eq!(grad(&x), e);
        let x = leaf(&V, &[1, 1, 4, 4]);
        x.max_pool2d(Pool2dConfig::new(2)).exp().mean().backward();
        let mut e = vec![0.0; 16];
        for (i, v) in [(1, 9.0f64), (6, 8.0), (12, 13.0), (10, 15.0)] {
            e[i] = v.exp() / 4.0;
        }
        assert_close64(&grad(&x), &e, 1e-14);
    }

    #[test]
    fn max_pool2d_gradcheck() {
        for o in [opt(2, 2, 0, 1, false), opt(3, 1, 1, 1, false), opt(2, 1, 1, 2, false), opt(2, 2, 0, 1, true)] {
            gradcheck(|t| t[0].max_pool2d(o), &[distinct(&[1, 2, 5, 5])]).unwrap_or_else(|e| panic!("{o:?}: {e}"));
        }
    }

    /// A row-major scan of every 2x2 window (first maximum wins, the last NaN wins, as in
    /// PyTorch's kernel): the reference for the vectorised 2x2 kernel.
    fn reference_2x2(v: &[f64], planes: usize, h: usize, w: usize) -> (Vec<f64>, Vec<i64>) {
        let (ho, wo) = (h / 2, w / 2);
        let (mut vals, mut idx) = (vec![], vec![]);
        for q in 0..planes {
            for oh in 0..ho {
                for ow in 0..wo {
                    let mut best = (f64::NEG_INFINITY, -1i64);
                    for (dy, dx) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                        let flat = (2 * oh + dy) * w + 2 * ow + dx;
                        let val = v[q * h * w + flat];
                        if best.1 < 0 || val > best.0 || val.is_nan() {
                            best = (val, flat as i64);
                        }
                    }
                    vals.push(best.0);
                    idx.push(best.1);
                }
            }
        }
        (vals, idx)
    }

    /// PyTorch 2.15: `max_pool2d` of `[[0, nan], [1, nan]]` (2x2) is NaN with the gradient on
    /// the last NaN, `[0, 0, 0, 1]`; and a 3x1 window `[nan, 2, nan]` the same, through the
    /// general kernel.
    #[test]
    fn max_pool2d_sends_the_gradient_to_the_last_nan_as_pytorch() {
        let nan = f64::NAN;
        for (v, shape, o, want) in [
            (vec![0.0, nan, 1.0, nan], [1, 1, 2, 2], Pool2dConfig::new(2), vec![0.0, 0.0, 0.0, 1.0]),
            (vec![nan, 2.0, nan], [1, 1, 3, 1], opt_k((3, 1)), vec![0.0, 0.0, 1.0]),
        ] {
            let x = t64(&v, &shape).requires_grad_(true);
            let y = x.max_pool2d(o);
            assert!(y.to_vec_f64()[0].is_nan());
            y.sum().backward();
            assert_eq!(grad(&x), want);
        }
    }

    fn opt_k(k: (usize, usize)) -> Pool2dConfig {
        Pool2dConfig { kernel: k, stride: k, padding: (0, 0), dilation: (1, 1), ceil_mode: false }
    }

    #[test]
    fn max_pool2d_2x2_kernel_matches_a_scan() {
        // Widths 8..=13 give 4..=6 outputs per row: whole groups of four, an overlapping
        // last group, and an odd column that no window covers; odd heights drop a row.
        // Values from {0, 1, 2} make ties in most windows; NaNs go in some.
        for (h, w) in [(8, 8), (9, 11), (6, 13), (4, 10)] {
            let n = 3 * h * w;
            let mut v: Vec<f64> = (0..n).map(|i| ((i * 7 + i / 5) % 3) as f64).collect();
            for i in (0..n).step_by(17) {
                v[i] = f64::NAN;
            }
            let (ev, ei) = reference_2x2(&v, 3, h, w);
            for dtype in [DType::F64, DType::F32] {
                let x = t64(&v, &[3, h, w]).to_dtype(dtype).requires_grad_(true);
                let (y, i) = x.max_pool2d_with_indices(Pool2dConfig::new(2));
                assert_eq!(y.shape(), &[3, h / 2, w / 2]);
                let got = y.to_vec_f64();
                assert!(got.iter().zip(&ev).all(|(a, b)| a == b || a.is_nan() && b.is_nan()), "{h}x{w} {dtype:?}");
                assert_eq!(i.to_vec_i64(), ei, "{h}x{w} {dtype:?}");
                // Backward routes each gradient to the winner and zeros the rest, including
                // the uncovered row and column.
                let g: Vec<f64> = (0..ev.len()).map(|j| j as f64 + 1.0).collect();
                y.backward_with(&t64(&g, y.shape()).to_dtype(dtype), false);
                let mut e = vec![0.0; n];
                for (j, &t) in ei.iter().enumerate() {
                    let q = j / ((h / 2) * (w / 2));
                    e[q * h * w + t as usize] = g[j];
                }
                assert_eq!(grad(&x), e, "{h}x{w} {dtype:?}");
            }
        }
    }

    #[test]
    fn max_pool2d_2x2_kernel_gradcheck_and_strided_input() {
        gradcheck(|t| t[0].max_pool2d(Pool2dConfig::new(2)), &[distinct(&[2, 2, 6, 9])]).unwrap();
        // A transposed (non-contiguous) input pools like its contiguous copy.
        let x = distinct(&[2, 10, 8]).transpose(1, 2);
        assert_eq!(
            x.max_pool2d(Pool2dConfig::new(2)).to_vec_f64(),
            x.contiguous().max_pool2d(Pool2dConfig::new(2)).to_vec_f64()
        );
    }

    #[test]
    fn avg_pool2d_forward_with_and_without_padding_in_the_count() {
        let x = t64(&ramp(9), &[1, 1, 3, 3]);
        let o = opt(2, 2, 1, 1, false);
        let inc = x.avg_pool2d(o, true);
        assert_eq!((inc.shape(), inc.to_vec_f64()), (&[1, 1, 2, 2][..], vec![0.25, 1.25, 2.75, 7.0]));
        assert_eq!(x.avg_pool2d(o, false).to_vec_f64(), vec![1.0, 2.5, 5.5, 7.0]);
        let plain = t64(&(0..16).map(f64::from).collect::<Vec<_>>(), &[1, 1, 4, 4]);
        assert_eq!(plain.avg_pool2d(Pool2dConfig::new(2), true).to_vec_f64(), vec![2.5, 4.5, 10.5, 12.5]);
        let ov = plain.avg_pool2d(opt(3, 1, 0, 1, false), true);
        assert_eq!(ov.to_vec_f64(), vec![5.0, 6.0, 9.0, 10.0]);
    }

    #[test]
    fn avg_pool2d_ceil_mode() {
        let x = t64(&ramp(9), &[1, 1, 3, 3]);
        // Windows hanging over the edge average only what lies inside input + padding.
        for count_include_pad in [true, false] {
            let y = x.avg_pool2d(opt(2, 2, 0, 1, true), count_include_pad);
            assert_eq!((y.shape(), y.to_vec_f64()), (&[1, 1, 2, 2][..], vec![3.0, 4.5, 7.5, 9.0]));
        }
        // 4x4, k3 s2 p1, ceil: 3 windows per side starting at -1, 1, 3. The last spans
        // rows 3..5 of the padded extent (one real row, one padded row): with padding
        // counted it divides by 2 per axis, without by 1.
        let x = t64(&ramp(16), &[1, 1, 4, 4]);
        let y = x.avg_pool2d(opt(3, 2, 1, 1, true), true);
        assert_eq!(y.shape(), &[1, 1, 3, 3]);
        let e = [14.0 / 9.0, 30.0 / 9.0, 2.0, 57.0 / 9.0, 11.0, 6.0, 4.5, 7.5, 4.0];
        assert_close64(&y.to_vec_f64(), &e, 1e-15);
        let y = x.avg_pool2d(opt(3, 2, 1, 1, true), false);
        assert_close64(&y.to_vec_f64(), &[3.5, 5.0, 6.0, 9.5, 11.0, 12.0, 13.5, 15.0, 16.0], 1e-15);
    }

    #[test]
    fn avg_pool2d_backward() {
        let o = opt(2, 2, 1, 1, false);
        let x = leaf(&ramp(9), &[1, 1, 3, 3]);
        (x.avg_pool2d(o, true) * t64(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2])).sum().backward();
        assert_eq!(grad(&x), vec![0.25, 0.5, 0.5, 0.75, 1.0, 1.0, 0.75, 1.0, 1.0]);
        let x = leaf(&ramp(9), &[1, 1, 3, 3]);
        (x.avg_pool2d(o, false) * t64(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2])).sum().backward();
        assert_eq!(grad(&x), vec![1.0, 1.0, 1.0, 1.5, 1.0, 1.0, 1.5, 1.0, 1.0]);
    }

    #[test]
    fn avg_pool2d_gradcheck() {
        for o in [opt(2, 2, 0, 1, false), opt(3, 1, 1, 1, false), opt(2, 2, 1, 1, true), opt(3, 2, 1, 1, true)] {
            for inc in [true, false] {
                gradcheck(|t| t[0].avg_pool2d(o, inc), &[distinct(&[1, 2, 5, 4])])
                    .unwrap_or_else(|e| panic!("{o:?} {inc}: {e}"));
            }
        }
    }

    #[test]
    fn adaptive_avg_pool2d_forward() {
        // 5 -> 3: windows [0, 2), [1, 4), [3, 5) on both axes.
        let x = t64(&(0..25).map(f64::from).collect::<Vec<_>>(), &[1, 1, 5, 5]);
        let y = x.adaptive_avg_pool2d((3, 3));
        assert_eq!(y.shape(), &[1, 1, 3, 3]);
        assert_eq!(y.to_vec_f64(), vec![3.0, 4.5, 6.0, 10.5, 12.0, 13.5, 18.0, 19.5, 21.0]);
        assert_eq!(x.adaptive_avg_pool2d((1, 1)).to_vec_f64(), vec![12.0]);
        assert_eq!(x.adaptive_avg_pool2d((5, 5)).to_vec_f64(), x.to_vec_f64());
        // 5 -> (1, 2) and a 3-D input.
        let r = x.reshape(&[1, 5, 5]).adaptive_avg_pool2d((1, 2));
        assert_eq!((r.shape(), r.to_vec_f64()), (&[1, 1, 2][..], vec![11.0, 13.0]));
        // Upsampling 2 -> 3: windows [0, 1), [0, 2), [1, 2).
        let s = t64(&[1.0, 3.0], &[1, 1, 1, 2]).adaptive_avg_pool2d((1, 3));
        assert_eq!(s.to_vec_f64(), vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn adaptive_avg_pool2d_backward() {
        let x = leaf(&(0..25).map(f64::from).collect::<Vec<_>>(), &[1, 1, 5, 5]);
        x.adaptive_avg_pool2d((3, 3)).sum().backward();
        // Pixel (r, c) gets f(r) f(c), with f = sum over the windows holding it of 1/size.
        let f = [0.5, 0.5 + 1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0 + 0.5, 0.5];
        let e: Vec<f64> = (0..25).map(|i| f[i / 5] * f[i % 5]).collect();
        assert_close64(&grad(&x), &e, 1e-15);
    }

    #[test]
    fn adaptive_avg_pool2d_gradcheck() {
        for out in [(3, 3), (2, 3), (1, 1), (4, 6)] {
            gradcheck(|t| t[0].adaptive_avg_pool2d(out), &[distinct(&[2, 5, 4])]).unwrap();
        }
    }

    #[test]
    fn pooling_on_noncontiguous_inputs() {
        let x = distinct(&[2, 2, 5, 4]);
        check_noncontig(|t| t[0].max_pool2d(opt(2, 1, 1, 1, false)), std::slice::from_ref(&x));
        check_noncontig(|t| t[0].avg_pool2d(opt(3, 2, 1, 1, true), false), std::slice::from_ref(&x));
        check_noncontig(|t| t[0].adaptive_avg_pool2d((3, 3)), std::slice::from_ref(&x));
        let nhwc = x.permute(&[0, 2, 3, 1]).contiguous().permute(&[0, 3, 1, 2]);
        assert_eq!(nhwc.max_pool2d(Pool2dConfig::new(2)).to_vec_f64(), x.max_pool2d(Pool2dConfig::new(2)).to_vec_f64());
        let t = x.transpose(2, 3);
        assert_eq!(
            t.avg_pool2d(Pool2dConfig::new(2), true).to_vec_f64(),
            t.contiguous().avg_pool2d(Pool2dConfig::new(2), true).to_vec_f64()
        );
    }

    #[test]
    fn pooling_in_f32_and_on_meta() {
        let x = Tensor::arange(0.0, 16.0, 1.0).reshape(&[1, 1, 4, 4]);
        assert_eq!(x.max_pool2d(Pool2dConfig::new(2)).to_vec(), vec![5.0, 7.0, 13.0, 15.0]);
        assert_eq!(x.adaptive_avg_pool2d((2, 2)).to_vec(), vec![2.5, 4.5, 10.5, 12.5]);
        let m = Tensor::full_on(&[8, 3, 7, 7], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        assert_eq!(m.max_pool2d(opt(3, 2, 1, 1, true)).shape(), &[8, 3, 4, 4]);
        assert_eq!(m.max_pool2d_with_indices(Pool2dConfig::new(2)).1.dtype(), DType::I64);
        let a = m.avg_pool2d(opt(2, 2, 0, 1, false), true);
        assert_eq!((a.shape(), a.device()), (&[8, 3, 3, 3][..], Device::Meta));
        let ad = m.adaptive_avg_pool2d((5, 5));
        assert_eq!(ad.shape(), &[8, 3, 5, 5]);
        // Regression: max pooling on meta dropped the graph (the result did not require grad).
        let mp = m.max_pool2d(Pool2dConfig::new(2));
        assert!(mp.requires_grad());
        (a.sum() + ad.sum() + mp.sum()).backward();
        assert_eq!(m.grad().unwrap().shape(), &[8, 3, 7, 7]);
    }

    #[test]
    #[should_panic(expected = "max_pool2d: padding (2, 2) should be at most half of the kernel size (3, 3)")]
    fn pool_padding_larger_than_half_the_kernel_panics() {
        Tensor::zeros(&[1, 1, 5, 5]).max_pool2d(opt(3, 1, 2, 1, false));
    }

    #[test]
    #[should_panic(expected = "avg_pool2d: input of shape [1, 1, 2, 2] is smaller than the (dilated) window (3, 3)")]
    fn pool_window_larger_than_input_panics() {
        Tensor::zeros(&[1, 1, 2, 2]).avg_pool2d(Pool2dConfig::new(3), true);
    }

    #[test]
    #[should_panic(
        expected = "adaptive_avg_pool2d: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape [4, 4]"
    )]
    fn adaptive_pool_needs_3d_or_4d_input() {
        Tensor::zeros(&[4, 4]).adaptive_avg_pool2d((2, 2));
    }
}
