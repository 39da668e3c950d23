//! `FullyShardedDataParallel`: parameters, gradients and optimizer state sharded over the
//! ranks (ZeRO stage 3), gathered one wrapped unit at a time.
//!
//! See [`FullyShardedDataParallel`] for how it works.

use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use nn_core::autograd::queue_callback;
use nn_core::module::{HoldsState, SetChild};
use nn_core::optim::{Optimizer, OptimizerState};
use nn_core::{
    is_grad_enabled, no_grad, Compute, DType, Device, HasBase, HookHandle, Item, Module, ModuleBase, Name, Parameter,
    StateDict, Tensor, TensorId,
};

use crate::comm::{to_wire, Buf, Op};
use crate::error::{DistError, Result};
use crate::group::{check_timeout, recv, ProcessGroup};
use crate::structure::{broadcast_tensors, verify_same, Entry};

/// Between printing an error every rank detects and panicking (which ends the job): the
/// other ranks print it too.
const GRACE: Duration = Duration::from_millis(500);

/// Which sub-modules become units of a [`FullyShardedDataParallel`] (PyTorch's
/// `auto_wrap_policy`): modules of the given types (`ModuleWrapPolicy`) and/or modules
/// holding at least a number of parameters not already in a smaller unit
/// (`size_based_auto_wrap_policy`, decided bottom-up). Units may nest; a parameter belongs
/// to the innermost unit that contains it, and the model itself is always the root unit.
///
/// ```
/// use nn_distributed::FsdpPolicy;
/// use nn_layers::TransformerEncoderLayer;
///
/// let by_type = FsdpPolicy::new().module_type::<TransformerEncoderLayer>();
/// let by_size = FsdpPolicy::new().min_params(1_000_000);
/// assert_ne!(format!("{by_type:?}"), format!("{by_size:?}"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct FsdpPolicy {
    types: Vec<(TypeId, &'static str)>,
    min_params: Option<usize>,
}

impl FsdpPolicy {
    /// A policy that wraps nothing: the whole model is one unit.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also wraps every sub-module of type `T`.
    pub fn module_type<T: Module>(mut self) -> Self {
        self.types.push((TypeId::of::<T>(), std::any::type_name::<T>()));
        self
    }

    /// Also wraps every sub-module that holds at least `n` parameter elements outside the
    /// units below it (children are decided first).
    pub fn min_params(mut self, n: usize) -> Self {
        self.min_params = Some(n);
        self
    }

    /// The dotted paths of the units this policy picks in `model`, in pre-order (the root,
    /// `""`, excluded).
    pub fn units(&self, model: &dyn Module) -> Vec<String> {
        let modules = model.named_modules();
        let params: Vec<(String, usize)> = model.named_parameters().into_iter().map(|(n, p)| (n, p.numel())).collect();
        let mut chosen: Vec<String> = Vec::new();
        // Children before parents: reverse pre-order.
        for (path, m) in modules.iter().rev() {
            if path.is_empty() {
                continue;
            }
            let typed = self.types.iter().any(|(id, _)| m.as_any().type_id() == *id);
            let sized = self.min_params.is_some_and(|n| {
                let prefix = format!("{path}.");
                let free: usize = params
                    .iter()
                    .filter(|(name, _)| name.starts_with(&prefix))
                    .filter(|(name, _)| !chosen.iter().any(|c| name.starts_with(&format!("{c}."))))
                    .map(|(_, k)| k)
                    .sum();
                free >= n && free > 0
            });
            if typed || sized {
                chosen.push(path.clone());
            }
        }
        let order: HashMap<&str, usize> = modules.iter().enumerate().map(|(i, (p, _))| (p.as_str(), i)).collect();
        chosen.sort_by_key(|p| order[p.as_str()]);
        chosen
    }
}

/// Options of [`FullyShardedDataParallel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsdpConfig {
    /// Start the all-gather of the next unit when a unit's forward starts (PyTorch's
    /// `forward_prefetch`; default `true`). Off, each unit gathers when it is reached.
    pub forward_prefetch: bool,
    /// The timeout of the wrapper's collectives; `None` (the default) keeps the group's.
    pub timeout: Option<Duration>,
}

