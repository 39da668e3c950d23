// `#[module]` on a plain `Vec<Linear>`: a `Vec` is not a module; the error points to
// `ModuleList<Linear>`.

use nn_core::Module;
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    #[module]
    layers: Vec<Linear>,
}

fn main() {}
