//! `BatchNorm1d`, `BatchNorm2d`, `BatchNorm3d`, `LayerNorm`, `GroupNorm`, `RMSNorm`.

use std::sync::Arc;

use nn_core::module::state_hooks::HookResult;
use nn_core::module::MigrateState;
use nn_core::{functional, no_grad, Compute, Device, ExtraRepr, Module, ModuleBase, Parameter, StateDict, Tensor};

use crate::repr::{py_bool, py_float, py_tuple};

/// Options of the batch-norm layers, with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNormConfig {
    /// Added to the variance (default `1e-5`).
    pub eps: f64,
    /// Running-statistics update factor (default `Some(0.1)`); `None` is a cumulative
    /// moving average over `num_batches_tracked` batches.
    pub momentum: Option<f64>,
    /// Learnable per-channel `weight` and `bias` (default `true`).
    pub affine: bool,
    /// Keep running statistics for evaluation (default `true`).
    pub track_running_stats: bool,
    /// Learnable `bias` when `affine` (default `true`; PyTorch 2.15's `bias` option).
    pub bias: bool,
}

impl Default for BatchNormConfig {
    fn default() -> Self {
        BatchNormConfig { eps: 1e-5, momentum: Some(0.1), affine: true, track_running_stats: true, bias: true }
    }
}

/// Sums a tensor over the processes of a data-parallel job: the communication that turns a
/// batch norm into a synchronised one (PyTorch's `SyncBatchNorm`), plugged in with
/// `set_stats_sync`. `nn-distributed` implements it on MPI; nothing here depends on one.
///
/// `all_reduce_sum` must return the element-wise sum of `t` over every process (the same
/// result on each) and be differentiable, its backward being the same sum of the incoming
/// gradients; every process calls it in the same order.
pub trait BatchStatsSync: Send + Sync {
    /// The sum of `t` over all processes.
    fn all_reduce_sum(&self, t: &Tensor) -> Tensor;
}

