//! The machinery of a `FullyShardedDataParallel` during a step: each unit's shard and
//! parameters, gathering and freeing them around a unit's forward (with the next unit's
//! all-gather prefetched), and reduce-scattering each unit's gradients during backward.
//!
//! Uses `config` (the options and counts) and the crate's `comm` and `group`; the wrapper
//! (`mod.rs`), its construction (`wrap.rs`) and its checkpoints use this module, never the
//! other way round.

use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, MutexGuard};

use nn_core::autograd::{custom_op, queue_callback};
use nn_core::{is_grad_enabled, DType, Device, Parameter, Tensor};

use super::config::{FsdpConfig, FsdpStats};
use crate::comm::{to_wire, Buf, Op};
use crate::group::{recv, ProcessGroup};

/// One unit: its own parameters and this rank's shard of them.
pub(super) struct Unit {
    /// Dotted path (`""`: the root).
    pub(super) path: String,
    pub(super) names: Vec<String>,
    pub(super) params: Vec<Parameter>,
    /// Each parameter's offset in the flat vector.
    pub(super) offsets: Vec<usize>,
    pub(super) dtype: DType,
    /// Elements of the flat vector, before padding.
    pub(super) numel: usize,
    /// Elements of each rank's block (the padded length over the world size).
    pub(super) shard_len: usize,
    /// This rank's block, updated by the optimizer.
    pub(super) shard: Parameter,
    /// The shard's name in [`Module::named_parameters`] (`<path>.flat_param`).
    pub(super) shard_name: String,
}

/// Where the wrapper stands in the current forward and backward.
pub(super) struct State {
    /// Per unit: its parameters hold their full values.
    pub(super) gathered: Vec<bool>,
    /// Per unit: an all-gather started and not yet waited for.
    pub(super) inflight: Vec<Option<Receiver<Buf>>>,
    /// Per unit: its shard's version when the last forward gathered it.
    pub(super) forward_versions: Vec<Option<u64>>,
    /// The forward ran with grad on: its backward reduces gradients.
    pub(super) armed: bool,
    /// A forward without grad disarmed a training forward whose backward had not run: that
    /// backward, should it come, is refused naming the cause.
    pub(super) disarmed_pending: bool,
    pub(super) ready: Vec<Vec<bool>>,
    pub(super) pending: Vec<usize>,
    /// The next unit to reduce, as a position in reverse pre-order.
    pub(super) next_rs: usize,
    pub(super) rs: Vec<Option<Receiver<Buf>>>,
    pub(super) finalize_queued: bool,
    /// Units in the order their forward returned in the current armed forward (the root
    /// last): backward reaches them in the reverse order.
    pub(super) post_order: Vec<usize>,
    pub(super) stats: FsdpStats,
}

pub(super) struct Shared {
    pub(super) group: ProcessGroup,
    pub(super) units: Vec<Unit>,
    pub(super) prefetch: bool,
    /// [`FsdpConfig::reshard_after_forward`].
    pub(super) reshard: bool,
    pub(super) backward_prefetch: bool,
    pub(super) state: Mutex<State>,
}

