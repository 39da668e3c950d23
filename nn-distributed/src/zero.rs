//! `ZeroRedundancyOptimizer`: optimizer state sharded over the ranks (ZeRO stage 1), and
//! optionally the gradients (stage 2).

use nn_core::optim::{IntoParamGroups, Optimizer, OptimizerState, ParamGroup};
use nn_core::{Parameter, StateDict, Tensor, TensorId};

use crate::error::{DistError, Result};
use crate::group::ProcessGroup;
use crate::structure::{broadcast_tensors, verify_same, Entry};

/// An optimizer whose state is sharded over the ranks (PyTorch's
/// `torch.distributed.optim.ZeroRedundancyOptimizer`, ZeRO stage 1): each rank runs any nn
/// optimizer (`inner`, built by the closure given to [`new`](ZeroRedundancyOptimizer::new))
/// over its own share of the parameters only, so each rank keeps the state (Adam's two
/// moments: twice the model) of about `1 / world_size` of the model.
///
/// - **Gradients** (optional, ZeRO stage 2):
///   [`shard_gradients`](ZeroRedundancyOptimizer::shard_gradients) makes the
///   [`DistributedDataParallel`](crate::DistributedDataParallel) wrapper keep only this
///   rank's reduced gradients.
/// - **Partition**, as PyTorch's: group by group, the parameters sorted by size (largest
///   first) each go to the rank holding the fewest elements so far (the lowest such rank);
///   [`partition`](ZeroRedundancyOptimizer::partition) lists them.
/// - **Step**: every rank updates its shard from the gradients (already averaged over the
///   ranks, by [`DistributedDataParallel`](crate::DistributedDataParallel)), then each rank
///   broadcasts its updated parameters, so every rank ends the step with the whole model,
///   identical everywhere. The result is the inner optimizer's over the whole model.
/// - **Construction** checks that every rank passes the same parameters (names, dtypes,
///   shapes, `requires_grad`, in order): otherwise every rank gets
///   [`DistError::ShardMismatch`] naming the first difference and the ranks.
/// - **State**: [`consolidate_state_dict`](ZeroRedundancyOptimizer::consolidate_state_dict)
///   (called on every rank) gathers the shards on one rank, where
///   [`state_dict`](Optimizer::state_dict) then returns the whole state, keyed and ordered
///   as the inner optimizer over the whole model would (a plain `AdamW` loads it, and this
///   optimizer loads a plain `AdamW`'s); [`load_state_dict`](Optimizer::load_state_dict) on
///   every rank with the whole state resumes, each rank keeping its shard's part.
///
/// ```
/// use nn_core::optim::{AdamW, AdamWConfig, Optimizer};
/// use nn_core::{Forward, Module, Tensor};
/// use nn_distributed::{DistributedDataParallel, ProcessGroup, ZeroRedundancyOptimizer};
/// use nn_layers::{Linear, ReLU, Sequential};
///
/// let group = ProcessGroup::init()?;
/// let ddp = DistributedDataParallel::new(Sequential::new().add(Linear::new(4, 8)).add(ReLU::new()).add(Linear::new(8, 1)), &group)?;
/// let config = AdamWConfig { lr: 1e-2, ..Default::default() };
/// let mut opt = ZeroRedundancyOptimizer::new(ddp.named_parameters(), &group, |shard| AdamW::new(shard, config))?;
/// opt.zero_grad();
/// ddp.forward(&Tensor::ones(&[2, 4])).square().sum().backward();
/// opt.step(); // this rank's shard updated, then every shard broadcast
/// opt.consolidate_state_dict(0); // on every rank
/// if group.rank() == 0 {
///     assert_eq!(opt.state_dict().tensors.len(), 4 * 3); // exp_avg, exp_avg_sq, step per parameter
/// }
/// # Ok::<(), nn_distributed::DistError>(())
/// ```
pub struct ZeroRedundancyOptimizer<O: Optimizer> {
    group: ProcessGroup,
    inner: O,
    /// Every parameter, group by group, in the order given.
    params: Vec<(String, Parameter)>,
    /// Per rank, the indices into `params` of its shard, in order.
    shards: Vec<Vec<usize>>,
    /// The whole state, on the rank it was consolidated to, until the next step or load.
    consolidated: Option<OptimizerState>,
    grads_sharded: bool,
    /// The wrapper whose gradients [`shard_gradients`](ZeroRedundancyOptimizer::shard_gradients)
    /// sharded, and the mask it set there: dropping this optimizer lifts the mask (another
    /// optimizer would otherwise lose the gradients of parameters this one no longer steps).
    mask: Option<(std::sync::Weak<crate::reducer::Reducer>, std::sync::Arc<Vec<bool>>)>,
}

