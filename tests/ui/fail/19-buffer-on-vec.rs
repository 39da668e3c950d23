// `#[buffer]` on a `Vec<f32>`: a buffer is a `Tensor`; plain data needs no annotation.

use nn_core::Module;

#[derive(Module)]
struct Norm {
    #[buffer]
    stats: Vec<f32>,
}

fn main() {}
