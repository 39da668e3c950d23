// An unannotated `Box<Linear>` is rejected: a boxed sub-module is `#[module]` too.

use nn_core::Module;
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    fc: Box<Linear>,
}

fn main() {}
