//! `FullyShardedDataParallel`: parameters, gradients and optimizer state sharded over the
//! ranks (ZeRO stage 3), gathered one wrapped unit at a time.
//!
//! See [`FullyShardedDataParallel`] for how it works.

mod checkpoint;
mod policy;
mod runtime;

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use nn_core::module::{HoldsState, SetChild};
use nn_core::{
    is_grad_enabled, Compute, DType, Device, HasBase, HookHandle, Item, Module, ModuleBase, ModuleIo, Name, Parameter,
    Tensor, TensorId,
};

use crate::comm::Buf;
use crate::error::{DistError, Result};
use crate::group::{check_timeout, ProcessGroup};
use crate::structure::{broadcast_tensors, verify_same, Entry};

pub use policy::FsdpPolicy;
use runtime::{Shared, State, Unit};

/// Between printing an error every rank detects and panicking (which ends the job): the
/// other ranks print it too.
const GRACE: Duration = Duration::from_millis(500);

/// Options of [`FullyShardedDataParallel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsdpConfig {
    /// Start the all-gather of the next unit when a unit's forward starts (PyTorch's
    /// `forward_prefetch`; default `true`). Off, each unit gathers when it is reached.
    pub forward_prefetch: bool,
    /// Free each unit's gathered parameters when its forward returns, and gather them
    /// again when backward reaches the unit's output (PyTorch's `reshard_after_forward`,
    /// its `FULL_SHARD`; default `true`). The values autograd saved from the parameters
    /// are freed with them: the parameters share their storage with their views
    /// ([`Tensor::share_storage_with_views`]). Off (PyTorch's `SHARD_GRAD_OP`), what
    /// autograd saved keeps each unit's full parameters alive from its forward until its
    /// backward has used them: no gather in backward, more memory.
    ///
    /// The gather before a unit's backward is triggered by the gradient of the unit's
    /// output (for a tuple, its first element). A unit whose other outputs carry gradients
    /// into its own ops before the first one's arrives would reach freed parameters; its
    /// backward then panics on a meta tensor. Turn this off for such models.
    pub reshard_after_forward: bool,
    /// With [`reshard_after_forward`](FsdpConfig::reshard_after_forward), start the
    /// all-gather of the unit whose backward comes next when a unit's backward starts
    /// (PyTorch's `BackwardPrefetch.BACKWARD_PRE`; default `true`).
    pub backward_prefetch: bool,
    /// The timeout of the wrapper's collectives; `None` (the default) keeps the group's.
    pub timeout: Option<Duration>,
}

impl Default for FsdpConfig {
    fn default() -> Self {
        FsdpConfig { forward_prefetch: true, reshard_after_forward: true, backward_prefetch: true, timeout: None }
    }
}

