// `deep_copy` on a derived module, a generic one, a tuple struct and a unit struct: the
// derive writes `deep_copy_into` for each (plain fields cloned).
use nn_core::prelude::*;
use nn_layers::Linear;

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
struct Pair(#[module] Linear, #[param] Parameter, usize);

#[derive(Module)]
struct Nothing;

fn main() {
    let r = Residual { inner: Linear::new(2, 2), base: ModuleBase::new() };
    let c: Residual<Linear> = r.deep_copy();
    assert_ne!(c.inner.weight.id(), r.inner.weight.id());
    let p = Pair(Linear::new(1, 1), Parameter::new(Tensor::ones(&[1])), 3);
    assert_eq!(p.deep_copy().2, 3);
    let _: Nothing = Nothing.deep_copy();
}
