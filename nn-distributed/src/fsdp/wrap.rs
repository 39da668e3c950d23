//! Wrapping a model in a `FullyShardedDataParallel`: the constructors and their steps, in
//! the order [`with_config`](FullyShardedDataParallel::with_config) runs them. The checks
//! every rank makes alike (lazy layers, the model's structure across ranks, frozen or
//! non-CPU parameters, the policy's units, tied parameters, each unit's dtype), rank 0's
//! values broadcast, each unit's parameters laid out flat and sharded, and the hooks that
//! gather, free and reduce the units during a step.
//!
//! Uses the wrapper's own module (`mod.rs`: the struct, [`RemoveOnDrop`], [`fsdp_err`]),
//! `config`, `policy` and `runtime`; none of them uses this one.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use nn_core::{Compute, DType, Device, HookHandle, Module, ModuleBase, Parameter, Tensor, TensorId};

use super::config::FsdpConfig;
use super::policy::FsdpPolicy;
use super::runtime::{Shared, Unit};
use super::{fsdp_err, FullyShardedDataParallel, RemoveOnDrop};
use crate::comm::Buf;
use crate::error::Result;
use crate::group::{check_timeout, ProcessGroup};
use crate::structure::{broadcast_tensors, verify_same, Entry};

/// The call the construction errors name (both constructors report as `new`).
const AT: &str = "FullyShardedDataParallel::new";

impl<M: Module + Compute> FullyShardedDataParallel<M> {
    /// Wraps `module` with the default [`FsdpConfig`]; every rank calls it with the same
    /// model structure and policy.
    ///
    /// # Errors
    /// [`DistError::Fsdp`](crate::DistError::Fsdp) (on every rank) when the model differs
    /// across ranks, when a unit has no hooks (no [`ModuleBase`]), mixes dtypes or holds a
    /// non-floating-point parameter, or when a parameter does not require grad (freeze
    /// nothing in a model to shard).
    pub fn new(module: M, group: &ProcessGroup, policy: FsdpPolicy) -> Result<Self> {
        Self::with_config(module, group, policy, FsdpConfig::default())
    }

    /// Wraps `module` with explicit options.
    ///
    /// # Errors
    /// As [`new`](FullyShardedDataParallel::new), and
    /// [`DistError::ZeroTimeout`](crate::DistError::ZeroTimeout) for a zero timeout.
    pub fn with_config(module: M, group: &ProcessGroup, policy: FsdpPolicy, config: FsdpConfig) -> Result<Self> {
        let group = &group_with_timeout(group, config.timeout)?;
        check_initialised(&module)?;
        let named = module.named_parameters();
        check_parameters(group, &module, &named)?;
        // Rank 0's values everywhere, then each rank keeps its blocks.
        broadcast_from_rank0(group, &module, &named);
        let units = UnitPaths::choose(&module, &policy)?;
        units.check_tied_parameters(&module, &named)?;
        let shared = Arc::new(Shared::new(group.clone(), units.shard(group, &named)?, &config));
        let hooks = register_hooks(&shared, &module);
        let (expected_state, buffers) = state_layout(&module);
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
}

/// `group`, or a handle on it with `timeout` (checked: not zero).
fn group_with_timeout(group: &ProcessGroup, timeout: Option<Duration>) -> Result<ProcessGroup> {
    match timeout {
        Some(t) => {
            check_timeout(t, "FullyShardedDataParallel::with_config (FsdpConfig::timeout)")?;
            group.with_timeout(t)
        }
        None => Ok(group.clone()),
    }
}

/// Refuses a model with lazy layers: their parameters do not exist yet, so there is nothing
/// to shard.
fn check_initialised(module: &dyn Module) -> Result<()> {
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
    Ok(())
}

/// Checks that every rank holds the same parameters and buffers (a collective), and that
/// every parameter is trainable and on the CPU.
fn check_parameters(group: &ProcessGroup, module: &dyn Module, named: &[(String, Parameter)]) -> Result<()> {
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
    Ok(())
}

/// Copies rank 0's parameters and buffers into every rank's (a collective).
fn broadcast_from_rank0(group: &ProcessGroup, module: &dyn Module, named: &[(String, Parameter)]) {
    let buffers_now: Vec<Tensor> = module.named_buffers().into_iter().map(|(_, t)| t).collect();
    let params_now: Vec<Tensor> = named.iter().map(|(_, p)| p.tensor().clone()).collect();
    broadcast_tensors(group, &[params_now, buffers_now].concat(), 0);
}

/// The units' dotted paths in pre-order, the root (`""`) first.
struct UnitPaths(Vec<String>);

impl UnitPaths {
    /// The units `policy` picks in `module`, refusing a policy whose types the model does
    /// not have and a unit without hooks.
    fn choose(module: &dyn Module, policy: &FsdpPolicy) -> Result<UnitPaths> {
        if let Some(name) = policy.unmatched_types(module).first() {
            return Err(fsdp_err(
                AT,
                format!(
                    "the policy wraps modules of type `{name}`, and the model has none: every parameter would go \
                     into the root unit (a lazy layer is the layer it became after its first forward)"
                ),
            ));
        }
        let modules: HashMap<String, &dyn Module> = module.named_modules().into_iter().collect();
        let mut paths = vec![String::new()];
        paths.extend(policy.units(module));
        for path in &paths[1..] {
            if modules[path].base().is_none() {
                return Err(fsdp_err(
                    AT,
                    format!("the unit `{path}` has no hooks (no ModuleBase): it cannot be wrapped"),
                ));
            }
        }
        Ok(UnitPaths(paths))
    }

