//! Gradient buckets and their reduction during backward (PyTorch's `Reducer`).
//!
//! Parameters are grouped into buckets in reverse registration order (roughly the order
//! backward produces their gradients): a small first bucket, so communication starts early,
//! then larger ones, one dtype per bucket. Each parameter carries a post-accumulate-grad
//! hook; when the last gradient of a bucket has been accumulated, the bucket is flattened
//! and its averaging all-reduce is handed to the communication thread, while backward goes
//! on. Buckets are launched strictly in order (bucket `k + 1` waits for bucket `k`), so every
//! rank issues the same collectives in the same order whatever order its hooks fire in. At
//! the end of backward (an autograd end-of-backward callback) the reduced buckets are waited
//! for and written back into each parameter's `.grad`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use nn_core::autograd::queue_callback;
use nn_core::{DType, HookHandle, Parameter};

use crate::comm::{wire_dtype, Buf, Op};
use crate::group::{recv, ProcessGroup};
use crate::reduce_op::ReduceOp;

const MIB: f64 = 1024.0 * 1024.0;

/// One bucket: parameter indices (into the reducer's list), in the order their gradients
/// are laid out in the flat buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bucket {
    pub(crate) params: Vec<usize>,
    pub(crate) wire: DType,
}

/// PyTorch's `compute_bucket_assignment_by_size`: walks `params` (dtype, numel) in reverse
/// registration order, filling one open bucket per wire dtype; a bucket closes once it
/// holds at least its cap (the first bucket of each dtype `first_cap_mb`, later ones
/// `cap_mb`). Buckets come out in the order they closed, then the open ones by dtype.
pub(crate) fn assign_buckets(params: &[(DType, usize)], first_cap_mb: f64, cap_mb: f64) -> Vec<Bucket> {
    struct Open {
        wire: DType,
        params: Vec<usize>,
        bytes: f64,
        closed_before: usize,
    }
    let mut open: Vec<Open> = Vec::new();
    let mut out = Vec::new();
    for i in (0..params.len()).rev() {
        let (dtype, numel) = params[i];
        let wire = wire_dtype(dtype);
        let slot = match open.iter().position(|o| o.wire == wire) {
            Some(s) => s,
            None => {
                open.push(Open { wire, params: Vec::new(), bytes: 0.0, closed_before: 0 });
                open.len() - 1
            }
        };
        let o = &mut open[slot];
        o.params.push(i);
        o.bytes += (numel * dtype.size_in_bytes()) as f64;
        let cap = if o.closed_before == 0 { first_cap_mb } else { cap_mb } * MIB;
        if o.bytes >= cap {
            out.push(Bucket { params: std::mem::take(&mut o.params), wire });
            o.bytes = 0.0;
            o.closed_before += 1;
        }
    }
    out.extend(open.into_iter().filter(|o| !o.params.is_empty()).map(|o| Bucket { params: o.params, wire: o.wire }));
    out
}

/// Where one iteration stands.
struct State {
    /// A forward ran with gradient synchronisation on: this backward's gradients are reduced.
    armed: bool,
    /// The last forward ran inside `no_sync`: its backward accumulates locally. Neither
    /// armed nor in `no_sync`, a gradient reaching a parameter is one no forward of the
    /// wrapper prepared (a second backward after the synchronised one ended, or a backward
    /// through the bare model): it would never be averaged, and is refused.
    in_no_sync: bool,
    /// Per parameter, whether a backward inside `no_sync` gave it a gradient since the last
    /// synchronised backward (with `find_unused_parameters`, such a parameter is used: its
    /// accumulated gradient is in the buckets).
    used_since_sync: Vec<bool>,
    ready: Vec<bool>,
    /// Per bucket, the gradients still to come.
    pending: Vec<usize>,
    /// The next bucket to launch.
    next: usize,
    works: Vec<Option<Receiver<Buf>>>,
    finalize_queued: bool,
    /// Buckets launched while some gradient of this backward was still to come.
    overlapped: usize,
    /// What the last synchronised backward did.
    last: ReductionStats,
}

/// How the last synchronised backward reduced its gradients
/// ([`DistributedDataParallel::reduction_stats`](crate::DistributedDataParallel::reduction_stats)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReductionStats {
    /// Buckets reduced.
    pub buckets: usize,
    /// Buckets whose all-reduce started while backward was still producing other gradients:
    /// the ones whose communication overlapped computation. With one bucket it is 0.
    pub overlapped: usize,
}

