//! `MaxPool1d`, `MaxPool2d`, `AvgPool1d`, `AvgPool2d`, `AdaptiveAvgPool1d`,
//! `AdaptiveAvgPool2d`.
//!
//! The 1-D pools run the 2-D ones on `[N, C, 1, L]` (a window of height 1). As for the
//! convolutions, the 2-D pools keep their `usize` constructors and take per-axis sizes
//! through `with_kernel((kH, kW), ...Config)`, whose fields are `(height, width)` pairs.

use nn_core::ops::Pool2dConfig;
use nn_core::{Compute, ExtraRepr, Module, ModuleBase, Tensor};

use crate::repr::{py_bool, py_tuple};

/// A 2-D size as it was given, one int for both axes or a pair: PyTorch keeps a pool's
/// arguments as passed and prints them so (`kernel_size=3`, `kernel_size=(3, 1)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Size2 {
    Int(usize),
    Pair(usize, usize),
}

impl Size2 {
    /// A pair, printed as the int PyTorch's default is when it equals `(default, default)`.
    fn pair_or_default(v: (usize, usize), default: usize) -> Size2 {
        if v == (default, default) {
            Size2::Int(default)
        } else {
            Size2::Pair(v.0, v.1)
        }
    }

    fn pair(self) -> (usize, usize) {
        match self {
            Size2::Int(v) => (v, v),
            Size2::Pair(a, b) => (a, b),
        }
    }

    fn repr(self) -> String {
        match self {
            Size2::Int(v) => v.to_string(),
            Size2::Pair(a, b) => py_tuple(&[a, b]),
        }
    }
}

/// Per-axis options of [`MaxPool2d::with_kernel`], each `(height, width)`, with PyTorch's
/// defaults (`stride=None` = the kernel size, `padding=0, dilation=1, ceil_mode=False`).
/// A padding or dilation at its default prints as PyTorch's default int.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxPool2dConfig {
    /// Step between windows; `None` is the kernel size.
    pub stride: Option<(usize, usize)>,
    /// Implicit `-inf` padding on both sides, at most half the kernel.
    pub padding: (usize, usize),
    /// Spacing between window taps.
    pub dilation: (usize, usize),
    /// Round the output size up instead of down.
    pub ceil_mode: bool,
}

impl Default for MaxPool2dConfig {
    fn default() -> Self {
        MaxPool2dConfig { stride: None, padding: (0, 0), dilation: (1, 1), ceil_mode: false }
    }
}

/// Per-axis options of [`AvgPool2d::with_kernel`], each `(height, width)`, with PyTorch's
/// defaults (`stride=None` = the kernel size, `padding=0, ceil_mode=False,
/// count_include_pad=True`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvgPool2dConfig {
    /// Step between windows; `None` is the kernel size.
    pub stride: Option<(usize, usize)>,
    /// Implicit zero padding on both sides, at most half the kernel.
    pub padding: (usize, usize),
    /// Round the output size up instead of down.
    pub ceil_mode: bool,
    /// Count padded zeros in the divisor.
    pub count_include_pad: bool,
}

impl Default for AvgPool2dConfig {
    fn default() -> Self {
        AvgPool2dConfig { stride: None, padding: (0, 0), ceil_mode: false, count_include_pad: true }
    }
}

/// 2-D max pooling over `[N, C, H, W]` or `[C, H, W]` (PyTorch's `nn.MaxPool2d`; stride
/// defaults to the kernel size). No parameters.
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::{MaxPool2d, MaxPool2dConfig};
/// let pool = MaxPool2d::new(2);
/// assert_eq!(pool.forward(&Tensor::zeros(&[1, 3, 8, 8])).shape(), &[1, 3, 4, 4]);
/// assert_eq!(pool.to_string(), "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
/// let rect = MaxPool2d::with_kernel((3, 1), MaxPool2dConfig { stride: Some((2, 1)), ..Default::default() });
/// assert_eq!(rect.forward(&Tensor::zeros(&[1, 3, 7, 5])).shape(), &[1, 3, 3, 5]);
/// assert_eq!(rect.to_string(), "MaxPool2d(kernel_size=(3, 1), stride=(2, 1), padding=0, dilation=1, ceil_mode=False)");
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct MaxPool2d {
    #[base]
    base: ModuleBase,
    kernel_size: Size2,
    stride: Size2,
    padding: Size2,
    dilation: Size2,
    ceil_mode: bool,
}

