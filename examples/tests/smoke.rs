//! Every example binary runs end to end on tiny settings, writes its outputs, and resumes
//! from its checkpoint. MNIST-format input is synthesised here (the real sets stay optional
//! inputs, never required by tests).

use std::path::Path;
use std::process::Command;

fn run(bin: &str, args: &[&str]) -> String {
    let out = Command::new(bin).args(args).output().expect("the example binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{bin} {args:?} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// The error output of a run that must fail.
fn run_err(bin: &str, args: &[&str]) -> String {
    let out = Command::new(bin).args(args).output().expect("the example binary runs");
    assert!(!out.status.success(), "{bin} {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// Sets a finished run's checkpoint back to `at` (epoch or step, and its scheduler), as if
/// the run had been stopped there: what `--resume` then continues.
fn rewind(path: &Path, epoch: u64, step: u64, at: u64) {
    let mut ck = nn_core::checkpoint::Checkpoint::load(path).unwrap();
    (ck.epoch, ck.step) = (epoch, step);
    ck.schedulers.first_mut().expect("a scheduler's state").last_epoch = at;
    ck.save(path).unwrap();
}

fn assert_outputs(dir: &Path, stem: &str) {
    for f in [format!("{stem}.safetensors"), format!("{stem}_loss.svg")] {
        let p = dir.join(&f);
        assert!(p.exists(), "{} was not written", p.display());
    }
    let svg = std::fs::read_to_string(dir.join(format!("{stem}_loss.svg"))).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("<polyline"), "not a loss curve");
}

#[test]
fn digits_mlp_trains_saves_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = run(env!("CARGO_BIN_EXE_digits_mlp"), &["--epochs", "3", "--out-dir", d]);
    let acc: f64 =
        out.lines().find_map(|l| l.strip_prefix("held-out accuracy: ")?.split('%').next()?.parse().ok()).unwrap();
    assert!(acc > 80.0, "3 epochs should already classify most digits: {acc}%");
    assert_outputs(dir.path(), "digits_mlp");
    // A finished run has nothing left; another length would change its cosine schedule.
    let bin = env!("CARGO_BIN_EXE_digits_mlp");
    let e = run_err(bin, &["--epochs", "3", "--resume", "--out-dir", d]);
    assert!(e.contains("nothing left to train"), "{e}");
    let e = run_err(bin, &["--epochs", "4", "--resume", "--out-dir", d]);
    assert!(e.contains("a learning-rate schedule of 3 epochs, this one 4"), "{e}");
    let ckpt = dir.path().join("digits_mlp_checkpoint.safetensors");
    rewind(&ckpt, 2, 0, 2);
    let out = run(bin, &["--epochs", "3", "--resume", "--out-dir", d]);
    assert!(out.contains("resumed from") && out.contains("at epoch 2"), "{out}");
    // The loss history came back by index: epochs 0 and 1 from the checkpoint, then 2.
    let extra = nn_core::checkpoint::Checkpoint::load(ckpt).unwrap().extra;
    assert!(extra.contains_key("loss.2") && !extra.contains_key("loss.3"), "{extra:?}");
    // Another seed would split the digits otherwise and train on held-out ones; another
    // --limit would continue on other samples: both refused, naming the flag and values.
    let e = run_err(bin, &["--epochs", "3", "--resume", "--seed", "1", "--out-dir", d]);
    assert!(e.contains("the checkpoint's run used --seed 0, this one --seed 1"), "{e}");
    let e = run_err(bin, &["--epochs", "3", "--resume", "--limit", "100", "--out-dir", d]);
    assert!(e.contains("the checkpoint's run used no --limit, this one --limit 100"), "{e}");
    // A flag this example does not honour is refused, not ignored.
    let e = run_err(bin, &["--epochs", "1", "--amp", "bf16", "--out-dir", d]);
    assert!(e.contains("digits_mlp does not support --amp"), "{e}");
}

fn write_idx(path: &Path, dims: &[u32], data: &[u8]) {
    let mut b = vec![0, 0, 8, dims.len() as u8];
    for d in dims {
        b.extend(d.to_be_bytes());
    }
    b.extend(data);
    std::fs::write(path, b).unwrap();
}

#[test]
fn mnist_example_reads_idx_and_trains_both_models() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("idx");
    std::fs::create_dir_all(&data).unwrap();
    // 64 training and 32 test "images": class k is a bright k-th row band.
    for (prefix, n) in [("train", 64u32), ("t10k", 32)] {
        let labels: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
        let mut px = vec![0u8; (n * 784) as usize];
        for (i, &l) in labels.iter().enumerate() {
            for c in 0..28 {
                px[i * 784 + (l as usize * 2 + 3) * 28 + c] = 255;
            }
        }
        write_idx(&data.join(format!("{prefix}-images-idx3-ubyte")), &[n, 28, 28], &px);
        write_idx(&data.join(format!("{prefix}-labels-idx1-ubyte")), &[n], &labels);
    }
    let out_dir = dir.path().join("out");
    for model in ["mlp", "cnn"] {
        let out = run(
            env!("CARGO_BIN_EXE_mnist"),
            &[
                "--model",
                model,
                "--data-dir",
                data.to_str().unwrap(),
                "--epochs",
                "1",
                "--batch-size",
                "16",
                "--out-dir",
                out_dir.to_str().unwrap(),
            ],
        );
        assert!(out.contains("held-out accuracy"), "{out}");
        assert_outputs(&out_dir, &format!("mnist_{model}"));
    }
    let missing = Command::new(env!("CARGO_BIN_EXE_mnist")).args(["--data-dir", "/nonexistent"]).output().unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("--data-dir"), "the error says how to point at the data");
    // Resuming with another batch size would continue another run.
    let (data_s, out_s) = (data.to_str().unwrap(), out_dir.to_str().unwrap());
    let e = run_err(
        env!("CARGO_BIN_EXE_mnist"),
        &["--model", "cnn", "--data-dir", data_s, "--epochs", "2", "--batch-size", "8", "--resume", "--out-dir", out_s],
    );
    assert!(e.contains("the checkpoint's run used --batch-size 16, this one --batch-size 8"), "{e}");
    // An empty test set is refused up front, not scored as 0/0.
    let empty = dir.path().join("empty_test");
    std::fs::create_dir_all(&empty).unwrap();
    write_idx(&empty.join("train-images-idx3-ubyte"), &[1, 28, 28], &[0; 784]);
    write_idx(&empty.join("train-labels-idx1-ubyte"), &[1], &[3]);
    write_idx(&empty.join("t10k-images-idx3-ubyte"), &[0, 28, 28], &[]);
    write_idx(&empty.join("t10k-labels-idx1-ubyte"), &[0], &[]);
    let e = run_err(
        env!("CARGO_BIN_EXE_mnist"),
        &["--data-dir", empty.to_str().unwrap(), "--epochs", "1", "--out-dir", out_s],
    );
    assert!(e.contains("the test set is empty"), "{e}");
}

