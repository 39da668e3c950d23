// A tuple that mixes plain data with layers is rejected wherever it sits: a tuple holds
// module state when any element does (`Vec<(String, Linear)>` was accepted and never
// traversed). Named layers belong in a `ModuleDict`.

use nn_core::Module;
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    layers: Vec<(String, Linear)>,
    head: (Linear, usize),
    pairs: Vec<(String, usize)>,
}

fn main() {}
