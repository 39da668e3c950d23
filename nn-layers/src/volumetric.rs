//! `Conv3d`, `MaxPool3d`, `AvgPool3d`: volumes (video, medical scans), over
//! `[N, C, D, H, W]` or unbatched `[C, D, H, W]`, with PyTorch's options, init and printout.
//! The ops are nn-core's [`conv3d`](nn_core::Tensor::conv3d),
//! [`max_pool3d`](nn_core::Tensor::max_pool3d) and [`avg_pool3d`](nn_core::Tensor::avg_pool3d).

use nn_core::module::parametrize::optional_value;
use nn_core::ops::{self, Pool3dConfig};
use nn_core::{Compute, ExtraRepr, Module, ModuleBase, Parameter, Tensor};

use crate::conv::{check_channels, check_positive, conv_params, Conv2dConfig, ConvRepr};
use crate::repr::py_tuple;

/// Per-axis options of [`Conv3d`], each `(depth, height, width)`, with PyTorch's defaults
/// (`stride=1, padding=0, dilation=1, groups=1, bias=True`). A square [`Conv2dConfig`]
/// converts (the same value on the three axes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv3dConfig {
    /// Step between output positions.
    pub stride: (usize, usize, usize),
    /// Zero padding on both sides of each axis.
    pub padding: (usize, usize, usize),
    /// Spacing between kernel taps.
    pub dilation: (usize, usize, usize),
    /// Channel groups (`in` and `out` channels must divide by it).
    pub groups: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
}

impl Default for Conv3dConfig {
    fn default() -> Self {
        Conv2dConfig::default().into()
    }
}

impl From<Conv2dConfig> for Conv3dConfig {
    fn from(c: Conv2dConfig) -> Self {
        let t = |v| (v, v, v);
        Conv3dConfig {
            stride: t(c.stride),
            padding: t(c.padding),
            dilation: t(c.dilation),
            groups: c.groups,
            bias: c.bias,
        }
    }
}

fn triple(v: (usize, usize, usize)) -> [usize; 3] {
    [v.0, v.1, v.2]
}

/// 3-D convolution over `[N, C_in, D, H, W]` (or unbatched `[C_in, D, H, W]`), PyTorch's
/// `nn.Conv3d`.
///
/// Parameters: `weight` `[out, in / groups, kD, kH, kW]`, `bias` `[out]` (optional); init as
/// PyTorch's `reset_parameters` (`kaiming_uniform_(a = sqrt(5))`, bias `U(-1/sqrt(fan_in),
/// 1/sqrt(fan_in))`).
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::{Conv3d, Conv3dConfig};
/// let conv = Conv3d::new(2, 4, 3);
/// assert_eq!(conv.forward(&Tensor::zeros(&[1, 2, 5, 6, 7])).shape(), &[1, 4, 3, 4, 5]);
/// assert_eq!(conv.to_string(), "Conv3d(2, 4, kernel_size=(3, 3, 3), stride=(1, 1, 1))");
/// let rect = Conv3d::with_kernel(2, 4, (1, 3, 3), Conv3dConfig { padding: (0, 1, 1), ..Default::default() });
/// assert_eq!(rect.forward(&Tensor::zeros(&[2, 5, 6, 7])).shape(), &[4, 5, 6, 7]); // unbatched
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct Conv3d {
    /// `[out_channels, in_channels / groups, kD, kH, kW]`.
    #[param]
    pub weight: Parameter,
    /// `[out_channels]`.
    #[param]
    pub bias: Option<Parameter>,
    #[base]
    base: ModuleBase,
    in_channels: usize,
    out_channels: usize,
    kernel_size: (usize, usize, usize),
    config: Conv3dConfig,
}

impl Conv3d {
    /// A convolution with a cubic kernel and PyTorch's default options.
    #[track_caller]
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: usize) -> Self {
        Self::with_kernel(in_channels, out_channels, (kernel_size, kernel_size, kernel_size), Conv3dConfig::default())
    }

    /// A convolution with a `(kD, kH, kW)` kernel and per-axis options (PyTorch's tuple
    /// arguments); a square [`Conv2dConfig`] also converts.
    #[track_caller]
    pub fn with_kernel(
        in_channels: usize,
        out_channels: usize,
        kernel_size: (usize, usize, usize),
        config: impl Into<Conv3dConfig>,
    ) -> Self {
        let config = config.into();
        check_channels("Conv3d", in_channels, out_channels, config.groups);
        check_positive("Conv3d", &triple(kernel_size), &triple(config.stride), &triple(config.dilation));
        let (weight, bias) = conv_params(out_channels, in_channels / config.groups, &triple(kernel_size), config.bias);
        Conv3d { weight, bias, base: ModuleBase::default(), in_channels, out_channels, kernel_size, config }
    }

    fn options(&self) -> ops::Conv3dConfig {
        let c = &self.config;
        ops::Conv3dConfig { stride: c.stride, padding: c.padding, dilation: c.dilation, groups: c.groups }
    }
}

