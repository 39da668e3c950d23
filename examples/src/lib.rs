//! Shared helpers of the example binaries: command-line options, a progress bar, the loss
//! curve as an SVG picture, evaluation and checkpoint plumbing. The training loops live in
//! the binaries themselves, so each one reads as a complete program.

use std::path::{Path, PathBuf};

pub mod char_model;
pub mod nanogpt;

use indicatif::{ProgressBar, ProgressStyle};
use nn_core::checkpoint::Extra;
use nn_core::{no_grad, DType, Device, Forward, Layer, Module, Tensor};

/// The repository's `data/` folder (examples run from any working directory).
pub fn repo_data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("data")
}

/// Options every example accepts.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Training epochs.
    #[arg(long)]
    pub epochs: Option<u64>,
    /// Seed of initialisation, dropout and shuffling.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Folder for the checkpoint, final weights and loss curve (created if missing).
    #[arg(long, default_value = "out")]
    pub out_dir: PathBuf,
    /// Continue from the checkpoint in `--out-dir` instead of starting over.
    #[arg(long)]
    pub resume: bool,
    /// Use at most this many training samples (for quick runs; 1 or more).
    #[arg(long, value_parser = parse_positive)]
    pub limit: Option<usize>,
    /// Where to train: `cpu`, or `gpu` / `gpu:N` (needs the `gpu` cargo feature:
    /// `cargo run --release -p nn-examples --features gpu --bin ... -- --device gpu`).
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// Mixed precision: the forward pass and the loss under `autocast` to this dtype
    /// (parameters, gradients and the optimizer stay f32); `f16` also scales the loss with
    /// a `GradScaler`. On the CPU and on the GPU (either half type on any adapter: packed
    /// words where it lacks `SHADER_F16`).
    #[arg(long, value_enum)]
    pub amp: Option<Amp>,
}

/// The half dtype of `--amp`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amp {
    /// bfloat16 (f32's range, 8 bits of mantissa: no loss scaling needed).
    Bf16,
    /// IEEE half (5 exponent bits: the loss is scaled so that small gradients survive).
    F16,
}

impl Amp {
    /// The dtype.
    pub fn dtype(self) -> nn_core::DType {
        match self {
            Amp::Bf16 => nn_core::DType::BF16,
            Amp::F16 => nn_core::DType::F16,
        }
    }
}

/// A flag of [`CommonArgs`] that an example may or may not honour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flag {
    /// `--epochs`.
    Epochs,
    /// `--resume`.
    Resume,
    /// `--limit`.
    Limit,
    /// `--device` other than `cpu`.
    Device,
    /// `--amp`.
    Amp,
}

impl CommonArgs {
    /// Refuses the flags given that `example` does not honour, naming them: a flag parsed
    /// and ignored would run something other than what was asked (a GPU run on the CPU, a
    /// resumed run from scratch).
    ///
    /// ```
    /// use clap::Parser;
    /// use nn_examples::{CommonArgs, Flag};
    /// #[derive(Parser)]
    /// struct Args {
    ///     #[command(flatten)]
    ///     common: CommonArgs,
    /// }
    /// let args = Args::parse_from(["demo", "--amp", "bf16", "--epochs", "3"]);
    /// let e = args.common.refuse_unsupported("demo", &[Flag::Epochs]).unwrap_err();
    /// assert_eq!(e, "demo does not support --amp (it would ignore it)");
    /// assert!(args.common.refuse_unsupported("demo", &[Flag::Epochs, Flag::Amp]).is_ok());
    /// ```
    pub fn refuse_unsupported(&self, example: &str, honoured: &[Flag]) -> Result<(), String> {
        let given = [
            (Flag::Epochs, "--epochs", self.epochs.is_some()),
            (Flag::Resume, "--resume", self.resume),
            (Flag::Limit, "--limit", self.limit.is_some()),
            (Flag::Device, "--device", self.device != Device::Cpu),
            (Flag::Amp, "--amp", self.amp.is_some()),
        ];
        let refused: Vec<&str> =
            given.iter().filter(|(f, _, set)| *set && !honoured.contains(f)).map(|(_, name, _)| *name).collect();
        match refused.as_slice() {
            [] => Ok(()),
            [one] => Err(format!("{example} does not support {one} (it would ignore it)")),
            many => Err(format!("{example} does not support {} (it would ignore them)", many.join(", "))),
        }
    }

