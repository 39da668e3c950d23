//! `DistributedDataParallel`: one model replica per process, gradients averaged during backward.

use std::any::Any;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use nn_core::module::{HoldsState, SetChild};
use nn_core::{is_grad_enabled, Compute, HasBase, HookHandle, Item, Module, ModuleBase, Name, Tensor};

use crate::error::{DistError, Result};
use crate::group::{check_timeout, ProcessGroup};
use crate::reducer::{Reducer, ReductionStats};
use crate::structure::{broadcast_tensors, verify_same, Entry};

/// Options of [`DistributedDataParallel`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DdpConfig {
    /// Size of every bucket after the first, in MiB (PyTorch's `bucket_cap_mb`, default 25).
    pub bucket_cap_mb: f64,
    /// Size of the first bucket, in MiB: the last layers' gradients, ready first, so a small
    /// bucket starts communicating early (default 1, PyTorch's first-bucket size).
    /// Both caps `f64::INFINITY` make one bucket, reduced once backward has produced every
    /// gradient: no overlap.
    pub first_bucket_cap_mb: f64,
    /// Broadcast rank 0's buffers (batch-norm running statistics) to every rank at the start
    /// of each forward that will be followed by a synchronised backward (default `true`).
    pub broadcast_buffers: bool,
    /// Allow parameters that get no gradient in a backward pass (default `false`: such a
    /// pass is an error naming them). With `true`, their buckets are reduced at the end of
    /// backward with zeros in their place, and a parameter that no rank used keeps its
    /// `.grad` untouched; this costs the overlap of those buckets and one more all-reduce.
    pub find_unused_parameters: bool,
    /// The timeout of the wrapper's collectives (construction checks, buffer broadcasts,
    /// gradient all-reduces); `None` (the default) keeps the group's, 30 minutes unless
    /// given to [`ProcessGroup::init_with`]. See [`ProcessGroup::with_timeout`].
    pub timeout: Option<Duration>,
}

impl Default for DdpConfig {
    fn default() -> Self {
        DdpConfig {
            bucket_cap_mb: 25.0,
            first_bucket_cap_mb: 1.0,
            broadcast_buffers: true,
            find_unused_parameters: false,
            timeout: None,
        }
    }
}

/// Data-parallel training across processes (PyTorch's `DistributedDataParallel`): every
/// rank holds a replica of the model and trains it on its own share of each batch; backward
/// averages the gradients over the ranks, so after `opt.step()` the replicas stay identical.
///
/// - **Construction** checks that every rank holds the same structure (names, shapes,
///   dtypes; an error names the first difference) and broadcasts rank 0's parameters and
///   buffers to all ranks.
/// - **Backward**: gradients are grouped into buckets in reverse registration order (the
///   order backward produces them): a first bucket of about 1 MiB, then about 25 MiB each
///   ([`DdpConfig`]). Each parameter has a post-accumulate-grad hook; when the last gradient
///   of a bucket is accumulated, the bucket's averaging all-reduce is handed to the
///   communication thread and backward goes on, so communication overlaps the rest of
///   backward. Buckets are always reduced in the same order on every rank. When backward
///   ends, the averaged gradients are in every parameter's `.grad`.
/// - **Forward** runs the wrapped model (hooks included), after broadcasting rank 0's
///   buffers when `broadcast_buffers` is on.
/// - A parameter that gets no gradient makes backward panic with its name (and the job
///   end, see [`ProcessGroup::init`]) unless `find_unused_parameters` is set.
/// - [`no_sync`](DistributedDataParallel::no_sync) accumulates gradients locally over
///   several backward passes; the next synchronised one reduces the sum.
/// - **Timeouts**: a collective of the wrapper that has not completed within
///   [`DdpConfig::timeout`] (by default the group's, see
///   [`ProcessGroup#timeouts`](ProcessGroup#timeouts)) ends the job naming it, its sequence
///   number and the ranks that did not arrive, instead of hanging on a dead or stuck rank.
///
/// The wrapper is a [`Module`] whose parameters, buffers, sub-modules and `state_dict` keys
/// are the wrapped model's own (no `module.` prefix), so checkpoints load into the bare
/// model and back. Its hooks are its own: register them on the wrapper or on the model.
///
/// ```
/// use nn_core::functional::cross_entropy;
/// use nn_core::optim::{Optimizer, Sgd, SgdConfig};
/// use nn_core::{Forward, Module, Tensor};
/// use nn_distributed::{DistributedDataParallel, ProcessGroup};
/// use nn_layers::{Linear, ReLU, Sequential};
///
/// let group = ProcessGroup::init()?;
/// let model = Sequential::new().add(Linear::new(4, 8)).add(ReLU::new()).add(Linear::new(8, 3));
/// let ddp = DistributedDataParallel::new(model, &group)?;
/// assert_eq!(ddp.state_dict().keys().collect::<Vec<_>>(), ["0.weight", "0.bias", "2.weight", "2.bias"]);
/// let mut opt = Sgd::new(ddp.parameters(), SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() });
/// // Each rank feeds its own share of the batch (see nn_data::DistributedSampler).
/// let (x, y) = (Tensor::randn(&[6, 4]), Tensor::from_vec_i64(vec![0, 1, 2, 0, 1, 2], &[6]));
/// opt.zero_grad();
/// cross_entropy(&ddp.forward(&x), &y).backward(); // gradients averaged over the ranks here
/// opt.step();
/// # Ok::<(), nn_distributed::DistError>(())
/// ```
pub struct DistributedDataParallel<M: Module> {
    module: M,
    group: ProcessGroup,
    reducer: Arc<Reducer>,
    config: DdpConfig,
    base: ModuleBase,
    _hooks: RemoveOnDrop,
}

