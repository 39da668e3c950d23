//! Fine-tuning with a frozen backbone and per-group learning rates, on the 8x8 digits.
//!
//! 1. Pretrain a backbone with a head for digits 0-4 and save it.
//! 2. Build a new model for digits 5-9, load the pretrained backbone non-strictly (the old
//!    head's keys are reported as unexpected, the new head's as missing), freeze the
//!    backbone and train only the new head.
//! 3. Unfreeze and train both with per-group learning rates (backbone 10x smaller).
//!
//! Expected held-out accuracy on digits 5-9: about 78% with the frozen backbone (features
//! learnt on 0-4 transfer only partly), about 97-98% after layer-wise fine-tuning.
//!
//! ```text
//! cargo run --release -p nn-examples --bin finetune
//! ```

use clap::Parser;
use nn_core::checkpoint::Checkpoint;
use nn_core::functional::cross_entropy;
use nn_core::optim::{Optimizer, ParamGroup, Sgd, SgdConfig};
use nn_core::{manual_seed, Compute, Forward, Module, ModuleBase, Tensor};
use nn_data::{load_digits, DataLoader};
use nn_examples::{accuracy, progress, repo_data_dir, split, write_loss_svg, CommonArgs, Flag};
use nn_layers::{Linear, ReLU, Sequential};

#[derive(Parser)]
#[command(about = "Frozen-backbone fine-tuning with per-group learning rates")]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Module)]
struct Net {
    #[module]
    backbone: Sequential,
    #[module]
    head: Linear,
    #[base]
    base: ModuleBase,
}

impl Net {
    fn new() -> Self {
        let backbone =
            Sequential::new().add(Linear::new(64, 128)).add(ReLU::new()).add(Linear::new(128, 64)).add(ReLU::new());
        Net { backbone, head: Linear::new(64, 5), base: ModuleBase::new() }
    }
}

impl Compute for Net {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        self.head.forward(&self.backbone.forward(x))
    }
}

/// The samples whose label is in `lo..lo + 5`, relabelled `0..5`.
fn digits_range(x: &Tensor, y: &Tensor, lo: i64) -> (Tensor, Tensor) {
    let labels = y.to_vec_i64();
    let keep: Vec<i64> = (0..labels.len() as i64).filter(|&i| (lo..lo + 5).contains(&labels[i as usize])).collect();
    let shifted: Vec<i64> = keep.iter().map(|&i| labels[i as usize] - lo).collect();
    let n = keep.len();
    (x.index_select(0, &Tensor::from_vec_i64(keep, &[n])), Tensor::from_vec_i64(shifted, &[n]))
}

/// The pretrained weights' file metadata: the seed they were trained with, which
/// `--resume` checks.
fn backbone_metadata(seed: u64) -> std::collections::HashMap<String, String> {
    std::collections::HashMap::from([("seed".to_string(), seed.to_string())])
}

