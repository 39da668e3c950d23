// `#[module(extra_state)]` without an `ExtraState` impl: the error is at `extra_state` and
// shows the impl to write.

use nn_core::Module;

#[derive(Module)]
#[module(extra_state)]
struct Tokenizer {
    vocab_size: usize,
}

fn main() {}