#[test]
fn export_onnx_writes_both_models() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("idx");
    std::fs::create_dir_all(&data).unwrap();
    for (prefix, n) in [("train", 32u32), ("t10k", 20)] {
        let labels: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
        let px: Vec<u8> = (0..n * 784).map(|i| ((i * 37) % 256) as u8).collect();
        write_idx(&data.join(format!("{prefix}-images-idx3-ubyte")), &[n, 28, 28], &px);
        write_idx(&data.join(format!("{prefix}-labels-idx1-ubyte")), &[n], &labels);
    }
    let out_dir = dir.path().join("out");
    let args = [
        "--epochs",
        "2",
        "--cnn-train",
        "32",
        "--data-dir",
        data.to_str().unwrap(),
        "--out-dir",
        out_dir.to_str().unwrap(),
    ];
    let out = run(env!("CARGO_BIN_EXE_export_onnx"), &args);
    assert!(out.contains("digits MLP held-out accuracy") && out.contains("MNIST CNN held-out accuracy"), "{out}");
    for (stem, first_op) in [("digits_mlp", "Gemm"), ("mnist_cnn", "Conv")] {
        let s = nn_onnx::inspect(&std::fs::read(out_dir.join(format!("{stem}.onnx"))).unwrap()).unwrap();
        assert_eq!(s.inputs[0].1[0], "batch", "{stem}: dynamic batch");
        assert_eq!(s.op_types[0], first_op, "{stem}: {:?}", s.op_types);
        assert!(out_dir.join(format!("{stem}.io.safetensors")).exists());
    }
    let missing = Command::new(env!("CARGO_BIN_EXE_export_onnx"))
        .args(["--data-dir", "/nonexistent", "--epochs", "1", "--out-dir", out_dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("--no-cnn"), "the error says how to skip the CNN");
}

#[test]
fn finetune_hooks_interop_and_transformer_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = run(env!("CARGO_BIN_EXE_finetune"), &["--epochs", "2", "--out-dir", d]);
    assert!(out.contains("missing [\"head.weight\", \"head.bias\"]") && out.contains("after fine-tuning"), "{out}");
    assert_outputs(dir.path(), "finetune");
    let out = run(env!("CARGO_BIN_EXE_hooks_demo"), &["--epochs", "1", "--out-dir", d]);
    assert!(out.contains("first seen at layer 1 (SqrtRelu)"), "{out}");
    assert_outputs(dir.path(), "hooks_demo");
    let out = run(env!("CARGO_BIN_EXE_pytorch_interop"), &["--epochs", "1", "--out-dir", d]);
    assert!(out.contains("0.9955 here, 0.9955 in PyTorch"), "{out}");
    assert!(dir.path().join("digits_mlp_from_rust.safetensors").exists());
    let out = run(env!("CARGO_BIN_EXE_char_transformer"), &["--steps", "3", "--sample-len", "20", "--out-dir", d]);
    assert!(out.contains("--- sample ---\nIt is a truth universally"), "{out}");
    assert_outputs(dir.path(), "char_transformer");
    rewind(&dir.path().join("char_transformer_checkpoint.safetensors"), 0, 2, 2);
    let out =
        run(env!("CARGO_BIN_EXE_char_transformer"), &["--steps", "3", "--sample-len", "5", "--resume", "--out-dir", d]);
    assert!(out.contains("resumed at step 2"), "{out}");
    let e = run_err(
        env!("CARGO_BIN_EXE_char_transformer"),
        &["--steps", "3", "--sample-len", "5", "--resume", "--seed", "4", "--out-dir", d],
    );
    assert!(e.contains("the checkpoint's run used --seed 0, this one --seed 4"), "{e}");
    let e = run_err(env!("CARGO_BIN_EXE_hooks_demo"), &["--device", "gpu", "--out-dir", d]);
    assert!(e.contains("hooks_demo does not support --device"), "{e}");
}