impl MaxPool2d {
    /// A `k x k` window with stride `k`.
    pub fn new(kernel_size: usize) -> Self {
        Self::with_options(kernel_size, kernel_size, 0, 1, false)
    }

    /// All options, the same on both axes.
    pub fn with_options(kernel_size: usize, stride: usize, padding: usize, dilation: usize, ceil_mode: bool) -> Self {
        let i = Size2::Int;
        MaxPool2d {
            base: ModuleBase::default(),
            kernel_size: i(kernel_size),
            stride: i(stride),
            padding: i(padding),
            dilation: i(dilation),
            ceil_mode,
        }
    }

    /// A `(kH, kW)` window with per-axis options.
    pub fn with_kernel(kernel_size: (usize, usize), config: MaxPool2dConfig) -> Self {
        let k = Size2::Pair(kernel_size.0, kernel_size.1);
        MaxPool2d {
            base: ModuleBase::default(),
            kernel_size: k,
            stride: config.stride.map_or(k, |s| Size2::Pair(s.0, s.1)),
            padding: Size2::pair_or_default(config.padding, 0),
            dilation: Size2::pair_or_default(config.dilation, 1),
            ceil_mode: config.ceil_mode,
        }
    }

    fn options(&self) -> Pool2dConfig {
        Pool2dConfig {
            kernel: self.kernel_size.pair(),
            stride: self.stride.pair(),
            padding: self.padding.pair(),
            dilation: self.dilation.pair(),
            ceil_mode: self.ceil_mode,
        }
    }
}

impl ExtraRepr for MaxPool2d {
    fn extra_repr(&self) -> String {
        format!(
            "kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}",
            self.kernel_size.repr(),
            self.stride.repr(),
            self.padding.repr(),
            self.dilation.repr(),
            py_bool(self.ceil_mode)
        )
    }
}

impl Compute for MaxPool2d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        if x.rank() != 3 && x.rank() != 4 {
            panic!("{} expects input [N, C, H, W] or [C, H, W], got {:?}", self, x.shape());
        }
        x.max_pool2d(self.options())
    }
}

/// 2-D average pooling over `[N, C, H, W]` or `[C, H, W]` (PyTorch's `nn.AvgPool2d`;
/// stride defaults to the kernel size). No parameters.
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::{AvgPool2d, AvgPool2dConfig};
/// let pool = AvgPool2d::with_kernel((3, 1), AvgPool2dConfig { stride: Some((2, 1)), padding: (1, 0), ..Default::default() });
/// assert_eq!(pool.forward(&Tensor::ones(&[1, 2, 6, 4])).shape(), &[1, 2, 3, 4]);
/// assert_eq!(pool.to_string(), "AvgPool2d(kernel_size=(3, 1), stride=(2, 1), padding=(1, 0))");
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct AvgPool2d {
    #[base]
    base: ModuleBase,
    kernel_size: Size2,
    stride: Size2,
    padding: Size2,
    ceil_mode: bool,
    count_include_pad: bool,
}

impl AvgPool2d {
    /// A `k x k` window with stride `k`.
    pub fn new(kernel_size: usize) -> Self {
        Self::with_options(kernel_size, kernel_size, 0, false, true)
    }

