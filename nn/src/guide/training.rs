//! # Training and checkpoints
//!
//! The loop is PyTorch's: `zero_grad`, forward, loss, `backward`, (clip), `step`, then the
//! schedulers. Optimizers ([`Sgd`](crate::optim::Sgd), [`Adam`](crate::optim::Adam),
//! [`AdamW`](crate::optim::AdamW)) hold the model's [`Parameter`](crate::Parameter) handles
//! and update them in place, with PyTorch's update rules; their state is keyed by the
//! parameters' dotted names, so it survives a reordering.
//!
//! ## Parameter groups
//!
//! An optimizer takes `model.parameters()`, `model.named_parameters()` or a list of
//! [`ParamGroup`](crate::optim::ParamGroup)s, each with its own learning rate or weight
//! decay (PyTorch's `[{"params": ..., "weight_decay": 0.0}, ...]`). The usual split: no
//! decay for biases.
//! ```
//! use nn::prelude::*;
//! use nn::layers::{Linear, ReLU, Sequential};
//! use nn::optim::{AdamW, AdamWConfig, Optimizer, ParamGroup};
//!
//! let model = Sequential::new().add(Linear::new(4, 8)).add(ReLU::new()).add(Linear::new(8, 3));
//! let (biases, weights): (Vec<_>, Vec<_>) =
//!     model.named_parameters().into_iter().partition(|(name, _)| name.ends_with("bias"));
//! let opt = AdamW::new(
//!     vec![ParamGroup::new(weights), ParamGroup::new(biases).weight_decay(0.0)],
//!     AdamWConfig { lr: 1e-2, ..Default::default() }, // weight decay 0.01 for the rest
//! );
//! assert_eq!(opt.num_groups(), 2);
//! let state = opt.state_dict();
//! assert_eq!((state.hyper_params[0]["weight_decay"], state.hyper_params[1]["weight_decay"]), (0.01, 0.0));
//! assert_eq!(opt.named_parameters()[0].0, "0.weight");
//! ```
//!
//! ## Schedulers and clipping
//!
//! [`StepLR`](crate::optim::StepLR), [`LinearLR`](crate::optim::LinearLR) and
//! [`CosineAnnealingLR`](crate::optim::CosineAnnealingLR) step the learning rates with
//! PyTorch's formulas and chain as PyTorch's do (a warm-up and a decay, both stepped, from
//! the group's `initial_lr`). [`clip_grad_norm_`](crate::optim::clip_grad_norm_) is
//! `torch.nn.utils.clip_grad_norm_` and returns the norm before clipping:
//! ```
//! use nn::optim::{clip_grad_norm_, CosineAnnealingLR, LinearLR, LrScheduler, Optimizer, Sgd, SgdConfig};
//! use nn::{Parameter, Tensor};
//!
//! let w = Parameter::new(Tensor::zeros(&[2]));
//! let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 1.0, ..Default::default() });
//! let mut warmup = LinearLR::new(&mut opt, 0.25, 1.0, 3); // 0.25, 0.5, 0.75, then 1.0
//! let mut decay = CosineAnnealingLR::new(&mut opt, 100, 0.0);
//! assert_eq!(opt.group_lr(0), 0.25);
//! for _ in 0..3 {
//!     warmup.step(&mut opt);
//!     decay.step(&mut opt);
//! }
//! assert!(opt.group_lr(0) < 1.0 && opt.group_lr(0) > 0.99); // warmed up, the cosine begun
//!
//! w.set_grad(Some(Tensor::from_vec(vec![3.0, 4.0], &[2])));
//! let norm = clip_grad_norm_(&[w.clone()], 1.0);
//! assert!((norm - 5.0).abs() < 1e-6);
//! let g = w.grad().unwrap().to_vec();
//! assert!((g[0] - 0.6).abs() < 1e-5 && (g[1] - 0.8).abs() < 1e-5);
//! ```
//!
//! ## A training loop, a checkpoint, a resume bit for bit
//!
//! A [`Checkpoint`](crate::checkpoint::Checkpoint) holds everything a run needs to go on:
//! the model's state dict, the optimizer's state, every scheduler's state, the epoch and
//! step counts, the global generator's state (dropout draws and shuffles continue as they
//! would have) and free-form [`Extra`](crate::checkpoint::Extra) values, in one
//! safetensors file written atomically. Restoring checks every part against the model,
//! the optimizer and the schedulers before it changes anything. A run stopped after two
//! epochs and resumed in a fresh model, optimizer and schedulers ends with the same bits
//! as the run that did not stop:
//! ```
//! use nn::prelude::*;
//! use nn::checkpoint::Checkpoint;
//! use nn::data::DataLoader;
//! use nn::functional::cross_entropy;
//! use nn::layers::{Dropout, Linear, ReLU, Sequential};
//! use nn::optim::{clip_grad_norm_, AdamW, AdamWConfig, CosineAnnealingLR, LinearLR, LrScheduler, Optimizer};
//! use nn::optim::ParamGroup;
//!
//! struct Run { model: Sequential, opt: AdamW, warmup: LinearLR, decay: CosineAnnealingLR, steps: u64 }
//!
//! fn start() -> Run {
//!     let model = Sequential::new().add(Linear::new(4, 16)).add(ReLU::new()).add(Dropout::new(0.1));
//!     let model = model.add(Linear::new(16, 3));
//!     let (biases, weights): (Vec<_>, Vec<_>) =
//!         model.named_parameters().into_iter().partition(|(n, _)| n.ends_with("bias"));
//!     let groups = vec![ParamGroup::new(weights), ParamGroup::new(biases).weight_decay(0.0)];
//!     let mut opt = AdamW::new(groups, AdamWConfig { lr: 0.02, ..Default::default() });
//!     let warmup = LinearLR::new(&mut opt, 0.1, 1.0, 4);
//!     let decay = CosineAnnealingLR::new(&mut opt, 32, 0.0);
//!     Run { model, opt, warmup, decay, steps: 0 }
//! }
//!
//! /// One epoch; returns the mean loss.
//! fn epoch(run: &mut Run, loader: &DataLoader, epoch: u64) -> f64 {
//!     let mut total = 0.0;
//!     for (xb, yb) in loader.epoch(epoch) {
//!         run.opt.zero_grad();
//!         let loss = cross_entropy(&run.model.forward(&xb), &yb);
//!         loss.backward();
//!         clip_grad_norm_(&run.model.parameters(), 1.0);
//!         run.opt.step();
//!         run.warmup.step(&mut run.opt);
//!         run.decay.step(&mut run.opt);
//!         run.steps += 1;
//!         total += loss.item();
//!     }
//!     total / loader.num_batches() as f64
//! }
//!
//! nn::manual_seed(0);
//! let x = Tensor::randn(&[64, 4]);
//! let y = x.i((.., ..3)).argmax(1, false); // the class is the largest of the first three features
//! let loader = DataLoader::new(x, y, 8).shuffle(7); // the same order for the same epoch
//!
//! // The run that does not stop.
//! nn::manual_seed(1);
//! let mut full = start();
//! let first = epoch(&mut full, &loader, 0);
//! let mut last = first;
//! for e in 1..4 {
//!     last = epoch(&mut full, &loader, e);
//! }
//! assert!(last < first, "{first} -> {last}");
//!
//! // The same run, stopped after two epochs...
//! let path = std::env::temp_dir().join(format!("nn-guide-training-{}.safetensors", std::process::id()));
//! nn::manual_seed(1);
//! let mut run = start();
//! for e in 0..2 {
//!     epoch(&mut run, &loader, e);
//! }
//! let schedulers = vec![run.warmup.state().clone(), run.decay.state().clone()];
//! let mut ck = Checkpoint::new(run.model.state_dict(), Some(run.opt.state_dict()), schedulers, 2, run.steps);
//! ck.extra.insert("run".into(), "guide".into());
//! ck.save(&path)?;
//! drop(run);
//!
//! // ...and resumed in another model, optimizer and schedulers (another seed, even).
//! nn::manual_seed(99);
//! let mut resumed = start();
//! let ck = Checkpoint::load(&path)?;
//! ck.restore_all(&mut resumed.model, Some(&mut resumed.opt), &mut [&mut resumed.warmup, &mut resumed.decay], None)?;
//! resumed.steps = ck.step;
//! assert_eq!((ck.epoch, ck.extra["run"].as_str()), (2, Some("guide")));
//! for e in ck.epoch..4 {
//!     epoch(&mut resumed, &loader, e);
//! }
//! for ((name, a), (_, b)) in full.model.state_dict().iter().zip(resumed.model.state_dict().iter()) {
//!     assert_eq!(a.to_vec(), b.to_vec(), "{name}"); // bit for bit
//! }
//! assert_eq!(resumed.opt.group_lr(0), full.opt.group_lr(0));
//! assert_eq!(resumed.steps, full.steps);
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//! A checkpoint that does not fit (another model, another kind of optimizer or schedule,
//! a scheduler left out) is an error and leaves everything as it was;
//! [`Checkpoint::restore`](crate::checkpoint::Checkpoint::restore) takes a run with one
//! scheduler, and [`restore_with_scaler`](crate::checkpoint::Checkpoint::restore_with_scaler)
//! a run with a [`GradScaler`](crate::amp::GradScaler) (see [the mixed-precision
//! chapter](super::mixed_precision)). The model's weights alone are saved and loaded as
//! in [the next chapter](super::saving); the examples' `--resume` flags use this
//! checkpoint (`examples/README.md`).
