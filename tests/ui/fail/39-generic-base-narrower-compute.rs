// A generic module whose `Compute` impl needs more than the struct's own bounds: for some
// `M` the struct would hold hooks that never fire, so the bound must move onto the struct
// (`struct Residual<M: Layer>`).

use nn_core::prelude::*;

#[derive(Module)]
struct Residual<M: Module> {
    #[module]
    inner: M,
    #[base]
    base: ModuleBase,
}

impl<M: Layer> Compute for Residual<M> {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        x + &self.inner.forward(x)
    }
}

fn main() {}
