//! The backward pass: consumer counting, then execution in reverse topological order.

use std::collections::HashMap;
use std::sync::Arc;

use std::sync::atomic::{AtomicBool, Ordering};

use super::hooks::CallbackFrame;
use super::{Edge, GradModeGuard, Node};
use crate::device::Device;
use crate::tensor::{Tensor, TensorId};

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
        // PyTorch's "invalid gradient - expected device": a meta gradient of a tensor with
        // values would reach the leaves as gradients with none.
        if grad.device() != self.device() && self.device() != Device::Meta {
            panic!("backward: gradient is on {} but the tensor is on {}", grad.device(), self.device());
        }
        let _no_grad = GradModeGuard::set(false);
        // Gradients keep their forward's dtypes: no autocast casting in a backward pass.
        let _no_autocast = super::autocast::Excluded::new();
        let callbacks = CallbackFrame::open();
        match &self.0.grad_fn {
            None if self.requires_grad() => {
                self.accumulate_grad(self.run_grad_hooks(grad.detached_for_keeping()));
                self.run_post_accumulate_grad_hooks();
            }
            None => panic!(
                "backward: element 0 of tensors does not require grad and does not have a grad_fn \
                 (call `requires_grad_(true)` on the leaves, and do not compute the loss inside `no_grad`)"
            ),
            Some(root) => run(root, grad.detached_for_keeping(), retain_graph, None),
        }
        callbacks.finish();
    }
}

static DETECT_ANOMALY: AtomicBool = AtomicBool::new(false);

/// Turns anomaly detection on or off for every thread (PyTorch's
/// `torch.autograd.set_detect_anomaly`): while on, each op's backward is checked as it runs,
/// and a gradient holding NaN or infinity from a gradient that held none panics there,
/// naming the op whose backward produced it (the forward op of that name recorded it), the
/// input and the shape. Off by default: the check reads every gradient back.
///
/// ```
/// use nn_core::autograd::set_detect_anomaly;
/// use nn_core::Tensor;
///
/// set_detect_anomaly(true);
/// let x = Tensor::from_vec(vec![0.0, 1.0], &[2]).requires_grad_(true);
/// let found = std::panic::catch_unwind(|| x.sqrt().sum().backward()); // d sqrt(x) at 0 is inf
/// set_detect_anomaly(false);
/// let msg = found.unwrap_err().downcast::<String>().unwrap();
/// assert!(msg.contains("the backward of `sqrt` returned a gradient holding inf"), "{msg}");
/// ```
pub fn set_detect_anomaly(on: bool) {
    DETECT_ANOMALY.store(on, Ordering::SeqCst);
}

/// Whether [`set_detect_anomaly`] is on.
pub fn is_anomaly_enabled() -> bool {
    DETECT_ANOMALY.load(Ordering::Relaxed)
}

/// The first non-finite value of `t` (float tensors with values), if any.
fn non_finite(t: &Tensor) -> Option<f64> {
    if !t.dtype().is_float() || t.device() == Device::Meta {
        return None;
    }
    t.to_vec_f64().into_iter().find(|v| !v.is_finite())
}

/// Where a partial backward ([`gradients_at`]) stops: edges whose gradients it returns
/// instead of following them.
pub(crate) struct Sinks {
    nodes: HashMap<u64, usize>,
    leaves: HashMap<TensorId, usize>,
    grads: Vec<Option<Tensor>>,
}

impl Sinks {
    fn new(edges: &[Edge]) -> Sinks {
        let (mut nodes, mut leaves) = (HashMap::new(), HashMap::new());
        for (i, e) in edges.iter().enumerate() {
            match e {
                Edge::Node(m) => nodes.insert(m.id, i),
                Edge::Leaf(t) => leaves.insert(t.id(), i),
            };
        }
        Sinks { nodes, leaves, grads: vec![None; edges.len()] }
    }

    fn add(&mut self, i: usize, g: Tensor) {
        self.grads[i] = Some(match self.grads[i].take() {
            Some(prev) => &prev + &g,
            None => g,
        });
    }
}

