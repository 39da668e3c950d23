// An unannotated array of layers, `[Linear; 3]`, is rejected like a `Vec` and points to
// `ModuleList`.

use nn_core::Module;
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    layers: [Linear; 3],
}

fn main() {}
