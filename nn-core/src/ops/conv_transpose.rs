//! Transposed 2-D (and, through it, 1-D) convolution: the input gradient of `conv2d`.
//!
//! A transposed convolution of `x` (`[N, C_in, H, W]`) with `w` (`[C_in, C_out / groups,
//! kH, kW]`) is the gradient, with respect to its input, of the convolution that maps a
//! `[N, C_out, H_out, W_out]` tensor to one shaped like `x` with the same weight, stride,
//! padding, dilation and groups. So the forward is the convolution backend's input-gradient
//! kernel, and the backward reuses the other two kernels: the input gradient is that
//! convolution itself (of the output gradient), the weight gradient is its weight-gradient
//! kernel with `x` as the "output gradient". Every kernel has a GPU arm.

use std::sync::Arc;

use smallvec::smallvec;

use super::{check_float, check_same};
use crate::autograd::{op_result, Grads};
use crate::backend::{Conv2dConfig, ConvGeometry as Geometry};
use crate::shape::Layout;
use crate::tensor::Tensor;

/// Stride, zero padding, output padding, dilation and groups of a transposed 2-D
/// convolution (PyTorch's defaults: 1, 0, 0, 1, 1), each `(height, width)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTranspose2dConfig {
    /// Step between the output positions an input position scatters to.
    pub stride: (usize, usize),
    /// `dilation * (kernel - 1) - padding` zeros are added on both sides of the input of
    /// the equivalent convolution: `padding` trims the output by this much on each side.
    pub padding: (usize, usize),
    /// Extra size added to one side (bottom, right) of the output; must be smaller than
    /// the stride or the dilation. Resolves which of several output sizes is meant.
    pub output_padding: (usize, usize),
    /// Spacing between kernel taps.
    pub dilation: (usize, usize),
    /// Channel groups; input and output channels must both divide by it.
    pub groups: usize,
}

impl Default for ConvTranspose2dConfig {
    fn default() -> Self {
        ConvTranspose2dConfig { stride: (1, 1), padding: (0, 0), output_padding: (0, 0), dilation: (1, 1), groups: 1 }
    }
}

/// The options of [`Tensor::conv_transpose1d`]: [`ConvTranspose2dConfig`]'s, for one axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTranspose1dConfig {
    /// Step between the output positions an input position scatters to.
    pub stride: usize,
    /// Output trimmed on each side.
    pub padding: usize,
    /// Extra size added to the end of the output.
    pub output_padding: usize,
    /// Spacing between kernel taps.
    pub dilation: usize,
    /// Channel groups.
    pub groups: usize,
}

impl Default for ConvTranspose1dConfig {
    fn default() -> Self {
        ConvTranspose1dConfig { stride: 1, padding: 0, output_padding: 0, dilation: 1, groups: 1 }
    }
}

/// The output size of one axis, `(input - 1) stride - 2 padding + dilation (kernel - 1) +
/// output_padding + 1`, or `None` when that is not positive.
pub(crate) fn transposed_size(
    input: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    output_padding: usize,
    dilation: usize,
) -> Option<usize> {
    let full = (input.checked_sub(1)? * stride + dilation * (kernel - 1) + output_padding + 1) as isize;
    let out = full - 2 * padding as isize;
    (out > 0).then_some(out as usize)
}

