// `#[derive(ModuleIo)]` on a struct with a field of a type hooks cannot see into: the error
// is at that field's type and names the trait to implement, so no tensor of a module's
// input is hidden from its hooks.

use nn_core::{ModuleIo, Tensor};

#[derive(Clone)]
struct Masks {
    causal: Tensor,
}

#[derive(Clone, ModuleIo)]
struct Input {
    #[io(primary)]
    x: Tensor,
    masks: Masks,
}

fn main() {}
