//! Trains the `mnist` example's CNN (or MLP) data-parallel: one process per `mpirun` rank,
//! each on its share of every batch (`DistributedSampler`), gradients averaged during
//! backward by `DistributedDataParallel`, batch-norm statistics computed over all ranks'
//! shares (`SyncBatchNorm`, unless `--local-bn`). Only rank 0 shows progress and writes the
//! checkpoint, the loss curve and the final weights; held-out accuracy is evaluated on all
//! ranks, each on its slice of the test set.
//!
//! `--batch-size` is the global batch (default 64, as `mnist`), split evenly across the
//! ranks, so any number of processes takes the single-process example's optimisation steps:
//! expect its accuracy, about 99% on MNIST after 3 epochs. `--resume` continues from rank 0's
//! checkpoint (every rank reads it: on several machines, put `--out-dir` on a shared folder).
//!
//! ```text
//! cd nn-distributed
//! cargo build --release --example mnist_ddp
//! mpirun -np 2 target/release/examples/mnist_ddp --epochs 3
//! target/release/examples/mnist_ddp --epochs 3          # the same, as a one-process world
//! ```

use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use nn_core::checkpoint::Checkpoint;
use nn_core::functional::cross_entropy;
use nn_core::optim::{Adam, AdamConfig, LrScheduler, Optimizer, StepLR};
use nn_core::{manual_seed, no_grad, DType, Forward, Module, Tensor};
use nn_data::{load_mnist, DataLoader, DistributedSampler, Split};
use nn_distributed::{DistributedDataParallel, ProcessGroup, ReduceOp, SyncBatchNorm};
use nn_examples::{progress, write_loss_svg, CommonArgs, Flag};

#[derive(Clone, Copy, ValueEnum, Debug)]
enum Model {
    Mlp,
    Cnn,
}

#[derive(Clone, Copy, ValueEnum, Debug)]
enum Dataset {
    Mnist,
    Fashion,
}

#[derive(Parser)]
#[command(about = "MLP or CNN on MNIST / Fashion-MNIST, data-parallel over the ranks of an MPI job")]
struct Args {
    /// Which network.
    #[arg(long, value_enum, default_value = "cnn")]
    model: Model,
    /// Which dataset.
    #[arg(long, value_enum, default_value = "mnist")]
    dataset: Dataset,
    /// Folder with the four IDX files (defaults to `../shared/data/mnist` or
    /// `../shared/data/fashion-mnist` next to the repo).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Global mini-batch size (1 or more), split evenly across the ranks.
    #[arg(long, default_value_t = 64, value_parser = nn_examples::parse_positive)]
    batch_size: usize,
    /// Per-rank batch-norm statistics instead of SyncBatchNorm.
    #[arg(long)]
    local_bn: bool,
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let group = ProcessGroup::init()?;
    let (rank, world) = (group.rank(), group.world_size());
    let lead = rank == 0;
    let args = Args::parse();
    let a = &args.common;
    a.refuse_unsupported("mnist_ddp", &[Flag::Epochs, Flag::Resume, Flag::Limit])?;
    if args.batch_size % world != 0 {
        return Err(format!("--batch-size {} does not split evenly over {world} ranks", args.batch_size).into());
    }
    let name = format!("{:?}_{:?}_ddp", args.dataset, args.model).to_lowercase();
    let dir = args.data_dir.clone().unwrap_or_else(|| {
        let sub = match args.dataset {
            Dataset::Mnist => "mnist",
            Dataset::Fashion => "fashion-mnist",
        };
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data").join(sub)
    });
    let (x_train, y_train) = load_mnist(&dir, Split::Train)
        .map_err(|e| format!("{e}\n(pass --data-dir with the IDX files; see data/README.md)"))?;
    let (x_test, y_test) = load_mnist(&dir, Split::Test)?;
    let (x_train, y_train) = a.limit_train(x_train, y_train)?;
    nn_examples::check_nonempty("test", &x_test)?;
    let n_train = x_train.shape()[0];
    let epochs = a.epochs.unwrap_or(match (args.model, args.dataset) {
        (Model::Cnn, Dataset::Mnist) => 3,
        _ => 5,
    });

