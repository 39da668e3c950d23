// Even a container that is a module, `ModuleList<Linear>`, must be annotated: without
// `#[module]` it would be silently skipped.

use nn_core::Module;
use nn_layers::{Linear, ModuleList};

#[derive(Module)]
struct Net {
    blocks: ModuleList<Linear>,
}

fn main() {}
