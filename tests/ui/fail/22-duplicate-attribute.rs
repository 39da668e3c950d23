// The same attribute twice on one field, `#[param] #[param]`.

use nn_core::{Module, Parameter};

#[derive(Module)]
struct Scale {
    #[param]
    #[param]
    gain: Parameter,
}

fn main() {}