impl<O: Optimizer> Drop for ZeroRedundancyOptimizer<O> {
    fn drop(&mut self) {
        if let Some(reducer) = self.mask.as_ref().and_then(|(r, _)| r.upgrade()) {
            let mut owned = reducer.owned.lock().unwrap_or_else(|e| e.into_inner());
            // Only this optimizer's mask (a later `shard_gradients` may have replaced it).
            if owned.as_ref().zip(self.mask.as_ref()).is_some_and(|(now, (_, mine))| std::sync::Arc::ptr_eq(now, mine))
            {
                *owned = None;
            }
        }
    }
}

impl<O: Optimizer> ZeroRedundancyOptimizer<O> {
    /// Shards `params` (plain, named, or in [`ParamGroup`]s) over `group`'s ranks and builds
    /// this rank's optimizer with `build`, which gets this rank's share of each group (every
    /// group is there, with its options, some maybe empty): `|shard| AdamW::new(shard,
    /// config)`. Every rank calls it with the same parameters. Its collectives are the
    /// group's, with the group's timeout.
    ///
    /// # Errors
    /// [`DistError::ShardMismatch`] (on every rank) when the ranks' parameters differ;
    /// [`DistError::ParamGroups`] for a parameter given twice, two under one name, or a
    /// group's invalid rate ([`nn_core::optim::check_param_groups`]).
    pub fn new(
        params: impl IntoParamGroups,
        group: &ProcessGroup,
        build: impl FnOnce(Vec<ParamGroup>) -> O,
    ) -> Result<Self> {
        let groups = params.into_param_groups();
        let entries: Vec<Entry> = groups
            .iter()
            .flat_map(|g| g.params.iter().map(|(n, p)| (n.clone(), p.tensor().clone(), p.requires_grad())))
            .collect();
        verify_same(group, &entries, "parameters").map_err(DistError::ShardMismatch)?;
        // Checked whole: the parameters are split over the ranks before each builds its
        // optimizer, so one parameter given twice (or two on one storage) and split across
        // two ranks would pass each rank's own check and be stepped twice.
        nn_core::optim::check_param_groups("ZeroRedundancyOptimizer", &groups).map_err(DistError::ParamGroups)?;
        let sizes: Vec<Vec<usize>> = groups.iter().map(|g| g.params.iter().map(|(_, p)| p.numel()).collect()).collect();
        let shards = partition(&sizes, group.world_size());
        let mine = &shards[group.rank()];
        let mut first = 0;
        let local_groups = groups
            .iter()
            .map(|g| {
                let range = first..first + g.params.len();
                first = range.end;
                let params = mine.iter().filter(|i| range.contains(i)).map(|&i| g.params[i - range.start].clone());
                ParamGroup { params: params.collect(), lr: g.lr, weight_decay: g.weight_decay }
            })
            .collect();
        let inner = build(local_groups);
        Ok(ZeroRedundancyOptimizer {
            group: group.clone(),
            inner,
            params: groups.into_iter().flat_map(|g| g.params).collect(),
            shards,
            consolidated: None,
            grads_sharded: false,
            mask: None,
        })
    }

