// A generic module deriving `Clone` is refused too (its clone would share `gain` for every
// `T: Clone`).
use nn_core::prelude::*;

#[derive(Module, Clone)]
struct Scaled<T: Send + Sync + 'static> {
    #[param]
    gain: Parameter,
    factor: T,
}

fn main() {}