macro_rules! batch_norm_layer {
    ($(#[$doc:meta])* $name:ident, $ranks:expr, $dims:literal) => {
        $(#[$doc])*
        ///
        /// Parameters `weight`, `bias` (`[C]`, ones and zeros); buffers `running_mean`,
        /// `running_var` (`[C]`, zeros and ones) and `num_batches_tracked` (0-d `i64`), as
        /// PyTorch. Training mode normalises with batch statistics and updates the running
        /// ones (with the unbiased variance); evaluation mode uses the running ones.
        ///
        /// With a [`BatchStatsSync`] set ([`set_stats_sync`](Self::set_stats_sync)), training
        /// mode uses the statistics of the batches of every process together (PyTorch's
        /// `SyncBatchNorm`): the per-channel sums, counts and squared deviations are summed
        /// over the processes (two reductions per forward, two per backward).
        ///
        /// Its state-dict layout is version 2, as PyTorch's: a state dict of an older layout
        /// (or with no version recorded) that lacks `num_batches_tracked` loads with the
        /// layer's own count (0 for a fresh layer), as PyTorch's `_load_from_state_dict` does.
        #[derive(Module)]
        #[module(extra_repr, version = 2, migrate)]
        pub struct $name {
            /// `[C]`, ones at init.
            #[param]
            pub weight: Option<Parameter>,
            /// `[C]`, zeros at init.
            #[param]
            pub bias: Option<Parameter>,
            /// `[C]`, zeros at init.
            #[buffer]
            pub running_mean: Option<Tensor>,
            /// `[C]`, ones at init.
            #[buffer]
            pub running_var: Option<Tensor>,
            /// 0-d `i64`, the number of training batches seen.
            #[buffer]
            pub num_batches_tracked: Option<Tensor>,
            #[base]
            base: ModuleBase,
            num_features: usize,
            config: BatchNormConfig,
            sync: Option<Arc<dyn BatchStatsSync>>,
        }

        impl $name {
            /// With PyTorch's default options.
            pub fn new(num_features: usize) -> Self {
                Self::with_config(num_features, BatchNormConfig::default())
            }

            /// With explicit options.
            pub fn with_config(num_features: usize, config: BatchNormConfig) -> Self {
                let c = num_features;
                $name {
                    weight: config.affine.then(|| Parameter::new(Tensor::ones(&[c]))),
                    bias: (config.affine && config.bias).then(|| Parameter::new(Tensor::zeros(&[c]))),
                    running_mean: config.track_running_stats.then(|| Tensor::zeros(&[c])),
                    running_var: config.track_running_stats.then(|| Tensor::ones(&[c])),
                    num_batches_tracked: config.track_running_stats.then(|| Tensor::from_vec_i64(vec![0], &[])),
                    base: ModuleBase::default(),
                    num_features,
                    config,
                    sync: None,
                }
            }

            /// Synchronises the batch statistics of training mode over the processes that
            /// `sync` reaches (PyTorch's `SyncBatchNorm`); `None` makes the layer a
            /// per-process batch norm again. Parameters, buffers and state-dict keys are
            /// unchanged.
            pub fn set_stats_sync(&mut self, sync: Option<Arc<dyn BatchStatsSync>>) {
                self.sync = sync;
            }

            /// Whether training mode synchronises its statistics.
            pub fn is_synced(&self) -> bool {
                self.sync.is_some()
            }

            /// The options.
            pub fn config(&self) -> &BatchNormConfig {
                &self.config
            }
        }

        impl MigrateState for $name {
            /// Version 2 added `num_batches_tracked` (PyTorch's `_NormBase`): an older
            /// state dict without it gets the layer's own count, or 0.
            fn migrate(&self, sd: &mut StateDict, prefix: &str, version: Option<u32>) -> HookResult {
                let key = format!("{prefix}num_batches_tracked");
                if version.unwrap_or(1) < 2 && self.config.track_running_stats && sd.get(&key).is_none() {
                    let own = self.num_batches_tracked.as_ref().filter(|t| t.device() != Device::Meta);
                    let count = own.map_or_else(|| Tensor::from_vec_i64(vec![0], &[]), |t| t.detach().copy());
                    sd.insert(key, count);
                }
                Ok(())
            }
        }

        impl ExtraRepr for $name {
            fn extra_repr(&self) -> String {
                bn_repr(self.num_features, &self.config)
            }
        }

        impl Compute for $name {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
                    if !$ranks.contains(&x.rank()) || x.shape()[1] != self.num_features {
                        panic!("{} expects input {} with C = {}, got {:?}", self, $dims, self.num_features, x.shape());
                    }
                    let training = self.base.is_training();
                    // Synced, the count that matters is every process's together, checked
                    // after the exchange (PyTorch's SyncBatchNorm): a process with one
                    // sample, or none, takes part (refused here, it left the others waiting
                    // in the exchange).
                    if training && self.sync.is_none() {
                        check_batch_statistics(&self.to_string(), x.shape());
                    }
                    bn_forward(
                        x,
                        BnState {
                            weight: self.weight.as_deref(),
                            bias: self.bias.as_deref(),
                            running_mean: self.running_mean.as_ref(),
                            running_var: self.running_var.as_ref(),
                            num_batches_tracked: self.num_batches_tracked.as_ref(),
                        },
                        training,
                        &self.config,
                        self.sync.as_deref(),
                    )

    }
}
    };
}

/// Training mode normalises with the batch's own mean and variance, which need at least
/// two values per channel (or none: an empty batch); checked before any running statistic
/// is touched.
///
/// # Panics
/// With a message naming the layer and the input shape.
#[track_caller]
fn check_batch_statistics(layer: &str, shape: &[usize]) {
    let per_channel: usize = shape.iter().enumerate().filter(|&(d, _)| d != 1).map(|(_, &n)| n).product();
    // An empty batch gives an empty output and leaves the statistics alone, as PyTorch.
    if per_channel != 1 {
        return;
    }
    let why = "a batch of one value per channel has no variance; use larger batches or `.eval()`";
    panic!(
        "{layer}: training mode needs more than 1 value per channel for batch statistics, got input of shape \
         {shape:?} ({per_channel} per channel): {why}"
    );
}

struct BnState<'a> {
    weight: Option<&'a Tensor>,
    bias: Option<&'a Tensor>,
    running_mean: Option<&'a Tensor>,
    running_var: Option<&'a Tensor>,
    num_batches_tracked: Option<&'a Tensor>,
}

