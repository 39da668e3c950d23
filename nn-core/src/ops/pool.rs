//! 2-D pooling: max (with the argmax saved for backward), average, adaptive average.
//! Each `[H, W]` plane is independent; planes are spread over threads.

use std::sync::Arc;

use num_traits::{Float, Zero};
use rayon::prelude::*;
use smallvec::smallvec;

use super::{check_float, cpu};
use crate::autograd::{op_result, Grads};
use crate::device::Device;
use crate::dtype::Element;
use crate::shape::Layout;
use crate::storage::{with_float, Storage};
use crate::tensor::Tensor;

/// Window, stride, padding, dilation and rounding of a 2-D pooling op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2dOptions {
    /// Window size `(height, width)`.
    pub kernel: (usize, usize),
    /// Step between windows; PyTorch's default is the kernel size.
    pub stride: (usize, usize),
    /// Implicit padding on both sides (`-inf` for max, zeros for average).
    pub padding: (usize, usize),
    /// Spacing between window taps (max pooling only).
    pub dilation: (usize, usize),
    /// Round the output size up instead of down.
    pub ceil_mode: bool,
}

impl Pool2dOptions {
    /// A `k x k` window with stride `k` and no padding (PyTorch's defaults).
    pub fn new(kernel: usize) -> Self {
        Pool2dOptions {
            kernel: (kernel, kernel),
            stride: (kernel, kernel),
            padding: (0, 0),
            dilation: (1, 1),
            ceil_mode: false,
        }
    }
}

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

#[derive(Clone, Copy)]
struct Planes {
    planes: usize,
    h: usize,
    w: usize,
    ho: usize,
    wo: usize,
}

#[track_caller]
fn planes(op: &str, x: &Tensor, o: &Pool2dOptions) -> (Planes, Vec<usize>) {
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
    (Planes { planes: x.shape()[..r - 2].iter().product(), h, w, ho, wo }, shape)
}

impl Tensor {
    /// 2-D max pooling over `[N, C, H, W]` (or `[C, H, W]`); padded positions never win.
    ///
    /// ```
    /// use nn_core::{ops::Pool2dOptions, Tensor};
    /// let x = Tensor::arange(0.0, 16.0, 1.0).reshape(&[1, 1, 4, 4]);
    /// assert_eq!(x.max_pool2d(Pool2dOptions::new(2)).to_vec(), vec![5.0, 7.0, 13.0, 15.0]);
    /// ```
    #[track_caller]
    pub fn max_pool2d(&self, options: Pool2dOptions) -> Tensor {
        let _t = crate::trace::op("max_pool2d", &[self], || crate::trace::pool_attrs(&options));
        self.max_pool2d_impl(options).0
    }

    /// Max pooling that also returns the flat `H * W` index of each maximum (`i64`), as
    /// PyTorch's `return_indices=True`.
    #[track_caller]
    pub fn max_pool2d_with_indices(&self, options: Pool2dOptions) -> (Tensor, Tensor) {
        let _t = crate::trace::op("max_pool2d_with_indices", &[self], || crate::trace::pool_attrs(&options));
        let (out, argmax) = self.max_pool2d_impl(options);
        let indices = match argmax {
            None => Tensor::full_on(out.shape(), 0.0, crate::DType::I64, Device::Meta),
            Some(a) => {
                let (r, w) = (out.rank(), self.shape()[self.rank() - 1]);
                let flat = a.flat_indices(out.shape()[r - 2] * out.shape()[r - 1], out.shape()[r - 1], w);
                Tensor::from_cpu(crate::storage::CpuStorage::I64(flat), out.shape())
            }
        };
        (out, indices)
    }

