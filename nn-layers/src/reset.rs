//! [`ResetParameters`]: PyTorch's `reset_parameters()` on every layer with parameters.

use nn_core::init::{self, calculate_fan_in_and_fan_out};
use nn_core::module::ModuleExt;
use nn_core::{Module, Parameter};

use crate::{
    BatchNorm1d, BatchNorm2d, BatchNorm3d, Bilinear, Conv1D, Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,
    Embedding, GroupNorm, LayerNorm, LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d, LazyConv1d, LazyConv2d,
    LazyConv3d, LazyLinear, Linear, MultiheadAttention, RMSNorm, Transformer, GRU, LSTM, RNN,
};

/// PyTorch's `reset_parameters()`: draws the layer's parameters again, in place, from the
/// distributions its constructor uses: the same [`Parameter`](nn_core::Parameter) handles (an optimizer
/// built over them keeps working), the same dtype and device, gradients untouched. Norm
/// layers also reset their running statistics (PyTorch's `reset_running_stats`). Each
/// layer resets what PyTorch's resets and nothing else, so [`MultiheadAttention`] keeps
/// `out_proj.weight` and [`Transformer`] its one-dimensional parameters, as PyTorch's
/// `_reset_parameters` do. A lazy layer that has not run has nothing to reset (PyTorch's
/// lazy modules skip it too); once materialised it resets as the layer it became.
///
/// The layers that hold only other layers (`TransformerEncoderLayer`, the encoders and
/// decoders, the containers) have no `reset_parameters` in PyTorch and none here: reset
/// their layers, e.g. with [`Module::apply`] and a downcast, as below.
///
/// ```
/// use nn_core::prelude::*;
/// use nn_layers::{Linear, ResetParameters};
///
/// let mut layer = Linear::new(4, 3);
/// let (before, id) = (layer.weight.to_vec(), layer.weight.id());
/// layer.reset_parameters();
/// assert_ne!(layer.weight.to_vec(), before); // new values ...
/// assert_eq!(layer.weight.id(), id); // ... in the same parameter
/// assert!(layer.weight.to_vec().iter().all(|w| w.abs() <= 0.5)); // U(-1/sqrt(4), 1/sqrt(4))
///
/// // Every layer of a model, as PyTorch's `model.apply(reset)`:
/// #[derive(Module)]
/// struct Net { #[module] a: Linear, #[module] b: Linear }
/// let mut net = Net { a: Linear::new(2, 2), b: Linear::new(2, 1) };
/// let before = net.b.weight.to_vec();
/// net.apply(&mut |m| {
///     if let Some(l) = m.as_any_mut().downcast_mut::<Linear>() {
///         l.reset_parameters();
///     }
/// });
/// assert_ne!(net.b.weight.to_vec(), before);
/// ```
pub trait ResetParameters {
    /// Draws the parameters again (and resets a norm's running statistics).
    fn reset_parameters(&mut self);
}

/// A direct parameter of `m`, if it has one of that name (an optional bias).
fn param(m: &dyn Module, name: &str) -> Option<Parameter> {
    m.get_parameter(name).ok()
}

/// A direct parameter every layer of its kind has.
#[track_caller]
fn required(m: &dyn Module, name: &str) -> Parameter {
    param(m, name).unwrap_or_else(|| panic!("reset_parameters: {} has no parameter `{name}`", m.type_name()))
}

/// Linear and convolution layers (PyTorch's `Linear` and `_ConvNd`): the weight by
/// `kaiming_uniform_(a = sqrt(5))`, the bias from `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`,
/// `fan_in` the weight's (for a transposed convolution, its second dimension times the
/// kernel, as PyTorch computes it).
fn kaiming_layer(m: &dyn Module) {
    if m.is_uninitialized() {
        return;
    }
    let w = required(m, "weight");
    init::default_weight_(&w);
    if let Some(b) = param(m, "bias") {
        init::default_bias_(&b, calculate_fan_in_and_fan_out(w.shape()).0);
    }
}

/// Affine norms: weight ones, bias zeros.
fn affine_norm(m: &dyn Module) {
    if let Some(w) = param(m, "weight") {
        init::ones_(&w);
    }
    if let Some(b) = param(m, "bias") {
        init::zeros_(&b);
    }
}

