// `rename = "..."` on every kind of field, so a port can match PyTorch's key names
// (including names that are not Rust identifiers, and raw identifiers like `r#type`).

use nn_core::{Module, Parameter, Tensor};
use nn_layers::Linear;

#[derive(Module)]
struct Attention {
    #[module(rename = "out_proj")]
    output: Linear,
    #[param(rename = "in_proj_weight")]
    w: Parameter,
    #[buffer(rename = "2", persistent = false)]
    scratch: Tensor,
    #[buffer(persistent = true, rename = "mask")]
    m: Tensor,
    #[param]
    r#type: Parameter,
}

fn main() {
    let a = Attention {
        output: Linear::new(1, 1),
        w: Parameter::new(Tensor::ones(&[1])),
        scratch: Tensor::zeros(&[1]),
        m: Tensor::zeros(&[1]),
        r#type: Parameter::new(Tensor::ones(&[1])),
    };
    let keys: Vec<String> = a.state_dict().keys().map(String::from).collect();
    assert_eq!(keys, ["in_proj_weight", "type", "mask", "out_proj.weight", "out_proj.bias"]);
    let buffers: Vec<String> = a.named_buffers().into_iter().map(|(n, _)| n).collect();
    assert_eq!(buffers, ["2", "mask"]);
    assert!(a.get_submodule("out_proj").is_ok());
}
