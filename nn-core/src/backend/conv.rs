//! Convolution kernels: the validated geometry an op hands to the backend.

use super::{cpu, Storage};

/// Stride, zero padding, dilation and groups of a 2-D convolution (PyTorch's defaults:
/// 1, 0, 1, 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dConfig {
    /// Step between output positions, `(height, width)`.
    pub stride: (usize, usize),
    /// Zeros added on both sides, `(height, width)`.
    pub padding: (usize, usize),
    /// Spacing between kernel taps, `(height, width)`.
    pub dilation: (usize, usize),
    /// Number of channel groups; input and output channels must both divide by it.
    pub groups: usize,
}

impl Default for Conv2dConfig {
    fn default() -> Self {
        Conv2dConfig { stride: (1, 1), padding: (0, 0), dilation: (1, 1), groups: 1 }
    }
}

/// Every size a convolution kernel needs, validated once (PyTorch's letters: input
/// `[n, c, h, w]`, weight `[o, c / groups, kh, kw]`, output `[n, o, ho, wo]`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConvGeometry {
    /// Batch size.
    pub(crate) n: usize,
    /// Input channels.
    pub(crate) c: usize,
    /// Input height.
    pub(crate) h: usize,
    /// Input width.
    pub(crate) w: usize,
    /// Output channels.
    pub(crate) o: usize,
    /// Kernel height.
    pub(crate) kh: usize,
    /// Kernel width.
    pub(crate) kw: usize,
    /// Output height.
    pub(crate) ho: usize,
    /// Output width.
    pub(crate) wo: usize,
    /// Stride, padding, dilation, groups.
    pub(crate) opt: Conv2dConfig,
}

impl ConvGeometry {
    /// Input channels each group sees.
    pub(crate) fn in_channels_per_group(&self) -> usize {
        self.c / self.opt.groups
    }
    /// Output channels each group produces.
    pub(crate) fn out_channels_per_group(&self) -> usize {
        self.o / self.opt.groups
    }
    /// Rows of the column matrix: `c / groups * kh * kw`.
    pub(crate) fn col_rows(&self) -> usize {
        self.in_channels_per_group() * self.kh * self.kw
    }
    /// Output positions per channel: `ho * wo`.
    pub(crate) fn out_pixels(&self) -> usize {
        self.ho * self.wo
    }
}

impl Storage {
    /// The convolution of contiguous `self` (`[n, c, h, w]`) with contiguous `weight`
    /// (`[o, c / groups, kh, kw]`) plus the optional contiguous `bias` (`[o]`): a
    /// contiguous `[n, o, ho, wo]` buffer.
    pub(crate) fn conv2d(&self, weight: &Storage, bias: Option<&Storage>, geo: &ConvGeometry) -> Storage {
        let meta = (self.dtype(), geo.n * geo.o * geo.out_pixels());
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::conv2d(self, weight, bias, geo) {
            return Storage::Gpu(out);
        }
        // `bf16` runs on its own kernels where the CPU has them (`cpu::conv::native`).
        let widen = !cpu::conv::native(self.dtype());
        match bias {
            Some(b) => {
                Storage::run_with(widen, [self, weight, b], meta, |[x, w, b]| cpu::conv::forward(x, w, Some(b), geo))
            }
            None => Storage::run_with(widen, [self, weight], meta, |[x, w]| cpu::conv::forward(x, w, None, geo)),
        }
    }

    /// The input and weight gradients of [`conv2d`](Storage::conv2d) from the output
    /// gradient `self` (contiguous), each only when asked for (an empty buffer otherwise).
    pub(crate) fn conv2d_backward(
        &self,
        x: &Storage,
        weight: &Storage,
        geo: &ConvGeometry,
        (need_dx, need_dw): (bool, bool),
    ) -> (Storage, Storage) {
        let dtype = self.dtype();
        let dx_len = if need_dx { geo.n * geo.c * geo.h * geo.w } else { 0 };
        let dw_len = if need_dw { weight.len() } else { 0 };
        #[cfg(feature = "gpu")]
        if let Some((dx, dw)) = super::gpu::interface::conv2d_backward(self, x, weight, geo, (need_dx, need_dw)) {
            return (Storage::Gpu(dx), Storage::Gpu(dw));
        }
        Storage::run2_with(
            !cpu::conv::native(dtype),
            [self, x, weight],
            [(dtype, dx_len), (dtype, dw_len)],
            |[g, x, w]| cpu::conv::backward(g, x, w, geo, (need_dx, need_dw)),
        )
    }

    /// The transposed convolution of contiguous `self` (`[n, o, ho, wo]`) with contiguous
    /// `weight` (`[o, c / groups, kh, kw]`): the input gradient of
    /// [`conv2d`](Storage::conv2d) for the output gradient `self`, a contiguous
    /// `[n, c, h, w]` buffer.
    pub(crate) fn conv_transpose2d(&self, weight: &Storage, geo: &ConvGeometry) -> Storage {
        // The convolution's input only feeds its weight gradient, which is not asked for;
        // `self` stands in for it (the kernels read only its dtype and device then).
        self.conv2d_backward(self, weight, geo, (true, false)).0
    }
}