/// The gradients that reach `edges` (the frontier of a recomputed subgraph) when `grad`
/// flows back from `root`: a backward pass that stops at them, accumulating nothing there
/// and following none of them; what it reaches elsewhere is handled as any pass does.
pub(crate) fn gradients_at(root: &Tensor, grad: Tensor, edges: &[Edge]) -> Vec<Option<Tensor>> {
    let mut sinks = Sinks::new(edges);
    if let Some(node) = &root.0.grad_fn {
        run(node, grad, false, Some(&mut sinks));
    } else if let Some(&i) = sinks.leaves.get(&root.id()) {
        sinks.add(i, grad);
    }
    sinks.grads
}

fn run(root: &Arc<Node>, grad: Tensor, retain_graph: bool, mut sinks: Option<&mut Sinks>) {
    if let Some(&i) = sinks.as_ref().and_then(|s| s.nodes.get(&root.id)) {
        sinks.as_mut().expect("present").add(i, grad);
        return;
    }
    let sink_node = |s: &Option<&mut Sinks>, id: u64| s.as_ref().and_then(|s| s.nodes.get(&id).copied());
    let sink_leaf = |s: &Option<&mut Sinks>, id: TensorId| s.as_ref().and_then(|s| s.leaves.get(&id).copied());
    // 1. Count, for every reachable node and leaf, how many edges lead into it.
    let mut deps: HashMap<u64, usize> = HashMap::new();
    let mut leaf_uses: HashMap<TensorId, usize> = HashMap::new();
    let mut stack = vec![root.clone()];
    let mut seen = std::collections::HashSet::from([root.id]);
    while let Some(n) = stack.pop() {
        let guard = n.state.lock().unwrap_or_else(|e| e.into_inner());
        let st = guard.as_ref().unwrap_or_else(|| panic!("{SECOND_BACKWARD}"));
        for e in st.inputs.iter().flatten() {
            match e {
                Edge::Node(m) if sink_node(&sinks, m.id).is_some() => {}
                Edge::Leaf(t) if sink_leaf(&sinks, t.id()).is_some() => {}
                Edge::Node(m) => {
                    *deps.entry(m.id).or_insert(0) += 1;
                    if seen.insert(m.id) {
                        stack.push(m.clone());
                    }
                }
                Edge::Leaf(t) => *leaf_uses.entry(t.id()).or_insert(0) += 1,
            }
        }
    }
    // Gradients of leaves that still expect contributions from nodes not yet run.
    let mut leaf_grads: HashMap<TensorId, Tensor> = HashMap::new();
    // 2. Run nodes whose consumers have all contributed.
    let mut grads: HashMap<u64, Tensor> = HashMap::from([(root.id, grad)]);
    let mut ready = vec![root.clone()];
    while let Some(n) = ready.pop() {
        // The gradient hooks of the node's result, then retain-grad (PyTorch's order).
        let g = grads.remove(&n.id).map(|g| n.run_grad_hooks(g));
        if let Some(g) = &g {
            n.deliver_retained(g);
        }
        let mut guard = n.state.lock().unwrap_or_else(|e| e.into_inner());
        let st = guard.as_ref().unwrap_or_else(|| panic!("{SECOND_BACKWARD}"));
        let input_grads = match &g {
            Some(g) => {
                debug_assert_eq!(g.shape(), n.shape.as_slice(), "gradient shape for `{}`", n.name);
                let needs: smallvec::SmallVec<[bool; 3]> = st.inputs.iter().map(Option::is_some).collect();
                let out = st.backward.backward(g, &needs);
                assert_eq!(out.len(), st.inputs.len(), "internal: `{}` returned the wrong number of gradients", n.name);
                // A gradient with values in and none out: a value the op saved for backward
                // lost its values after the forward (a meta tensor). Said here, by name,
                // instead of a meta gradient reaching a leaf unnoticed.
                if g.device() != Device::Meta && out.iter().flatten().any(|ig| ig.device() == Device::Meta) {
                    panic!(
                        "backward of `{}`: a value saved for backward holds no values (a meta tensor): the storage of a \
                         tensor it used was freed after the forward (as FSDP's resharding does) and not restored \
                         before backward",
                        n.name
                    );
                }
                if is_anomaly_enabled() && non_finite(g).is_none() {
                    for (i, ig) in out.iter().enumerate() {
                        if let Some(v) = ig.as_ref().and_then(non_finite) {
                            panic!(
                                "anomaly detected: the backward of `{}` returned a gradient holding {v} for its input {i} \
                                 (shape {:?}) from a finite output gradient; the forward op `{}` recorded it",
                                n.name,
                                ig.as_ref().map(|t| t.shape().to_vec()).unwrap_or_default(),
                                n.name
                            );
                        }
                    }
                }
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
            let sink = match &edge {
                Some(Edge::Node(m)) => sink_node(&sinks, m.id),
                Some(Edge::Leaf(t)) => sink_leaf(&sinks, t.id()),
                None => None,
            };
            if let Some(i) = sink {
                if let Some(ig) = ig {
                    sinks.as_mut().expect("present").add(i, ig);
                }
                continue;
            }
            match edge {
                None => {}
                Some(Edge::Leaf(t)) => {
                    if let Some(ig) = ig {
                        assert_eq!(
                            ig.shape(),
                            t.shape(),
                            "internal: backward of `{}` produced a gradient of shape {:?} for a leaf of shape {:?}",
                            n.name,
                            ig.shape(),
                            t.shape()
                        );
                        match leaf_grads.remove(&t.id()) {
                            Some(prev) => leaf_grads.insert(t.id(), &prev + &ig),
                            None => leaf_grads.insert(t.id(), ig),
                        };
                    }
                    let uses = leaf_uses.get_mut(&t.id()).expect("leaf counted in discovery");
                    *uses -= 1;
                    // The last contribution of this pass: accumulate once, then the hooks.
                    if *uses == 0 {
                        // A leaf frozen since the forward gets nothing, as in PyTorch (its
                        // `AccumulateGrad` returns early): no `.grad`, no hooks.
                        if let Some(g) = leaf_grads.remove(&t.id()).filter(|_| t.requires_grad()) {
                            t.accumulate_grad(t.run_grad_hooks(g));
                            t.run_post_accumulate_grad_hooks();
                        }
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

impl Node {
    /// Adds this node's complete output gradient into the `.grad` of the output tensors
    /// that asked to keep it ([`Tensor::retain_grad`]).
    fn deliver_retained(&self, g: &Tensor) {
        let retained = self.retained.lock().unwrap_or_else(|e| e.into_inner());
        for t in retained.iter().filter_map(std::sync::Weak::upgrade) {
            Tensor(t).accumulate_grad(g.clone());
        }
    }
}

impl Tensor {
    /// Adds `g` (of this tensor's shape) into its `.grad` (a fresh handle, so two tensors
    /// never share one).
    ///
    /// As [`set_grad`](Tensor::set_grad) keeps it: of the tensor's dtype and on its device
    /// (a meta tensor takes any). A gradient of another dtype or device is refused, by name:
    /// the tensor was converted or moved between forward and backward (`set_data`,
    /// `Module::to_dtype`), or an op's backward returned the wrong type; stored, it would
    /// make a `.grad` that `set_grad` refuses and the optimizer fails on later, far from here.
    #[track_caller]
    fn accumulate_grad(&self, g: Tensor) {
        if (g.dtype(), g.device()) != (self.dtype(), self.device()) && self.device() != Device::Meta {
            panic!(
                "backward: a {} gradient on {} reached a {} tensor of shape {:?} on {} (was it converted or moved \
                 between forward and backward?)",
                g.dtype(),
                g.device(),
                self.dtype(),
                self.shape(),
                self.device()
            );
        }
        let mut slot = self.0.grad.lock().unwrap_or_else(|e| e.into_inner());
        let new = match slot.take() {
            Some(prev) => &prev + &g,
            None => g.contiguous().detached_for_keeping(),
        };
        *slot = Some(new);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::autograd::{custom_op, enable_grad, is_grad_enabled, no_grad, NoGradGuard};
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    /// True when `t`'s node has released its saved values and edges.
    fn graph_freed(t: &Tensor) -> bool {
        let node = t.0.grad_fn.as_ref().expect("a non-leaf");
        let freed = node.state.lock().unwrap().is_none();
        freed
    }

    #[test]
    fn gradients_accumulate_across_backward_calls() {
        let x = leaf(&[1.0, 2.0], &[2]);
        (&x * &x).sum().backward();
        assert_eq!(grad(&x), vec![2.0, 4.0]);
        (&x * 3.0).sum().backward();
        assert_eq!(grad(&x), vec![5.0, 7.0]);
        x.zero_grad();
        (&x * 3.0).sum().backward();
        assert_eq!(grad(&x), vec![3.0, 3.0]);
    }

    #[test]
    #[should_panic(expected = "backward: trying to backward through the graph a second time")]
    fn backward_twice_without_retain_graph_panics() {
        let x = leaf(&[1.0, 2.0], &[2]);
        let loss = x.exp().sum();
        loss.backward();
        loss.backward();
    }

    #[test]
    #[should_panic(expected = "trying to backward through the graph a second time")]
    fn backward_through_a_freed_shared_subgraph_panics() {
        let x = leaf(&[1.0, 2.0], &[2]);
        let h = x.exp();
        h.sum().backward();
        // A new root, but it reaches `h`'s node, which the first backward freed.
        (&h * 2.0).sum().backward();
    }

    #[test]
    fn retain_graph_allows_a_second_backward() {
        let x = leaf(&[1.0, 2.0], &[2]);
        let loss = x.exp().sum();
        let one = Tensor::ones_like(&loss);
        loss.backward_with(&one, true);
        assert!(!graph_freed(&loss));
        loss.backward_with(&one, false);
        assert!(graph_freed(&loss));
        assert_close64(&grad(&x), &[2.0 * 1f64.exp(), 2.0 * 2f64.exp()], 1e-15);
    }

    #[test]
    #[should_panic(expected = "backward: grad can be implicitly created only for scalar outputs, got shape [2]")]
    fn backward_of_a_non_scalar_panics() {
        leaf(&[1.0, 2.0], &[2]).exp().backward();
    }

    #[test]
    fn backward_with_an_explicit_gradient() {
        let x = leaf(&[1.0, 2.0], &[2]);
        (&x * &x).backward_with(&t64(&[1.0, -1.0], &[2]), false);
        assert_eq!(grad(&x), vec![2.0, -4.0]);
        // A one-element tensor of any rank is a valid root for `backward`.
        let y = leaf(&[3.0], &[1, 1]);
        y.square().backward();
        assert_eq!(grad(&y), vec![6.0]);
        // The root may be the leaf itself.
        let z = leaf(&[3.0], &[]);
        z.backward();
        assert_eq!(grad(&z), vec![1.0]);
    }

    #[test]
    #[should_panic(expected = "backward: gradient has shape [3] but the tensor has shape [2]")]
    fn backward_with_a_wrong_gradient_shape_panics() {
        leaf(&[1.0, 2.0], &[2]).exp().backward_with(&t64(&[1.0; 3], &[3]), false);
    }

    #[test]
    #[should_panic(expected = "backward: element 0 of tensors does not require grad and does not have a grad_fn")]
    fn backward_of_a_tensor_without_graph_panics() {
        let x = leaf(&[1.0], &[1]);
        no_grad(|| x.exp().sum()).backward();
    }

    #[test]
    fn no_grad_and_enable_grad() {
        let x = leaf(&[1.0], &[1]);
        assert!(is_grad_enabled());
        let y = no_grad(|| {
            assert!(!is_grad_enabled());
            let inner = enable_grad(|| &x * 2.0);
            assert!(inner.requires_grad(), "enable_grad re-enables recording inside no_grad");
            &x * 2.0
        });
        assert!(!y.requires_grad() && y.is_leaf() && y.grad_fn_name().is_none());
        assert!(is_grad_enabled());
        {
            let _g = NoGradGuard::new();
            assert!(!(&x + 1.0).requires_grad());
        }
        assert!((&x + 1.0).requires_grad());
        // The mode is per thread.
        let _g = NoGradGuard::new();
        let x2 = x.clone();
        let other = std::thread::spawn(move || (&x2 * 2.0).requires_grad()).join().unwrap();
        assert!(other);
    }

    #[test]
    fn a_tensor_used_twice_gets_the_summed_gradient() {
        let x = leaf(&[1.5, -2.0], &[2]);
        (&x * &x).sum().backward();
        assert_eq!(grad(&x), vec![3.0, -4.0]);
        let x = leaf(&[1.5, -2.0], &[2]);
        (&x + &x).sum().backward();
        assert_eq!(grad(&x), vec![2.0, 2.0]);
        // A diamond: y feeds z twice through different paths; the engine must wait for both
        // before running y's backward. z = y^2 + exp(y), y = 3x.
        let x = leaf(&[0.5], &[1]);
        let y = &x * 3.0;
        let z = y.square() + y.exp();
        z.sum().backward();
        assert_close64(&grad(&x), &[3.0 * (2.0 * 1.5 + 1.5f64.exp())], 1e-15);
        gradcheck(|t| (&t[0] * 3.0).square() + (&t[0] * 3.0).exp() * &t[0], &[t64(&[0.5, -0.3], &[2])]).unwrap();
    }

    #[test]
    fn only_leaves_that_require_grad_receive_gradients() {
        let a = leaf(&[2.0], &[1]);
        let b = t64(&[3.0], &[1]);
        (&a * &b).sum().backward();
        assert_eq!(grad(&a), vec![3.0]);
        assert!(b.grad().is_none());
        let h = &a * 2.0;
        h.sum().backward();
        assert_eq!(h.grad_fn_name(), Some("affine"));
        let read = std::panic::catch_unwind(|| h.grad());
        assert!(read.is_err(), "non-leaves do not keep .grad, and reading one says so");
    }

    #[test]
    fn the_graph_is_freed_after_backward() {
        let w = leaf(&[0.5, -0.5], &[2]);
        let baseline = Arc::strong_count(&w.0);
        let loss = (&w * &w).sum();
        assert!(Arc::strong_count(&w.0) > baseline, "the graph holds the leaf");
        loss.backward();
        assert!(graph_freed(&loss));
        assert_eq!(Arc::strong_count(&w.0), baseline, "backward released the leaf edges");
    }

    #[test]
    fn a_long_training_loop_does_not_grow_the_graph() {
        let x = t64(&[1.0, 2.0, 3.0], &[3, 1]);
        let y = &x * 2.0;
        let w = Tensor::zeros(&[1, 1]).to_dtype(DType::F64).requires_grad_(true);
        let baseline = Arc::strong_count(&w.0);
        let mut last = None;
        for _ in 0..10_000 {
            let loss = (x.matmul(&w) - &y).square().mean();
            loss.backward();
            no_grad(|| w.add_(&(w.grad().unwrap() * -0.01)));
            w.zero_grad();
            assert!(graph_freed(&loss));
            last = Some(loss);
        }
        // Nothing accumulates: the leaf is held by the same handles as before the loop.
        assert_eq!(Arc::strong_count(&w.0), baseline);
        assert!((w.item() - 2.0).abs() < 1e-9, "the loop still trains: w = {}", w.item());
        let last = last.unwrap();
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| last.backward())).unwrap_err();
        let msg = err.downcast_ref::<String>().unwrap();
        assert!(msg.contains("second time"), "{msg}");
    }

    #[test]
    fn a_100k_op_chain_runs_backward_and_drops_without_stack_overflow() {
        let x = leaf(&[1.0], &[1]);
        let mut y = x.clone();
        for _ in 0..100_000 {
            y = &y * 1.0001;
        }
        assert_close64(&y.to_vec_f64(), &[1.0001f64.powi(100_000)], 1e-9);
        y.sum().backward();
        assert_close64(&grad(&x), &[1.0001f64.powi(100_000)], 1e-9);
        // And a chain that is dropped without ever running backward.
        let mut z = x.clone();
        for _ in 0..100_000 {
            z = z.exp().log();
        }
        assert!(!graph_freed(&z));
        drop(z);
        assert_eq!(Arc::strong_count(&x.0), 1);
    }

    #[test]
    fn custom_op_records_a_user_backward() {
        let x = leaf(&[0.2, 0.7], &[2]);
        let rounded = t64(&[0.0, 1.0], &[2]);
        let y = custom_op("round_ste", &[&x], &rounded, |g| vec![Some(g * 2.0)]);
        assert_eq!(y.grad_fn_name(), Some("round_ste"));
        (y * t64(&[1.0, 3.0], &[2])).sum().backward();
        assert_eq!(grad(&x), vec![2.0, 6.0]);
        let c = no_grad(|| custom_op("noop", &[&x], &rounded, |g| vec![Some(g.clone())]));
        assert!(!c.requires_grad());
    }

    #[test]
    #[should_panic(expected = "custom_op `bad`: gradient of shape [3] for an input of shape [2]")]
    fn custom_op_checks_gradient_shapes() {
        let x = leaf(&[0.2, 0.7], &[2]);
        custom_op("bad", &[&x], &x.detach(), |_| vec![Some(t64(&[1.0; 3], &[3]))]).sum().backward();
    }

    #[test]
    fn backward_on_meta_runs_shape_only() {
        let x = Tensor::full_on(&[3, 4], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        let loss = (&x * &x).sum_dim(1, false).exp().mean();
        loss.backward();
        let g = x.grad().unwrap();
        assert_eq!((g.shape(), g.device(), g.dtype()), (&[3, 4][..], Device::Meta, DType::F32));
    }

    /// An integer output of a custom function is not differentiable (PyTorch's rule): as a
    /// node, the float gradient cast to it would truncate to 0, silently.
    #[test]
    fn custom_op_with_an_integer_output_records_nothing() {
        let x = leaf(&[0.4, 1.6], &[2]);
        let q = Tensor::from_vec_i64(vec![0, 2], &[2]);
        let y = custom_op("round_to_int", &[&x], &q, |g| vec![Some(g.clone())]);
        assert!(!y.requires_grad());
        assert!(!y.to_dtype(DType::F64).requires_grad());
        assert_eq!(y.to_vec_i64(), vec![0, 2]);
    }

    /// A root gradient on another device: refused, where a meta one would reach the
    /// leaves as a gradient with no values.
    #[test]
    #[should_panic(expected = "backward: gradient is on meta but the tensor is on cpu")]
    fn a_root_gradient_on_another_device_is_refused() {
        let x = leaf(&[1.0, 2.0], &[2]);
        (&x * 3.0).backward_with(&Tensor::full_on(&[2], 1.0, DType::F64, Device::Meta), false);
    }

    /// A leaf converted between forward and backward: its gradient is refused by name
    /// (stored, it would be a `.grad` of another dtype, which `set_grad` refuses).
    #[test]
    #[should_panic(expected = "backward: a f64 gradient on cpu reached a f32 tensor of shape [2] on cpu")]
    fn a_leaf_converted_between_forward_and_backward_is_named() {
        let w = leaf(&[2.0, 3.0], &[2]);
        let y = (&w * t64(&[5.0, 7.0], &[2])).sum();
        no_grad(|| w.set_data(&w.detach().to_dtype(DType::F32)));
        y.backward();
    }

    /// A tensor that shares its storage with its views (FSDP's parameters) written in place
    /// between forward and backward: backward refuses the values it saved, as PyTorch's
    /// version counter does (unchecked, the gradient would come from the new values:
    /// `[12, 13]` for a forward that used `[2, 3]`). Replacing its buffer (`set_data`,
    /// FSDP's free and regather) is not a write.
    #[test]
    fn a_shared_tensor_written_between_forward_and_backward_is_refused() {
        let w = Tensor::from_vec(vec![2.0, 3.0], &[2]).requires_grad_(true);
        w.share_storage_with_views();
        let x = Tensor::from_vec(vec![5.0, 7.0], &[2]).requires_grad_(true);
        let y = (&x * &w).sum();
        no_grad(|| w.set_data(&w.detach().snapshot()));
        let y2 = (&x * &w).sum();
        y2.backward();
        assert_eq!(x.grad().unwrap().to_vec(), vec![2.0, 3.0]);
        no_grad(|| w.add_(10.0));
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| y.backward())).unwrap_err();
        let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("has been modified by an in-place operation: it is at version 1, saved at version 0"),
            "{msg}"
        );

        // Through a view the backward takes of the saved value (a matmul's transpose).
        let w = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]).requires_grad_(true);
        w.share_storage_with_views();
        let x = Tensor::from_vec(vec![1.0; 8], &[2, 2, 2]).requires_grad_(true);
        let y = x.matmul(&w.t()).sum();
        no_grad(|| w.add_(1.0));
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| y.backward())).unwrap_err();
        let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("has been modified by an in-place operation"), "{msg}");
    }
}
