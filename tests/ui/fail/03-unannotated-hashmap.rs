// An unannotated `HashMap<String, Linear>` is rejected and points to `ModuleDict`.

use std::collections::HashMap;

use nn_core::Module;
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    heads: HashMap<String, Linear>,
}

fn main() {}
