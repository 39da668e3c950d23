// `Option<Parameter>`, `Option<Tensor>` and `Option<Linear>` fields: registered when
// `Some`, skipped when `None` (PyTorch's `register_parameter("bias", None)`).

use nn_core::{Module, Parameter, Tensor};
use nn_layers::Linear;

#[derive(Module)]
struct Head {
    #[param]
    bias: Option<Parameter>,
    #[buffer]
    mask: Option<Tensor>,
    #[module]
    proj: Option<Linear>,
}

fn keys(m: &Head) -> Vec<String> {
    m.state_dict().keys().map(String::from).collect()
}

fn main() {
    let empty = Head { bias: None, mask: None, proj: None };
    assert!(keys(&empty).is_empty());
    assert!(empty.named_children().is_empty());

    let full = Head {
        bias: Some(Parameter::new(Tensor::zeros(&[2]))),
        mask: Some(Tensor::ones(&[2])),
        proj: Some(Linear::new(2, 2)),
    };
    assert_eq!(keys(&full), ["bias", "mask", "proj.weight", "proj.bias"]);
}
