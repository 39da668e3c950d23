// An unannotated `Vec<Linear>` is invisible to parameters() and state_dict(): the error
// is at the field and points to `#[module] ModuleList<Linear>`.

use nn_core::Module;
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    layers: Vec<Linear>,
}

fn main() {}
