// `#[derive(Module)]` on an enum: the error says what to use instead.

use nn_core::Module;
use nn_layers::{Linear, ReLU};

#[derive(Module)]
enum Layer {
    Fc(Linear),
    Act(ReLU),
}

fn main() {}