    manual_seed(a.seed);
    let mut model = match args.model {
        Model::Mlp => nn_examples::mnist_mlp(),
        Model::Cnn => nn_examples::mnist_cnn(),
    };
    let synced = if args.local_bn { 0 } else { SyncBatchNorm::convert_sync_batchnorm(&mut model, &group) };
    let mut ddp = DistributedDataParallel::new(model, &group)?;
    // Dropout masks: a different stream per rank (initialisation came from rank 0).
    manual_seed(a.seed.wrapping_add(1 + rank as u64));
    if lead {
        println!(
            "{n_train} training / {} test images from {}; {world} rank(s), {} samples each per step of {}; \
             {synced} synchronised batch norm(s)",
            x_test.shape()[0],
            dir.display(),
            args.batch_size / world,
            args.batch_size
        );
        println!("{ddp}\n{} parameters, gradient buckets {:?}", ddp.num_parameters(), bucket_sizes(&ddp));
    }
    let mut opt = Adam::new(ddp.named_parameters(), AdamConfig { lr: 1e-3, ..Default::default() });
    let mut sched = StepLR::new(&mut opt, 2, 0.5);
    let sampler = DistributedSampler::new(n_train, world, rank).seed(a.seed);
    let loader = DataLoader::new(x_train, y_train, args.batch_size / world).distributed(sampler);
    let ckpt = a.out(&format!("{name}_checkpoint.safetensors"))?;
    let (mut start, mut step, mut losses) = (0u64, 0u64, Vec::new());
    let settings = [("--batch-size", args.batch_size as u64), ("ranks", world as u64)];
    if a.resume {
        // Every rank reads the checkpoint (on several machines: a shared folder).
        let ck = Checkpoint::load(&ckpt)?;
        ddp.load_state_dict(&ck.model, true)?;
        opt.load_state_dict(ck.optimizer.as_ref().ok_or("checkpoint without optimizer state")?)?;
        sched.load_state(ck.schedulers.first().ok_or("checkpoint without scheduler state")?, &mut opt)?;
        (start, step) = (ck.epoch, ck.step);
        a.check_resume_end(start, epochs, "epoch")?;
        // Another seed, limit, batch or world size would continue on other samples.
        a.check_settings(&ck, &settings)?;
        losses = nn_examples::losses_from_extra(&ck.extra, step as usize);
        if lead {
            println!("resumed at epoch {start}");
        }
    }
    let t0 = Instant::now();
    let pb = lead.then(|| progress(epochs * loader.num_batches() as u64, &name));
    if let Some(pb) = &pb {
        pb.set_position(start * loader.num_batches() as u64);
    }
    for epoch in start..epochs {
        ddp.train();
        let mut running = 0.0;
        for (i, (xb, yb)) in loader.epoch(epoch).enumerate() {
            opt.zero_grad();
            let loss = cross_entropy(&ddp.forward(&xb), &yb);
            loss.backward();
            opt.step();
            // The loss of the whole global batch: the mean of the ranks' means.
            let l = group.all_reduce(&loss.detach(), ReduceOp::Avg).item();
            step += 1;
            losses.push(l);
            running = if i == 0 { l } else { 0.98 * running + 0.02 * l };
            if let Some(pb) = &pb {
                pb.inc(1);
                if i % 20 == 0 {
                    pb.set_message(format!("loss {running:.4}"));
                }
            }
        }
        sched.step(&mut opt);
        if lead {
            let mut ck =
                Checkpoint::new(ddp.state_dict(), Some(opt.state_dict()), Some(sched.state().clone()), epoch + 1, step);
            ck.extra = nn_examples::losses_extra(&losses);
            a.record_settings(&mut ck, &settings);
            ck.save(&ckpt)?;
        }
        ddp.eval();
        let acc = sharded_accuracy(&ddp, &group, &x_test, &y_test);
        if let Some(pb) = &pb {
            pb.suspend(|| {
                println!("epoch {}: smoothed train loss {running:.4}, test accuracy {:.2}%", epoch + 1, acc * 100.0)
            });
        }
    }
    if let Some(pb) = &pb {
        pb.finish_and_clear();
    }
    ddp.eval();
    let acc = sharded_accuracy(&ddp, &group, &x_test, &y_test);
    if lead {
        println!(
            "held-out accuracy: {:.2}% on {} test images ({:.1} s of training on {world} rank(s))",
            acc * 100.0,
            x_test.shape()[0],
            t0.elapsed().as_secs_f64()
        );
        let curve = a.out(&format!("{name}_loss.svg"))?;
        write_loss_svg(&curve, &format!("{name}: training loss per step"), "step", &[("train loss", &losses)])?;
        nn_examples::report_outputs(&ddp, &a.out(&format!("{name}.safetensors"))?, &curve)?;
    }
    Ok(())
}

/// Accuracy on the whole test set, each rank scoring a contiguous slice of it.
fn sharded_accuracy<M: nn_core::Layer>(
    model: &DistributedDataParallel<M>,
    group: &ProcessGroup,
    x: &Tensor,
    y: &Tensor,
) -> f64 {
    let n = x.shape()[0];
    let (from, to) = (n * group.rank() / group.world_size(), n * (group.rank() + 1) / group.world_size());
    let correct = no_grad(|| {
        let mut correct = 0.0;
        for start in (from..to).step_by(500) {
            let len = 500.min(to - start);
            let pred = model.forward(&x.narrow(0, start, len)).argmax(-1, false);
            correct += pred.eq(&y.narrow(0, start, len)).to_dtype(DType::F32).sum().item();
        }
        correct
    });
    let total = group.all_reduce(&Tensor::from_vec_f64(vec![correct], &[1]), ReduceOp::Sum).item();
    total / n as f64
}

/// Elements per gradient bucket, in reduction order.
fn bucket_sizes<M: nn_core::Layer>(ddp: &DistributedDataParallel<M>) -> Vec<usize> {
    let sizes: std::collections::HashMap<String, usize> =
        ddp.named_parameters().into_iter().map(|(n, p)| (n, p.numel())).collect();
    ddp.bucket_parameter_names().iter().map(|b| b.iter().map(|n| sizes[n]).sum()).collect()
}