    /// All options, the same on both axes.
    pub fn with_options(
        kernel_size: usize,
        stride: usize,
        padding: usize,
        ceil_mode: bool,
        count_include_pad: bool,
    ) -> Self {
        let i = Size2::Int;
        AvgPool2d {
            base: ModuleBase::default(),
            kernel_size: i(kernel_size),
            stride: i(stride),
            padding: i(padding),
            ceil_mode,
            count_include_pad,
        }
    }

    /// A `(kH, kW)` window with per-axis options.
    pub fn with_kernel(kernel_size: (usize, usize), config: AvgPool2dConfig) -> Self {
        let k = Size2::Pair(kernel_size.0, kernel_size.1);
        AvgPool2d {
            base: ModuleBase::default(),
            kernel_size: k,
            stride: config.stride.map_or(k, |s| Size2::Pair(s.0, s.1)),
            padding: Size2::pair_or_default(config.padding, 0),
            ceil_mode: config.ceil_mode,
            count_include_pad: config.count_include_pad,
        }
    }
}

impl ExtraRepr for AvgPool2d {
    fn extra_repr(&self) -> String {
        format!(
            "kernel_size={}, stride={}, padding={}",
            self.kernel_size.repr(),
            self.stride.repr(),
            self.padding.repr()
        )
    }
}

impl Compute for AvgPool2d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        if x.rank() != 3 && x.rank() != 4 {
            panic!("{} expects input [N, C, H, W] or [C, H, W], got {:?}", self, x.shape());
        }
        let o = Pool2dConfig {
            kernel: self.kernel_size.pair(),
            stride: self.stride.pair(),
            padding: self.padding.pair(),
            dilation: (1, 1),
            ceil_mode: self.ceil_mode,
        };
        x.avg_pool2d(o, self.count_include_pad)
    }
}

/// Adaptive average pooling of `[N, C, H, W]` or `[C, H, W]` to a fixed output size
/// (PyTorch's `nn.AdaptiveAvgPool2d`). No parameters.
#[derive(Module)]
#[module(extra_repr)]
pub struct AdaptiveAvgPool2d {
    #[base]
    base: ModuleBase,
    output_size: (usize, usize),
}

impl AdaptiveAvgPool2d {
    /// Pools to `(out_h, out_w)`.
    pub fn new(output_size: (usize, usize)) -> Self {
        AdaptiveAvgPool2d { base: ModuleBase::default(), output_size }
    }
}

impl ExtraRepr for AdaptiveAvgPool2d {
    fn extra_repr(&self) -> String {
        format!("output_size={}", py_tuple(&[self.output_size.0, self.output_size.1]))
    }
}

impl Compute for AdaptiveAvgPool2d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        if x.rank() != 3 && x.rank() != 4 {
            panic!("{} expects input [N, C, H, W] or [C, H, W], got {:?}", self, x.shape());
        }
        x.adaptive_avg_pool2d(self.output_size)
    }
}

/// Runs a 2-D pool on `[N, C, L]` / `[C, L]` as `[N, C, 1, L]` / `[C, 1, L]`.
#[track_caller]
fn pool_1d(name: &dyn std::fmt::Display, x: &Tensor, pool: impl FnOnce(&Tensor) -> Tensor) -> Tensor {
    if x.rank() != 2 && x.rank() != 3 {
        panic!("{name} expects input [N, C, L] or [C, L], got {:?}", x.shape());
    }
    // Only the batch may be empty, as in PyTorch: a pool over no channels or no positions
    // is refused.
    if x.shape()[x.rank() - 2..].contains(&0) {
        panic!("{name} expects input [N, C, L] or [C, L] with C and L non-zero (N may be 0), got {:?}", x.shape());
    }
    pool(&x.unsqueeze(-2)).squeeze_dim(-2)
}

/// Checks a 1-D pool's sizes when it is built (the 2-D op would name itself and pairs).
#[track_caller]
fn check_1d(name: &str, kernel: usize, stride: Option<usize>, padding: usize, dilation: usize) {
    if kernel == 0 || stride == Some(0) || dilation == 0 {
        panic!("{name}: kernel_size, stride and dilation must be positive, got {kernel}, {stride:?}, {dilation}");
    }
    if 2 * padding > kernel {
        panic!("{name}: padding {padding} should be at most half of the kernel size {kernel}");
    }
}

