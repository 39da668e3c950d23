//! `LazyConv1d`, `LazyConv3d`, `LazyBatchNorm1d`, `LazyBatchNorm2d`, `LazyBatchNorm3d`: the
//! layers whose input size (`in_channels`, `num_features`) is the first input's channel
//! count (PyTorch's `nn.LazyConv1d` and friends). Before that first forward they have no
//! parameters (asking for their state panics, or is an error with
//! [`Module::try_state_dict`](nn_core::Module::try_state_dict)); after it they are the layer
//! they became, to printing, downcasts and state dicts (see `lazy.rs`).

use std::sync::OnceLock;

use nn_core::{Compute, Forward, ModuleBase, Tensor};

use crate::conv::{Conv1d, Conv1dConfig, ConvRepr};
use crate::norm::{bn_repr, BatchNorm1d, BatchNorm2d, BatchNorm3d, BatchNormConfig};
use crate::volumetric::{Conv3d, Conv3dConfig};

/// A [`Conv1d`] whose `in_channels` is taken from the first input (PyTorch's
/// `nn.LazyConv1d`).
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::LazyConv1d;
/// let conv = LazyConv1d::new(4, 3);
/// assert_eq!(conv.to_string(), "LazyConv1d(0, 4, kernel_size=(3,), stride=(1,))");
/// assert_eq!(conv.forward(&Tensor::zeros(&[2, 5, 9])).shape(), &[2, 4, 7]);
/// assert_eq!(conv.to_string(), "Conv1d(5, 4, kernel_size=(3,), stride=(1,))");
/// assert_eq!(conv.state_dict().get("weight").unwrap().shape(), &[4, 5, 3]);
/// ```
pub struct LazyConv1d {
    inner: OnceLock<Conv1d>,
    out_channels: usize,
    kernel_size: usize,
    config: Conv1dConfig,
    base: ModuleBase,
}

impl LazyConv1d {
    /// A lazy 1-D convolution with default options.
    pub fn new(out_channels: usize, kernel_size: usize) -> Self {
        Self::with_config(out_channels, kernel_size, Conv1dConfig::default())
    }

    /// A lazy 1-D convolution with explicit options.
    pub fn with_config(out_channels: usize, kernel_size: usize, config: Conv1dConfig) -> Self {
        LazyConv1d { inner: OnceLock::new(), out_channels, kernel_size, config, base: ModuleBase::default() }
    }

    /// The materialised layer, once a forward pass has run.
    pub fn materialized(&self) -> Option<&Conv1d> {
        self.inner.get()
    }
}

impl Compute for LazyConv1d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        if x.rank() != 3 && x.rank() != 2 {
            panic!("LazyConv1d expects input [N, C, L] (or [C, L]), got {:?}", x.shape());
        }
        let c = x.shape()[x.rank() - 2];
        let conv = self.inner.get_or_init(|| {
            nn_core::module::forward_checks::allow_new_parameters(|| {
                Conv1d::with_config(c, self.out_channels, self.kernel_size, self.config)
            })
        });
        conv.forward(x)
    }
}

crate::lazy::lazy_module!(LazyConv1d, fields(out_channels, kernel_size, config), |s| ConvRepr {
    in_channels: 0,
    out_channels: s.out_channels,
    kernel: &[s.kernel_size],
    stride: &[s.config.stride],
    padding: &[s.config.padding],
    dilation: &[s.config.dilation],
    output_padding: &[],
    groups: s.config.groups,
    bias: s.config.bias,
}
.render());

/// A [`Conv3d`] whose `in_channels` is taken from the first input (PyTorch's
/// `nn.LazyConv3d`).
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::LazyConv3d;
/// let conv = LazyConv3d::new(4, 3);
/// assert_eq!(conv.to_string(), "LazyConv3d(0, 4, kernel_size=(3, 3, 3), stride=(1, 1, 1))");
/// assert_eq!(conv.forward(&Tensor::zeros(&[1, 2, 5, 5, 5])).shape(), &[1, 4, 3, 3, 3]);
/// assert_eq!(conv.to_string(), "Conv3d(2, 4, kernel_size=(3, 3, 3), stride=(1, 1, 1))");
/// ```
pub struct LazyConv3d {
    inner: OnceLock<Conv3d>,
    out_channels: usize,
    kernel_size: (usize, usize, usize),
    config: Conv3dConfig,
    base: ModuleBase,
}

impl LazyConv3d {
    /// A lazy 3-D convolution with a cubic kernel and default options.
    pub fn new(out_channels: usize, kernel_size: usize) -> Self {
        Self::with_kernel(out_channels, (kernel_size, kernel_size, kernel_size), Conv3dConfig::default())
    }

