//! `Conv1d`, `Conv2d`, `LazyConv2d`.
//!
//! Per-axis options. `Conv2dConfig`'s fields are plain `usize` (the same value on both
//! axes), and stay so: `Conv2dConfig { stride: 2, ..Default::default() }` is public API,
//! and a field of a wrapper type (`impl From<usize>`) would not accept a literal `2`.
//! Rectangular settings take a second config with `(height, width)` fields,
//! [`Conv2dAxesConfig`], through [`Conv2d::with_kernel`], which also accepts a square
//! `Conv2dConfig` (`From`), so the two forms meet in one constructor.

use nn_core::module::parametrize::optional_value;
use std::sync::OnceLock;

use nn_core::ops;
use nn_core::{init, Compute, ExtraRepr, Forward, Module, ModuleBase, Parameter, Tensor};

use crate::repr::py_tuple;

/// Options of [`Conv2d`] and [`Conv1d`] beyond the channels and kernel size, with
/// PyTorch's defaults (`stride=1, padding=0, dilation=1, groups=1, bias=True`), the same
/// on both axes (see [`Conv2dAxesConfig`] for per-axis values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dConfig {
    /// Step between output positions.
    pub stride: usize,
    /// Zero padding on every side.
    pub padding: usize,
    /// Spacing between kernel taps.
    pub dilation: usize,
    /// Channel groups (`in` and `out` channels must divide by it).
    pub groups: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
}

impl Default for Conv2dConfig {
    fn default() -> Self {
        Conv2dConfig { stride: 1, padding: 0, dilation: 1, groups: 1, bias: true }
    }
}

/// Options of [`Conv1d`] (the same fields as [`Conv2dConfig`]).
pub type Conv1dConfig = Conv2dConfig;

/// Per-axis options of [`Conv2d`] (PyTorch's tuple arguments, `stride=(2, 1)`), each
/// `(height, width)`, with PyTorch's defaults. A square [`Conv2dConfig`] converts.
///
/// ```
/// use nn_layers::{Conv2dAxesConfig, Conv2dConfig};
/// let c: Conv2dAxesConfig = Conv2dConfig { stride: 2, ..Default::default() }.into();
/// assert_eq!(c, Conv2dAxesConfig { stride: (2, 2), ..Default::default() });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dAxesConfig {
    /// Step between output positions.
    pub stride: (usize, usize),
    /// Zero padding on both sides of each axis.
    pub padding: (usize, usize),
    /// Spacing between kernel taps.
    pub dilation: (usize, usize),
    /// Channel groups (`in` and `out` channels must divide by it).
    pub groups: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
}

impl Default for Conv2dAxesConfig {
    fn default() -> Self {
        Conv2dConfig::default().into()
    }
}

impl From<Conv2dConfig> for Conv2dAxesConfig {
    fn from(c: Conv2dConfig) -> Self {
        let d = |v| (v, v);
        Conv2dAxesConfig {
            stride: d(c.stride),
            padding: d(c.padding),
            dilation: d(c.dilation),
            groups: c.groups,
            bias: c.bias,
        }
    }
}

pub(crate) fn conv_params(
    out: usize,
    in_per_group: usize,
    kernel: &[usize],
    bias: bool,
) -> (Parameter, Option<Parameter>) {
    let mut shape = vec![out, in_per_group];
    shape.extend_from_slice(kernel);
    let w = Tensor::zeros(&shape);
    init::default_weight_(&w);
    let fan_in = in_per_group * kernel.iter().product::<usize>();
    let b = bias.then(|| {
        let b = Tensor::zeros(&[out]);
        init::default_bias_(&b, fan_in);
        Parameter::new(b)
    });
    (Parameter::new(w), b)
}

#[track_caller]
pub(crate) fn check_channels(name: &str, in_c: usize, out_c: usize, groups: usize) {
    if groups == 0 || !in_c.is_multiple_of(groups) || !out_c.is_multiple_of(groups) {
        panic!("{name}: in_channels {in_c} and out_channels {out_c} must be divisible by groups {groups}");
    }
}