pub(crate) struct Reducer {
    group: ProcessGroup,
    names: Vec<String>,
    params: Vec<Parameter>,
    /// Each parameter's dtype when wrapped (its bucket's wire dtype was chosen from it).
    dtypes: Vec<DType>,
    /// Each reduced parameter's position, by identity.
    index_of: std::collections::HashMap<nn_core::TensorId, usize>,
    pub(crate) buckets: Vec<Bucket>,
    /// Per parameter, its bucket.
    bucket_of: Vec<usize>,
    find_unused: bool,
    pub(crate) no_sync: AtomicBool,
    /// Per parameter, whether this rank keeps its reduced gradient (`None`: every one).
    /// Set by `ZeroRedundancyOptimizer::shard_gradients` (ZeRO stage 2): the others' local
    /// gradients are freed as soon as their bucket is launched.
    pub(crate) owned: Mutex<Option<Arc<Vec<bool>>>>,
    state: Mutex<State>,
}

impl Reducer {
    /// A reducer over `params` (those that require grad, in registration order), with its
    /// hooks registered; the handles remove them.
    pub(crate) fn new(
        group: ProcessGroup,
        params: Vec<(String, Parameter)>,
        first_cap_mb: f64,
        cap_mb: f64,
        find_unused: bool,
    ) -> (Arc<Reducer>, Vec<HookHandle>) {
        let sizes: Vec<(DType, usize)> = params.iter().map(|(_, p)| (p.dtype(), p.numel())).collect();
        let buckets = assign_buckets(&sizes, first_cap_mb, cap_mb);
        let mut bucket_of = vec![0; params.len()];
        for (b, bucket) in buckets.iter().enumerate() {
            for &i in &bucket.params {
                bucket_of[i] = b;
            }
        }
        let (names, params): (Vec<String>, Vec<Parameter>) = params.into_iter().unzip();
        let dtypes = params.iter().map(|p| p.dtype()).collect();
        let index_of = params.iter().enumerate().map(|(i, p)| (p.id(), i)).collect();
        let state = State {
            armed: false,
            in_no_sync: false,
            used_since_sync: vec![false; params.len()],
            ready: vec![false; params.len()],
            pending: buckets.iter().map(|b| b.params.len()).collect(),
            next: 0,
            works: buckets.iter().map(|_| None).collect(),
            finalize_queued: false,
            overlapped: 0,
            last: ReductionStats::default(),
        };
        let reducer = Arc::new(Reducer {
            group,
            names,
            params,
            dtypes,
            index_of,
            buckets,
            bucket_of,
            find_unused,
            no_sync: AtomicBool::new(false),
            owned: Mutex::new(None),
            state: Mutex::new(state),
        });
        let handles = reducer
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let weak: Weak<Reducer> = Arc::downgrade(&reducer);
                p.register_post_accumulate_grad_hook(move |_| {
                    if let Some(r) = weak.upgrade() {
                        r.mark_ready(i);
                    }
                })
            })
            .collect();
        (reducer, handles)
    }

    /// The reduced parameters, in registration order.
    pub(crate) fn parameters(&self) -> &[Parameter] {
        &self.params
    }

    /// The parameter names of each bucket, in launch order.
    pub(crate) fn bucket_names(&self) -> Vec<Vec<String>> {
        self.buckets.iter().map(|b| b.params.iter().map(|&i| self.names[i].clone()).collect()).collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Called at every forward of the wrapper with grad on: a new iteration, whose backward
    /// reduces gradients when `sync` (outside `no_sync`).
    pub(crate) fn prepare_for_forward(&self, sync: bool) {
        let mut st = self.lock();
        reset(&mut st, &self.buckets);
        st.armed = sync;
        st.in_no_sync = !sync;
    }

    /// Panics when the model's parameters that require grad are no longer those the
    /// buckets were built from, or one changed dtype: a parameter added, replaced or
    /// unfrozen after wrapping has no gradient hook (its gradient would never be averaged),
    /// and one converted to another dtype would be averaged in its old bucket's dtype.
    /// (A parameter removed or frozen since gets no gradient: the end of backward names
    /// it, or treats it as unused with `find_unused_parameters`.)
    ///
    /// Runs at every forward with grad: it walks the parameters without building their
    /// names (a name is looked up only for the message).
    pub(crate) fn check_parameters(&self, module: &dyn nn_core::Module) {
        for p in module.parameters().iter().filter(|p| p.requires_grad()) {
            let problem = match self.index_of.get(&p.id()) {
                None => "requires grad but did not when the model was wrapped (it was added, replaced or unfrozen \
                         since): its gradient would never be averaged"
                    .to_string(),
                Some(&i) if p.dtype() != self.dtypes[i] => format!(
                    "is now {} but was {} when the model was wrapped: its gradient would be averaged as {}",
                    p.dtype(),
                    self.dtypes[i],
                    self.buckets[self.bucket_of[i]].wire
                ),
                Some(_) => continue,
            };
            let name = module.named_parameters().into_iter().find(|(_, q)| q.id() == p.id()).map(|(n, _)| n);
            panic!(
                "DistributedDataParallel: on rank {}, parameter `{}` {problem}. The gradient buckets are built \
                 from the parameters when the model is wrapped: change the model, then wrap it again",
                self.group.rank(),
                name.unwrap_or_default()
            );
        }
    }

    /// Parameter `i`'s gradient of this backward is in its `.grad`.
    fn mark_ready(self: &Arc<Self>, i: usize) {
        let mut st = self.lock();
        if !st.armed {
            if st.in_no_sync {
                st.used_since_sync[i] = true;
                return;
            }
            drop(st);
            panic!(
                "DistributedDataParallel: parameter `{}` received a gradient on rank {} that no forward of the \
                 wrapper prepared (a second backward after this iteration's synchronised one, or a backward \
                 through the bare model): it would not be averaged across ranks. Run the wrapper's forward before \
                 each backward; for gradients kept on this rank on purpose (accumulation, saliency maps), run that \
                 forward through the wrapper inside `no_sync`, or use the model after `into_inner()`",
                self.names[i],
                self.group.rank()
            );
        }
        if st.ready[i] {
            reset(&mut st, &self.buckets);
            drop(st);
            panic!(
                "DistributedDataParallel: parameter `{}` received its gradient twice in one iteration (a second \
                 backward through the same forward); run the forward again before each backward",
                self.names[i]
            );
        }
        st.ready[i] = true;
        if !st.finalize_queued {
            st.finalize_queued = true;
            let weak = Arc::downgrade(self);
            queue_callback(move || {
                if let Some(r) = weak.upgrade() {
                    r.finalize();
                }
            });
        }
        st.pending[self.bucket_of[i]] -= 1;
        self.launch_ready(&mut st);
    }

    /// Launches every bucket, in order, whose gradients are all in.
    fn launch_ready(&self, st: &mut State) {
        while st.next < self.buckets.len() && st.pending[st.next] == 0 {
            let b = st.next;
            st.works[b] = self.launch(b);
            st.next += 1;
            if st.ready.iter().any(|r| !r) {
                st.overlapped += 1;
            }
        }
    }

    pub(crate) fn stats(&self) -> ReductionStats {
        self.lock().last
    }

    /// Flattens bucket `b`'s gradients (zeros for a parameter without one) and starts their
    /// averaging all-reduce; in a world of one there is nothing to average, and nothing is
    /// sent.
    fn launch(&self, b: usize) -> Option<Receiver<Buf>> {
        if self.group.world_size() == 1 {
            return None;
        }
        let bucket = &self.buckets[b];
        let numel = bucket.params.iter().map(|&i| self.params[i].numel()).sum();
        let mut buf = Buf::for_dtype(bucket.wire, numel);
        let owned = self.owned.lock().unwrap_or_else(|e| e.into_inner());
        for &i in &bucket.params {
            match self.params[i].grad() {
                Some(g) => buf.extend_from(&g),
                None => buf.extend_zeros(self.params[i].numel()),
            }
            if owned.as_ref().is_some_and(|o| !o[i]) {
                // Another rank steps this parameter: its local gradient is in the bucket now.
                self.params[i].set_grad(None);
            }
        }
        Some(self.group.submit(Op::AllReduce { buf, op: ReduceOp::Avg }))
    }

    /// The end of backward: launches what is left (unused parameters, when allowed), waits
    /// for every bucket and writes the averaged gradients back.
    fn finalize(&self) {
        let mut st = self.lock();
        if !st.armed {
            return;
        }
        // Used in this backward, or in a `no_sync` one whose gradient is still there (one
        // cleared since, an abandoned micro-batch, is not a use).
        let locally_used: Vec<bool> = (0..self.params.len())
            .map(|i| st.ready[i] || (st.used_since_sync[i] && self.params[i].grad().is_some()))
            .collect();
        let missing: Vec<usize> = (0..self.params.len()).filter(|&i| !st.ready[i]).collect();
        if !missing.is_empty() {
            if !self.find_unused {
                reset(&mut st, &self.buckets);
                drop(st);
                self.unused_error(&missing);
            }
            for &i in &missing {
                st.ready[i] = true;
                st.pending[self.bucket_of[i]] -= 1;
            }
            self.launch_ready(&mut st);
        }
        debug_assert_eq!(st.next, self.buckets.len(), "every bucket is launched at the end of backward");
        // With unused parameters allowed, learn which ones no rank used: they keep their
        // `.grad` (usually none), as PyTorch leaves globally unused parameters alone.
        let used_anywhere = (self.find_unused && self.group.world_size() > 1).then(|| {
            let flags: Vec<f32> = locally_used.iter().map(|&u| if u { 1.0 } else { 0.0 }).collect();
            self.group.submit(Op::AllReduce { buf: Buf::F32(flags), op: ReduceOp::Sum })
        });
        let works: Vec<Option<Receiver<Buf>>> = st.works.iter_mut().map(Option::take).collect();
        st.last = ReductionStats { buckets: works.len(), overlapped: st.overlapped };
        reset(&mut st, &self.buckets);
        st.in_no_sync = false;
        st.used_since_sync.iter_mut().for_each(|u| *u = false);
        drop(st);
        let used_anywhere: Option<Vec<bool>> = used_anywhere.map(|rx| match recv(&rx, "find_unused_parameters") {
            Buf::F32(v) => v.into_iter().map(|c| c > 0.0).collect(),
            _ => unreachable!("sent as f32"),
        });
        for (bucket, rx) in self.buckets.iter().zip(works) {
            let Some(rx) = rx else { continue }; // a world of one
            let reduced = recv(&rx, "DistributedDataParallel gradient all_reduce");
            let owned = self.owned.lock().unwrap_or_else(|e| e.into_inner());
            let mut offset = 0;
            for &i in &bucket.params {
                let p = &self.params[i];
                if used_anywhere.as_ref().is_none_or(|u| u[i]) && owned.as_ref().is_none_or(|o| o[i]) {
                    p.set_grad(Some(reduced.tensor(offset, p.shape(), p.dtype())));
                }
                offset += p.numel();
            }
            debug_assert_eq!(offset, reduced.len());
        }
    }

    fn unused_error(&self, missing: &[usize]) -> ! {
        let names: Vec<String> = missing.iter().map(|&i| format!("`{}`", self.names[i])).collect();
        panic!(
            "DistributedDataParallel: {} parameter(s) received no gradient in this backward pass on rank {}: {}. \
             Every parameter that requires grad must take part in computing the loss on every rank; if some do \
             not, by design, wrap with `DdpConfig {{ find_unused_parameters: true, .. }}` (or freeze them with \
             `requires_grad_(false)` before wrapping; one frozen between a forward and its backward gets no \
             gradient)",
            missing.len(),
            self.group.rank(),
            names.join(", ")
        );
    }

    /// Sets whether backward passes reduce gradients (`no_sync`); returns the old value.
    pub(crate) fn set_no_sync(&self, no_sync: bool) -> bool {
        self.no_sync.swap(no_sync, Ordering::AcqRel)
    }
}

