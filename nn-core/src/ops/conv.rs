//! 2-D (and, through it, 1-D) convolution: im2col + GEMM per sample and group, spread
//! over threads by sample, with per-thread scratch buffers reused across samples.

use std::sync::Arc;

use rayon::prelude::*;
use smallvec::smallvec;

use super::{check_float, check_same, cpu};
use crate::autograd::{op_result, Grads};
use crate::device::Device;
use crate::dtype::{Element, FloatElement};
use crate::shape::Layout;
use crate::storage::{with_float, Storage};
use crate::tensor::Tensor;

/// Stride, zero padding, dilation and groups of a 2-D convolution (PyTorch's defaults:
/// 1, 0, 1, 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dOptions {
    /// Step between output positions, `(height, width)`.
    pub stride: (usize, usize),
    /// Zeros added on both sides, `(height, width)`.
    pub padding: (usize, usize),
    /// Spacing between kernel taps, `(height, width)`.
    pub dilation: (usize, usize),
    /// Number of channel groups; input and output channels must both divide by it.
    pub groups: usize,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Conv2dOptions { stride: (1, 1), padding: (0, 0), dilation: (1, 1), groups: 1 }
    }
}

/// Every size a convolution kernel needs, validated once.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    o: usize,
    kh: usize,
    kw: usize,
    ho: usize,
    wo: usize,
    opt: Conv2dOptions,
}

impl Geometry {
    fn cg(&self) -> usize {
        self.c / self.opt.groups
    }
    fn og(&self) -> usize {
        self.o / self.opt.groups
    }
    /// Rows of the column matrix: `C/g * kh * kw`.
    fn ckk(&self) -> usize {
        self.cg() * self.kh * self.kw
    }
    fn hw_out(&self) -> usize {
        self.ho * self.wo
    }
}

/// Output size of one spatial dim, or `None` when the kernel does not fit.
pub(crate) fn out_size(input: usize, kernel: usize, stride: usize, pad: usize, dilation: usize) -> Option<usize> {
    let eff = dilation * (kernel - 1) + 1;
    let padded = input + 2 * pad;
    (padded >= eff).then(|| (padded - eff) / stride + 1)
}

#[track_caller]
fn geometry(x: &Tensor, w: &Tensor, opt: Conv2dOptions) -> Geometry {
    const OP: &str = "conv2d";
    if x.rank() != 4 {
        panic!("{OP}: expected a 4-D input [N, C, H, W], got shape {:?}", x.shape());
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

/// Fills `cols` (`[C/g * kh * kw, Ho * Wo]`) from one group of one sample, `x`
/// (`[C/g, H, W]` contiguous).
fn im2col<T: FloatElement>(x: &[T], g: &Geometry, cols: &mut [T]) {
    let (sh, sw) = g.opt.stride;
    let (ph, pw) = g.opt.padding;
    let (dh, dw) = g.opt.dilation;
    let hw = g.hw_out();
    for c in 0..g.cg() {
        let plane = &x[c * g.h * g.w..(c + 1) * g.h * g.w];
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                let row = ((c * g.kh + ki) * g.kw + kj) * hw;
                let dst = &mut cols[row..row + hw];
                for oh in 0..g.ho {
                    let ih = (oh * sh + ki * dh) as isize - ph as isize;
                    let line = &mut dst[oh * g.wo..(oh + 1) * g.wo];
                    if ih < 0 || ih >= g.h as isize {
                        line.fill(T::zero());
                        continue;
                    }
                    let src = &plane[ih as usize * g.w..(ih as usize + 1) * g.w];
                    for (ow, v) in line.iter_mut().enumerate() {
                        let iw = (ow * sw + kj * dw) as isize - pw as isize;
                        *v = if iw < 0 || iw >= g.w as isize { T::zero() } else { src[iw as usize] };
                    }
                }
            }
        }
    }
}

/// Adds the column matrix back into one group of one sample's input gradient.
fn col2im<T: FloatElement>(cols: &[T], g: &Geometry, dx: &mut [T]) {
    let (sh, sw) = g.opt.stride;
    let (ph, pw) = g.opt.padding;
    let (dh, dw) = g.opt.dilation;
    let hw = g.hw_out();
    for c in 0..g.cg() {
        let plane = &mut dx[c * g.h * g.w..(c + 1) * g.h * g.w];
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                let row = ((c * g.kh + ki) * g.kw + kj) * hw;
                let src = &cols[row..row + hw];
                for oh in 0..g.ho {
                    let ih = (oh * sh + ki * dh) as isize - ph as isize;
                    if ih < 0 || ih >= g.h as isize {
                        continue;
                    }
                    let line = &mut plane[ih as usize * g.w..(ih as usize + 1) * g.w];
                    for ow in 0..g.wo {
                        let iw = (ow * sw + kj * dw) as isize - pw as isize;
                        if iw >= 0 && iw < g.w as isize {
                            line[iw as usize] = line[iw as usize] + src[oh * g.wo + ow];
                        }
                    }
                }
            }
        }
    }
}

