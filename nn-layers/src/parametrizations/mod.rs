//! Weight norm and spectral norm as parametrizations (PyTorch's
//! `torch.nn.utils.parametrizations`), built on [`crate::parametrize`].
//!
//! Each takes the module, the parameter's name and its options, registers the
//! parametrization and returns the module, with PyTorch's state-dict keys:
//!
//! | function | originals | buffers |
//! |---|---|---|
//! | [`weight_norm`] | `parametrizations.weight.original0` (the magnitude `g`), `original1` (the direction `v`) | none |
//! | [`spectral_norm`] | `parametrizations.weight.original` | `parametrizations.weight.0._u`, `_v` |
//! | [`orthogonal`] | `parametrizations.weight.original` | `parametrizations.weight.0.base` |
//!
//! A PyTorch checkpoint saved from such a module loads into the same module built here, and
//! the reverse.
//!
//! ```
//! use nn_core::prelude::*;
//! use nn_layers::parametrizations::weight_norm;
//! use nn_layers::Linear;
//!
//! let lin = weight_norm(Linear::new(4, 3), "weight", Some(0)).unwrap();
//! let sd = lin.state_dict();
//! assert_eq!(sd.get("parametrizations.weight.original0").unwrap().shape(), &[3, 1]);
//! assert_eq!(sd.get("parametrizations.weight.original1").unwrap().shape(), &[3, 4]);
//! // The weight computed from them is the weight the layer had.
//! let w = lin.weight.value();
//! let g = sd.get("parametrizations.weight.original0").unwrap();
//! let rows = w.square().sum_dim(1, true).sqrt();
//! assert!(rows.sub(g).abs().max().item() < 1e-6);
//! ```
//!
//! [`orthogonal`] keeps `parametrizations.weight.original` and the buffer
//! `parametrizations.weight.0.base`.

mod orthogonal;

pub use orthogonal::{Orthogonal, OrthogonalMap};

use nn_core::module::parametrize::{register_parametrization, Parametrization};
use nn_core::prelude::*;
use nn_core::{no_grad, Error, Result};

/// PyTorch's `_WeightNorm`: `weight = g * v / ||v||`, the norm taken over every dim but
/// `dim` (over the whole tensor for `None`).
#[derive(Module)]
#[module(name = "_WeightNorm")]
pub struct WeightNorm {
    dim: Option<usize>,
}

impl WeightNorm {
    /// The norm of `v` over every dim but `self.dim`, keeping dims (`torch.norm_except_dim`).
    fn norm_except_dim(&self, v: &Tensor) -> Tensor {
        let dims: Vec<usize> = (0..v.rank()).filter(|&d| Some(d) != self.dim).collect();
        if dims.is_empty() {
            return v.abs();
        }
        v.square().sum_dims(&dims, true).sqrt()
    }
}

impl Parametrization for WeightNorm {
    fn forward(&self, originals: &[Tensor], _training: bool) -> Tensor {
        let [g, v] = originals else { panic!("_WeightNorm takes two originals (g, v), got {}", originals.len()) };
        v * &(g / &self.norm_except_dim(v))
    }

    fn right_inverse(&self, weight: &Tensor) -> Option<Vec<Tensor>> {
        Some(vec![self.norm_except_dim(weight), weight.clone()])
    }
}

/// Registers weight norm on `module`'s parameter `name` (PyTorch's
/// `parametrizations.weight_norm`): the weight becomes `g * v / ||v||` with the norm over
/// every dim but `dim` (`Some(0)`, PyTorch's default: one magnitude per output row), or over
/// the whole tensor (`None`). `g` starts as the weight's norm and `v` as the weight, so the
/// weight is unchanged.
///
/// # Errors
/// As [`register_parametrization`]: no parameter `name`, or `dim` past the weight's rank.
pub fn weight_norm<M: Module>(mut module: M, name: &str, dim: Option<usize>) -> Result<M> {
    let rank = nn_core::module::parametrize::value_of(&module, name)?.rank();
    if let Some(d) = dim.filter(|&d| d >= rank) {
        return Err(Error::Parametrization {
            module: module.type_name().to_string(),
            tensor: name.to_string(),
            reason: format!("weight_norm over dim {d} of a tensor of rank {rank}"),
        });
    }
    register_parametrization(&mut module, name, WeightNorm { dim })?;
    Ok(module)
}

/// Options of [`spectral_norm`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpectralNormConfig {
    /// Power iterations per forward in training mode (1).
    pub n_power_iterations: usize,
    /// Added to norms before dividing (1e-12).
    pub eps: f64,
    /// The dim of the output rows: `None` picks 1 for transposed convolutions and 0 for
    /// everything else, as PyTorch.
    pub dim: Option<usize>,
}

impl Default for SpectralNormConfig {
    fn default() -> Self {
        SpectralNormConfig { n_power_iterations: 1, eps: 1e-12, dim: None }
    }
}

