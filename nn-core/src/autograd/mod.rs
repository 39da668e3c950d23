//! Reverse-mode automatic differentiation on a dynamic graph.
//!
//! Every op whose inputs require grad records a `Node` holding the op's backward rule,
//! the values it saved, and one edge per input (to the input's own node, or to the leaf
//! tensor whose `.grad` receives the result). Nodes are identified by id, never by value.
//! [`Tensor::backward`] counts each node's consumers, then runs nodes once all their
//! consumers have contributed (a reverse topological order), accumulating into leaves.
//! Unless `retain_graph` is asked for, each node's saved values and edges are freed as it
//! runs, so the graph is released even while the loss tensor is still alive.
//!
//! A leaf receives one accumulation per backward pass: the engine sums every gradient the
//! pass produces for it first, then adds that sum into `.grad` and runs the leaf's
//! post-accumulate-grad hooks ([`Tensor::register_post_accumulate_grad_hook`]). Hooks may
//! queue work for the end of the pass with [`queue_callback`].

pub(crate) mod autocast;
pub(crate) mod engine;
pub(crate) mod entry;
pub mod forward_checks;
mod grad_mode;
pub(crate) mod handle;
pub mod hooks;
pub(crate) mod kept_outputs;
mod nesting;
pub mod trace;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use smallvec::SmallVec;

pub use engine::{is_anomaly_enabled, set_detect_anomaly};
pub use grad_mode::{
    enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad, GradModeGuard,
    InferenceModeGuard, NoGradGuard,
};
pub use hooks::{queue_callback, GradHook, PostAccumulateGradHook};

use crate::backend::Storage;
use crate::shape::{Dims, Layout};
use crate::tensor::Tensor;

/// Gradients returned by a backward rule, one per input, `None` where not needed.
pub(crate) type Grads = SmallVec<[Option<Tensor>; 3]>;

/// A backward rule: maps the gradient of an op's output to the gradients of its inputs.
///
/// `needs[i]` is false for inputs that do not require grad; rules may skip those. Rules
/// run with graph recording disabled and may use any tensor op.
pub(crate) trait Backward: Send + Sync + 'static {
    fn backward(&self, grad: &Tensor, needs: &[bool]) -> Grads;
}

impl<F> Backward for F
where
    F: Fn(&Tensor, &[bool]) -> Grads + Send + Sync + 'static,
{
    fn backward(&self, grad: &Tensor, needs: &[bool]) -> Grads {
        self(grad, needs)
    }
}

/// Where a gradient flows: into a leaf's `.grad`, or into the node that produced the input.
#[derive(Clone)]
pub(crate) enum Edge {
    Leaf(Tensor),
    Node(Arc<Node>),
}

pub(crate) struct NodeState {
    pub(crate) backward: Box<dyn Backward>,
    pub(crate) inputs: SmallVec<[Option<Edge>; 3]>,
}

/// One recorded op in the graph.
pub(crate) struct Node {
    pub(crate) id: u64,
    pub(crate) name: &'static str,
    /// Shape of the output this node produced (checked against incoming gradients).
    pub(crate) shape: Dims,
    /// `None` once the node has run without `retain_graph`.
    pub(crate) state: Mutex<Option<NodeState>>,
    /// The output tensors that asked to keep their gradient ([`Tensor::retain_grad`]).
    pub(crate) retained: Mutex<Vec<std::sync::Weak<crate::tensor::TensorImpl>>>,
    /// The gradient hooks of this node's result ([`Tensor::register_hook`]).
    pub(crate) hooks: hooks::HookList<hooks::GradHook>,
}

static NEXT_NODE_ID: AtomicU64 = AtomicU64::new(1);

/// The id the next graph node will get: every node recorded after this call has an id at
/// least this (ids only grow), which is how a checkpoint tells its block's nodes apart.
pub(crate) fn next_node_id() -> u64 {
    NEXT_NODE_ID.load(Ordering::SeqCst)
}

/// `out`'s values as the result of a node named `name` over the given `edges` (a
/// checkpoint's frontier, which no tensor list names), with `backward` returning one
/// gradient per edge.
pub(crate) fn record_with_edges(
    name: &'static str,
    out: &Tensor,
    edges: SmallVec<[Option<Edge>; 3]>,
    backward: impl Backward,
) -> Tensor {
    let values = out.detached_for_keeping();
    let node = Arc::new(Node::new(name, values.shape(), Box::new(backward), edges));
    Tensor::in_slot(values.slot(), values.layout().clone(), Some(node))
}

impl Node {
    fn new(
        name: &'static str,
        shape: &[usize],
        backward: Box<dyn Backward>,
        inputs: SmallVec<[Option<Edge>; 3]>,
    ) -> Self {
        Node {
            id: NEXT_NODE_ID.fetch_add(1, Ordering::Relaxed),
            name,
            shape: shape.into(),
            state: Mutex::new(Some(NodeState { backward, inputs })),
            retained: Mutex::new(Vec::new()),
            hooks: hooks::HookList::default(),
        }
    }
}

impl Drop for Node {
    /// Frees long chains iteratively: a recursive drop of a 100,000-op graph (an RNN
    /// unrolled over a long sequence) would overflow the stack.
    fn drop(&mut self) {
        let mut stack: Vec<Arc<Node>> = Vec::new();
        let take = |n: &mut Node, stack: &mut Vec<Arc<Node>>| {
            if let Some(st) = n.state.get_mut().ok().and_then(|s| s.take()) {
                for e in st.inputs.into_iter().flatten() {
                    if let Edge::Node(m) = e {
                        stack.push(m);
                    }
                }
            }
        };
        take(self, &mut stack);
        while let Some(arc) = stack.pop() {
            if let Ok(mut node) = Arc::try_unwrap(arc) {
                take(&mut node, &mut stack);
            }
        }
    }
}

