// `#[derive(Module)]` on a union.

use nn_core::Module;

#[derive(Module)]
union Bits {
    f: f32,
    u: u32,
}

fn main() {}
