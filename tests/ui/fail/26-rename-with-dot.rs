// `rename` to a name containing a dot (dots separate path components), and to an empty
// name.

use nn_core::Module;
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    #[module(rename = "encoder.fc")]
    fc: Linear,
    #[module(rename = "")]
    head: Linear,
}

fn main() {}