/// Removes the gradient hooks when the wrapper goes (also by `into_inner`).
struct RemoveOnDrop(Vec<HookHandle>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for h in self.0.drain(..) {
            h.remove();
        }
    }
}

impl<M: Module + Compute> DistributedDataParallel<M> {
    /// Wraps `module` with the default [`DdpConfig`]; every rank calls it with the same
    /// model structure.
    ///
    /// # Errors
    /// [`DistError::ModelMismatch`] naming the first parameter or buffer whose shape or dtype
    /// differs across ranks (every rank gets the error); [`DistError::InvalidConfig`] for a
    /// model with lazy layers not yet initialised.
    pub fn new(module: M, group: &ProcessGroup) -> Result<Self> {
        Self::with_config(module, group, DdpConfig::default())
    }

    /// Wraps `module` with explicit options.
    ///
    /// # Errors
    /// As [`new`](DistributedDataParallel::new), [`DistError::InvalidConfig`] for a bucket
    /// cap that is not positive and [`DistError::ZeroTimeout`] for a zero timeout.
    pub fn with_config(module: M, group: &ProcessGroup, config: DdpConfig) -> Result<Self> {
        for (name, cap) in
            [("bucket_cap_mb", config.bucket_cap_mb), ("first_bucket_cap_mb", config.first_bucket_cap_mb)]
        {
            if cap.is_nan() || cap <= 0.0 {
                return Err(DistError::InvalidConfig(format!("{name} must be positive, got {cap}")));
            }
        }
        let group = &match config.timeout {
            Some(t) => {
                check_timeout(t, "DistributedDataParallel::with_config (DdpConfig::timeout)")?;
                group.with_timeout(t)?
            }
            None => group.clone(),
        };
        if let Some((path, _)) = module.first_uninitialized() {
            // Lazy layers have no parameters yet: they would be neither broadcast nor
            // reduced, and each rank would train its own (PyTorch refuses them too).
            let at = if path.is_empty() { "the model itself".to_string() } else { format!("`{path}`") };
            return Err(DistError::InvalidConfig(format!(
                "the model has lazy layers whose parameters are not initialised yet ({at}): run one forward pass \
                 (on every rank) before wrapping it in DistributedDataParallel"
            )));
        }
        verify_same_structure(&module, group)?;
        let states = unique_tensors(module.named_parameters().into_iter().map(|(_, p)| p.tensor().clone()));
        let buffers = unique_tensors(module.named_buffers().into_iter().map(|(_, t)| t));
        broadcast_tensors(group, &[states, buffers].concat(), 0);
        let trained = module.named_parameters().into_iter().filter(|(_, p)| p.requires_grad()).collect();
        let (reducer, hooks) = Reducer::new(
            group.clone(),
            trained,
            config.first_bucket_cap_mb,
            config.bucket_cap_mb,
            config.find_unused_parameters,
        );
        Ok(DistributedDataParallel {
            module,
            group: group.clone(),
            reducer,
            config,
            base: ModuleBase::new(),
            _hooks: RemoveOnDrop(hooks),
        })
    }