impl Default for FsdpConfig {
    fn default() -> Self {
        FsdpConfig { forward_prefetch: true, timeout: None }
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
    /// Units whose gradients were reduce-scattered.
    pub reduce_scatters: usize,
    /// Of those, the ones whose reduce-scatter started while backward was still producing
    /// other units' gradients (it overlapped computation).
    pub overlapped_reduce_scatters: usize,
}

/// One unit: its own parameters and this rank's shard of them.
struct Unit {
    /// Dotted path (`""`: the root).
    path: String,
    names: Vec<String>,
    params: Vec<Parameter>,
    /// Each parameter's offset in the flat vector.
    offsets: Vec<usize>,
    dtype: DType,
    /// Elements of the flat vector, before padding.
    numel: usize,
    /// Elements of each rank's block (the padded length over the world size).
    shard_len: usize,
    /// This rank's block, updated by the optimizer.
    shard: Parameter,
    /// The shard's name in [`Module::named_parameters`] (`<path>.flat_param`).
    shard_name: String,
}

/// Where the wrapper stands in the current forward and backward.
struct State {
    /// Per unit: its parameters hold their full values.
    gathered: Vec<bool>,
    /// Per unit: an all-gather started and not yet waited for.
    inflight: Vec<Option<Receiver<Buf>>>,
    /// The forward ran with grad on: its backward reduces gradients.
    armed: bool,
    ready: Vec<Vec<bool>>,
    pending: Vec<usize>,
    /// The next unit to reduce, as a position in reverse pre-order.
    next_rs: usize,
    rs: Vec<Option<Receiver<Buf>>>,
    finalize_queued: bool,
    stats: FsdpStats,
}

struct Shared {
    group: ProcessGroup,
    units: Vec<Unit>,
    prefetch: bool,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn launch_gather(&self, st: &mut State, u: usize) {
        let buf = to_wire(&self.units[u].shard, "FullyShardedDataParallel all_gather");
        st.inflight[u] = Some(self.group.submit(Op::AllGather { buf }));
    }

    /// Makes unit `u`'s parameters hold their full values (waiting for a prefetched
    /// all-gather, or running one).
    fn gather(&self, u: usize) {
        let unit = &self.units[u];
        let rx = {
            let mut st = self.lock();
            if st.gathered[u] {
                return;
            }
            st.stats.gathers += 1;
            if unit.numel == 0 {
                st.gathered[u] = true;
                return;
            }
            match st.inflight[u].take() {
                Some(rx) => {
                    st.stats.prefetched += 1;
                    rx
                }
                None => {
                    self.launch_gather(&mut st, u);
                    st.inflight[u].take().expect("just launched")
                }
            }
        };
        let full = recv(&rx, "FullyShardedDataParallel all_gather");
        for (p, &o) in unit.params.iter().zip(&unit.offsets) {
            p.set_data(&full.tensor(o, p.shape(), p.dtype()));
        }
        self.lock().gathered[u] = true;
    }

    /// Forward pre-hook of unit `u`: gather it, prefetch the next one.
    fn pre_forward(&self, u: usize) {
        self.gather(u);
        if self.prefetch {
            let mut st = self.lock();
            if let Some(next) = (u + 1..self.units.len()).find(|&v| self.units[v].numel > 0) {
                if !st.gathered[next] && st.inflight[next].is_none() {
                    self.launch_gather(&mut st, next);
                }
            }
        }
    }

    /// Sets unit `u`'s parameters back to meta.
    fn free(&self, u: usize) {
        for p in &self.units[u].params {
            p.set_data(&Tensor::full_on(p.shape(), 0.0, p.dtype(), Device::Meta));
        }
        self.lock().gathered[u] = false;
    }

    /// Waits for (and drops) every all-gather still in flight: a prefetched unit that the
    /// forward did not run.
    fn drain(&self) {
        let pending: Vec<Receiver<Buf>> = self.lock().inflight.iter_mut().filter_map(Option::take).collect();
        for rx in pending {
            recv(&rx, "FullyShardedDataParallel all_gather");
        }
    }

