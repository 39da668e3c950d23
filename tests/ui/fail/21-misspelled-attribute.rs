// A misspelled attribute, `#[parm]`: one error, suggesting `param`, and no second error
// about the field being unregistered.

use nn_core::{Module, Parameter};

#[derive(Module)]
struct Scale {
    #[parm]
    gain: Parameter,
}

fn main() {}