    /// A lazy 3-D convolution with a `(kD, kH, kW)` kernel and per-axis options.
    pub fn with_kernel(
        out_channels: usize,
        kernel_size: (usize, usize, usize),
        config: impl Into<Conv3dConfig>,
    ) -> Self {
        LazyConv3d {
            inner: OnceLock::new(),
            out_channels,
            kernel_size,
            config: config.into(),
            base: ModuleBase::default(),
        }
    }

    /// The materialised layer, once a forward pass has run.
    pub fn materialized(&self) -> Option<&Conv3d> {
        self.inner.get()
    }
}

impl Compute for LazyConv3d {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        if x.rank() != 5 && x.rank() != 4 {
            panic!("LazyConv3d expects input [N, C, D, H, W] (or [C, D, H, W]), got {:?}", x.shape());
        }
        let c = x.shape()[x.rank() - 4];
        let conv = self.inner.get_or_init(|| {
            nn_core::module::forward_checks::allow_new_parameters(|| {
                Conv3d::with_kernel(c, self.out_channels, self.kernel_size, self.config)
            })
        });
        conv.forward(x)
    }
}

crate::lazy::lazy_module!(LazyConv3d, fields(out_channels, kernel_size, config), |s| {
    let (k, c) = (s.kernel_size, &s.config);
    ConvRepr {
        in_channels: 0,
        out_channels: s.out_channels,
        kernel: &[k.0, k.1, k.2],
        stride: &[c.stride.0, c.stride.1, c.stride.2],
        padding: &[c.padding.0, c.padding.1, c.padding.2],
        dilation: &[c.dilation.0, c.dilation.1, c.dilation.2],
        output_padding: &[],
        groups: c.groups,
        bias: c.bias,
    }
    .render()
});

/// The lazy batch norms: `num_features` from the first input's dim 1.
macro_rules! lazy_batch_norm {
    ($(#[$doc:meta])* $name:ident, $layer:ident, $ranks:expr, $dims:literal) => {
        $(#[$doc])*
        pub struct $name {
            inner: OnceLock<$layer>,
            config: BatchNormConfig,
            base: ModuleBase,
        }

        impl $name {
            /// With PyTorch's default options.
            pub fn new() -> Self {
                Self::with_config(BatchNormConfig::default())
            }

            /// With explicit options.
            pub fn with_config(config: BatchNormConfig) -> Self {
                $name { inner: OnceLock::new(), config, base: ModuleBase::default() }
            }

            /// The materialised layer, once a forward pass has run.
            pub fn materialized(&self) -> Option<&$layer> {
                self.inner.get()
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl Compute for $name {
            type Input = Tensor;
            type Output = Tensor;
            fn compute(&self, x: &Tensor) -> Tensor {
                if !$ranks.contains(&x.rank()) {
                    panic!("{} expects input {}, got {:?}", stringify!($name), $dims, x.shape());
                }
                let c = x.shape()[1];
                let bn = self.inner.get_or_init(|| nn_core::module::forward_checks::allow_new_parameters(|| {
                    let mut bn = $layer::with_config(c, self.config);
                    // The layer takes the lazy layer's training flag, so an `eval()` called
                    // before the first forward holds.
                    nn_core::Module::set_training(&mut bn, self.base.is_training());
                    bn
                }));
                bn.forward(x)
            }
        }

        crate::lazy::lazy_module!($name, fields(config), |s| bn_repr(0, &s.config));
    };
}

lazy_batch_norm!(
    /// A [`BatchNorm1d`] whose `num_features` is taken from the first input (PyTorch's
    /// `nn.LazyBatchNorm1d`).
    ///
    /// ```
    /// use nn_core::{Forward, Module, Tensor};
    /// use nn_layers::LazyBatchNorm1d;
    /// let bn = LazyBatchNorm1d::new();
    /// assert_eq!(bn.to_string(), "LazyBatchNorm1d(0, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)");
    /// bn.forward(&Tensor::randn(&[4, 3]));
    /// assert_eq!(bn.state_dict().get("running_mean").unwrap().shape(), &[3]);
    /// ```
    LazyBatchNorm1d, BatchNorm1d, [2usize, 3], "[N, C] or [N, C, L]");
lazy_batch_norm!(
    /// A [`BatchNorm2d`] whose `num_features` is taken from the first input (PyTorch's
    /// `nn.LazyBatchNorm2d`).
    LazyBatchNorm2d, BatchNorm2d, [4usize], "[N, C, H, W]");
lazy_batch_norm!(
    /// A [`BatchNorm3d`] whose `num_features` is taken from the first input (PyTorch's
    /// `nn.LazyBatchNorm3d`).
    LazyBatchNorm3d, BatchNorm3d, [5usize], "[N, C, D, H, W]");