/// Options of [`MaxPool1d`], with PyTorch's defaults (`stride=None` = the kernel size,
/// `padding=0, dilation=1, ceil_mode=False`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxPool1dConfig {
    /// Step between windows; `None` is the kernel size.
    pub stride: Option<usize>,
    /// Implicit `-inf` padding on both sides, at most half the kernel.
    pub padding: usize,
    /// Spacing between window taps.
    pub dilation: usize,
    /// Round the output size up instead of down.
    pub ceil_mode: bool,
}

impl Default for MaxPool1dConfig {
    fn default() -> Self {
        MaxPool1dConfig { stride: None, padding: 0, dilation: 1, ceil_mode: false }
    }
}

/// 1-D max pooling over `[N, C, L]` or `[C, L]` (PyTorch's `nn.MaxPool1d`). No
/// parameters. Output length `(L + 2 padding - dilation (k - 1) - 1) / stride + 1`
/// (rounded up with `ceil_mode`).
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::{MaxPool1d, MaxPool1dConfig};
/// let pool = MaxPool1d::with_config(3, MaxPool1dConfig { stride: Some(2), padding: 1, ..Default::default() });
/// let x = Tensor::from_vec(vec![1.0, 5.0, 2.0, 0.0, 3.0, 4.0], &[1, 1, 6]);
/// assert_eq!(pool.forward(&x).to_vec(), vec![5.0, 5.0, 4.0]);
/// assert_eq!(pool.to_string(), "MaxPool1d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=False)");
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct MaxPool1d {
    #[base]
    base: ModuleBase,
    kernel_size: usize,
    config: MaxPool1dConfig,
}

impl MaxPool1d {
    /// A window of `kernel_size` with stride `kernel_size`.
    pub fn new(kernel_size: usize) -> Self {
        Self::with_config(kernel_size, MaxPool1dConfig::default())
    }

    /// A window of `kernel_size` with explicit options.
    ///
    /// # Panics
    /// When the kernel, stride or dilation is 0, or the padding is over half the kernel.
    #[track_caller]
    pub fn with_config(kernel_size: usize, config: MaxPool1dConfig) -> Self {
        check_1d("MaxPool1d", kernel_size, config.stride, config.padding, config.dilation);
        MaxPool1d { base: ModuleBase::default(), kernel_size, config }
    }

    fn stride(&self) -> usize {
        self.config.stride.unwrap_or(self.kernel_size)
    }
}

impl ExtraRepr for MaxPool1d {
    fn extra_repr(&self) -> String {
        let c = &self.config;
        format!(
            "kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}",
            self.kernel_size,
            self.stride(),
            c.padding,
            c.dilation,
            py_bool(c.ceil_mode)
        )
    }
}

impl Compute for MaxPool1d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let c = &self.config;
        let o = Pool2dConfig {
            kernel: (1, self.kernel_size),
            stride: (1, self.stride()),
            padding: (0, c.padding),
            dilation: (1, c.dilation),
            ceil_mode: c.ceil_mode,
        };
        pool_1d(self, x, |x| x.max_pool2d(o))
    }
}

/// Options of [`AvgPool1d`], with PyTorch's defaults (`stride=None` = the kernel size,
/// `padding=0, ceil_mode=False, count_include_pad=True`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvgPool1dConfig {
    /// Step between windows; `None` is the kernel size.
    pub stride: Option<usize>,
    /// Implicit zero padding on both sides, at most half the kernel.
    pub padding: usize,
    /// Round the output size up instead of down.
    pub ceil_mode: bool,
    /// Count padded zeros in the divisor.
    pub count_include_pad: bool,
}

