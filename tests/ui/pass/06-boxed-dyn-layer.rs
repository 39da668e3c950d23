// `Box<dyn Layer>` (and `Option<Box<dyn Layer>>`) as `#[module]`: a sub-module chosen at
// run time is registered like any other, and its hooks fire through the box.

use nn_core::prelude::*;
use nn_layers::{Linear, ReLU};

#[derive(Module)]
struct Block {
    #[module]
    layer: Box<dyn nn_core::Layer>,
    #[module]
    act: Option<Box<dyn Layer>>,
    #[base]
    base: ModuleBase,
}

impl Compute for Block {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let y = self.layer.forward(x);
        match &self.act {
            Some(a) => a.forward(&y),
            None => y,
        }
    }
}

fn main() {
    let b = Block { layer: Box::new(Linear::new(3, 2)), act: Some(Box::new(ReLU::new())), base: ModuleBase::new() };
    let names: Vec<String> = b.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["layer.weight", "layer.bias"]);
    let children: Vec<String> = b.named_children().into_iter().map(|(n, _)| n).collect();
    assert_eq!(children, ["layer", "act"]);
    let fired = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let f = fired.clone();
    b.get_submodule("layer").unwrap().register_forward_hook(move |_, _| {
        f.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        None
    }).unwrap();
    assert_eq!(b.forward(&Tensor::ones(&[1, 3])).shape(), &[1, 2]);
    assert_eq!(fired.load(std::sync::atomic::Ordering::SeqCst), 1);
}
