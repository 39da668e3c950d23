// `#[module(extra_repr)]` without an `ExtraRepr` impl: the error is at `extra_repr` and
// shows the impl to write.

use nn_core::Module;

#[derive(Module)]
#[module(extra_repr)]
struct Scale {
    factor: f32,
}

fn main() {}