impl Default for AvgPool1dConfig {
    fn default() -> Self {
        AvgPool1dConfig { stride: None, padding: 0, ceil_mode: false, count_include_pad: true }
    }
}

/// 1-D average pooling over `[N, C, L]` or `[C, L]` (PyTorch's `nn.AvgPool1d`). No
/// parameters.
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::{AvgPool1d, AvgPool1dConfig};
/// let pool = AvgPool1d::new(2);
/// let x = Tensor::from_vec(vec![1.0, 3.0, 2.0, 6.0, 5.0], &[1, 5]);
/// assert_eq!(pool.forward(&x).to_vec(), vec![2.0, 4.0]);
/// assert_eq!(pool.to_string(), "AvgPool1d(kernel_size=(2,), stride=(2,), padding=(0,))");
/// let padded = AvgPool1d::with_config(3, AvgPool1dConfig { stride: Some(2), padding: 1, ..Default::default() });
/// assert_eq!(padded.forward(&x).shape(), &[1, 3]);
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct AvgPool1d {
    #[base]
    base: ModuleBase,
    kernel_size: usize,
    config: AvgPool1dConfig,
}

impl AvgPool1d {
    /// A window of `kernel_size` with stride `kernel_size`.
    pub fn new(kernel_size: usize) -> Self {
        Self::with_config(kernel_size, AvgPool1dConfig::default())
    }

    /// A window of `kernel_size` with explicit options.
    ///
    /// # Panics
    /// When the kernel or stride is 0, or the padding is over half the kernel.
    #[track_caller]
    pub fn with_config(kernel_size: usize, config: AvgPool1dConfig) -> Self {
        check_1d("AvgPool1d", kernel_size, config.stride, config.padding, 1);
        AvgPool1d { base: ModuleBase::default(), kernel_size, config }
    }

    fn stride(&self) -> usize {
        self.config.stride.unwrap_or(self.kernel_size)
    }
}

impl ExtraRepr for AvgPool1d {
    fn extra_repr(&self) -> String {
        // PyTorch's AvgPool1d stores its sizes as 1-tuples.
        format!(
            "kernel_size={}, stride={}, padding={}",
            py_tuple(&[self.kernel_size]),
            py_tuple(&[self.stride()]),
            py_tuple(&[self.config.padding])
        )
    }
}

impl Compute for AvgPool1d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let c = &self.config;
        let o = Pool2dConfig {
            kernel: (1, self.kernel_size),
            stride: (1, self.stride()),
            padding: (0, c.padding),
            dilation: (1, 1),
            ceil_mode: c.ceil_mode,
        };
        pool_1d(self, x, |x| x.avg_pool2d(o, c.count_include_pad))
    }
}

/// Adaptive average pooling of `[N, C, L]` or `[C, L]` to a fixed length (PyTorch's
/// `nn.AdaptiveAvgPool1d`): window `i` spans `floor(i L / out) .. ceil((i + 1) L / out)`.
/// No parameters.
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::AdaptiveAvgPool1d;
/// let pool = AdaptiveAvgPool1d::new(2);
/// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0], &[1, 1, 5]);
/// assert_eq!(pool.forward(&x).to_vec(), vec![2.0, 4.0]);
/// assert_eq!(pool.to_string(), "AdaptiveAvgPool1d(output_size=2)");
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct AdaptiveAvgPool1d {
    #[base]
    base: ModuleBase,
    output_size: usize,
}

impl AdaptiveAvgPool1d {
    /// Pools to `output_size` positions.
    pub fn new(output_size: usize) -> Self {
        AdaptiveAvgPool1d { base: ModuleBase::default(), output_size }
    }
}

impl ExtraRepr for AdaptiveAvgPool1d {
    fn extra_repr(&self) -> String {
        format!("output_size={}", self.output_size)
    }
}

impl Compute for AdaptiveAvgPool1d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        pool_1d(self, x, |x| x.adaptive_avg_pool2d((1, self.output_size)))
    }
}
