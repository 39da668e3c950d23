//! Resuming from a training checkpoint continues bit for bit like an uninterrupted run.
//!
//! This test lives in its own binary (its own process): it needs exclusive use of the
//! global random generator, which tests running in parallel threads would share.

use nn_core::checkpoint::Checkpoint;
use nn_core::functional as F;
use nn_core::optim::{Adam, AdamConfig, CosineAnnealingLR, LrScheduler, Optimizer};
use nn_core::{manual_seed, Forward, Module, Tensor};
use nn_layers::{Dropout, Linear, ReLU, Sequential};

/// A run with everything that can break a resume: dropout (RNG), shuffling (RNG), Adam
/// state and a scheduler whose rates are not short binary fractions (the checkpoint's JSON
/// must give them back to the bit).
struct Run {
    model: Sequential,
    opt: Adam,
    sched: CosineAnnealingLR,
    step: u64,
}

fn data() -> (Tensor, Tensor) {
    manual_seed(99);
    let x = Tensor::randn(&[64, 6]);
    let y = Tensor::from_vec_i64((0..64).map(|i| i % 3).collect(), &[64]);
    (x, y)
}

impl Run {
    fn new(seed: u64) -> Run {
        manual_seed(seed);
        let model =
            Sequential::new().add(Linear::new(6, 16)).add(ReLU::new()).add(Dropout::new(0.2)).add(Linear::new(16, 3));
        let mut opt = Adam::new(model.named_parameters(), AdamConfig { lr: 1e-2, ..Default::default() });
        let sched = CosineAnnealingLR::new(&mut opt, 12, 1e-4);
        Run { model, opt, sched, step: 0 }
    }

    fn epoch(&mut self, x: &Tensor, y: &Tensor) -> Vec<f32> {
        let order = Tensor::randperm(64);
        let mut losses = vec![];
        for b in 0..4 {
            let idx = order.narrow(0, b * 16, 16);
            self.opt.zero_grad();
            let loss = F::cross_entropy(&self.model.forward(&x.index_select(0, &idx)), &y.index_select(0, &idx));
            losses.push(loss.item() as f32);
            loss.backward();
            self.opt.step();
            self.step += 1;
        }
        self.sched.step(&mut self.opt);
        losses
    }
}

#[test]
fn resumed_training_is_bit_identical() {
    let (x, y) = data();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.safetensors");

    let mut full = Run::new(7);
    let mut full_losses = vec![];
    for epoch in 0..12 {
        full_losses.extend(full.epoch(&x, &y));
        if epoch == 5 {
            let ck = Checkpoint::new(
                full.model.state_dict(),
                Some(full.opt.state_dict()),
                Some(full.sched.state().clone()),
                epoch + 1,
                full.step,
            );
            ck.save(&path).unwrap();
        }
    }

    // A fresh process: different init, different RNG position, then restore everything.
    let mut resumed = Run::new(12345);
    let ck = Checkpoint::load(&path).unwrap();
    ck.restore(&mut resumed.model, Some(&mut resumed.opt), Some(&mut resumed.sched)).unwrap();
    resumed.step = ck.step;
    let mut resumed_losses = full_losses[..4 * ck.epoch as usize].to_vec();
    for _ in ck.epoch..12 {
        resumed_losses.extend(resumed.epoch(&x, &y));
    }
    assert_eq!(resumed_losses, full_losses, "losses differ after resuming");
    for ((k, a), (_, b)) in full.model.state_dict().iter().zip(resumed.model.state_dict().iter()) {
        assert_eq!(a.to_vec(), b.to_vec(), "{k} differs after resuming");
    }
    assert_eq!(resumed.step, full.step);
    // A file that is not a checkpoint is refused with a reason.
    full.model.save(dir.path().join("weights.safetensors")).unwrap();
    let e = Checkpoint::load(dir.path().join("weights.safetensors")).unwrap_err().to_string();
    assert!(e.contains("not a training checkpoint"), "{e}");
}