/// What a [`FullyShardedDataParallel`] has communicated so far (cumulative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsdpStats {
    /// Units gathered for a forward.
    pub gathers: usize,
    /// Of those, the ones whose all-gather had been started before the unit was reached
    /// (prefetched: it overlapped the previous unit's computation).
    pub prefetched: usize,
    /// Units gathered again for their backward
    /// ([`FsdpConfig::reshard_after_forward`]).
    pub backward_gathers: usize,
    /// Of those, the ones whose all-gather had been started before the unit's backward was
    /// reached ([`FsdpConfig::backward_prefetch`]).
    pub backward_prefetched: usize,
    /// Units whose gradients were reduce-scattered.
    pub reduce_scatters: usize,
    /// Of those, the ones whose reduce-scatter started while backward was still producing
    /// other units' gradients (it overlapped computation).
    pub overlapped_reduce_scatters: usize,
}
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
    /// Wraps `module` with the default [`FsdpConfig`]; every rank calls it with the same
    /// model structure and policy.
    ///
    /// # Errors
    /// [`DistError::Fsdp`] (on every rank) when the model differs across ranks, when a unit
    /// has no hooks (no [`ModuleBase`]), mixes dtypes or holds a non-floating-point
    /// parameter, or when a parameter does not require grad (freeze nothing in a model to
    /// shard).
    pub fn new(module: M, group: &ProcessGroup, policy: FsdpPolicy) -> Result<Self> {
        Self::with_config(module, group, policy, FsdpConfig::default())
    }

    /// Wraps `module` with explicit options.
    ///
    /// # Errors
    /// As [`new`](FullyShardedDataParallel::new), and [`DistError::ZeroTimeout`] for a zero
    /// timeout.
    pub fn with_config(module: M, group: &ProcessGroup, policy: FsdpPolicy, config: FsdpConfig) -> Result<Self> {
        const AT: &str = "FullyShardedDataParallel::new";
        let group = &match config.timeout {
            Some(t) => {
                check_timeout(t, "FullyShardedDataParallel::with_config (FsdpConfig::timeout)")?;
                group.with_timeout(t)?
            }
            None => group.clone(),
        };
        if let Some((path, _)) = module.first_uninitialized() {
            let at = if path.is_empty() { "the model itself".to_string() } else { format!("`{path}`") };
            return Err(fsdp_err(
                AT,
                format!(
                    "the model has lazy layers whose parameters are not initialised yet ({at}): run one forward \
                     pass (on every rank) before wrapping it"
                ),
            ));
        }
        let named = module.named_parameters();
        let mut entries: Vec<Entry> =
            named.iter().map(|(n, p)| (n.clone(), p.tensor().clone(), p.requires_grad())).collect();
        entries.extend(module.named_buffers().into_iter().map(|(n, t)| (n, t, false)));
        verify_same(group, &entries, "parameters and buffers")
            .map_err(|e| fsdp_err(AT, format!("the model differs across ranks: {e}")))?;
        if let Some((name, p)) = named.iter().find(|(_, p)| !p.requires_grad()) {
            return Err(fsdp_err(
                AT,
                format!(
                    "parameter `{name}` of shape {:?} does not require grad; FullyShardedDataParallel shards \
                     trainable parameters only",
                    p.shape()
                ),
            ));
        }
        if let Some((name, p)) = named.iter().find(|(_, p)| p.device() != Device::Cpu) {
            return Err(fsdp_err(
                AT,
                format!("parameter `{name}` is on {:?}; FullyShardedDataParallel shards CPU parameters", p.device()),
            ));
        }
        // Rank 0's values everywhere, then each rank keeps its blocks.
        let buffers_now: Vec<Tensor> = module.named_buffers().into_iter().map(|(_, t)| t).collect();
        let params_now: Vec<Tensor> = named.iter().map(|(_, p)| p.tensor().clone()).collect();
        broadcast_tensors(group, &[params_now, buffers_now].concat(), 0);

        if let Some(name) = policy.unmatched_types(&module).first() {
            return Err(fsdp_err(
                AT,
                format!(
                    "the policy wraps modules of type `{name}`, and the model has none: every parameter would go \
                     into the root unit (a lazy layer is the layer it became after its first forward)"
                ),
            ));
        }
        let paths = policy.units(&module);
        let modules: HashMap<String, &dyn Module> = module.named_modules().into_iter().collect();
        let mut unit_paths = vec![String::new()];
        unit_paths.extend(paths);
        for path in &unit_paths[1..] {
            if modules[path].base().is_none() {
                return Err(fsdp_err(
                    AT,
                    format!("the unit `{path}` has no hooks (no ModuleBase): it cannot be wrapped"),
                ));
            }
        }
        let owner = |name: &str| -> usize {
            (1..unit_paths.len())
                .filter(|&u| name.starts_with(&format!("{}.", unit_paths[u])))
                .max_by_key(|&u| unit_paths[u].len())
                .unwrap_or(0)
        };
        // A parameter registered under several names (tied weights) lives in the unit of its
        // first name. Every other user must run while that unit is gathered: inside it, or
        // inside a unit nested in it. Otherwise its forward would meet a freed (meta) tensor;
        // refused here, on every rank alike, naming both places.
        let within = |outer: usize, inner: usize| {
            outer == 0 || inner == outer || unit_paths[inner].starts_with(&format!("{}.", unit_paths[outer]))
        };
        let first: HashMap<_, &str> = named.iter().map(|(n, p)| (p.id(), n.as_str())).collect();
        for (path, m) in module.named_modules() {
            for (rel, p) in m.named_parameters() {
                let name = if path.is_empty() { rel } else { format!("{path}.{rel}") };
                let home = first[&p.id()];
                if !within(owner(home), owner(&name)) {
                    return Err(fsdp_err(
                        AT,
                        format!(
                            "parameter `{home}` (unit `{}`) is also `{name}` (unit `{}`): a tied parameter must \
                             belong to a unit that is gathered wherever it is used; wrap both users in one unit \
                             (or leave them to an enclosing one)",
                            unit_paths[owner(home)],
                            unit_paths[owner(&name)]
                        ),
                    ));
                }
            }
        }
        let (rank, world) = (group.rank(), group.world_size());
        let mut units = Vec::with_capacity(unit_paths.len());
        let mut own: Vec<Vec<(String, Parameter)>> = vec![Vec::new(); unit_paths.len()];
        for (name, p) in &named {
            own[owner(name)].push((name.clone(), p.clone()));
        }
        for (u, members) in own.into_iter().enumerate() {
            let path = unit_paths[u].clone();
            let dtype = members.first().map_or(DType::F32, |(_, p)| p.dtype());
            if let Some((name, p)) = members.iter().find(|(_, p)| p.dtype() != dtype || !p.dtype().is_float()) {
                return Err(fsdp_err(
                    AT,
                    format!(
                        "unit `{path}` holds `{name}` of dtype {} beside {dtype}: a unit's parameters share one \
                         floating-point dtype",
                        p.dtype()
                    ),
                ));
            }
            let mut offsets = Vec::with_capacity(members.len());
            let mut numel = 0;
            for (_, p) in &members {
                offsets.push(numel);
                numel += p.numel();
            }
            let shard_len = numel.div_ceil(world);
            let mut flat = Buf::for_dtype(dtype, shard_len * world);
            members.iter().for_each(|(_, p)| flat.extend_from(p));
            flat.extend_zeros(shard_len * world - numel);
            let shard = Parameter::new(flat.tensor(rank * shard_len, &[shard_len], dtype));
            let shard_name = if path.is_empty() { "flat_param".to_string() } else { format!("{path}.flat_param") };
            let (names, params): (Vec<String>, Vec<Parameter>) = members.into_iter().unzip();
            units.push(Unit { path, names, params, offsets, dtype, numel, shard_len, shard, shard_name });
        }
        let n = units.len();
        let state = State {
            gathered: vec![true; n],
            forward_versions: vec![None; n],
            inflight: (0..n).map(|_| None).collect(),
            armed: false,
            disarmed_pending: false,
            ready: units.iter().map(|u| vec![false; u.params.len()]).collect(),
            pending: units.iter().map(|u| u.params.len()).collect(),
            next_rs: 0,
            rs: (0..n).map(|_| None).collect(),
            finalize_queued: false,
            post_order: Vec::new(),
            stats: FsdpStats::default(),
        };
        let shared = Arc::new(Shared {
            group: group.clone(),
            units,
            prefetch: config.forward_prefetch,
            reshard: config.reshard_after_forward,
            backward_prefetch: config.backward_prefetch,
            state: Mutex::new(state),
        });
        for u in 0..n {
            if shared.reshard {
                // Views and saved values read the parameter's slot: freeing it frees them.
                shared.units[u].params.iter().for_each(|p| p.share_storage_with_views());
            }
            shared.free(u);
        }

        let mut hooks = Vec::new();
        for (u, unit) in shared.units.iter().enumerate() {
            for j in 0..unit.params.len() {
                let weak: Weak<Shared> = Arc::downgrade(&shared);
                hooks.push(unit.params[j].register_post_accumulate_grad_hook(move |_| {
                    if let Some(s) = weak.upgrade() {
                        s.mark_ready(u, j);
                    }
                }));
            }
            if u == 0 {
                continue; // the root gathers in `compute`
            }
            let base = modules[&unit.path].base().expect("checked above");
            let weak = Arc::downgrade(&shared);
            hooks.push(base.register_forward_pre_hook(move |_| {
                if let Some(s) = weak.upgrade() {
                    s.pre_forward(u);
                }
                None
            }));
            let weak = Arc::downgrade(&shared);
            hooks.push(base.register_forward_hook(move |_, y| weak.upgrade().and_then(|s| s.post_forward(u, y))));
        }
        drop(modules);

        let state_keys = module.state_dict();
        let expected_state = state_keys.iter().map(|(k, t)| (k.to_string(), t.shape().to_vec(), t.dtype())).collect();
        let persistent: HashSet<String> = state_keys.keys().map(str::to_string).collect();
        let buffers = module
            .named_buffers()
            .into_iter()
            .map(|(n, t)| {
                let keep = persistent.contains(&n);
                (n, t, keep)
            })
            .collect();
        let expected_params = named.iter().map(|(n, p)| (n.clone(), p.id(), p.shape().to_vec())).collect();
        Ok(FullyShardedDataParallel {
            module,
            shared,
            expected_params,
            expected_state,
            buffers,
            base: ModuleBase::new(),
            _hooks: RemoveOnDrop(hooks),
        })
    }

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
