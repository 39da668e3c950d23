//! Activation checkpointing (PyTorch's `torch.utils.checkpoint`, non-reentrant): trade
//! compute for memory by keeping only a block's inputs and running the block again in
//! backward to get the values its backward needs.
//!
//! [`checkpoint`] runs its closure with the graph recorded, as usual, then keeps only the
//! graph's frontier (the leaves and earlier results the block read) and drops the rest,
//! freeing the block's saved activations. When backward reaches the block's output it runs
//! the closure again, with the random generator as it was for the first run (so dropout
//! draws the same mask: PyTorch's `preserve_rng_state`; the recomputation draws from a
//! private copy, [`crate::random::fork_rng`], so other threads' draws cannot change the
//! mask and the generator outside is left as it was) and under the same autocast state,
//! and sends the gradient through the recomputed graph to the frontier. The gradients are
//! those of the run without checkpointing, bit for bit: the same ops on the same values.
//!
//! As in PyTorch, the recomputation is a real run of the closure: module forward hooks fire
//! again inside it, and a closure whose recomputation gives another output shape (a
//! forward that is not deterministic in its shapes) panics in backward, naming both.
//!
//! The closure is kept until backward, so it owns what it uses (`move`, `'static`): hold
//! a checkpointed module as an `Arc<M>` (`Arc<M>` is a module, with the same names and
//! state as `M`) and clone the handle into the closure, as in the example; tensors are
//! cheap handles to clone.
//!
//! ```
//! use std::sync::Arc;
//! use nn_core::grad_checkpoint::checkpoint;
//! use nn_core::prelude::*;
//!
//! #[derive(Module)]
//! struct Block { #[param] w: Parameter, #[base] base: ModuleBase }
//! impl Compute for Block {
//!     type Input = Tensor;
//!     type Output = Tensor;
//!     fn compute(&self, x: &Tensor) -> Tensor { x.matmul(&self.w).tanh() }
//! }
//! let block = Arc::new(Block { w: Parameter::new(Tensor::randn(&[4, 4])), base: ModuleBase::new() });
//! let x = Tensor::randn(&[2, 4]).requires_grad_(true);
//!
//! let (b, input) = (block.clone(), x.clone());
//! let y = checkpoint(move || b.forward(&input));
//! y.sum().backward();
//! let (gw, gx) = (block.w.grad().unwrap().to_vec(), x.grad().unwrap().to_vec());
//!
//! block.zero_grad();
//! x.set_grad(None);
//! block.forward(&x).sum().backward(); // the same, without checkpointing
//! assert_eq!((block.w.grad().unwrap().to_vec(), x.grad().unwrap().to_vec()), (gw, gx));
//! ```

mod selective;

use std::collections::HashSet;
use std::sync::Arc;

pub use selective::CheckpointPolicy;

use smallvec::SmallVec;

use crate::amp::{autocast_dtype, AutocastGuard};
use crate::autograd::{engine, is_grad_enabled, Edge, Grads};
use crate::device::Device;
use crate::tensor::Tensor;

/// Runs `f`, keeping only what it reads for backward, and runs it again in backward (see
/// the [module docs](self)). Outside grad mode it is `f()`.
///
/// # Panics
/// In backward, when the recomputation returns another shape, dtype or device than the
/// first run.
#[track_caller]
pub fn checkpoint(f: impl Fn() -> Tensor + Send + Sync + 'static) -> Tensor {
    checkpoint_with(CheckpointPolicy::recompute_all(), f)
}