fn train(model: &Net, opt: &mut dyn Optimizer, loader: &DataLoader, epochs: u64, label: &str, losses: &mut Vec<f64>) {
    let pb = progress(epochs * loader.num_batches() as u64, label);
    for epoch in 0..epochs {
        let (mut total, mut n) = (0.0, 0.0);
        for (xb, yb) in loader.epoch(epoch) {
            opt.zero_grad();
            let loss = cross_entropy(&model.forward(&xb), &yb);
            total += loss.item() * xb.shape()[0] as f64;
            n += xb.shape()[0] as f64;
            loss.backward();
            opt.step();
            pb.inc(1);
        }
        losses.push(total / n);
    }
    pb.finish_and_clear();
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let a = &args.common;
    a.refuse_unsupported("finetune", &[Flag::Epochs, Flag::Resume, Flag::Limit])?;
    let epochs = a.epochs.unwrap_or(20);
    manual_seed(a.seed);
    let data = load_digits(repo_data_dir().join("digits.csv.gz"))?;
    let ((xtr, ytr), (xte, yte)) = split(&data.features, &data.labels, 0.2, a.seed);
    let (src_x, src_y) = digits_range(&xtr, &ytr, 0);
    let (dst_x, dst_y) = digits_range(&xtr, &ytr, 5);
    let (test_x, test_y) = digits_range(&xte, &yte, 5);
    let (dst_x, dst_y) = a.limit_train(dst_x, dst_y)?;
    nn_examples::check_nonempty("test", &test_x)?;
    let mut losses = Vec::new();

    // 1. Pretraining on digits 0-4.
    let backbone_path = a.out("finetune_pretrained.safetensors")?;
    let pretrained = Net::new();
    if a.resume && !backbone_path.exists() {
        return Err(format!(
            "--resume: no pretrained weights at {} to reuse (finetune's --resume skips the pretraining only)",
            backbone_path.display()
        )
        .into());
    }
    if a.resume {
        // Pretrained under another seed, the weights are not this run's (its data split and
        // initialisation follow the seed).
        let (sd, meta) = nn_core::StateDict::load_with_metadata(&backbone_path)?;
        if let Some(saved) = meta.get("seed").filter(|s| s.parse::<u64>().ok() != Some(a.seed)) {
            return Err(format!(
                "--resume: the pretrained weights in {} come from a run with --seed {saved}, this one has --seed {}: \
                 resume with --seed {saved}, or drop --resume to pretrain again",
                backbone_path.display(),
                a.seed
            )
            .into());
        }
        let mut p = pretrained;
        p.load_state_dict(&sd, true)?;
        println!("resumed: reusing the pretrained weights in {}", backbone_path.display());
        p.state_dict().save_with_metadata(&backbone_path, Some(backbone_metadata(a.seed)))?;
    } else {
        let mut opt =
            Sgd::new(pretrained.named_parameters(), SgdConfig { lr: 0.05, momentum: 0.9, ..Default::default() });
        train(
            &pretrained,
            &mut opt,
            &DataLoader::new(src_x, src_y, 32).shuffle(a.seed),
            epochs,
            "pretrain",
            &mut losses,
        );
        pretrained.state_dict().save_with_metadata(&backbone_path, Some(backbone_metadata(a.seed)))?;
        println!("pretrained on digits 0-4, saved {}", backbone_path.display());
    }

    // 2. New head for digits 5-9; load the backbone, freeze it, train the head.
    manual_seed(a.seed + 1);
    let mut model = Net::new();
    let mut sd = nn_core::StateDict::load(&backbone_path)?;
    for k in ["head.weight", "head.bias"] {
        let t = sd.remove(k).expect("saved with a head");
        sd.insert(format!("old_{k}"), t);
    }
    let report = model.load_state_dict(&sd, false)?;
    println!("loaded the backbone: missing {:?}, unexpected {:?}", report.missing_keys, report.unexpected_keys);
    model.backbone.requires_grad_(false);
    println!(
        "trainable parameters with a frozen backbone: {} of {}",
        model.num_trainable_parameters(),
        model.num_parameters()
    );
    let loader = DataLoader::new(dst_x, dst_y, 32).shuffle(a.seed + 1);
    let mut opt = Sgd::new(model.head.named_parameters(), SgdConfig { lr: 0.05, momentum: 0.9, ..Default::default() });
    train(&model, &mut opt, &loader, epochs, "head only", &mut losses);
    model.eval();
    let frozen_acc = accuracy(&mut model, &test_x, &test_y, 256);
    println!("held-out accuracy on digits 5-9, frozen backbone: {:.2}%", frozen_acc * 100.0);

    // 3. Unfreeze; layer-wise learning rates.
    model.train();
    model.backbone.requires_grad_(true);
    let groups = vec![
        ParamGroup::with_prefix("backbone", model.get_submodule("backbone")?.named_parameters()).lr(0.005),
        ParamGroup::with_prefix("head", model.get_submodule("head")?.named_parameters()).lr(0.05),
    ];
    let mut opt = Sgd::new(groups, SgdConfig { momentum: 0.9, ..Default::default() });
    println!("fine-tuning with lr {} (backbone) and {} (head)", opt.group_lr(0), opt.group_lr(1));
    train(&model, &mut opt, &loader, epochs, "fine-tune", &mut losses);
    model.eval();
    let acc = accuracy(&mut model, &test_x, &test_y, 256);
    println!("held-out accuracy on digits 5-9 after fine-tuning: {:.2}% ({} samples)", acc * 100.0, test_x.shape()[0]);
    Checkpoint::new(model.state_dict(), Some(opt.state_dict()), None, 3 * epochs, 0)
        .save(a.out("finetune_checkpoint.safetensors")?)?;
    let curve = a.out("finetune_loss.svg")?;
    write_loss_svg(&curve, "pretrain, head only, then fine-tune: loss per epoch", "epoch", &[("train loss", &losses)])?;
    nn_examples::report_outputs(&model, &a.out("finetune.safetensors")?, &curve)?;
    Ok(())
}
