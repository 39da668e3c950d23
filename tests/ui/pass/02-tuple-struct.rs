// A tuple struct: fields register under their index (`0`, `1`, ...), unannotated
// plain-data fields are fine, and `rename` works on positional fields too.

use nn_core::{Module, Parameter, Tensor};
use nn_layers::Linear;

#[derive(Module)]
struct Pair(#[module] Linear, #[param] Parameter, usize, #[module(rename = "proj")] Linear);

fn main() {
    let p = Pair(Linear::new(1, 1), Parameter::new(Tensor::ones(&[1])), 7, Linear::new(1, 1));
    let names: Vec<String> = p.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["1", "0.weight", "0.bias", "proj.weight", "proj.bias"]);
    assert_eq!(p.2, 7);
}