/// PyTorch's `_BatchNorm.forward` (and `SyncBatchNorm.forward` when `sync` is given).
fn bn_forward(
    x: &Tensor,
    s: BnState<'_>,
    training: bool,
    config: &BatchNormConfig,
    sync: Option<&dyn BatchStatsSync>,
) -> Tensor {
    // A half-type input with f32 parameters and statistics (a bf16 activation under
    // autocast): computed in f32, the result in the input's dtype, as PyTorch's CPU batch
    // norm does for this mix.
    let held = [s.weight, s.running_mean].into_iter().flatten().next();
    if x.dtype().is_half() && held.is_some_and(|t| t.dtype() != x.dtype()) {
        return bn_forward(&x.to_dtype(nn_core::DType::F32), s, training, config, sync).to_dtype(x.dtype());
    }
    let mut factor = config.momentum.unwrap_or(0.0);
    // The batch counted once the forward has run: a forward that panics (an input of
    // another dtype or device than the statistics, a combined batch of one) leaves the
    // counter as it was, and with it the cumulative average of `momentum: None`.
    let counted = match (training, s.num_batches_tracked) {
        (true, Some(n)) => {
            // A loaded counter can hold anything: saturate rather than overflow.
            let seen = n.to_vec_i64()[0].saturating_add(1);
            if config.momentum.is_none() {
                factor = 1.0 / seen as f64;
            }
            Some((n, seen))
        }
        _ => None,
    };
    let y = if let (true, Some(sync)) = (training, sync) {
        // The check `Tensor::batch_norm` makes on the path that does not sync.
        if config.eps.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            panic!("batch_norm: eps must be positive during training, got {}", config.eps);
        }
        synced_batch_norm(x, &s, factor, config.eps, sync)
    } else {
        let use_batch_stats = training || s.running_mean.is_none();
        let (rm, rv) =
            if !training || config.track_running_stats { (s.running_mean, s.running_var) } else { (None, None) };
        x.batch_norm(rm, rv, s.weight, s.bias, use_batch_stats, factor, config.eps)
    };
    if let Some((n, seen)) = counted {
        no_grad(|| n.copy_(&Tensor::from_vec_i64(vec![seen], &[])));
    }
    y
}