impl Tensor {
    /// The edge a gradient for `self` should follow, if `self` requires grad.
    pub(crate) fn edge(&self) -> Option<Edge> {
        if let Some(n) = &self.0.grad_fn {
            Some(Edge::Node(n.clone()))
        } else if self.requires_grad() {
            Some(Edge::Leaf(self.clone()))
        } else {
            None
        }
    }
}

/// Builds an op's output tensor, recording a graph node when grad mode is on and any
/// input requires grad. `make_backward` only runs in that case, so ops save nothing for
/// backward in inference.
pub(crate) fn op_result<B: Backward>(
    name: &'static str,
    storage: Arc<Storage>,
    layout: Layout,
    inputs: &[&Tensor],
    make_backward: impl FnOnce() -> B,
) -> Tensor {
    op_result_in(name, Tensor::slot_for(storage, inputs), layout, inputs, make_backward)
}

/// [`op_result`] over a given slot: a view's output reads its input's slot, so in-place
/// updates through either are seen by both.
pub(crate) fn op_result_in<B: Backward>(
    name: &'static str,
    slot: Arc<crate::tensor::StorageSlot>,
    layout: Layout,
    inputs: &[&Tensor],
    make_backward: impl FnOnce() -> B,
) -> Tensor {
    // An integer or bool result is not differentiable (PyTorch's rule): no node, so no
    // float gradient is ever truncated into it. Its inputs stay the tracer's.
    let float = slot.get().dtype().is_float();
    let grad_fn = if float && is_grad_enabled() && inputs.iter().any(|t| t.requires_grad()) {
        let edges = inputs.iter().map(|t| t.edge()).collect();
        Some(Arc::new(Node::new(name, layout.shape(), Box::new(make_backward()), edges)))
    } else {
        None
    };
    let out = Tensor::in_slot(slot, layout, grad_fn);
    crate::autograd::trace::on_op_result(name, inputs, &out);
    out
}

/// Records a user-defined differentiable function, like `torch.autograd.Function`.
///
/// `output` is the forward result computed by any means (it is detached first);
/// `backward` receives the gradient of `output` and returns one optional gradient per
/// input, each of that input's shape. The result requires grad when grad mode is on and
/// any input does, and it is floating point: an integer or bool output is not
/// differentiable, as in PyTorch, and is returned without a graph.
///
/// ```
/// use nn_core::{autograd::custom_op, Tensor};
/// // A straight-through estimator: round in forward, identity in backward.
/// let x = Tensor::from_vec(vec![0.2, 0.7], &[2]).requires_grad_(true);
/// let rounded = Tensor::from_vec(x.to_vec().iter().map(|v| v.round()).collect(), &[2]);
/// let y = custom_op("round_ste", &[&x], &rounded, |g| vec![Some(g.clone())]);
/// (&y * 3.0).sum().backward();
/// assert_eq!(y.to_vec(), vec![0.0, 1.0]);
/// assert_eq!(x.grad().unwrap().to_vec(), vec![3.0, 3.0]);
/// ```
pub fn custom_op(
    name: &'static str,
    inputs: &[&Tensor],
    output: &Tensor,
    backward: impl Fn(&Tensor) -> Vec<Option<Tensor>> + Send + Sync + 'static,
) -> Tensor {
    let out = output.detached_for_keeping();
    if !out.dtype().is_float() {
        // An integer or bool output is not differentiable (PyTorch marks it so): as a node,
        // a float gradient cast to it would truncate to zero, silently.
        return out;
    }
    let shapes: Vec<Dims> = inputs.iter().map(|t| Dims::from(t.shape())).collect();
    let kinds: Vec<(crate::DType, crate::Device)> = inputs.iter().map(|t| (t.dtype(), t.device())).collect();
    op_result(name, out.storage_arc(), out.layout().clone(), inputs, move || {
        move |g: &Tensor, _needs: &[bool]| -> Grads {
            let grads = backward(g);
            assert_eq!(
                grads.len(),
                shapes.len(),
                "custom_op `{name}`: backward returned {} gradients for {} inputs",
                grads.len(),
                shapes.len()
            );
            for (g, s) in grads.iter().zip(&shapes) {
                if let Some(g) = g {
                    assert_eq!(
                        g.shape(),
                        s.as_slice(),
                        "custom_op `{name}`: gradient of shape {:?} for an input of shape {:?}",
                        g.shape(),
                        s.as_slice()
                    );
                }
            }
            // In each input's dtype, as PyTorch's engine casts a custom function's gradients;
            // one on another device is refused.
            grads
                .into_iter()
                .zip(&kinds)
                .map(|(g, &(dtype, device))| {
                    g.map(|g| {
                        let meta = [g.device(), device].contains(&crate::Device::Meta);
                        if g.device() != device && !meta && dtype.is_float() {
                            panic!("custom_op `{name}`: gradient on {} for an input on {device}", g.device());
                        }
                        if g.dtype() != dtype && dtype.is_float() {
                            g.to_dtype(dtype)
                        } else {
                            g
                        }
                    })
                })
                .collect()
        }
    })
}
