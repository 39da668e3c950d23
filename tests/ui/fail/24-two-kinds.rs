// Two kinds on one field, `#[param] #[buffer]`: a field is registered once.

use nn_core::{Module, Parameter};

#[derive(Module)]
struct Scale {
    #[param]
    #[buffer]
    gain: Parameter,
}

fn main() {}