/// The geometry of the convolution whose input gradient is this transposed convolution:
/// its input is the transposed output (`[n, c_out, h_out, w_out]`), its output is `x`.
#[track_caller]
fn geometry(x: &Tensor, w: &Tensor, opt: ConvTranspose2dConfig) -> Geometry {
    const OP: &str = crate::names::CONV_TRANSPOSE2D;
    if x.rank() != 4 {
        panic!(
            "{OP}: expected a 4-D input [N, C_in, H, W] (or 3-D [C_in, H, W], unbatched), got shape {:?}",
            x.shape()
        );
    }
    if w.rank() != 4 {
        panic!("{OP}: expected a 4-D weight [C_in, C_out / groups, kH, kW], got shape {:?}", w.shape());
    }
    let (s, d, op, p) = (opt.stride, opt.dilation, opt.output_padding, opt.padding);
    if opt.groups == 0 || s.0 == 0 || s.1 == 0 || d.0 == 0 || d.1 == 0 {
        panic!("{OP}: stride, dilation and groups must be positive, got {opt:?}");
    }
    let (n, c_in, h, wd) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let (wc, og, kh, kw) = (w.shape()[0], w.shape()[1], w.shape()[2], w.shape()[3]);
    if wc != c_in {
        panic!(
            "{OP}: input {:?} x weight {:?}: the weight's first dim must be the input's {c_in} channels, got {wc}",
            x.shape(),
            w.shape()
        );
    }
    if c_in % opt.groups != 0 {
        panic!("{OP}: in_channels {c_in} must be divisible by groups {}", opt.groups);
    }
    if kh == 0 || kw == 0 || og == 0 {
        panic!("{OP}: kernel size and output channels must be positive, got weight shape {:?}", w.shape());
    }
    if (op.0 >= s.0 && op.0 >= d.0) || (op.1 >= s.1 && op.1 >= d.1) {
        panic!("{OP}: output_padding {op:?} must be smaller than either the stride {s:?} or the dilation {d:?}");
    }
    let (Some(ho), Some(wo)) =
        (transposed_size(h, kh, s.0, p.0, op.0, d.0), transposed_size(wd, kw, s.1, p.1, op.1, d.1))
    else {
        panic!(
            "{OP}: input {:?} with kernel {:?}, stride {s:?}, padding {p:?}, output_padding {op:?}, dilation {d:?} \
             gives an empty output",
            x.shape(),
            (kh, kw)
        );
    };
    let conv = Conv2dConfig { stride: s, padding: p, dilation: d, groups: opt.groups };
    Geometry { n, c: og * opt.groups, h: ho, w: wo, o: c_in, kh, kw, ho: h, wo: wd, opt: conv }
}