#[track_caller]
pub(crate) fn check_positive(name: &str, kernel: &[usize], stride: &[usize], dilation: &[usize]) {
    if [kernel, stride, dilation].iter().any(|v| v.contains(&0)) {
        let show = |v: &[usize]| if v.len() == 1 { v[0].to_string() } else { py_tuple(v) };
        panic!(
            "{name}: kernel_size, stride and dilation must be positive, got {}, {}, {}",
            show(kernel),
            show(stride),
            show(dilation)
        );
    }
}

/// The sizes a convolution layer prints, PyTorch's `_ConvNd.extra_repr`: every size as a
/// tuple, the options at their defaults left out.
pub(crate) struct ConvRepr<'a> {
    pub(crate) in_channels: usize,
    pub(crate) out_channels: usize,
    pub(crate) kernel: &'a [usize],
    pub(crate) stride: &'a [usize],
    pub(crate) padding: &'a [usize],
    pub(crate) dilation: &'a [usize],
    /// Empty for a plain convolution.
    pub(crate) output_padding: &'a [usize],
    pub(crate) groups: usize,
    pub(crate) bias: bool,
}

impl ConvRepr<'_> {
    pub(crate) fn render(&self) -> String {
        let mut s = format!(
            "{}, {}, kernel_size={}, stride={}",
            self.in_channels,
            self.out_channels,
            py_tuple(self.kernel),
            py_tuple(self.stride)
        );
        if self.padding.iter().any(|&p| p != 0) {
            s += &format!(", padding={}", py_tuple(self.padding));
        }
        if self.dilation.iter().any(|&d| d != 1) {
            s += &format!(", dilation={}", py_tuple(self.dilation));
        }
        if self.output_padding.iter().any(|&p| p != 0) {
            s += &format!(", output_padding={}", py_tuple(self.output_padding));
        }
        if self.groups != 1 {
            s += &format!(", groups={}", self.groups);
        }
        if !self.bias {
            s += ", bias=False";
        }
        s
    }
}

fn conv2d_repr(in_c: usize, out_c: usize, k: (usize, usize), c: &Conv2dAxesConfig) -> String {
    ConvRepr {
        in_channels: in_c,
        out_channels: out_c,
        kernel: &[k.0, k.1],
        stride: &[c.stride.0, c.stride.1],
        padding: &[c.padding.0, c.padding.1],
        dilation: &[c.dilation.0, c.dilation.1],
        output_padding: &[],
        groups: c.groups,
        bias: c.bias,
    }
    .render()
}

/// 2-D convolution over `[N, C_in, H, W]` (or unbatched `[C_in, H, W]`), PyTorch's
/// `nn.Conv2d`; square kernels and options with [`Conv2d::with_config`], per-axis ones
/// with [`Conv2d::with_kernel`].
///
/// Parameters: `weight` `[out, in / groups, kH, kW]`, `bias` `[out]`. Init: PyTorch's
/// `reset_parameters` (`kaiming_uniform_(a = sqrt(5))`, bias `U(-1/sqrt(fan_in),
/// 1/sqrt(fan_in))` with `fan_in = in / groups * kH * kW`).
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::{Conv2d, Conv2dAxesConfig, Conv2dConfig};
/// let conv = Conv2d::with_config(3, 6, 3, Conv2dConfig { stride: 2, padding: 1, ..Default::default() });
/// assert_eq!(conv.forward(&Tensor::zeros(&[1, 3, 8, 8])).shape(), &[1, 6, 4, 4]);
/// assert_eq!(conv.to_string(), "Conv2d(3, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))");
/// let rect = Conv2d::with_kernel(3, 6, (3, 1), Conv2dAxesConfig { stride: (2, 1), padding: (1, 0), ..Default::default() });
/// assert_eq!(rect.weight.shape(), &[6, 3, 3, 1]);
/// assert_eq!(rect.forward(&Tensor::zeros(&[1, 3, 8, 8])).shape(), &[1, 6, 4, 8]);
/// assert_eq!(rect.to_string(), "Conv2d(3, 6, kernel_size=(3, 1), stride=(2, 1), padding=(1, 0))");
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct Conv2d {
    /// `[out_channels, in_channels / groups, kH, kW]`.
    #[param]
    pub weight: Parameter,
    /// `[out_channels]`.
    #[param]
    pub bias: Option<Parameter>,
    #[base]
    base: ModuleBase,
    in_channels: usize,
    out_channels: usize,
    kernel_size: (usize, usize),
    config: Conv2dAxesConfig,
}

