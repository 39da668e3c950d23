// Bad values of the struct option `name`, the name the module prints: not a string, no
// value, an empty string, a character other than ASCII letters, digits and `_`, and a
// leading digit.

use nn_core::Module;

#[derive(Module)]
#[module(name = 3)]
struct A;

#[derive(Module)]
#[module(name)]
struct B;

#[derive(Module)]
#[module(name = "")]
struct C;

#[derive(Module)]
#[module(name = "GPT-2 Model")]
struct D;

#[derive(Module)]
#[module(name = "2Layer")]
struct E;

fn main() {}
