//! `FullyShardedDataParallel`: parameters, gradients and optimizer state sharded over the
//! ranks (ZeRO stage 3), gathered one wrapped unit at a time.
//!
//! See [`FullyShardedDataParallel`] for how it works.
//!
//! The files, each using only those listed before it (no circle):
//! - `config.rs`: [`FsdpConfig`] and [`FsdpStats`], plain data;
//! - `policy.rs`: [`FsdpPolicy`], which sub-modules become units;
//! - `runtime.rs`: the units and their shards, gathering, freeing and reduce-scattering
//!   them during a step (uses `config`);
//! - this file: the wrapper, its accessors and its [`Module`] implementation (uses
//!   `config`, `policy`, `runtime`);
//! - `wrap.rs`: the constructors and their checks, the flat shards and the hooks;
//! - `checkpoint.rs`: full state dicts and sharded checkpoints.

mod checkpoint;
mod config;
mod policy;
mod runtime;
mod wrap;

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use nn_core::module::{HoldsState, SetChild};
use nn_core::{
    is_grad_enabled, Compute, DType, Device, HasBase, HookHandle, Item, Module, ModuleBase, ModuleIo, Name, Parameter,
    Tensor, TensorId,
};

use crate::error::DistError;
use crate::group::ProcessGroup;

pub use config::{FsdpConfig, FsdpStats};
pub use policy::FsdpPolicy;
use runtime::Shared;

/// Between printing an error every rank detects and panicking (which ends the job): the
/// other ranks print it too.
const GRACE: Duration = Duration::from_millis(500);

