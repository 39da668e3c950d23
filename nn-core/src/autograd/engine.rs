//! The backward pass: consumer counting, then execution in reverse topological order.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Edge, GradModeGuard, Node};
use crate::tensor::Tensor;

const SECOND_BACKWARD: &str = "backward: trying to backward through the graph a second time \
(or to use values that were freed after the first backward); pass `retain_graph = true` to \
`backward_with` the first time if you need to call backward twice";

impl Tensor {
    /// Computes the gradient of this scalar (one-element) tensor with respect to every
    /// leaf that requires grad, accumulating into their [`grad`](Tensor::grad).
    ///
    /// Like PyTorch, a non-scalar tensor needs an explicit incoming gradient
    /// ([`backward_with`](Tensor::backward_with)), and the graph is freed afterwards.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0], &[2]).requires_grad_(true);
    /// let y = (&x * &x).sum();
    /// y.backward();
    /// assert_eq!(x.grad().unwrap().to_vec(), vec![2.0, 4.0]);
    /// ```
    ///
    /// # Panics
    /// When the tensor does not require grad, has more than one element, or its graph was
    /// already freed by an earlier backward.
    pub fn backward(&self) {
        if self.numel() != 1 {
            panic!(
                "backward: grad can be implicitly created only for scalar outputs, got shape {:?}; \
                 use `backward_with(&grad, false)` with a gradient of that shape",
                self.shape()
            );
        }
        let g = Tensor::ones_like(self);
        self.backward_with(&g, false);
    }

    /// Backward with an explicit gradient of `self`'s shape; `retain_graph = true` keeps
    /// the graph for another backward.
    pub fn backward_with(&self, grad: &Tensor, retain_graph: bool) {
        if grad.shape() != self.shape() {
            panic!("backward: gradient has shape {:?} but the tensor has shape {:?}", grad.shape(), self.shape());
        }
        if grad.dtype() != self.dtype() {
            panic!("backward: gradient has dtype {} but the tensor has dtype {}", grad.dtype(), self.dtype());
        }
        let _no_grad = GradModeGuard::set(false);
        match &self.0.grad_fn {
            None if self.requires_grad() => self.accumulate_grad(grad.detach(), "backward"),
            None => panic!(
                "backward: element 0 of tensors does not require grad and does not have a grad_fn \
                 (call `requires_grad_(true)` on the leaves, and do not compute the loss inside `no_grad`)"
            ),
            Some(root) => run(root, grad.detach(), retain_graph),
        }
    }
}

fn run(root: &Arc<Node>, grad: Tensor, retain_graph: bool) {
    // 1. Count, for every reachable node, how many edges lead into it.
    let mut deps: HashMap<u64, usize> = HashMap::new();
    let mut stack = vec![root.clone()];
    let mut seen = std::collections::HashSet::from([root.id]);
    while let Some(n) = stack.pop() {
        let guard = n.state.lock().unwrap_or_else(|e| e.into_inner());
        let st = guard.as_ref().unwrap_or_else(|| panic!("{SECOND_BACKWARD}"));
        for e in st.inputs.iter().flatten() {
            if let Edge::Node(m) = e {
                *deps.entry(m.id).or_insert(0) += 1;
                if seen.insert(m.id) {
                    stack.push(m.clone());
                }
            }
        }
    }
    // 2. Run nodes whose consumers have all contributed.
    let mut grads: HashMap<u64, Tensor> = HashMap::from([(root.id, grad)]);
    let mut ready = vec![root.clone()];
    while let Some(n) = ready.pop() {
        let g = grads.remove(&n.id);
        let mut guard = n.state.lock().unwrap_or_else(|e| e.into_inner());
        let st = guard.as_ref().unwrap_or_else(|| panic!("{SECOND_BACKWARD}"));
        let input_grads = match &g {
            Some(g) => {
                debug_assert_eq!(g.shape(), n.shape.as_slice(), "gradient shape for `{}`", n.name);
                let needs: smallvec::SmallVec<[bool; 3]> = st.inputs.iter().map(Option::is_some).collect();
                let out = st.backward.backward(g, &needs);
                assert_eq!(out.len(), st.inputs.len(), "internal: `{}` returned the wrong number of gradients", n.name);
                out
            }
            None => st.inputs.iter().map(|_| None).collect(),
        };
        let inputs = st.inputs.clone();
        if !retain_graph {
            *guard = None;
        }
        drop(guard);
        drop(g);
        for (edge, ig) in inputs.into_iter().zip(input_grads) {
            match edge {
                None => {}
                Some(Edge::Leaf(t)) => {
                    if let Some(ig) = ig {
                        t.accumulate_grad(ig, n.name);
                    }
                }
                Some(Edge::Node(m)) => {
                    if let Some(ig) = ig {
                        assert_eq!(
                            ig.shape(),
                            m.shape.as_slice(),
                            "internal: backward of `{}` produced a gradient of shape {:?} for an input of shape {:?}",
                            n.name,
                            ig.shape(),
                            m.shape.as_slice()
                        );
                        match grads.remove(&m.id) {
                            Some(prev) => grads.insert(m.id, &prev + &ig),
                            None => grads.insert(m.id, ig),
                        };
                    }
                    let d = deps.get_mut(&m.id).expect("node counted in discovery");
                    *d -= 1;
                    if *d == 0 {
                        ready.push(m);
                    }
                }
            }
        }
    }
}

impl Tensor {
    /// Adds `g` into this leaf's `.grad` (a fresh handle, so two leaves never share one).
    pub(crate) fn accumulate_grad(&self, g: Tensor, op: &str) {
        assert_eq!(
            g.shape(),
            self.shape(),
            "internal: backward of `{op}` produced a gradient of shape {:?} for a leaf of shape {:?}",
            g.shape(),
            self.shape()
        );
        let mut slot = self.0.grad.lock().unwrap_or_else(|e| e.into_inner());
        let new = match slot.take() {
            Some(prev) => &prev + &g,
            None => g.contiguous().detach(),
        };
        *slot = Some(new);
    }
}
