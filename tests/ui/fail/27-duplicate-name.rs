// Two fields registered under the same name (through `rename`): state-dict keys would
// collide.

use nn_core::{Module, Parameter};
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    #[module]
    fc: Linear,
    #[module(rename = "fc")]
    head: Linear,
    #[param(rename = "gain")]
    a: Parameter,
    #[param(rename = "gain")]
    b: Parameter,
}

fn main() {}