    /// Runs `f` without gradient synchronisation (PyTorch's `no_sync` context): forward
    /// passes made inside it are followed by backward passes that only accumulate into the
    /// local `.grad`; the first synchronised backward after it reduces the accumulated sum.
    /// Gradient accumulation over `k` micro-batches:
    ///
    /// ```
    /// # use nn_core::{Forward, Tensor};
    /// # use nn_distributed::{DistributedDataParallel, ProcessGroup};
    /// # let group = ProcessGroup::init()?;
    /// # let ddp = DistributedDataParallel::new(nn_layers::Linear::new(2, 1), &group)?;
    /// # let micro = vec![Tensor::ones(&[4, 2]); 3];
    /// let (last, rest) = micro.split_last().unwrap();
    /// ddp.no_sync(|| for x in rest { ddp.forward(x).sum().backward() });
    /// ddp.forward(last).sum().backward(); // reduces the gradients of all three
    /// # Ok::<(), nn_distributed::DistError>(())
    /// ```
    pub fn no_sync<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore<'a>(&'a Reducer, bool);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                self.0.set_no_sync(self.1);
            }
        }
        let _restore = Restore(&self.reducer, self.reducer.set_no_sync(true));
        f()
    }

    /// The wrapped model.
    pub fn module(&self) -> &M {
        &self.module
    }

    /// The wrapped model, mutably. Do not add, replace, unfreeze or convert its parameters:
    /// the buckets were built from them, and the next forward panics naming the change.
    pub fn module_mut(&mut self) -> &mut M {
        &mut self.module
    }

    /// Unwraps the model (its gradient hooks are removed).
    pub fn into_inner(self) -> M {
        self.module
    }

    /// The process group (with the wrapper's timeout).
    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// The options.
    pub fn config(&self) -> &DdpConfig {
        &self.config
    }

    /// How the last synchronised backward reduced its gradients: how many buckets, and how
    /// many of them started communicating before backward had produced every gradient.
    pub fn reduction_stats(&self) -> ReductionStats {
        self.reducer.stats()
    }

    pub(crate) fn reducer(&self) -> &Arc<Reducer> {
        &self.reducer
    }

    /// The names of the parameters of each gradient bucket, in the order the buckets are
    /// reduced (and each bucket's parameters in their order in the flat buffer).
    pub fn bucket_parameter_names(&self) -> Vec<Vec<String>> {
        self.reducer.bucket_names()
    }
}

impl<M: Module + Compute> HasBase for DistributedDataParallel<M> {
    fn module_base(&self) -> &ModuleBase {
        &self.base
    }
}

impl<M: Module + Compute> Compute for DistributedDataParallel<M> {
    type Input = M::Input;
    type Output = M::Output;

    /// With grad on: checks the parameters, broadcasts buffers when asked and arms the
    /// reducer for the coming backward (for local accumulation inside `no_sync`); then runs
    /// the model.
    ///
    /// A forward without grad (evaluation, a target computed with the same network) leaves
    /// the reducer alone: a training forward's backward after it is still averaged, as in
    /// PyTorch.
    ///
    /// # Panics
    /// When a parameter that requires grad was added, replaced or unfrozen after wrapping,
    /// or changed dtype (its gradient would not be averaged, or averaged in the old dtype).
    fn compute(&self, input: &M::Input) -> M::Output {
        if is_grad_enabled() {
            self.reducer.check_parameters(&self.module);
            let sync = !self.reducer.no_sync.load(std::sync::atomic::Ordering::Acquire);
            if sync && self.config.broadcast_buffers && self.group.world_size() > 1 {
                let buffers = unique_tensors(self.module.named_buffers().into_iter().map(|(_, t)| t));
                broadcast_tensors(&self.group, &buffers, 0);
            }
            self.reducer.prepare_for_forward(sync);
        }
        nn_core::Forward::forward(&self.module, input)
    }
}