/// Fully sharded data parallelism (PyTorch's `FullyShardedDataParallel`, ZeRO stage 3):
/// each rank keeps `1 / world_size` of every parameter, of its gradient and of the
/// optimizer state, and gathers a unit's parameters only while the unit runs.
///
/// - **Wrapping** by a [`FsdpPolicy`]: units are sub-modules (of given types, or above a
///   parameter count); each unit's parameters are stored flat and sharded (see the
///   notes [below](#how-it-works) for the whole scheme). Construction checks that every rank holds
///   the same structure (names, shapes, dtypes; [`DistError::Fsdp`] naming the first
///   difference, on every rank), broadcasts rank 0's values and shards them.
/// - **Forward** gathers each unit in a forward pre-hook, prefetching the next one, and
///   frees it in a forward hook; **backward** reduce-scatters each unit's gradients as soon
///   as they are complete, overlapping the rest of backward; the averaged shard gradients
///   are in the shards' `.grad` when backward returns.
/// - **The optimizer** gets [`parameters`](Module::parameters): the shards, one per unit,
///   named `<unit>.flat_param`. [`state_dict`](Module::state_dict) is this rank's *local*
///   state (shards and buffers); [`full_state_dict`](FullyShardedDataParallel::full_state_dict)
///   gathers the model's own state dict (PyTorch's names) on rank 0, and
///   [`load_full_state_dict`](FullyShardedDataParallel::load_full_state_dict) scatters one.
/// - **Sharded checkpoints**: [`save_sharded`](FullyShardedDataParallel::save_sharded) writes
///   one file per rank (shards, buffers, optimizer state, world size, rank and layout);
///   [`load_sharded`](FullyShardedDataParallel::load_sharded) refuses a file from another
///   world size, another rank or another model on every rank, loading nothing.
/// - The wrapped model must keep its parameters: adding, removing or replacing one after
///   wrapping makes the next forward fail on every rank, naming it.
///
/// ```
/// use nn_core::functional::cross_entropy;
/// use nn_core::optim::{AdamW, AdamWConfig, Optimizer};
/// use nn_core::{Device, Forward, Module, Tensor};
/// use nn_distributed::{FsdpPolicy, FullyShardedDataParallel, ProcessGroup};
/// use nn_layers::{Linear, ReLU, Sequential};
///
/// let group = ProcessGroup::init()?;
/// let model = Sequential::new().add(Linear::new(4, 8)).add(ReLU::new()).add(Linear::new(8, 3));
/// let fsdp = FullyShardedDataParallel::new(model, &group, FsdpPolicy::new().module_type::<Linear>())?;
/// assert_eq!(fsdp.unit_paths(), ["", "0", "2"]);
/// // The optimizer steps the shards; the model's own parameters hold no values meanwhile.
/// let mut opt = AdamW::new(fsdp.named_parameters(), AdamWConfig::default());
/// assert!(fsdp.module().parameters().iter().all(|p| p.device() == Device::Meta));
/// let (x, y) = (Tensor::randn(&[6, 4]), Tensor::from_vec_i64(vec![0, 1, 2, 0, 1, 2], &[6]));
/// opt.zero_grad();
/// cross_entropy(&fsdp.forward(&x), &y).backward();
/// opt.step();
/// let full = fsdp.full_state_dict(); // a collective: Some on rank 0
/// if group.rank() == 0 {
///     assert_eq!(full.unwrap().keys().collect::<Vec<_>>(), ["0.weight", "0.bias", "2.weight", "2.bias"]);
/// }
/// # Ok::<(), nn_distributed::DistError>(())
/// ```
///
/// # How it works
///
/// A [`FsdpPolicy`] picks *units* among the model's sub-modules; the model itself is the
/// root unit, which holds every parameter no other unit holds. Each unit's own parameters
/// are laid out end to end in one flat vector (registration order), padded with zeros to a
/// multiple of the world size; rank `r` keeps block `r` of it as a [`Parameter`] of its
/// own, the *shard*, which the optimizer updates. The module's parameters keep their
/// identity (the model tree, hooks and autograd see the same [`Parameter`]s) but not their
/// values: outside their unit's forward they are meta tensors (no storage,
/// [`Tensor::set_data`] with a [`Device::Meta`] tensor), so any use of them outside the unit
/// fails on a device mismatch instead of reading stale or freed values.
///
/// - **Forward**: a forward pre-hook on each unit all-gathers the shards and writes the full
///   values back into the unit's parameters ([`Tensor::set_data`]); a forward hook sets them
///   back to meta once the unit's forward has returned. The pre-hook also starts the
///   all-gather of the next unit (pre-order, the order units run in a forward), so that
///   transfer runs on the communication thread while this unit computes (*prefetch*).
/// - **Backward** ([`FsdpConfig::reshard_after_forward`], the default): the parameters
///   share their storage with their views ([`Tensor::share_storage_with_views`]), so the
///   values autograd saved from them are freed with them when the unit's forward returns.
///   The forward hook passes the unit's output through an identity op whose backward
///   gathers the unit again, just before the unit's own backward runs, and starts the
///   all-gather of the unit whose backward comes next (the reverse of the order the
///   units' forwards returned in: *backward prefetch*). A post-accumulate-grad hook on
///   every parameter counts a unit's gradients; when the last is in, the unit's
///   parameters are freed again, its full gradient is flattened, its `.grad`s freed, and a
///   reduce-scatter (mean over the ranks, each rank receiving its block) handed to the
///   communication thread while backward goes on with earlier units. Units are reduced in
///   reverse pre-order on every rank. When backward ends, each rank's averaged block is
///   added to its shard's `.grad`. Without resharding, autograd's saved values keep each
///   unit's full parameters alive until its backward has used them, and nothing is
///   gathered in backward.
/// - **Step**: the optimizer holds the shards ([`FullyShardedDataParallel::parameters`]):
///   any nn optimizer, stepping `1 / world_size` of the model on each rank.
///
/// Memory per rank, then: the shards, their gradients and the optimizer state of
/// `1 / world_size` of the model, plus the full parameters of the root, of the unit
/// running and of the one being prefetched, and one unit's full gradients (without
/// resharding: the full parameters of every unit whose forward has run and whose backward
/// has not). Without grad (evaluation), a unit's full parameters are freed as soon as its
/// forward returns.
///
/// # What the ranks must agree on
///
/// Every rank wraps the same model structure (checked at construction, as for
/// [`DistributedDataParallel`](crate::DistributedDataParallel)) and runs the same units in
/// the same order: the collectives of a forward and a backward follow from them.
pub struct FullyShardedDataParallel<M: Module> {
    module: M,
    shared: Arc<Shared>,
    /// The model's parameters when wrapped: name, identity, shape.
    expected_params: Vec<(String, TensorId, Vec<usize>)>,
    /// The model's state-dict entries when wrapped: key, shape, dtype.
    expected_state: Vec<(String, Vec<usize>, DType)>,
    /// Every buffer of the model: name, tensor, persistent.
    buffers: Vec<(String, Tensor, bool)>,
    base: ModuleBase,
    _hooks: RemoveOnDrop,
}