    /// The pooled values and (on CPU) where each maximum came from, shared with backward.
    #[track_caller]
    fn max_pool2d_impl(&self, options: Pool2dOptions) -> (Tensor, Option<Arc<Argmax>>) {
        const OP: &str = "max_pool2d";
        check_float(OP, self);
        let (pl, shape) = planes(OP, self, &options);
        let numel = crate::shape::numel_of(OP, &shape);
        let in_shape = self.shape().to_vec();
        if self.device() == Device::Meta {
            // The node is recorded on meta too, so pooling a meta tensor that requires grad
            // gives one that requires grad (shapes flow through backward as on the CPU).
            let storage = Arc::new(Storage::Meta { dtype: self.dtype(), len: numel });
            let v = op_result(OP, storage, Layout::contiguous(&shape), &[self], || {
                move |g: &Tensor, _: &[bool]| -> Grads {
                    smallvec![Some(Tensor::full_on(&in_shape, 0.0, g.dtype(), Device::Meta))]
                }
            });
            return (v, None);
        }
        let x = self.contiguous();
        let s = x.storage_arc();
        let (k, st, p, d) = (options.kernel, options.stride, options.padding, options.dilation);
        let plane_out = (pl.ho * pl.wo).max(1);
        // Spread planes over threads only when there is enough work per task.
        let parallel = numel * k.0 * k.1 >= super::PAR_THRESHOLD * 8;
        let window2x2 = k == (2, 2) && st == (2, 2) && p == (0, 0) && d == (1, 1) && pl.wo >= 4;
        let (vals, argmax) = with_float!(cpu(&s), OP, T, v => {
            let mut out = T::alloc_buffer(numel);
            out.resize(numel, T::zero());
            let argmax = if window2x2 {
                // The pooling of almost every CNN has its own vectorised kernel.
                let mut codes = vec![0u8; numel];
                let plane = |q: usize, y: &mut [T], c: &mut [u8]| {
                    let src = &v[q * pl.h * pl.w..(q + 1) * pl.h * pl.w];
                    for oh in 0..pl.ho {
                        let (r, o) = (2 * oh * pl.w, oh * pl.wo);
                        let rows = (&src[r..r + 2 * pl.wo], &src[r + pl.w..r + pl.w + 2 * pl.wo]);
                        max_2x2_row(rows.0, rows.1, &mut y[o..o + pl.wo], &mut c[o..o + pl.wo]);
                    }
                };
                if parallel {
                    out.par_chunks_mut(plane_out).zip(codes.par_chunks_mut(plane_out)).enumerate().for_each(|(q, (y, c))| plane(q, y, c));
                } else {
                    out.chunks_mut(plane_out).zip(codes.chunks_mut(plane_out)).enumerate().for_each(|(q, (y, c))| plane(q, y, c));
                }
                Argmax::Window2x2(codes)
            } else {
                let mut idx = vec![0i64; numel];
                let fits = (pl.ho - 1) * st.0 + k.0 <= pl.h && (pl.wo - 1) * st.1 + k.1 <= pl.w;
                let plane = |q: usize, y: &mut [T], ix: &mut [i64]| {
                    let src = &v[q * pl.h * pl.w..(q + 1) * pl.h * pl.w];
                    if p == (0, 0) && d == (1, 1) && fits {
                        // No padding and every window inside the plane (not so with
                        // `ceil_mode`): walk window rows as slices, no per-tap bounds logic.
                        for oh in 0..pl.ho {
                            for ow in 0..pl.wo {
                                let base = oh * st.0 * pl.w + ow * st.1;
                                let (mut best, mut bi) = (src[base], base);
                                for ki in 0..k.0 {
                                    let start = base + ki * pl.w;
                                    for (kj, &val) in src[start..start + k.1].iter().enumerate() {
                                        let take = beats(val, best);
                                        best = if take { val } else { best };
                                        bi = if take { start + kj } else { bi };
                                    }
                                }
                                y[oh * pl.wo + ow] = best;
                                ix[oh * pl.wo + ow] = bi as i64;
                            }
                        }
                        return;
                    }
                    for oh in 0..pl.ho {
                        for ow in 0..pl.wo {
                            let mut best = T::neg_infinity();
                            let mut bi: i64 = -1;
                            for ki in 0..k.0 {
                                let ih = (oh * st.0 + ki * d.0) as isize - p.0 as isize;
                                if ih < 0 || ih >= pl.h as isize {
                                    continue;
                                }
                                for kj in 0..k.1 {
                                    let iw = (ow * st.1 + kj * d.1) as isize - p.1 as isize;
                                    if iw < 0 || iw >= pl.w as isize {
                                        continue;
                                    }
                                    let flat = ih as usize * pl.w + iw as usize;
                                    let val = src[flat];
                                    if bi < 0 || beats(val, best) {
                                        best = val;
                                        bi = flat as i64;
                                    }
                                }
                            }
                            y[oh * pl.wo + ow] = best;
                            ix[oh * pl.wo + ow] = bi.max(0);
                        }
                    }
                };
                if parallel {
                    out.par_chunks_mut(plane_out).zip(idx.par_chunks_mut(plane_out)).enumerate().for_each(|(q, (y, ix))| plane(q, y, ix));
                } else {
                    out.chunks_mut(plane_out).zip(idx.chunks_mut(plane_out)).enumerate().for_each(|(q, (y, ix))| plane(q, y, ix));
                }
                Argmax::Flat(idx)
            };
            (T::into_storage(out), argmax)
        });
        let argmax = Arc::new(argmax);
        let saved = argmax.clone();
        let out = op_result(OP, Arc::new(Storage::Cpu(vals)), Layout::contiguous(&shape), &[self], || {
            move |g: &Tensor, _: &[bool]| -> Grads {
                let g = g.contiguous();
                let sg = g.storage_arc();
                let flat = match &*saved {
                    Argmax::Flat(idx) => Some(&idx[..]),
                    Argmax::Window2x2(_) => None,
                };
                let dx = with_float!(cpu(&sg), OP, T, gv => {
                    let n = pl.planes * pl.h * pl.w;
                    let mut dx = T::alloc_buffer(n);
                    dx.resize(n, T::zero());
                    let scatter = |q: usize, dxp: &mut [T]| {
                        let gq = &gv[q * plane_out..(q + 1) * plane_out];
                        match (&*saved, flat) {
                            (Argmax::Window2x2(codes), _) => {
                                let cq = &codes[q * plane_out..(q + 1) * plane_out];
                                for oh in 0..pl.ho {
                                    let (rows, o) = (&mut dxp[2 * oh * pl.w..(2 * oh + 2) * pl.w], oh * pl.wo);
                                    let (r0, r1) = rows.split_at_mut(pl.w);
                                    max_2x2_row_backward(&cq[o..o + pl.wo], &gq[o..o + pl.wo], r0, r1);
                                }
                            }
                            (_, Some(idx)) => {
                                for (&t, &gj) in idx[q * plane_out..(q + 1) * plane_out].iter().zip(gq) {
                                    dxp[t as usize] += gj;
                                }
                            }
                            _ => unreachable!(),
                        }
                    };
                    if n >= super::PAR_THRESHOLD * 4 {
                        dx.par_chunks_mut((pl.h * pl.w).max(1)).enumerate().for_each(|(q, dxp)| scatter(q, dxp));
                    } else {
                        dx.chunks_mut((pl.h * pl.w).max(1)).enumerate().for_each(|(q, dxp)| scatter(q, dxp));
                    }
                    T::into_storage(dx)
                });
                smallvec![Some(Tensor::from_cpu(dx, &in_shape))]
            }
        });
        (out, Some(argmax))
    }