    fn prepare_for_forward(&self, armed: bool) {
        let mut st = self.lock();
        reset(&mut st, &self.units);
        st.armed = armed;
    }

    /// Parameter `j` of unit `u` has its gradient of this backward.
    fn mark_ready(self: &Arc<Self>, u: usize, j: usize) {
        let mut st = self.lock();
        if !st.armed {
            return;
        }
        if st.ready[u][j] {
            reset(&mut st, &self.units);
            drop(st);
            panic!(
                "FullyShardedDataParallel: parameter `{}` received its gradient twice in one iteration (a second \
                 backward through the same forward); run the forward again before each backward",
                self.units[u].names[j]
            );
        }
        st.ready[u][j] = true;
        st.pending[u] -= 1;
        if !st.finalize_queued {
            st.finalize_queued = true;
            let weak = Arc::downgrade(self);
            queue_callback(move || {
                if let Some(s) = weak.upgrade() {
                    s.finalize();
                }
            });
        }
        self.launch_ready(&mut st);
    }

    /// Launches, in reverse pre-order, every unit whose gradients are all in.
    fn launch_ready(&self, st: &mut State) {
        let n = self.units.len();
        while st.next_rs < n {
            let u = n - 1 - st.next_rs;
            if st.pending[u] > 0 {
                break;
            }
            st.rs[u] = self.launch_reduce_scatter(u);
            if st.rs[u].is_some() {
                st.stats.reduce_scatters += 1;
                if st.pending.iter().any(|&p| p > 0) {
                    st.stats.overlapped_reduce_scatters += 1;
                }
            }
            st.next_rs += 1;
        }
    }

    /// Flattens unit `u`'s gradients (zeros where a parameter got none), frees them and
    /// starts their reduce-scatter.
    fn launch_reduce_scatter(&self, u: usize) -> Option<Receiver<Buf>> {
        let unit = &self.units[u];
        if unit.numel == 0 {
            return None;
        }
        let total = unit.shard_len * self.group.world_size();
        let mut buf = Buf::for_dtype(unit.dtype, total);
        for p in &unit.params {
            match p.grad() {
                Some(g) => buf.extend_from(&g),
                None => buf.extend_zeros(p.numel()),
            }
            p.set_grad(None);
        }
        buf.extend_zeros(total - unit.numel);
        Some(self.group.submit(Op::ReduceScatterAvg { buf }))
    }