    /// The unit that owns the parameter named `name`: the innermost unit whose path
    /// prefixes it, or the root.
    fn owner(&self, name: &str) -> usize {
        let paths = &self.0;
        (1..paths.len())
            .filter(|&u| name.starts_with(&format!("{}.", paths[u])))
            .max_by_key(|&u| paths[u].len())
            .unwrap_or(0)
    }

    /// Whether unit `inner` runs while unit `outer` is gathered: it is `outer`, or nested
    /// in it (every unit is nested in the root).
    fn within(&self, outer: usize, inner: usize) -> bool {
        let paths = &self.0;
        outer == 0 || inner == outer || paths[inner].starts_with(&format!("{}.", paths[outer]))
    }

    /// A parameter registered under several names (tied weights) lives in the unit of its
    /// first name. Every other user must run while that unit is gathered: inside it, or
    /// inside a unit nested in it. Otherwise its forward would meet a freed (meta) tensor;
    /// refused here, on every rank alike, naming both places.
    fn check_tied_parameters(&self, module: &dyn Module, named: &[(String, Parameter)]) -> Result<()> {
        let first: HashMap<TensorId, &str> = named.iter().map(|(n, p)| (p.id(), n.as_str())).collect();
        for (path, m) in module.named_modules() {
            for (rel, p) in m.named_parameters() {
                let name = if path.is_empty() { rel } else { format!("{path}.{rel}") };
                let home = first[&p.id()];
                if !self.within(self.owner(home), self.owner(&name)) {
                    return Err(fsdp_err(
                        AT,
                        format!(
                            "parameter `{home}` (unit `{}`) is also `{name}` (unit `{}`): a tied parameter must \
                             belong to a unit that is gathered wherever it is used; wrap both users in one unit \
                             (or leave them to an enclosing one)",
                            self.0[self.owner(home)],
                            self.0[self.owner(&name)]
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every unit with its own parameters (those it owns, in registration order) laid out
    /// flat and this rank's block of them as its shard.
    fn shard(self, group: &ProcessGroup, named: &[(String, Parameter)]) -> Result<Vec<Unit>> {
        let mut own: Vec<Vec<(String, Parameter)>> = vec![Vec::new(); self.0.len()];
        for (name, p) in named {
            own[self.owner(name)].push((name.clone(), p.clone()));
        }
        self.0
            .into_iter()
            .zip(own)
            .map(|(path, members)| shard_unit(path, members, group.rank(), group.world_size()))
            .collect()
    }
}

/// The unit at `path` over its parameters `members`: their values end to end, padded with
/// zeros to a multiple of `world`, rank `rank` keeping block `rank` as the shard. Refuses
/// mixed or non-floating-point dtypes.
fn shard_unit(path: String, members: Vec<(String, Parameter)>, rank: usize, world: usize) -> Result<Unit> {
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
    Ok(Unit { path, names, params, offsets, dtype, numel, shard_len, shard, shard_name })
}

/// A post-accumulate-grad hook on every unit's parameters (counting its gradients), and on
/// every unit but the root (which [`compute`](Compute::compute) gathers) a forward pre-hook
/// that gathers it and a forward hook that frees it.
fn register_hooks(shared: &Arc<Shared>, module: &dyn Module) -> Vec<HookHandle> {
    let modules: HashMap<String, &dyn Module> = module.named_modules().into_iter().collect();
    let mut hooks = Vec::new();
    for (u, unit) in shared.units.iter().enumerate() {
        for j in 0..unit.params.len() {
            let weak: Weak<Shared> = Arc::downgrade(shared);
            hooks.push(unit.params[j].register_post_accumulate_grad_hook(move |_| {
                if let Some(s) = weak.upgrade() {
                    s.mark_ready(u, j);
                }
            }));
        }
        if u == 0 {
            continue; // the root gathers in `compute`
        }
        let base = modules[&unit.path].base().expect("checked by UnitPaths::choose");
        let weak = Arc::downgrade(shared);
        hooks.push(base.register_forward_pre_hook(move |_| {
            if let Some(s) = weak.upgrade() {
                s.pre_forward(u);
            }
            None
        }));
        let weak = Arc::downgrade(shared);
        hooks.push(base.register_forward_hook(move |_, y| weak.upgrade().and_then(|s| s.post_forward(u, y))));
    }
    hooks
}

/// The model's state-dict entries (key, shape, dtype), to check a full state dict against,
/// and every buffer (name, tensor, persistent: in the state dict).
type StateLayout = (Vec<(String, Vec<usize>, DType)>, Vec<(String, Tensor, bool)>);

/// The [`StateLayout`] of `module`.
fn state_layout(module: &dyn Module) -> StateLayout {
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
    (expected_state, buffers)
}
