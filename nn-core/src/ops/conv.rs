//! 2-D (and, through it, 1-D) convolution: im2col + GEMM over blocks of samples.
//!
//! The batch is cut into one block per thread (or fewer, for small work); each block's
//! column matrix holds all its samples side by side, so one GEMM per group does the
//! block. Stride-1 convolutions (most of them) use a "wide" column layout ([`Cols`]) in
//! which each kernel tap's row is a single contiguous run of the padded input, which
//! turns im2col and col2im into a copy per tap. Scratch buffers come from the buffer pool.
//! Backward recomputes the columns rather than saving them (9x the input for a 3x3
//! kernel), as PyTorch does.

use std::sync::Arc;

use smallvec::smallvec;

use super::{check_float, check_same};
use crate::autograd::{op_result, Grads};
pub use crate::backend::Conv2dConfig;
use crate::backend::ConvGeometry as Geometry;
use crate::shape::Layout;
use crate::tensor::Tensor;

/// Output size of one spatial dim, or `None` when the kernel does not fit.
pub(crate) fn out_size(input: usize, kernel: usize, stride: usize, pad: usize, dilation: usize) -> Option<usize> {
    let eff = dilation * (kernel - 1) + 1;
    let padded = input + 2 * pad;
    (padded >= eff).then(|| (padded - eff) / stride + 1)
}

#[track_caller]
fn geometry(x: &Tensor, w: &Tensor, opt: Conv2dConfig) -> Geometry {
    const OP: &str = crate::names::CONV2D;
    if x.rank() != 4 {
        panic!("{OP}: expected a 4-D input [N, C, H, W] (or 3-D [C, H, W], unbatched), got shape {:?}", x.shape());
    }
    if w.rank() != 4 {
        panic!("{OP}: expected a 4-D weight [out_channels, in_channels / groups, kH, kW], got shape {:?}", w.shape());
    }
    let s = opt.stride;
    let d = opt.dilation;
    if opt.groups == 0 || s.0 == 0 || s.1 == 0 || d.0 == 0 || d.1 == 0 {
        panic!("{OP}: stride, dilation and groups must be positive, got {opt:?}");
    }
    let (n, c, h, wd) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let (o, ci, kh, kw) = (w.shape()[0], w.shape()[1], w.shape()[2], w.shape()[3]);
    if c % opt.groups != 0 || o % opt.groups != 0 {
        panic!("{OP}: in_channels {c} and out_channels {o} must both be divisible by groups {}", opt.groups);
    }
    if ci * opt.groups != c {
        panic!(
            "{OP}: input {:?} x weight {:?}: expected input with {} channels (weight in_channels {ci} x groups {}), got {c}",
            x.shape(),
            w.shape(),
            ci * opt.groups,
            opt.groups
        );
    }
    if kh == 0 || kw == 0 {
        panic!("{OP}: kernel size must be positive, got weight shape {:?}", w.shape());
    }
    let (Some(ho), Some(wo)) = (out_size(h, kh, s.0, opt.padding.0, d.0), out_size(wd, kw, s.1, opt.padding.1, d.1))
    else {
        panic!(
            "{OP}: input {:?} (padded by {:?}) is smaller than the dilated kernel {:?} (dilation {:?})",
            x.shape(),
            opt.padding,
            (kh, kw),
            d
        );
    };
    Geometry { n, c, h, w: wd, o, kh, kw, ho, wo, opt }
}

/// Runs a batched op on `x` as a batch of one and drops that dim again: PyTorch's unbatched
/// inputs to the convolutions (`[C, H, W]` for `conv2d`, `[C, L]` for `conv1d`).
pub(crate) fn unbatched(x: &Tensor, op: impl FnOnce(&Tensor) -> Tensor) -> Tensor {
    op(&x.unsqueeze(0)).squeeze_dim(0)
}