    /// 2-D average pooling; `count_include_pad` counts padded zeros in the divisor
    /// (PyTorch's default is `true`).
    ///
    /// ```
    /// use nn_core::{ops::Pool2dOptions, Tensor};
    /// let x = Tensor::arange(0.0, 16.0, 1.0).reshape(&[1, 1, 4, 4]);
    /// assert_eq!(x.avg_pool2d(Pool2dOptions::new(2), true).to_vec(), vec![2.5, 4.5, 10.5, 12.5]);
    /// ```
    #[track_caller]
    pub fn avg_pool2d(&self, options: Pool2dOptions, count_include_pad: bool) -> Tensor {
        let _t = crate::trace::op("avg_pool2d", &[self], || {
            [
                crate::trace::pool_attrs(&options),
                vec![("count_include_pad", crate::trace::Attr::Bool(count_include_pad))],
            ]
            .concat()
        });
        const OP: &str = "avg_pool2d";
        check_float(OP, self);
        if options.dilation != (1, 1) {
            panic!("avg_pool2d: dilation is not supported (PyTorch's avg_pool2d has none), got {:?}", options.dilation);
        }
        let (pl, shape) = planes(OP, self, &options);
        let (k, s, p) = (options.kernel, options.stride, options.padding);
        // Window bounds and divisor for every output position, shared by both passes.
        let windows = move |oh: usize, ow: usize| -> (usize, usize, usize, usize, f64) {
            let hs = (oh * s.0) as isize - p.0 as isize;
            let ws = (ow * s.1) as isize - p.1 as isize;
            let he = (hs + k.0 as isize).min((pl.h + p.0) as isize);
            let we = (ws + k.1 as isize).min((pl.w + p.1) as isize);
            let pool = ((he - hs) * (we - ws)) as f64;
            let (hs, ws) = (hs.max(0) as usize, ws.max(0) as usize);
            let (he, we) = (he.min(pl.h as isize) as usize, we.min(pl.w as isize) as usize);
            let div = if count_include_pad { pool } else { ((he - hs) * (we - ws)) as f64 };
            (hs, he, ws, we, div)
        };
        pool_generic(OP, self, pl, &shape, windows)
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
        let _t = crate::trace::op("adaptive_avg_pool2d", &[self], || {
            vec![("output_size", crate::trace::ints(&[output_size.0, output_size.1]))]
        });
        const OP: &str = "adaptive_avg_pool2d";
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
        let pl = Planes { planes: self.shape()[..r - 2].iter().product(), h, w, ho: oh_n, wo: ow_n };
        let windows = move |oh: usize, ow: usize| -> (usize, usize, usize, usize, f64) {
            let (hs, he) = (oh * h / oh_n, ((oh + 1) * h).div_ceil(oh_n));
            let (ws, we) = (ow * w / ow_n, ((ow + 1) * w).div_ceil(ow_n));
            (hs, he, ws, we, ((he - hs) * (we - ws)) as f64)
        };
        pool_generic(OP, self, pl, &shape, windows)
    }
}

