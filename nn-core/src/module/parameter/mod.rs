//! `Parameter`: a tensor that is a model's trainable state and an optimizer target, and
//! the parametrizations that can be registered on one ([`parametrize`]).

pub mod parametrize;

use std::ops::Deref;
use std::sync::Arc;

use crate::ops::Operand;
use crate::tensor::Tensor;

/// A tensor registered as trainable module state (PyTorch's `nn.Parameter`).
///
/// A `Parameter` is a handle: clones (the one in the model, the one an optimizer holds)
/// are the same tensor, so an optimizer step is seen by the model, and `to_dtype` /
/// `load_state_dict` on the model are seen by the optimizer. It dereferences to
/// [`Tensor`], so it can be used wherever a `&Tensor` is expected.
///
/// A parameter with a [parametrization](parametrize) registered on it (weight norm,
/// spectral norm, ...) has no tensor of its own to lend: its value is computed from the
/// parametrization's originals, and read with [`value`](Parameter::value). Dereferencing
/// such a parameter panics naming it, so a layer that reads its weight directly never
/// silently skips the parametrization.
///
/// ```
/// use nn_core::{Parameter, Tensor};
/// let p = Parameter::new(Tensor::zeros(&[3]));
/// assert!(p.requires_grad() && p.is_leaf());
/// let y = (&*p * 2.0).sum();
/// y.backward();
/// assert_eq!(p.grad().unwrap().to_vec(), vec![2.0; 3]);
/// ```
#[derive(Clone)]
pub struct Parameter {
    tensor: Tensor,
    /// The parametrizations registered on this parameter, shared by its clones.
    link: Arc<parametrize::Link>,
}

impl Parameter {
    /// Wraps `data` (detached from any graph, sharing its values) as a parameter that
    /// requires grad.
    ///
    /// # Panics
    /// When `data` is not floating point (only floats can require gradients).
    #[track_caller]
    pub fn new(data: Tensor) -> Self {
        Parameter::with_requires_grad(data, true)
    }

    /// Wraps `data` with an explicit `requires_grad` (PyTorch's
    /// `Parameter(data, requires_grad=False)`: registered and saved, but frozen).
    #[track_caller]
    pub fn with_requires_grad(data: Tensor, requires_grad: bool) -> Self {
        crate::autograd::forward_checks::check_new_parameter(std::panic::Location::caller());
        let t = data.detach();
        t.requires_grad_(requires_grad);
        Parameter { tensor: t, link: Arc::default() }
    }

    /// A parameter handle on `tensor` itself (no detach): a parametrization's single
    /// original, which is the tensor the parameter held.
    pub(crate) fn sharing(tensor: Tensor) -> Self {
        Parameter { tensor, link: Arc::default() }
    }

    /// The underlying tensor handle.
    ///
    /// # Panics
    /// When a parametrization is registered on the parameter (see [`value`](Parameter::value)).
    #[track_caller]
    pub fn tensor(&self) -> &Tensor {
        if let Some(g) = self.link.current() {
            g.refuse_direct_read();
        }
        &self.tensor
    }

    /// The parameter's value: its tensor, or, when a [parametrization](parametrize) is
    /// registered on it, the tensor the parametrization computes from its originals (a
    /// graph back to them, so gradients reach the originals). Inside
    /// [`parametrize::cached`] the computed value is kept for the scope.
    ///
    /// Layers read their parameters with it, so that any of them can be parametrized.
    ///
    /// ```
    /// use nn_core::{Parameter, Tensor};
    /// let p = Parameter::new(Tensor::ones(&[2]));
    /// assert_eq!(p.value().to_vec(), [1.0, 1.0]); // a plain parameter lends its tensor
    /// ```
    pub fn value(&self) -> std::borrow::Cow<'_, Tensor> {
        match self.link.current() {
            None => std::borrow::Cow::Borrowed(&self.tensor),
            Some(g) => std::borrow::Cow::Owned(g.list.value()),
        }
    }

    /// Whether a parametrization is registered on the parameter.
    pub fn is_parametrized(&self) -> bool {
        self.link.current().is_some()
    }

    /// The tensor the parameter holds, parametrized or not (internal bookkeeping: the
    /// placeholder a removal writes, identities for copies).
    pub(crate) fn raw(&self) -> &Tensor {
        &self.tensor
    }

    /// The parametrizations registered on the parameter, if any.
    pub(crate) fn link(&self) -> &parametrize::Link {
        &self.link
    }
}

impl Deref for Parameter {
    type Target = Tensor;
    /// # Panics
    /// When a parametrization is registered on the parameter: read it with
    /// [`Parameter::value`].
    #[track_caller]
    fn deref(&self) -> &Tensor {
        self.tensor()
    }
}

impl AsRef<Tensor> for Parameter {
    #[track_caller]
    fn as_ref(&self) -> &Tensor {
        self.tensor()
    }
}

impl std::fmt::Debug for Parameter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.link.current() {
            None => write!(f, "Parameter containing:\n{}", self.tensor),
            Some(g) => write!(f, "Parameter parametrized by {}", g.list.describe()),
        }
    }
}

/// A parameter as the operand of in-place arithmetic (`x.add_(&p)`).
impl<'a> From<&'a Parameter> for Operand<'a> {
    #[track_caller]
    fn from(p: &'a Parameter) -> Self {
        Operand::Broadcast(p.tensor())
    }
}
