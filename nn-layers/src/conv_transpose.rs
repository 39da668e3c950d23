//! `ConvTranspose1d`, `ConvTranspose2d`.
//!
//! As for the convolutions (see `conv.rs`), the square `...Config` has `usize` fields and
//! the per-axis one, [`ConvTranspose2dAxesConfig`], `(height, width)` pairs; both reach
//! [`ConvTranspose2d::with_kernel`].

use nn_core::module::parametrize::optional_value;
use nn_core::ops;
use nn_core::{Compute, ExtraRepr, Module, ModuleBase, Parameter, Tensor};

use crate::conv::{check_channels, check_positive, conv_params, ConvRepr};

/// Options of [`ConvTranspose2d`] and [`ConvTranspose1d`] beyond the channels and kernel
/// size, with PyTorch's defaults (`stride=1, padding=0, output_padding=0, groups=1,
/// bias=True, dilation=1`), the same on both axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTranspose2dConfig {
    /// Step between the output positions neighbouring inputs scatter to.
    pub stride: usize,
    /// Output trimmed on each side (the padding of the convolution this one inverts).
    pub padding: usize,
    /// Extra size on one side (bottom, right) of the output; smaller than the stride or
    /// the dilation.
    pub output_padding: usize,
    /// Channel groups (`in` and `out` channels must divide by it).
    pub groups: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
    /// Spacing between kernel taps.
    pub dilation: usize,
}

impl Default for ConvTranspose2dConfig {
    fn default() -> Self {
        ConvTranspose2dConfig { stride: 1, padding: 0, output_padding: 0, groups: 1, bias: true, dilation: 1 }
    }
}

/// Options of [`ConvTranspose1d`] (the same fields as [`ConvTranspose2dConfig`]).
pub type ConvTranspose1dConfig = ConvTranspose2dConfig;

/// Per-axis options of [`ConvTranspose2d`], each `(height, width)`, with PyTorch's
/// defaults. A square [`ConvTranspose2dConfig`] converts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTranspose2dAxesConfig {
    /// Step between the output positions neighbouring inputs scatter to.
    pub stride: (usize, usize),
    /// Output trimmed on each side.
    pub padding: (usize, usize),
    /// Extra size on the bottom / right of the output.
    pub output_padding: (usize, usize),
    /// Channel groups.
    pub groups: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
    /// Spacing between kernel taps.
    pub dilation: (usize, usize),
}

impl Default for ConvTranspose2dAxesConfig {
    fn default() -> Self {
        ConvTranspose2dConfig::default().into()
    }
}

impl From<ConvTranspose2dConfig> for ConvTranspose2dAxesConfig {
    fn from(c: ConvTranspose2dConfig) -> Self {
        let d = |v| (v, v);
        ConvTranspose2dAxesConfig {
            stride: d(c.stride),
            padding: d(c.padding),
            output_padding: d(c.output_padding),
            groups: c.groups,
            bias: c.bias,
            dilation: d(c.dilation),
        }
    }
}

/// Checks what the op would otherwise reject only at the first forward.
#[track_caller]
fn check_output_padding(name: &str, output_padding: &[usize], stride: &[usize], dilation: &[usize]) {
    let bad = output_padding.iter().zip(stride).zip(dilation).any(|((&p, &s), &d)| p >= s && p >= d);
    if bad {
        panic!(
            "{name}: output_padding {output_padding:?} must be smaller than either the stride {stride:?} or the dilation \
             {dilation:?}"
        );
    }
}

