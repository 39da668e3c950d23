//! `Dropout`.

use nn_core::{Compute, ExtraRepr, Module, ModuleBase, Tensor};

use crate::repr::py_float;

/// Zeroes elements with probability `p` in training and scales the rest by `1 / (1 - p)`;
/// the identity in evaluation (PyTorch's `nn.Dropout`).
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::Dropout;
/// let mut d = Dropout::new(0.5);
/// assert_eq!(d.to_string(), "Dropout(p=0.5, inplace=False)");
/// d.eval();
/// assert_eq!(d.forward(&Tensor::ones(&[3])).to_vec(), vec![1.0; 3]);
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct Dropout {
    #[base]
    base: ModuleBase,
    p: f64,
}

impl Dropout {
    /// Dropout with probability `p`.
    ///
    /// # Panics
    /// When `p` is outside `[0, 1]`.
    #[track_caller]
    pub fn new(p: f64) -> Self {
        if !(0.0..=1.0).contains(&p) {
            panic!("Dropout: probability has to be between 0 and 1, but got {p}");
        }
        Dropout { base: ModuleBase::default(), p }
    }

    /// The drop probability.
    pub fn p(&self) -> f64 {
        self.p
    }
}

impl ExtraRepr for Dropout {
    fn extra_repr(&self) -> String {
        format!("p={}, inplace=False", py_float(self.p))
    }
}

impl Compute for Dropout {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        x.dropout(self.p, self.base.is_training())
    }
}
