// `#[module]` on a plain `HashMap<String, Linear>`: the error points to
// `ModuleDict<Linear>`.

use std::collections::HashMap;

use nn_core::Module;
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    #[module]
    heads: HashMap<String, Linear>,
}

fn main() {}