/// Removes the wrapper's hooks when it goes.
struct RemoveOnDrop(Vec<HookHandle>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for h in self.0.drain(..) {
            h.remove();
        }
    }
}

/// A [`DistError::Fsdp`] from `at`.
fn fsdp_err(at: &'static str, message: impl Into<String>) -> DistError {
    DistError::Fsdp { at, message: message.into() }
}

impl<M: Module + Compute> FullyShardedDataParallel<M> {
    /// The wrapped model. Outside a forward its parameters are meta tensors (no values):
    /// read them with [`full_state_dict`](FullyShardedDataParallel::full_state_dict).
    pub fn module(&self) -> &M {
        &self.module
    }

    /// The wrapped model, mutably. Do not add, remove or replace its parameters: the next
    /// forward would fail, naming them.
    pub fn module_mut(&mut self) -> &mut M {
        &mut self.module
    }

    /// The process group (with the wrapper's timeout).
    pub fn group(&self) -> &ProcessGroup {
        &self.shared.group
    }

    /// The units' dotted paths in pre-order, the root (`""`) first.
    pub fn unit_paths(&self) -> Vec<String> {
        self.shared.units.iter().map(|u| u.path.clone()).collect()
    }

    /// The names of each unit's own parameters, in its flat layout's order.
    pub fn unit_parameter_names(&self) -> Vec<Vec<String>> {
        self.shared.units.iter().map(|u| u.names.clone()).collect()
    }

    /// What the wrapper has communicated so far.
    pub fn stats(&self) -> FsdpStats {
        self.shared.lock().stats
    }

    /// Bytes of this rank's shards (parameters held between steps).
    pub fn shard_bytes(&self) -> usize {
        self.shared.units.iter().map(|u| u.shard_len * u.dtype.size_in_bytes()).sum()
    }

    /// Scales the shards' gradients so that the whole model's gradient has an L2 norm of at
    /// most `max_norm` (PyTorch's `FullyShardedDataParallel.clip_grad_norm_`) and returns
    /// the norm before clipping. The norm is that of the full gradient: each rank's sum of
    /// squares (the padding is zero) is all-reduced, so every rank scales alike. A
    /// collective: every rank calls it, after backward.
    pub fn clip_grad_norm_(&self, max_norm: f64) -> f64 {
        let shards: Vec<&Parameter> = self.shared.units.iter().map(|u| &u.shard).collect();
        crate::structure::clip_grad_norm_across(&self.shared.group, &shards, &shards, max_norm)
    }

