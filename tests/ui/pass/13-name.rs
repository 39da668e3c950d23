// `#[module(name = "...")]` on the struct sets the name the module reports and prints, as
// transformers' `GPT2LMHeadModel` for the Rust struct `Gpt2LMHeadModel`; it combines with
// `extra_repr`, in one attribute or two.

use nn_core::{ExtraRepr, Module};
use nn_layers::Linear;

#[derive(Module)]
#[module(name = "GPT2Block", extra_repr)]
struct Gpt2Block {
    width: usize,
}

impl ExtraRepr for Gpt2Block {
    fn extra_repr(&self) -> String {
        format!("width={}", self.width)
    }
}

#[derive(Module)]
#[module(extra_repr)]
#[module(name = "_Scale2")]
struct Scale;

impl ExtraRepr for Scale {
    fn extra_repr(&self) -> String {
        "factor=2".to_string()
    }
}

#[derive(Module)]
#[module(name = "GPT2LMHeadModel")]
struct Gpt2LMHeadModel<M: Module> {
    #[module]
    transformer: M,
    #[module]
    lm_head: Linear,
}

fn main() {
    assert_eq!(Gpt2Block { width: 4 }.type_name(), "GPT2Block");
    assert_eq!(Gpt2Block { width: 4 }.to_string(), "GPT2Block(width=4)");
    assert_eq!(Scale.to_string(), "_Scale2(factor=2)");
    let model = Gpt2LMHeadModel { transformer: Gpt2Block { width: 4 }, lm_head: Linear::new(4, 2) };
    assert_eq!(model.type_name(), "GPT2LMHeadModel");
    assert_eq!(
        model.to_string(),
        "GPT2LMHeadModel(\n  (transformer): GPT2Block(width=4)\n  (lm_head): Linear(in_features=4, out_features=2, bias=True)\n)"
    );
}