impl Tensor {
    /// 2-D convolution (cross-correlation, as PyTorch) of `self` (`[N, C, H, W]`, or
    /// `[C, H, W]` unbatched, giving `[O, Ho, Wo]`) with
    /// `weight` (`[O, C / groups, kH, kW]`) and optional `bias` (`[O]`). Output
    /// `[N, O, Ho, Wo]` with `Ho = (H + 2 pad - dilation (kH - 1) - 1) / stride + 1`.
    ///
    /// ```
    /// use nn_core::{ops::Conv2dConfig, Tensor};
    /// let x = Tensor::arange(0.0, 16.0, 1.0).reshape(&[1, 1, 4, 4]);
    /// let w = Tensor::ones(&[1, 1, 2, 2]);
    /// let y = x.conv2d(&w, None, Conv2dConfig { stride: (2, 2), ..Default::default() });
    /// assert_eq!(y.shape(), &[1, 1, 2, 2]);
    /// assert_eq!(y.to_vec(), vec![10.0, 18.0, 42.0, 50.0]);
    /// ```
    #[track_caller]
    pub fn conv2d(&self, weight: &Tensor, bias: Option<&Tensor>, options: Conv2dConfig) -> Tensor {
        if self.rank() == 3 && weight.rank() == 4 {
            return unbatched(self, |x| x.conv2d(weight, bias, options));
        }
        let again = |c: &[Option<&crate::Tensor>]| c[0].expect("present").conv2d(c[1].expect("present"), c[2], options);
        let attrs = || crate::autograd::trace::conv_attrs(&options);
        let _op = crate::autograd::entry::op_entry!(crate::names::CONV2D, [self, weight]; [bias], attrs = attrs, again = again);
        const OP: &str = crate::names::CONV2D;
        let mut operands = vec![self, weight];
        operands.extend(bias);
        check_same(OP, &operands);
        check_float(OP, self);
        let geo = geometry(self, weight, options);
        if let Some(b) = bias {
            if b.shape() != [geo.o] {
                panic!("{OP}: bias of shape {:?} for {} output channels (expected [{}])", b.shape(), geo.o, geo.o);
            }
        }
        let shape = [geo.n, geo.o, geo.ho, geo.wo];
        crate::shape::numel_of(OP, &shape);
        let x = self.contiguous();
        let w = weight.contiguous();
        let sb = bias.map(|b| b.contiguous().storage_arc());
        let storage = x.storage_arc().conv2d(&w.storage_arc(), sb.as_deref(), &geo);
        op_result(OP, Arc::new(storage), Layout::contiguous(&shape), &operands, || {
            let (x, w) = (x.saved_for_backward(), w.saved_for_backward());
            move |g: &Tensor, needs: &[bool]| -> Grads {
                let g = g.contiguous();
                let need_dx = needs[0];
                let need_dw = needs[1];
                let need_db = needs.get(2).copied().unwrap_or(false);
                let (dx, dw) =
                    g.storage_arc().conv2d_backward(&x.storage_arc(), &w.storage_arc(), &geo, (need_dx, need_dw));
                // The backend returns an empty buffer for a gradient that is not needed
                // (the input is data, say): only the gradients asked for become tensors.
                let (dx, dw) = (
                    need_dx.then(|| Tensor::from_storage(dx, x.shape())),
                    need_dw.then(|| Tensor::from_storage(dw, w.shape())),
                );
                let mut out: Grads = smallvec![dx, dw];
                if needs.len() > 2 {
                    out.push(need_db.then(|| g.sum_dims(&[0usize, 2, 3], false)));
                }
                out
            }
        })
    }

    /// 1-D convolution of `self` (`[N, C, L]`, or `[C, L]` unbatched) with `weight` (`[O, C / groups, k]`),
    /// computed as a 2-D convolution of height 1.
    #[track_caller]
    pub fn conv1d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        stride: usize,
        padding: usize,
        dilation: usize,
        groups: usize,
    ) -> Tensor {
        let conv1d = |x: &Tensor, w: &Tensor, b: Option<&Tensor>| x.conv1d(w, b, stride, padding, dilation, groups);
        if self.rank() == 2 && weight.rank() == 3 {
            return unbatched(self, |x| conv1d(x, weight, bias));
        }
        let _op = crate::autograd::entry::op_entry!(untraced crate::names::CONV1D, [Some(self), Some(weight), bias],
            again = |c| conv1d(c[0].expect("present"), c[1].expect("present"), c[2]));
        if self.rank() != 3 || weight.rank() != 3 {
            panic!(
                "conv1d: expected a 3-D input [N, C, L] (or 2-D [C, L], unbatched) and a 3-D weight [O, C / groups, k], got shapes {:?} and {:?}",
                self.shape(),
                weight.shape()
            );
        }
        let opt = Conv2dConfig { stride: (1, stride), padding: (0, padding), dilation: (1, dilation), groups };
        self.unsqueeze(2).conv2d(&weight.unsqueeze(2), bias, opt).squeeze_dim(2)
    }
}

