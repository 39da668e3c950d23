// `Box<dyn Layer>` (and `Option<Box<dyn Layer>>`) as `#[module]`: a sub-module chosen at
// run time is registered like any other.

use nn_core::{Forward, Layer, Module, Tensor};
use nn_layers::{Linear, ReLU};

#[derive(Module)]
struct Block {
    #[module]
    layer: Box<dyn nn_core::Layer>,
    #[module]
    act: Option<Box<dyn Layer>>,
}

impl Forward for Block {
    fn forward(&self, x: &Tensor) -> Tensor {
        let y = self.layer.forward(x);
        match &self.act {
            Some(a) => a.forward(&y),
            None => y,
        }
    }
}

fn main() {
    let b = Block { layer: Box::new(Linear::new(3, 2)), act: Some(Box::new(ReLU::new())) };
    let names: Vec<String> = b.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["layer.weight", "layer.bias"]);
    let children: Vec<String> = b.named_children().into_iter().map(|(n, _)| n).collect();
    assert_eq!(children, ["layer", "act"]);
    assert_eq!(b.forward(&Tensor::ones(&[1, 3])).shape(), &[1, 2]);
}
