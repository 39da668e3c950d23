// The same option twice, `#[module(rename = "a", rename = "b")]`.

use nn_core::Module;
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    #[module(rename = "a", rename = "b")]
    fc: Linear,
}

fn main() {}
