//! `Linear`, `Bilinear`, `LazyLinear`, `Identity`, `Flatten`, and Hugging Face's `Conv1D`.

use nn_core::module::parametrize::optional_value;
use std::sync::OnceLock;

use nn_core::{functional, init, Compute, ExtraRepr, Forward, Module, ModuleBase, Parameter, Tensor};

use crate::repr::py_bool;

/// A fully connected layer, `y = x W^T + b` (PyTorch's `nn.Linear`).
///
/// Parameters: `weight` `[out_features, in_features]`, `bias` `[out_features]` (optional).
/// Init (PyTorch's `reset_parameters`): `weight` by `kaiming_uniform_(a = sqrt(5))`, i.e.
/// `U(-1/sqrt(in_features), 1/sqrt(in_features))`, `bias` uniform with the same bound.
/// Input `[*, in_features]`, output `[*, out_features]`.
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
        let weight = Tensor::zeros(&[out_features, in_features]);
        init::default_weight_(&weight);
        let bias = bias.then(|| {
            let b = Tensor::zeros(&[out_features]);
            init::default_bias_(&b, in_features);
            Parameter::new(b)
        });
        Linear { weight: Parameter::new(weight), bias, base: ModuleBase::default(), in_features, out_features }
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
        format!(
            "in_features={}, out_features={}, bias={}",
            self.in_features,
            self.out_features,
            py_bool(self.bias.is_some())
        )
    }
}

impl Compute for Linear {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        if x.shape().last() != Some(&self.in_features) {
            panic!("{} expects input [..., {}], got {:?}", self, self.in_features, x.shape());
        }
        functional::linear(x, &self.weight.value(), optional_value(&self.bias).as_deref())
    }
}

/// `y = x1^T A x2 + b` (PyTorch's `nn.Bilinear`).
///
/// Parameters: `weight` `[out, in1, in2]`, `bias` `[out]`; both `U(-1/sqrt(in1),
/// 1/sqrt(in1))`. Run on both inputs with `bilinear.forward((&x1, &x2))`.
#[derive(Module)]
#[module(extra_repr)]
pub struct Bilinear {
    /// `[out_features, in1_features, in2_features]`.
    #[param]
    pub weight: Parameter,
    /// `[out_features]`.
    #[param]
    pub bias: Option<Parameter>,
    #[base]
    base: ModuleBase,
    dims: (usize, usize, usize),
}

impl Bilinear {
    /// A bilinear layer with bias.
    pub fn new(in1_features: usize, in2_features: usize, out_features: usize) -> Self {
        Self::with_bias(in1_features, in2_features, out_features, true)
    }

    /// A bilinear layer with or without bias.
    pub fn with_bias(in1: usize, in2: usize, out: usize, bias: bool) -> Self {
        let bound = 1.0 / (in1 as f64).sqrt();
        Bilinear {
            weight: Parameter::new(Tensor::uniform(&[out, in1, in2], -bound, bound)),
            bias: bias.then(|| Parameter::new(Tensor::uniform(&[out], -bound, bound))),
            base: ModuleBase::default(),
            dims: (in1, in2, out),
        }
    }
}

impl Compute for Bilinear {
    /// The two inputs `[*, in1]` and `[*, in2]`: `bilinear.forward((&x1, &x2))`.
    type Input = (Tensor, Tensor);
    type Output = Tensor;

    #[track_caller]
    fn compute(&self, (x1, x2): &(Tensor, Tensor)) -> Tensor {
        let (i, j, _) = self.dims;
        if x1.shape().last() != Some(&i)
            || x2.shape().last() != Some(&j)
            || x1.shape()[..x1.rank() - 1] != x2.shape()[..x2.rank().max(1) - 1]
        {
            panic!(
                "{} expects inputs [..., {i}] and [..., {j}] with equal leading dims, got {:?} and {:?}",
                self,
                x1.shape(),
                x2.shape()
            );
        }
        functional::bilinear(x1, x2, &self.weight.value(), optional_value(&self.bias).as_deref())
    }
}

