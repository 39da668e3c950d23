//! # Coming from PyTorch
//!
//! Every common `nn.Module` idiom beside its nn form. Each snippet here is a test that
//! runs and asserts. The one difference to keep in mind: PyTorch registers state when an
//! attribute is assigned, at run time, and forgets silently what it does not recognise;
//! nn reads `#[param]`, `#[buffer]` and `#[module]` at compile time, and an unregistered
//! layer or tensor field is a compile error that says what to write.
//!
//! ## Defining and calling a module
//!
//! PyTorch:
//! ```python
//! class Mlp(nn.Module):
//!     def __init__(self):
//!         super().__init__()
//!         self.fc1 = nn.Linear(4, 8)
//!         self.fc2 = nn.Linear(8, 2)
//!     def forward(self, x):
//!         return self.fc2(torch.relu(self.fc1(x)))
//! y = Mlp()(x)
//! ```
//! nn: the body of `forward` is `Compute::compute`; callers use `forward`, which is
//! PyTorch's `__call__` (it runs the hooks). A direct call of `compute`, which would skip
//! the hooks as `module.forward(x)` does in PyTorch, is a `deprecated` warning saying to
//! call `forward` (an error under `-D warnings`); and a module that computes has a
//! `#[base]` (its hooks and training flag):
//! ```
//! use nn::prelude::*;
//! use nn::layers::Linear;
//!
//! #[derive(Module)]
//! struct Mlp {
//!     #[module] fc1: Linear,
//!     #[module] fc2: Linear,
//!     #[base] base: ModuleBase,
//! }
//!
//! impl Compute for Mlp {
//!     type Input = Tensor;
//!     type Output = Tensor;
//!     fn compute(&self, x: &Tensor) -> Tensor {
//!         self.fc2.forward(&self.fc1.forward(x).relu())
//!     }
//! }
//!
//! let m = Mlp { fc1: Linear::new(4, 8), fc2: Linear::new(8, 2), base: ModuleBase::new() };
//! assert_eq!(m.forward(&Tensor::ones(&[3, 4])).shape(), &[3, 2]);
//! ```
//!
//! ## Lists and dicts of layers
//!
//! `nn.ModuleList` / `nn.ModuleDict` are [`ModuleList`](crate::layers::ModuleList) /
//! [`ModuleDict`](crate::layers::ModuleDict); a plain `Vec<Linear>` field does not compile
//! (it would be invisible to `parameters()`, the classic PyTorch bug):
//! ```
//! use nn::prelude::*;
//! use nn::layers::{Linear, ModuleDict, ModuleList};
//!
//! #[derive(Module)]
//! struct Net {
//!     #[module] blocks: ModuleList<Linear>,
//!     #[module] heads: ModuleDict<Linear>,
//! }
//! let net = Net {
//!     blocks: (0..2).map(|_| Linear::new(4, 4)).collect(),
//!     heads: [("cls".to_string(), Linear::new(4, 3))].into_iter().collect(),
//! };
//! let keys: Vec<String> = net.state_dict().keys().map(String::from).collect();
//! assert_eq!(keys, ["blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias", "heads.cls.weight", "heads.cls.bias"]);
//! ```
//!
//! ## Lists and dicts of raw parameters
//!
//! `nn.ParameterList` / `nn.ParameterDict` are [`ParameterList`](crate::layers::ParameterList) /
//! [`ParameterDict`](crate::layers::ParameterDict), held as `#[module]` fields, with
//! PyTorch's keys; a `Vec<Parameter>` field does not compile, as a `Vec<Linear>` does not:
//! ```
//! use nn::prelude::*;
//! use nn::layers::{ParameterDict, ParameterList};
//!
//! #[derive(Module)]
//! struct Heads {
//!     #[module] scales: ParameterList,   // self.scales = nn.ParameterList(...)
//!     #[module] gains: ParameterDict,    // self.gains = nn.ParameterDict(...)
//! }
//! let n_head = 2;
//! let mut h = Heads {
//!     scales: (0..n_head).map(|_| Parameter::new(Tensor::ones(&[8]))).collect(),
//!     gains: ParameterDict::new(),
//! };
//! h.gains.insert("q", Parameter::new(Tensor::ones(&[1])));
//! let keys: Vec<String> = h.state_dict().keys().map(String::from).collect();
//! assert_eq!(keys, ["scales.0", "scales.1", "gains.q"]);
//! ```
//!
//! ## Buffers, persistent and not
//!
//! `self.register_buffer("running", t)` and `register_buffer("cache", t, persistent=False)`:
//! ```
//! use nn::prelude::*;
//!
//! #[derive(Module)]
//! struct Stats {
//!     #[buffer] running: Tensor,
//!     #[buffer(persistent = false)] cache: Tensor,
//! }
//! let mut s = Stats { running: Tensor::zeros(&[2]), cache: Tensor::zeros(&[2]) };
//! assert_eq!(s.named_buffers().len(), 2);                 // both move with the module
//! assert_eq!(s.state_dict().keys().collect::<Vec<_>>(), ["running"]); // one is saved
//! s.to_dtype(DType::F64);                                  // model.double()
//! assert_eq!(s.cache.dtype(), DType::F64);
//! ```
//!
//! ## Hooks in a loop (feature extraction)
//!
//! ```python
//! for name, m in model.named_modules():
//!     m.register_forward_hook(lambda m, i, o, name=name: feats.__setitem__(name, o.shape))
//! ```
//! Registration works on the `&dyn Module` items, and the hook stays until
//! `handle.remove()` (ignoring the handle keeps it, as in PyTorch; `.scoped()` gives a guard
//! that removes it at the end of a scope). Containers that have no forward of their own
//! (`ModuleList`, `ModuleDict`) refuse hooks with an error instead of accepting hooks that
//! would never fire:
//! ```
//! use std::sync::{Arc, Mutex};
//! use nn::prelude::*;
//! use nn::layers::{Linear, ReLU, Sequential};
//!
//! let model = Sequential::new().add(Linear::new(4, 8)).add(ReLU::new()).add(Linear::new(8, 2));
//! let feats = Arc::new(Mutex::new(Vec::new()));
//! for (name, m) in model.named_modules() {
//!     if !m.runs_forward() {
//!         continue; // a container (`ModuleList`): it would refuse the hook
//!     }
//!     let feats = feats.clone();
//!     // The handle is dropped (the hook stays); the `Result` is not: an error is loud.
//!     let _handle = m
//!         .register_forward_hook(move |_, y| {
//!             feats.lock().unwrap().push((name.clone(), y.shape().to_vec()));
//!             None
//!         })
//!         .expect("a module that runs takes hooks");
//! }
//! model.forward(&Tensor::ones(&[5, 4]));
//! let feats = feats.lock().unwrap();
//! assert_eq!(feats[0], ("0".to_string(), vec![5, 8]));
//! assert_eq!(feats.last().unwrap(), &("".to_string(), vec![5, 2])); // the root fires last
//! ```
//!
//! ## Per-parameter gradient hooks (the optimizer step inside backward)
//!
//! ```python
//! for p in model.parameters():
//!     p.register_post_accumulate_grad_hook(lambda p: (p.data.add_(p.grad, alpha=-0.1), setattr(p, "grad", None)))
//! ```
//! The hook runs once per backward pass, when the parameter's gradient is complete (a
//! parameter used twice gets one call); an update made there frees each gradient as soon as
//! it is used. Data-parallel training (`nn-distributed`) starts its gradient all-reduces from
//! the same hook. Values that backward still needs are not disturbed: an in-place update
//! copies a buffer that backward still reads before writing it.
//! ```
//! use nn::prelude::*;
//! use nn::layers::{Linear, Sequential};
//!
//! let model = Sequential::new().add(Linear::new(3, 4)).add(Linear::new(4, 1));
//! let before: Vec<Vec<f32>> = model.parameters().iter().map(|p| p.to_vec()).collect();
//! for p in model.parameters() {
//!     p.register_post_accumulate_grad_hook(|p| {
//!         let g = p.grad().expect("the hook runs after accumulation");
//!         nn::no_grad(|| p.add_(&(g * -0.1)));
//!         p.set_grad(None);
//!     });
//! }
//! model.forward(&Tensor::ones(&[2, 3])).sum().backward(); // updates every parameter
//! for (p, old) in model.parameters().iter().zip(&before) {
//!     assert!(p.grad().is_none() && p.to_vec() != *old);
//! }
//! ```
//!
//! ## Gradient hooks on any tensor, and hooks on every module
//!
//! `h.register_hook(lambda g: g.clamp(-1, 1))` is [`Tensor::register_hook`](crate::Tensor::register_hook):
//! it sees the gradient of `h` (a leaf or an op's result) once all of a pass's contributions
//! are summed, and may replace it. `torch.nn.modules.module.register_module_forward_hook`
//! and its siblings are in [`nn::hooks`](crate::hooks): they fire on every module that runs,
//! before its own hooks, until removed (a profiler's view of the whole model):
//! ```
//! use std::sync::{Arc, Mutex};
//! use nn::prelude::*;
//! use nn::layers::{Linear, ReLU, Sequential};
//!
//! let x = Tensor::ones(&[2]).requires_grad_(true);
//! let h = &x * 3.0;
//! h.register_hook(|g| Some(g.clamp(-1.0, 1.0)));
//! (&h * 5.0).sum().backward();
//! assert_eq!(x.grad().unwrap().to_vec(), [3.0, 3.0]); // 1 (clipped from 5) * 3
//!
//! let model = Sequential::new().add(Linear::new(4, 8)).add(ReLU::new());
//! let seen = Arc::new(Mutex::new(Vec::new()));
//! let log = seen.clone();
//! let handle = nn::hooks::register_module_forward_hook(move |m, _, y| {
//!     log.lock().unwrap().push((m.type_name(), y.shape().to_vec()));
//!     None
//! });
//! model.forward(&Tensor::ones(&[1, 4]));
//! handle.remove();
//! let seen = seen.lock().unwrap();
//! assert!(seen.contains(&("Linear", vec![1, 8])) && seen.contains(&("Sequential", vec![1, 8])));
//! ```
//!
//! `register_full_backward_pre_hook(hook)` (the gradient arriving at the module's output,
//! replaceable before its backward runs) is [`Hooks::register_full_backward_pre_hook`](crate::Hooks::register_full_backward_pre_hook),
//! and `prepend=True` is a [`HookConfig`](crate::module::HookConfig) given to the `_with`
//! forms on the module's base (`m.hook_base()?.register_forward_hook_with(HookConfig::prepend(), ..)`).
//! `always_call=True` is [`Hooks::register_forward_hook_always_call`](crate::Hooks::register_forward_hook_always_call),
//! whose hook gets the output as an `Option`: `None` when the forward panicked (the panic
//! then goes on to the caller, as PyTorch re-raises).
//!
//! ## Hooks that see every tensor: `hook(module, args, output)`
//!
//! PyTorch's hooks get the module and the whole `args` tuple and output; nn's one-tensor
//! forms above get the primary tensor only. The `_tensors` forms get a
//! [`HookCall`](crate::HookCall) (the module, its type name, and its path from the
//! outermost running module, PyTorch's `named_modules` name) and every tensor *slot*
//! ([`ModuleIo::tensors`](crate::ModuleIo::tensors)): the elements of a tuple, the fields
//! of an input struct (`AttentionInput`: query, key, value, key_padding_mask, attn_mask),
//! `None` for an absent optional tensor. A hook returns `None` (keep) or every slot, each
//! kept or replaced:
//!
//! ```python
//! def pre(module, args):           # args = (p, y)
//!     return (args[0], 2 * args[1])
//! mix.register_forward_pre_hook(pre)
//! def bwd(module, grad_input, grad_output):
//!     return (grad_input[0] / 2,) + grad_input[1:]
//! mix.register_full_backward_hook(bwd)
//! ```
//! ```
//! use nn::prelude::*;
//! use nn::HookConfig;
//!
//! #[derive(Module)]
//! struct Mix { #[base] base: ModuleBase }
//! impl Compute for Mix {
//!     type Input = (Tensor, Tensor);
//!     type Output = Tensor;
//!     fn compute(&self, (p, y): &(Tensor, Tensor)) -> Tensor { p * y }
//! }
//! let mix = Mix { base: ModuleBase::new() };
//! mix.register_forward_pre_hook_tensors(HookConfig::default(), |_call, args| {
//!     Some(vec![args[0].clone(), args[1].as_ref().map(|y| y * 2.0)])
//! }).unwrap();
//! mix.register_full_backward_hook_tensors(HookConfig::default(), |_call, grad_input, _grad_output| {
//!     // grad_input[1] is zeros: `y` does not require grad (PyTorch materializes them too).
//!     Some(vec![grad_input[0].as_ref().map(|g| g * 0.5), grad_input[1].clone()])
//! }).unwrap();
//! let p = Tensor::ones(&[2]).requires_grad_(true);
//! let out = mix.forward((&p, &Tensor::full(&[2], 3.0)));
//! assert_eq!(out.to_vec(), [6.0, 6.0]);
//! out.sum().backward();
//! assert_eq!(p.grad().unwrap().to_vec(), [3.0, 3.0]); // 6 halved
//! ```
//!
//! In backward, as PyTorch: a `grad_output` slot is `None` where no gradient reached that
//! output; a `grad_input` slot is zeros for a tensor input no gradient reached and `None`
//! for an absent one; with no input that requires grad the hook fires as the output
//! gradients arrive, with every `grad_input` `None`. The global forms are
//! `nn::hooks::register_module_forward_pre_hook_tensors`, `register_module_forward_hook_tensors`,
//! `register_module_full_backward_hook_tensors` and `register_module_full_backward_pre_hook_tensors`;
//! `always_call=True` is `HookConfig::always_call()` (the hook sees `call.panicked()` and no
//! output slots). An input struct of one's own lists its slots with `#[derive(ModuleIo)]`
//! and `#[io(primary)]` on its first tensor; a type of one's own inside a tuple input
//! implements [`IoTensors`](crate::module::IoTensors), or the module does not compile.
//! The call order (pre-hooks, global before a module's own; `prepend`; backward pre-hooks
//! and hooks per module) is PyTorch's, pinned by a fixture PyTorch recorded
//! (`tests/fixtures/pytorch/hook_order.py`).
//!
//! ## Activation checkpointing: `torch.utils.checkpoint`
//!
//! ```python
//! for block in self.blocks:
//!     x = checkpoint(block, x, use_reentrant=False)
//! ```
//! [`checkpoint`](crate::grad_checkpoint::checkpoint) keeps only what the block reads and
//! runs it again in backward (the generator and autocast state restored, so dropout draws
//! the same mask; gradients bit-identical). The closure is kept until backward, so it owns
//! what it uses: hold checkpointed blocks as `Arc<Block>` (a module with `Block`'s names and
//! state) and clone the handle in. As in PyTorch, forward hooks fire again on the
//! recomputation.
//! ```
//! use std::sync::Arc;
//! use nn::grad_checkpoint::checkpoint;
//! use nn::prelude::*;
//! use nn::layers::{Linear, ModuleList};
//!
//! #[derive(Module)]
//! struct Net {
//!     #[module] blocks: ModuleList<Arc<Linear>>,
//!     #[base] base: ModuleBase,
//! }
//! impl Compute for Net {
//!     type Input = Tensor;
//!     type Output = Tensor;
//!     fn compute(&self, x: &Tensor) -> Tensor {
//!         let mut h = x.clone();
//!         for block in &self.blocks {
//!             let (block, input) = (block.clone(), h.clone());
//!             h = checkpoint(move || block.forward(&input).tanh());
//!         }
//!         h
//!     }
//! }
//! let net = Net { blocks: (0..3).map(|_| Arc::new(Linear::new(4, 4))).collect(), base: ModuleBase::new() };
//! assert_eq!(net.state_dict().keys().next(), Some("blocks.0.weight")); // names as without `Arc`
//! net.forward(&Tensor::randn(&[2, 4])).sum().backward();
//! assert!(net.blocks[0].weight.grad().is_some());
//! ```
//!
//! Selective activation checkpointing (PyTorch's `context_fn=partial(
//! create_selective_checkpoint_contexts, [aten.mm, ...])`) is
//! [`checkpoint_with`](crate::grad_checkpoint::checkpoint_with) and a
//! [`CheckpointPolicy`](crate::grad_checkpoint::CheckpointPolicy): the outputs of the ops it
//! names are kept from the first run, and the recomputation takes them instead of running
//! those ops again (the elementwise ops around them are recomputed). A policy naming an op
//! whose output cannot be kept is refused, rather than quietly recomputed.
//! ```
//! use nn::grad_checkpoint::{checkpoint_with, CheckpointPolicy};
//! use nn::Tensor;
//!
//! let w = Tensor::randn(&[4, 4]).requires_grad_(true);
//! let (wc, x) = (w.clone(), Tensor::randn(&[2, 4]));
//! let y = checkpoint_with(CheckpointPolicy::save_matmuls_and_attention(), move || x.matmul(&wc).gelu());
//! y.sum().backward();
//! assert!(w.grad().is_some());
//! ```
//!
//! ## Freezing, parameter groups, layer-wise learning rates
//!
//! `for p in model.encoder.parameters(): p.requires_grad = False`, and
//! `optim.SGD([{"params": encoder.parameters(), "lr": 1e-4}, {"params": head.parameters()}], lr=1e-2)`.
//! Optimizer state is keyed by name, so each group keeps the full dotted names:
//! ```
//! use nn::prelude::*;
//! use nn::layers::{Linear, Sequential};
//! use nn::optim::{Optimizer, ParamGroup, Sgd, SgdConfig};
//!
//! let model = Sequential::new().add_named("encoder", Linear::new(4, 4)).add_named("head", Linear::new(4, 2));
//! model.get_submodule("encoder").unwrap().requires_grad_(false); // any subtree
//! assert_eq!(model.num_trainable_parameters(), 4 * 2 + 2);
//! model.get_submodule("encoder").unwrap().requires_grad_(true);
//!
//! // Groups from sub-modules keep full names with `with_prefix`; the same parameter in two
//! // groups, or two parameters under one name, is refused at construction.
//! let part = |path: &str| model.get_submodule(path).unwrap().named_parameters();
//! let mut opt = Sgd::new(
//!     vec![
//!         ParamGroup::with_prefix("encoder", part("encoder")).lr(1e-4),
//!         ParamGroup::with_prefix("head", part("head")),
//!     ],
//!     SgdConfig { lr: 1e-2, momentum: 0.9, ..Default::default() },
//! );
//! model.forward(&Tensor::ones(&[1, 4])).sum().backward();
//! opt.step();
//! let state = opt.state_dict();
//! assert_eq!(state.tensors.len(), 4); // one momentum buffer per parameter, under full names
//! assert!(state.tensors.get("encoder.weight.momentum_buffer").is_some());
//! let clash = Sgd::try_new(
//!     vec![ParamGroup::new(part("encoder")), ParamGroup::new(part("head"))], // both say "weight"
//!     SgdConfig::default(),
//! );
//! assert!(clash.is_err());
//! assert_eq!((opt.group_lr(0), opt.group_lr(1)), (1e-4, 1e-2));
//! ```
//!
//! ## Optimizer and scheduler state
//!
//! `optimizer.load_state_dict(sd)` restores the buffers and each group's hyper-parameters
//! (`sd["param_groups"]`); schedulers chain (`LinearLR` then `CosineAnnealingLR`, both
//! stepped) and start from the group's `initial_lr`; a scheduler's `state_dict` holds its
//! hyper-parameters (`step_size`, `T_max`, ...) and `load_state_dict` restores them. nn
//! does the same: the states' `hyper_params` hold PyTorch's names, an Adam state is refused
//! by an AdamW, and a `StepLR`'s state by a `CosineAnnealingLR` (PyTorch would load it and
//! run the cosine from the step schedule's step count).
//! ```
//! use nn::optim::{CosineAnnealingLR, LinearLR, LrScheduler, Optimizer, Sgd, SgdConfig};
//! use nn::{Parameter, Tensor};
//!
//! let w = || vec![("w".to_string(), Parameter::new(Tensor::ones(&[2])))];
//! let mut opt = Sgd::new(w(), SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() });
//! let mut warmup = LinearLR::new(&mut opt, 0.1, 1.0, 5);
//! let mut cosine = CosineAnnealingLR::new(&mut opt, 100, 0.0);
//! assert_eq!(cosine.state().base_lrs, [0.1]); // the group's initial_lr, not the warmed-down 0.01
//! warmup.step(&mut opt);
//! cosine.step(&mut opt);
//! let state = opt.state_dict();
//! assert_eq!((state.hyper_params[0]["momentum"], state.hyper_params[0]["initial_lr"]), (0.9, 0.1));
//!
//! let mut resumed = Sgd::new(w(), SgdConfig { lr: 0.1, ..Default::default() }); // momentum 0 here
//! resumed.load_state_dict(&state).unwrap();
//! assert_eq!(resumed.state_dict().hyper_params[0]["momentum"], 0.9); // the state's, as PyTorch
//! assert_eq!(resumed.group_lr(0), opt.group_lr(0));
//!
//! let mut restarted = CosineAnnealingLR::new(&mut resumed, 50, 0.0); // another T_max
//! restarted.load_state(cosine.state(), &mut resumed).unwrap();
//! assert_eq!(restarted.state().hyper_params["T_max"], 100.0); // the state's, as PyTorch
//! assert!(warmup.load_state(cosine.state(), &mut resumed).is_err()); // another kind
//! ```
//!
//! ## Checkpoint extras: the training loop's own values
//!
//! `torch.save({"model": ..., "config": config, "iter_num": i, "best_val_loss": l})` keeps
//! whatever the loop wants back; a [`Checkpoint`](crate::checkpoint::Checkpoint)'s `extra`
//! holds [`Extra`](crate::checkpoint::Extra) values, JSON's kinds (strings, integers,
//! booleans, floats, lists, nested maps), read back exactly. A NaN or infinite float (a
//! diverged loss) is refused at save, by its path, rather than written as `null`:
//! ```
//! use nn::checkpoint::{Checkpoint, Extra};
//! use nn::StateDict;
//!
//! let mut ck = Checkpoint::new(StateDict::default(), None, None, 0, 5000);
//! ck.extra.insert("config".into(), Extra::map([("n_layer", Extra::from(6)), ("dataset", "austen".into())]));
//! ck.extra.insert("best_val_loss".into(), 1.47.into());
//! let path = std::env::temp_dir().join(format!("nn-extras-{}.safetensors", std::process::id()));
//! ck.save(&path).unwrap();
//! let back = Checkpoint::load(&path).unwrap();
//! assert_eq!(back.extra["config"].get("n_layer").and_then(Extra::as_i64), Some(6));
//! assert_eq!(back.extra["best_val_loss"].as_f64(), Some(1.47));
//! # std::fs::remove_file(&path).unwrap();
//! ```
//!
//! ## Surgery: look-ups, typed access, replacing a sub-module
//!
//! `model.get_submodule("encoder.fc")`, `isinstance` + attribute access, and
//! `model.set_submodule("head", nn.Linear(4, 3))`:
//! ```
//! use nn::prelude::*;
//! use nn::layers::{Linear, ReLU, Sequential};
//!
//! #[derive(Module)]
//! struct Net {
//!     #[module] body: Sequential,
//!     #[module] head: Linear,
//! }
//! let mut net = Net { body: Sequential::new().add(Linear::new(4, 4)).add(ReLU::new()), head: Linear::new(4, 2) };
//! // Typed access: no downcast at the call site, a clear error for the wrong type.
//! assert_eq!(net.get_submodule_as::<Linear>("body.0").unwrap().out_features(), 4);
//! assert!(net.get_submodule_as::<Linear>("body.1").is_err());
//! // Replace the head (a typed slot takes its own type) and a `Sequential` item (any layer, boxed).
//! net.set_submodule("head", Linear::new(4, 3)).unwrap();
//! net.set_submodule("body.1", Box::new(nn::layers::Tanh::new()) as Box<dyn Layer>).unwrap();
//! assert_eq!(net.head.out_features(), 3);
//! assert_eq!(net.get_submodule("body.1").unwrap().type_name(), "Tanh");
//! // A module that does not fit the slot is an error; nothing changes.
//! assert!(net.set_submodule("head", ReLU::new()).is_err());
//! // Mutable access by path.
//! net.get_submodule_mut("body").unwrap().eval();
//! assert!(!net.body.is_training());
//! ```
//!
//! ## Several inputs
//!
//! `def forward(self, x, mask=None)`: the input is a tuple or a struct; hooks see the first
//! tensor. The attention layers take their masks this way:
//! ```
//! use nn::prelude::*;
//! use nn::layers::{AttentionInput, MultiheadAttention};
//!
//! let mha = MultiheadAttention::new(8, 2);                       // sequence-first, like PyTorch
//! let (q, kv) = (Tensor::randn(&[5, 3, 8]), Tensor::randn(&[7, 3, 8]));
//! let pad = Tensor::from_vec_bool(vec![false; 21], &[3, 7]);
//! let (y, w) = mha.forward(&AttentionInput::new(&q, &kv, &kv).key_padding_mask(&pad));
//! assert_eq!((y.shape(), w.unwrap().shape()), (&[5, 3, 8][..], &[3, 5, 7][..]));
//! ```
//!
//!
//! Tuples move in owned or by reference: `bilinear.forward((x1, x2))` and
//! `bilinear.forward((&x1, &x2))` are the same call.
//! ```
//! use nn::prelude::*;
//! use nn::layers::Bilinear;
//!
//! let bl = Bilinear::new(3, 4, 2);
//! let (x1, x2) = (Tensor::randn(&[5, 3]), Tensor::randn(&[5, 4]));
//! let by_ref = bl.forward((&x1, &x2));
//! assert_eq!(bl.forward((x1, x2)).to_vec(), by_ref.to_vec());
//! ```
//!
//! ## Attention masks: two kinds, with PyTorch's polarity
//!
//! As in PyTorch, a mask is either **bool** or **float** (of the query's dtype, added to the
//! scores); the polarity of a bool mask depends on the argument, exactly as in PyTorch:
//!
//! | argument | bool `true` means | float |
//! |---|---|---|
//! | `scaled_dot_product_attention`'s `attn_mask` | **may attend** | added (`-inf` = masked) |
//! | `MultiheadAttention`'s `key_padding_mask` (and the Transformer layers' `*_key_padding_mask`) | **ignore** this key | added |
//! | `MultiheadAttention`'s `attn_mask` (and `src_mask`, `tgt_mask`, `memory_mask`) | **may not attend** | added |
//!
//! Any other dtype is refused. Hugging Face's `attention_mask` is i64 with **1 = attend**:
//! cast to float and added it would mask nothing, read as a bool padding mask it would
//! mask the wrong positions, so nn refuses it and says which two kinds it takes. Build the
//! bool mask that states what you mean:
//! ```
//! use nn::prelude::*;
//! use nn::layers::{AttentionInput, MultiheadAttention};
//!
//! let mha = MultiheadAttention::with_options(8, 2, 0.0, true, true); // batch_first
//! let x = Tensor::randn(&[2, 3, 8]);
//! let hf_mask = Tensor::from_vec_i64(vec![1, 1, 0, 1, 1, 1], &[2, 3]); // 1 = attend
//! let refused = std::panic::catch_unwind(|| mha.forward(&AttentionInput::self_attention(&x).key_padding_mask(&hf_mask)));
//! let msg = refused.unwrap_err().downcast::<String>().unwrap();
//! assert!(msg.contains("key_padding_mask of shape [2, 3] has dtype i64; only bool and floating-point masks"), "{msg}");
//! let padding = hf_mask.eq(&Tensor::from_vec_i64(vec![0], &[])); // true = padding = ignore
//! let (y, _) = mha.forward(&AttentionInput::self_attention(&x).key_padding_mask(&padding));
//! assert_eq!(y.shape(), &[2, 3, 8]);
//! ```
//! A query row whose every key is masked gives what PyTorch 2.15 gives: zeros from
//! `scaled_dot_product_attention` (and from `MultiheadAttention` without weights, which
//! runs through it), NaN from `MultiheadAttention` when the weights are returned.
//!
//! ## Tied weights
//!
//! `self.lm_head.weight = self.transformer.wte.weight` is a clone of the `Parameter`
//! handle: one parameter held by two modules. As in PyTorch, `named_parameters()` lists it
//! once (under its first name), the optimizer steps it once and the gradients of both uses
//! add up. A saved file holds it once, under its first name, as Hugging Face's GPT-2 file
//! does; strict loading accepts a file holding any one of its names, or several with
//! equal values (different values are an error naming both, and nothing changes); the tie
//! survives loading, `to_device`, `to_dtype` and a checkpoint resume.
//! ```
//! use nn::prelude::*;
//! use nn::layers::{Embedding, Linear};
//!
//! #[derive(Module)]
//! struct Lm { #[module] wte: Embedding, #[module] lm_head: Linear }
//!
//! let wte = Embedding::new(10, 4);
//! let mut lm_head = Linear::with_bias(4, 10, false);
//! lm_head.weight = wte.weight.clone(); // tie
//! let mut lm = Lm { wte, lm_head };
//! assert_eq!(lm.named_parameters().len(), 1);
//!
//! let mut hf_file = nn::StateDict::default(); // as transformers saves GPT-2: one name
//! hf_file.insert("wte.weight".to_string(), Tensor::ones(&[10, 4]));
//! lm.load_state_dict(&hf_file, true).unwrap();
//! assert_eq!(lm.lm_head.weight.to_vec(), vec![1.0; 40]);
//! assert_eq!(lm.lm_head.weight.id(), lm.wte.weight.id()); // still tied
//! ```
//!
//! ## Copies: `copy.deepcopy(model)`
//!
//! | PyTorch | nn |
//! |---|---|
//! | `target = copy.deepcopy(online)` | `let target = online.deep_copy();` |
//! | (a shallow copy that shares the weights) | not available: modules are not `Clone` |
//!
//! `deep_copy` gives new parameters and buffers with equal values, dtypes, devices and
//! `requires_grad`, keeps the training flag, and keeps ties *inside* the copied model as
//! ties (GPT-2's head stays its embedding). Two differences from `deepcopy`: gradients are
//! not copied, and neither are hooks (a hook may hold handles to the original's state, and
//! no handle could remove a copied one): register the copy's hooks on the copy. A module
//! that derives `Clone` does not compile: its clone would hold the original's `Parameter`
//! handles, so "training the copy" would train the original. An EMA target network:
//! ```
//! use nn::prelude::*;
//! use nn::layers::{Linear, ReLU, Sequential};
//! use nn::optim::{Optimizer, Sgd, SgdConfig};
//!
//! let online = Sequential::new().add(Linear::new(3, 8)).add(ReLU::new()).add(Linear::new(8, 1));
//! let target = online.deep_copy();
//! target.requires_grad_(false);
//! let mut opt = Sgd::new(online.parameters(), SgdConfig { lr: 0.1, ..Default::default() });
//! let x = Tensor::randn(&[16, 3]);
//! opt.zero_grad();
//! online.forward(&x).square().mean().backward();
//! opt.step();
//! nn::no_grad(|| {
//!     // target = 0.99 target + 0.01 online, as `torch._foreach_lerp_` or a loop over
//!     // `zip(target.parameters(), online.parameters())`.
//!     for (t, o) in target.parameters().iter().zip(online.parameters()) {
//!         t.mul_(0.99).add_(&(&*o * 0.01));
//!     }
//! });
//! assert_ne!(target.state_dict().get("0.weight").unwrap().to_vec(), online.state_dict().get("0.weight").unwrap().to_vec());
//! ```
//!
//! ## Names that are Rust keywords: `rename`
//!
//! BERT's keys run through `attention.self.query.weight`, and `self` (like `type`) cannot
//! be a field name. Name the field anything and give it the key's name with
//! `#[module(rename = "self")]` (`#[param(rename = ...)]` and `#[buffer(rename = ...)]`
//! too); strict loading then takes the checkpoint's keys unchanged. A load error whose key
//! differs only by such a word names the attribute to write. A class name that is not a
//! Rust type name prints as transformers' with `#[module(name = "GPT2LMHeadModel")]` on
//! the struct `Gpt2LMHeadModel`.
//! ```
//! use nn::prelude::*;
//! use nn::layers::Linear;
//!
//! #[derive(Module)]
//! struct BertSelfAttention { #[module] query: Linear }
//! #[derive(Module)]
//! struct BertAttention {
//!     #[module(rename = "self")] self_attn: BertSelfAttention,
//! }
//!
//! let a = BertAttention { self_attn: BertSelfAttention { query: Linear::new(4, 4) } };
//! assert_eq!(a.state_dict().keys().next(), Some("self.query.weight"));
//! ```
//!
//! ## State dicts, `strict=False`, saving
//!
//! `torch.save(model.state_dict())` is safetensors here, with PyTorch's key names, so files
//! move both ways. `load_state_dict(sd, strict=False)` reports missing and unexpected keys;
//! a shape mismatch is an error either way, and on any error the model is unchanged:
//! ```
//! use nn::prelude::*;
//! use nn::layers::Linear;
//! use nn::StateDict;
//!
//! let mut lin = Linear::new(3, 2);
//! let mut sd = StateDict::default();
//! sd.insert("weight".to_string(), Tensor::ones(&[2, 3]));
//! sd.insert("extra".to_string(), Tensor::ones(&[1]));
//! let report = lin.load_state_dict(&sd, false).unwrap();
//! assert_eq!((report.missing_keys, report.unexpected_keys), (vec!["bias".to_string()], vec!["extra".to_string()]));
//! assert!(lin.load_state_dict(&sd, true).is_err()); // strict
//!
//! let dir = std::env::temp_dir().join(format!("nn-from-pytorch-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! lin.save(dir.join("lin.safetensors")).unwrap();        // atomic write
//! let mut other = Linear::new(3, 2);
//! other.load(dir.join("lin.safetensors")).unwrap();      // strict load
//! assert_eq!(other.weight.to_vec(), vec![1.0; 6]);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```
//!
//! A state dict saved from a `torch.compile`d model has `_orig_mod.` before every key (one
//! from DDP, `module.`): the load error says so in one line, and
//! [`StateDict::strip_prefix`](crate::StateDict::strip_prefix) (PyTorch's
//! `consume_prefix_in_state_dict_if_present`) takes it off;
//! [`add_prefix`](crate::StateDict::add_prefix) is the other way:
//! ```
//! use nn::prelude::*;
//! use nn::layers::Linear;
//!
//! let compiled = Linear::new(3, 2).state_dict().add_prefix("_orig_mod.");
//! let mut lin = Linear::new(3, 2);
//! let e = lin.load_state_dict(&compiled, true).unwrap_err().to_string();
//! assert!(e.contains("every key of the state dict starts with `_orig_mod.`"), "{e}");
//! lin.load_state_dict(&compiled.strip_prefix("_orig_mod.").unwrap(), true).unwrap();
//! ```
//!
//! ## Extra state, versions and state-dict hooks
//!
//! | PyTorch | nn |
//! |---|---|
//! | `get_extra_state` / `set_extra_state` | `#[module(extra_state)]` and `impl ExtraState` (`type State`: any serde type) |
//! | `_version = 2` on the class | `#[module(version = 2)]` |
//! | `register_state_dict_post_hook(hook(module, sd, prefix, meta))` | `register_state_dict_post_hook(\|sd, prefix\| ..)` |
//! | `register_load_state_dict_pre_hook(hook(module, sd, prefix, meta, ...))` with `meta.get("version")` | `register_load_state_dict_pre_hook(\|sd, prefix, version\| ..)` |
//! | `register_load_state_dict_post_hook(hook(module, incompatible_keys))` | `register_load_state_dict_post_hook(\|keys\| ..)` |
//!
//! The extra state is saved under PyTorch's key, `<prefix>._extra_state`, as JSON beside
//! the tensors (a file keeps it in its metadata). A hook returns `Ok(())` or an error that
//! stops the save or load naming its module. Where PyTorch half-loads a model when a post
//! hook or a strict check fails after the assignment, nn runs the post-hooks before it
//! assigns anything, so a refused load changes nothing. PyTorch records version 1 for every
//! module; nn records only declared versions, so a migration reads
//! `version.unwrap_or(1)`:
//! ```
//! use nn::prelude::*;
//! use nn::{ExtraState, StateDict};
//!
//! #[derive(Module)]
//! #[module(version = 2, extra_state)]
//! struct Tok {
//!     #[param]
//!     embed: Parameter,
//!     vocab_size: usize,
//!     #[base]
//!     base: ModuleBase,
//! }
//! impl Compute for Tok {
//!     type Input = Tensor;
//!     type Output = Tensor;
//!     fn compute(&self, ids: &Tensor) -> Tensor { self.embed.tensor().index_select(0, ids) }
//! }
//! impl ExtraState for Tok {
//!     type State = usize;
//!     fn extra_state(&self) -> usize { self.vocab_size }
//!     fn set_extra_state(&mut self, n: usize) { self.vocab_size = n }
//! }
//!
//! let mut tok = Tok { embed: Parameter::new(Tensor::zeros(&[4, 2])), vocab_size: 4, base: ModuleBase::new() };
//! // Version 1 called the table `table`.
//! tok.register_load_state_dict_pre_hook(|sd, prefix, version| {
//!     if version.unwrap_or(1) < 2 {
//!         let t = sd.remove(&format!("{prefix}table")).ok_or("a version-1 file without `table`")?;
//!         sd.insert(format!("{prefix}embed"), t);
//!     }
//!     Ok(())
//! })?;
//! let mut old = StateDict::new();
//! old.insert("table".to_string(), Tensor::ones(&[4, 2]));
//! old.insert_extra_state("_extra_state".to_string(), serde_json::json!(4));
//! tok.load_state_dict(&old, true)?;
//! assert_eq!(tok.embed.tensor().sum().item(), 8.0);
//! assert_eq!(tok.state_dict().version(""), Some(2));
//! # Ok::<(), nn::Error>(())
//! ```
//!
//! ## `torch.load`: PyTorch's own files
//!
//! A `.pt`, `.pth` or `pytorch_model.bin` that `torch.save(model.state_dict())` wrote reads
//! without Python: [`StateDict::load_pytorch`](crate::StateDict::load_pytorch) is
//! `torch.load(path, weights_only=True, map_location="cpu")` for state dicts. Its unpickler
//! runs no code: the tensor-rebuild globals are interpreted, and any other global (a
//! pickled class, `os.system`, `eval`) is an error naming it. Tensors keep their dtype, and
//! tied weights (one storage under two names) load as one tensor:
//! ```no_run
//! use nn::prelude::*;
//! use nn::layers::Linear;
//! use nn::StateDict;
//!
//! // Python: torch.save(torch.nn.Linear(3, 2).state_dict(), "lin.pt")
//! let sd = StateDict::load_pytorch("lin.pt")?;
//! let mut lin = Linear::new(3, 2);
//! lin.load_state_dict(&sd, true)?;
//! # Ok::<(), nn::Error>(())
//! ```
//! A whole training checkpoint (`torch.save({"model": ..., "epoch": 3})`) is refused,
//! naming the entry that is not a tensor: save `model.state_dict()` alone, or as
//! safetensors. nn-models' `from_pretrained(dir)` reads `pytorch_model.bin` and sharded
//! checkpoints (`*.index.json`) the same way.
//!
//! ## The meta device
//!
//! `with torch.device("meta"): model = Big()` builds without allocating; loading a state
//! dict materialises it (`assign=True`):
//! ```
//! use nn::prelude::*;
//! use nn::layers::Linear;
//!
//! let big = nn::with_device(Device::Meta, || Linear::new(100_000, 100_000));
//! assert_eq!(big.num_parameters(), 100_000 * 100_000 + 100_000); // no 40 GB allocated
//! assert_eq!(big.weight.device(), Device::Meta);
//!
//! let mut small = nn::with_device(Device::Meta, || Linear::new(2, 2));
//! small.load_state_dict(&Linear::new(2, 2).state_dict(), true).unwrap();
//! assert_eq!(small.weight.device(), Device::Cpu);
//! ```
//!
//! A loaded model is in training mode, as a freshly built one is (PyTorch's default too):
//! dropout is on, so call `eval()` before comparing its outputs with another model's.
//!
//! `load_state_dict` gives a meta entry the module's dtype. PyTorch's
//! `load_state_dict(sd, assign=True)`, which takes the file's tensors as they are (dtype
//! included) for every entry, meta or not, is `load_state_dict_with` (no values are copied;
//! the buffers are shared copy-on-write, so the model and the state dict never change each
//! other's values, where PyTorch's would):
//! ```
//! use nn::prelude::*;
//! use nn::layers::Linear;
//! use nn::module::ModuleExt;
//! use nn::LoadStateDictConfig;
//!
//! let mut sd = Linear::new(2, 2).state_dict();
//! let bf16: Vec<(String, Tensor)> = sd.iter().map(|(k, t)| (k.to_string(), t.to_dtype(DType::BF16))).collect();
//! for (k, t) in bf16 {
//!     sd.insert(k, t);
//! }
//! let mut m = nn::with_device(Device::Meta, || Linear::new(2, 2));
//! m.load_state_dict_with(&sd, LoadStateDictConfig { strict: true, assign: true }).unwrap();
//! assert_eq!(m.weight.dtype(), DType::BF16);
//! ```
//!
//! ## `reset_parameters()`
//!
//! Every layer with parameters implements [`ResetParameters`](crate::layers::ResetParameters):
//! the same parameters drawn again in place from the layer's init (PyTorch's
//! distributions, checked against them), running statistics reset; a whole model as
//! PyTorch's `model.apply(lambda m: m.reset_parameters() if hasattr(...))`:
//! ```
//! use nn::prelude::*;
//! use nn::layers::{Linear, ResetParameters};
//!
//! #[derive(Module)]
//! struct Net { #[module] a: Linear, #[module] b: Linear }
//! let mut net = Net { a: Linear::new(4, 4), b: Linear::new(4, 1) };
//! let before = net.a.weight.to_vec();
//! net.apply(&mut |m| {
//!     if let Some(l) = m.as_any_mut().downcast_mut::<Linear>() {
//!         l.reset_parameters();
//!     }
//! });
//! assert_ne!(net.a.weight.to_vec(), before);
//! ```
//!
//! ## Parametrizations: `weight_norm`, `spectral_norm`, `orthogonal`
//!
//! PyTorch's `torch.nn.utils.parametrize` and `torch.nn.utils.parametrizations` are
//! [`crate::layers::parametrize`] and [`crate::layers::parametrizations`], with PyTorch's
//! state-dict keys, so checkpoints of parametrized models move both ways:
//!
//! | PyTorch | nn |
//! |---|---|
//! | `m = weight_norm(nn.Linear(4, 3))` | `let m = weight_norm(Linear::new(4, 3), "weight", Some(0))?` |
//! | `spectral_norm(conv)` | `spectral_norm(conv, "weight", SpectralNormConfig::default())?` |
//! | `orthogonal(lin, orthogonal_map="householder")` | `orthogonal(lin, "weight", OrthogonalMap::Householder)?` |
//! | `register_parametrization(m, "weight", P())` | `register_parametrization(&mut m, "weight", P)?` |
//! | `m.weight` (computed) | `m.weight.value()` |
//! | `m.weight = X` | `parametrize::assign(&mut m, "weight", &x)?` |
//! | `with parametrize.cached():` | `parametrize::cached(\|\| ...)` |
//! | `remove_parametrizations(m, "weight")` | `remove_parametrizations(&mut m, "weight", true)?` |
//!
//! One difference is loud by design: a parametrized parameter has no tensor to lend, so
//! reading it directly (`&*m.weight`, `m.weight.shape()`) panics naming it and saying to read
//! `value()`. PyTorch's property makes every read compute; in Rust a layer that read its
//! weight directly would skip the parametrization silently. nn's linear, convolution and
//! embedding layers read through `value()`; a layer of your own that should accept
//! parametrizations does the same (`parametrize::optional_value(&self.bias)` for an optional
//! one).
//! ```
//! use nn::prelude::*;
//! use nn::layers::parametrizations::weight_norm;
//! use nn::layers::Linear;
//!
//! let m = weight_norm(Linear::new(4, 3), "weight", Some(0))?;
//! let sd = m.state_dict();
//! let keys: Vec<&str> = sd.keys().collect();
//! assert!(keys.contains(&"parametrizations.weight.original0") && keys.contains(&"parametrizations.weight.original1"));
//! let y = m.forward(&Tensor::ones(&[2, 4]));
//! y.sum().backward(); // the gradient reaches g and v
//! assert!(m.parameters().iter().all(|p| p.grad().is_some()));
//! # Ok::<(), nn::Error>(())
//! ```
//!
//! ## Tensors: `clone()`, `detach()`, views and `.data`
//!
//! ```python
//! w = torch.zeros(3, 2)
//! w[1].fill_(1.0)          # a view writes into w
//! w.detach().add_(2.0)     # so does a detached alias
//! c = w.clone()            # a copy of its own
//! w.data = torch.ones(3, 2)
//! ```
//! Views (`narrow`, `t`, `reshape`, `chunk`, ...) and `detach()` are aliases, as in PyTorch:
//! an in-place update through one is seen by all. PyTorch's `clone()` is
//! [`Tensor::copy`](crate::Tensor::copy); Rust's `clone()` is another handle on the same
//! tensor (a second Python name), and `.data = ` is [`Tensor::set_data`](crate::Tensor::set_data).
//! Two differences, neither silent: a value saved for backward keeps the forward's values
//! when the tensor is written later (PyTorch raises a version-counter error; here the
//! gradient is the forward's), and an in-place update *from* a tensor that requires grad is
//! refused outside `no_grad` (PyTorch records it; nn's in-place ops are not recorded, so
//! its gradient would be lost: write it out of place).
//! ```
//! use nn::prelude::*;
//!
//! let w = Tensor::zeros(&[3, 2]);
//! w.narrow(0, 1, 1).fill_(1.0);
//! w.detach().add_(2.0);
//! let c = w.copy();
//! w.set_data(&Tensor::ones(&[3, 2]));
//! assert_eq!(c.to_vec(), [2.0, 2.0, 3.0, 3.0, 2.0, 2.0]);
//!
//! let p = Parameter::new(Tensor::ones(&[2]));
//! let acc = Tensor::zeros(&[2]);
//! let refused = std::panic::catch_unwind(|| { acc.add_(&*p); });
//! let msg = refused.unwrap_err().downcast::<String>().unwrap();
//! assert!(msg.contains("in-place updates are not recorded by autograd, so no gradient would reach it"), "{msg}");
//! let acc = &acc + &*p; // recorded
//! assert!(acc.requires_grad());
//! ```
//!
//! ## Indexing: `x[:, -1, :]`
//!
//! [`Tensor::i`](crate::Tensor::i) takes PyTorch's index kinds, as a tuple: integers (the
//! dimension is dropped; negative from the end), ranges (`1..`, `..-1`, clamped as Python
//! slices are), `..` for `:`, [`Idx::step`](crate::ops::Idx::step) for `::2`,
//! [`NEW_AXIS`](crate::ops::NEW_AXIS) for `None`, [`ELLIPSIS`](crate::ops::ELLIPSIS) for
//! `...`, and an `i64` index tensor. Integers and ranges give views, so assignment is a write
//! through one (`x[:, 0] = 0` is `x.i((.., 0)).fill_(0.0)`); comparisons with a Rust scalar
//! are `eq_scalar`, `lt_scalar`, ... (`bias == 0`):
//! ```
//! use nn::ops::{ELLIPSIS, NEW_AXIS};
//! use nn::prelude::*;
//!
//! let logits = Tensor::randn(&[2, 5, 10]);
//! assert_eq!(logits.i((.., -1, ..)).shape(), &[2, 10]);     // logits[:, -1, :]
//! assert_eq!(logits.i((ELLIPSIS, NEW_AXIS)).shape(), &[2, 5, 10, 1]);
//! let x = Tensor::zeros(&[3, 4]);
//! x.i((.., 0)).fill_(1.0);                                    // x[:, 0] = 1
//! assert_eq!(x.eq_scalar(1).to_dtype(DType::F32).sum().item(), 3.0);
//! ```
//!
//! ## Shapes with `-1`, random integers, threads
//!
//! ```python
//! y = x.view(B, T, -1)                      # one size inferred
//! ix = torch.randint(len(data) - block, (batch,))
//! noise = torch.randn_like(x)
//! torch.set_num_threads(1)
//! ```
//! `reshape` and `view` take a tuple, whose sizes may mix `usize` values with the `-1`
//! literal (or `()`, candle's hole), a `usize` slice or array, or an `&[i64]` slice of
//! ported shape lists; [`Tensor::randint`](crate::Tensor::randint),
//! [`randint_like`](crate::Tensor::randint_like), [`rand_like`](crate::Tensor::rand_like) and
//! [`randn_like`](crate::Tensor::randn_like) draw from the seeded generator
//! ([`manual_seed`](crate::manual_seed)); [`set_num_threads`](crate::set_num_threads) sets
//! the CPU kernels' threads (`RAYON_NUM_THREADS` decides until it is called):
//! ```
//! use nn::prelude::*;
//!
//! let (b, t) = (2, 3);
//! let x = Tensor::zeros(&[b * t, 4, 2]);
//! assert_eq!(x.view((b, t, -1)).shape(), &[2, 3, 8]);
//! assert_eq!(x.reshape((-1, 2)).shape(), &[24, 2]);
//! nn::manual_seed(1337);
//! let ix = Tensor::randint(0, 100, &[4]);
//! assert!(ix.to_vec_i64().iter().all(|i| (0..100).contains(i)));
//! assert_eq!(Tensor::randn_like(&x).shape(), x.shape());
//! nn::set_num_threads(1);
//! assert_eq!(nn::get_num_threads(), 1);
//! ```
//!
//! ## Type promotion: `x * mask`, `ids + 1`, `ids / 2`
//!
//! Elementwise ops on tensors of two dtypes compute in PyTorch's result type
//! ([`result_type`](crate::result_type)): bool < integer < floating, the widest float of
//! the operands, and a 0-dim tensor counts as a wrapped number that can raise the category
//! but not the width (`bf16[3] * f32[]` stays bf16). Integer tensors add, subtract,
//! multiply (wrapping on overflow) and take maxima as PyTorch's; `/` of integers is true
//! division in f32; a Rust `f64` scalar with an integer tensor gives f32, an `i64` scalar
//! keeps an integer tensor integer and a float tensor its dtype.
//!
//! ```python
//! y = x * mask            # float * bool -> float
//! pos = ids + 1           # int64
//! frac = ids / 2          # float32
//! ```
//! ```
//! use nn::{DType, Tensor};
//! let x = Tensor::full(&[3], 2.0);
//! let mask = Tensor::from_vec_bool(vec![true, false, true], &[3]);
//! assert_eq!((&x * &mask).to_vec(), [2.0, 0.0, 2.0]);
//! let ids = Tensor::from_vec_i64(vec![0, 1, 2], &[3]);
//! assert_eq!((&ids + 1).to_vec_of::<i64>(), [1, 2, 3]);
//! let frac = &ids / 2;
//! assert_eq!((frac.dtype(), frac.to_vec()), (DType::F32, vec![0.0, 0.5, 1.0]));
//! assert_eq!((&x * &Tensor::full(&[], 3.0).to_dtype(DType::F64)).dtype(), DType::F32); // 0-dim: no widening
//! ```
//!
//! Not yet: integer floor division and remainder, bitwise ops, and bool arithmetic
//! (`bool + bool`), which are refused naming the dtypes; the matrix products, as
//! PyTorch's, take one dtype.
//!
//! ## PyTorch's own sample matrix (OpInfo), and what nn still lacks
//!
//! `tests/tests/it/opinfo` runs PyTorch 2.15's own behaviour matrix through nn: the
//! `op_db` entries (`torch.testing._internal.common_methods_invocations`) of 129 ops,
//! with their sample inputs, their reference inputs (NaN, infinities, broadcast and
//! non-contiguous operands) in float64 and float32, and their error inputs: 3,321 cases,
//! written by `tests/fixtures/pytorch/opinfo.py` and committed, so the test needs no
//! Python. A sample passes when the outputs, the gradients of `sum(out * cot)` for every
//! floating leaf and the buffers the call updates (batch norm's running statistics) match
//! PyTorch's; an error input passes when nn refuses it with its own message (a Rust index
//! or slice panic counts as a failure). 3,229 pass (97.2%), none fails; the test fails
//! below 97% and prints the rest by reason
//! (`cargo test -p nn-tests --test it -- opinfo --nocapture`; `OPINFO_CASE=<n>` runs one
//! case with its panic shown). PyTorch's keyword arguments map to nn's forms:
//!
//! | PyTorch | nn |
//! |---|---|
//! | `x.amax(dim=(0, 2))`, `x.amin(..)` | `x.amax(&[0, 2], false)`, `x.amin(..)` (ties share the gradient) |
//! | `x.std(dim, correction=c)`, `x.var(.., correction=0.5)` | `x.std_dims(&dims, c, keepdim)`, `x.var_correction(&dims, 0.5, keepdim)` |
//! | `x.any(dim=(0, 1))`, `x.all(..)`, `x.logsumexp((1, 2))` | `x.any_dims(&[0, 1], false)`, `x.all_dims(..)`, `x.logsumexp_dims(&[1, 2], false)` |
//! | `x.argmax()` (no dim) | `x.argmax_flat()` |
//! | `x.masked_fill(mask, torch.tensor(v))` | `x.masked_fill_tensor(&mask, &v)` (differentiable in `v`) |
//! | `F.cross_entropy(x, t, weight=w)`, probability targets | `functional::cross_entropy_weighted(&x, &t, Some(&w), cfg)` (a float `t` holds probabilities) |
//! | `F.nll_loss(.., weight=w)`, `F.binary_cross_entropy_with_logits(.., weight=w)` | `functional::nll_loss_weighted`, `functional::binary_cross_entropy_with_logits_weighted` |
//! | `F.conv2d(x, w, padding="same")`, `"valid"` | `x.conv2d_same(&w, bias, dilation, groups)`; `"valid"` is padding 0 |
//! | `F.avg_pool2d(.., divisor_override=d)` | `x.avg_pool2d_divisor(cfg, d)` |
//! | `F.interpolate(.., mode="bicubic" / "area" / "nearest-exact")` | `InterpolateMode::{Bicubic, Area, NearestExact}` |
//! | `F.max_pool2d(.., return_indices=True)` | `x.max_pool2d_with_indices(cfg)` |
//! | `dtype=` on `sum`, `cumsum`, `softmax`, ... | `x.to_dtype(d).sum()` (PyTorch casts the input first) |
//! | `interpolate(.., recompute_scale_factor=True)` | `InterpolateSize::Size` of `floor(n * s)` |
//!
//! What the 92 unsupported cases need, none of it silently dropped: dtypes nn does not
//! have (`uint8`, `int32`, `float16` operands of `cat`, complex), `out=` and
//! `memory_format=` (no Rust counterpart: results are returned, layouts are nn's), a
//! Python number where nn takes a tensor (`torch.eq(2, x)`, `torch.maximum(x, 2)`,
//! `torch.where(c, x, 0)`: write `x.eq_scalar(2)`, or a 0-d tensor such as
//! `Tensor::full_dtype(&[], 0.0, x.dtype())`),
//! and `repeat_interleave(output_size=)`. nn also accepts on purpose two error inputs
//! PyTorch refuses: `amax`/`amin` of a tensor of more than 64 dims (a limit of PyTorch's
//! kernels, not of the operation). Values nn's types cannot hold (a negative size, a mode
//! string outside PyTorch's set, `padding="same"` with a stride) are error inputs refused
//! before the program runs, and count as refusals. The module matrix (`module_db`) is not
//! in the sweep yet.
//!
//! ## Training mode, `no_grad`, dtype
//!
//! `model.train()`, `model.eval()`, `with torch.no_grad():`, `model.double()`:
//! ```
//! use nn::prelude::*;
//! use nn::layers::{Dropout, Linear, Sequential};
//!
//! let mut m = Sequential::new().add(Linear::new(2, 2)).add(Dropout::new(0.5));
//! m.eval();
//! assert!(!m.is_training());
//! let y = nn::no_grad(|| m.forward(&Tensor::ones(&[1, 2])));
//! assert!(!y.requires_grad());
//! m.to_dtype(DType::F64);
//! assert_eq!(m.parameters()[0].dtype(), DType::F64);
//! ```
//!
//! ## Mistakes PyTorch lets pass: a layer built in `forward`, `.item()` in the graph
//!
//! Two bugs PyTorch runs without a word are reported here, naming the module and the call
//! site ([`crate::module::forward_checks`]):
//!
//! - a `Parameter` created while a forward runs (`nn.Linear(3, 2)(x)` inside `forward`:
//!   fresh random weights each call, held by no optimizer) panics in debug builds and
//!   warns in release builds. Build layers in the constructor, as fields marked
//!   `#[module]`; lazy layers are the one deliberate exception.
//! - a host read (`to_vec`, `item`) of a tensor that requires grad inside a training
//!   forward warns: a tensor rebuilt from those values carries no gradient. Call
//!   `.detach()` first where the value is only logged.
//!
//! ```
//! use nn::prelude::*;
//! use nn::layers::Linear;
//! use nn::module::forward_checks::{with_forward_checks, ForwardChecks, Report};
//!
//! #[derive(Module)]
//! struct Wrong { #[base] base: ModuleBase }
//! impl Compute for Wrong {
//!     type Input = Tensor;
//!     type Output = Tensor;
//!     fn compute(&self, x: &Tensor) -> Tensor { Linear::new(3, 2).forward(x) }
//! }
//! let m = Wrong { base: ModuleBase::new() };
//! let strict = ForwardChecks { new_parameter: Report::Panic, host_read: Report::Panic };
//! let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
//!     with_forward_checks(strict, || m.forward(&Tensor::ones(&[1, 3])))
//! }));
//! assert!(caught.is_err());
//! ```
//!
//! ## Mixed precision: `torch.autocast`
//!
//! PyTorch:
//! ```python
//! with torch.autocast("cpu", dtype=torch.bfloat16):
//!     logits = model(x)                  # linear, matmul, conv, attention: bf16
//!     loss = F.cross_entropy(logits, y)  # losses: f32
//! loss.backward()                        # parameters and their gradients stay f32
//! ```
//! nn: [`amp::autocast`](crate::amp::autocast) (a closure) or
//! [`amp::AutocastGuard`](crate::amp::AutocastGuard) (the guard form), with PyTorch's CPU
//! lists in one table, [`amp::POLICIES`](crate::amp::POLICIES) (with
//! [`amp::CPU_POLICIES`](crate::amp::CPU_POLICIES): reflect and replicate padding in `f32`
//! on the CPU only); `autocast_enabled(..,
//! false, ..)` is `enabled=False`. Elementwise ops promote mixed dtypes inside and
//! outside autocast, as PyTorch's do (see type promotion above). `torch.autocast("cuda")` is
//! `autocast(Device::Gpu(0), ..)`, with PyTorch's CUDA lists
//! ([`amp::GPU_POLICIES`](crate::amp::GPU_POLICIES): softmax, the norms, `exp`, `log`,
//! `pow`, sums, scans and resampling in `f32` there, unlike on the CPU); one GPU scope
//! covers every `gpu:n`, as `"cuda"` covers every CUDA device. As in PyTorch, autocast
//! casts the ops you call, not the parts an op is built from: a `bf16` `mean` stays `bf16`
//! on the GPU though its `sum` is on the `f32` list. Half types compute in `f32` (each op's result rounded once, as PyTorch's CPU
//! kernels) except where a kernel has them natively: `bf16` matrix products on CPUs with
//! AVX512-BF16 (about twice the `f32` rate), `f16` products on GPUs with `SHADER_F16`.
//! `f16` autocast on a CPU without AVX512-FP16 is accepted and computes through `f32`.
//! ```
//! use nn::prelude::*;
//! use nn::amp::autocast;
//! use nn::layers::Linear;
//!
//! let model = Linear::new(4, 3);
//! let (x, y) = (Tensor::randn(&[2, 4]), Tensor::from_vec_i64(vec![0, 2], &[2]));
//! let loss = autocast(Device::Cpu, DType::BF16, || {
//!     let logits = model.forward(&x);
//!     assert_eq!(logits.dtype(), DType::BF16);
//!     nn::functional::cross_entropy(&logits, &y)
//! });
//! assert_eq!(loss.dtype(), DType::F32);
//! loss.backward();
//! assert_eq!(model.weight.grad().unwrap().dtype(), DType::F32);
//! ```
//!
//! ## Loss scaling: `torch.amp.GradScaler`
//!
//! PyTorch:
//! ```python
//! scaler = torch.amp.GradScaler()  # init_scale=2**16, growth_factor=2, backoff_factor=0.5, growth_interval=2000
//! for x, y in loader:
//!     opt.zero_grad()
//!     loss = F.cross_entropy(model(x), y)
//!     scaler.scale(loss).backward()
//!     scaler.unscale_(opt)                      # only to clip (or inspect) the true gradients
//!     nn.utils.clip_grad_norm_(model.parameters(), 1.0)
//!     scaler.step(opt)                          # skipped if a gradient is inf/NaN
//!     scaler.update()
//! torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "scaler": scaler.state_dict()}, path)
//! ```
//! nn: the same calls on [`amp::GradScaler`](crate::amp::GradScaler) (other settings
//! through [`GradScalerConfig`](crate::amp::GradScalerConfig)); `step` says whether it
//! stepped, and the scaler's state goes into the training checkpoint. Calls out of order
//! (`unscale_` twice, `step` twice before `update`) panic with PyTorch's message, where
//! PyTorch raises:
//! ```
//! use nn::prelude::*;
//! use nn::amp::{GradScaler, StepOutcome};
//! use nn::checkpoint::Checkpoint;
//! use nn::layers::{Linear, ReLU, Sequential};
//! use nn::optim::{clip_grad_norm_, Adam, AdamConfig, Optimizer};
//!
//! let model = Sequential::new().add(Linear::new(4, 8)).add(ReLU::new()).add(Linear::new(8, 2));
//! let mut opt = Adam::new(model.named_parameters(), AdamConfig::default());
//! let mut scaler = GradScaler::new();
//! let (x, y) = (Tensor::ones(&[3, 4]), Tensor::from_vec_i64(vec![0, 1, 1], &[3]));
//! for _ in 0..3 {
//!     opt.zero_grad();
//!     let loss = nn::functional::cross_entropy(&model.forward(&x), &y);
//!     scaler.scale(&loss).backward();
//!     scaler.unscale_(&mut opt);
//!     clip_grad_norm_(&model.parameters(), 1.0);
//!     assert_eq!(scaler.step(&mut opt), StepOutcome::Stepped); // `Skipped` on inf/NaN
//!     scaler.update();
//! }
//! assert_eq!(scaler.get_scale(), 65536.0);
//!
//! let ck = Checkpoint::new(model.state_dict(), Some(opt.state_dict()), None, 0, 3).with_scaler(scaler.state_dict());
//! assert_eq!(ck.scaler.unwrap().growth_tracker, 3); // PyTorch's `_growth_tracker`
//! // Resuming: `ck.restore_with_scaler(&mut model, Some(&mut opt), None, &mut scaler)`.
//! ```
