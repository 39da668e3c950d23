// The struct option `name` given twice, in one `#[module(...)]` and across two; the other
// option, `extra_repr`, does not hide it.

use nn_core::Module;

#[derive(Module)]
#[module(name = "A", extra_repr, name = "B")]
struct A;

#[derive(Module)]
#[module(name = "C")]
#[module(name = "D")]
struct C;

fn main() {}
