// Field attributes in the wrong place or form: `#[param]` on the struct, the
// name-value form `#[module = "fc"]`, and an option on `#[base]`, which takes none.

use nn_core::{Module, ModuleBase};
use nn_layers::Linear;

#[derive(Module)]
#[param]
struct Net {
    #[module = "fc"]
    fc: Linear,
    #[base(rename = "b")]
    base: ModuleBase,
}

fn main() {}