/// Transposed 2-D convolution over `[N, C_in, H, W]` (or unbatched `[C_in, H, W]`),
/// PyTorch's `nn.ConvTranspose2d`: the input gradient of a [`Conv2d`](crate::Conv2d) with
/// the same options, so with `stride` it upsamples. Output size per axis:
/// `(H - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1`.
///
/// Parameters: `weight` `[in, out / groups, kH, kW]` (input channels first, as PyTorch),
/// `bias` `[out]`. Init: PyTorch's `reset_parameters`, `kaiming_uniform_(a = sqrt(5))`
/// on the weight and `U(-1/sqrt(fan_in), 1/sqrt(fan_in))` on the bias, where `fan_in` is
/// computed from the weight's shape as for any weight: `out / groups * kH * kW`.
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::{ConvTranspose2d, ConvTranspose2dConfig};
/// let cfg = ConvTranspose2dConfig { stride: 2, padding: 1, output_padding: 1, ..Default::default() };
/// let up = ConvTranspose2d::with_config(8, 4, 3, cfg);
/// assert_eq!(up.weight.shape(), &[8, 4, 3, 3]);
/// assert_eq!(up.forward(&Tensor::zeros(&[2, 8, 5, 5])).shape(), &[2, 4, 10, 10]);
/// assert_eq!(
///     up.to_string(),
///     "ConvTranspose2d(8, 4, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), output_padding=(1, 1))"
/// );
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct ConvTranspose2d {
    /// `[in_channels, out_channels / groups, kH, kW]`.
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
    config: ConvTranspose2dAxesConfig,
}

impl ConvTranspose2d {
    /// A transposed convolution with PyTorch's default options.
    #[track_caller]
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: usize) -> Self {
        Self::with_config(in_channels, out_channels, kernel_size, ConvTranspose2dConfig::default())
    }

    /// A square kernel and the same options on both axes.
    #[track_caller]
    pub fn with_config(
        in_channels: usize,
        out_channels: usize,
        kernel_size: usize,
        config: ConvTranspose2dConfig,
    ) -> Self {
        Self::with_kernel(in_channels, out_channels, (kernel_size, kernel_size), config)
    }

    /// A `(kH, kW)` kernel and per-axis options; a square [`ConvTranspose2dConfig`] also
    /// converts.
    #[track_caller]
    pub fn with_kernel(
        in_channels: usize,
        out_channels: usize,
        kernel_size: (usize, usize),
        config: impl Into<ConvTranspose2dAxesConfig>,
    ) -> Self {
        const NAME: &str = "ConvTranspose2d";
        let config = config.into();
        let c = &config;
        let (stride, dilation) = ([c.stride.0, c.stride.1], [c.dilation.0, c.dilation.1]);
        check_channels(NAME, in_channels, out_channels, c.groups);
        check_positive(NAME, &[kernel_size.0, kernel_size.1], &stride, &dilation);
        check_output_padding(NAME, &[c.output_padding.0, c.output_padding.1], &stride, &dilation);
        let (weight, _) = conv_params(in_channels, out_channels / c.groups, &[kernel_size.0, kernel_size.1], false);
        // The bias has `out` entries; its bound comes from the weight's fan-in.
        let bias = c.bias.then(|| {
            let b = Tensor::zeros(&[out_channels]);
            nn_core::init::default_bias_(&b, out_channels / c.groups * kernel_size.0 * kernel_size.1);
            Parameter::new(b)
        });
        ConvTranspose2d { weight, bias, base: ModuleBase::default(), in_channels, out_channels, kernel_size, config }
    }

    /// The op's configuration.
    fn options(&self) -> ops::ConvTranspose2dConfig {
        let c = &self.config;
        ops::ConvTranspose2dConfig {
            stride: c.stride,
            padding: c.padding,
            output_padding: c.output_padding,
            dilation: c.dilation,
            groups: c.groups,
        }
    }
}

impl ExtraRepr for ConvTranspose2d {
    fn extra_repr(&self) -> String {
        let c = &self.config;
        ConvRepr {
            in_channels: self.in_channels,
            out_channels: self.out_channels,
            kernel: &[self.kernel_size.0, self.kernel_size.1],
            stride: &[c.stride.0, c.stride.1],
            padding: &[c.padding.0, c.padding.1],
            dilation: &[c.dilation.0, c.dilation.1],
            output_padding: &[c.output_padding.0, c.output_padding.1],
            groups: c.groups,
            bias: c.bias,
        }
        .render()
    }
}

