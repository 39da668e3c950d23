// The derive reached through the facade crate `nn` (`nn::Module`, `nn::layers::Linear`):
// the generated code compiles without the user naming `nn_core`.

use nn::layers::Linear;
use nn::{Module, Parameter, Tensor};

#[derive(Module)]
struct Model {
    #[module]
    fc: Linear,
    #[param]
    gain: Parameter,
}

fn main() {
    let m = Model { fc: Linear::new(2, 2), gain: Parameter::new(Tensor::ones(&[1])) };
    let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["gain", "fc.weight", "fc.bias"]);
}