/// Batch norm in training mode over the batches of every process: the mean from the summed
/// per-channel sums and counts, then the biased variance from the summed squared deviations
/// (two passes, as the single-process layer). Running statistics get the unbiased variance
/// over the global count, as PyTorch's `SyncBatchNorm`.
fn synced_batch_norm(x: &Tensor, s: &BnState<'_>, momentum: f64, eps: f64, sync: &dyn BatchStatsSync) -> Tensor {
    // A half input: statistics and normalisation in f32 (its sums would otherwise be cast
    // to f32 by GPU autocast halfway through), the result in the input's dtype, as
    // PyTorch's SyncBatchNorm and `Tensor::batch_norm` give it.
    if x.dtype().is_half() {
        let f32 = |t: Option<&Tensor>| t.map(|t| t.to_dtype(nn_core::DType::F32));
        let (w, b) = (f32(s.weight), f32(s.bias));
        let wide = BnState { weight: w.as_ref(), bias: b.as_ref(), ..*s };
        return synced_batch_norm(&x.to_dtype(nn_core::DType::F32), &wide, momentum, eps, sync).to_dtype(x.dtype());
    }
    let c = x.shape()[1];
    let mut bshape = vec![1; x.rank()];
    bshape[1] = c;
    let dims: Vec<usize> = (0..x.rank()).filter(|&d| d != 1).collect();
    let local = Tensor::full_on(&[1], (x.numel() / c.max(1)) as f64, x.dtype(), x.device());
    let sums = sync.all_reduce_sum(&Tensor::cat(&[&x.sum_dims(&dims, false), &local], 0));
    let n = sums.narrow(0, c, 1).item();
    if n <= 1.0 {
        panic!(
            "batch_norm: expected more than 1 value per channel when training, got {n} over all processes (input of \
             shape {:?} here)",
            x.shape()
        );
    }
    let mean = sums.narrow(0, 0, c) / n;
    let centered = x - &mean.reshape(&bshape);
    let var = sync.all_reduce_sum(&centered.square().sum_dims(&dims, false)) / n;
    if let (Some(rm), Some(rv)) = (s.running_mean, s.running_var) {
        no_grad(|| {
            // In the statistics' own dtype (bf16 buffers of a bf16 model, computed in f32).
            let (mean, var) = (mean.to_dtype(rm.dtype()), var.to_dtype(rv.dtype()));
            rm.copy_(&(rm * (1.0 - momentum) + &mean * momentum));
            rv.copy_(&(rv * (1.0 - momentum) + &var * (n / (n - 1.0) * momentum)));
        });
    }
    let mut y = &centered * &(var.reshape(&bshape) + eps).sqrt().recip();
    if let Some(w) = s.weight {
        y = &y * &w.reshape(&bshape);
    }
    if let Some(b) = s.bias {
        y = &y + &b.reshape(&bshape);
    }
    y
}

pub(crate) fn bn_repr(num_features: usize, c: &BatchNormConfig) -> String {
    let m = c.momentum.map(py_float).unwrap_or_else(|| "None".into());
    format!(
        "{num_features}, eps={}, momentum={m}, affine={}, bias={}, track_running_stats={}",
        py_float(c.eps),
        py_bool(c.affine),
        py_bool(c.affine && c.bias),
        py_bool(c.track_running_stats)
    )
}

batch_norm_layer!(
    /// Batch normalisation over `[N, C]` or `[N, C, L]` (PyTorch's `nn.BatchNorm1d`).
    BatchNorm1d, [2usize, 3], "[N, C] or [N, C, L]");
batch_norm_layer!(
    /// Batch normalisation over `[N, C, D, H, W]` (PyTorch's `nn.BatchNorm3d`).
    BatchNorm3d, [5usize], "[N, C, D, H, W]");
batch_norm_layer!(
    /// Batch normalisation over `[N, C, H, W]` (PyTorch's `nn.BatchNorm2d`).
    ///
    /// ```
    /// use nn_core::{Forward, Module, Tensor};
    /// use nn_layers::BatchNorm2d;
    /// let bn = BatchNorm2d::new(8);
    /// assert_eq!(bn.to_string(), "BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)");
    /// assert_eq!(bn.state_dict().keys().collect::<Vec<_>>(), ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]);
    /// ```
    BatchNorm2d, [4usize], "[N, C, H, W]");

/// Layer normalisation over the trailing `normalized_shape` dims (PyTorch's
/// `nn.LayerNorm`). Parameters `weight` (ones) and `bias` (zeros) of that shape.
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::LayerNorm;
/// let ln = LayerNorm::new(7);
/// assert_eq!(ln.to_string(), "LayerNorm((7,), eps=1e-05, elementwise_affine=True, bias=True)");
/// let y = ln.forward(&Tensor::arange(0.0, 14.0, 1.0).reshape(&[2, 7]));
/// assert!(y.mean_dim(1, false).to_vec().iter().all(|m| m.abs() < 1e-6));
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct LayerNorm {
    /// Ones at init.
    #[param]
    pub weight: Option<Parameter>,
    /// Zeros at init.
    #[param]
    pub bias: Option<Parameter>,
    #[base]
    base: ModuleBase,
    normalized_shape: Vec<usize>,
    eps: f64,
}

