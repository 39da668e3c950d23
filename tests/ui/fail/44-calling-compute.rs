// Calling `compute` directly skips the module's hooks (PyTorch's `module.forward(x)`
// instead of `module(x)`): the call is a `deprecated` warning that says to call `forward`,
// denied here as `-D warnings` denies it. Implementing `compute` warns nothing.
#![deny(deprecated)]

use nn_core::prelude::*;
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    #[module]
    fc: Linear,
    #[base]
    base: ModuleBase,
}

impl Compute for Net {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        self.fc.compute(x).relu()
    }
}

fn main() {}
