//! Pooling kernels: the validated plane geometry and window rules an op hands over.

use super::{cpu, Storage};
use crate::dtype::DType;

/// Window, stride, padding, dilation and rounding of a 2-D pooling op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2dConfig {
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

impl Pool2dConfig {
    /// A `k x k` window with stride `k` and no padding (PyTorch's defaults).
    pub fn new(kernel: usize) -> Self {
        Pool2dConfig {
            kernel: (kernel, kernel),
            stride: (kernel, kernel),
            padding: (0, 0),
            dilation: (1, 1),
            ceil_mode: false,
        }
    }
}

/// The planes of a 2-D pooling: `planes` independent `[h, w]` inputs, each pooled to
/// `[ho, wo]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolPlanes {
    /// Number of planes (the product of the leading dims).
    pub planes: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output height.
    pub ho: usize,
    /// Output width.
    pub wo: usize,
}

/// A max pooling: its planes and options (padded positions never win; NaN propagates; ties
/// keep the earlier position).
#[derive(Clone, Copy, Debug)]
pub(crate) struct MaxPool {
    /// The plane geometry.
    pub planes: PoolPlanes,
    /// Window, stride, padding, dilation.
    pub options: Pool2dConfig,
}

/// How an average pooling places its windows.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AvgWindows {
    /// PyTorch's `avg_pool2d`.
    Fixed {
        /// Window size.
        kernel: (usize, usize),
        /// Step between windows.
        stride: (usize, usize),
        /// Zeros on both sides.
        padding: (usize, usize),
        /// Whether padded zeros count in the divisor.
        count_include_pad: bool,
    },
    /// PyTorch's `adaptive_avg_pool2d`: window `i` spans
    /// `floor(i * H / ho) .. ceil((i + 1) * H / ho)`.
    Adaptive,
}

/// An average pooling: its planes and windows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AvgPool {
    /// The plane geometry.
    pub planes: PoolPlanes,
    /// Where the windows lie.
    pub windows: AvgWindows,
}

impl AvgPool {
    /// The input rows `h0..h1` and columns `w0..w1` averaged into output `(oh, ow)`, and
    /// the divisor: `(h0, h1, w0, w1, divisor)`.
    pub(crate) fn window(&self, oh: usize, ow: usize) -> (usize, usize, usize, usize, f64) {
        let pl = &self.planes;
        match self.windows {
            AvgWindows::Fixed { kernel: k, stride: s, padding: p, count_include_pad } => {
                let hs = (oh * s.0) as isize - p.0 as isize;
                let ws = (ow * s.1) as isize - p.1 as isize;
                let he = (hs + k.0 as isize).min((pl.h + p.0) as isize);
                let we = (ws + k.1 as isize).min((pl.w + p.1) as isize);
                let pool = ((he - hs) * (we - ws)) as f64;
                let (hs, ws) = (hs.max(0) as usize, ws.max(0) as usize);
                let (he, we) = (he.min(pl.h as isize) as usize, we.min(pl.w as isize) as usize);
                let div = if count_include_pad { pool } else { ((he - hs) * (we - ws)) as f64 };
                (hs, he, ws, we, div)
            }
            AvgWindows::Adaptive => {
                let (h, w, oh_n, ow_n) = (pl.h, pl.w, pl.ho, pl.wo);
                let (hs, he) = (oh * h / oh_n, ((oh + 1) * h).div_ceil(oh_n));
                let (ws, we) = (ow * w / ow_n, ((ow + 1) * w).div_ceil(ow_n));
                (hs, he, ws, we, ((he - hs) * (we - ws)) as f64)
            }
        }
    }
}

/// Where each maximum of a max pooling came from, in the backend's own form (kept for
/// backward, and turned into PyTorch's flat indices on request).
pub(crate) enum Argmax {
    /// Recorded by the CPU kernels.
    Cpu(cpu::pooling::Argmax),
    /// Recorded by the GPU kernels: the `i64` in-plane positions (PyTorch's indices).
    #[cfg(feature = "gpu")]
    Gpu(super::gpu::GpuStorage),
    /// A meta pooling: no values, only the count.
    Meta {
        /// Number of outputs.
        len: usize,
    },
}