impl ExtraRepr for Bilinear {
    fn extra_repr(&self) -> String {
        let (a, b, c) = self.dims;
        format!("in1_features={a}, in2_features={b}, out_features={c}, bias={}", py_bool(self.bias.is_some()))
    }
}

/// A `Linear` whose `in_features` is taken from the first input (PyTorch's
/// `nn.LazyLinear`). Until then it has no parameters: [`Module::state_dict`] panics with a
/// message saying so, and [`Module::try_state_dict`] is an error. After it, it is a
/// [`Linear`] to downcasts (`as_any`, `get_submodule_as`, an [`apply`](Module::apply)
/// initialiser) and to printing, as PyTorch's lazy module becomes an `nn.Linear`.
///
/// ```
/// use nn_core::{init, Forward, Module, Tensor};
/// use nn_layers::{LazyLinear, Linear, Sequential};
/// let lazy = LazyLinear::new(4);
/// assert!(lazy.try_state_dict().is_err());
/// lazy.forward(&Tensor::ones(&[2, 7]));
/// assert_eq!(lazy.state_dict().get("weight").unwrap().shape(), &[4, 7]);
///
/// // An initialiser for every `Linear` reaches the materialised lazy layer too.
/// let mut model = Sequential::new().add(lazy).add(Linear::new(4, 2));
/// model.apply(&mut |m| {
///     if let Some(l) = m.as_any_mut().downcast_mut::<Linear>() {
///         init::zeros_(&l.weight);
///     }
/// });
/// assert!(model.state_dict().iter().filter(|(k, _)| k.ends_with("weight")).all(|(_, w)| w.to_vec().iter().all(|v| *v == 0.0)));
/// ```
pub struct LazyLinear {
    inner: OnceLock<Linear>,
    out_features: usize,
    bias: bool,
    base: ModuleBase,
}

impl LazyLinear {
    /// A lazy layer with bias.
    pub fn new(out_features: usize) -> Self {
        LazyLinear { inner: OnceLock::new(), out_features, bias: true, base: ModuleBase::default() }
    }

    /// The materialised layer, once a forward pass has run.
    pub fn materialized(&self) -> Option<&Linear> {
        self.inner.get()
    }
}

impl Compute for LazyLinear {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let in_features =
            *x.shape().last().unwrap_or_else(|| panic!("LazyLinear expects input [..., in_features], got a scalar"));
        let lin = self.inner.get_or_init(|| {
            nn_core::module::forward_checks::allow_new_parameters(|| {
                Linear::with_bias(in_features, self.out_features, self.bias)
            })
        });
        lin.forward(x)
    }
}

crate::lazy::lazy_module!(LazyLinear, fields(out_features, bias), |s| format!(
    "in_features=0, out_features={}, bias={}",
    s.out_features,
    py_bool(s.bias)
));

/// Returns its input (PyTorch's `nn.Identity`).
#[derive(Module, Default)]
pub struct Identity {
    #[base]
    base: ModuleBase,
}

impl Identity {
    /// The identity layer.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Compute for Identity {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        x.clone()
    }
}

/// Flattens dims `start_dim..=end_dim` (PyTorch's `nn.Flatten`, default `1..=-1`).
#[derive(Module)]
#[module(extra_repr)]
pub struct Flatten {
    #[base]
    base: ModuleBase,
    start_dim: i64,
    end_dim: i64,
}

impl Default for Flatten {
    fn default() -> Self {
        Flatten { base: ModuleBase::default(), start_dim: 1, end_dim: -1 }
    }
}

impl Flatten {
    /// Flattens everything but the batch dim.
    pub fn new() -> Self {
        Self::default()
    }

    /// Flattens `start_dim..=end_dim` (negative dims count from the back).
    pub fn with_dims(start_dim: i64, end_dim: i64) -> Self {
        Flatten { base: ModuleBase::default(), start_dim, end_dim }
    }
}

