// Bad option values: `persistent = "no"` (a string instead of a bool), `persistent`
// without a value, and a rename that is not a string.

use nn_core::{Module, Tensor};

#[derive(Module)]
struct Norm {
    #[buffer(persistent = "no")]
    cache: Tensor,
    #[buffer(persistent)]
    scratch: Tensor,
    #[buffer(rename = mask)]
    mask: Tensor,
}

fn main() {}
