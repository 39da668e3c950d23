//! `Linear`: `y = x W^T + b`.

use nn_core::{functional, ExtraRepr, Forward, Module, ModuleBase, Parameter, Tensor};

/// A fully connected layer, `y = x W^T + b` (PyTorch's `nn.Linear`).
///
/// Parameters: `weight` `[out_features, in_features]`, `bias` `[out_features]` (optional).
/// Init (PyTorch's `reset_parameters`): both uniform in `(-1/sqrt(in_features),
/// 1/sqrt(in_features))`, i.e. `kaiming_uniform_(a = sqrt(5))` for the weight.
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::Linear;
/// let lin = Linear::new(3, 4);
/// assert_eq!(lin.forward(&Tensor::ones(&[2, 3])).shape(), &[2, 4]);
/// assert_eq!(lin.to_string(), "Linear(in_features=3, out_features=4, bias=True)");
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct Linear {
    /// `[out_features, in_features]`.
    #[param]
    pub weight: Parameter,
    /// `[out_features]`, or `None` for a layer without bias.
    #[param]
    pub bias: Option<Parameter>,
    #[base]
    base: ModuleBase,
    in_features: usize,
    out_features: usize,
}

impl Linear {
    /// A layer with bias.
    pub fn new(in_features: usize, out_features: usize) -> Self {
        Self::with_bias(in_features, out_features, true)
    }

    /// A layer with or without bias.
    pub fn with_bias(in_features: usize, out_features: usize, bias: bool) -> Self {
        let bound = if in_features > 0 { 1.0 / (in_features as f64).sqrt() } else { 0.0 };
        let weight = Parameter::new(Tensor::uniform(&[out_features, in_features], -bound, bound));
        let bias = bias.then(|| Parameter::new(Tensor::uniform(&[out_features], -bound, bound)));
        Linear { weight, bias, base: ModuleBase::default(), in_features, out_features }
    }

    /// Input features.
    pub fn in_features(&self) -> usize {
        self.in_features
    }

    /// Output features.
    pub fn out_features(&self) -> usize {
        self.out_features
    }
}

impl ExtraRepr for Linear {
    fn extra_repr(&self) -> String {
        let bias = if self.bias.is_some() { "True" } else { "False" };
        format!("in_features={}, out_features={}, bias={bias}", self.in_features, self.out_features)
    }
}

impl Forward for Linear {
    fn forward(&self, input: &Tensor) -> Tensor {
        let last = input.shape().last().copied();
        if last != Some(self.in_features) {
            panic!(
                "Linear(in_features={}, out_features={}) expects input [..., {}], got {:?}",
                self.in_features,
                self.out_features,
                self.in_features,
                input.shape()
            );
        }
        functional::linear(input, &self.weight, self.bias.as_deref())
    }
}
