// An unannotated `Parameter` is rejected: it is registered with `#[param]`.

use nn_core::{Module, Parameter};

#[derive(Module)]
struct Scale {
    gain: Parameter,
}

fn main() {}
