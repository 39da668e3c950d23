// An unannotated `Tensor` is rejected: it is a `#[buffer]` (or a `Parameter` if trained).

use nn_core::{Module, Tensor};

#[derive(Module)]
struct Norm {
    running_mean: Tensor,
}

fn main() {}