impl ExtraRepr for Conv3d {
    fn extra_repr(&self) -> String {
        let c = &self.config;
        ConvRepr {
            in_channels: self.in_channels,
            out_channels: self.out_channels,
            kernel: &triple(self.kernel_size),
            stride: &triple(c.stride),
            padding: &triple(c.padding),
            dilation: &triple(c.dilation),
            output_padding: &[],
            groups: c.groups,
            bias: self.bias.is_some(),
        }
        .render()
    }
}

impl Compute for Conv3d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let ok = (x.rank() == 5 || x.rank() == 4) && x.shape()[x.rank() - 4] == self.in_channels;
        if !ok {
            panic!(
                "{} expects input [N, {}, D, H, W] (or [{}, D, H, W]), got {:?}",
                self,
                self.in_channels,
                self.in_channels,
                x.shape()
            );
        }
        x.conv3d(&self.weight.value(), optional_value(&self.bias).as_deref(), self.options())
    }
}

/// A 3-D size as it was given, one int for the three axes or a triple: PyTorch keeps a
/// pool's arguments as passed and prints them so (`kernel_size=3`, `kernel_size=(1, 3, 3)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Size3 {
    Int(usize),
    Triple(usize, usize, usize),
}

impl Size3 {
    /// A triple, printed as the int PyTorch's default is when it equals it on every axis.
    fn or_default(v: (usize, usize, usize), default: usize) -> Size3 {
        if v == (default, default, default) {
            Size3::Int(default)
        } else {
            Size3::Triple(v.0, v.1, v.2)
        }
    }

    fn triple(self) -> (usize, usize, usize) {
        match self {
            Size3::Int(v) => (v, v, v),
            Size3::Triple(a, b, c) => (a, b, c),
        }
    }

    fn repr(self) -> String {
        match self {
            Size3::Int(v) => v.to_string(),
            Size3::Triple(a, b, c) => py_tuple(&[a, b, c]),
        }
    }
}

/// Per-axis options of [`MaxPool3d::with_kernel`], each `(depth, height, width)`, with
/// PyTorch's defaults (`stride=None` = the kernel size, `padding=0, dilation=1,
/// ceil_mode=False`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxPool3dConfig {
    /// Step between windows; `None` is the kernel size.
    pub stride: Option<(usize, usize, usize)>,
    /// Implicit `-inf` padding on both sides, at most half the kernel.
    pub padding: (usize, usize, usize),
    /// Spacing between window taps.
    pub dilation: (usize, usize, usize),
    /// Round the output size up instead of down.
    pub ceil_mode: bool,
}

impl Default for MaxPool3dConfig {
    fn default() -> Self {
        MaxPool3dConfig { stride: None, padding: (0, 0, 0), dilation: (1, 1, 1), ceil_mode: false }
    }
}

/// 3-D max pooling over `[N, C, D, H, W]` or `[C, D, H, W]` (PyTorch's `nn.MaxPool3d`;
/// stride defaults to the kernel size). No parameters. The element each window keeps,
/// and so where its gradient goes, is PyTorch's (ties and NaN included).
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::{MaxPool3d, MaxPool3dConfig};
/// let pool = MaxPool3d::new(2);
/// assert_eq!(pool.forward(&Tensor::zeros(&[1, 3, 4, 8, 8])).shape(), &[1, 3, 2, 4, 4]);
/// assert_eq!(pool.to_string(), "MaxPool3d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
/// let frames = MaxPool3d::with_kernel((1, 2, 2), MaxPool3dConfig::default());
/// assert_eq!(frames.to_string(), "MaxPool3d(kernel_size=(1, 2, 2), stride=(1, 2, 2), padding=0, dilation=1, ceil_mode=False)");
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct MaxPool3d {
    #[base]
    base: ModuleBase,
    kernel_size: Size3,
    stride: Size3,
    padding: Size3,
    dilation: Size3,
    ceil_mode: bool,
}

impl MaxPool3d {
    /// A `k x k x k` window with stride `k`.
    pub fn new(kernel_size: usize) -> Self {
        Self::with_options(kernel_size, kernel_size, 0, 1, false)
    }

    /// All options, the same on the three axes.
    pub fn with_options(kernel_size: usize, stride: usize, padding: usize, dilation: usize, ceil_mode: bool) -> Self {
        let i = Size3::Int;
        MaxPool3d {
            base: ModuleBase::default(),
            kernel_size: i(kernel_size),
            stride: i(stride),
            padding: i(padding),
            dilation: i(dilation),
            ceil_mode,
        }
    }

