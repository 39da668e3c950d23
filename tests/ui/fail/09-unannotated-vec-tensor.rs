// An unannotated `Vec<Tensor>` is rejected: tensors are registered one per field.

use nn_core::{Module, Tensor};

#[derive(Module)]
struct Cache {
    states: Vec<Tensor>,
}

fn main() {}
