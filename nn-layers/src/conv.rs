//! `Conv1d`, `Conv2d`, `LazyConv2d`.

use std::sync::OnceLock;

use nn_core::ops;
use nn_core::{init, Compute, ExtraRepr, Forward, Module, ModuleBase, Parameter, Tensor};

use crate::repr::py_tuple;

/// Options of [`Conv2d`] and [`Conv1d`] beyond the channels and kernel size, with
/// PyTorch's defaults (`stride=1, padding=0, dilation=1, groups=1, bias=True`).
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

fn conv_params(out: usize, in_per_group: usize, kernel: &[usize], bias: bool) -> (Parameter, Option<Parameter>) {
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
fn check_config(name: &str, in_c: usize, out_c: usize, k: usize, c: &Conv2dConfig) {
    if c.groups == 0 || in_c % c.groups != 0 || out_c % c.groups != 0 {
        panic!("{name}: in_channels {in_c} and out_channels {out_c} must be divisible by groups {}", c.groups);
    }
    if k == 0 || c.stride == 0 || c.dilation == 0 {
        panic!("{name}: kernel_size, stride and dilation must be positive, got {k}, {}, {}", c.stride, c.dilation);
    }
}

fn conv_repr(in_c: usize, out_c: usize, dims: usize, k: usize, c: &Conv2dConfig) -> String {
    let t = |v: usize| py_tuple(&vec![v; dims]);
    let mut s = format!("{in_c}, {out_c}, kernel_size={}, stride={}", t(k), t(c.stride));
    if c.padding != 0 {
        s += &format!(", padding={}", t(c.padding));
    }
    if c.dilation != 1 {
        s += &format!(", dilation={}", t(c.dilation));
    }
    if c.groups != 1 {
        s += &format!(", groups={}", c.groups);
    }
    if !c.bias {
        s += ", bias=False";
    }
    s
}

/// 2-D convolution over `[N, C_in, H, W]` (or unbatched `[C_in, H, W]`), PyTorch's
/// `nn.Conv2d` with square kernels.
///
/// Parameters: `weight` `[out, in / groups, k, k]`, `bias` `[out]`. Init: PyTorch's
/// `reset_parameters` (`kaiming_uniform_(a = sqrt(5))`, bias `U(-1/sqrt(fan_in),
/// 1/sqrt(fan_in))` with `fan_in = in / groups * k * k`).
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::{Conv2d, Conv2dConfig};
/// let conv = Conv2d::with_config(3, 6, 3, Conv2dConfig { stride: 2, padding: 1, ..Default::default() });
/// assert_eq!(conv.forward(&Tensor::zeros(&[1, 3, 8, 8])).shape(), &[1, 6, 4, 4]);
/// assert_eq!(conv.to_string(), "Conv2d(3, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))");
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct Conv2d {
    /// `[out_channels, in_channels / groups, k, k]`.
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
    config: Conv2dConfig,
}

impl Conv2d {
    /// A convolution with PyTorch's default options.
    #[track_caller]
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: usize) -> Self {
        Self::with_config(in_channels, out_channels, kernel_size, Conv2dConfig::default())
    }

    /// A convolution with explicit options.
    #[track_caller]
    pub fn with_config(in_channels: usize, out_channels: usize, kernel_size: usize, config: Conv2dConfig) -> Self {
        check_config("Conv2d", in_channels, out_channels, kernel_size, &config);
        let (weight, bias) =
            conv_params(out_channels, in_channels / config.groups, &[kernel_size, kernel_size], config.bias);
        Conv2d { weight, bias, base: ModuleBase::default(), in_channels, out_channels, kernel_size, config }
    }

    /// The op's configuration: this layer's square settings on both axes.
    fn options(&self) -> ops::Conv2dConfig {
        let c = &self.config;
        ops::Conv2dConfig {
            stride: (c.stride, c.stride),
            padding: (c.padding, c.padding),
            dilation: (c.dilation, c.dilation),
            groups: c.groups,
        }
    }
}

impl ExtraRepr for Conv2d {
    fn extra_repr(&self) -> String {
        conv_repr(self.in_channels, self.out_channels, 2, self.kernel_size, &self.config)
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
        let y = x4.conv2d(&self.weight, self.bias.as_deref(), self.options());
        if unbatched {
            y.squeeze_dim(0)
        } else {
            y
        }
    }
}

/// 1-D convolution over `[N, C_in, L]` (PyTorch's `nn.Conv1d`).
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
        check_config("Conv1d", in_channels, out_channels, kernel_size, &config);
        let (weight, bias) = conv_params(out_channels, in_channels / config.groups, &[kernel_size], config.bias);
        Conv1d { weight, bias, base: ModuleBase::default(), in_channels, out_channels, kernel_size, config }
    }
}

impl ExtraRepr for Conv1d {
    fn extra_repr(&self) -> String {
        conv_repr(self.in_channels, self.out_channels, 1, self.kernel_size, &self.config)
    }
}

impl Compute for Conv1d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        if x.rank() != 3 || x.shape()[1] != self.in_channels {
            panic!("{} expects input [N, {}, L], got {:?}", self, self.in_channels, x.shape());
        }
        let c = &self.config;
        x.conv1d(&self.weight, self.bias.as_deref(), c.stride, c.padding, c.dilation, c.groups)
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
        let conv = self.inner.get_or_init(|| Conv2d::with_config(c, self.out_channels, self.kernel_size, self.config));
        conv.forward(x)
    }
}

crate::lazy::lazy_module!(LazyConv2d, |s| conv_repr(0, s.out_channels, 2, s.kernel_size, &s.config));