/// `c = a(m x k) * b(k x n)` for row-major slices, with `transpose_a`/`transpose_b`
/// reading the operands as stored transposed, and `accumulate` adding into `c`.
#[allow(clippy::too_many_arguments)]
fn gemm<T: FloatElement>(
    m: usize,
    k: usize,
    n: usize,
    a: &[T],
    ta: bool,
    b: &[T],
    tb: bool,
    c: &mut [T],
    accumulate: bool,
) {
    let (rsa, csa) = if ta { (1, m as isize) } else { (k as isize, 1) };
    let (rsb, csb) = if tb { (1, k as isize) } else { (n as isize, 1) };
    debug_assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    // SAFETY: the asserts above bound every index the strides can produce.
    unsafe {
        T::gemm(
            m,
            k,
            n,
            T::one(),
            a.as_ptr(),
            rsa,
            csa,
            b.as_ptr(),
            rsb,
            csb,
            if accumulate { T::one() } else { T::zero() },
            c.as_mut_ptr(),
            n as isize,
            1,
        )
    }
}

fn conv_forward<T: FloatElement>(x: &[T], w: &[T], bias: Option<&[T]>, g: &Geometry) -> Vec<T> {
    let (cg, og, ckk, hw) = (g.cg(), g.og(), g.ckk(), g.hw_out());
    let in_sample = g.c * g.h * g.w;
    let out_sample = g.o * hw;
    let mut out = vec![T::zero(); g.n * out_sample];
    out.par_chunks_mut(out_sample.max(1)).enumerate().for_each_init(
        || vec![T::zero(); ckk * hw],
        |cols, (n, y)| {
            let xs = &x[n * in_sample..(n + 1) * in_sample];
            for gi in 0..g.opt.groups {
                im2col(&xs[gi * cg * g.h * g.w..(gi + 1) * cg * g.h * g.w], g, cols);
                let wg = &w[gi * og * ckk..(gi + 1) * og * ckk];
                gemm(og, ckk, hw, wg, false, cols, false, &mut y[gi * og * hw..(gi + 1) * og * hw], false);
            }
            if let Some(b) = bias {
                for (o, row) in y.chunks_mut(hw.max(1)).enumerate() {
                    row.iter_mut().for_each(|v| *v = *v + b[o]);
                }
            }
        },
    );
    out
}

/// Input and weight gradients. Each thread accumulates its own weight-gradient partial.
fn conv_backward<T: FloatElement>(
    x: &[T],
    w: &[T],
    gy: &[T],
    geo: &Geometry,
    need_dx: bool,
    need_dw: bool,
) -> (Vec<T>, Vec<T>) {
    let (cg, og, ckk, hw) = (geo.cg(), geo.og(), geo.ckk(), geo.hw_out());
    let in_sample = geo.c * geo.h * geo.w;
    let out_sample = geo.o * hw;
    let mut dx = vec![T::zero(); if need_dx { x.len() } else { 0 }];
    let wlen = w.len();
    let per_sample = |n: usize, dxs: &mut [T], dw: &mut Vec<T>, cols: &mut Vec<T>| {
        let xs = &x[n * in_sample..(n + 1) * in_sample];
        let gys = &gy[n * out_sample..(n + 1) * out_sample];
        for gi in 0..geo.opt.groups {
            let gyg = &gys[gi * og * hw..(gi + 1) * og * hw];
            if need_dw {
                im2col(&xs[gi * cg * geo.h * geo.w..(gi + 1) * cg * geo.h * geo.w], geo, cols);
                // dW_g += gy_g (og x hw) * cols^T (hw x ckk)
                gemm(og, hw, ckk, gyg, false, cols, true, &mut dw[gi * og * ckk..(gi + 1) * og * ckk], true);
            }
            if need_dx {
                // dcols = W_g^T (ckk x og) * gy_g (og x hw)
                let wg = &w[gi * og * ckk..(gi + 1) * og * ckk];
                gemm(ckk, og, hw, wg, true, gyg, false, cols, false);
                col2im(cols, geo, &mut dxs[gi * cg * geo.h * geo.w..(gi + 1) * cg * geo.h * geo.w]);
            }
        }
    };
    let dw = if need_dx {
        dx.par_chunks_mut(in_sample.max(1))
            .enumerate()
            .fold(
                || (vec![T::zero(); if need_dw { wlen } else { 0 }], vec![T::zero(); ckk * hw]),
                |(mut dw, mut cols), (n, dxs)| {
                    per_sample(n, dxs, &mut dw, &mut cols);
                    (dw, cols)
                },
            )
            .map(|(dw, _)| dw)
            .reduce(|| vec![T::zero(); if need_dw { wlen } else { 0 }], add_vecs)
    } else {
        (0..geo.n)
            .into_par_iter()
            .fold(
                || (vec![T::zero(); wlen], vec![T::zero(); ckk * hw]),
                |(mut dw, mut cols), n| {
                    per_sample(n, &mut [], &mut dw, &mut cols);
                    (dw, cols)
                },
            )
            .map(|(dw, _)| dw)
            .reduce(|| vec![T::zero(); wlen], add_vecs)
    };
    (dx, dw)
}