    /// After `--resume` read a checkpoint at `start` (epochs or steps, `unit`): an error
    /// when `end` leaves nothing to train, instead of a run that trains nothing and says
    /// it resumed.
    pub fn check_resume_end(&self, start: u64, end: u64, unit: &str) -> Result<(), String> {
        if start >= end {
            return Err(format!(
                "the checkpoint is at {unit} {start} and the run ends at {unit} {end}: nothing left to train; pass a \
                 larger --epochs (or --steps), or drop --resume to start over"
            ));
        }
        Ok(())
    }

    /// Records in `ck` the length (`len` epochs or steps) its learning-rate schedule was
    /// built for, which [`check_schedule_length`](CommonArgs::check_schedule_length) reads
    /// back on resume.
    pub fn record_schedule_length(ck: &mut nn_core::checkpoint::Checkpoint, len: u64) {
        ck.extra.insert("schedule_length".into(), len.into());
    }

    /// On resume: an error when the run was planned for another length (`--epochs`). The
    /// restored scheduler keeps the saved schedule (a cosine's `t_max`), so the loop would
    /// stop before it ends or run past it.
    pub fn check_schedule_length(ck: &nn_core::checkpoint::Checkpoint, len: u64, unit: &str) -> Result<(), String> {
        match ck.extra.get("schedule_length").and_then(|e| e.as_f64()) {
            Some(saved) if saved != len as f64 => Err(format!(
                "the checkpoint's run has a learning-rate schedule of {saved} {unit}s, this one {len}: resuming would \
                 change the schedule mid-run; resume with the run's own length, or drop --resume to start over"
            )),
            _ => Ok(()),
        }
    }