impl LayerNorm {
    /// Normalises over the last dim, of size `dim`, with `eps = 1e-5` and an affine.
    pub fn new(dim: usize) -> Self {
        Self::with_options(&[dim], 1e-5, true, true)
    }

    /// All options.
    pub fn with_options(normalized_shape: &[usize], eps: f64, elementwise_affine: bool, bias: bool) -> Self {
        LayerNorm {
            weight: elementwise_affine.then(|| Parameter::new(Tensor::ones(normalized_shape))),
            bias: (elementwise_affine && bias).then(|| Parameter::new(Tensor::zeros(normalized_shape))),
            base: ModuleBase::default(),
            normalized_shape: normalized_shape.to_vec(),
            eps,
        }
    }
}

impl ExtraRepr for LayerNorm {
    fn extra_repr(&self) -> String {
        format!(
            "{}, eps={}, elementwise_affine={}, bias={}",
            py_tuple(&self.normalized_shape),
            py_float(self.eps),
            py_bool(self.weight.is_some()),
            py_bool(self.bias.is_some())
        )
    }
}

impl Compute for LayerNorm {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let k = self.normalized_shape.len();
        if x.rank() < k || x.shape()[x.rank() - k..] != self.normalized_shape[..] {
            panic!("{} expects input [..., {:?}], got {:?}", self, self.normalized_shape, x.shape());
        }
        x.layer_norm(&self.normalized_shape, self.weight.as_deref(), self.bias.as_deref(), self.eps)
    }
}

/// Group normalisation (PyTorch's `nn.GroupNorm`): channels split into groups normalised
/// over their channels and positions; per-channel `weight` (ones) and `bias` (zeros).
#[derive(Module)]
#[module(extra_repr)]
pub struct GroupNorm {
    /// `[C]`, ones at init.
    #[param]
    pub weight: Option<Parameter>,
    /// `[C]`, zeros at init.
    #[param]
    pub bias: Option<Parameter>,
    #[base]
    base: ModuleBase,
    num_groups: usize,
    num_channels: usize,
    eps: f64,
}

impl GroupNorm {
    /// `num_groups` groups over `num_channels` channels, `eps = 1e-5`, affine.
    ///
    /// # Panics
    /// When `num_channels` is not divisible by `num_groups`.
    #[track_caller]
    pub fn new(num_groups: usize, num_channels: usize) -> Self {
        Self::with_options(num_groups, num_channels, 1e-5, true)
    }

    /// All options.
    #[track_caller]
    pub fn with_options(num_groups: usize, num_channels: usize, eps: f64, affine: bool) -> Self {
        if num_groups == 0 || !num_channels.is_multiple_of(num_groups) {
            panic!("GroupNorm: num_channels {num_channels} must be divisible by num_groups {num_groups}");
        }
        GroupNorm {
            weight: affine.then(|| Parameter::new(Tensor::ones(&[num_channels]))),
            bias: affine.then(|| Parameter::new(Tensor::zeros(&[num_channels]))),
            base: ModuleBase::default(),
            num_groups,
            num_channels,
            eps,
        }
    }
}

impl ExtraRepr for GroupNorm {
    fn extra_repr(&self) -> String {
        format!(
            "{}, {}, eps={}, affine={}, bias={}",
            self.num_groups,
            self.num_channels,
            py_float(self.eps),
            py_bool(self.weight.is_some()),
            py_bool(self.bias.is_some())
        )
    }
}

impl Compute for GroupNorm {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        if x.rank() < 2 || x.shape()[1] != self.num_channels {
            panic!("{} expects input [N, {}, *], got {:?}", self, self.num_channels, x.shape());
        }
        functional::group_norm(x, self.num_groups, self.weight.as_deref(), self.bias.as_deref(), self.eps)
    }
}