/// Batch norms (PyTorch's `_NormBase.reset_parameters`): the running statistics (mean 0,
/// variance 1, no batches tracked), then the affine terms.
fn batch_norm(m: &dyn Module) {
    if m.is_uninitialized() {
        return;
    }
    for (name, value) in [("running_mean", 0.0), ("running_var", 1.0), ("num_batches_tracked", 0.0)] {
        if let Ok(t) = m.get_buffer(name) {
            init::constant_(&t, value);
        }
    }
    affine_norm(m);
}

/// Recurrent layers: every parameter from `U(-1/sqrt(hidden), 1/sqrt(hidden))`.
fn recurrent(m: &dyn Module, hidden_size: usize) {
    let bound = if hidden_size > 0 { 1.0 / (hidden_size as f64).sqrt() } else { 0.0 };
    for p in m.parameters() {
        init::uniform_(&p, -bound, bound);
    }
}

macro_rules! reset_with {
    ($f:ident: $($ty:ty),+ $(,)?) => {$(
        impl ResetParameters for $ty {
            fn reset_parameters(&mut self) {
                $f(self.as_dyn())
            }
        }
    )+};
}

reset_with!(kaiming_layer: Linear, LazyLinear, Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d);
reset_with!(kaiming_layer: LazyConv1d, LazyConv2d, LazyConv3d);
reset_with!(affine_norm: LayerNorm, GroupNorm, RMSNorm);
reset_with!(batch_norm: BatchNorm1d, BatchNorm2d, BatchNorm3d, LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d);

impl ResetParameters for Bilinear {
    /// Weight and bias from `U(-1/sqrt(in1_features), 1/sqrt(in1_features))`.
    fn reset_parameters(&mut self) {
        let bound = 1.0 / (self.weight.shape()[1] as f64).sqrt();
        init::uniform_(&self.weight, -bound, bound);
        if let Some(b) = &self.bias {
            init::uniform_(b, -bound, bound);
        }
    }
}

impl ResetParameters for Conv1D {
    /// transformers' GPT-2 init: weight from `N(0, 0.02^2)`, bias zeros.
    fn reset_parameters(&mut self) {
        init::normal_(&self.weight, 0.0, 0.02);
        init::zeros_(&self.bias);
    }
}

impl ResetParameters for Embedding {
    /// The table from `N(0, 1)`, the `padding_idx` row (if any) zeros.
    fn reset_parameters(&mut self) {
        init::normal_(&self.weight, 0.0, 1.0);
        self.zero_padding_row();
    }
}

impl ResetParameters for MultiheadAttention {
    /// PyTorch's `_reset_parameters`: `in_proj_weight` by `xavier_uniform_`, `in_proj_bias`
    /// and `out_proj.bias` zeros; `out_proj.weight` is left as it is.
    fn reset_parameters(&mut self) {
        let m = self.as_dyn();
        init::xavier_uniform_(&required(m, "in_proj_weight"), 1.0);
        for name in ["in_proj_bias", "out_proj.bias"] {
            if let Ok(b) = m.get_parameter(name) {
                init::zeros_(&b);
            }
        }
    }
}

impl ResetParameters for RNN {
    fn reset_parameters(&mut self) {
        recurrent(self.as_dyn(), self.hidden_size())
    }
}

impl ResetParameters for LSTM {
    fn reset_parameters(&mut self) {
        recurrent(self.as_dyn(), self.hidden_size())
    }
}

impl ResetParameters for GRU {
    fn reset_parameters(&mut self) {
        recurrent(self.as_dyn(), self.hidden_size())
    }
}

impl ResetParameters for Transformer {
    /// PyTorch's `Transformer._reset_parameters`: every parameter of more than one
    /// dimension by `xavier_uniform_`; biases and norm terms are left as they are.
    fn reset_parameters(&mut self) {
        xavier_matrices(self.as_dyn());
    }
}

/// Every parameter of more than one dimension by `xavier_uniform_` (what
/// [`Transformer`]'s constructor and reset do).
pub(crate) fn xavier_matrices(m: &dyn Module) {
    for p in m.parameters() {
        if p.rank() > 1 {
            init::xavier_uniform_(&p, 1.0);
        }
    }
}
