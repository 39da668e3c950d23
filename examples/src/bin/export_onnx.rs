//! Trains the digits MLP (on the 8x8 digits shipped in `data/`) and the MNIST CNN (on a
//! slice of MNIST), then exports both to ONNX for deployment: `out/digits_mlp.onnx` and
//! `out/mnist_cnn.onnx` (opset 17, dynamic batch, weights named by their state-dict keys).
//! Beside each it writes `<name>.io.safetensors`, a batch of held-out inputs with nn's
//! logits, which `nn-onnx/check_onnx.py` compares with onnxruntime's.
//!
//! This should print about 96% (MLP) and 92% (CNN, 6,000 training images, one epoch)
//! held-out accuracy in well under a minute:
//!
//! ```text
//! cargo run --release -p nn-examples --bin export_onnx
//! python3 nn-onnx/check_onnx.py out
//! ```

use std::path::{Path, PathBuf};

use clap::Parser;
use nn_core::functional::cross_entropy;
use nn_core::optim::{Adam, AdamConfig, Optimizer, Sgd, SgdConfig};
use nn_core::{manual_seed, no_grad, Forward, Module, StateDict, Tensor};
use nn_data::{load_digits, load_mnist, DataLoader, Split};
use nn_examples::{accuracy, progress, repo_data_dir, split, CommonArgs, Flag};
use nn_layers::{Dropout, Linear, ReLU, Sequential};

#[derive(Parser)]
#[command(about = "Train the digits MLP and the MNIST CNN briefly, export both to ONNX")]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Folder with MNIST's IDX files (default `../shared/data/mnist`).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// MNIST training images used for the CNN (1 or more).
    #[arg(long, default_value_t = 6000, value_parser = nn_examples::parse_positive)]
    cnn_train: usize,
    /// Export only the digits MLP (no MNIST needed).
    #[arg(long)]
    no_cnn: bool,
}

/// Trains `model` with `opt` for `epochs` epochs of `loader`, with a progress bar.
fn train<O: Optimizer>(model: &mut Sequential, opt: &mut O, loader: &DataLoader, epochs: u64, label: &str) {
    let pb = progress(epochs * loader.num_batches() as u64, label);
    model.train();
    for epoch in 0..epochs {
        for (xb, yb) in loader.epoch(epoch) {
            opt.zero_grad();
            let loss = cross_entropy(&model.forward(&xb), &yb);
            loss.backward();
            opt.step();
            pb.inc(1);
            pb.set_message(format!("loss {:.4}", loss.item()));
        }
    }
    pb.finish_and_clear();
    model.eval();
}

/// Exports `model` (in eval mode) with a one-sample example, and writes a held-out batch
/// with nn's logits beside the file.
fn export(model: &Sequential, x_test: &Tensor, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    nn_onnx::export(model, &x_test.narrow(0, 0, 1).contiguous(), path)?;
    let batch = x_test.narrow(0, 0, x_test.shape()[0].min(16)).contiguous();
    let mut io = StateDict::new();
    io.insert("output_0".into(), no_grad(|| model.forward(&batch)));
    io.insert("input_0".into(), batch);
    io.save(path.with_extension("io.safetensors"))?;
    let summary = nn_onnx::inspect(&std::fs::read(path)?)?;
    println!(
        "wrote {} (opset {}, input {:?}, {} initializers, {} nodes)",
        path.display(),
        summary.opset,
        summary.inputs[0].1,
        summary.initializers.len(),
        summary.op_types.len()
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let a = &args.common;
    a.refuse_unsupported("export_onnx", &[Flag::Epochs, Flag::Limit])?;
    manual_seed(a.seed);

    let data = load_digits(repo_data_dir().join("digits.csv.gz"))?;
    let ((x_train, y_train), (x_test, y_test)) = split(&data.features, &data.labels, 0.2, a.seed);
    let (x_train, y_train) = a.limit_train(x_train, y_train)?;
    let mut mlp =
        Sequential::new().add(Linear::new(64, 128)).add(ReLU::new()).add(Dropout::new(0.1)).add(Linear::new(128, 10));
    let mut opt =
        Sgd::new(mlp.named_parameters(), SgdConfig { lr: 0.05, momentum: 0.9, nesterov: true, ..Default::default() });
    train(&mut mlp, &mut opt, &DataLoader::new(x_train, y_train, 32).shuffle(a.seed), a.epochs.unwrap_or(20), "digits");
    println!("digits MLP held-out accuracy: {:.2}%", accuracy(&mut mlp, &x_test, &y_test, 256) * 100.0);
    export(&mlp, &x_test, &a.out("digits_mlp.onnx")?)?;

    if args.no_cnn {
        return Ok(());
    }
    let dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/mnist"));
    let (x_train, y_train) = load_mnist(&dir, Split::Train)
        .map_err(|e| format!("{e}\n(pass --data-dir with MNIST's IDX files, or --no-cnn; see data/README.md)"))?;
    let (x_test, y_test) = load_mnist(&dir, Split::Test)?;
    let (x_train, y_train) = nn_examples::limit(x_train, y_train, Some(args.cnn_train));
    nn_examples::check_nonempty("MNIST training", &x_train)?;
    nn_examples::check_nonempty("MNIST test", &x_test)?;
    let mut cnn = nn_examples::mnist_cnn();
    let mut opt = Adam::new(cnn.named_parameters(), AdamConfig { lr: 1e-3, ..Default::default() });
    train(&mut cnn, &mut opt, &DataLoader::new(x_train, y_train, 64).shuffle(a.seed), 1, "mnist cnn");
    let n = x_test.shape()[0].min(2000);
    let (x_eval, y_eval) = (x_test.narrow(0, 0, n), y_test.narrow(0, 0, n));
    println!(
        "MNIST CNN held-out accuracy: {:.2}% (first {n} test images)",
        accuracy(&mut cnn, &x_eval, &y_eval, 500) * 100.0
    );
    export(&cnn, &x_test, &a.out("mnist_cnn.onnx")?)?;
    Ok(())
}