impl Argmax {
    /// PyTorch's flat in-plane indices (`i64`, `h * w + w` of each maximum), on the device
    /// of the pooled `values` (a GPU pooling that took the host path has its positions on
    /// the host: they are uploaded).
    pub(crate) fn flat_indices(&self, pl: &PoolPlanes, values: &Storage) -> Storage {
        match self {
            #[cfg(feature = "gpu")]
            Argmax::Cpu(a) if matches!(values, Storage::Gpu(_)) => {
                let Storage::Gpu(v) = values else { unreachable!("matched above") };
                super::gpu::upload_result(v.ctx(), a.flat_indices(pl))
            }
            Argmax::Cpu(a) => {
                let _ = values;
                Storage::Cpu(a.flat_indices(pl))
            }
            #[cfg(feature = "gpu")]
            Argmax::Gpu(g) => Storage::Gpu(g.clone()),
            Argmax::Meta { len } => Storage::Meta { dtype: DType::I64, len: *len },
        }
    }
}

impl Storage {
    /// Max pooling of contiguous planes: the values and where they came from.
    pub(crate) fn max_pool2d(&self, pool: &MaxPool) -> (Storage, Argmax) {
        let pl = &pool.planes;
        let len = pl.planes * pl.ho * pl.wo;
        match self {
            Storage::Cpu(x) => {
                // Half types through f32, as `Storage::run` does for the other kernels.
                let wide = cpu::widen::widen(x);
                let (values, argmax) = cpu::pooling::max_pool2d(wide.as_ref().unwrap_or(x), pool);
                (Storage::Cpu(cpu::widen::narrow(values, x.dtype())), Argmax::Cpu(argmax))
            }
            Storage::Meta { dtype, .. } => (Storage::Meta { dtype: *dtype, len }, Argmax::Meta { len }),
            #[cfg(feature = "gpu")]
            Storage::Gpu(g) => match super::gpu::kernels::max_pool2d(g, pool) {
                Some((values, argmax)) => (Storage::Gpu(values), Argmax::Gpu(argmax)),
                None => {
                    let x = g.host("max_pool2d");
                    let wide = cpu::widen::widen(&x);
                    let (values, argmax) = cpu::pooling::max_pool2d(wide.as_ref().unwrap_or(&x), pool);
                    (super::gpu::upload_result(g.ctx(), cpu::widen::narrow(values, x.dtype())), Argmax::Cpu(argmax))
                }
            },
        }
    }

    /// The input gradient of a max pooling from the contiguous output gradient `self`.
    pub(crate) fn max_pool2d_backward(&self, argmax: &Argmax, pool: &MaxPool) -> Storage {
        let pl = &pool.planes;
        match (self, argmax) {
            (Storage::Cpu(g), Argmax::Cpu(a)) => {
                let wide = cpu::widen::widen(g);
                let dx = cpu::pooling::max_pool2d_backward(wide.as_ref().unwrap_or(g), a, pool);
                Storage::Cpu(cpu::widen::narrow(dx, g.dtype()))
            }
            #[cfg(feature = "gpu")]
            (Storage::Gpu(g), Argmax::Cpu(a)) => {
                let g_host = g.host("max_pool2d_backward");
                let wide = cpu::widen::widen(&g_host);
                let dx = cpu::pooling::max_pool2d_backward(wide.as_ref().unwrap_or(&g_host), a, pool);
                super::gpu::upload_result(g.ctx(), cpu::widen::narrow(dx, g_host.dtype()))
            }
            #[cfg(feature = "gpu")]
            (Storage::Gpu(g), Argmax::Gpu(a)) => Storage::Gpu(
                super::gpu::kernels::max_pool2d_backward(g, a, pool).expect("the forward ran on the GPU, in f32"),
            ),
            #[cfg(feature = "gpu")]
            (Storage::Cpu(_), Argmax::Gpu(_)) => {
                unreachable!("max_pool2d_backward: a cpu gradient for a pooling recorded on the GPU")
            }
            (Storage::Meta { .. }, _) | (_, Argmax::Meta { .. }) => {
                Storage::Meta { dtype: self.dtype(), len: pl.planes * pl.h * pl.w }
            }
        }
    }

    /// Average pooling of contiguous planes.
    pub(crate) fn avg_pool2d(&self, pool: &AvgPool) -> Storage {
        let pl = &pool.planes;
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::avg_pool2d(self, pool) {
            return Storage::Gpu(out);
        }
        Storage::run([self], (self.dtype(), pl.planes * pl.ho * pl.wo), |[x]| cpu::pooling::avg_pool2d(x, pool))
    }

    /// The input gradient of an average pooling from the contiguous output gradient.
    pub(crate) fn avg_pool2d_backward(&self, pool: &AvgPool) -> Storage {
        let pl = &pool.planes;
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::avg_pool2d_backward(self, pool) {
            return Storage::Gpu(out);
        }
        Storage::run([self], (self.dtype(), pl.planes * pl.h * pl.w), |[g]| cpu::pooling::avg_pool2d_backward(g, pool))
    }
}