    /// The end of backward: reduces what is left (parameters without a gradient count as
    /// zeros), waits for every unit and adds each rank's block to its shard's `.grad`.
    fn finalize(&self) {
        let mut st = self.lock();
        if !st.armed {
            return;
        }
        for u in 0..self.units.len() {
            st.pending[u] = 0;
        }
        self.launch_ready(&mut st);
        let works: Vec<Option<Receiver<Buf>>> = st.rs.iter_mut().map(Option::take).collect();
        reset(&mut st, &self.units);
        drop(st);
        // Wait in launch order (reverse pre-order).
        for u in (0..self.units.len()).rev() {
            let Some(rx) = &works[u] else { continue };
            let unit = &self.units[u];
            let block = recv(rx, "FullyShardedDataParallel reduce_scatter").tensor(0, &[unit.shard_len], unit.dtype);
            let grad = match unit.shard.grad() {
                Some(g) => &g + &block,
                None => block,
            };
            unit.shard.set_grad(Some(grad));
        }
    }
}

fn reset(st: &mut State, units: &[Unit]) {
    st.armed = false;
    for (u, unit) in units.iter().enumerate() {
        st.ready[u].iter_mut().for_each(|r| *r = false);
        st.pending[u] = unit.params.len();
        st.rs[u] = None;
    }
    st.next_rs = 0;
    st.finalize_queued = false;
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
/// - **Backward**: the gathered values a unit's backward needs stay alive exactly as long as
///   autograd holds them: nn's ops save their own handle on a tensor's buffer (as PyTorch's
///   saved tensors do), so the buffers survive the parameter going back to meta and are
///   released node by node as backward runs. Nothing needs gathering again before backward
///   (PyTorch re-gathers because its resharding frees the storage those saved tensors share;
///   here it cannot free them under autograd). A post-accumulate-grad hook on every parameter
///   counts a unit's gradients; when the last is in, the unit's full gradient is flattened,
///   its `.grad`s freed, and a reduce-scatter (mean over the ranks, each rank receiving its
///   block) handed to the communication thread while backward goes on with earlier units.
///   Units are reduced in reverse pre-order on every rank. When backward ends, each rank's
///   averaged block is added to its shard's `.grad`.
/// - **Step**: the optimizer holds the shards ([`FullyShardedDataParallel::parameters`]):
///   any nn optimizer, stepping `1 / world_size` of the model on each rank.
///
/// Memory per rank, then: the shards, their gradients and the optimizer state of
/// `1 / world_size` of the model, plus the full parameters of the units whose forward has
/// run and whose backward has not (all of them at the start of backward: the price of not
/// recomputing forward) and one unit's full gradients. Without grad (evaluation), a unit's
/// full parameters are freed as soon as its forward returns.
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
            inflight: (0..n).map(|_| None).collect(),
            armed: false,
            ready: units.iter().map(|u| vec![false; u.params.len()]).collect(),
            pending: units.iter().map(|u| u.params.len()).collect(),
            next_rs: 0,
            rs: (0..n).map(|_| None).collect(),
            finalize_queued: false,
            stats: FsdpStats::default(),
        };
        let shared = Arc::new(Shared {
            group: group.clone(),
            units,
            prefetch: config.forward_prefetch,
            state: Mutex::new(state),
        });
        for u in 0..n {
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
            hooks.push(base.register_forward_hook(move |_, _| {
                if let Some(s) = weak.upgrade() {
                    s.free(u);
                }
                None
            }));
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
        let local: f64 = self
            .shared
            .units
            .iter()
            .filter_map(|u| u.shard.grad())
            .map(|g| g.to_vec_of::<f64>().iter().map(|v| v * v).sum::<f64>())
            .sum();
        let total = self.shared.group.all_reduce(&Tensor::from_vec_f64(vec![local], &[1]), crate::ReduceOp::Sum);
        let norm = total.to_vec_of::<f64>()[0].sqrt();
        let scale = max_norm / (norm + 1e-6);
        if scale < 1.0 {
            for u in &self.shared.units {
                if let Some(g) = u.shard.grad() {
                    u.shard.set_grad(Some(&g * scale));
                }
            }
        }
        norm
    }

    /// Gathers every unit on rank 0 and returns the model's own state dict there (PyTorch's
    /// `FULL_STATE_DICT` with `rank0_only`): the keys, shapes and values the unwrapped model
    /// would give, loadable into it. Other ranks get `None`. A collective: every rank calls
    /// it. Each unit is all-gathered in turn; ranks other than 0 drop it at once.
    pub fn full_state_dict(&self) -> Option<StateDict> {
        let rank = self.shared.group.rank();
        for (u, unit) in self.shared.units.iter().enumerate() {
            if unit.numel == 0 {
                continue;
            }
            let buf = to_wire(&unit.shard, "FullyShardedDataParallel::full_state_dict");
            let full = recv(&self.shared.group.submit(Op::AllGather { buf }), "FullyShardedDataParallel all_gather");
            if rank == 0 {
                for (p, &o) in unit.params.iter().zip(&unit.offsets) {
                    p.set_data(&full.tensor(o, p.shape(), p.dtype()));
                }
                self.shared.lock().gathered[u] = true;
            }
        }
        if rank != 0 {
            return None;
        }
        let mut out = StateDict::default();
        for (k, t) in self.module.state_dict().iter() {
            out.insert(k.to_string(), t.detach());
        }
        for u in 0..self.shared.units.len() {
            self.shared.free(u);
        }
        Some(out)
    }

