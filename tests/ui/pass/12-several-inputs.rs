// Modules whose forward takes several inputs (a tensor and a task name) implement
// `Compute` with a tuple input, run their hooks, and live in `ModuleDict` / `ModuleList`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use nn_core::prelude::*;
use nn_layers::{Linear, ModuleDict, ModuleList};

/// Picks a head by task name.
#[derive(Module)]
struct MultiTask {
    #[module]
    heads: ModuleDict<Linear>,
    #[base]
    base: ModuleBase,
}

impl Compute for MultiTask {
    type Input = (Tensor, String);
    type Output = Tensor;
    fn compute(&self, (x, task): &(Tensor, String)) -> Tensor {
        self.heads[task.as_str()].forward(x)
    }
}

fn main() {
    let heads = [("a".to_string(), Linear::new(3, 2)), ("b".to_string(), Linear::new(3, 5))].into_iter().collect();
    let mt = MultiTask { heads, base: ModuleBase::new() };
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    mt.register_forward_hook(move |x, y| {
        assert_eq!(x.shape(), &[4, 3]);
        c.fetch_add(y.shape()[1], Ordering::SeqCst);
        None
    })
    .unwrap();
    let x = Tensor::ones(&[4, 3]);
    assert_eq!(mt.forward((&x, &"b".to_string())).shape(), &[4, 5]);
    assert_eq!(mt.forward(&(x.clone(), "a".to_string())).shape(), &[4, 2]);
    assert_eq!(calls.load(Ordering::SeqCst), 7);

    // In a list, each item is still run through `forward`.
    let list = ModuleList::from(vec![mt]);
    assert_eq!(list[0].forward((&x, &"a".to_string())).shape(), &[4, 2]);
    assert_eq!(calls.load(Ordering::SeqCst), 9);
}
