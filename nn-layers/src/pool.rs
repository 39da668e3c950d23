//! `MaxPool2d`, `AvgPool2d`, `AdaptiveAvgPool2d`.

use nn_core::ops::Pool2dConfig;
use nn_core::{Compute, ExtraRepr, Module, ModuleBase, Tensor};

use crate::repr::{py_bool, py_tuple};

/// 2-D max pooling (PyTorch's `nn.MaxPool2d`; stride defaults to the kernel size).
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::MaxPool2d;
/// let pool = MaxPool2d::new(2);
/// assert_eq!(pool.forward(&Tensor::zeros(&[1, 3, 8, 8])).shape(), &[1, 3, 4, 4]);
/// assert_eq!(pool.to_string(), "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct MaxPool2d {
    #[base]
    base: ModuleBase,
    kernel_size: usize,
    stride: usize,
    padding: usize,
    dilation: usize,
    ceil_mode: bool,
}

impl MaxPool2d {
    /// A `k x k` window with stride `k`.
    pub fn new(kernel_size: usize) -> Self {
        Self::with_options(kernel_size, kernel_size, 0, 1, false)
    }

    /// All options.
    pub fn with_options(kernel_size: usize, stride: usize, padding: usize, dilation: usize, ceil_mode: bool) -> Self {
        MaxPool2d { base: ModuleBase::default(), kernel_size, stride, padding, dilation, ceil_mode }
    }

    fn options(&self) -> Pool2dConfig {
        let d = |v| (v, v);
        Pool2dConfig {
            kernel: d(self.kernel_size),
            stride: d(self.stride),
            padding: d(self.padding),
            dilation: d(self.dilation),
            ceil_mode: self.ceil_mode,
        }
    }
}

impl ExtraRepr for MaxPool2d {
    fn extra_repr(&self) -> String {
        format!(
            "kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}",
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
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

/// 2-D average pooling (PyTorch's `nn.AvgPool2d`).
#[derive(Module)]
#[module(extra_repr)]
pub struct AvgPool2d {
    #[base]
    base: ModuleBase,
    kernel_size: usize,
    stride: usize,
    padding: usize,
    ceil_mode: bool,
    count_include_pad: bool,
}

impl AvgPool2d {
    /// A `k x k` window with stride `k`.
    pub fn new(kernel_size: usize) -> Self {
        Self::with_options(kernel_size, kernel_size, 0, false, true)
    }

    /// All options.
    pub fn with_options(
        kernel_size: usize,
        stride: usize,
        padding: usize,
        ceil_mode: bool,
        count_include_pad: bool,
    ) -> Self {
        AvgPool2d { base: ModuleBase::default(), kernel_size, stride, padding, ceil_mode, count_include_pad }
    }
}

impl ExtraRepr for AvgPool2d {
    fn extra_repr(&self) -> String {
        format!("kernel_size={}, stride={}, padding={}", self.kernel_size, self.stride, self.padding)
    }
}

impl Compute for AvgPool2d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        if x.rank() != 3 && x.rank() != 4 {
            panic!("{} expects input [N, C, H, W] or [C, H, W], got {:?}", self, x.shape());
        }
        let d = |v| (v, v);
        let o = Pool2dConfig {
            kernel: d(self.kernel_size),
            stride: d(self.stride),
            padding: d(self.padding),
            dilation: (1, 1),
            ceil_mode: self.ceil_mode,
        };
        x.avg_pool2d(o, self.count_include_pad)
    }
}

/// Adaptive average pooling to a fixed output size (PyTorch's `nn.AdaptiveAvgPool2d`).
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