    /// Loads a full state dict (the model's own keys, e.g. from
    /// [`full_state_dict`](FullyShardedDataParallel::full_state_dict) or an unwrapped
    /// model's `state_dict`): rank 0 passes it (other ranks' argument is not read), checks
    /// it, and broadcasts it unit by unit; each rank keeps its blocks. A collective.
    ///
    /// # Errors
    /// [`DistError::Fsdp`] on every rank, with nothing loaded, when rank 0 passes `None` or a
    /// state dict whose keys, shapes or dtypes are not the model's (naming them).
    pub fn load_full_state_dict(&self, state: Option<&StateDict>) -> Result<()> {
        const AT: &str = "FullyShardedDataParallel::load_full_state_dict";
        let group = &self.shared.group;
        let (rank, world) = (group.rank(), group.world_size());
        let verdict = if rank == 0 { self.check_full_state(state) } else { Ok(()) };
        agree(group, verdict).map_err(|e| fsdp_err(AT, e))?;
        let state = state.filter(|_| rank == 0);
        for unit in &self.shared.units {
            if unit.numel == 0 {
                continue;
            }
            let total = unit.shard_len * world;
            let mut buf = Buf::for_dtype(unit.dtype, total);
            match state {
                Some(sd) => unit.names.iter().for_each(|n| buf.extend_from(sd.get(n).expect("checked"))),
                None => buf.extend_zeros(unit.numel),
            }
            buf.extend_zeros(total - unit.numel);
            let full = recv(&group.submit(Op::Broadcast { buf, root: 0 }), "FullyShardedDataParallel broadcast");
            let block = full.tensor(rank * unit.shard_len, &[unit.shard_len], unit.dtype);
            no_grad(|| unit.shard.copy_(&block));
        }
        if let Some(sd) = state {
            no_grad(|| {
                for (name, t, persistent) in &self.buffers {
                    if *persistent {
                        t.copy_(sd.get(name).expect("checked"));
                    }
                }
            });
        }
        let buffers: Vec<Tensor> = self.buffers.iter().map(|(_, t, _)| t.clone()).collect();
        broadcast_tensors(group, &buffers, 0);
        Ok(())
    }

    /// Rank 0's check of a full state dict against the model's keys, shapes and dtypes.
    fn check_full_state(&self, state: Option<&StateDict>) -> std::result::Result<(), String> {
        let Some(sd) = state else {
            return Err("rank 0 passed no state dict (`None`)".into());
        };
        let expected: HashSet<&str> = self.expected_state.iter().map(|(k, _, _)| k.as_str()).collect();
        // Wrong shapes and dtypes first, then missing keys, then unexpected ones.
        let (mut wrong, mut missing) = (Vec::new(), Vec::new());
        for (key, shape, dtype) in &self.expected_state {
            match sd.get(key) {
                None => missing.push(format!("`{key}` is missing")),
                Some(t) if t.shape() != shape.as_slice() => {
                    wrong.push(format!("`{key}` has shape {:?} where the model has {shape:?}", t.shape()))
                }
                Some(t) if t.dtype() != *dtype => {
                    wrong.push(format!("`{key}` has dtype {} where the model has {dtype}", t.dtype()))
                }
                Some(t) if t.device() == Device::Meta => wrong.push(format!("`{key}` is a meta tensor (no values)")),
                Some(_) => {}
            }
        }
        let mut problems = wrong;
        problems.extend(missing);
        problems
            .extend(sd.keys().filter(|k| !expected.contains(k)).map(|k| format!("`{k}` is not a key of the model")));
        if problems.is_empty() {
            return Ok(());
        }
        let shown = problems.len().min(5);
        Err(format!(
            "the state dict does not fit the model ({} problem(s)): {}{}",
            problems.len(),
            problems[..shown].join("; "),
            if problems.len() > shown { "; ..." } else { "" }
        ))
    }

    /// This rank's file of a sharded checkpoint in `dir`: `dir/rank<r>-of-<w>.safetensors`.
    pub fn shard_path(&self, dir: impl AsRef<Path>) -> PathBuf {
        let g = &self.shared.group;
        dir.as_ref().join(format!("rank{}-of-{}.safetensors", g.rank(), g.world_size()))
    }

    /// The layout a sharded checkpoint records: per unit, its path, flat length and block
    /// length.
    fn layout(&self) -> String {
        let units: Vec<String> =
            self.shared.units.iter().map(|u| format!("{}={}/{}", u.path, u.numel, u.shard_len)).collect();
        units.join(";")
    }

