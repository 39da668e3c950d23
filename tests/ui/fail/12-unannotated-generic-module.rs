// An unannotated field of a generic type bounded by `Module` is rejected (an unbounded
// `T` is plain data, see pass/07).

use nn_core::Module;

#[derive(Module)]
struct Residual<M: Module> {
    inner: M,
}

fn main() {}
