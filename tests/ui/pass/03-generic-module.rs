// A generic struct over its sub-module, `struct Residual<M: Layer>`, with the bound in
// the parameter list or in a where clause; the derived impl keeps the user's bounds. A
// generic module with a `#[base]` implements `Compute` for every `M` its bounds allow.

use nn_core::prelude::*;
use nn_layers::{Linear, ReLU};

#[derive(Module)]
struct Residual<M: Layer> {
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

#[derive(Module)]
struct Both<A, B>
where
    A: Module,
    B: Module,
{
    #[module]
    first: A,
    #[module]
    second: Option<B>,
}

fn main() {
    let r = Residual { inner: Linear::new(2, 2), base: ModuleBase::new() };
    let names: Vec<String> = r.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["inner.weight", "inner.bias"]);
    assert_eq!(r.forward(&Tensor::ones(&[1, 2])).shape(), &[1, 2]);

    let b = Both { first: Residual { inner: ReLU::new(), base: ModuleBase::new() }, second: Some(Linear::new(1, 1)) };
    let names: Vec<String> = b.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["second.weight", "second.bias"]);
    assert_eq!(b.named_modules().len(), 4);
}
