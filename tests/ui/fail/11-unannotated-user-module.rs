// An unannotated field whose type is the user's own derived module is rejected.

use nn_core::Module;
use nn_layers::Linear;

#[derive(Module)]
struct Block {
    #[module]
    fc: Linear,
}

#[derive(Module)]
struct Net {
    block: Block,
}

fn main() {}
