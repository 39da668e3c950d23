//! `Parameter`: a tensor that is a model's trainable state and an optimizer target.

use std::ops::Deref;

use crate::ops::Operand;
use crate::tensor::Tensor;

/// A tensor registered as trainable module state (PyTorch's `nn.Parameter`).
///
/// A `Parameter` is a handle: clones (the one in the model, the one an optimizer holds)
/// are the same tensor, so an optimizer step is seen by the model, and `to_dtype` /
/// `load_state_dict` on the model are seen by the optimizer. It dereferences to
/// [`Tensor`], so it can be used wherever a `&Tensor` is expected.
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
pub struct Parameter(Tensor);

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
        let t = data.detach();
        t.requires_grad_(requires_grad);
        Parameter(t)
    }

    /// The underlying tensor handle.
    pub fn tensor(&self) -> &Tensor {
        &self.0
    }
}

impl Deref for Parameter {
    type Target = Tensor;
    fn deref(&self) -> &Tensor {
        &self.0
    }
}

impl AsRef<Tensor> for Parameter {
    fn as_ref(&self) -> &Tensor {
        &self.0
    }
}

impl std::fmt::Debug for Parameter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Parameter containing:\n{}", self.0)
    }
}

/// A parameter as the operand of in-place arithmetic (`x.add_(&p)`).
impl<'a> From<&'a Parameter> for Operand<'a> {
    fn from(p: &'a Parameter) -> Self {
        Operand::Broadcast(p)
    }
}