impl Tensor {
    /// Transposed 2-D convolution (PyTorch's `conv_transpose2d`, also called
    /// "deconvolution") of `self` (`[N, C_in, H, W]`, or `[C_in, H, W]` unbatched) with `weight` (`[C_in, C_out / groups,
    /// kH, kW]`) and optional `bias` (`[C_out]`): each input pixel scatters its kernel-weighted
    /// values to the output. Output `[N, C_out, H_out, W_out]` with
    /// `H_out = (H - 1) stride - 2 padding + dilation (kH - 1) + output_padding + 1`.
    ///
    /// It is the input gradient of [`conv2d`](Tensor::conv2d) with the same weight and
    /// options, so it undoes a strided convolution's change of size.
    ///
    /// ```
    /// use nn_core::{ops::ConvTranspose2dConfig, Tensor};
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]);
    /// let w = Tensor::ones(&[1, 1, 2, 2]);
    /// let y = x.conv_transpose2d(&w, None, ConvTranspose2dConfig { stride: (2, 2), ..Default::default() });
    /// // Each input pixel becomes a 2x2 block.
    /// assert_eq!(y.shape(), &[1, 1, 4, 4]);
    /// assert_eq!(y.to_vec()[..4], [1.0, 1.0, 2.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn conv_transpose2d(&self, weight: &Tensor, bias: Option<&Tensor>, options: ConvTranspose2dConfig) -> Tensor {
        let conv = |x: &Tensor, w: &Tensor, b: Option<&Tensor>| x.conv_transpose2d(w, b, options);
        if self.rank() == 3 && weight.rank() == 4 {
            return super::conv::unbatched(self, |x| conv(x, weight, bias));
        }
        let _op = crate::autograd::entry::op_entry!(crate::names::CONV_TRANSPOSE2D, [self, weight]; [bias], attrs = || {
            use crate::autograd::trace::{int, ints};
            let o = &options;
            vec![
                ("stride", ints(&[o.stride.0, o.stride.1])),
                ("padding", ints(&[o.padding.0, o.padding.1])),
                ("output_padding", ints(&[o.output_padding.0, o.output_padding.1])),
                ("dilation", ints(&[o.dilation.0, o.dilation.1])),
                ("groups", int(o.groups)),
            ]
        }, again = |c: &[Option<&crate::Tensor>]| (conv)(c[0].expect("present"), c[1].expect("present"), c[2]));
        const OP: &str = crate::names::CONV_TRANSPOSE2D;
        let mut operands = vec![self, weight];
        operands.extend(bias);
        check_same(OP, &operands);
        check_float(OP, self);
        let geo = geometry(self, weight, options);
        if let Some(b) = bias {
            if b.shape() != [geo.c] {
                panic!("{OP}: bias of shape {:?} for {} output channels (expected [{}])", b.shape(), geo.c, geo.c);
            }
        }
        let shape = [geo.n, geo.c, geo.h, geo.w];
        crate::shape::numel_of(OP, &shape);
        let x = self.contiguous();
        let w = weight.contiguous();
        let storage = x.storage_arc().conv_transpose2d(&w.storage_arc(), &geo);
        let y = op_result(OP, Arc::new(storage), Layout::contiguous(&shape), &[self, weight], || {
            let (x, w) = (x.saved_for_backward(), w.saved_for_backward());
            move |g: &Tensor, needs: &[bool]| -> Grads {
                let g = g.contiguous().storage_arc();
                // The input gradient is the convolution of the output gradient; the weight
                // gradient is that convolution's, with `x` in the role of its output gradient.
                let dx = needs[0].then(|| Tensor::from_storage(g.conv2d(&w.storage_arc(), None, &geo), x.shape()));
                let dw = needs[1].then(|| {
                    let (_, dw) = x.storage_arc().conv2d_backward(&g, &w.storage_arc(), &geo, (false, true));
                    Tensor::from_storage(dw, w.shape())
                });
                smallvec![dx, dw]
            }
        });
        match bias {
            Some(b) => y + b.reshape(&[1, geo.c, 1, 1]),
            None => y,
        }
    }

    /// Transposed 1-D convolution of `self` (`[N, C_in, L]`, or `[C_in, L]` unbatched) with `weight` (`[C_in, C_out /
    /// groups, k]`), computed as a transposed 2-D convolution of height 1. Output
    /// `[N, C_out, (L - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1]`.
    ///
    /// ```
    /// use nn_core::{ops::ConvTranspose1dConfig, Tensor};
    /// let x = Tensor::from_vec(vec![1.0, 2.0], &[1, 1, 2]);
    /// let w = Tensor::from_vec(vec![1.0, 10.0, 100.0], &[1, 1, 3]);
    /// let y = x.conv_transpose1d(&w, None, ConvTranspose1dConfig::default());
    /// assert_eq!(y.to_vec(), vec![1.0, 12.0, 120.0, 200.0]);
    /// ```
    #[track_caller]
    pub fn conv_transpose1d(&self, weight: &Tensor, bias: Option<&Tensor>, options: ConvTranspose1dConfig) -> Tensor {
        let conv = |x: &Tensor, w: &Tensor, b: Option<&Tensor>| x.conv_transpose1d(w, b, options);
        if self.rank() == 2 && weight.rank() == 3 {
            return super::conv::unbatched(self, |x| conv(x, weight, bias));
        }
        let _op = crate::autograd::entry::op_entry!(untraced crate::names::CONV_TRANSPOSE1D, [Some(self), Some(weight), bias],
            again = |c| conv(c[0].expect("present"), c[1].expect("present"), c[2]));
        if self.rank() != 3 || weight.rank() != 3 {
            panic!(
                "conv_transpose1d: expected a 3-D input [N, C_in, L] (or 2-D [C_in, L], unbatched) and a 3-D weight [C_in, C_out / groups, k], \
                 got shapes {:?} and {:?}",
                self.shape(),
                weight.shape()
            );
        }
        let o = options;
        let opt = ConvTranspose2dConfig {
            stride: (1, o.stride),
            padding: (0, o.padding),
            output_padding: (0, o.output_padding),
            dilation: (1, o.dilation),
            groups: o.groups,
        };
        self.unsqueeze(2).conv_transpose2d(&weight.unsqueeze(2), bias, opt).squeeze_dim(2)
    }
}

#[cfg(test)]
mod tests {
    use super::{ConvTranspose1dConfig, ConvTranspose2dConfig};
    use crate::ops::Conv2dConfig;
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    fn opts(
        stride: usize,
        padding: usize,
        output_padding: usize,
        dilation: usize,
        groups: usize,
    ) -> ConvTranspose2dConfig {
        ConvTranspose2dConfig {
            stride: (stride, stride),
            padding: (padding, padding),
            output_padding: (output_padding, output_padding),
            dilation: (dilation, dilation),
            groups,
        }
    }

