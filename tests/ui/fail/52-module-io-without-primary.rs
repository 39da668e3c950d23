// `#[derive(ModuleIo)]` with no `#[io(primary)]` field: the error is at the struct's name
// and says which field to mark.

use nn_core::{ModuleIo, Tensor};

#[derive(Clone, ModuleIo)]
struct Pair {
    x: Tensor,
    mask: Option<Tensor>,
}

fn main() {}
