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

/// The input columns `lo..hi` of output row `oh` that kernel tap `(ki, kj)` reads, and the
/// input row and first input column: `None` when the tap falls in the vertical padding.
/// Columns outside `lo..hi` read the horizontal padding (zeros).
#[inline]
fn tap_run(g: &Geometry, oh: usize, ki: usize, kj: usize) -> Option<(usize, usize, usize, usize)> {
    let (sh, sw) = g.opt.stride;
    let (ph, pw) = g.opt.padding;
    let (dh, dw) = g.opt.dilation;
    let ih = (oh * sh + ki * dh) as isize - ph as isize;
    if ih < 0 || ih >= g.h as isize {
        return None;
    }
    let off = (kj * dw) as isize - pw as isize;
    let lo = if off >= 0 { 0 } else { ((-off) as usize).div_ceil(sw) }.min(g.wo);
    let hi = if (g.w as isize) <= off { 0 } else { ((g.w as isize - off) as usize).div_ceil(sw) }.clamp(lo, g.wo);
    Some((lo, hi, ih as usize, ((lo * sw) as isize + off).max(0) as usize))
}

/// Fills the columns of one sample in a column matrix `[C/g * kh * kw, row_stride]` from
/// one group of that sample, `x` (`[C/g, H, W]` contiguous): row `r` of the sample's
/// block is `cols[r * row_stride + offset..][..Ho * Wo]`.
fn im2col<T: FloatElement>(x: &[T], g: &Geometry, cols: &mut [T], row_stride: usize, offset: usize) {
    let sw = g.opt.stride.1;
    let hw = g.hw_out();
    for c in 0..g.cg() {
        let plane = &x[c * g.h * g.w..(c + 1) * g.h * g.w];
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                let row = ((c * g.kh + ki) * g.kw + kj) * row_stride + offset;
                let dst = &mut cols[row..row + hw];
                for oh in 0..g.ho {
                    let line = &mut dst[oh * g.wo..(oh + 1) * g.wo];
                    let Some((lo, hi, ih, first)) = tap_run(g, oh, ki, kj) else {
                        line.fill(T::zero());
                        continue;
                    };
                    // Zeros around a copied (or strided-gathered) middle run.
                    let src = &plane[ih * g.w..(ih + 1) * g.w];
                    line[..lo].fill(T::zero());
                    line[hi..].fill(T::zero());
                    if sw == 1 {
                        line[lo..hi].copy_from_slice(&src[first..first + (hi - lo)]);
                    } else {
                        for (k, v) in line[lo..hi].iter_mut().enumerate() {
                            *v = src[first + k * sw];
                        }
                    }
                }
            }
        }
    }
}

/// Adds one sample's block of a column matrix (laid out as for [`im2col`]) back into one
/// group of that sample's input gradient.
fn col2im<T: FloatElement>(cols: &[T], g: &Geometry, dx: &mut [T], row_stride: usize, offset: usize) {
    let sw = g.opt.stride.1;
    let hw = g.hw_out();
    for c in 0..g.cg() {
        let plane = &mut dx[c * g.h * g.w..(c + 1) * g.h * g.w];
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                let row = ((c * g.kh + ki) * g.kw + kj) * row_stride + offset;
                let src = &cols[row..row + hw];
                for oh in 0..g.ho {
                    let Some((lo, hi, ih, first)) = tap_run(g, oh, ki, kj) else { continue };
                    let line = &mut plane[ih * g.w..(ih + 1) * g.w];
                    let run = &src[oh * g.wo + lo..oh * g.wo + hi];
                    if sw == 1 {
                        for (d, &v) in line[first..first + run.len()].iter_mut().zip(run) {
                            *d = *d + v;
                        }
                    } else {
                        for (k, &v) in run.iter().enumerate() {
                            line[first + k * sw] = line[first + k * sw] + v;
                        }
                    }
                }
            }
        }
    }
}

