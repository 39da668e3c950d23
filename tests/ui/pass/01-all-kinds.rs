// A named struct using every kind of field: `#[module]` (a layer, `ModuleList`,
// `ModuleDict`, `Sequential`), `#[param]`, `#[buffer]`, `#[buffer(persistent = false)]`,
// `#[base]` (with the `Compute` impl a base requires) and an unannotated plain-data field. Names follow declaration order and
// PyTorch's grouping (own parameters, own buffers, then children). Doc comments, other
// attributes and visibility on fields are left alone.

use nn_core::{Compute, Forward, Module, ModuleBase, Parameter, Tensor};
use nn_layers::{Linear, ModuleDict, ModuleList, ReLU, Sequential};

/// A network.
#[derive(Module)]
#[allow(dead_code)]
pub struct Net {
    /// The input layer.
    #[module]
    pub fc: Linear,
    #[module]
    blocks: ModuleList<Linear>,
    #[module]
    heads: ModuleDict<Linear>,
    #[module]
    body: Sequential,
    #[param]
    scale: Parameter,
    #[buffer]
    running_mean: Tensor,
    #[buffer(persistent = false)]
    cache: Tensor,
    #[buffer(persistent = true)]
    count: Tensor,
    #[base]
    base: ModuleBase,
    /// Plain data.
    #[allow(dead_code)]
    pub(crate) hidden: usize,
}

impl Compute for Net {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        self.body.forward(&self.fc.forward(x)) * &*self.scale
    }
}

fn main() {
    let net = Net {
        fc: Linear::new(2, 2),
        blocks: ModuleList::from(vec![Linear::new(2, 2)]),
        heads: [("cls".to_string(), Linear::new(2, 1))].into_iter().collect(),
        body: Sequential::new().add(ReLU::new()).add(Linear::new(2, 2)),
        scale: Parameter::new(Tensor::ones(&[1])),
        running_mean: Tensor::zeros(&[2]),
        cache: Tensor::zeros(&[2]),
        count: Tensor::zeros(&[1]),
        base: ModuleBase::new(),
        hidden: 2,
    };
    let keys: Vec<String> = net.state_dict().keys().map(String::from).collect();
    assert_eq!(
        keys,
        [
            "scale",
            "running_mean",
            "count",
            "fc.weight",
            "fc.bias",
            "blocks.0.weight",
            "blocks.0.bias",
            "heads.cls.weight",
            "heads.cls.bias",
            "body.1.weight",
            "body.1.bias",
        ]
    );
    let buffers: Vec<String> = net.named_buffers().into_iter().map(|(n, _)| n).collect();
    assert_eq!(buffers, ["running_mean", "cache", "count"]);
    assert_eq!(net.hidden, 2);
}
