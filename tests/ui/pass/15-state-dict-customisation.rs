// `#[module(extra_state, version = 2)]` with an `ExtraState` impl: the state and the version
// are in the state dict, and a load takes the state back. Together with `name` and
// `extra_repr`, in any order.

use nn_core::{ExtraRepr, ExtraState, Module, StateDict};

#[derive(Module)]
#[module(extra_state, version = 2, name = "Tok", extra_repr)]
struct Tokenizer {
    vocab_size: usize,
}

impl ExtraState for Tokenizer {
    type State = usize;
    fn extra_state(&self) -> usize {
        self.vocab_size
    }
    fn set_extra_state(&mut self, vocab_size: usize) {
        self.vocab_size = vocab_size;
    }
}

impl ExtraRepr for Tokenizer {
    fn extra_repr(&self) -> String {
        format!("vocab_size={}", self.vocab_size)
    }
}

fn main() {
    let mut t = Tokenizer { vocab_size: 50257 };
    let sd = t.state_dict();
    assert_eq!(sd.version(""), Some(2));
    assert_eq!(sd.extra_state("_extra_state"), Some(&serde_json::json!(50257)));
    let mut other = StateDict::new();
    other.insert_extra_state("_extra_state".to_string(), serde_json::json!(32000));
    t.load_state_dict(&other, true).unwrap();
    assert_eq!(t.vocab_size, 32000);
    assert_eq!(t.to_string(), "Tok(vocab_size=32000)");
}
