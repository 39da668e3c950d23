// `#[buffer]` on a `Parameter`: a parameter is `#[param]`.

use nn_core::{Module, Parameter};

#[derive(Module)]
struct Norm {
    #[buffer]
    weight: Parameter,
}

fn main() {}
