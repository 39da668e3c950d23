// `impl Forward` by hand (the pre-0.2 way): `Forward` runs the hooks and is implemented by
// nn for every `Compute` type, so the error says to implement `Compute` instead.

use nn_core::prelude::*;
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    #[module]
    fc: Linear,
    #[base]
    base: ModuleBase,
}

impl Forward for Net {
    fn forward(&self, x: &Tensor) -> Tensor {
        self.fc.forward(x)
    }
}

fn main() {}