impl Shared {
    /// The runtime of a wrapper over `units`, with `config`'s prefetching and resharding;
    /// every unit is freed (its parameters hold no values until a forward gathers it).
    pub(super) fn new(group: ProcessGroup, units: Vec<Unit>, config: &FsdpConfig) -> Shared {
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
        let shared = Shared {
            group,
            units,
            prefetch: config.forward_prefetch,
            reshard: config.reshard_after_forward,
            backward_prefetch: config.backward_prefetch,
            state: Mutex::new(state),
        };
        for u in 0..n {
            if shared.reshard {
                // Views and saved values read the parameter's slot: freeing it frees them.
                shared.units[u].params.iter().for_each(|p| p.share_storage_with_views());
            }
            shared.free(u);
        }
        shared
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn launch_gather(&self, st: &mut State, u: usize) {
        let buf = to_wire(&self.units[u].shard, "FullyShardedDataParallel all_gather");
        st.inflight[u] = Some(self.group.submit(Op::AllGather { buf }));
    }

    /// Makes unit `u`'s parameters hold their full values (waiting for a prefetched
    /// all-gather, or running one), for its forward or (`backward`) its backward.
    pub(super) fn gather(&self, u: usize, backward: bool) {
        let unit = &self.units[u];
        let rx = {
            let mut st = self.lock();
            if st.gathered[u] {
                return;
            }
            // The backward of a forward must gather the values that forward used: a shard
            // stepped in between (an optimizer step before `backward`) would be gathered
            // new, and the old activations' gradients computed against new weights. PyTorch
            // raises "modified by an inplace operation" there.
            let now = unit.shard.version();
            match (backward, st.forward_versions[u]) {
                (true, Some(then)) if then != now => {
                    drop(st);
                    panic!(
                        "FullyShardedDataParallel: the shard of unit `{}` was written (an optimizer step?) between the \
                         forward and its backward: the backward needs the values the forward used; step after \
                         backward",
                        unit.path
                    );
                }
                (false, _) => st.forward_versions[u] = Some(now),
                _ => {}
            }
            if backward {
                st.stats.backward_gathers += 1;
            } else {
                st.stats.gathers += 1;
            }
            if unit.numel == 0 {
                st.gathered[u] = true;
                return;
            }
            match st.inflight[u].take() {
                Some(rx) => {
                    if backward {
                        st.stats.backward_prefetched += 1;
                    } else {
                        st.stats.prefetched += 1;
                    }
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
    pub(super) fn pre_forward(&self, u: usize) {
        self.gather(u, false);
        if self.prefetch {
            let mut st = self.lock();
            if let Some(next) = (u + 1..self.units.len()).find(|&v| self.units[v].numel > 0) {
                if !st.gathered[next] && st.inflight[next].is_none() {
                    self.launch_gather(&mut st, next);
                }
            }
        }
    }

    /// Forward hook of unit `u` (and the end of the root's forward), given the unit's
    /// output. Frees the unit; in a forward whose backward will run with
    /// `reshard_after_forward`, returns the output passed through an identity whose
    /// backward gathers the unit again (and prefetches the next unit of backward) before
    /// the unit's own backward runs.
    pub(super) fn post_forward(self: &Arc<Self>, u: usize, y: &Tensor) -> Option<Tensor> {
        let armed = self.lock().armed && is_grad_enabled();
        if !armed {
            self.free(u);
            return None;
        }
        if !self.reshard {
            // The parameters go back to meta; what autograd saved keeps their values.
            self.free(u);
            return None;
        }
        if !y.requires_grad() {
            // No gradient will reach this output, so nothing would gather the unit before
            // the backward of whatever else its ops feed: keep it gathered until its
            // gradients are in (or backward ends).
            self.lock().post_order.push(u);
            return None;
        }
        self.free(u);
        self.lock().post_order.push(u);
        let weak = Arc::downgrade(self);
        Some(custom_op("FsdpPreBackward", &[y], y, move |g| {
            if let Some(s) = weak.upgrade() {
                s.pre_backward(u);
            }
            vec![Some(g.clone())]
        }))
    }

    /// The gradient reached unit `u`'s output: gather it for its backward, and start the
    /// all-gather of the unit whose backward comes after it.
    fn pre_backward(&self, u: usize) {
        {
            let st = self.lock();
            if !st.armed && st.disarmed_pending {
                drop(st);
                panic!(
                    "FullyShardedDataParallel: a backward on rank {} through a training forward that a later forward \
                     without grad disarmed (its units were freed, and its gradients would not be reduced); run \
                     forwards without grad before the training forward or after its backward",
                    self.group.rank()
                );
            }
            if !st.armed || st.pending[u] == 0 {
                return; // its backward is over (a second use of the unit's output)
            }
        }
        self.gather(u, true);
        if !self.backward_prefetch {
            return;
        }
        let mut st = self.lock();
        let Some(i) = st.post_order.iter().rposition(|&v| v == u) else { return };
        let next = st.post_order[..i].iter().rev().copied().find(|&v| self.units[v].numel > 0 && st.pending[v] > 0);
        if let Some(v) = next {
            if !st.gathered[v] && st.inflight[v].is_none() {
                self.launch_gather(&mut st, v);
            }
        }
    }

    /// Sets unit `u`'s parameters back to meta.
    pub(super) fn free(&self, u: usize) {
        self.free_params(u);
        self.lock().gathered[u] = false;
    }

    fn free_params(&self, u: usize) {
        for p in &self.units[u].params {
            p.set_data(&Tensor::full_on(p.shape(), 0.0, p.dtype(), Device::Meta));
        }
    }

    /// Waits for (and drops) every all-gather still in flight: a prefetched unit that the
    /// forward did not run.
    pub(super) fn drain(&self) {
        let pending: Vec<Receiver<Buf>> = self.lock().inflight.iter_mut().filter_map(Option::take).collect();
        for rx in pending {
            recv(&rx, "FullyShardedDataParallel all_gather");
        }
    }

    pub(super) fn prepare_for_forward(&self, armed: bool) {
        let mut st = self.lock();
        for u in 0..self.units.len() {
            if st.gathered[u] {
                // Kept from a forward whose backward did not run: the shards may have
                // changed since, so gather afresh.
                self.free_params(u);
                st.gathered[u] = false;
            }
        }
        st.disarmed_pending = (st.armed || st.disarmed_pending) && !armed;
        reset(&mut st, &self.units);
        st.armed = armed;
    }

    /// Parameter `j` of unit `u` has its gradient of this backward.
    pub(super) fn mark_ready(self: &Arc<Self>, u: usize, j: usize) {
        let mut st = self.lock();
        if !st.armed {
            // No training forward of the wrapper prepared this gradient (a second backward
            // after the reduced one, a backward after a forward without grad, or through
            // the bare model): it would stay on the full parameter, never reduced, and be
            // added into the next step's reduce-scatter.
            drop(st);
            panic!(
                "FullyShardedDataParallel: parameter `{}` received a gradient on rank {} that no training forward \
                 of the wrapper prepared (a second backward after the reduced one, a backward after a forward \
                 without grad, or a backward through the bare model): it would not be reduced. Run the wrapper's \
                 forward, with grad, before each backward",
                self.units[u].names[j],
                self.group.rank()
            );
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
        if st.pending[u] == 0 && st.gathered[u] {
            // Every use of the unit's parameters in this backward is over.
            self.free_params(u);
            st.gathered[u] = false;
        }
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
    pub(super) fn launch_ready(&self, st: &mut State) {
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
    pub(super) fn launch_reduce_scatter(&self, u: usize) -> Option<Receiver<Buf>> {
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
    pub(super) fn finalize(&self) {
        let mut st = self.lock();
        if !st.armed {
            return;
        }
        for u in 0..self.units.len() {
            st.pending[u] = 0;
            if st.gathered[u] {
                // A unit some of whose parameters got no gradient.
                self.free_params(u);
                st.gathered[u] = false;
            }
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

pub(super) fn reset(st: &mut State, units: &[Unit]) {
    st.armed = false;
    for (u, unit) in units.iter().enumerate() {
        st.ready[u].iter_mut().for_each(|r| *r = false);
        st.pending[u] = unit.params.len();
        st.rs[u] = None;
    }
    st.next_rs = 0;
    st.finalize_queued = false;
    st.post_order.clear();
}