    /// Panics on every rank (after printing, so each rank's message is seen) when the
    /// model's parameters are no longer those it was wrapped with.
    fn check_parameters_unchanged(&self) {
        let now = self.module.named_parameters();
        let problem = if now.len() != self.expected_params.len()
            || now.iter().zip(&self.expected_params).any(|((n, p), (en, id, _))| n != en || p.id() != *id)
        {
            let before: HashMap<&str, TensorId> =
                self.expected_params.iter().map(|(n, id, _)| (n.as_str(), *id)).collect();
            let after: HashMap<&str, TensorId> = now.iter().map(|(n, p)| (n.as_str(), p.id())).collect();
            let mut what = Vec::new();
            for (n, _) in &now {
                match before.get(n.as_str()) {
                    None => what.push(format!("`{n}` was added")),
                    Some(id) if *id != after[n.as_str()] => what.push(format!("`{n}` was replaced by another tensor")),
                    Some(_) => {}
                }
            }
            for (n, _, _) in &self.expected_params {
                if !after.contains_key(n.as_str()) {
                    what.push(format!("`{n}` was removed"));
                }
            }
            if what.is_empty() {
                what.push("the parameters were reordered".into());
            }
            Some(what.join(", "))
        } else {
            // Same parameters; a dtype or device changed under the wrapper (through
            // `module_mut`) would be undone silently by the next gather.
            self.shared.units.iter().flat_map(|u| u.names.iter().zip(&u.params).map(move |(n, p)| (u, n, p))).find_map(
                |(u, n, p)| {
                    if p.dtype() != u.dtype {
                        Some(format!("`{n}` is now {}, sharded as {}", p.dtype(), u.dtype))
                    } else if !p.requires_grad() {
                        // Its shard would still get a (zero) gradient, and weight decay and
                        // momentum would move the "frozen" values.
                        Some(format!("`{n}` was frozen (requires_grad false); every sharded parameter is trained"))
                    } else if !matches!(p.device(), Device::Meta | Device::Cpu) {
                        Some(format!("`{n}` is now on {}, sharded on the CPU", p.device()))
                    } else {
                        None
                    }
                },
            )
        };
        if let Some(what) = problem {
            let msg = format!(
                "FullyShardedDataParallel: the wrapped model's parameters changed after wrapping on rank {}: {what}. \
                 The shards were built from the parameters at wrapping time; change the model before wrapping it",
                self.shared.group.rank()
            );
            eprintln!("{msg}");
            std::thread::sleep(GRACE);
            panic!("{msg}");
        }
    }
}

impl<M: Module + Compute> HasBase for FullyShardedDataParallel<M> {
    fn module_base(&self) -> &ModuleBase {
        &self.base
    }
}

impl<M: Module + Compute> Compute for FullyShardedDataParallel<M> {
    type Input = M::Input;
    type Output = M::Output;

    /// Checks the parameters are those wrapped, gathers the root unit (prefetching the
    /// first sub-unit), runs the model (the units gather themselves in their hooks), and
    /// frees the root.
    fn compute(&self, input: &M::Input) -> M::Output {
        self.check_parameters_unchanged();
        let sh = &self.shared;
        sh.drain();
        sh.prepare_for_forward(is_grad_enabled());
        sh.pre_forward(0);
        let y = nn_core::Forward::forward(&self.module, input);
        let y = match sh.post_forward(0, y.primary()) {
            Some(p) => y.with_primary(p),
            None => y,
        };
        sh.drain();
        y
    }
}

impl<M: Module> HoldsState for FullyShardedDataParallel<M> {}

