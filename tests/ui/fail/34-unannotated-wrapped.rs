// State hidden behind wrappers is still found: `Box<dyn Layer>`,
// `Arc<Mutex<Linear>>`, `Option<Vec<Parameter>>`, `Vec<Option<Linear>>`.

use std::sync::{Arc, Mutex};

use nn_core::{Layer, Module, Parameter};
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    act: Box<dyn Layer>,
    shared: Arc<Mutex<Linear>>,
    extra: Option<Vec<Parameter>>,
    maybe: Vec<Option<Linear>>,
}

fn main() {}
