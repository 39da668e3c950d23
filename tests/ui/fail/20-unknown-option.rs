// A misspelled option, `#[buffer(persistant = false)]`: "did you mean `persistent`".

use nn_core::{Module, Tensor};

#[derive(Module)]
struct Norm {
    #[buffer(persistant = false)]
    cache: Tensor,
}

fn main() {}
