//! # Distributed training
//!
//! nn-distributed is PyTorch's `torch.distributed` on MPI (OpenMPI, through the `mpi`
//! crate): `DistributedDataParallel`, `SyncBatchNorm`, `ZeroRedundancyOptimizer` (ZeRO
//! stages 1 and 2) and `FullyShardedDataParallel` (ZeRO stage 3), with collective timeouts
//! so that no collective hangs. It is a cargo workspace of its own, not a dependency of
//! `nn`: building it needs OpenMPI and libclang, which nothing else does. So the snippets
//! below do not compile here (they are marked `ignore`); each is compiled and run as a
//! doctest in nn-distributed's own docs (`nn-distributed/src/lib.rs`,
//! `nn-distributed/src/zero.rs`, `nn-distributed/src/fsdp/mod.rs`), and its README
//! (`nn-distributed/README.md`) covers building, testing and the several-machine set-up.
//!
//! ## Running
//!
//! ```text
//! sudo apt-get install -y openmpi-bin libopenmpi-dev libclang-dev pkg-config
//! cd nn-distributed && cargo test                 # 1 process, then under mpirun -np 2 and -np 3
//! cargo build --release --example mnist_ddp
//! mpirun -np 2 target/release/examples/mnist_ddp --epochs 3
//! ```
//! A program started without `mpirun` is a one-process world, so the same binary runs
//! alone. A panic on any rank ends the whole job with its message.
//!
//! ## Data parallel: DDP
//!
//! Each rank holds a replica and trains on its share of every batch
//! (`nn::data::DistributedSampler`, PyTorch's rules); construction broadcasts rank 0's
//! weights, and backward averages the gradients in buckets that start as soon as their
//! last gradient is in, while backward goes on:
//! ```ignore
//! use nn::data::{DataLoader, DistributedSampler};
//! use nn_distributed::{DistributedDataParallel, ProcessGroup};
//!
//! let group = ProcessGroup::init()?; // rank(), world_size()
//! let sampler = DistributedSampler::new(64, group.world_size(), group.rank()).seed(7);
//! let loader = DataLoader::new(x, y, 16 / group.world_size()).distributed(sampler);
//! let ddp = DistributedDataParallel::new(model, &group)?;
//! let mut opt = Sgd::new(ddp.parameters(), SgdConfig { lr: 0.1, ..Default::default() });
//! for (xb, yb) in loader.epoch(epoch) {
//!     opt.zero_grad();
//!     cross_entropy(&ddp.forward(&xb), &yb).backward(); // gradients averaged here
//!     opt.step();
//! }
//! if group.rank() == 0 {
//!     ddp.save("model.safetensors")?; // the model's own keys
//! }
//! ```
//!
//! ## Sharded optimizer state: ZeRO
//!
//! `ZeroRedundancyOptimizer` wraps any nn optimizer and keeps each parameter's state on
//! one rank; after each step every rank broadcasts the parameters it stepped.
//! `consolidate_state_dict(rank)` gathers a state a plain optimizer loads, and
//! `shard_gradients(&ddp)` keeps only this rank's gradients too (stage 2):
//! ```ignore
//! let mut opt = ZeroRedundancyOptimizer::new(ddp.named_parameters(), &group, |shard| AdamW::new(shard, config))?;
//! opt.step();
//! opt.consolidate_state_dict(0); // on every rank; the state lands on rank 0
//! ```
//!
//! ## Fully sharded: FSDP
//!
//! An `FsdpPolicy` picks units (sub-modules of given types, or above a parameter count);
//! each rank keeps `1 / world_size` of every unit's parameters, gradients and optimizer
//! state, and gathers a unit's parameters only while it runs:
//! ```ignore
//! let policy = FsdpPolicy::new().module_type::<TransformerEncoderLayer>();
//! let fsdp = FullyShardedDataParallel::new(model, &group, policy)?;
//! let mut opt = AdamW::new(fsdp.named_parameters(), AdamWConfig::default()); // this rank's shards
//! opt.zero_grad();
//! cross_entropy(&fsdp.forward(&xb), &yb).backward(); // gradients reduce-scattered
//! fsdp.clip_grad_norm_(1.0);
//! opt.step();
//! let full = fsdp.full_state_dict(); // a collective: Some on rank 0, the model's own keys
//! ```
//! `save_sharded` and `load_sharded` checkpoint one file per rank, and a
//! `ShardedGradScaler` agrees on overflows across the ranks for
//! [mixed precision](super::mixed_precision).