/// How one sample's output positions map to columns of the column matrix.
///
/// `Exact` has one column per output position (`Ho * Wo`). `Wide`, used for stride 1,
/// has one per position of the (padded) input row: `Ho * Wp` columns, of which the first
/// `Wo` of every `Wp` are real outputs. Its payoff is that a kernel tap's row of the
/// column matrix is then one contiguous run of the padded input plane, so im2col and
/// col2im are a copy (or add) per tap instead of one per tap and output row (for a
/// 11-wide output, 11x fewer and 13x longer runs). The extra columns cost `Wp / Wo - 1`
/// more GEMM work (18% on 13-wide inputs, 2% at 224); their outputs are dropped, and their
/// output gradients are zero, so they add nothing to the input or weight gradients.
#[derive(Clone, Copy)]
struct Cols {
    /// Padded input height and width (`Wide`), or `(0, 0)` for `Exact`.
    hp: usize,
    wp: usize,
    /// Columns per output row (`Wo` or `Wp`) and per sample.
    row: usize,
    span: usize,
}

impl Cols {
    fn new(g: &Geometry) -> Cols {
        if g.opt.stride == (1, 1) {
            let (hp, wp) = (g.h + 2 * g.opt.padding.0, g.w + 2 * g.opt.padding.1);
            Cols { hp, wp, row: wp, span: g.ho * wp }
        } else {
            Cols { hp: 0, wp: 0, row: g.wo, span: g.hw_out() }
        }
    }
    fn wide(&self) -> bool {
        self.hp > 0
    }
    /// Start of tap `(ki, kj)`'s run in the padded plane.
    fn tap_offset(&self, g: &Geometry, ki: usize, kj: usize) -> usize {
        ki * g.opt.dilation.0 * self.wp + kj * g.opt.dilation.1
    }
}

/// Copies one group of one sample (`[C/g, H, W]`) into `out` (`[C/g, Hp, Wp]`) with zeros
/// around it, or returns the input itself when there is no padding.
fn padded<'a, T: FloatElement>(x: &'a [T], g: &Geometry, l: &Cols, out: &'a mut Vec<T>) -> &'a [T] {
    let (ph, pw) = g.opt.padding;
    if (ph, pw) == (0, 0) {
        return x;
    }
    out.clear();
    out.resize(g.cg() * l.hp * l.wp, T::zero());
    for c in 0..g.cg() {
        for ih in 0..g.h {
            let dst = &mut out[(c * l.hp + ih + ph) * l.wp + pw..][..g.w];
            dst.copy_from_slice(&x[(c * g.h + ih) * g.w..][..g.w]);
        }
    }
    out
}

/// [`im2col`] for the `Wide` layout, from the padded planes `xp` (`[C/g, Hp, Wp]`).
fn im2col_wide<T: FloatElement>(xp: &[T], g: &Geometry, l: &Cols, cols: &mut [T], row_stride: usize, offset: usize) {
    let plane = l.hp * l.wp;
    for c in 0..g.cg() {
        let src = &xp[c * plane..(c + 1) * plane];
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                let row = ((c * g.kh + ki) * g.kw + kj) * row_stride + offset;
                let dst = &mut cols[row..row + l.span];
                // The run may reach past the plane's end only in dropped columns.
                let start = l.tap_offset(g, ki, kj);
                let n = l.span.min(plane - start);
                dst[..n].copy_from_slice(&src[start..start + n]);
                dst[n..].fill(T::zero());
            }
        }
    }
}

