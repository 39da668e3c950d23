// `#[param]` on a `Tensor`: a parameter is a `Parameter` (or the tensor is a buffer).

use nn_core::{Module, Tensor};

#[derive(Module)]
struct Scale {
    #[param]
    gain: Tensor,
}

fn main() {}
