// An unknown struct-level option, `#[module(bogus)]`, and a misspelled one,
// `#[module(extra_rep)]`.

use nn_core::Module;

#[derive(Module)]
#[module(bogus)]
struct A {}

#[derive(Module)]
#[module(extra_rep)]
struct B {}

fn main() {}