/// [`col2im`] for the `Wide` layout, adding into padded planes `dxp` (`[C/g, Hp, Wp]`).
fn col2im_wide<T: FloatElement>(cols: &[T], g: &Geometry, l: &Cols, dxp: &mut [T], row_stride: usize, offset: usize) {
    let plane = l.hp * l.wp;
    for c in 0..g.cg() {
        let dst = &mut dxp[c * plane..(c + 1) * plane];
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                let row = ((c * g.kh + ki) * g.kw + kj) * row_stride + offset;
                let start = l.tap_offset(g, ki, kj);
                let n = l.span.min(plane - start);
                for (d, &v) in dst[start..start + n].iter_mut().zip(&cols[row..row + n]) {
                    *d = *d + v;
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
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    // SAFETY: the assert above bounds every index the strides can produce.
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

/// Scratch memory for one column matrix, at most this many bytes per task: samples are
/// processed in blocks that fit (at least one sample per block).
const COLS_BYTES: usize = 8 << 20;

/// How many samples each task takes: the batch split evenly over the threads when the
/// work is worth splitting, capped so one block's column matrix fits [`COLS_BYTES`].
fn samples_per_task<T>(g: &Geometry, l: &Cols) -> usize {
    let per_sample = g.ckk() * l.span;
    let fit = (COLS_BYTES / std::mem::size_of::<T>() / per_sample.max(1)).max(1);
    let flops = 2 * g.n * per_sample * g.og() * g.opt.groups;
    let threads = if flops >= 1 << 21 { rayon::current_num_threads() } else { 1 };
    g.n.div_ceil(threads).clamp(1, fit)
}

/// Forward over blocks of samples: one im2col for the whole block (`[C/g * kh * kw,
/// B * span]`, see [`Cols`]) and one GEMM per group, so the GEMM sees a wide matrix instead
/// of one small product per sample; the `[O/g, B * span]` result is copied into the
/// `[B, O, Ho, Wo]` output with the bias added.
fn conv_forward<T: FloatElement>(x: &[T], w: &[T], bias: Option<&[T]>, g: &Geometry) -> Vec<T> {
    let (cg, og, ckk, hw) = (g.cg(), g.og(), g.ckk(), g.hw_out());
    let (in_sample, out_sample, group_in) = (g.c * g.h * g.w, g.o * hw, g.cg() * g.h * g.w);
    let l = Cols::new(g);
    let block = samples_per_task::<T>(g, &l);
    let mut out = T::alloc_buffer(g.n * out_sample);
    out.resize(g.n * out_sample, T::zero());
    out.par_chunks_mut((block * out_sample).max(1)).enumerate().for_each(|(bi, y)| {
        let nb = y.len() / out_sample.max(1);
        let cols_n = nb * l.span;
        let mut cols = T::alloc_buffer(ckk * cols_n);
        cols.resize(ckk * cols_n, T::zero());
        let mut yg = T::alloc_buffer(og * cols_n);
        yg.resize(og * cols_n, T::zero());
        let mut pad = Vec::new();
        for gi in 0..g.opt.groups {
            for i in 0..nb {
                let xg = &x[(bi * block + i) * in_sample + gi * cg * g.h * g.w..][..group_in];
                if l.wide() {
                    im2col_wide(padded(xg, g, &l, &mut pad), g, &l, &mut cols, cols_n, i * l.span);
                } else {
                    im2col(xg, g, &mut cols, cols_n, i * l.span);
                }
            }
            gemm(og, ckk, cols_n, &w[gi * og * ckk..(gi + 1) * og * ckk], false, &cols, false, &mut yg, false);
            for i in 0..nb {
                for o in 0..og {
                    let oc = gi * og + o;
                    let b = bias.map_or(T::zero(), |b| b[oc]);
                    let src = &yg[o * cols_n + i * l.span..][..l.span];
                    let dst = &mut y[i * out_sample + oc * hw..][..hw];
                    for (d, s) in dst.chunks_exact_mut(g.wo).zip(src.chunks(l.row)) {
                        for (d, &v) in d.iter_mut().zip(s) {
                            *d = v + b;
                        }
                    }
                }
            }
        }
        crate::pool::recycle(cols);
        crate::pool::recycle(yg);
    });
    out
}

/// Input and weight gradients over the same sample blocks as the forward: the block's
/// output gradient is gathered to `[O/g, B * span]` (zeros in dropped columns), then one
/// GEMM gives the weight gradient (against the recomputed columns) and one the column
/// gradient (scattered back by col2im). Each task accumulates its own weight-gradient
/// partial.
fn conv_backward<T: FloatElement>(
    x: &[T],
    w: &[T],
    gy: &[T],
    geo: &Geometry,
    need_dx: bool,
    need_dw: bool,
) -> (Vec<T>, Vec<T>) {
    let (cg, og, ckk, hw) = (geo.cg(), geo.og(), geo.ckk(), geo.hw_out());
    let (in_sample, out_sample, group_in) = (geo.c * geo.h * geo.w, geo.o * hw, geo.cg() * geo.h * geo.w);
    let l = Cols::new(geo);
    let block = samples_per_task::<T>(geo, &l);
    let mut dx = T::alloc_buffer(if need_dx { x.len() } else { 0 });
    dx.resize(if need_dx { x.len() } else { 0 }, T::zero());
    let wlen = w.len();
    let (ph, pw) = geo.opt.padding;
    // One block of samples starting at sample `n0`; `dxs` is the block's input gradient.
    let per_block = |n0: usize, nb: usize, dxs: &mut [T], dw: &mut Vec<T>| {
        let cols_n = nb * l.span;
        let mut cols = T::alloc_buffer(ckk * cols_n);
        cols.resize(ckk * cols_n, T::zero());
        let mut gyg = T::alloc_buffer(og * cols_n);
        gyg.resize(og * cols_n, T::zero());
        let (mut pad, mut dpad) = (Vec::new(), Vec::new());
        for gi in 0..geo.opt.groups {
            for i in 0..nb {
                for o in 0..og {
                    let src = &gy[(n0 + i) * out_sample + (gi * og + o) * hw..][..hw];
                    let dst = &mut gyg[o * cols_n + i * l.span..][..l.span];
                    for (d, s) in dst.chunks_mut(l.row).zip(src.chunks_exact(geo.wo)) {
                        d[..geo.wo].copy_from_slice(s);
                        d[geo.wo..].fill(T::zero());
                    }
                }
            }
            let xg = |i: usize| &x[(n0 + i) * in_sample + gi * group_in..][..group_in];
            if need_dw {
                for i in 0..nb {
                    if l.wide() {
                        im2col_wide(padded(xg(i), geo, &l, &mut pad), geo, &l, &mut cols, cols_n, i * l.span);
                    } else {
                        im2col(xg(i), geo, &mut cols, cols_n, i * l.span);
                    }
                }
                // dW_g += gy_g (og x B span) * cols^T (B span x ckk)
                gemm(og, cols_n, ckk, &gyg, false, &cols, true, &mut dw[gi * og * ckk..(gi + 1) * og * ckk], true);
            }
            if need_dx {
                // dcols = W_g^T (ckk x og) * gy_g (og x B span)
                gemm(ckk, og, cols_n, &w[gi * og * ckk..(gi + 1) * og * ckk], true, &gyg, false, &mut cols, false);
                for i in 0..nb {
                    let d = &mut dxs[i * in_sample + gi * group_in..][..group_in];
                    if !l.wide() {
                        col2im(&cols, geo, d, cols_n, i * l.span);
                    } else if (ph, pw) == (0, 0) {
                        col2im_wide(&cols, geo, &l, d, cols_n, i * l.span);
                    } else {
                        // Into a padded scratch plane, then its interior into the gradient.
                        dpad.clear();
                        dpad.resize(cg * l.hp * l.wp, T::zero());
                        col2im_wide(&cols, geo, &l, &mut dpad, cols_n, i * l.span);
                        for c in 0..cg {
                            for ih in 0..geo.h {
                                let src = &dpad[(c * l.hp + ih + ph) * l.wp + pw..][..geo.w];
                                for (d, &v) in d[(c * geo.h + ih) * geo.w..][..geo.w].iter_mut().zip(src) {
                                    *d = *d + v;
                                }
                            }
                        }
                    }
                }
            }
        }
        crate::pool::recycle(cols);
        crate::pool::recycle(gyg);
    };
    let zeros = || vec![T::zero(); if need_dw { wlen } else { 0 }];
    let dw = if need_dx {
        dx.par_chunks_mut((block * in_sample).max(1))
            .enumerate()
            .fold(zeros, |mut dw, (bi, dxs)| {
                per_block(bi * block, dxs.len() / in_sample.max(1), dxs, &mut dw);
                dw
            })
            .reduce(zeros, add_vecs)
    } else {
        (0..geo.n.div_ceil(block))
            .into_par_iter()
            .fold(zeros, |mut dw, bi| {
                per_block(bi * block, block.min(geo.n - bi * block), &mut [], &mut dw);
                dw
            })
            .reduce(zeros, add_vecs)
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
        crate::shape::numel_of(OP, &shape);
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
                    (need_dx.then(|| Tensor::zeros_like(&x)), need_dw.then(|| Tensor::zeros_like(&w)))
                } else {
                    let (sx, sw, sg) = (x.storage_arc(), w.storage_arc(), g.storage_arc());
                    let (dx, dw) = with_float!(cpu(&sx), OP, T, xv => {
                        let wv = T::slice(cpu(&sw)).expect("same dtype");
                        let gv = T::slice(cpu(&sg)).expect("same dtype");
                        let (dx, dw) = conv_backward(xv, wv, gv, &geo, need_dx, need_dw);
                        (T::into_storage(dx), T::into_storage(dw))
                    });
                    // Fix: `conv_backward` returns an empty buffer for a gradient that is not
                    // needed; wrapping it in a tensor of the full shape anyway tripped the
                    // layout-exceeds-storage assertion (e.g. whenever the input is data that
                    // does not require grad). Only build the gradients asked for.
                    (need_dx.then(|| Tensor::from_cpu(dx, x.shape())), need_dw.then(|| Tensor::from_cpu(dw, w.shape())))
                };
                let mut out: Grads = smallvec![dx, dw];
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

#[cfg(test)]
mod tests {
    use super::Conv2dOptions;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64, transposed_storage};
    use crate::testing::{gradcheck, gradcheck_with, GradcheckOptions};
    use crate::{DType, Device, Tensor};

    fn opts(stride: usize, padding: usize, dilation: usize, groups: usize) -> Conv2dOptions {
        Conv2dOptions { stride: (stride, stride), padding: (padding, padding), dilation: (dilation, dilation), groups }
    }

    /// A deterministic, varied input of `shape`.
    fn vals(shape: &[usize], seed: u64) -> Tensor {
        let n: usize = shape.iter().product();
        let v = (0..n as u64).map(|i| ((i * 7919 + seed * 104729) % 23) as f64 / 11.0 - 1.0).collect();
        Tensor::from_vec_f64(v, shape)
    }

    /// Direct-loop convolution, for reference.
    fn naive(x: &Tensor, w: &Tensor, b: Option<&Tensor>, o: Conv2dOptions) -> (Vec<usize>, Vec<f64>) {
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
        let y = x9().conv2d(&w4(), None, Conv2dOptions::default());
        // y[i][j] = x[i][j] + 2 x[i][j+1] + 3 x[i+1][j] + 4 x[i+1][j+1]
        assert_eq!((y.shape(), y.to_vec_f64()), (&[1, 1, 2, 2][..], vec![27.0, 37.0, 57.0, 67.0]));
        let b = t64(&[0.5], &[1]);
        assert_eq!(x9().conv2d(&w4(), Some(&b), Conv2dOptions::default()).to_vec_f64(), vec![27.5, 37.5, 57.5, 67.5]);
        let y32 = x9().to_dtype(DType::F32).conv2d(&w4().to_dtype(DType::F32), None, Conv2dOptions::default());
        assert_eq!(y32.to_vec(), vec![27.0, 37.0, 57.0, 67.0]);
    }

    #[test]
    fn conv2d_forward_stride_padding_dilation() {
        let y = x9().conv2d(&w4(), None, opts(2, 1, 1, 1));
        assert_eq!((y.shape(), y.to_vec_f64()), (&[1, 1, 2, 2][..], vec![0.0, 11.0, 30.0, 67.0]));
        let d = x9().conv2d(&w4(), None, opts(1, 0, 2, 1));
        assert_eq!((d.shape(), d.to_vec_f64()), (&[1, 1, 1, 1][..], vec![54.0]));
        // Asymmetric options: stride (1, 2), padding (0, 1).
        let o = Conv2dOptions { stride: (1, 2), padding: (0, 1), ..Default::default() };
        let a = x9().conv2d(&w4(), None, o);
        assert_eq!(a.shape(), &[1, 1, 2, 2]);
        assert_eq!(a.to_vec_f64(), naive(&x9(), &w4(), None, o).1);
    }

    #[test]
    fn conv2d_forward_channels_and_groups() {
        let x = leaf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[1, 2, 2, 2]);
        let grouped = x.conv2d(&t64(&[2.0, -1.0], &[2, 1, 1, 1]), None, opts(1, 0, 1, 2));
        assert_eq!(grouped.to_vec_f64(), vec![2.0, 4.0, 6.0, 8.0, -5.0, -6.0, -7.0, -8.0]);
        let summed = x.conv2d(&Tensor::ones(&[1, 2, 2, 2]).to_dtype(DType::F64), None, Conv2dOptions::default());
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
        let y = x.conv2d(&w, Some(&b), Conv2dOptions::default());
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
        // Regression: a gradient that was not needed came back as an empty buffer wrapped
        // in a full-shape tensor, which panicked (data inputs never require grad).
        let x = vals(&[2, 1, 3, 3], 1);
        let w = w4();
        let b = leaf(&[0.5], &[1]);
        x.conv2d(&w, Some(&b), Conv2dOptions::default()).sum().backward();
        assert!(w.grad().is_some() && b.grad().is_some());
        assert_eq!(grad(&b), vec![8.0]);
        let xl = x9();
        xl.conv2d(&t64(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]), None, Conv2dOptions::default()).sum().backward();
        assert_eq!(grad(&xl), vec![1.0, 3.0, 2.0, 4.0, 10.0, 6.0, 3.0, 7.0, 4.0]);
        let bl = leaf(&[0.0], &[1]);
        x.conv2d(&t64(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]), Some(&bl), Conv2dOptions::default()).sum().backward();
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
            let o = Conv2dOptions { stride, padding: (0, 2), dilation: (2, 1), groups: 2 };
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
        let o = GradcheckOptions { eps: 1e-5, ..Default::default() };
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
        Tensor::zeros(&[1, 3, 4, 4]).conv2d(&Tensor::zeros(&[2, 2, 3, 3]), None, Conv2dOptions::default());
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
            Conv2dOptions::default(),
        );
    }

    #[test]
    #[should_panic(
        expected = "conv2d: input [1, 1, 2, 2] (padded by (0, 0)) is smaller than the dilated kernel (3, 3)"
    )]
    fn conv2d_kernel_larger_than_input() {
        Tensor::zeros(&[1, 1, 2, 2]).conv2d(&Tensor::zeros(&[1, 1, 3, 3]), None, Conv2dOptions::default());
    }

    #[test]
    #[should_panic(expected = "conv2d: expected a 4-D input [N, C, H, W], got shape [3, 4, 4]")]
    fn conv2d_needs_4d_input() {
        Tensor::zeros(&[3, 4, 4]).conv2d(&Tensor::zeros(&[1, 3, 3, 3]), None, Conv2dOptions::default());
    }

    #[test]
    #[should_panic(
        expected = "conv1d: expected a 3-D input [N, C, L] and a 3-D weight [O, C / groups, k], got shapes [4, 5] and [1, 4, 3]"
    )]
    fn conv1d_needs_3d_input() {
        Tensor::zeros(&[4, 5]).conv1d(&Tensor::zeros(&[1, 4, 3]), None, 1, 0, 1, 1);
    }
}
