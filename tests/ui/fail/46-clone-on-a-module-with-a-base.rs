// The same with a `#[base]` field: `ModuleBase` is not `Clone` either, so the derived
// `Clone` also fails at that field (two errors, both at the user's code).
use nn_core::prelude::*;
use nn_layers::Linear;

#[derive(Module, Clone)]
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
        self.fc.forward(x)
    }
}

fn main() {}
