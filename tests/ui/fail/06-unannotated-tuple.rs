// An unannotated tuple of layers, `(Linear, Linear)`, is rejected: one annotated field
// per layer, or a `Sequential`.

use nn_core::Module;
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    pair: (Linear, Linear),
}

fn main() {}