    /// Writes this rank's part of a sharded checkpoint to `path` (PyTorch's
    /// `SHARDED_STATE_DICT`; usually [`shard_path`](FullyShardedDataParallel::shard_path)):
    /// the shards (`model.<unit>.flat_param`), the buffers (`model.<name>`), `optimizer`'s
    /// state (`optim.<key>`), and in the metadata the world size, this rank and the shard
    /// layout. Local: no collective.
    ///
    /// # Errors
    /// [`DistError::Fsdp`] when the file cannot be written.
    pub fn save_sharded(&self, path: impl AsRef<Path>, optimizer: &impl Optimizer) -> Result<()> {
        let mut sd = StateDict::default();
        for (k, t) in self.state_dict().iter() {
            sd.insert(format!("model.{k}"), t.detach());
        }
        let opt = optimizer.state_dict();
        for (k, t) in opt.tensors.iter() {
            sd.insert(format!("optim.{k}"), t.clone());
        }
        let g = &self.shared.group;
        let lrs: Vec<String> = opt.lrs.iter().map(|lr| format!("{lr:e}")).collect();
        let meta = HashMap::from([
            ("nn.fsdp.world_size".to_string(), g.world_size().to_string()),
            ("nn.fsdp.rank".to_string(), g.rank().to_string()),
            ("nn.fsdp.layout".to_string(), self.layout()),
            ("nn.fsdp.lrs".to_string(), lrs.join(",")),
        ]);
        sd.save_with_metadata(path.as_ref(), Some(meta)).map_err(|e| {
            fsdp_err("FullyShardedDataParallel::save_sharded", format!("{}: {e}", path.as_ref().display()))
        })
    }

    /// Loads this rank's part of a sharded checkpoint written by
    /// [`save_sharded`](FullyShardedDataParallel::save_sharded) (each rank its own file):
    /// shards, buffers and `optimizer`'s state. A collective: the ranks agree before
    /// anything is written.
    ///
    /// # Errors
    /// [`DistError::Fsdp`] on every rank, with nothing loaded anywhere, when any rank's file
    /// cannot be read or was written by a world of another size, by another rank, or for
    /// another model (another shard layout), or when its optimizer state does not load;
    /// the message names each failing rank and why.
    pub fn load_sharded(&self, path: impl AsRef<Path>, optimizer: &mut impl Optimizer) -> Result<()> {
        const AT: &str = "FullyShardedDataParallel::load_sharded";
        let path = path.as_ref();
        let before = optimizer.state_dict();
        let local = self.read_shard(path).and_then(|(sd, opt)| {
            optimizer
                .load_state_dict(&opt)
                .map_err(|e| format!("{}: its optimizer state does not load: {e}", path.display()))?;
            Ok(sd)
        });
        let verdict = agree(&self.shared.group, local.as_ref().map(|_| ()).map_err(Clone::clone));
        let sd = match (verdict, local) {
            (Ok(()), Ok(sd)) => sd,
            (verdict, local) => {
                if local.is_ok() {
                    // This rank's optimizer took its part: put it back as it was.
                    optimizer
                        .load_state_dict(&before)
                        .unwrap_or_else(|e| panic!("{AT}: cannot restore the optimizer's previous state: {e}"));
                }
                return Err(fsdp_err(AT, verdict.err().unwrap_or_default()));
            }
        };
        no_grad(|| {
            for unit in &self.shared.units {
                unit.shard.copy_(sd.get(&format!("model.{}", unit.shard_name)).expect("checked"));
            }
            for (name, t, persistent) in &self.buffers {
                if *persistent {
                    t.copy_(sd.get(&format!("model.{name}")).expect("checked"));
                }
            }
        });
        Ok(())
    }

