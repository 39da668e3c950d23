// `#[module(migrate)]` without a `MigrateState` impl: the error is at `migrate` and shows
// the impl to write.

use nn_core::prelude::*;

#[derive(Module)]
#[module(version = 2, migrate)]
struct Norm {
    #[param]
    weight: Parameter,
}

fn main() {}
