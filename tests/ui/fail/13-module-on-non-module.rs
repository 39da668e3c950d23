// `#[module]` on types that are not modules (`usize`, `String`): the error is at each
// field and says plain data needs no annotation.

use nn_core::Module;

#[derive(Module)]
struct Net {
    #[module]
    hidden: usize,
    #[module]
    name: String,
}

fn main() {}
