// `impl Compute` for a struct without a `#[base]` field: a module that runs must hold its
// hooks, so the error names the field to add.

use nn_core::prelude::*;
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    #[module]
    fc: Linear,
}

impl Compute for Net {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        self.fc.forward(x)
    }
}

fn main() {}
