// A module whose input is `(Tensor, Option<Tensor>)` called with a bare `&Tensor`: the
// error names the input the module takes, not a list of unrelated input types.
use nn_core::prelude::*;
use nn_layers::Linear;

#[derive(Module)]
struct Masked {
    #[module]
    fc: Linear,
    #[base]
    base: ModuleBase,
}

impl Compute for Masked {
    type Input = (Tensor, Option<Tensor>);
    type Output = Tensor;
    fn compute(&self, (x, mask): &(Tensor, Option<Tensor>)) -> Tensor {
        let y = self.fc.forward(x);
        match mask {
            Some(m) => y * m,
            None => y,
        }
    }
}

fn main() {
    let m = Masked { fc: Linear::new(2, 2), base: ModuleBase::new() };
    let idx = Tensor::ones(&[1, 2]);
    let _ = m.forward(&idx);
}