impl<M: Module + Compute> Module for FullyShardedDataParallel<M> {
    /// The shards (`<unit>.flat_param`, `flat_param` for the root) and the model's buffers:
    /// what this rank holds. The model's own parameters are reached through
    /// [`module`](FullyShardedDataParallel::module).
    fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        for u in &self.shared.units {
            f(Name::Key(&u.shard_name), Item::Param(&u.shard));
        }
        for (name, t, persistent) in &self.buffers {
            f(Name::Key(name), Item::Buffer { tensor: t, persistent: *persistent });
        }
    }
    fn visit_modules_mut<'a>(&'a mut self, _f: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {}
    /// Refused: this rank holds only its shards, so a copy of it is no model; gather the
    /// full state (`full_state_dict`) and load it into a new model.
    #[track_caller]
    fn deep_copy_into(&self, _: &mut nn_core::module::DeepCopier, _: nn_core::module::CopySlot<'_>) {
        panic!(
            "deep_copy: a FullyShardedDataParallel model is not copied (this rank holds its shards only, so the copy \
             would be no model); gather the full state with `full_state_dict` and load it into a new model"
        );
    }
    /// `f` on the model's sub-modules and the model itself (children first), then on the
    /// wrapper: for per-layer settings such as `SyncBatchNorm::convert_sync_batchnorm`.
    /// Not for the parameters' values: outside a forward they are placeholders without
    /// values (an in-place write there does nothing), and the shards hold the values (load
    /// them with `load_full_state_dict`). A replaced, frozen or converted parameter is
    /// refused at the next forward.
    fn apply(&mut self, f: &mut dyn FnMut(&mut dyn Module)) {
        self.module.apply(f);
        f(self);
    }
    fn type_name(&self) -> &'static str {
        "FullyShardedDataParallel"
    }
    fn __set_child(&mut self, _name: &str, _slot: &mut dyn Any) -> SetChild {
        SetChild::Unsupported
    }
    /// The wrapper's flag and the whole model's.
    fn set_training(&mut self, training: bool) {
        self.base.set_training(training);
        self.module.set_training(training);
    }

    /// Refuses a conversion asked of a parent module that would change anything: the walk
    /// over the parent's tensors would convert the shards this wrapper reports, which its
    /// all-gathers and reduce-scatters were laid out for. The CPU and the dtype every unit
    /// already has are accepted (they change nothing), as by this wrapper's own
    /// `to_device`/`to_dtype`. Convert the model before wrapping it.
    fn check_conversion(&self, to: nn_core::Conversion) -> nn_core::Result<()> {
        let unchanged = match to {
            nn_core::Conversion::Device(d) => d == Device::Cpu,
            nn_core::Conversion::DType(d) => self.shared.units.iter().all(|u| u.numel == 0 || u.dtype == d),
            _ => false,
        };
        if unchanged {
            return Ok(());
        }
        Err(nn_core::Error::ConversionRefused {
            conversion: match to {
                nn_core::Conversion::Device(d) => format!("to_device({d})"),
                nn_core::Conversion::DType(d) => format!("to_dtype({d})"),
                _ => format!("{to:?}"),
            },
            reason: "FullyShardedDataParallel inside the module converted cannot follow: its shards were laid out \
                     when the model was wrapped; convert the model before wrapping it"
                .into(),
        })
    }

    /// Refuses any device but the CPU (moving nothing): the shards, the all-gathers and the
    /// reduce-scatters are CPU buffers. Move the model before wrapping it.
    fn try_to_device(&mut self, device: Device) -> nn_core::Result<()> {
        if device == Device::Cpu {
            return Ok(());
        }
        Err(nn_core::Error::DeviceUnavailable {
            device,
            reason: "FullyShardedDataParallel keeps its shards on the CPU; a wrapped model cannot move (move the \
                     model before wrapping it)"
                .into(),
        })
    }

    /// # Panics
    /// Always, unless every unit already has `dtype`: each unit's flat shard, all-gather
    /// and reduce-scatter were laid out for the dtype the model had when wrapped. Convert
    /// the model before wrapping it.
    fn to_dtype(&mut self, dtype: DType) {
        if let Some(u) = self.shared.units.iter().find(|u| u.numel > 0 && u.dtype != dtype) {
            let unit = if u.path.is_empty() { "the root unit".to_string() } else { format!("unit `{}`", u.path) };
            panic!(
                "FullyShardedDataParallel::to_dtype({dtype}): {unit} was sharded as {}; convert the model before \
                 wrapping it",
                u.dtype
            );
        }
    }
    nn_core::module_accessors!(base);
}

impl<M: Module + Compute> std::fmt::Display for FullyShardedDataParallel<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FullyShardedDataParallel(units: {:?}) of ", self.unit_paths())?;
        nn_core::module::fmt_module(&self.module, f)
    }
}