    /// Reads and checks this rank's checkpoint file: the model part and the optimizer state.
    fn read_shard(&self, path: &Path) -> std::result::Result<(StateDict, OptimizerState), String> {
        let g = &self.shared.group;
        let shown = path.display();
        let (sd, meta) = StateDict::load_with_metadata(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
        let field = |k: &str| {
            meta.get(k).ok_or_else(|| format!("{shown} is not a sharded checkpoint (no `{k}` in its metadata)"))
        };
        let world: usize =
            field("nn.fsdp.world_size")?.parse().map_err(|_| format!("{shown}: unreadable world size"))?;
        let rank: usize = field("nn.fsdp.rank")?.parse().map_err(|_| format!("{shown}: unreadable rank"))?;
        if world != g.world_size() {
            return Err(format!(
                "{shown} was saved by a world of {world} rank(s), this one has {}: a sharded checkpoint loads into the \
                 world size that wrote it (save a full state dict to change it)",
                g.world_size()
            ));
        }
        if rank != g.rank() {
            return Err(format!(
                "{shown} holds rank {rank}'s shard, not rank {}'s: give each rank its own file (`shard_path`)",
                g.rank()
            ));
        }
        let layout = field("nn.fsdp.layout")?;
        if *layout != self.layout() {
            return Err(format!(
                "{shown} was saved from another model: its shard layout (unit=elements/block) is `{layout}`, this \
                 model's is `{}`",
                self.layout()
            ));
        }
        for (key, shape) in self
            .shared
            .units
            .iter()
            .map(|u| (format!("model.{}", u.shard_name), vec![u.shard_len]))
            .chain(self.buffers.iter().filter(|b| b.2).map(|(n, t, _)| (format!("model.{n}"), t.shape().to_vec())))
        {
            match sd.get(&key) {
                Some(t) if t.shape() == shape.as_slice() => {}
                Some(t) => return Err(format!("{shown}: `{key}` has shape {:?}, expected {shape:?}", t.shape())),
                None => return Err(format!("{shown}: `{key}` is missing")),
            }
        }
        let lrs = field("nn.fsdp.lrs")?;
        let lrs = lrs
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<f64>().map_err(|_| format!("{shown}: unreadable learning rate `{s}`")))
            .collect::<std::result::Result<Vec<f64>, String>>()?;
        let mut tensors = StateDict::default();
        for (k, t) in sd.iter() {
            if let Some(k) = k.strip_prefix("optim.") {
                tensors.insert(k.to_string(), t.clone());
            }
        }
        Ok((sd, OptimizerState { tensors, lrs }))
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
            None
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

/// Every rank's `local` verdict, combined: `Ok` when every rank's is, otherwise the same
/// `Err` on every rank, naming each failing rank and its message. Two all-gathers.
fn agree(group: &ProcessGroup, local: std::result::Result<(), String>) -> std::result::Result<(), String> {
    let mine = local.err().unwrap_or_default();
    if group.world_size() == 1 {
        return if mine.is_empty() { Ok(()) } else { Err(format!("rank 0: {mine}")) };
    }
    let lens = group.all_gather(&Tensor::from_vec_i64(vec![mine.len() as i64], &[1]));
    let lens: Vec<usize> = lens.iter().map(|t| t.to_vec_i64()[0] as usize).collect();
    let longest = lens.iter().copied().max().unwrap_or(0);
    if longest == 0 {
        return Ok(());
    }
    let mut bytes: Vec<i64> = mine.bytes().map(i64::from).collect();
    bytes.resize(longest, 0);
    let all = group.all_gather(&Tensor::from_vec_i64(bytes, &[longest]));
    let parts: Vec<String> = all
        .iter()
        .zip(&lens)
        .enumerate()
        .filter(|(_, (_, &n))| n > 0)
        .map(|(r, (t, &n))| {
            let b: Vec<u8> = t.to_vec_i64()[..n].iter().map(|&b| b as u8).collect();
            format!("rank {r}: {}", String::from_utf8_lossy(&b))
        })
        .collect();
    Err(parts.join("; "))
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
        sh.free(0);
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
    nn_core::module_accessors!(base);
}

impl<M: Module + Compute> std::fmt::Display for FullyShardedDataParallel<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FullyShardedDataParallel(units: {:?}) of ", self.unit_paths())?;
        nn_core::module::fmt_module(&self.module, f)
    }
}
