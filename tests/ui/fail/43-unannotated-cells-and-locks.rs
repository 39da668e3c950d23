// State behind a lock, a once-cell or in a linked list is module state all the same: each
// was accepted as plain data and never traversed.

use std::collections::LinkedList;
use std::sync::{OnceLock, RwLock};

use nn_core::{Module, Tensor};
use nn_layers::Linear;

#[derive(Module)]
struct Net {
    cache: RwLock<Option<Tensor>>,
    proj: OnceLock<Linear>,
    blocks: LinkedList<Linear>,
}

fn main() {}