#[test]
fn lora_injects_trains_saves_and_reloads_adapters() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = run(env!("CARGO_BIN_EXE_lora"), &["--base-steps", "3", "--steps", "3", "--out-dir", d]);
    assert!(
        out.contains(
            r#"adapter targets: ["encoder.layers.0.self_attn.out_proj", "encoder.layers.1.self_attn.out_proj"]"#
        ),
        "{out}"
    );
    assert!(out.contains("trainable: 1024 adapter parameters") && out.contains("base trainable: 0"), "{out}");
    assert!(out.contains("reloaded base + adapters reproduce the fine-tuned logits exactly"), "{out}");
    // The adapters file holds the adapters alone.
    let sd = nn_core::StateDict::load(dir.path().join("lora_adapters.safetensors")).unwrap();
    let keys: Vec<&str> = sd.keys().collect();
    assert_eq!(
        keys,
        [
            "encoder_layers_0_self_attn_out_proj.lora_a",
            "encoder_layers_0_self_attn_out_proj.lora_b",
            "encoder_layers_1_self_attn_out_proj.lora_a",
            "encoder_layers_1_self_attn_out_proj.lora_b"
        ]
    );
    let svg = std::fs::read_to_string(dir.path().join("lora_loss.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("<polyline"), "not a loss curve");
}

/// `--limit` at its edges: 0 is refused when parsing; fewer samples than the examples'
/// fixed slices (128 activations, one 65-character window) run or are refused by name.
#[test]
fn limit_edges_run_or_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let e = run_err(env!("CARGO_BIN_EXE_digits_mlp"), &["--limit", "0", "--out-dir", d]);
    assert!(e.contains("--limit") && e.contains("1 or more"), "{e}");
    // Fewer than the 128 samples whose activations are captured.
    let out = run(env!("CARGO_BIN_EXE_hooks_demo"), &["--limit", "5", "--epochs", "1", "--out-dir", d]);
    assert!(out.contains("[5, 64]") && out.contains("held-out accuracy"), "{out}");
    let bin = env!("CARGO_BIN_EXE_char_transformer");
    let e = run_err(bin, &["--limit", "64", "--steps", "1", "--out-dir", d]);
    assert!(e.contains("--limit 64") && e.contains("--limit 65 or more"), "{e}");
    // Exactly one window: its only start, 0, is drawn (the range used to leave it out).
    let out = run(bin, &["--limit", "65", "--steps", "1", "--sample-len", "1", "--out-dir", d]);
    assert!(out.contains("65 for training"), "{out}");
}

/// Flags that would be ignored are refused: `--prompt` beside `--prompt-ids`, `--seed`
/// for greedy decoding; and a LoRA rank of 0.
#[test]
fn ignored_or_meaningless_flags_are_refused() {
    let generate = env!("CARGO_BIN_EXE_generate");
    let e = run_err(generate, &["/nonexistent", "--prompt", "It is", "--prompt-ids", "1,2"]);
    assert!(e.contains("--prompt") && e.contains("cannot be used with"), "{e}");
    let e = run_err(generate, &["/nonexistent", "--seed", "3"]);
    assert!(e.contains("--seed 3 seeds sampling") && e.contains("greedy"), "{e}");
    // With sampling the seed is used: the run gets as far as the (missing) model.
    let e = run_err(generate, &["/nonexistent", "--seed", "3", "--temperature", "0.8"]);
    assert!(!e.contains("seeds sampling") && e.contains("config.json"), "{e}");
    let e = run_err(env!("CARGO_BIN_EXE_lora"), &["--rank", "0"]);
    assert!(e.contains("--rank") && e.contains("1 or more"), "{e}");
    let e = run_err(env!("CARGO_BIN_EXE_gpt2_finetune"), &["--lora", "0"]);
    assert!(e.contains("--lora") && e.contains("1 or more"), "{e}");
}

#[test]
fn nanogpt_trains_evaluates_samples_and_refuses_what_it_ignores() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let bin = env!("CARGO_BIN_EXE_nanogpt");
    let out = run(bin, &["--steps", "2", "--eval-every", "1", "--sample-len", "5", "--out-dir", d]);
    assert!(out.contains("step 2: train loss") && out.contains("--- sample ---"), "{out}");
    assert_outputs(dir.path(), "nanogpt");
    assert!(run_err(bin, &["--steps", "2", "--resume", "--out-dir", d]).contains("does not support --resume"));
    assert!(run_err(bin, &["--steps", "0", "--out-dir", d]).contains("--steps and --eval-every must be at least 1"));
}