fn reset(st: &mut State, buckets: &[Bucket]) {
    st.armed = false;
    st.ready.iter_mut().for_each(|r| *r = false);
    for (p, b) in st.pending.iter_mut().zip(buckets) {
        *p = b.params.len();
    }
    st.next = 0;
    st.works.iter_mut().for_each(|w| *w = None);
    st.finalize_queued = false;
    st.overlapped = 0;
}

#[cfg(test)]
mod tests {
    use super::{assign_buckets, Bucket};
    use nn_core::DType;

    const F32: DType = DType::F32;

    fn ids(b: &[Bucket]) -> Vec<Vec<usize>> {
        b.iter().map(|b| b.params.clone()).collect()
    }

    #[test]
    fn buckets_run_in_reverse_registration_order_with_a_small_first_one() {
        // Four parameters of 0.5 MiB each (131072 f32): the first bucket closes at 1 MiB.
        let p = vec![(F32, 131_072); 4];
        assert_eq!(ids(&assign_buckets(&p, 1.0, 25.0)), [vec![3, 2], vec![1, 0]]);
        // A small cap after the first: every later parameter fills a bucket on its own.
        assert_eq!(ids(&assign_buckets(&p, 0.5, 0.25)), [vec![3], vec![2], vec![1], vec![0]]);
        // Caps larger than the model: one bucket, launched when the last gradient is in.
        assert_eq!(ids(&assign_buckets(&p, f64::INFINITY, f64::INFINITY)), [vec![3, 2, 1, 0]]);
    }

    #[test]
    fn each_bucket_holds_one_wire_dtype() {
        let p = vec![(F32, 10), (DType::F64, 10), (DType::F16, 10), (DType::F64, 10)];
        let b = assign_buckets(&p, 1.0, 25.0);
        assert_eq!(ids(&b), [vec![3, 1], vec![2, 0]]);
        assert_eq!(b[0].wire, DType::F64);
        // f16 gradients travel as f32 and share its buckets.
        assert_eq!(b[1].wire, DType::F32);
    }

    #[test]
    fn a_parameter_larger_than_the_cap_gets_its_own_bucket() {
        let p = vec![(F32, 10), (F32, 1 << 20), (F32, 10)];
        assert_eq!(ids(&assign_buckets(&p, 1.0, 1.0)), [vec![2, 1], vec![0]]);
    }
}