/// Whether `val` replaces `best` as the running maximum: it is larger, or the first NaN
/// (NaN propagates, as in PyTorch). Ties keep the earlier position.
#[inline(always)]
fn beats<T: Float>(val: T, best: T) -> bool {
    // Non-short-circuit `|`/`&`: a select, not a jump; on real data the comparison is a
    // coin toss the branch predictor loses.
    (val > best) | (val.is_nan() & !best.is_nan())
}

/// Where each maximum of a max pool came from, saved for backward.
enum Argmax {
    /// 2x2 windows with stride 2: the winner's position in its window (`0..4`, row-major).
    Window2x2(Vec<u8>),
    /// Any other window: the flat `H * W` index in the plane.
    Flat(Vec<i64>),
}

impl Argmax {
    /// PyTorch's flat in-plane indices, for planes of `plane_out` outputs `wo` wide, over
    /// inputs `w` wide.
    fn flat_indices(&self, plane_out: usize, wo: usize, w: usize) -> Vec<i64> {
        match self {
            Argmax::Flat(idx) => idx.clone(),
            Argmax::Window2x2(codes) => codes
                .iter()
                .enumerate()
                .map(|(j, &c)| {
                    let (oh, ow) = ((j % plane_out.max(1)) / wo, j % wo);
                    ((2 * oh + (c as usize >> 1)) * w + 2 * ow + (c as usize & 1)) as i64
                })
                .collect(),
        }
    }
}

/// Four outputs of a 2x2, stride-2 max pool from eight values of each of the two input
/// rows. A tree of three comparisons per window (left pair, right pair, then the two
/// winners) picks the same element as a row-major scan would; written over fixed-size
/// arrays without branches so the compiler turns the four lanes into vector instructions
/// (measured 6x faster than the scalar loop on a `[32, 8, 26, 26]` input).
#[inline(always)]
fn max_2x2_group<T: Float>(r0: &[T; 8], r1: &[T; 8], y: &mut [T; 4], code: &mut [u8; 4]) {
    for l in 0..4 {
        let (a, b, c, d) = (r0[2 * l], r0[2 * l + 1], r1[2 * l], r1[2 * l + 1]);
        let tb = beats(b, a);
        let m0 = if tb { b } else { a };
        let td = beats(d, c);
        let m1 = if td { d } else { c };
        let t = beats(m1, m0);
        y[l] = if t { m1 } else { m0 };
        code[l] = if t { 2 + td as u8 } else { tb as u8 };
    }
}

