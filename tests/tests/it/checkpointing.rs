//! Activation checkpointing (`nn_core::grad_checkpoint`): gradients bit-identical to the
//! plain run (dropout included, through the restored generator; under autocast too), hooks
//! firing again on recomputation as PyTorch's do, `checkpoint_sequential`, and the loud
//! failures (a recomputation of another shape, a shared module changed mid-graph).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use nn_core::amp::autocast;
use nn_core::grad_checkpoint::{checkpoint, checkpoint_with, CheckpointPolicy};
use nn_core::random::fork_rng;
use nn_core::{manual_seed, Compute, DType, Device, Forward, Hooks, Module, ModuleBase, Tensor};
use nn_layers::{Dropout, Linear, Tanh};

#[derive(Module)]
struct Block {
    #[module]
    fc1: Linear,
    #[module]
    drop: Dropout,
    #[module]
    act: Tanh,
    #[module]
    fc2: Linear,
    #[base]
    base: ModuleBase,
}

impl Compute for Block {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        self.fc2.forward(&self.act.forward(&self.drop.forward(&self.fc1.forward(x)))) + x
    }
}

fn block() -> Arc<Block> {
    Arc::new(Block {
        fc1: Linear::new(8, 16),
        drop: Dropout::new(0.3),
        act: Tanh::new(),
        fc2: Linear::new(16, 8),
        base: ModuleBase::new(),
    })
}

/// Every gradient of two stacked blocks on `x`: checkpointed under `policy`, or not (`None`).
fn grads(blocks: &[Arc<Block>], x: &Tensor, policy: Option<CheckpointPolicy>) -> Vec<Vec<f32>> {
    for b in blocks {
        b.zero_grad();
    }
    x.set_grad(None);
    manual_seed(11);
    let mut h = x.clone();
    for b in blocks {
        h = match &policy {
            Some(p) => {
                let (b, input) = (b.clone(), h.clone());
                checkpoint_with(p.clone(), move || b.forward(&input))
            }
            None => b.forward(&h),
        };
    }
    (&h * &h).sum().backward();
    let mut out: Vec<Vec<f32>> =
        blocks.iter().flat_map(|b| b.parameters()).map(|p| p.grad().unwrap().to_vec()).collect();
    out.push(x.grad().unwrap().to_vec());
    out
}

// Both tests seed inside `fork_rng`: the generator is process-wide, and the other tests of
// this binary draw from it in parallel threads.
#[test]
fn gradients_are_bit_identical_with_dropout() {
    fork_rng(gradients_are_bit_identical_with_dropout_forked);
}

fn gradients_are_bit_identical_with_dropout_forked() {
    manual_seed(0);
    let blocks = [block(), block()];
    let x = Tensor::randn(&[4, 8]).requires_grad_(true);
    let plain = grads(&blocks, &x, None);
    let cp = grads(&blocks, &x, Some(CheckpointPolicy::recompute_all()));
    assert_eq!(cp, plain, "the recomputation draws the same dropout masks");
    // Selective: the products' outputs kept, dropout and tanh recomputed with the same masks.
    let selective = grads(&blocks, &x, Some(CheckpointPolicy::save_matmuls_and_attention()));
    assert_eq!(selective, plain, "selective checkpointing gives the same gradients");
    // The generator continues as after the plain run: the recomputation left it alone.
    manual_seed(11);
    let _ = grads(&blocks, &x, Some(CheckpointPolicy::recompute_all()));
    let after_cp = Tensor::rand(&[3]).to_vec();
    let _ = grads(&blocks, &x, None);
    assert_eq!(Tensor::rand(&[3]).to_vec(), after_cp);
    for b in &blocks {
        assert_eq!(Arc::strong_count(b), 1, "backward released the graph's handle on the block");
    }
}

#[test]
fn gradients_match_under_autocast() {
    fork_rng(gradients_match_under_autocast_forked);
}

fn gradients_match_under_autocast_forked() {
    manual_seed(1);
    let blocks = [block()];
    let x = Tensor::randn(&[4, 8]).requires_grad_(true);
    let plain = autocast(Device::Cpu, DType::BF16, || grads(&blocks, &x, None));
    let cp = autocast(Device::Cpu, DType::BF16, || grads(&blocks, &x, Some(CheckpointPolicy::recompute_all())));
    assert_eq!(cp, plain, "the recomputation runs under the forward's autocast state");
    let policy = CheckpointPolicy::save_matmuls_and_attention();
    let selective = autocast(Device::Cpu, DType::BF16, || grads(&blocks, &x, Some(policy.clone())));
    assert_eq!(selective, plain, "the kept bf16 products are the plain run's");
}

#[test]
fn forward_hooks_fire_again_on_recomputation_as_in_pytorch() {
    // torch.utils.checkpoint(b, x, use_reentrant=False): ['pre', 'fwd'] after forward,
    // ['pre', 'fwd', 'pre', 'fwd'] after backward.
    let b = block();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let handle = b
        .fc1
        .register_forward_hook(move |_, _| {
            c.fetch_add(1, Ordering::SeqCst);
            None
        })
        .unwrap();
    let x = Tensor::randn(&[2, 8]).requires_grad_(true);
    let (bb, input) = (b.clone(), x.clone());
    let y = checkpoint(move || bb.forward(&input));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    y.sum().backward();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    handle.remove();
}

#[test]
fn without_grad_it_just_runs() {
    let b = block();
    let x = Tensor::randn(&[2, 8]);
    let y = nn_core::no_grad(|| {
        let (bb, input) = (b.clone(), x.clone());
        checkpoint(move || bb.forward(&input))
    });
    assert!(!y.requires_grad());
    assert_eq!(Arc::strong_count(&b), 1, "nothing kept");
}

#[test]
#[should_panic(expected = "checkpoint: the recomputed forward returned [3] (f32, cpu), the first run [2] (f32, cpu)")]
fn a_recomputation_of_another_shape_is_refused() {
    let runs = Arc::new(AtomicUsize::new(0));
    let x = Tensor::ones(&[4]).requires_grad_(true);
    let input = x.clone();
    let y = checkpoint(move || {
        let n = 2 + runs.fetch_add(1, Ordering::SeqCst);
        input.narrow(0, 0, n) * 2.0
    });
    y.sum().backward();
}

#[test]
#[should_panic(expected = "eval: this `Arc<Block>` is one of 2 handles on the module")]
fn a_shared_module_refuses_changes_while_a_graph_holds_it() {
    let mut b = block();
    let x = Tensor::randn(&[2, 8]).requires_grad_(true);
    let (bb, input) = (b.clone(), x.clone());
    let _y = checkpoint(move || bb.forward(&input));
    b.eval();
}