    /// A deterministic, varied input of `shape`.
    fn vals(shape: &[usize], seed: u64) -> Tensor {
        let n: usize = shape.iter().product();
        let v = (0..n as u64).map(|i| ((i * 7919 + seed * 104729) % 23) as f64 / 11.0 - 1.0).collect();
        Tensor::from_vec_f64(v, shape)
    }

    /// Direct scatter loop: `y[n, g*og + f, i*s - p + a*d, j*s - p + b*d] += x[n, ci, i, j]
    /// w[ci, f, a, b]` over the input channels `ci` of group `g`.
    fn naive(x: &Tensor, w: &Tensor, b: Option<&Tensor>, o: ConvTranspose2dConfig) -> (Vec<usize>, Vec<f64>) {
        let (xs, ws) = (x.shape(), w.shape());
        let (n, c, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
        let (og, kh, kw) = (ws[1], ws[2], ws[3]);
        let (oc, cg) = (og * o.groups, c / o.groups);
        let ho = (h - 1) * o.stride.0 + o.dilation.0 * (kh - 1) + o.output_padding.0 + 1 - 2 * o.padding.0;
        let wo = (wd - 1) * o.stride.1 + o.dilation.1 * (kw - 1) + o.output_padding.1 + 1 - 2 * o.padding.1;
        let (xv, wv) = (x.to_vec_f64(), w.to_vec_f64());
        let mut out = vec![0.0; n * oc * ho * wo];
        if let Some(b) = b {
            let bv = b.to_vec_f64();
            for (k, v) in out.iter_mut().enumerate() {
                *v = bv[(k / (ho * wo)) % oc];
            }
        }
        for s in 0..n {
            for ci in 0..c {
                let g = ci / cg;
                for f in 0..og {
                    for i in 0..h {
                        for j in 0..wd {
                            for a in 0..kh {
                                for bb in 0..kw {
                                    let y = (i * o.stride.0 + a * o.dilation.0) as isize - o.padding.0 as isize;
                                    let z = (j * o.stride.1 + bb * o.dilation.1) as isize - o.padding.1 as isize;
                                    if y < 0 || z < 0 || y >= ho as isize || z >= wo as isize {
                                        continue;
                                    }
                                    out[((s * oc + g * og + f) * ho + y as usize) * wo + z as usize] +=
                                        xv[((s * c + ci) * h + i) * wd + j] * wv[((ci * og + f) * kh + a) * kw + bb];
                                }
                            }
                        }
                    }
                }
            }
        }
        (vec![n, oc, ho, wo], out)
    }

    #[test]
    fn conv_transpose2d_forward_values() {
        // Values from PyTorch: F.conv_transpose2d(arange(4).view(1,1,2,2) + 1,
        // tensor([[1., 2.], [3., 4.]]).view(1,1,2,2)).
        let x = leaf(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]);
        let w = t64(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]);
        let y = x.conv_transpose2d(&w, None, ConvTranspose2dConfig::default());
        assert_eq!(y.shape(), &[1, 1, 3, 3]);
        assert_eq!(y.to_vec_f64(), vec![1.0, 4.0, 4.0, 6.0, 20.0, 16.0, 9.0, 24.0, 16.0]);
        // Stride 2, padding 1, output_padding 1, with a bias (PyTorch's values).
        let b = t64(&[0.5], &[1]);
        let y = x.conv_transpose2d(&w, Some(&b), opts(2, 1, 1, 1, 1));
        assert_eq!(y.shape(), &[1, 1, 3, 3]);
        assert_eq!(y.to_vec_f64(), vec![4.5, 6.5, 8.5, 6.5, 4.5, 8.5, 12.5, 12.5, 16.5]);
        let y32 = x.to_dtype(DType::F32).conv_transpose2d(&w.to_dtype(DType::F32), None, Default::default());
        assert_eq!(y32.to_vec(), vec![1.0, 4.0, 4.0, 6.0, 20.0, 16.0, 9.0, 24.0, 16.0]);
    }

    #[test]
    fn conv_transpose2d_matches_a_naive_scatter() {
        for (xs, ws, o, bias) in [
            ([2, 3, 4, 5], [3, 2, 3, 2], opts(1, 0, 0, 1, 1), true),
            ([2, 4, 3, 3], [4, 3, 3, 3], opts(2, 1, 1, 1, 2), true),
            ([1, 4, 4, 3], [4, 1, 2, 3], opts(1, 1, 1, 2, 4), false),
            ([3, 2, 3, 4], [2, 2, 1, 1], opts(3, 0, 2, 1, 1), true),
            (
                [1, 2, 3, 5],
                [2, 3, 3, 2],
                ConvTranspose2dConfig {
                    stride: (2, 1),
                    padding: (1, 0),
                    output_padding: (1, 0),
                    dilation: (1, 2),
                    groups: 1,
                },
                true,
            ),
        ] {
            let (x, w) = (vals(&xs, 1), vals(&ws, 2));
            let b = vals(&[ws[1] * o.groups], 3);
            let b = bias.then_some(&b);
            let (shape, expected) = naive(&x, &w, b, o);
            let y = x.conv_transpose2d(&w, b, o);
            assert_eq!(y.shape(), shape.as_slice(), "{o:?}");
            assert_close64(&y.to_vec_f64(), &expected, 1e-12);
        }
    }

    #[test]
    fn conv_transpose2d_is_the_adjoint_of_conv2d() {
        // <conv2d(u, w), v> = <u, conv_transpose2d(v, w)> for every u, v.
        let o = opts(2, 1, 1, 1, 2);
        let c = Conv2dConfig { stride: (2, 2), padding: (1, 1), dilation: (1, 1), groups: 2 };
        let (u, w) = (vals(&[2, 4, 6, 6], 4), vals(&[6, 2, 3, 3], 5));
        let v = vals(&[2, 6, 3, 3], 6);
        let lhs = (u.conv2d(&w, None, c) * &v).sum().item();
        let t = v.conv_transpose2d(&w, None, o);
        assert_eq!(t.shape(), u.shape());
        let rhs = (u * t).sum().item();
        assert!((lhs - rhs).abs() < 1e-10, "{lhs} vs {rhs}");
    }

    #[test]
    fn conv_transpose2d_backward() {
        let x = leaf(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]);
        let w = leaf(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]);
        let b = leaf(&[0.5], &[1]);
        let y = x.conv_transpose2d(&w, Some(&b), ConvTranspose2dConfig::default());
        let gy = t64(&[1.0, 0.0, -1.0, 2.0, 0.5, 0.0, 0.0, 1.0, 3.0], &[1, 1, 3, 3]);
        (y * &gy).sum().backward();
        // dx[i][j] = sum_ab gy[i+a][j+b] w[a][b]; dw[a][b] = sum_ij gy[i+a][j+b] x[i][j]
        // (equal here, as x = w; PyTorch's values).
        assert_eq!(grad(&x), vec![9.0, -0.5, 7.0, 15.5]);
        assert_eq!(grad(&w), vec![9.0, -0.5, 7.0, 15.5]);
        assert_eq!(grad(&b), vec![6.5]);
        // Through exp().mean(), strided: dL/dw[0][0] = sum_ij exp(y[2i][2j]) / 16 * x[i][j].
        let x = leaf(&[0.1, -0.2, 0.3, 0.4], &[1, 1, 2, 2]);
        let w = leaf(&[0.5, -1.0, 0.25, 2.0], &[1, 1, 2, 2]);
        let y = x.conv_transpose2d(&w, None, opts(2, 0, 0, 1, 1));
        let yv = y.to_vec_f64();
        y.exp().mean().backward();
        let expected: f64 =
            [(0, 0), (2, 1), (8, 2), (10, 3)].iter().map(|&(p, i)| yv[p].exp() / 16.0 * [0.1, -0.2, 0.3, 0.4][i]).sum();
        assert_close64(&grad(&w)[..1], &[expected], 1e-12);
    }

    #[test]
    fn conv_transpose2d_backward_when_only_some_operands_require_grad() {
        // Data input, trainable weight (the usual layer), and the other way round: each
        // gradient equals the one computed with both operands requiring grad.
        let o = opts(2, 1, 1, 1, 1);
        let (xv, wv) = (vals(&[2, 3, 3, 3], 1), vals(&[3, 2, 3, 3], 2));
        let both = (xv.detach().requires_grad_(true), wv.detach().requires_grad_(true));
        both.0.conv_transpose2d(&both.1, None, o).exp().mean().backward();
        let w_only = wv.detach().requires_grad_(true);
        xv.conv_transpose2d(&w_only, None, o).exp().mean().backward();
        assert_eq!(grad(&w_only), grad(&both.1));
        let x_only = xv.detach().requires_grad_(true);
        x_only.conv_transpose2d(&wv, None, o).exp().mean().backward();
        assert_eq!(grad(&x_only), grad(&both.0));
    }

    #[test]
    fn conv_transpose2d_gradcheck() {
        let cases = [
            ([1, 2, 3, 3], [2, 2, 2, 2], opts(1, 0, 0, 1, 1)),
            ([2, 2, 3, 3], [2, 1, 3, 3], opts(2, 1, 1, 1, 1)),
            ([1, 2, 3, 4], [2, 1, 2, 2], opts(1, 1, 1, 2, 2)),
            ([1, 4, 2, 3], [4, 2, 3, 2], opts(2, 0, 0, 1, 2)),
        ];
        for (i, (xs, ws, o)) in cases.into_iter().enumerate() {
            let b = vals(&[ws[1] * o.groups], 3);
            gradcheck(|t| t[0].conv_transpose2d(&t[1], Some(&t[2]), o).tanh(), &[vals(&xs, 1), vals(&ws, 2), b])
                .unwrap_or_else(|e| panic!("case {i}: {e}"));
        }
    }

    #[test]
    fn conv_transpose1d_forward_backward_gradcheck() {
        let x = leaf(&[1.0, 2.0], &[1, 1, 2]);
        let w = leaf(&[1.0, 10.0, 100.0], &[1, 1, 3]);
        let y = x.conv_transpose1d(&w, None, ConvTranspose1dConfig::default());
        assert_eq!((y.shape(), y.to_vec_f64()), (&[1, 1, 4][..], vec![1.0, 12.0, 120.0, 200.0]));
        let o = ConvTranspose1dConfig { stride: 2, padding: 1, output_padding: 1, ..Default::default() };
        // Full: [1, 10, 102, 20, 200], trimmed by one on the left, then one more on the right.
        assert_eq!(x.conv_transpose1d(&w, None, o).to_vec_f64(), vec![10.0, 102.0, 20.0, 200.0]);
        (y * t64(&[1.0, 0.0, -1.0, 2.0], &[1, 1, 4])).sum().backward();
        assert_eq!(grad(&x), vec![-99.0, 190.0]);
        assert_eq!(grad(&w), vec![1.0, -2.0, 3.0]);
        let o = ConvTranspose1dConfig { stride: 2, padding: 1, output_padding: 1, dilation: 2, groups: 2 };
        gradcheck(
            |t| t[0].conv_transpose1d(&t[1], Some(&t[2]), o),
            &[vals(&[2, 4, 5], 1), vals(&[4, 3, 3], 2), vals(&[6], 3)],
        )
        .unwrap();
    }

    #[test]
    fn conv_transpose2d_on_noncontiguous_inputs_and_meta() {
        let (x, w, b) = (vals(&[2, 2, 3, 4], 1), vals(&[2, 3, 2, 2], 2), vals(&[3], 3));
        check_noncontig(|t| t[0].conv_transpose2d(&t[1], Some(&t[2]), opts(2, 1, 1, 1, 1)), &[x, w, b]);
        let x = Tensor::full_on(&[8, 16, 16, 16], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        let w = Tensor::full_on(&[16, 3, 4, 4], 0.0, DType::F32, Device::Meta);
        let y = x.conv_transpose2d(&w, None, opts(2, 1, 0, 1, 1));
        assert_eq!((y.shape(), y.device()), (&[8, 3, 32, 32][..], Device::Meta));
        y.sum().backward();
        assert_eq!(x.grad().unwrap().shape(), &[8, 16, 16, 16]);
    }

    #[test]
    fn conv_transpose2d_big_batches_match_per_sample_results() {
        // Big enough for the backend to split the batch over threads.
        let o = opts(2, 1, 1, 1, 1);
        let (x, w) = (vals(&[8, 8, 12, 12], 1).requires_grad_(true), vals(&[8, 4, 3, 3], 2).requires_grad_(true));
        let y = x.conv_transpose2d(&w, None, o);
        let gy = vals(y.shape(), 3);
        y.backward_with(&gy, false);
        let (dx, dw) = (grad(&x), grad(&w));
        let mut dw_sum = vec![0.0; dw.len()];
        let per = 8 * 144;
        for n in 0..8 {
            let xn = x.detach().narrow(0, n, 1).requires_grad_(true);
            let wn = w.detach().requires_grad_(true);
            let yn = xn.conv_transpose2d(&wn, None, o);
            assert_close64(&yn.to_vec_f64(), &y.narrow(0, n, 1).to_vec_f64(), 1e-12);
            yn.backward_with(&gy.narrow(0, n, 1).contiguous(), false);
            assert_close64(&grad(&xn), &dx[n * per..(n + 1) * per], 1e-12);
            dw_sum.iter_mut().zip(grad(&wn)).for_each(|(a, b)| *a += b);
        }
        assert_close64(&dw, &dw_sum, 1e-10);
    }

    #[test]
    #[should_panic(
        expected = "conv_transpose2d: input [1, 3, 4, 4] x weight [2, 2, 3, 3]: the weight's first dim must be the input's 3 channels, got 2"
    )]
    fn conv_transpose2d_channel_mismatch_names_both_shapes() {
        Tensor::zeros(&[1, 3, 4, 4]).conv_transpose2d(&Tensor::zeros(&[2, 2, 3, 3]), None, Default::default());
    }

    #[test]
    #[should_panic(
        expected = "conv_transpose2d: output_padding (2, 2) must be smaller than either the stride (2, 2) or the dilation (1, 1)"
    )]
    fn conv_transpose2d_output_padding_must_be_below_stride_or_dilation() {
        Tensor::zeros(&[1, 1, 4, 4]).conv_transpose2d(&Tensor::zeros(&[1, 1, 3, 3]), None, opts(2, 0, 2, 1, 1));
    }

    #[test]
    #[should_panic(expected = "conv_transpose2d: in_channels 3 must be divisible by groups 2")]
    fn conv_transpose2d_groups_must_divide_channels() {
        Tensor::zeros(&[1, 3, 4, 4]).conv_transpose2d(&Tensor::zeros(&[3, 1, 1, 1]), None, opts(1, 0, 0, 1, 2));
    }

    #[test]
    #[should_panic(expected = "conv_transpose2d: bias of shape [3] for 4 output channels (expected [4])")]
    fn conv_transpose2d_bias_shape_mismatch() {
        let w = Tensor::zeros(&[2, 2, 3, 3]);
        Tensor::zeros(&[1, 2, 4, 4]).conv_transpose2d(&w, Some(&Tensor::zeros(&[3])), opts(1, 0, 0, 1, 2));
    }

    #[test]
    #[should_panic(expected = "conv_transpose2d: input [1, 1, 1, 1] with kernel (1, 1), stride (1, 1), padding (1, 1)")]
    fn conv_transpose2d_empty_output() {
        Tensor::zeros(&[1, 1, 1, 1]).conv_transpose2d(&Tensor::zeros(&[1, 1, 1, 1]), None, opts(1, 1, 0, 1, 1));
    }

    #[test]
    #[should_panic(expected = "conv_transpose1d: expected a 3-D input [N, C_in, L] (or 2-D [C_in, L], unbatched)")]
    fn conv_transpose1d_needs_a_2d_or_3d_input() {
        Tensor::zeros(&[5]).conv_transpose1d(&Tensor::zeros(&[4, 1, 3]), None, Default::default());
    }

    /// Unbatched inputs (`[C_in, H, W]`, `[C_in, L]`) run as a batch of one, as PyTorch's.
    #[test]
    fn unbatched_inputs_run_as_a_batch_of_one() {
        let x = Tensor::from_vec_f64((0..18).map(|i| i as f64 / 7.0).collect(), &[2, 3, 3]);
        let w = Tensor::from_vec_f64((0..16).map(|i| 1.0 - i as f64 / 8.0).collect(), &[2, 2, 2, 2]);
        let y = x.conv_transpose2d(&w, None, opts(2, 0, 0, 1, 1));
        let batched = x.unsqueeze(0).conv_transpose2d(&w, None, opts(2, 0, 0, 1, 1));
        assert_eq!(y.shape(), &batched.shape()[1..]);
        assert_eq!(y.to_vec_f64(), batched.to_vec_f64());
        let x1 = x.reshape(&[2, 9]);
        let w1 = w.reshape(&[2, 2, 4]);
        let y1 = x1.conv_transpose1d(&w1, None, Default::default());
        assert_eq!(y1.shape(), &[2, 12]);
        assert_eq!(y1.to_vec_f64(), x1.unsqueeze(0).conv_transpose1d(&w1, None, Default::default()).to_vec_f64());
    }
}