/// One output row (`y.len() >= 4` outputs) of a 2x2, stride-2 max pool from its two input
/// rows. Groups of four; the last group overlaps the one before when the width is not a
/// multiple of four (rewriting the same values), so there is no scalar tail.
#[inline]
fn max_2x2_row<T: Float>(r0: &[T], r1: &[T], y: &mut [T], code: &mut [u8]) {
    let wo = y.len();
    let mut ow = 0;
    loop {
        let s = ow.min(wo - 4);
        let (a, b) = (&r0[2 * s..2 * s + 8], &r1[2 * s..2 * s + 8]);
        let (ys, cs) = (&mut y[s..s + 4], &mut code[s..s + 4]);
        max_2x2_group(a.try_into().unwrap(), b.try_into().unwrap(), ys.try_into().unwrap(), cs.try_into().unwrap());
        if s == wo - 4 {
            break;
        }
        ow += 4;
    }
}

/// Backward of [`max_2x2_row`]: routes each gradient to its window's winner and writes
/// zeros to the other three positions (windows do not overlap), branch-free.
#[inline]
fn max_2x2_row_backward<T: Float>(code: &[u8], g: &[T], r0: &mut [T], r1: &mut [T]) {
    for (((&c, &g), d0), d1) in code.iter().zip(g).zip(r0.chunks_exact_mut(2)).zip(r1.chunks_exact_mut(2)) {
        let z = T::zero();
        d0[0] = if c == 0 { g } else { z };
        d0[1] = if c == 1 { g } else { z };
        d1[0] = if c == 2 { g } else { z };
        d1[1] = if c == 3 { g } else { z };
    }
}

