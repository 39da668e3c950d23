//! PyTorch interop: loads an MLP trained and saved by PyTorch
//! (`data/pytorch_digits_mlp.safetensors`, PyTorch's own key names), checks that it gives
//! PyTorch's logits and accuracy, fine-tunes it for a few epochs here, and saves it back in
//! the same format (loadable by `torch.nn.Module.load_state_dict(strict=True)`; check with
//! `tests/fixtures/pytorch/digits_mlp.py --check FILE`).
//!
//! Expected: the logits match PyTorch's to about 2e-6 and the accuracy is identical
//! (99.55% on all digits). PyTorch trained on all 1,797 digits, so the "held-out" split
//! here is not unseen by the pretrained weights and reaches about 100% after fine-tuning.
//!
//! ```text
//! cargo run --release -p nn-examples --bin pytorch_interop
//! ```

use clap::Parser;
use nn_core::checkpoint::Checkpoint;
use nn_core::functional::cross_entropy;
use nn_core::optim::{Adam, AdamConfig, Optimizer};
use nn_core::{manual_seed, Forward, Module, StateDict};
use nn_data::{load_digits, DataLoader};
use nn_examples::{accuracy, progress, repo_data_dir, split, write_loss_svg, CommonArgs, Flag};
use nn_layers::{Linear, ReLU, Sequential};

#[derive(Parser)]
#[command(about = "Load PyTorch weights, evaluate, fine-tune, save back")]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let a = &args.common;
    a.refuse_unsupported("pytorch_interop", &[Flag::Epochs, Flag::Resume, Flag::Limit])?;
    manual_seed(a.seed);
    let data = load_digits(repo_data_dir().join("digits.csv.gz"))?;
    let path = repo_data_dir().join("pytorch_digits_mlp.safetensors");
    let (sd, meta) = StateDict::load_with_metadata(&path)?;
    println!("{} from {}: {:?}", path.display(), meta.get("trained_with").map(String::as_str).unwrap_or("?"), sd);

    // The same architecture as PyTorch's nn.Sequential(Linear, ReLU, Linear).
    let mut model = Sequential::new().add(Linear::new(64, 128)).add(ReLU::new()).add(Linear::new(128, 10));
    model.load_state_dict(&sd, true)?;
    model.eval();
    let logits = model.forward(&data.features.narrow(0, 0, 1)).to_vec();
    let theirs: Vec<f32> =
        meta.get("logits_0").ok_or("no reference logits")?.split(',').map(|v| v.parse()).collect::<Result<_, _>>()?;
    let max_diff = logits.iter().zip(&theirs).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    let acc_all = accuracy(&mut model, &data.features, &data.labels, 512);
    let torch_acc: f64 = meta.get("accuracy_all").ok_or("no reference accuracy")?.parse()?;
    println!("logits of sample 0 differ from PyTorch's by at most {max_diff:.2e}");
    println!("accuracy on all 1,797 digits: {:.4} here, {torch_acc:.4} in PyTorch", acc_all);
    // PyTorch averages in f32: compare at a resolution finer than one sample (1 / 1797).
    if max_diff > 1e-4 || (acc_all - torch_acc).abs() > 1e-5 {
        return Err("the loaded model does not reproduce PyTorch's outputs".into());
    }

    // Fine-tune a little on a training split, then save back in PyTorch's format.
    let ((xtr, ytr), (xte, yte)) = split(&data.features, &data.labels, 0.2, a.seed);
    let (xtr, ytr) = a.limit_train(xtr, ytr)?;
    nn_examples::check_nonempty("test", &xte)?;
    let epochs = a.epochs.unwrap_or(3);
    let mut opt = Adam::new(model.named_parameters(), AdamConfig { lr: 1e-4, ..Default::default() });
    let ckpt = a.out("pytorch_interop_checkpoint.safetensors")?;
    let mut start = 0;
    if a.resume {
        let ck = Checkpoint::load(&ckpt)?;
        // The same seed (the train/test split follows it) and --limit: the run continued.
        a.check_settings(&ck, &[])?;
        ck.restore(&mut model, Some(&mut opt), None)?;
        start = ck.epoch;
        a.check_resume_end(start, epochs, "epoch")?;
    }
    let loader = DataLoader::new(xtr, ytr, 32).shuffle(a.seed);
    let pb = progress(epochs * loader.num_batches() as u64, "fine-tune");
    let mut losses = Vec::new();
    model.train();
    for epoch in start..epochs {
        for (xb, yb) in loader.epoch(epoch) {
            opt.zero_grad();
            let loss = cross_entropy(&model.forward(&xb), &yb);
            losses.push(loss.item());
            loss.backward();
            opt.step();
            pb.inc(1);
        }
        let mut ck = Checkpoint::new(model.state_dict(), Some(opt.state_dict()), None, epoch + 1, 0);
        a.record_settings(&mut ck, &[]);
        ck.save(&ckpt)?;
    }
    pb.finish_and_clear();
    model.eval();
    println!(
        "held-out accuracy after fine-tuning: {:.2}% ({} samples)",
        accuracy(&mut model, &xte, &yte, 512) * 100.0,
        xte.shape()[0]
    );
    let back = a.out("digits_mlp_from_rust.safetensors")?;
    model.save(&back)?;
    let keys: Vec<String> = StateDict::load(&back)?.keys().map(String::from).collect();
    println!("saved {} with PyTorch's keys {keys:?}", back.display());
    let curve = a.out("pytorch_interop_loss.svg")?;
    write_loss_svg(&curve, "fine-tuning PyTorch weights: loss per step", "step", &[("train loss", &losses)])?;
    println!("wrote {}", curve.display());
    Ok(())
}
