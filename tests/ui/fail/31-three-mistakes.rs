// Three mistakes in one struct are reported together in one build: an unknown option,
// two kinds on one field, and a rename with a dot. Code using the struct as a `Module`
// does not light up with secondary errors.

use nn_core::{Module, Parameter, Tensor};
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    #[module(renam = "encoder")]
    fc: Linear,
    #[param]
    #[buffer]
    gain: Parameter,
    #[buffer(rename = "running.mean")]
    mean: Tensor,
}

fn count(m: &dyn Module) -> usize {
    m.num_parameters()
}

fn main() {
    let net = Net { fc: Linear::new(1, 1), gain: Parameter::new(Tensor::ones(&[1])), mean: Tensor::zeros(&[1]) };
    let _ = count(&net);
    let _ = net.to_string();
}
