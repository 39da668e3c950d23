// A module whose input tuple holds a type of one's own that does not list its tensors:
// refused at the `Compute` impl, naming the type and the trait that would let hooks see it.

use nn_core::prelude::*;

#[derive(Clone)]
struct Masks {
    causal: Tensor,
}

#[derive(Module)]
struct Masked {
    #[base]
    base: ModuleBase,
}

impl Compute for Masked {
    type Input = (Tensor, Masks);
    type Output = Tensor;
    fn compute(&self, (x, m): &(Tensor, Masks)) -> Tensor {
        x * &m.causal
    }
}

fn main() {}
