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
        self.max_pool2d_with_indices(options).0
    }

    /// Max pooling that also returns the flat `H * W` index of each maximum (`i64`), as
    /// PyTorch's `return_indices=True`.
    #[track_caller]
    pub fn max_pool2d_with_indices(&self, options: Pool2dOptions) -> (Tensor, Tensor) {
        const OP: &str = "max_pool2d";
        check_float(OP, self);
        let (pl, shape) = planes(OP, self, &options);
        let numel: usize = shape.iter().product();
        if self.device() == Device::Meta {
            let v = Tensor::full_on(&shape, 0.0, self.dtype(), Device::Meta);
            return (v, Tensor::full_on(&shape, 0.0, crate::DType::I64, Device::Meta));
        }
        let x = self.contiguous();
        let s = x.storage_arc();
        let (k, st, p, d) = (options.kernel, options.stride, options.padding, options.dilation);
        let mut idx = vec![0i64; numel];
        let vals = with_float!(cpu(&s), OP, T, v => {
            let mut out = vec![T::zero(); numel];
            let plane_out = pl.ho * pl.wo;
            out.par_chunks_mut(plane_out.max(1))
                .zip(idx.par_chunks_mut(plane_out.max(1)))
                .enumerate()
                .for_each(|(q, (y, ix))| {
                    let src = &v[q * pl.h * pl.w..(q + 1) * pl.h * pl.w];
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
                                    if bi < 0 || val > best || val.is_nan() && !best.is_nan() {
                                        best = val;
                                        bi = flat as i64;
                                    }
                                }
                            }
                            y[oh * pl.wo + ow] = best;
                            ix[oh * pl.wo + ow] = bi.max(0);
                        }
                    }
                });
            T::into_storage(out)
        });
        let indices = Tensor::from_cpu(crate::storage::CpuStorage::I64(idx.clone()), &shape);
        let in_shape = self.shape().to_vec();
        let out = op_result(OP, Arc::new(Storage::Cpu(vals)), Layout::contiguous(&shape), &[self], || {
            move |g: &Tensor, _: &[bool]| -> Grads {
                let g = g.contiguous();
                let sg = g.storage_arc();
                let dx = with_float!(cpu(&sg), OP, T, gv => {
                    let mut dx = vec![T::zero(); pl.planes * pl.h * pl.w];
                    let plane_out = pl.ho * pl.wo;
                    dx.par_chunks_mut((pl.h * pl.w).max(1)).enumerate().for_each(|(q, dxp)| {
                        for j in 0..plane_out {
                            let t = idx[q * plane_out + j] as usize;
                            dxp[t] = dxp[t] + gv[q * plane_out + j];
                        }
                    });
                    T::into_storage(dx)
                });
                smallvec![Some(Tensor::from_cpu(dx, &in_shape))]
            }
        });
        (out, indices)
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

/// Average pooling over windows given by `windows(oh, ow) -> (h0, h1, w0, w1, divisor)`.
fn pool_generic(
    op: &'static str,
    x: &Tensor,
    pl: Planes,
    shape: &[usize],
    windows: impl Fn(usize, usize) -> (usize, usize, usize, usize, f64) + Copy + Send + Sync + 'static,
) -> Tensor {
    let numel: usize = shape.iter().product();
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
                                acc = acc + src[ih * pl.w + iw];
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
                                    dxp[ih * pl.w + iw] = dxp[ih * pl.w + iw] + share;
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