/// Options of [`RMSNorm`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RMSNormConfig {
    /// Added to the mean square; `None` (the default) is the machine epsilon of the type
    /// the input computes in, as in PyTorch 2.15: `f32::EPSILON` = 1.1920929e-07 for f32,
    /// bf16 and f16 inputs, `f64::EPSILON` for f64 ones (see [`Tensor::rms_norm`]).
    pub eps: Option<f64>,
    /// Learnable per-element `weight` (default `true`).
    pub elementwise_affine: bool,
}

impl Default for RMSNormConfig {
    /// PyTorch's defaults: `eps=None`, `elementwise_affine=True`.
    fn default() -> Self {
        RMSNormConfig { eps: None, elementwise_affine: true }
    }
}

/// Root-mean-square normalisation over the trailing `normalized_shape` dims (PyTorch's
/// `nn.RMSNorm`): `y = x / sqrt(mean(x^2) + eps) * weight`, the mean over those dims.
///
/// Parameter: `weight` of shape `normalized_shape` (ones at init), absent without
/// `elementwise_affine`. No bias, as PyTorch's.
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::{RMSNorm, RMSNormConfig};
/// let norm = RMSNorm::new(4);
/// assert_eq!(norm.to_string(), "RMSNorm((4,), eps=None, elementwise_affine=True)");
/// let y = norm.forward(&Tensor::from_vec(vec![1.0, -1.0, 1.0, -1.0, 2.0, 2.0, 2.0, 2.0], &[2, 4]));
/// assert!(y.to_vec().iter().all(|v| (v.abs() - 1.0).abs() < 1e-6));
/// let cfg = RMSNormConfig { eps: Some(1e-6), elementwise_affine: false };
/// let plain = RMSNorm::with_config(&[2, 4], cfg);
/// assert_eq!(plain.to_string(), "RMSNorm((2, 4), eps=1e-06, elementwise_affine=False)");
/// assert!(plain.state_dict().is_empty());
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct RMSNorm {
    /// Of shape `normalized_shape`, ones at init.
    #[param]
    pub weight: Option<Parameter>,
    #[base]
    base: ModuleBase,
    normalized_shape: Vec<usize>,
    eps: Option<f64>,
}

impl RMSNorm {
    /// Normalises over the last dim, of size `dim`, with PyTorch's defaults.
    pub fn new(dim: usize) -> Self {
        Self::with_config(&[dim], RMSNormConfig::default())
    }

    /// Normalises over the trailing dims `normalized_shape`, with explicit options.
    pub fn with_config(normalized_shape: &[usize], config: RMSNormConfig) -> Self {
        RMSNorm {
            weight: config.elementwise_affine.then(|| Parameter::new(Tensor::ones(normalized_shape))),
            base: ModuleBase::default(),
            normalized_shape: normalized_shape.to_vec(),
            eps: config.eps,
        }
    }

    /// The epsilon, `None` for the input's machine epsilon.
    pub fn eps(&self) -> Option<f64> {
        self.eps
    }
}

impl ExtraRepr for RMSNorm {
    fn extra_repr(&self) -> String {
        format!(
            "{}, eps={}, elementwise_affine={}",
            py_tuple(&self.normalized_shape),
            self.eps.map(py_float).unwrap_or_else(|| "None".into()),
            py_bool(self.weight.is_some())
        )
    }
}

impl Compute for RMSNorm {
    type Input = Tensor;
    type Output = Tensor;
    #[track_caller]
    fn compute(&self, x: &Tensor) -> Tensor {
        let k = self.normalized_shape.len();
        if x.rank() < k || x.shape()[x.rank() - k..] != self.normalized_shape[..] {
            panic!("{} expects input [..., {:?}], got {:?}", self, self.normalized_shape, x.shape());
        }
        if !x.dtype().is_compute_float() {
            panic!("{} expects a floating-point input, got {} of shape {:?}", self, x.dtype(), x.shape());
        }
        // One fused pass per row on the CPU (see `Tensor::rms_norm`); `None` is the
        // compute type's machine epsilon, as in PyTorch.
        x.rms_norm(&self.normalized_shape, self.weight.as_deref(), self.eps)
    }
}