impl ExtraRepr for Flatten {
    fn extra_repr(&self) -> String {
        format!("start_dim={}, end_dim={}", self.start_dim, self.end_dim)
    }
}

impl Compute for Flatten {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        x.flatten(self.start_dim, self.end_dim)
    }
}

/// Hugging Face's `Conv1D` (transformers' `pytorch_utils.Conv1D`, used by GPT-2): a linear
/// layer whose weight is stored transposed, `[in, out]`, so `y = x W + b`.
///
/// It exists to load HF checkpoints as they are. GPT-2's `attn.c_attn`, `attn.c_proj`,
/// `mlp.c_fc` and `mlp.c_proj` hold `Conv1D` weights `[in, out]`; loaded into a
/// [`Linear`] (which stores `[out, in]`), a non-square one fails with a shape mismatch,
/// but a square one (`attn.c_proj`, `[E, E]`) loads without complaint and computes with
/// the transposed matrix, silently wrong. `Conv1D` keeps HF's layout and key names, so the
/// state dict loads unchanged, and its printout says which layout it holds. (Despite the
/// name it is no convolution; PyTorch's `nn.Conv1d` is [`crate::Conv1d`].)
///
/// Constructor arguments as HF's: `Conv1D::new(nf, nx)`, `nf` output features, `nx` input
/// features. Parameters: `weight` `[nx, nf]`, init normal(0, 0.02); `bias` `[nf]`, zeros
/// (HF's init). Input `[*, nx]`, output `[*, nf]`.
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::Conv1D;
/// let c_attn = Conv1D::new(12, 4); // 4 features in, 12 out
/// assert_eq!(c_attn.to_string(), "Conv1D(nf=12, nx=4)");
/// assert_eq!(c_attn.weight.shape(), &[4, 12]);
/// assert_eq!(c_attn.forward(&Tensor::ones(&[2, 3, 4])).shape(), &[2, 3, 12]);
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct Conv1D {
    /// `[nx, nf]` (`[in, out]`: the transpose of [`Linear`]'s).
    #[param]
    pub weight: Parameter,
    /// `[nf]`.
    #[param]
    pub bias: Parameter,
    #[base]
    base: ModuleBase,
    nf: usize,
    nx: usize,
}

impl Conv1D {
    /// `nx` input features to `nf` output features (HF's argument order).
    pub fn new(nf: usize, nx: usize) -> Self {
        Conv1D {
            weight: Parameter::new(Tensor::normal(&[nx, nf], 0.0, 0.02)),
            bias: Parameter::new(Tensor::zeros(&[nf])),
            base: ModuleBase::default(),
            nf,
            nx,
        }
    }

    /// Output features (HF's `nf`).
    pub fn nf(&self) -> usize {
        self.nf
    }

    /// Input features (HF's `nx`).
    pub fn nx(&self) -> usize {
        self.nx
    }
}

impl ExtraRepr for Conv1D {
    /// HF's `__repr__` is `Conv1D(nf=.., nx=..)`.
    fn extra_repr(&self) -> String {
        format!("nf={}, nx={}", self.nf, self.nx)
    }
}

impl Compute for Conv1D {
    type Input = Tensor;
    type Output = Tensor;
    /// `torch.addmm(bias, x.view(-1, nx), weight).view(*x.shape[:-1], nf)`, as HF.
    #[track_caller]
    fn compute(&self, x: &Tensor) -> Tensor {
        if x.rank() == 0 || x.shape()[x.rank() - 1] != self.nx {
            panic!("{} expects input [..., {}] (nx), got {:?}", self, self.nx, x.shape());
        }
        let lead = &x.shape()[..x.rank() - 1];
        let rows: usize = lead.iter().product();
        let y = self.bias.value().addmm(&x.reshape(&[rows, self.nx]), &self.weight.value());
        let mut out = lead.to_vec();
        out.push(self.nf);
        y.reshape(&out)
    }
}