/// PyTorch's `_SpectralNorm`: `weight / sigma`, `sigma` the largest singular value of the
/// weight seen as a matrix (rows along `dim`), estimated by power iteration with the
/// vectors `_u` and `_v` kept as buffers. In training mode each forward runs
/// `n_power_iterations` more steps first (without a graph); in eval mode `_u` and `_v` stay.
#[derive(Module)]
#[module(name = "_SpectralNorm")]
pub struct SpectralNorm {
    #[buffer]
    _u: Option<Tensor>,
    #[buffer]
    _v: Option<Tensor>,
    dim: usize,
    eps: f64,
    n_power_iterations: usize,
}

/// `x / max(||x||, eps)` over a vector (`F.normalize(x, dim=0)`).
fn normalize(x: &Tensor, eps: f64) -> Tensor {
    x / &x.square().sum().sqrt().clamp(eps, f64::INFINITY)
}

impl SpectralNorm {
    fn new(weight: &Tensor, config: SpectralNormConfig, dim: usize) -> SpectralNorm {
        let mut s =
            SpectralNorm { _u: None, _v: None, dim, eps: config.eps, n_power_iterations: config.n_power_iterations };
        if weight.rank() > 1 {
            let m = no_grad(|| s.matrix(weight));
            let (h, w) = (m.shape()[0], m.shape()[1]);
            let draw = |n: usize| Tensor::randn(&[n]).to_dtype(weight.dtype()).to_device(weight.device());
            s._u = Some(normalize(&draw(h), s.eps));
            s._v = Some(normalize(&draw(w), s.eps));
            s.power_method(&m, 15);
        }
        s
    }

    /// The weight as a matrix, rows along `dim`.
    fn matrix(&self, weight: &Tensor) -> Tensor {
        let w = if self.dim == 0 {
            weight.clone()
        } else {
            let mut perm = vec![self.dim];
            perm.extend((0..weight.rank()).filter(|&d| d != self.dim));
            weight.permute(&perm)
        };
        w.flatten(1, w.rank() - 1)
    }

    fn power_method(&self, m: &Tensor, iterations: usize) {
        let (Some(u), Some(v)) = (&self._u, &self._v) else { return };
        no_grad(|| {
            let m = m.detach();
            for _ in 0..iterations {
                u.copy_(&normalize(&m.matmul(v), self.eps));
                v.copy_(&normalize(&m.t().matmul(u), self.eps));
            }
        });
    }
}

impl Parametrization for SpectralNorm {
    fn forward(&self, originals: &[Tensor], training: bool) -> Tensor {
        let [weight] = originals else { panic!("_SpectralNorm takes one original, got {}", originals.len()) };
        let (Some(u), Some(v)) = (&self._u, &self._v) else {
            return normalize(weight, self.eps);
        };
        let m = self.matrix(weight);
        if training {
            self.power_method(&m, self.n_power_iterations);
        }
        let (u, v) = (u.detach().copy(), v.detach().copy());
        let sigma = (&u * &m.matmul(&v)).sum();
        weight / &sigma
    }

    fn right_inverse(&self, value: &Tensor) -> Option<Vec<Tensor>> {
        Some(vec![value.clone()])
    }
}

/// Registers spectral norm on `module`'s parameter `name` (PyTorch's
/// `parametrizations.spectral_norm`): the weight is divided by its largest singular value,
/// estimated by power iteration (15 steps at registration from random vectors, then
/// `n_power_iterations` per training forward). A 1-d weight is divided by its norm.
///
/// # Errors
/// As [`register_parametrization`]: no parameter `name`, or `dim` past the weight's rank.
pub fn spectral_norm<M: Module>(mut module: M, name: &str, config: SpectralNormConfig) -> Result<M> {
    let weight = nn_core::module::parametrize::value_of(&module, name)?;
    let transposed = module.type_name().starts_with("ConvTranspose");
    let dim = config.dim.unwrap_or(usize::from(transposed));
    if dim >= weight.rank().max(1) {
        return Err(Error::Parametrization {
            module: module.type_name().to_string(),
            tensor: name.to_string(),
            reason: format!("spectral_norm over dim {dim} of a tensor of rank {}", weight.rank()),
        });
    }
    let p = SpectralNorm::new(&weight.detach(), config, dim);
    register_parametrization(&mut module, name, p)?;
    Ok(module)
}

/// Registers an orthogonal parametrization on `module`'s parameter `name` (PyTorch's
/// `parametrizations.orthogonal` with `use_trivialization=True`): the weight (a matrix) is
/// kept with orthonormal columns (rows, when it is wider than tall) as `base @ map(original)`.
/// At registration `base` becomes the weight made orthogonal (its QR decomposition's `Q`
/// with a positive diagonal in `R`; a non-square weight is first completed with random
/// columns) and `original` is `-I`, so the weight is `base`'s leading columns.
///
/// # Errors
/// As [`register_parametrization`]: no parameter `name`, or a weight that is not a matrix.
pub fn orthogonal<M: Module>(mut module: M, name: &str, map: OrthogonalMap) -> Result<M> {
    let weight = nn_core::module::parametrize::value_of(&module, name)?;
    if weight.rank() != 2 {
        return Err(Error::Parametrization {
            module: module.type_name().to_string(),
            tensor: name.to_string(),
            reason: format!("orthogonal needs a matrix, got shape {:?}", weight.shape()),
        });
    }
    let p = Orthogonal::new(weight.shape(), map, &weight);
    register_parametrization(&mut module, name, p)?;
    Ok(module)
}
