//! Activation functions as modules (no state; registered so `Sequential` numbers them).

use nn_core::{Forward, Module, ModuleBase, Tensor};

/// `max(x, 0)` elementwise (PyTorch's `nn.ReLU`).
#[derive(Module, Default)]
pub struct ReLU {
    #[base]
    base: ModuleBase,
}

impl ReLU {
    /// The activation.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Forward for ReLU {
    fn forward(&self, input: &Tensor) -> Tensor {
        input.relu()
    }
}
