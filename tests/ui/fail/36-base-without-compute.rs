// A `#[base]` field on a struct with no forward (no `impl Compute`): hooks registered on
// it could never fire, so the derive rejects it at the field.

use nn_core::{Module, ModuleBase};
use nn_layers::Linear;

#[derive(Module)]
struct Holder {
    #[module]
    fc: Linear,
    #[base]
    base: ModuleBase,
}

fn main() {}