impl Conv2d {
    /// A convolution with PyTorch's default options.
    #[track_caller]
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: usize) -> Self {
        Self::with_config(in_channels, out_channels, kernel_size, Conv2dConfig::default())
    }

    /// A convolution with a square kernel and the same options on both axes.
    #[track_caller]
    pub fn with_config(in_channels: usize, out_channels: usize, kernel_size: usize, config: Conv2dConfig) -> Self {
        Self::with_kernel(in_channels, out_channels, (kernel_size, kernel_size), config)
    }

    /// A convolution with a `(kH, kW)` kernel and per-axis options (PyTorch's tuple
    /// arguments: `Conv2d(3, 6, (3, 1), stride=(2, 1))`); a square [`Conv2dConfig`] also
    /// converts.
    #[track_caller]
    pub fn with_kernel(
        in_channels: usize,
        out_channels: usize,
        kernel_size: (usize, usize),
        config: impl Into<Conv2dAxesConfig>,
    ) -> Self {
        let config = config.into();
        let c = &config;
        check_channels("Conv2d", in_channels, out_channels, c.groups);
        check_positive(
            "Conv2d",
            &[kernel_size.0, kernel_size.1],
            &[c.stride.0, c.stride.1],
            &[c.dilation.0, c.dilation.1],
        );
        let (weight, bias) = conv_params(out_channels, in_channels / c.groups, &[kernel_size.0, kernel_size.1], c.bias);
        Conv2d { weight, bias, base: ModuleBase::default(), in_channels, out_channels, kernel_size, config }
    }

    /// The op's configuration.
    fn options(&self) -> ops::Conv2dConfig {
        let c = &self.config;
        ops::Conv2dConfig { stride: c.stride, padding: c.padding, dilation: c.dilation, groups: c.groups }
    }
}

impl ExtraRepr for Conv2d {
    fn extra_repr(&self) -> String {
        conv2d_repr(self.in_channels, self.out_channels, self.kernel_size, &self.config)
    }
}

impl Compute for Conv2d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let unbatched = x.rank() == 3;
        let ok = (x.rank() == 4 || unbatched) && x.shape()[x.rank() - 3] == self.in_channels;
        if !ok {
            panic!("{} expects input [N, {}, H, W], got {:?}", self, self.in_channels, x.shape());
        }
        let x4 = if unbatched { x.unsqueeze(0) } else { x.clone() };
        let y = x4.conv2d(&self.weight.value(), optional_value(&self.bias).as_deref(), self.options());
        if unbatched {
            y.squeeze_dim(0)
        } else {
            y
        }
    }
}

/// 1-D convolution over `[N, C_in, L]` (or unbatched `[C_in, L]`), PyTorch's `nn.Conv1d`.
///
/// Parameters: `weight` `[out, in / groups, k]`, `bias` `[out]`; init as [`Conv2d`].
#[derive(Module)]
#[module(extra_repr)]
pub struct Conv1d {
    /// `[out_channels, in_channels / groups, k]`.
    #[param]
    pub weight: Parameter,
    /// `[out_channels]`.
    #[param]
    pub bias: Option<Parameter>,
    #[base]
    base: ModuleBase,
    in_channels: usize,
    out_channels: usize,
    kernel_size: usize,
    config: Conv1dConfig,
}