    /// The settings a resumed run must share with the checkpoint's run: `--seed` (the
    /// train/test split and the shuffling follow it), `--limit` (the training samples),
    /// `--amp` (the precision), then `more`, the example's own (`("--batch-size", 64)`).
    fn settings(&self, more: &[(&'static str, u64)]) -> Vec<(&'static str, Option<u64>)> {
        let amp = self.amp.map(|a| match a {
            Amp::Bf16 => AMP_BF16,
            Amp::F16 => AMP_F16,
        });
        let mut s = vec![("--seed", Some(self.seed)), ("--limit", self.limit.map(|l| l as u64)), ("--amp", amp)];
        s.extend(more.iter().map(|&(flag, v)| (flag, Some(v))));
        s
    }

    /// Records in `ck` the run's settings (`--seed`, `--limit`, `--amp` and `more`, the
    /// example's own flags with their values), which
    /// [`check_settings`](CommonArgs::check_settings) compares on resume. Each value is
    /// kept exactly, as two 32-bit halves (the layout of every checkpoint the examples
    /// write, so existing ones resume).
    pub fn record_settings(&self, ck: &mut nn_core::checkpoint::Checkpoint, more: &[(&'static str, u64)]) {
        for (flag, value) in self.settings(more) {
            let key = setting_key(flag);
            match value {
                Some(v) => {
                    ck.extra.insert(format!("{key}.hi"), (v >> 32).into());
                    ck.extra.insert(format!("{key}.lo"), (v & 0xffff_ffff).into());
                }
                None => {
                    ck.extra.insert(format!("{key}.none"), 1.0.into());
                }
            }
        }
    }

    /// On resume: an error naming the flag, the checkpoint's value and this run's when a
    /// setting [`record_settings`](CommonArgs::record_settings) saved differs (another
    /// `--seed` would recompute another train/test split and train on held-out samples;
    /// another `--limit`, `--amp` or batch size would continue another run). A setting the
    /// checkpoint does not record (one written before they were) is not checked.
    ///
    /// ```
    /// use clap::Parser;
    /// use nn_examples::CommonArgs;
    /// #[derive(Parser)]
    /// struct Args {
    ///     #[command(flatten)]
    ///     common: CommonArgs,
    /// }
    /// let common = |args: &[&str]| Args::parse_from(std::iter::once("demo").chain(args.iter().copied())).common;
    /// let run = common(&["--seed", "7"]);
    /// let mut ck = nn_core::checkpoint::Checkpoint::new(nn_core::StateDict::default(), None, None, 1, 1);
    /// run.record_settings(&mut ck, &[("--batch-size", 32)]);
    /// assert!(run.check_settings(&ck, &[("--batch-size", 32)]).is_ok());
    /// let e = run.check_settings(&ck, &[("--batch-size", 64)]).unwrap_err();
    /// assert!(e.contains("used --batch-size 32, this one --batch-size 64"), "{e}");
    /// let e = common(&["--seed", "8"]).check_settings(&ck, &[("--batch-size", 32)]).unwrap_err();
    /// assert!(e.contains("used --seed 7, this one --seed 8"), "{e}");
    /// let e = common(&["--seed", "7", "--limit", "100"]).check_settings(&ck, &[("--batch-size", 32)]).unwrap_err();
    /// assert!(e.contains("used no --limit, this one --limit 100"), "{e}");
    /// // A seed past 2^53 is kept exactly.
    /// let big = common(&["--seed", "18446744073709551615"]);
    /// big.record_settings(&mut ck, &[]);
    /// let e = common(&["--seed", "18446744073709551614"]).check_settings(&ck, &[]).unwrap_err();
    /// assert!(e.contains("used --seed 18446744073709551615"), "{e}");
    /// ```
    pub fn check_settings(
        &self,
        ck: &nn_core::checkpoint::Checkpoint,
        more: &[(&'static str, u64)],
    ) -> Result<(), String> {
        for (flag, given) in self.settings(more) {
            let key = setting_key(flag);
            let saved = if ck.extra.contains_key(&format!("{key}.none")) {
                Some(None)
            } else {
                let half = |part: &str| ck.extra.get(&format!("{key}.{part}")).and_then(|e| e.as_f64());
                match (half("hi"), half("lo")) {
                    (Some(hi), Some(lo)) => Some(Some(((hi as u64) << 32) | lo as u64)),
                    _ => None,
                }
            };
            if let Some(saved) = saved.filter(|&s| s != given) {
                return Err(format!(
                    "--resume: the checkpoint's run used {}, this one {}: resuming would continue it on other data or \
                     with other settings (where the train/test split follows --seed, another seed trains on held-out \
                     samples); resume with {}, or drop --resume to start over",
                    show_setting(flag, saved),
                    show_setting(flag, given),
                    show_setting(flag, saved)
                ));
            }
        }
        Ok(())
    }

    /// The training set `(x, y)` cut to its first `--limit` samples (all of it without
    /// `--limit`): an error when that leaves no sample, instead of a run that trains on
    /// nothing and prints made-up numbers.
    pub fn limit_train(&self, x: Tensor, y: Tensor) -> Result<(Tensor, Tensor), String> {
        let (x, y) = limit(x, y, self.limit);
        check_nonempty("training", &x)?;
        Ok((x, y))
    }

    /// `out_dir/<name>`, created.
    pub fn out(&self, name: &str) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&self.out_dir)?;
        Ok(self.out_dir.join(name))
    }

    /// `--device`, checked: an error saying why when it cannot be used (a GPU without the
    /// `gpu` feature, or none found).
    pub fn device(&self) -> nn_core::Result<Device> {
        self.device.check()?;
        Ok(self.device)
    }

    /// Runs `f` (the forward pass and the loss) under `--amp`'s autocast on `--device`
    /// (PyTorch's `torch.autocast("cpu")` or `("cuda")`), or as it is.
    pub fn autocast<R>(&self, f: impl FnOnce() -> R) -> R {
        match self.amp {
            Some(a) => nn_core::amp::autocast(self.device, a.dtype(), f),
            None => f(),
        }
    }

    /// The loss scaler `--amp` needs: scaling with `f16`, a pass-through otherwise.
    pub fn grad_scaler(&self) -> nn_core::amp::GradScaler {
        nn_core::amp::GradScaler::with_config(nn_core::amp::GradScalerConfig {
            enabled: self.amp == Some(Amp::F16),
            ..Default::default()
        })
    }
}

/// `--amp`'s values as recorded by [`CommonArgs::record_settings`].
const AMP_BF16: u64 = 1;
const AMP_F16: u64 = 2;

/// The `extra` key stem of a setting (`--batch-size` -> `setting.batch-size`).
fn setting_key(flag: &str) -> String {
    format!("setting.{}", flag.trim_start_matches('-'))
}

/// A setting as the user gives it: `--seed 3`, `--amp bf16`, `no --limit`.
fn show_setting(flag: &str, value: Option<u64>) -> String {
    match (flag, value) {
        (_, None) => format!("no {flag}"),
        ("--amp", Some(AMP_BF16)) => "--amp bf16".into(),
        ("--amp", Some(AMP_F16)) => "--amp f16".into(),
        (_, Some(v)) => format!("{flag} {v}"),
    }
}

/// Parses a count that must be at least 1 (clap's `value_parser` of `--limit`, a rank, a
/// batch size): 0 would leave nothing to train, or divide by zero.
///
/// ```
/// assert_eq!(nn_examples::parse_positive("3"), Ok(3));
/// assert!(nn_examples::parse_positive("0").unwrap_err().contains("1 or more"));
/// assert!(nn_examples::parse_positive("x").is_err());
/// ```
pub fn parse_positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("0 leaves nothing to work with: give 1 or more".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a whole number of 1 or more ({e})")),
    }
}

/// An error naming the `what` set (`"training"`, `"test"`) when `x` holds no sample: a
/// loop over it would train on nothing, and a mean over it would divide by zero.
pub fn check_nonempty(what: &str, x: &Tensor) -> Result<(), String> {
    if x.shape().first().is_some_and(|&n| n > 0) {
        Ok(())
    } else {
        Err(format!("the {what} set is empty (shape {:?}): there is nothing to train or evaluate on", x.shape()))
    }
}

/// The losses as a checkpoint's `extra` entries (`loss.<i>`), leaving out non-finite ones
/// (a step the gradient scaler skipped): `Checkpoint::save` refuses them, as JSON cannot
/// hold them.
pub fn losses_extra(losses: &[f64]) -> std::collections::HashMap<String, Extra> {
    losses.iter().enumerate().filter(|(_, l)| l.is_finite()).map(|(i, &l)| (format!("loss.{i}"), l.into())).collect()
}

/// The first `len` losses [`losses_extra`] stored in `extra`, each at its own index: NaN
/// where no entry is (a non-finite loss left out; [`write_loss_svg`] draws it as a gap),
/// and entries past `len` ignored (the checkpoint was rewound: those steps run again).
/// `len` is the count of losses the checkpoint's run had made by then (its epoch for a
/// per-epoch curve, its step for a per-step one).
///
/// ```
/// let extra = nn_examples::losses_extra(&[1.0, f64::NAN, 3.0, 4.0]);
/// let back = nn_examples::losses_from_extra(&extra, 3);
/// assert_eq!((back[0], back[1].is_nan(), back[2], back.len()), (1.0, true, 3.0, 3));
/// ```
pub fn losses_from_extra(extra: &std::collections::HashMap<String, Extra>, len: usize) -> Vec<f64> {
    let mut losses = vec![f64::NAN; len];
    for (k, v) in extra {
        let at = k.strip_prefix("loss.").and_then(|i| i.parse::<usize>().ok()).filter(|&i| i < len);
        if let (Some(i), Some(v)) = (at, v.as_f64()) {
            losses[i] = v;
        }
    }
    losses
}

/// A progress bar over `len` steps showing the running loss (hidden when stderr is not a
/// terminal).
pub fn progress(len: u64, label: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} {msg} ({elapsed}, eta {eta})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_prefix(label.to_string());
    pb
}

/// Classification accuracy of `model` on `(x, y)`, in eval mode (dropout off, batch norm
/// on its running statistics; the model's previous mode is restored afterwards), in
/// batches without a graph (each batch moved to the device of the model's parameters).
///
/// # Panics
/// When `x` holds no sample (check with [`check_nonempty`] first).
pub fn accuracy<M: Layer>(model: &mut M, x: &Tensor, y: &Tensor, batch: usize) -> f64 {
    in_eval_mode(model, |model| {
        let device = model.parameters().first().map_or(Device::Cpu, |p| p.device());
        no_grad(|| {
            let n = x.shape()[0];
            assert!(n > 0, "accuracy: no samples to evaluate");
            let mut correct = 0.0;
            for start in (0..n).step_by(batch) {
                let len = batch.min(n - start);
                let pred = model.forward(&x.narrow(0, start, len).to_device(device)).argmax(-1, false);
                correct += pred.eq(&y.narrow(0, start, len).to_device(device)).to_dtype(DType::F32).sum().item();
            }
            correct / n as f64
        })
    })
}

/// Mean cross-entropy of `model` over every row of `x` against class labels `y`, in
/// batches of `batch` rows, without grad and in eval mode (the model's previous mode is
/// restored afterwards): the held-out loss.
///
/// ```
/// use nn_core::Module;
/// use nn_examples::test_loss;
/// use nn_layers::Linear;
/// let mut model = Linear::new(3, 2);
/// let (x, y) = (nn_core::Tensor::zeros(&[5, 3]), nn_core::Tensor::from_vec_i64(vec![0, 1, 0, 1, 1], &[5]));
/// // Zero inputs give the bias as logits for every row.
/// let b = model.bias.as_ref().unwrap().to_vec();
/// let lse = (b[0].exp() + b[1].exp()).ln();
/// let want = (2.0 * (lse - b[0]) + 3.0 * (lse - b[1])) / 5.0;
/// assert!((test_loss(&mut model, &x, &y, 2) - f64::from(want)).abs() < 1e-6);
/// // Evaluated in eval mode; the model is back in its training mode after.
/// assert!(model.is_training());
/// ```
///
/// # Panics
/// When `x` holds no sample (check with [`check_nonempty`] first).
pub fn test_loss<M: Layer>(model: &mut M, x: &Tensor, y: &Tensor, batch: usize) -> f64 {
    in_eval_mode(model, |model| {
        let device = model.parameters().first().map_or(Device::Cpu, |p| p.device());
        no_grad(|| {
            let n = x.shape()[0];
            assert!(n > 0, "test_loss: no samples to evaluate");
            let mut total = 0.0;
            for start in (0..n).step_by(batch) {
                let len = batch.min(n - start);
                let logits = model.forward(&x.narrow(0, start, len).to_device(device));
                let loss = nn_core::functional::cross_entropy(&logits, &y.narrow(0, start, len).to_device(device));
                total += loss.item() * len as f64;
            }
            total / n as f64
        })
    })
}

/// Runs `f` with `model` in eval mode, then puts the model back in the mode it was in.
fn in_eval_mode<M: Layer, R>(model: &mut M, f: impl FnOnce(&M) -> R) -> R {
    let was_training = model.is_training();
    model.eval();
    let r = f(&*model);
    model.set_training(was_training);
    r
}

/// The `mnist` example's MLP: 784 -> 256 -> 10 with dropout 0.1 (also trained by
/// nn-distributed's `mnist_ddp`).
pub fn mnist_mlp() -> nn_layers::Sequential {
    use nn_layers::{Dropout, Flatten, Linear, ReLU, Sequential};
    Sequential::new()
        .add(Flatten::new())
        .add(Linear::new(784, 256))
        .add(ReLU::new())
        .add(Dropout::new(0.1))
        .add(Linear::new(256, 10))
}

/// The `mnist` example's CNN: two 3x3 conv / batch-norm / ReLU / 2x2 max-pool stages (16 and
/// 32 channels), then 1568 -> 128 -> 10 with dropout 0.25 (also trained by nn-distributed's
/// `mnist_ddp` and timed by its `ddp_bench`).
pub fn mnist_cnn() -> nn_layers::Sequential {
    use nn_layers::{BatchNorm2d, Conv2d, Conv2dConfig, Dropout, Flatten, Linear, MaxPool2d, ReLU, Sequential};
    let pad = Conv2dConfig { padding: 1, ..Default::default() };
    Sequential::new()
        .add(Conv2d::with_config(1, 16, 3, pad))
        .add(BatchNorm2d::new(16))
        .add(ReLU::new())
        .add(MaxPool2d::new(2))
        .add(Conv2d::with_config(16, 32, 3, pad))
        .add(BatchNorm2d::new(32))
        .add(ReLU::new())
        .add(MaxPool2d::new(2))
        .add(Flatten::new())
        .add(Linear::new(32 * 7 * 7, 128))
        .add(ReLU::new())
        .add(Dropout::new(0.25))
        .add(Linear::new(128, 10))
}

/// Takes the first `limit` samples of `(x, y)`, if a limit is given. (`Some(0)` leaves
/// none: the examples cut their training sets with [`CommonArgs::limit_train`], which
/// refuses an empty result.)
pub fn limit(x: Tensor, y: Tensor, limit: Option<usize>) -> (Tensor, Tensor) {
    match limit {
        Some(l) if l < x.shape()[0] => (x.narrow(0, 0, l).contiguous(), y.narrow(0, 0, l).contiguous()),
        _ => (x, y),
    }
}

/// Splits `(x, y)` into a training part and the last `test_fraction` as held-out data,
/// after a seeded shuffle. The split follows `seed`: a resumed run must use the seed of
/// the run it continues ([`CommonArgs::check_settings`]), or it trains on held-out samples.
pub fn split(x: &Tensor, y: &Tensor, test_fraction: f64, seed: u64) -> ((Tensor, Tensor), (Tensor, Tensor)) {
    let n = x.shape()[0];
    let loader = nn_data::DataLoader::new(x.clone(), y.clone(), n).shuffle(seed);
    let (xs, ys) = loader.epoch(0).next().expect("one batch");
    let n_test = ((n as f64) * test_fraction).round() as usize;
    let n_train = n - n_test;
    (
        (xs.narrow(0, 0, n_train).contiguous(), ys.narrow(0, 0, n_train).contiguous()),
        (xs.narrow(0, n_train, n_test).contiguous(), ys.narrow(0, n_train, n_test).contiguous()),
    )
}

/// Draws loss curves (`series`: a name and the values at steps 0, 1, ...; non-finite
/// values are gaps that break the line, so a series can start late or skip a step) to an
/// SVG picture with `plotters`.
///
/// # Errors
/// When the file cannot be written.
pub fn write_loss_svg(path: &Path, title: &str, x_label: &str, series: &[(&str, &[f64])]) -> std::io::Result<()> {
    use plotters::prelude::*;
    let finite = || series.iter().flat_map(|(_, s)| s.iter().copied()).filter(|v| v.is_finite());
    let (lo, hi) = finite().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    let (lo, hi) = if lo.is_finite() && hi > lo { (lo.min(0.0), hi * 1.05) } else { (0.0, 1.0) };
    let steps = series.iter().map(|(_, s)| s.len()).max().unwrap_or(1).max(2);
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (720, 400)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..(steps - 1) as f64, lo..hi)?;
        chart.configure_mesh().x_desc(x_label).y_desc("loss").x_label_formatter(&|x| format!("{x:.0}")).draw()?;
        let colors = [BLUE, RED, GREEN, MAGENTA];
        for (j, (name, s)) in series.iter().enumerate() {
            let color = colors[j % colors.len()];
            // One line per run of finite values: a non-finite value breaks the line (a gap),
            // instead of a segment joining its neighbours as if it had been measured.
            let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
            let mut open = false;
            for (i, &v) in s.iter().enumerate() {
                if !v.is_finite() {
                    open = false;
                    continue;
                }
                if !open {
                    runs.push(Vec::new());
                    open = true;
                }
                runs.last_mut().expect("a run was just opened").push((i as f64, v));
            }
            for run in &runs {
                if let [point] = run.as_slice() {
                    // A lone value between gaps: a dot (a one-point line draws nothing).
                    chart.draw_series(std::iter::once(Circle::new(*point, 2, color.filled())))?;
                } else {
                    chart.draw_series(LineSeries::new(run.iter().copied(), color.stroke_width(2)))?;
                }
            }
            // The legend entry, once per series (also for one with no finite value).
            chart
                .draw_series(LineSeries::new(std::iter::empty::<(f64, f64)>(), color.stroke_width(2)))?
                .label(*name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| std::io::Error::other(format!("drawing {}: {e}", path.display())))
}

/// Prints where the example wrote its files.
pub fn report_outputs<M: Module>(model: &M, weights: &Path, curve: &Path) -> nn_core::Result<()> {
    model.save(weights)?;
    println!("wrote {} and {}", weights.display(), curve.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A non-finite value breaks the line: one more line than the same curve without it.
    #[test]
    fn loss_svg_draws_a_non_finite_value_as_a_gap() {
        let dir = tempfile::tempdir().unwrap();
        let lines = |values: &[f64]| {
            let path = dir.path().join("curve.svg");
            write_loss_svg(&path, "t", "step", &[("loss", values)]).unwrap();
            std::fs::read_to_string(path).unwrap().matches("<polyline").count()
        };
        // The same axes throughout (5 steps, values up to 5): only the curve's lines differ.
        let whole = lines(&[5.0, 4.0, 3.0, 2.0, 1.0]);
        assert_eq!(lines(&[5.0, 4.0, f64::NAN, 2.0, 1.0]), whole + 1);
        assert_eq!(lines(&[f64::NAN, 5.0, 3.0, 2.0, 1.0]), whole, "a late start is no gap");
    }

    #[test]
    fn losses_come_back_at_their_own_index() {
        let extra = losses_extra(&[0.5, f64::INFINITY, 0.25, f64::NAN]);
        let back = losses_from_extra(&extra, 4);
        assert_eq!(back[0], 0.5);
        assert!(back[1].is_nan() && back[3].is_nan(), "{back:?}");
        assert_eq!(back[2], 0.25);
        // A rewound checkpoint: the later losses are made again.
        assert_eq!(losses_from_extra(&extra, 1), [0.5]);
        assert!(losses_from_extra(&std::collections::HashMap::new(), 2).iter().all(|l| l.is_nan()));
    }

    #[test]
    fn an_empty_set_is_refused_by_name() {
        let e = check_nonempty("test", &Tensor::zeros(&[0, 4])).unwrap_err();
        assert!(e.contains("the test set is empty"), "{e}");
        assert!(check_nonempty("test", &Tensor::zeros(&[1, 4])).is_ok());
    }
}
