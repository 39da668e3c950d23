// An unannotated `Option<Linear>` is rejected: an optional sub-module is
// `#[module] name: Option<Linear>`.

use nn_core::Module;
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    norm: Option<Linear>,
}

fn main() {}