impl Conv1d {
    /// A 1-D convolution with default options.
    #[track_caller]
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: usize) -> Self {
        Self::with_config(in_channels, out_channels, kernel_size, Conv1dConfig::default())
    }

    /// A 1-D convolution with explicit options.
    #[track_caller]
    pub fn with_config(in_channels: usize, out_channels: usize, kernel_size: usize, config: Conv1dConfig) -> Self {
        check_channels("Conv1d", in_channels, out_channels, config.groups);
        check_positive("Conv1d", &[kernel_size], &[config.stride], &[config.dilation]);
        let (weight, bias) = conv_params(out_channels, in_channels / config.groups, &[kernel_size], config.bias);
        Conv1d { weight, bias, base: ModuleBase::default(), in_channels, out_channels, kernel_size, config }
    }
}

impl ExtraRepr for Conv1d {
    fn extra_repr(&self) -> String {
        let c = &self.config;
        ConvRepr {
            in_channels: self.in_channels,
            out_channels: self.out_channels,
            kernel: &[self.kernel_size],
            stride: &[c.stride],
            padding: &[c.padding],
            dilation: &[c.dilation],
            output_padding: &[],
            groups: c.groups,
            bias: c.bias,
        }
        .render()
    }
}

impl Compute for Conv1d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        // `[C_in, L]` is PyTorch's unbatched input; the functional conv1d takes it too.
        let ok = matches!(x.rank(), 2 | 3) && x.shape()[x.rank() - 2] == self.in_channels;
        if !ok {
            panic!(
                "{} expects input [N, {}, L] or [{}, L], got {:?}",
                self,
                self.in_channels,
                self.in_channels,
                x.shape()
            );
        }
        let c = &self.config;
        x.conv1d(&self.weight.value(), optional_value(&self.bias).as_deref(), c.stride, c.padding, c.dilation, c.groups)
    }
}

/// A [`Conv2d`] whose `in_channels` is taken from the first input (PyTorch's
/// `nn.LazyConv2d`). Before that it has no parameters; asking for its state panics (or,
/// with [`Module::try_state_dict`], is an error).
pub struct LazyConv2d {
    inner: OnceLock<Conv2d>,
    out_channels: usize,
    kernel_size: usize,
    config: Conv2dConfig,
    base: ModuleBase,
}

impl LazyConv2d {
    /// A lazy convolution with default options.
    pub fn new(out_channels: usize, kernel_size: usize) -> Self {
        Self::with_config(out_channels, kernel_size, Conv2dConfig::default())
    }

    /// A lazy convolution with explicit options.
    pub fn with_config(out_channels: usize, kernel_size: usize, config: Conv2dConfig) -> Self {
        LazyConv2d { inner: OnceLock::new(), out_channels, kernel_size, config, base: ModuleBase::default() }
    }

    /// The materialised layer, once a forward pass has run.
    pub fn materialized(&self) -> Option<&Conv2d> {
        self.inner.get()
    }
}

impl Compute for LazyConv2d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        if x.rank() != 4 && x.rank() != 3 {
            panic!("LazyConv2d expects input [N, C, H, W], got {:?}", x.shape());
        }
        let c = x.shape()[x.rank() - 3];
        let conv = self.inner.get_or_init(|| {
            nn_core::module::forward_checks::allow_new_parameters(|| {
                Conv2d::with_config(c, self.out_channels, self.kernel_size, self.config)
            })
        });
        conv.forward(x)
    }
}

crate::lazy::lazy_module!(LazyConv2d, fields(out_channels, kernel_size, config), |s| conv2d_repr(
    0,
    s.out_channels,
    (s.kernel_size, s.kernel_size),
    &s.config.into()
));
