// A module's `Clone` would copy its `Parameter` handles: the "copy" (a target network, an
// EMA model) would train the original. `#[derive(Module)]` refuses a `Clone` impl, in a
// message naming `deep_copy`, at the struct's name; this struct has no `#[base]`, so that
// error is the only one.
use nn_core::prelude::*;

#[derive(Module, Clone)]
struct Scale {
    #[param]
    gain: Parameter,
}

fn main() {}
