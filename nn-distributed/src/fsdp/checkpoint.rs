//! The states of a `FullyShardedDataParallel`: the model's full state dict (gathered on rank
//! 0, or scattered from it) and sharded checkpoints (one file per rank), with the agreement
//! every rank reaches before anything is loaded.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use nn_core::optim::{Optimizer, OptimizerState};
use nn_core::{no_grad, Compute, Device, Module, StateDict, Tensor};

use super::{fsdp_err, FullyShardedDataParallel};
use crate::comm::{to_wire, Buf, Op};
use crate::error::Result;
use crate::group::{recv, ProcessGroup};
use crate::structure::broadcast_tensors;

impl<M: Module + Compute> FullyShardedDataParallel<M> {
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
        let full = self.module.state_dict();
        let mut out = StateDict::default();
        for (k, t) in full.iter() {
            // A snapshot: the parameters' own detached copies follow them back to meta.
            out.insert(k.to_string(), t.snapshot());
        }
        // The modules' layout versions and extra states go with the tensors.
        for (path, v) in full.versions() {
            out.set_version(path, v);
        }
        for (k, state) in full.extra_states() {
            out.insert_extra_state(k.to_string(), state.clone());
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
    /// [`DistError::Fsdp`](crate::DistError::Fsdp) on every rank, with nothing loaded, when rank 0 passes `None` or a
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
        // Load hooks are not run here: refused rather than skipped.
        problems.extend(self.module.named_modules().into_iter().filter_map(|(path, m)| {
            m.base().filter(|b| b.has_load_state_dict_hooks()).map(|_| {
                let at = if path.is_empty() { "<root>".to_string() } else { path };
                format!("`{at}` has load_state_dict hooks, which load_full_state_dict does not run (run them on the state dict first)")
            })
        }));
        // Extra states are not broadcast: refused rather than dropped on the other ranks.
        problems.extend(sd.extra_states().map(|(k, _)| {
            format!(
                "`{k}` is an extra state, which load_full_state_dict does not set (load it into the unwrapped model)"
            )
        }));
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
    /// state (`optim.<key>`), and in the metadata the world size, this rank, the shard
    /// layout and the optimizer's learning rates and hyper-parameters. Local: no collective.
    ///
    /// # Errors
    /// [`DistError::Fsdp`](crate::DistError::Fsdp) when the file cannot be written or a
    /// hyper-parameter is not finite.
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
        // JSON (a map per group): every float reads back to its bits.
        let hyper = serde_json::to_string(&opt.hyper_params).map_err(|e| {
            fsdp_err("FullyShardedDataParallel::save_sharded", format!("the optimizer's hyper-parameters: {e}"))
        })?;
        if let Some((k, v)) = opt.hyper_params.iter().flatten().find(|(_, v)| !v.is_finite()) {
            return Err(fsdp_err(
                "FullyShardedDataParallel::save_sharded",
                format!("the optimizer's hyper-parameter `{k}` is {v}; a hyper-parameter is finite"),
            ));
        }
        let meta = HashMap::from([
            ("nn.fsdp.hyper_params".to_string(), hyper),
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
    /// [`DistError::Fsdp`](crate::DistError::Fsdp) on every rank, with nothing loaded anywhere, when any rank's file
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
        // A file without the key (one written without hyper-parameters) records none.
        let hyper_params: Vec<nn_core::optim::HyperParams> = match meta.get("nn.fsdp.hyper_params") {
            Some(text) => serde_json::from_str(text)
                .map_err(|e| format!("{shown}: unreadable optimizer hyper-parameters ({e})"))?,
            None => Vec::new(),
        };
        let mut tensors = StateDict::default();
        for (k, t) in sd.iter() {
            if let Some(k) = k.strip_prefix("optim.") {
                tensors.insert(k.to_string(), t.clone());
            }
        }
        Ok((sd, OptimizerState { tensors, lrs, hyper_params }))
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