fn add_vecs<T: FloatElement>(mut a: Vec<T>, b: Vec<T>) -> Vec<T> {
    if a.is_empty() {
        return b;
    }
    for (x, y) in a.iter_mut().zip(b) {
        *x = *x + y;
    }
    a
}

impl Tensor {
    /// 2-D convolution (cross-correlation, as PyTorch) of `self` (`[N, C, H, W]`) with
    /// `weight` (`[O, C / groups, kH, kW]`) and optional `bias` (`[O]`). Output
    /// `[N, O, Ho, Wo]` with `Ho = (H + 2 pad - dilation (kH - 1) - 1) / stride + 1`.
    ///
    /// ```
    /// use nn_core::{ops::Conv2dOptions, Tensor};
    /// let x = Tensor::arange(0.0, 16.0, 1.0).reshape(&[1, 1, 4, 4]);
    /// let w = Tensor::ones(&[1, 1, 2, 2]);
    /// let y = x.conv2d(&w, None, Conv2dOptions { stride: (2, 2), ..Default::default() });
    /// assert_eq!(y.shape(), &[1, 1, 2, 2]);
    /// assert_eq!(y.to_vec(), vec![10.0, 18.0, 42.0, 50.0]);
    /// ```
    #[track_caller]
    pub fn conv2d(&self, weight: &Tensor, bias: Option<&Tensor>, options: Conv2dOptions) -> Tensor {
        const OP: &str = "conv2d";
        let mut operands = vec![self, weight];
        operands.extend(bias);
        let (device, dtype) = check_same(OP, &operands);
        check_float(OP, self);
        let geo = geometry(self, weight, options);
        if let Some(b) = bias {
            if b.shape() != [geo.o] {
                panic!("{OP}: bias of shape {:?} for {} output channels (expected [{}])", b.shape(), geo.o, geo.o);
            }
        }
        let shape = [geo.n, geo.o, geo.ho, geo.wo];
        let x = self.contiguous();
        let w = weight.contiguous();
        let storage = if device == Device::Meta {
            Storage::Meta { dtype, len: shape.iter().product() }
        } else {
            let (sx, sw) = (x.storage_arc(), w.storage_arc());
            let sb = bias.map(|b| b.contiguous().storage_arc());
            Storage::Cpu(with_float!(cpu(&sx), OP, T, xv => {
                let wv = T::slice(cpu(&sw)).expect("same dtype");
                let bv = sb.as_ref().map(|s| T::slice(cpu(s)).expect("same dtype"));
                T::into_storage(conv_forward(xv, wv, bv, &geo))
            }))
        };
        op_result(OP, Arc::new(storage), Layout::contiguous(&shape), &operands, || {
            let (x, w) = (x.detach(), w.detach());
            move |g: &Tensor, needs: &[bool]| -> Grads {
                let g = g.contiguous();
                let need_dx = needs[0];
                let need_dw = needs[1];
                let need_db = needs.get(2).copied().unwrap_or(false);
                let (dx, dw) = if g.device() == Device::Meta {
                    (Tensor::zeros_like(&x), Tensor::zeros_like(&w))
                } else {
                    let (sx, sw, sg) = (x.storage_arc(), w.storage_arc(), g.storage_arc());
                    let (dx, dw) = with_float!(cpu(&sx), OP, T, xv => {
                        let wv = T::slice(cpu(&sw)).expect("same dtype");
                        let gv = T::slice(cpu(&sg)).expect("same dtype");
                        let (dx, dw) = conv_backward(xv, wv, gv, &geo, need_dx, need_dw);
                        (T::into_storage(dx), T::into_storage(dw))
                    });
                    (Tensor::from_cpu(dx, x.shape()), Tensor::from_cpu(dw, w.shape()))
                };
                let mut out: Grads = smallvec![need_dx.then_some(dx), need_dw.then_some(dw)];
                if needs.len() > 2 {
                    out.push(need_db.then(|| g.sum_dims(&[0usize, 2, 3], false)));
                }
                out
            }
        })
    }

    /// 1-D convolution of `self` (`[N, C, L]`) with `weight` (`[O, C / groups, k]`),
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
        if self.rank() != 3 || weight.rank() != 3 {
            panic!(
                "conv1d: expected a 3-D input [N, C, L] and a 3-D weight [O, C / groups, k], got shapes {:?} and {:?}",
                self.shape(),
                weight.shape()
            );
        }
        let opt = Conv2dOptions { stride: (1, stride), padding: (0, padding), dilation: (1, dilation), groups };
        self.unsqueeze(2).conv2d(&weight.unsqueeze(2), bias, opt).squeeze_dim(2)
    }
}