    /// A `(kD, kH, kW)` window with per-axis options.
    pub fn with_kernel(kernel_size: (usize, usize, usize), config: MaxPool3dConfig) -> Self {
        let k = Size3::Triple(kernel_size.0, kernel_size.1, kernel_size.2);
        MaxPool3d {
            base: ModuleBase::default(),
            kernel_size: k,
            stride: config.stride.map_or(k, |s| Size3::Triple(s.0, s.1, s.2)),
            padding: Size3::or_default(config.padding, 0),
            dilation: Size3::or_default(config.dilation, 1),
            ceil_mode: config.ceil_mode,
        }
    }
}

impl ExtraRepr for MaxPool3d {
    fn extra_repr(&self) -> String {
        format!(
            "kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}",
            self.kernel_size.repr(),
            self.stride.repr(),
            self.padding.repr(),
            self.dilation.repr(),
            if self.ceil_mode { "True" } else { "False" }
        )
    }
}

impl Compute for MaxPool3d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        x.max_pool3d(Pool3dConfig {
            kernel: self.kernel_size.triple(),
            stride: self.stride.triple(),
            padding: self.padding.triple(),
            dilation: self.dilation.triple(),
            ceil_mode: self.ceil_mode,
        })
    }
}

/// Per-axis options of [`AvgPool3d::with_kernel`], each `(depth, height, width)`, with
/// PyTorch's defaults (`stride=None` = the kernel size, `padding=0, ceil_mode=False,
/// count_include_pad=True`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvgPool3dConfig {
    /// Step between windows; `None` is the kernel size.
    pub stride: Option<(usize, usize, usize)>,
    /// Implicit zero padding on both sides, at most half the kernel.
    pub padding: (usize, usize, usize),
    /// Round the output size up instead of down.
    pub ceil_mode: bool,
    /// Count padded zeros in the divisor.
    pub count_include_pad: bool,
}

impl Default for AvgPool3dConfig {
    fn default() -> Self {
        AvgPool3dConfig { stride: None, padding: (0, 0, 0), ceil_mode: false, count_include_pad: true }
    }
}

/// 3-D average pooling over `[N, C, D, H, W]` or `[C, D, H, W]` (PyTorch's
/// `nn.AvgPool3d`; stride defaults to the kernel size). No parameters.
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::AvgPool3d;
/// let pool = AvgPool3d::new(2);
/// assert_eq!(pool.forward(&Tensor::ones(&[1, 3, 4, 8, 8])).to_vec(), vec![1.0; 3 * 2 * 4 * 4]);
/// assert_eq!(pool.to_string(), "AvgPool3d(kernel_size=2, stride=2, padding=0)");
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct AvgPool3d {
    #[base]
    base: ModuleBase,
    kernel_size: Size3,
    stride: Size3,
    padding: Size3,
    ceil_mode: bool,
    count_include_pad: bool,
}

impl AvgPool3d {
    /// A `k x k x k` window with stride `k`.
    pub fn new(kernel_size: usize) -> Self {
        Self::with_options(kernel_size, kernel_size, 0, false, true)
    }

    /// All options, the same on the three axes.
    pub fn with_options(
        kernel_size: usize,
        stride: usize,
        padding: usize,
        ceil_mode: bool,
        count_include_pad: bool,
    ) -> Self {
        let i = Size3::Int;
        AvgPool3d {
            base: ModuleBase::default(),
            kernel_size: i(kernel_size),
            stride: i(stride),
            padding: i(padding),
            ceil_mode,
            count_include_pad,
        }
    }

    /// A `(kD, kH, kW)` window with per-axis options.
    pub fn with_kernel(kernel_size: (usize, usize, usize), config: AvgPool3dConfig) -> Self {
        let k = Size3::Triple(kernel_size.0, kernel_size.1, kernel_size.2);
        AvgPool3d {
            base: ModuleBase::default(),
            kernel_size: k,
            stride: config.stride.map_or(k, |s| Size3::Triple(s.0, s.1, s.2)),
            padding: Size3::or_default(config.padding, 0),
            ceil_mode: config.ceil_mode,
            count_include_pad: config.count_include_pad,
        }
    }
}

impl ExtraRepr for AvgPool3d {
    fn extra_repr(&self) -> String {
        format!(
            "kernel_size={}, stride={}, padding={}",
            self.kernel_size.repr(),
            self.stride.repr(),
            self.padding.repr()
        )
    }
}

impl Compute for AvgPool3d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let options = Pool3dConfig {
            kernel: self.kernel_size.triple(),
            stride: self.stride.triple(),
            padding: self.padding.triple(),
            dilation: (1, 1, 1),
            ceil_mode: self.ceil_mode,
        };
        x.avg_pool3d(options, self.count_include_pad)
    }
}