    /// Shards the gradients too (ZeRO stage 2): from now on `ddp` keeps, after its
    /// all-reduce, only the gradients of the parameters this rank steps, and frees the
    /// local gradient of every other parameter as soon as its bucket is sent, so between
    /// backward and step each rank holds about `1 / world_size` of the gradients. `ddp`
    /// must be the wrapper whose parameters this optimizer was built over. Not a
    /// collective.
    ///
    /// What reads the gradients of the whole model then sees only this rank's: clip with
    /// [`clip_grad_norm_`](ZeroRedundancyOptimizer::clip_grad_norm_) (which all-reduces the
    /// norm), and scale losses with a
    /// [`ShardedGradScaler`](crate::ShardedGradScaler) (which all-reduces its inf check),
    /// not their single-process forms.
    ///
    /// # Errors
    /// [`DistError::ShardMismatch`] when `ddp` does not reduce exactly this optimizer's
    /// parameters (naming the first one that differs); nothing changes then.
    pub fn shard_gradients<M: nn_core::Module + nn_core::Compute>(
        &mut self,
        ddp: &crate::DistributedDataParallel<M>,
    ) -> Result<()> {
        let reduced = ddp.reducer().parameters();
        let mine: std::collections::HashMap<TensorId, bool> = {
            let own: std::collections::HashSet<usize> = self.shards[self.group.rank()].iter().copied().collect();
            self.params.iter().enumerate().map(|(i, (_, p))| (p.id(), own.contains(&i))).collect()
        };
        if reduced.len() != self.params.len() {
            return Err(DistError::ShardMismatch(format!(
                "shard_gradients: the wrapper reduces {} parameter(s), this optimizer holds {}",
                reduced.len(),
                self.params.len()
            )));
        }
        let mut owned = Vec::with_capacity(reduced.len());
        for p in reduced {
            match mine.get(&p.id()) {
                Some(&o) => owned.push(o),
                None => {
                    let name = nn_core::Module::named_parameters(ddp)
                        .into_iter()
                        .find(|(_, q)| q.id() == p.id())
                        .map(|(n, _)| n);
                    return Err(DistError::ShardMismatch(format!(
                        "shard_gradients: the wrapper's parameter `{}` is not one of this optimizer's",
                        name.unwrap_or_default()
                    )));
                }
            }
        }
        let owned = std::sync::Arc::new(owned);
        *ddp.reducer().owned.lock().unwrap_or_else(|e| e.into_inner()) = Some(owned.clone());
        self.mask = Some((std::sync::Arc::downgrade(ddp.reducer()), owned));
        self.grads_sharded = true;
        Ok(())
    }

    /// Scales the gradients so that the whole model's gradient has an L2 norm of at most
    /// `max_norm` and returns the norm before clipping (PyTorch's `clip_grad_norm_`), over
    /// the gradients of every rank's shard: each rank's sum of squares over the parameters
    /// it steps is all-reduced, so every rank scales alike. Right with or without
    /// [`shard_gradients`](ZeroRedundancyOptimizer::shard_gradients). A collective.
    pub fn clip_grad_norm_(&self, max_norm: f64) -> f64 {
        let held: Vec<&Parameter> = self.shards[self.group.rank()].iter().map(|&i| &self.params[i].1).collect();
        let all: Vec<&Parameter> = self.params.iter().map(|(_, p)| p).collect();
        crate::structure::clip_grad_norm_across(&self.group, &held, &all, max_norm)
    }

    /// Whether [`shard_gradients`](ZeroRedundancyOptimizer::shard_gradients) was called.
    pub fn gradients_sharded(&self) -> bool {
        self.grads_sharded
    }

    /// The names of the parameters each rank updates, rank by rank.
    pub fn partition(&self) -> Vec<Vec<String>> {
        self.shards.iter().map(|s| s.iter().map(|&i| self.params[i].0.clone()).collect()).collect()
    }

    /// This rank's optimizer, over its shard.
    pub fn inner(&self) -> &O {
        &self.inner
    }

    /// The process group.
    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// Gathers every rank's optimizer state on rank `to_rank` (PyTorch's
    /// `consolidate_state_dict(to)`), where [`state_dict`](Optimizer::state_dict) returns it
    /// until the next step or load. A collective: every rank calls it. Each rank's state
    /// travels as safetensors bytes, broadcast from that rank (as PyTorch broadcasts each
    /// rank's state object).
    ///
    /// # Panics
    /// When `to_rank` is not a rank.
    pub fn consolidate_state_dict(&mut self, to_rank: usize) {
        let (rank, world) = (self.group.rank(), self.group.world_size());
        if to_rank >= world {
            panic!("ZeroRedundancyOptimizer::consolidate_state_dict: {to_rank} is not a rank of a world of {world}");
        }
        let mine = self.inner.state_dict();
        let bytes = mine.tensors.to_safetensors_bytes(None).unwrap_or_else(|e| {
            panic!("ZeroRedundancyOptimizer::consolidate_state_dict: cannot serialise rank {rank}'s state: {e}")
        });
        let lengths = self.group.all_gather(&Tensor::from_vec_i64(vec![bytes.len() as i64], &[1]));
        let mut shards: Vec<StateDict> = Vec::with_capacity(world);
        for (r, len) in lengths.iter().enumerate() {
            let len = len.to_vec_i64()[0] as usize;
            let words = if r == rank { pack(&bytes) } else { vec![0; len.div_ceil(8)] };
            let n = words.len();
            let got = self.group.broadcast(&Tensor::from_vec_i64(words, &[n]), r);
            if rank == to_rank {
                let (sd, _) = StateDict::from_safetensors_bytes(&unpack(&got.to_vec_i64(), len))
                    .unwrap_or_else(|e| panic!("ZeroRedundancyOptimizer: rank {r}'s state does not read back: {e}"));
                shards.push(sd);
            }
        }
        self.consolidated = (rank == to_rank).then(|| {
            // The keys of each parameter, from its owner, in parameter order.
            let mut owner = vec![0; self.params.len()];
            for (r, s) in self.shards.iter().enumerate() {
                s.iter().for_each(|&i| owner[i] = r);
            }
            let mut tensors = StateDict::default();
            for ((name, _), &r) in self.params.iter().zip(&owner) {
                for (key, t) in shards[r].iter() {
                    if key.rsplit_once('.').is_some_and(|(path, _)| path == name) {
                        tensors.insert(key.to_string(), t.clone());
                    }
                }
            }
            OptimizerState { tensors, lrs: mine.lrs, hyper_params: mine.hyper_params }
        });
    }