#[cfg(test)]
mod tests {
    use super::Conv2dConfig;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64, transposed_storage};
    use crate::testing::{gradcheck, gradcheck_with, GradcheckConfig};
    use crate::{DType, Device, Tensor};

    fn opts(stride: usize, padding: usize, dilation: usize, groups: usize) -> Conv2dConfig {
        Conv2dConfig { stride: (stride, stride), padding: (padding, padding), dilation: (dilation, dilation), groups }
    }

    /// A deterministic, varied input of `shape`.
    fn vals(shape: &[usize], seed: u64) -> Tensor {
        let n: usize = shape.iter().product();
        let v = (0..n as u64).map(|i| ((i * 7919 + seed * 104729) % 23) as f64 / 11.0 - 1.0).collect();
        Tensor::from_vec_f64(v, shape)
    }

    /// Stride 1 computes extra ("dropped") columns; an infinite input there must not
    /// reach the gradients PyTorch gives: the tap that never meets it gets 0, not NaN, and
    /// an infinite weight leaves the inputs it does not meet finite.
    #[test]
    fn dropped_columns_add_nothing_to_the_gradients() {
        let mut xv = vec![0.0f32; 9];
        xv[2] = f32::INFINITY;
        let x = Tensor::from_vec(xv, &[1, 1, 3, 3]).requires_grad_(true);
        let w = Tensor::ones(&[1, 1, 2, 2]).requires_grad_(true);
        x.conv2d(&w, None, opts(1, 0, 1, 1)).sum().backward();
        let dw = w.grad().unwrap().to_vec();
        assert_eq!(dw[0], 0.0, "{dw:?}");
        assert_eq!(dw[1], f32::INFINITY, "{dw:?}");
        let x = Tensor::ones(&[1, 1, 3, 3]).requires_grad_(true);
        let mut wv = vec![1.0f32; 4];
        wv[0] = f32::INFINITY;
        let w = Tensor::from_vec(wv, &[1, 1, 2, 2]).requires_grad_(true);
        x.conv2d(&w, None, opts(1, 0, 1, 1)).sum().backward();
        let dx = x.grad().unwrap().to_vec();
        // Tap (0, 0) meets inputs (0..2, 0..2) only: the last row and column meet finite
        // taps alone and stay finite.
        for (i, v) in dx.iter().enumerate() {
            let (r, c) = (i / 3, i % 3);
            assert_eq!(v.is_finite(), r == 2 || c == 2, "dx[{r}][{c}] = {v}");
        }
    }

    /// `bf16` convolutions (their own GEMM on an AVX512-BF16 CPU, `f32` copies elsewhere):
    /// forward and both gradients within one `bf16` rounding of the `f32` convolution of
    /// the same `bf16` values rounded once (the products are exact in `f32`; only the order
    /// of the sums differs), over the plain and padded ("wide") layouts, groups, stride and
    /// dilation, and batches split over blocks.
    #[test]
    fn bf16_convolutions_match_f32_rounded_once() {
        for (n, c, o, hw, opt) in
            [(3, 4, 6, 9, opts(1, 1, 1, 1)), (2, 4, 6, 10, opts(2, 0, 1, 2)), (17, 3, 5, 7, opts(1, 0, 2, 1))]
        {
            let x = vals(&[n, c, hw, hw], 1).to_dtype(DType::BF16).requires_grad_(true);
            let w = vals(&[o, c / opt.groups, 3, 3], 2).to_dtype(DType::BF16).requires_grad_(true);
            let b = vals(&[o], 3).to_dtype(DType::BF16).requires_grad_(true);
            let y = x.conv2d(&w, Some(&b), opt);
            assert_eq!(y.dtype(), DType::BF16);
            let g = vals(y.shape(), 4).to_dtype(DType::BF16);
            y.backward_with(&g, false);
            let f32_of = |t: &Tensor| t.detach().to_dtype(DType::F32).requires_grad_(true);
            let (x32, w32, b32) = (f32_of(&x), f32_of(&w), f32_of(&b));
            let y32 = x32.conv2d(&w32, Some(&b32), opt);
            y32.backward_with(&g.to_dtype(DType::F32), false);
            let close = |got: &Tensor, want: &Tensor, what: &str| {
                let want = want.to_dtype(DType::BF16).to_vec();
                for (i, (a, e)) in got.to_vec().iter().zip(&want).enumerate() {
                    // One bf16 step apart at most (8 bits of precision).
                    assert!((a - e).abs() <= e.abs() / 128.0 + 1e-6, "{what} [{n}, {c}, {hw}] at {i}: {a} against {e}");
                }
            };
            close(&y, &y32, "output");
            close(&x.grad().unwrap(), &x32.grad().unwrap(), "input gradient");
            close(&w.grad().unwrap(), &w32.grad().unwrap(), "weight gradient");
            close(&b.grad().unwrap(), &b32.grad().unwrap(), "bias gradient");
        }
    }

    /// Direct-loop convolution, for reference.
    fn naive(x: &Tensor, w: &Tensor, b: Option<&Tensor>, o: Conv2dConfig) -> (Vec<usize>, Vec<f64>) {
        let (xs, ws) = (x.shape(), w.shape());
        let (n, c, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
        let (oc, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
        let og = oc / o.groups;
        let ho = (h + 2 * o.padding.0 - o.dilation.0 * (kh - 1) - 1) / o.stride.0 + 1;
        let wo = (wd + 2 * o.padding.1 - o.dilation.1 * (kw - 1) - 1) / o.stride.1 + 1;
        let (xv, wv) = (x.to_vec_f64(), w.to_vec_f64());
        let bv = b.map(|b| b.to_vec_f64());
        let mut out = vec![0.0; n * oc * ho * wo];
        for s in 0..n {
            for f in 0..oc {
                let g = f / og;
                for i in 0..ho {
                    for j in 0..wo {
                        let mut acc = bv.as_ref().map_or(0.0, |b| b[f]);
                        for ci in 0..cg {
                            let ch = g * cg + ci;
                            for a in 0..kh {
                                for bb in 0..kw {
                                    let y = (i * o.stride.0 + a * o.dilation.0) as isize - o.padding.0 as isize;
                                    let z = (j * o.stride.1 + bb * o.dilation.1) as isize - o.padding.1 as isize;
                                    if y < 0 || z < 0 || y >= h as isize || z >= wd as isize {
                                        continue;
                                    }
                                    acc += xv[((s * c + ch) * h + y as usize) * wd + z as usize]
                                        * wv[((f * cg + ci) * kh + a) * kw + bb];
                                }
                            }
                        }
                        out[((s * oc + f) * ho + i) * wo + j] = acc;
                    }
                }
            }
        }
        (vec![n, oc, ho, wo], out)
    }

    /// `[[0, 1, 2], [3, 4, 5], [6, 7, 8]]` as `[1, 1, 3, 3]`.
    fn x9() -> Tensor {
        leaf(&(0..9).map(f64::from).collect::<Vec<_>>(), &[1, 1, 3, 3])
    }

    /// `[[1, 2], [3, 4]]` as `[1, 1, 2, 2]`.
    fn w4() -> Tensor {
        leaf(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2])
    }

    #[test]
    fn conv2d_forward_basic_and_bias() {
        let y = x9().conv2d(&w4(), None, Conv2dConfig::default());
        // y[i][j] = x[i][j] + 2 x[i][j+1] + 3 x[i+1][j] + 4 x[i+1][j+1]
        assert_eq!((y.shape(), y.to_vec_f64()), (&[1, 1, 2, 2][..], vec![27.0, 37.0, 57.0, 67.0]));
        let b = t64(&[0.5], &[1]);
        assert_eq!(x9().conv2d(&w4(), Some(&b), Conv2dConfig::default()).to_vec_f64(), vec![27.5, 37.5, 57.5, 67.5]);
        let y32 = x9().to_dtype(DType::F32).conv2d(&w4().to_dtype(DType::F32), None, Conv2dConfig::default());
        assert_eq!(y32.to_vec(), vec![27.0, 37.0, 57.0, 67.0]);
    }

    #[test]
    fn conv2d_forward_stride_padding_dilation() {
        let y = x9().conv2d(&w4(), None, opts(2, 1, 1, 1));
        assert_eq!((y.shape(), y.to_vec_f64()), (&[1, 1, 2, 2][..], vec![0.0, 11.0, 30.0, 67.0]));
        let d = x9().conv2d(&w4(), None, opts(1, 0, 2, 1));
        assert_eq!((d.shape(), d.to_vec_f64()), (&[1, 1, 1, 1][..], vec![54.0]));
        // Asymmetric options: stride (1, 2), padding (0, 1).
        let o = Conv2dConfig { stride: (1, 2), padding: (0, 1), ..Default::default() };
        let a = x9().conv2d(&w4(), None, o);
        assert_eq!(a.shape(), &[1, 1, 2, 2]);
        assert_eq!(a.to_vec_f64(), naive(&x9(), &w4(), None, o).1);
    }

    #[test]
    fn conv2d_forward_channels_and_groups() {
        let x = leaf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[1, 2, 2, 2]);
        let grouped = x.conv2d(&t64(&[2.0, -1.0], &[2, 1, 1, 1]), None, opts(1, 0, 1, 2));
        assert_eq!(grouped.to_vec_f64(), vec![2.0, 4.0, 6.0, 8.0, -5.0, -6.0, -7.0, -8.0]);
        let summed = x.conv2d(&Tensor::ones(&[1, 2, 2, 2]).to_dtype(DType::F64), None, Conv2dConfig::default());
        assert_eq!(summed.to_vec_f64(), vec![36.0]);
    }

    #[test]
    fn conv2d_matches_a_naive_reference() {
        for (xs, ws, o, bias) in [
            ([2, 3, 5, 6], [4, 3, 3, 2], opts(1, 0, 1, 1), true),
            ([2, 4, 7, 7], [6, 2, 3, 3], opts(2, 1, 1, 2), true),
            ([1, 4, 8, 6], [4, 1, 2, 3], opts(1, 2, 2, 4), false),
            ([3, 2, 4, 4], [2, 2, 1, 1], opts(3, 0, 1, 1), true),
        ] {
            let (x, w) = (vals(&xs, 1), vals(&ws, 2));
            let b = vals(&[ws[0]], 3);
            let b = bias.then_some(&b);
            let (shape, expected) = naive(&x, &w, b, o);
            let y = x.conv2d(&w, b, o);
            assert_eq!(y.shape(), shape.as_slice());
            assert_close64(&y.to_vec_f64(), &expected, 1e-12);
        }
    }

    #[test]
    fn conv2d_backward() {
        let (x, w) = (x9(), w4());
        let b = leaf(&[0.5], &[1]);
        let y = x.conv2d(&w, Some(&b), Conv2dConfig::default());
        (y * t64(&[1.0, -1.0, 2.0, 0.5], &[1, 1, 2, 2])).sum().backward();
        // Each input pixel collects weight taps times the output weights it feeds.
        assert_eq!(grad(&x), vec![1.0, 1.0, -2.0, 5.0, 5.5, -3.0, 6.0, 9.5, 2.0]);
        assert_eq!(grad(&w), vec![7.0, 9.5, 14.5, 17.0]);
        assert_eq!(grad(&b), vec![2.5]);
        // Through exp().mean() with stride 2 and padding 1: tap (1, 1) of the kernel sees
        // pixels (0, 0), (0, 2), (2, 0), (2, 2) of the input, so
        // dL/dw[1][1] = sum_k exp(y_k) / 4 * x[pixel_k].
        let (x, w) = (leaf(&vals(&[1, 1, 3, 3], 4).to_vec_f64(), &[1, 1, 3, 3]), w4());
        let y = x.conv2d(&w, None, opts(2, 1, 1, 1));
        let (yv, xv) = (y.to_vec_f64(), x.to_vec_f64());
        y.exp().mean().backward();
        let expected: f64 = [0, 2, 6, 8].iter().zip(&yv).map(|(&p, y)| y.exp() / 4.0 * xv[p]).sum();
        assert_close64(&grad(&w)[3..], &[expected], 1e-12);
    }

    #[test]
    fn conv2d_backward_when_only_some_operands_require_grad() {
        // A gradient that is not needed must not come back as an empty buffer wrapped in a
        // full-shape tensor, which would panic (data inputs never require grad).
        let x = vals(&[2, 1, 3, 3], 1);
        let w = w4();
        let b = leaf(&[0.5], &[1]);
        x.conv2d(&w, Some(&b), Conv2dConfig::default()).sum().backward();
        assert!(w.grad().is_some() && b.grad().is_some());
        assert_eq!(grad(&b), vec![8.0]);
        let xl = x9();
        xl.conv2d(&t64(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]), None, Conv2dConfig::default()).sum().backward();
        assert_eq!(grad(&xl), vec![1.0, 3.0, 2.0, 4.0, 10.0, 6.0, 3.0, 7.0, 4.0]);
        let bl = leaf(&[0.0], &[1]);
        x.conv2d(&t64(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]), Some(&bl), Conv2dConfig::default()).sum().backward();
        assert_eq!(grad(&bl), vec![8.0]);
    }

    #[test]
    fn conv2d_gradcheck() {
        let cases = [
            ([1, 2, 4, 4], [2, 2, 2, 2], opts(1, 0, 1, 1)),
            ([2, 1, 4, 4], [1, 1, 2, 2], opts(2, 1, 1, 1)),
            ([1, 1, 5, 5], [1, 1, 2, 2], opts(1, 1, 2, 1)),
            ([1, 2, 3, 3], [4, 1, 2, 2], opts(1, 1, 1, 2)),
        ];
        for (i, (xs, ws, o)) in cases.into_iter().enumerate() {
            let b = vals(&[ws[0]], 3);
            gradcheck(|t| t[0].conv2d(&t[1], Some(&t[2]), o), &[vals(&xs, 1), vals(&ws, 2), b])
                .unwrap_or_else(|e| panic!("case {i}: {e}"));
        }
    }

    #[test]
    fn conv2d_gradcheck_uneven_options() {
        // Stride 1 (the wide column layout) with padding on one axis only, a dilated
        // non-square kernel, groups and several samples in one block; then stride (1, 2),
        // which takes the exact layout.
        for stride in [(1, 1), (1, 2)] {
            let o = Conv2dConfig { stride, padding: (0, 2), dilation: (2, 1), groups: 2 };
            let b = vals(&[4], 3);
            gradcheck(|t| t[0].conv2d(&t[1], Some(&t[2]), o), &[vals(&[3, 4, 6, 5], 1), vals(&[4, 2, 2, 3], 2), b])
                .unwrap_or_else(|e| panic!("stride {stride:?}: {e}"));
        }
    }

    #[test]
    fn conv2d_batch_blocks_match_per_sample_results() {
        // Big enough to be split into blocks over threads: every output and gradient
        // must equal those of each sample convolved alone.
        let o = opts(1, 1, 1, 1);
        let (x, w) = (vals(&[8, 4, 24, 24], 1).requires_grad_(true), vals(&[8, 4, 3, 3], 2).requires_grad_(true));
        let gy = vals(&[8, 8, 24, 24], 3);
        let y = x.conv2d(&w, None, o);
        y.backward_with(&gy, false);
        let (dx, dw) = (grad(&x), grad(&w));
        let mut dw_sum = vec![0.0; dw.len()];
        for n in 0..8 {
            let xn = x.detach().narrow(0, n, 1).requires_grad_(true);
            let wn = w.detach().requires_grad_(true);
            let yn = xn.conv2d(&wn, None, o);
            assert_close64(&yn.to_vec_f64(), &y.narrow(0, n, 1).to_vec_f64(), 1e-12);
            yn.backward_with(&gy.narrow(0, n, 1).contiguous(), false);
            assert_close64(&grad(&xn), &dx[n * 4 * 576..(n + 1) * 4 * 576], 1e-12);
            dw_sum.iter_mut().zip(grad(&wn)).for_each(|(a, b)| *a += b);
        }
        assert_close64(&dw, &dw_sum, 1e-10);
    }

    #[test]
    fn conv1d_forward_backward_gradcheck() {
        let x = leaf(&[1.0, 2.0, 3.0, 4.0, 5.0], &[1, 1, 5]);
        let w = leaf(&[1.0, 0.0, -1.0], &[1, 1, 3]);
        let y = x.conv1d(&w, None, 1, 0, 1, 1);
        assert_eq!((y.shape(), y.to_vec_f64()), (&[1, 1, 3][..], vec![-2.0, -2.0, -2.0]));
        assert_eq!(x.conv1d(&w, None, 2, 1, 1, 1).to_vec_f64(), vec![-2.0, -2.0, 4.0]);
        assert_eq!(x.conv1d(&w, None, 1, 0, 2, 1).to_vec_f64(), vec![-4.0]);
        let b = t64(&[10.0], &[1]);
        assert_eq!(x.conv1d(&w, Some(&b), 1, 0, 1, 1).to_vec_f64(), vec![8.0, 8.0, 8.0]);
        (y * t64(&[1.0, 2.0, 3.0], &[1, 1, 3])).sum().backward();
        assert_eq!(grad(&x), vec![1.0, 2.0, 2.0, -2.0, -3.0]);
        assert_eq!(grad(&w), vec![14.0, 20.0, 26.0]);
        // Groups: two channels, each with its own 2-tap filter.
        let xg = t64(&[1.0, 2.0, 3.0, 10.0, 20.0, 30.0], &[1, 2, 3]);
        let wg = t64(&[1.0, 1.0, 1.0, -1.0], &[2, 1, 2]);
        assert_eq!(xg.conv1d(&wg, None, 1, 0, 1, 2).to_vec_f64(), vec![3.0, 5.0, -10.0, -10.0]);
        gradcheck(
            |t| t[0].conv1d(&t[1], Some(&t[2]), 2, 1, 1, 1),
            &[vals(&[2, 2, 5], 1), vals(&[3, 2, 2], 2), vals(&[3], 3)],
        )
        .unwrap();
        gradcheck(|t| t[0].conv1d(&t[1], None, 1, 2, 2, 2).tanh(), &[vals(&[1, 2, 6], 4), vals(&[2, 1, 3], 5)])
            .unwrap();
    }

    #[test]
    fn conv2d_on_noncontiguous_inputs() {
        let (x, w, b) = (vals(&[2, 2, 4, 3], 1), vals(&[3, 2, 2, 2], 2), vals(&[3], 3));
        let o = opts(1, 1, 1, 1);
        check_noncontig(|t| t[0].conv2d(&t[1], Some(&t[2]), o), &[x.clone(), w.clone(), b.clone()]);
        // Channels-last storage (NHWC permuted to NCHW) and a transposed kernel.
        let nhwc = x.permute(&[0, 2, 3, 1]).contiguous().permute(&[0, 3, 1, 2]);
        assert!(!nhwc.is_contiguous());
        let wt = transposed_storage(&w);
        assert_eq!(nhwc.conv2d(&wt, Some(&b), o).to_vec_f64(), x.conv2d(&w, Some(&b), o).to_vec_f64());
        // Gradients flow back to the strided leaves with their own shapes.
        let nl = nhwc.requires_grad_(true);
        nl.conv2d(&w, None, o).sum().backward();
        let xl = x.requires_grad_(true);
        xl.conv2d(&w, None, o).sum().backward();
        assert_eq!(grad(&nl), grad(&xl));
    }

    #[test]
    fn conv2d_on_meta_gives_shapes() {
        let x = Tensor::full_on(&[8, 3, 32, 32], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        let w = Tensor::full_on(&[16, 3, 3, 3], 0.0, DType::F32, Device::Meta);
        let y = x.conv2d(&w, None, opts(2, 1, 1, 1));
        assert_eq!((y.shape(), y.device()), (&[8, 16, 16, 16][..], Device::Meta));
        y.sum().backward();
        assert_eq!((x.grad().unwrap().shape(), x.grad().unwrap().device()), (&[8, 3, 32, 32][..], Device::Meta));
        let x1 = Tensor::full_on(&[2, 4, 10], 0.0, DType::F32, Device::Meta);
        let w1 = Tensor::full_on(&[6, 2, 3], 0.0, DType::F32, Device::Meta);
        assert_eq!(x1.conv1d(&w1, None, 1, 1, 1, 2).shape(), &[2, 6, 10]);
    }

    #[test]
    fn conv2d_gradcheck_with_a_looser_step_on_f64_works_for_deep_chains() {
        // Two stacked convolutions: gradients compose through both.
        let o = GradcheckConfig { eps: 1e-5, ..Default::default() };
        gradcheck_with(
            |t| t[0].conv2d(&t[1], None, opts(1, 1, 1, 1)).tanh().conv2d(&t[2], None, opts(2, 0, 1, 1)),
            &[vals(&[1, 1, 4, 4], 1), vals(&[2, 1, 3, 3], 2), vals(&[1, 2, 2, 2], 3)],
            o,
        )
        .unwrap();
    }

    #[test]
    #[should_panic(
        expected = "conv2d: input [1, 3, 4, 4] x weight [2, 2, 3, 3]: expected input with 2 channels (weight in_channels 2 x groups 1), got 3"
    )]
    fn conv2d_channel_mismatch_names_both_shapes() {
        Tensor::zeros(&[1, 3, 4, 4]).conv2d(&Tensor::zeros(&[2, 2, 3, 3]), None, Conv2dConfig::default());
    }

    #[test]
    #[should_panic(expected = "conv2d: in_channels 3 and out_channels 4 must both be divisible by groups 2")]
    fn conv2d_groups_must_divide_channels() {
        Tensor::zeros(&[1, 3, 4, 4]).conv2d(&Tensor::zeros(&[4, 1, 1, 1]), None, opts(1, 0, 1, 2));
    }

    #[test]
    #[should_panic(expected = "conv2d: bias of shape [3] for 2 output channels (expected [2])")]
    fn conv2d_bias_shape_mismatch() {
        Tensor::zeros(&[1, 1, 4, 4]).conv2d(
            &Tensor::zeros(&[2, 1, 3, 3]),
            Some(&Tensor::zeros(&[3])),
            Conv2dConfig::default(),
        );
    }

    #[test]
    #[should_panic(
        expected = "conv2d: input [1, 1, 2, 2] (padded by (0, 0)) is smaller than the dilated kernel (3, 3)"
    )]
    fn conv2d_kernel_larger_than_input() {
        Tensor::zeros(&[1, 1, 2, 2]).conv2d(&Tensor::zeros(&[1, 1, 3, 3]), None, Conv2dConfig::default());
    }

    #[test]
    #[should_panic(
        expected = "conv2d: expected a 4-D input [N, C, H, W] (or 3-D [C, H, W], unbatched), got shape [4, 4]"
    )]
    fn conv2d_needs_a_3d_or_4d_input() {
        Tensor::zeros(&[4, 4]).conv2d(&Tensor::zeros(&[1, 3, 3, 3]), None, Conv2dConfig::default());
    }

    #[test]
    #[should_panic(
        expected = "conv1d: expected a 3-D input [N, C, L] (or 2-D [C, L], unbatched) and a 3-D weight [O, C / groups, k], got shapes [5] and [1, 4, 3]"
    )]
    fn conv1d_needs_a_2d_or_3d_input() {
        Tensor::zeros(&[5]).conv1d(&Tensor::zeros(&[1, 4, 3]), None, 1, 0, 1, 1);
    }

    /// PyTorch's unbatched inputs: `[C, H, W]` and `[C, L]` convolve as a batch of one,
    /// values and gradients alike, and come back without the batch dim.
    #[test]
    fn unbatched_inputs_convolve_as_a_batch_of_one() {
        let w = leaf(&(0..24).map(|i| i as f64 / 10.0 - 1.0).collect::<Vec<_>>(), &[2, 3, 2, 2]);
        let b = leaf(&[0.5, -0.5], &[2]);
        let x = vals(&[3, 4, 5], 1).requires_grad_(true);
        let y = x.conv2d(&w, Some(&b), opts(1, 1, 1, 1));
        assert_eq!(y.shape(), &[2, 5, 6]);
        let batched = x.detach().unsqueeze(0).conv2d(&w.detach(), Some(&b.detach()), opts(1, 1, 1, 1));
        assert_eq!(y.to_vec_f64(), batched.to_vec_f64());
        y.sum().backward();
        assert_eq!(x.grad().unwrap().shape(), &[3, 4, 5]);
        let x1 = vals(&[3, 7], 2);
        let w1 = vals(&[4, 3, 3], 3);
        let y1 = x1.conv1d(&w1, None, 2, 1, 1, 1);
        assert_eq!(y1.shape(), &[4, 4]);
        assert_eq!(y1.to_vec_f64(), x1.unsqueeze(0).conv1d(&w1, None, 2, 1, 1, 1).squeeze_dim(0).to_vec_f64());
        gradcheck(|t| t[0].conv2d(&t[1], None, opts(1, 0, 1, 1)), &[vals(&[2, 3, 3], 4), vals(&[1, 2, 2, 2], 5)])
            .unwrap();
    }
}