impl Compute for ConvTranspose2d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let unbatched = x.rank() == 3;
        let ok = (x.rank() == 4 || unbatched) && x.shape()[x.rank() - 3] == self.in_channels;
        if !ok {
            panic!(
                "{} expects input [N, {}, H, W] or [{}, H, W], got {:?}",
                self,
                self.in_channels,
                self.in_channels,
                x.shape()
            );
        }
        let x4 = if unbatched { x.unsqueeze(0) } else { x.clone() };
        let y = x4.conv_transpose2d(&self.weight.value(), optional_value(&self.bias).as_deref(), self.options());
        if unbatched {
            y.squeeze_dim(0)
        } else {
            y
        }
    }
}

/// Transposed 1-D convolution over `[N, C_in, L]` (or unbatched `[C_in, L]`), PyTorch's
/// `nn.ConvTranspose1d`. Output length `(L - 1) stride - 2 padding + dilation (k - 1) +
/// output_padding + 1`.
///
/// Parameters: `weight` `[in, out / groups, k]`, `bias` `[out]`; init as
/// [`ConvTranspose2d`] (`fan_in = out / groups * k`).
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::{ConvTranspose1d, ConvTranspose1dConfig};
/// let up = ConvTranspose1d::with_config(4, 2, 4, ConvTranspose1dConfig { stride: 2, padding: 1, ..Default::default() });
/// assert_eq!(up.forward(&Tensor::zeros(&[3, 4, 10])).shape(), &[3, 2, 20]);
/// assert_eq!(up.to_string(), "ConvTranspose1d(4, 2, kernel_size=(4,), stride=(2,), padding=(1,))");
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct ConvTranspose1d {
    /// `[in_channels, out_channels / groups, k]`.
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
    config: ConvTranspose1dConfig,
}

impl ConvTranspose1d {
    /// A transposed 1-D convolution with PyTorch's default options.
    #[track_caller]
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: usize) -> Self {
        Self::with_config(in_channels, out_channels, kernel_size, ConvTranspose1dConfig::default())
    }

    /// A transposed 1-D convolution with explicit options.
    #[track_caller]
    pub fn with_config(
        in_channels: usize,
        out_channels: usize,
        kernel_size: usize,
        config: ConvTranspose1dConfig,
    ) -> Self {
        const NAME: &str = "ConvTranspose1d";
        let c = &config;
        check_channels(NAME, in_channels, out_channels, c.groups);
        check_positive(NAME, &[kernel_size], &[c.stride], &[c.dilation]);
        check_output_padding(NAME, &[c.output_padding], &[c.stride], &[c.dilation]);
        let (weight, _) = conv_params(in_channels, out_channels / c.groups, &[kernel_size], false);
        let bias = c.bias.then(|| {
            let b = Tensor::zeros(&[out_channels]);
            nn_core::init::default_bias_(&b, out_channels / c.groups * kernel_size);
            Parameter::new(b)
        });
        ConvTranspose1d { weight, bias, base: ModuleBase::default(), in_channels, out_channels, kernel_size, config }
    }
}

impl ExtraRepr for ConvTranspose1d {
    fn extra_repr(&self) -> String {
        let c = &self.config;
        ConvRepr {
            in_channels: self.in_channels,
            out_channels: self.out_channels,
            kernel: &[self.kernel_size],
            stride: &[c.stride],
            padding: &[c.padding],
            dilation: &[c.dilation],
            output_padding: &[c.output_padding],
            groups: c.groups,
            bias: c.bias,
        }
        .render()
    }
}

impl Compute for ConvTranspose1d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let unbatched = x.rank() == 2;
        let ok = (x.rank() == 3 || unbatched) && x.shape()[x.rank() - 2] == self.in_channels;
        if !ok {
            panic!(
                "{} expects input [N, {}, L] or [{}, L], got {:?}",
                self,
                self.in_channels,
                self.in_channels,
                x.shape()
            );
        }
        let x3 = if unbatched { x.unsqueeze(0) } else { x.clone() };
        let c = &self.config;
        let o = ops::ConvTranspose1dConfig {
            stride: c.stride,
            padding: c.padding,
            output_padding: c.output_padding,
            dilation: c.dilation,
            groups: c.groups,
        };
        let y = x3.conv_transpose1d(&self.weight.value(), optional_value(&self.bias).as_deref(), o);
        if unbatched {
            y.squeeze_dim(0)
        } else {
            y
        }
    }
}
