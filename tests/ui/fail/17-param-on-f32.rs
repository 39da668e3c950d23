// `#[param]` on an `f32`: a parameter is a `Parameter`; a plain number needs no
// annotation.

use nn_core::Module;

#[derive(Module)]
struct Scale {
    #[param]
    gain: f32,
}

fn main() {}
