// PyTorch's feature-extraction recipe: hooks registered in a loop over `named_modules()`
// on the `&dyn Module` items, handles ignored with `let _`. Every hook stays registered
// and fires: forward pre-hooks, forward hooks and full backward hooks, on built-in layers
// and on user modules alike (no module's code runs the hooks; `forward` does).

use std::sync::{Arc, Mutex};

use nn_core::prelude::*;
use nn_layers::{Linear, ReLU};

#[derive(Module)]
struct Block {
    #[module]
    fc: Linear,
    #[module]
    act: ReLU,
    #[base]
    base: ModuleBase,
}

impl Compute for Block {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        self.act.forward(&self.fc.forward(x))
    }
}

#[derive(Module)]
struct Net {
    #[module]
    first: Block,
    #[module]
    second: Block,
    #[base]
    base: ModuleBase,
}

impl Compute for Net {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        self.second.forward(&self.first.forward(x))
    }
}

fn block(i: usize, o: usize) -> Block {
    Block { fc: Linear::new(i, o), act: ReLU::new(), base: ModuleBase::new() }
}

fn main() {
    let model = Net { first: block(3, 4), second: block(4, 2), base: ModuleBase::new() };
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    for (name, m) in model.named_modules() {
        let (s, n) = (seen.clone(), name.clone());
        let _ = m.register_forward_pre_hook(move |_| {
            s.lock().unwrap().push(format!("pre {n}"));
            None
        });
        let (s, n) = (seen.clone(), name.clone());
        let _ = m.register_forward_hook(move |_, _| {
            s.lock().unwrap().push(format!("fwd {n}"));
            None
        });
        let (s, n) = (seen.clone(), name);
        let _ = m.register_full_backward_hook(move |_, _| {
            s.lock().unwrap().push(format!("bwd {n}"));
            None
        });
    }
    let x = Tensor::ones(&[2, 3]).requires_grad_(true);
    model.forward(&x).sum().backward();
    let seen = seen.lock().unwrap();
    for kind in ["pre", "fwd", "bwd"] {
        for name in ["", "first", "first.fc", "first.act", "second", "second.fc", "second.act"] {
            let want = format!("{kind} {name}");
            assert!(seen.contains(&want), "missing `{want}` in {seen:?}");
        }
    }
    assert_eq!(seen.len(), 3 * 7);
}