    /// The state gathered by the last
    /// [`consolidate_state_dict`](ZeroRedundancyOptimizer::consolidate_state_dict) to this
    /// rank, if it is still current (no step or load since).
    pub fn consolidated_state(&self) -> Option<&OptimizerState> {
        self.consolidated.as_ref()
    }
}

impl<O: Optimizer> Optimizer for ZeroRedundancyOptimizer<O> {
    /// Updates this rank's shard, then broadcasts every rank's shard (a collective: every
    /// rank steps together).
    fn step(&mut self) {
        self.consolidated = None;
        self.inner.step();
        for (r, shard) in self.shards.iter().enumerate() {
            if !shard.is_empty() {
                let tensors: Vec<Tensor> = shard.iter().map(|&i| self.params[i].1.tensor().clone()).collect();
                broadcast_tensors(&self.group, &tensors, r);
            }
        }
    }

    /// Clears the gradients of every parameter (all shards).
    fn zero_grad(&self) {
        self.params.iter().for_each(|(_, p)| p.zero_grad());
    }

    /// Every parameter (all shards), as given.
    fn named_parameters(&self) -> Vec<(String, Parameter)> {
        self.params.clone()
    }

    fn num_groups(&self) -> usize {
        self.inner.num_groups()
    }

    fn group_lr(&self, i: usize) -> f64 {
        self.inner.group_lr(i)
    }

    fn set_group_lr(&mut self, i: usize, lr: f64) {
        self.inner.set_group_lr(i, lr)
    }

    fn group_initial_lr(&self, i: usize) -> Option<f64> {
        self.inner.group_initial_lr(i)
    }

    fn set_group_initial_lr(&mut self, i: usize, lr: f64) {
        self.inner.set_group_initial_lr(i, lr)
    }

    /// The whole state, consolidated on this rank.
    ///
    /// # Panics
    /// When it was not consolidated to this rank since the last step or load: call
    /// [`consolidate_state_dict`](ZeroRedundancyOptimizer::consolidate_state_dict) on every
    /// rank first.
    fn state_dict(&self) -> OptimizerState {
        match &self.consolidated {
            Some(state) => state.clone(),
            None => panic!(
                "ZeroRedundancyOptimizer::state_dict: rank {} holds only its shard of the state; call \
                 `consolidate_state_dict(to_rank)` on every rank first, then `state_dict()` on `to_rank`",
                self.group.rank()
            ),
        }
    }

    /// Loads the whole state (every rank passes the same, e.g. a consolidated one read back
    /// from a file); each rank keeps its shard's part. A collective: every rank calls it,
    /// and the ranks agree on the outcome, so no rank goes on with the loaded state while
    /// another kept its old one.
    ///
    /// # Errors
    /// [`nn_core::Error::OptimizerState`] for an entry naming no parameter, and the inner
    /// optimizer's errors on this rank's part; on every other rank, an
    /// [`nn_core::Error::OptimizerState`] naming the ranks that refused their part. Every
    /// rank then keeps the state it had.
    fn load_state_dict(&mut self, state: &OptimizerState) -> nn_core::Result<()> {
        let before = self.inner.state_dict();
        let mine = self.load_part(state);
        let flags = self.group.all_gather(&Tensor::from_vec_i64(vec![i64::from(mine.is_ok())], &[1]));
        let refused: Vec<usize> =
            flags.iter().enumerate().filter(|(_, f)| f.to_vec_i64() != [1]).map(|(rank, _)| rank).collect();
        match mine {
            Err(e) => Err(e),
            Ok(()) if refused.is_empty() => {
                self.consolidated = None;
                Ok(())
            }
            Ok(()) => {
                // This rank's part loaded; another's did not: put this one back.
                self.inner.load_state_dict(&before).unwrap_or_else(|e| {
                    panic!(
                        "ZeroRedundancyOptimizer::load_state_dict: restoring rank {}'s own state failed: {e}",
                        self.group.rank()
                    )
                });
                Err(nn_core::Error::OptimizerState(format!(
                    "rank(s) {refused:?} refused their part of this state (the error there says why); rank {} loaded \
                     its part and put its previous state back, so every rank keeps the state it had",
                    self.group.rank()
                )))
            }
        }
    }
}