impl<M: Module> HoldsState for DistributedDataParallel<M> {}

impl<M: Module + Compute> Module for DistributedDataParallel<M> {
    fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        self.module.visit(f)
    }
    fn visit_modules_mut<'a>(&'a mut self, f: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {
        self.module.visit_modules_mut(f)
    }
    fn type_name(&self) -> &'static str {
        "DistributedDataParallel"
    }
    /// Refused: a copy would be a second replica with no process group of its own (its
    /// gradients would never be averaged). Copy the model: `ddp.module().deep_copy()`.
    #[track_caller]
    fn deep_copy_into(&self, _: &mut nn_core::module::DeepCopier, _: nn_core::module::CopySlot<'_>) {
        panic!(
            "deep_copy: a DistributedDataParallel wrapper is not copied (the copy would have no process group of \
             its own, so its gradients would never be averaged); copy the model it wraps, `ddp.module().deep_copy()`, \
             and wrap the copy if it trains"
        );
    }
    fn extra_repr(&self) -> String {
        self.module.extra_repr()
    }
    fn __set_child(&mut self, name: &str, slot: &mut dyn Any) -> SetChild {
        self.module.__set_child(name, slot)
    }
    fn is_uninitialized(&self) -> bool {
        self.module.is_uninitialized()
    }
    /// The model: its entries are the wrapper's, so its state-dict hooks run as the
    /// wrapper's, and its layout version and extra state are the wrapper's.
    fn transparent_inner(&self) -> Option<&dyn Module> {
        Some(&self.module)
    }
    fn state_dict_version(&self) -> Option<u32> {
        self.module.state_dict_version()
    }
    fn has_extra_state(&self) -> bool {
        self.module.has_extra_state()
    }
    fn extra_state_json(&self) -> std::result::Result<serde_json::Value, serde_json::Error> {
        self.module.extra_state_json()
    }
    fn check_extra_state_json(&self, state: &serde_json::Value) -> std::result::Result<(), serde_json::Error> {
        self.module.check_extra_state_json(state)
    }
    fn set_extra_state_json(&mut self, state: &serde_json::Value) {
        self.module.set_extra_state_json(state)
    }
    /// The wrapper's flag and the whole model's.
    fn set_training(&mut self, training: bool) {
        self.base.set_training(training);
        self.module.set_training(training);
    }
    /// `f` on the model's sub-modules and the model itself (children first), then on the
    /// wrapper.
    fn apply(&mut self, f: &mut dyn FnMut(&mut dyn Module)) {
        self.module.apply(f);
        f(self);
    }
    nn_core::module_accessors!(base);
}

impl<M: Module + Compute> std::fmt::Display for DistributedDataParallel<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        nn_core::module::fmt_module(self, f)
    }
}

/// Tensors deduplicated by identity, in order (tied parameters are sent once).
fn unique_tensors(ts: impl Iterator<Item = Tensor>) -> Vec<Tensor> {
    let mut seen = HashSet::new();
    ts.filter(|t| seen.insert(t.id())).collect()
}

/// Every rank's parameter and buffer names, dtypes, `requires_grad` and shapes must agree
/// with rank 0's; all ranks see all of them, so all fail alike.
fn verify_same_structure<M: Module>(module: &M, group: &ProcessGroup) -> Result<()> {
    let mut entries: Vec<Entry> =
        module.named_parameters().into_iter().map(|(n, p)| (n, p.tensor().clone(), p.requires_grad())).collect();
    entries.extend(module.named_buffers().into_iter().map(|(n, t)| (n, t, false)));
    verify_same(group, &entries, "parameters and buffers").map_err(DistError::ModelMismatch)
}
