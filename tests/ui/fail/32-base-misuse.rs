// `#[base]` misuse: on a type that is not `ModuleBase`, and a second `#[base]` field.

use nn_core::{Module, ModuleBase};

#[derive(Module)]
struct A {
    #[base]
    base: bool,
}

#[derive(Module)]
struct B {
    #[base]
    base: ModuleBase,
    #[base]
    other: ModuleBase,
}

fn main() {}