impl<O: Optimizer> ZeroRedundancyOptimizer<O> {
    /// Loads this rank's part of the whole `state` into the inner optimizer (which leaves
    /// itself unchanged when it refuses it).
    fn load_part(&mut self, state: &OptimizerState) -> nn_core::Result<()> {
        let mine: std::collections::HashSet<&str> =
            self.shards[self.group.rank()].iter().map(|&i| self.params[i].0.as_str()).collect();
        let mut part = StateDict::default();
        for (key, t) in state.tensors.iter() {
            let path = key.rsplit_once('.').map(|(path, _)| path);
            match path {
                Some(path) if mine.contains(path) => {
                    part.insert(key.to_string(), t.clone());
                }
                Some(path) if self.params.iter().any(|(n, _)| n == path) => {}
                _ => {
                    return Err(nn_core::Error::OptimizerState(format!(
                    "`{key}` names no parameter of this ZeroRedundancyOptimizer (entries are `<parameter>.<buffer>`)"
                )))
                }
            }
        }
        let part = OptimizerState { tensors: part, lrs: state.lrs.clone(), hyper_params: state.hyper_params.clone() };
        self.inner.load_state_dict(&part)
    }
}

/// PyTorch's `_partition_parameters`: group by group, parameters sorted by size (largest
/// first, ties in order) each go to the rank with the fewest elements so far (the lowest
/// such rank). `sizes` holds each group's parameter sizes; the result, per rank, indices
/// into the parameters of all groups in order, ascending.
fn partition(sizes: &[Vec<usize>], world: usize) -> Vec<Vec<usize>> {
    let mut load = vec![0usize; world];
    let mut shards = vec![Vec::new(); world];
    let mut first = 0;
    for group in sizes {
        let mut order: Vec<usize> = (0..group.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(group[i]));
        for i in order {
            let r = (0..world).min_by_key(|&r| load[r]).unwrap_or(0);
            load[r] += group[i];
            shards[r].push(first + i);
        }
        first += group.len();
    }
    shards.iter_mut().for_each(|s| s.sort_unstable());
    shards
}

/// Bytes as little-endian `i64` words (zero-padded), to travel as an `i64` tensor.
fn pack(bytes: &[u8]) -> Vec<i64> {
    bytes
        .chunks(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            i64::from_le_bytes(w)
        })
        .collect()
}

/// The first `len` bytes of `words`.
fn unpack(words: &[i64], len: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    bytes.truncate(len);
    bytes
}

#[cfg(test)]
mod tests {
    use super::{pack, partition, unpack};

    #[test]
    fn the_partition_is_pytorchs_greedy_one() {
        // An MLP 6-32-16-3: weights 192, 512, 48; biases 32, 16, 3.
        let mlp = vec![vec![192, 32, 512, 16, 48, 3]];
        assert_eq!(partition(&mlp, 1), [vec![0, 1, 2, 3, 4, 5]]);
        assert_eq!(partition(&mlp, 2), [vec![2], vec![0, 1, 3, 4, 5]]);
        assert_eq!(partition(&mlp, 3), [vec![2], vec![0], vec![1, 3, 4, 5]]);
        // The ranks' loads carry over from one group to the next; ties go to the lower rank.
        assert_eq!(partition(&[vec![10, 10], vec![5, 5, 5]], 2), [vec![0, 2, 4], vec![1, 3]]);
        // More ranks than parameters: some shards are empty.
        assert_eq!(partition(&[vec![4, 4]], 3), [vec![0], vec![1], vec![]]);
    }

    #[test]
    fn bytes_survive_packing() {
        for n in [0, 1, 7, 8, 9, 100] {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 37 % 256) as u8).collect();
            assert_eq!(unpack(&pack(&bytes), n), bytes);
        }
    }
}