/// Average pooling over windows given by `windows(oh, ow) -> (h0, h1, w0, w1, divisor)`.
fn pool_generic(
    op: &'static str,
    x: &Tensor,
    pl: Planes,
    shape: &[usize],
    windows: impl Fn(usize, usize) -> (usize, usize, usize, usize, f64) + Copy + Send + Sync + 'static,
) -> Tensor {
    let numel = crate::shape::numel_of(op, shape);
    let storage = if x.device() == Device::Meta {
        Storage::Meta { dtype: x.dtype(), len: numel }
    } else {
        let xc = x.contiguous();
        let s = xc.storage_arc();
        Storage::Cpu(with_float!(cpu(&s), op, T, v => {
            let mut out = vec![T::zero(); numel];
            out.par_chunks_mut((pl.ho * pl.wo).max(1)).enumerate().for_each(|(q, y)| {
                let src = &v[q * pl.h * pl.w..(q + 1) * pl.h * pl.w];
                for oh in 0..pl.ho {
                    for ow in 0..pl.wo {
                        let (h0, h1, w0, w1, div) = windows(oh, ow);
                        let mut acc = T::zero();
                        for ih in h0..h1 {
                            for iw in w0..w1 {
                                acc += src[ih * pl.w + iw];
                            }
                        }
                        y[oh * pl.wo + ow] = acc / T::from_f64(div);
                    }
                }
            });
            T::into_storage(out)
        }))
    };
    let in_shape = x.shape().to_vec();
    op_result(op, Arc::new(storage), Layout::contiguous(shape), &[x], || {
        move |g: &Tensor, _: &[bool]| -> Grads {
            if g.device() == Device::Meta {
                return smallvec![Some(Tensor::full_on(&in_shape, 0.0, g.dtype(), Device::Meta))];
            }
            let g = g.contiguous();
            let sg = g.storage_arc();
            let dx = with_float!(cpu(&sg), op, T, gv => {
                let mut dx = vec![T::zero(); pl.planes * pl.h * pl.w];
                dx.par_chunks_mut((pl.h * pl.w).max(1)).enumerate().for_each(|(q, dxp)| {
                    for oh in 0..pl.ho {
                        for ow in 0..pl.wo {
                            let (h0, h1, w0, w1, div) = windows(oh, ow);
                            let share = gv[q * pl.ho * pl.wo + oh * pl.wo + ow] / T::from_f64(div);
                            for ih in h0..h1 {
                                for iw in w0..w1 {
                                    dxp[ih * pl.w + iw] += share;
                                }
                            }
                        }
                    }
                });
                T::into_storage(dx)
            });
            smallvec![Some(Tensor::from_cpu(dx, &in_shape))]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::Pool2dOptions;
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    /// A 4x4 plane with distinct values: `[[3, 9, 1, 4], [7, 2, 8, 6], [0, 5, 15, 11], [13, 10, 12, 14]]`.
    const V: [f64; 16] = [3., 9., 1., 4., 7., 2., 8., 6., 0., 5., 15., 11., 13., 10., 12., 14.];
    /// A 5x5 plane with distinct values `7 i mod 25`.
    fn v5() -> Vec<f64> {
        (0..25).map(|i| ((i * 7) % 25) as f64).collect()
    }

    fn opt(k: usize, s: usize, p: usize, d: usize, ceil_mode: bool) -> Pool2dOptions {
        Pool2dOptions { kernel: (k, k), stride: (s, s), padding: (p, p), dilation: (d, d), ceil_mode }
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
        let (y, i) = x.max_pool2d_with_indices(Pool2dOptions::new(2));
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
        x.max_pool2d(Pool2dOptions::new(2)).exp().mean().backward();
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

    /// A row-major scan of every 2x2 window (first maximum wins, NaN propagates): the
    /// reference for the vectorised 2x2 kernel.
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
                        if best.1 < 0 || val > best.0 || val.is_nan() && !best.0.is_nan() {
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
                let (y, i) = x.max_pool2d_with_indices(Pool2dOptions::new(2));
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
        gradcheck(|t| t[0].max_pool2d(Pool2dOptions::new(2)), &[distinct(&[2, 2, 6, 9])]).unwrap();
        // A transposed (non-contiguous) input pools like its contiguous copy.
        let x = distinct(&[2, 10, 8]).transpose(1, 2);
        assert_eq!(
            x.max_pool2d(Pool2dOptions::new(2)).to_vec_f64(),
            x.contiguous().max_pool2d(Pool2dOptions::new(2)).to_vec_f64()
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
        assert_eq!(plain.avg_pool2d(Pool2dOptions::new(2), true).to_vec_f64(), vec![2.5, 4.5, 10.5, 12.5]);
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
        assert_eq!(
            nhwc.max_pool2d(Pool2dOptions::new(2)).to_vec_f64(),
            x.max_pool2d(Pool2dOptions::new(2)).to_vec_f64()
        );
        let t = x.transpose(2, 3);
        assert_eq!(
            t.avg_pool2d(Pool2dOptions::new(2), true).to_vec_f64(),
            t.contiguous().avg_pool2d(Pool2dOptions::new(2), true).to_vec_f64()
        );
    }

    #[test]
    fn pooling_in_f32_and_on_meta() {
        let x = Tensor::arange(0.0, 16.0, 1.0).reshape(&[1, 1, 4, 4]);
        assert_eq!(x.max_pool2d(Pool2dOptions::new(2)).to_vec(), vec![5.0, 7.0, 13.0, 15.0]);
        assert_eq!(x.adaptive_avg_pool2d((2, 2)).to_vec(), vec![2.5, 4.5, 10.5, 12.5]);
        let m = Tensor::full_on(&[8, 3, 7, 7], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        assert_eq!(m.max_pool2d(opt(3, 2, 1, 1, true)).shape(), &[8, 3, 4, 4]);
        assert_eq!(m.max_pool2d_with_indices(Pool2dOptions::new(2)).1.dtype(), DType::I64);
        let a = m.avg_pool2d(opt(2, 2, 0, 1, false), true);
        assert_eq!((a.shape(), a.device()), (&[8, 3, 3, 3][..], Device::Meta));
        let ad = m.adaptive_avg_pool2d((5, 5));
        assert_eq!(ad.shape(), &[8, 3, 5, 5]);
        // Regression: max pooling on meta dropped the graph (the result did not require grad).
        let mp = m.max_pool2d(Pool2dOptions::new(2));
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
        Tensor::zeros(&[1, 1, 2, 2]).avg_pool2d(Pool2dOptions::new(3), true);
    }

    #[test]
    #[should_panic(
        expected = "adaptive_avg_pool2d: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape [4, 4]"
    )]
    fn adaptive_pool_needs_3d_or_4d_input() {
        Tensor::zeros(&[4, 4]).adaptive_avg_pool2d((2, 2));
    }
}