/// [`checkpoint`] under a [`CheckpointPolicy`]: the outputs of the ops it names are kept
/// from the first run and taken by the recomputation instead of being computed again
/// (selective activation checkpointing). Gradients are the plain run's, bit for bit.
///
/// ```
/// use nn_core::grad_checkpoint::{checkpoint_with, CheckpointPolicy};
/// use nn_core::Tensor;
///
/// let w = Tensor::randn(&[4, 4]).requires_grad_(true);
/// let x = Tensor::randn(&[2, 4]);
/// let (wc, xc) = (w.clone(), x.clone());
/// // The product is kept; only the tanh runs again in backward.
/// let y = checkpoint_with(CheckpointPolicy::save_matmuls_and_attention(), move || xc.matmul(&wc).tanh());
/// y.sum().backward();
/// let selective = w.grad().unwrap().to_vec();
/// w.set_grad(None);
/// x.matmul(&w).tanh().sum().backward();
/// assert_eq!(w.grad().unwrap().to_vec(), selective);
/// ```
///
/// # Panics
/// In backward, when the recomputation returns another shape, dtype or device than the
/// first run, or runs the policy's ops in another order, number or size.
#[track_caller]
pub fn checkpoint_with(policy: CheckpointPolicy, f: impl Fn() -> Tensor + Send + Sync + 'static) -> Tensor {
    if !is_grad_enabled() {
        return f();
    }
    let rng = crate::random::rng_state();
    let amp = [Device::Cpu, Device::Gpu(0)].map(|d| (d, autocast_dtype(d)));
    let first_node = crate::autograd::next_node_id();
    let (y, kept) = crate::autograd::kept_outputs::record(policy.saved_ops(), &f);
    let Some(root) = y.0.grad_fn.clone() else {
        // Nothing it computed needs a gradient: nothing to keep or recompute.
        return y;
    };
    let frontier = frontier(&root, first_node);
    drop(root);
    let (shape, dtype, device) = (y.shape().to_vec(), y.dtype(), y.device());
    let edges = frontier.clone();
    let backward = move |g: &Tensor, _: &[bool]| -> Grads {
        // A private generator at the first run's state: the recomputation draws what the
        // first run drew whatever other threads draw meanwhile, and leaves theirs alone.
        let again = crate::random::fork_rng_at(&rng, || {
            let _amp: Vec<AutocastGuard> =
                amp.iter().filter_map(|&(d, dt)| dt.map(|dt| AutocastGuard::new(d, dt))).collect();
            crate::autograd::enable_grad(|| crate::autograd::kept_outputs::replay(policy.saved_ops(), &kept, &f))
        });
        if (again.shape(), again.dtype(), again.device()) != (shape.as_slice(), dtype, device) {
            panic!(
                "checkpoint: the recomputed forward returned {:?} ({}, {}), the first run {shape:?} ({dtype}, \
                 {device}): a checkpointed function must compute the same shapes when run again",
                again.shape(),
                again.dtype(),
                again.device()
            );
        }
        engine::gradients_at(&again, g.clone(), &edges).into_iter().collect()
    };
    // `y`'s graph, and the activations it saved, go when `y` does, at the end of this call.
    crate::autograd::record_with_edges("checkpoint", &y, frontier.into_iter().map(Some).collect(), backward)
}

/// Runs the segments of `layers` one after the other, each checkpointed (PyTorch's
/// `checkpoint_sequential(functions, segments, input)`): the layers are cut into `segments`
/// runs of nearly equal length, and only each run's input is kept for backward.
///
/// # Panics
/// When `segments` is 0 or more than the layers.
#[track_caller]
pub fn checkpoint_sequential<S: Segments + Send + Sync + 'static>(
    layers: &Arc<S>,
    segments: usize,
    x: &Tensor,
) -> Tensor {
    checkpoint_sequential_with(layers, segments, x, CheckpointPolicy::recompute_all())
}

/// [`checkpoint_sequential`] with each segment under `policy` (see [`checkpoint_with`]).
///
/// # Panics
/// When `segments` is 0 or more than the layers.
#[track_caller]
pub fn checkpoint_sequential_with<S: Segments + Send + Sync + 'static>(
    layers: &Arc<S>,
    segments: usize,
    x: &Tensor,
    policy: CheckpointPolicy,
) -> Tensor {
    let n = layers.len();
    if segments == 0 || segments > n.max(1) {
        panic!("checkpoint_sequential: {segments} segments for {n} layers (expected 1..={})", n.max(1));
    }
    let per = n.div_ceil(segments);
    let mut h = x.clone();
    let mut start = 0;
    while start < n {
        let end = (start + per).min(n);
        let (layers, input) = (layers.clone(), h.clone());
        h = checkpoint_with(policy.clone(), move || layers.run_layers(start..end, &input));
        start = end;
    }
    h
}

/// Layers that run in order, which [`checkpoint_sequential`] cuts into segments
/// (`nn_layers::Sequential`).
pub trait Segments {
    /// The number of layers.
    fn len(&self) -> usize;
    /// True without layers.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Runs the layers `range` on `x`, in order.
    fn run_layers(&self, range: std::ops::Range<usize>, x: &Tensor) -> Tensor;
}

/// The leaves and earlier graph nodes that the nodes made since `first_node` (the block's)
/// read, each once, in the order first met.
fn frontier(root: &Arc<crate::autograd::Node>, first_node: u64) -> Vec<Edge> {
    let mut out = Vec::new();
    let mut seen_nodes = HashSet::from([root.id]);
    let mut seen_leaves = HashSet::new();
    let mut stack = vec![root.clone()];
    while let Some(n) = stack.pop() {
        let inputs: SmallVec<[Option<Edge>; 3]> = {
            let st = n.state.lock().unwrap_or_else(|e| e.into_inner());
            st.as_ref().map(|s| s.inputs.clone()).unwrap_or_default()
        };
        for e in inputs.into_iter().flatten() {
            match e {
                Edge::Node(m) if m.id >= first_node => {
                    if seen_nodes.insert(m.id) {
                        stack.push(m);
                    }
                }
                Edge::Node(m) => {
                    if seen_nodes.insert(m.id) {
                        out.push(Edge::Node(m));
                    }
                }
                Edge::Leaf(t) => {
                    if seen_leaves.insert(t.id()) {
                        out.push(Edge::Leaf(t));
                    }
                }
            }
        }
    }
    out
}
