//! Selective activation checkpointing (PyTorch's `create_selective_checkpoint_contexts`):
//! a [`CheckpointPolicy`] names ops whose outputs the first run keeps, so that the
//! recomputation in backward takes them instead of running those ops again. Saving the
//! matrix products and attention, and recomputing the elementwise ops around them, keeps
//! most of checkpointing's memory saving for a fraction of its extra time.
//!
//! The outputs are kept as the first run's buffers (shared, not copied: a later in-place
//! write to the first run's tensor copies it first), until the checkpointed block's graph
//! goes. The recomputation must run the saved ops in the first run's order, on inputs of
//! the same shapes: a recomputation that runs another op where the first run saved one, or
//! fewer or more of them, panics naming the ops (PyTorch's non-determinism check).

use crate::names;

/// Which ops' outputs a checkpointed block keeps ([`checkpoint_with`](super::checkpoint_with)):
/// the first run keeps the outputs of the ops it names (their buffers, shared: a later
/// in-place write to the first run's tensor copies it first), and the recomputation in
/// backward takes them instead of running those ops again. Saving the matrix products and
/// attention, and recomputing the elementwise ops around them, keeps part of checkpointing's
/// memory saving for a fraction of its extra time. The recomputation must run the kept ops
/// in the first run's order and sizes; otherwise it panics naming them.
///
/// A policy keeps what actually runs: attention is kept when it runs as the fused kernel;
/// where that kernel declines (while tracing, or for operands it does not take) attention
/// runs as its composition, whose matrix products are kept under
/// [`save_matmuls_and_attention`](Self::save_matmuls_and_attention) and recomputed under a
/// policy naming attention alone. Either way the gradients are the plain run's; only the
/// time saved differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointPolicy {
    save: Vec<&'static str>,
}

impl CheckpointPolicy {
    /// The ops whose outputs a policy can keep: the matrix products (`matmul`, and the
    /// fused `linear` and `addmm`) and the fused attention.
    pub const SAVABLE: [&'static str; 4] =
        [names::MATMUL, names::LINEAR, names::ADDMM, names::SCALED_DOT_PRODUCT_ATTENTION];

    /// Keep nothing, recompute everything: what [`checkpoint`](super::checkpoint) does.
    pub fn recompute_all() -> Self {
        CheckpointPolicy { save: Vec::new() }
    }

    /// Keep the outputs of the matrix products and of attention, recompute the rest (the
    /// usual selective policy: PyTorch's examples save `aten.mm` and the attention ops).
    pub fn save_matmuls_and_attention() -> Self {
        CheckpointPolicy { save: Self::SAVABLE.to_vec() }
    }

    /// Keep the outputs of `ops` (names from [`crate::names`]).
    ///
    /// # Panics
    /// When an op is not one a policy can keep ([`SAVABLE`](Self::SAVABLE)): its output
    /// would be recomputed silently, as if it had not been named.
    #[track_caller]
    pub fn save(ops: &[&str]) -> Self {
        let save = ops
            .iter()
            .map(|op| {
                Self::SAVABLE.iter().copied().find(|s| s == op).unwrap_or_else(|| {
                    panic!(
                        "CheckpointPolicy::save: `{op}` is not an op whose output a checkpoint can keep; those are {:?}",
                        Self::SAVABLE
                    )
                })
            })
            .collect();
        CheckpointPolicy { save }
    }

    /// The ops it keeps.
    pub fn saved_ops(&self) -> &[&'static str] {
        &self.save
    }
}

impl Default for CheckpointPolicy {
    /// [`recompute_all`](Self::recompute_all), PyTorch's default.
    fn default() -> Self {
        Self::recompute_all()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::CheckpointPolicy;
    use crate::autograd::kept_outputs::replayed;
    use crate::grad_checkpoint::{checkpoint, checkpoint_with};
    use crate::ops::AttentionConfig;
    use crate::{manual_seed, Tensor};

    /// A block with every savable op and elementwise ops between them.
    fn block(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
        let h = crate::functional::linear(x, w, Some(b)).tanh(); // linear
        let q = h.matmul(&w.t()).gelu(); // matmul
        let q4 = q.reshape(&[1, 2, 3, 4]);
        let a = Tensor::scaled_dot_product_attention(&q4, &q4, &q4, &AttentionConfig::default()); // attention
        b.addmm(&a.reshape(&[6, 4]), w).sigmoid() // addmm
    }

    fn grads(policy: Option<CheckpointPolicy>) -> (Vec<f32>, Vec<f32>, Vec<f32>, u64) {
        manual_seed(3);
        let x = Tensor::randn(&[6, 4]).requires_grad_(true);
        let w = Tensor::randn(&[4, 4]).requires_grad_(true);
        let b = Tensor::randn(&[4]).requires_grad_(true);
        let (xc, wc, bc) = (x.clone(), w.clone(), b.clone());
        let before = replayed();
        let y = match policy {
            None => block(&x, &w, &b),
            Some(p) => checkpoint_with(p, move || block(&xc, &wc, &bc)),
        };
        (y.square().sum()).backward();
        let taken = replayed() - before;
        (x.grad().unwrap().to_vec(), w.grad().unwrap().to_vec(), b.grad().unwrap().to_vec(), taken)
    }

    #[test]
    fn a_selective_checkpoint_takes_the_kept_outputs_and_gives_the_plain_gradients_bit_for_bit() {
        let (px, pw, pb, _) = grads(None);
        let (sx, sw, sb, taken) = grads(Some(CheckpointPolicy::save_matmuls_and_attention()));
        assert_eq!((&px, &pw, &pb), (&sx, &sw, &sb));
        assert_eq!(taken, 4, "linear, matmul, attention and addmm are taken, not recomputed");
        let (fx, fw, fb, taken) = grads(Some(CheckpointPolicy::recompute_all()));
        assert_eq!((&px, &pw, &pb), (&fx, &fw, &fb));
        assert_eq!(taken, 0);
        let (mx, mw, mb, taken) = grads(Some(CheckpointPolicy::save(&[crate::names::MATMUL])));
        assert_eq!((&px, &pw, &pb), (&mx, &mw, &mb));
        assert_eq!(taken, 1, "only the matmul");
    }

    #[test]
    fn a_recomputation_that_runs_other_ops_panics_naming_them() {
        let x = Tensor::randn(&[3, 3]).requires_grad_(true);
        let again = Arc::new(AtomicBool::new(false));
        let (xc, flag) = (x.clone(), again.clone());
        let y = checkpoint_with(CheckpointPolicy::save_matmuls_and_attention(), move || {
            if flag.swap(true, Ordering::SeqCst) {
                xc.matmul(&xc).tanh() // the recomputation: one product
            } else {
                xc.matmul(&xc).matmul(&xc).tanh() // the first run: two
            }
        });
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| y.sum().backward())).unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("ran 1 of the 2 saved ops"), "{msg}");
    }

    #[test]
    fn a_policy_naming_an_op_it_cannot_keep_is_refused() {
        let err = std::panic::catch_unwind(|| CheckpointPolicy::save(&["tanh"])).unwrap_err();
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("`tanh` is not an op whose output a checkpoint can keep"), "{msg}");
        assert_eq!(CheckpointPolicy::default(), CheckpointPolicy::recompute_all());
        // Plain `checkpoint` keeps nothing.
        let x = Tensor::randn(&[2, 2]).requires_grad_(true);
        let xc = x.clone();
        let before = replayed();
        checkpoint(move || xc.matmul(&xc)).sum().backward();
        assert_eq!(replayed(), before);
    }
}
