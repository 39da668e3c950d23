//! PyTorch's own sample matrix through nn: every committed OpInfo case of
//! `tests/fixtures/pytorch/opinfo.py` (PyTorch 2.15's `op_db`, sample and reference inputs
//! in float64 and float32, error inputs) run on the ops nn has.
//!
//! A sample passes when nn's outputs have PyTorch's shapes, dtypes and values, the
//! gradients of `sum(out * cot)` with respect to every floating leaf agree, and the
//! tensors the call updates in place (batch norm's running statistics) hold PyTorch's
//! values after it. An error input passes when nn refuses it with its own message (a
//! panic raised by nn's checks; a Rust index, slice or arithmetic panic, or an `unwrap`,
//! counts as a crash). A case whose call uses an argument, a keyword or a value nn cannot
//! express is *unsupported*: the test prints those by reason and fails on everything
//! else that is not a pass, and when an entry of the fixture has no passing case.

mod call;
mod ops;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use nn_core::{DType, Device, StateDict, Tensor};
use serde_json::Value;

use call::{Call, Unsupported};

/// What one case gave.
#[derive(Debug)]
enum Outcome {
    Pass,
    Unsupported(String),
    Fail(String),
}

struct Fixture {
    cases: Vec<Value>,
    tensors: StateDict,
}

fn fixture() -> Fixture {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch/opinfo");
    let text = std::fs::read_to_string(dir.join("cases.json")).expect("opinfo/cases.json");
    let cases: Vec<Value> = serde_json::from_str(&text).expect("opinfo/cases.json parses");
    let tensors = StateDict::load(dir.join("tensors.safetensors")).unwrap_or_else(|e| panic!("{e}"));
    Fixture { cases, tensors }
}

/// A panic caught from one case: its message and where it was raised.
#[derive(Debug)]
pub(crate) struct Caught {
    message: String,
    file: String,
}

thread_local! {
    static QUIET: std::cell::RefCell<Option<Caught>> = const { std::cell::RefCell::new(None) };
    static CATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, catching a panic without printing it (on this thread only: the other tests'
/// panics still print through the previous hook).
fn catching<T>(f: impl FnOnce() -> T) -> Result<T, Caught> {
    if std::env::var_os("OPINFO_CASE").is_some() {
        return Ok(f());
    }
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CATCHING.with(|c| c.get()) {
                let message = info
                    .payload()
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                let file = info.location().map(|l| l.file().to_string()).unwrap_or_default();
                QUIET.with(|q| *q.borrow_mut() = Some(Caught { message, file }));
            } else {
                previous(info);
            }
        }));
    });
    CATCHING.with(|c| c.set(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(false));
    r.map_err(|_| {
        QUIET.with(|q| q.borrow_mut().take()).unwrap_or(Caught { message: String::new(), file: String::new() })
    })
}

impl Caught {
    /// A panic that is not one of nn's own refusals: raised by an index or slice out of
    /// range, an arithmetic overflow or an `unwrap` (whose location `track_caller` may have
    /// moved to the caller), or with no message.
    fn is_crash(&self) -> bool {
        let inner = [
            "index out of bounds",
            "range end index",
            "range start index",
            "slice index",
            "attempt to",
            "called `Option::unwrap()`",
            "called `Result::unwrap()`",
        ];
        self.message.is_empty() || inner.iter().any(|p| self.message.contains(p))
    }
}

fn torch_dtype(d: DType) -> &'static str {
    match d {
        DType::F64 => "float64",
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::I64 => "int64",
        DType::Bool => "bool",
    }
}

/// Whether `actual` is `expected` within the tolerance of `dtype` (`scale` times it for
/// gradients): shape, dtype and every element (NaN where PyTorch has NaN, infinities
/// equal).
fn compare(what: &str, actual: &Tensor, expected: &Tensor, scale: f64, loose: bool) -> Result<(), String> {
    if actual.shape() != expected.shape() {
        return Err(format!("{what}: shape {:?}, PyTorch {:?}", actual.shape(), expected.shape()));
    }
    if actual.dtype() != expected.dtype() {
        return Err(format!(
            "{what}: dtype {}, PyTorch {}",
            torch_dtype(actual.dtype()),
            torch_dtype(expected.dtype())
        ));
    }
    let (rtol, atol) = match expected.dtype() {
        // A second device is held to float32's tolerance of PyTorch's CPU values.
        DType::F64 | DType::F32 if loose => (2e-5, 2e-5),
        DType::F64 => (1e-7, 1e-9),
        DType::F32 => (2e-5, 2e-5),
        _ => (0.0, 0.0),
    };
    let (a, e) = (actual.to_vec_f64(), expected.to_vec_f64());
    for (i, (x, y)) in a.iter().zip(&e).enumerate() {
        let ok = x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= scale * (atol + rtol * y.abs());
        if !ok {
            return Err(format!("{what}: element {i} of {}: {x} where PyTorch has {y}", e.len()));
        }
    }
    Ok(())
}

/// Runs one sample case: the call, then its outputs, gradients and in-place updates.
fn run_sample(f: &Fixture, index: usize, case: &Value, device: Device) -> Outcome {
    let grads: BTreeMap<String, String> = case["grads"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string())).collect())
        .unwrap_or_default();
    let call = match Call::new(case, index, &f.tensors, device, &|name| grads.contains_key(name)) {
        Ok(c) => c,
        Err(Unsupported(why)) => return Outcome::Unsupported(why),
    };
    let op = case["op"].as_str().unwrap();
    let outs = match catching(|| ops::run(op, &call)) {
        Ok(Ok(outs)) => outs,
        Ok(Err(Unsupported(why))) => return Outcome::Unsupported(why),
        Err(p) if p.is_crash() => return Outcome::Fail(format!("crashed: {} ({})", p.message, p.file)),
        Err(p) => return Outcome::Fail(format!("refused: {} ({})", p.message, p.file)),
    };
    if let Some(why) = call.unused() {
        return Outcome::Unsupported(why);
    }
    let expected: Vec<Option<&str>> = case["out"].as_array().unwrap().iter().map(|v| v.as_str()).collect();
    if outs.len() != expected.len() {
        return Outcome::Fail(format!("{} outputs, PyTorch {}", outs.len(), expected.len()));
    }
    for (i, (y, e)) in outs.iter().zip(&expected).enumerate() {
        if let Some(e) = e {
            if y.device() != device {
                return Outcome::Fail(format!("output {i} is on {}, not {device}", y.device()));
            }
            let y = y.to_device(Device::Cpu);
            if let Err(why) = compare(&format!("output {i}"), &y, f.tensors.get(e).unwrap(), 1.0, device != Device::Cpu)
            {
                return Outcome::Fail(why);
            }
        }
    }
    if let Some(after) = case["after"].as_object() {
        for (name, e) in after {
            let t = call.tensor(name).to_device(Device::Cpu);
            if let Err(why) = compare(
                &format!("{name} after the call"),
                &t,
                f.tensors.get(e.as_str().unwrap()).unwrap(),
                1.0,
                device != Device::Cpu,
            ) {
                return Outcome::Fail(why);
            }
        }
    }
    if let Some(cots) = case["cot"].as_array() {
        let float: Vec<&Tensor> = outs.iter().filter(|t| t.requires_grad()).collect();
        if float.len() != cots.len() {
            return Outcome::Fail(format!("{} outputs require grad, PyTorch {}", float.len(), cots.len()));
        }
        let r = catching(|| {
            let mut loss: Option<Tensor> = None;
            for (y, c) in float.iter().zip(cots) {
                let term = (*y * &f.tensors.get(c.as_str().unwrap()).unwrap().to_device(device)).sum();
                loss = Some(match loss {
                    Some(l) => l + term,
                    None => term,
                });
            }
            loss.expect("one output").backward();
        });
        if let Err(p) = r {
            return Outcome::Fail(format!("backward panicked: {} ({})", p.message, p.file));
        }
        for (leaf, g) in &grads {
            let expected = f.tensors.get(g).unwrap();
            let actual =
                call.tensor(leaf).grad().map_or_else(|| Tensor::zeros_like(expected), |g| g.to_device(Device::Cpu));
            if let Err(why) = compare(&format!("gradient of {leaf}"), &actual, expected, 10.0, device != Device::Cpu) {
                return Outcome::Fail(why);
            }
        }
    }
    Outcome::Pass
}

/// Runs one error case: nn must refuse it with its own message.
fn run_error(f: &Fixture, index: usize, case: &Value, device: Device) -> Outcome {
    let call = match Call::new(case, index, &f.tensors, device, &|_| false) {
        Ok(c) => c,
        Err(Unsupported(why)) => return Outcome::Unsupported(why),
    };
    let op = case["op"].as_str().unwrap();
    match catching(|| ops::run(op, &call)) {
        Ok(Ok(_)) if call.unused().is_some() => Outcome::Unsupported(call.unused().unwrap()),
        Ok(Ok(_)) => {
            let error = case["error"].as_str().unwrap_or("");
            match ACCEPTED.iter().find(|(o, e, _)| *o == op && error.contains(e)) {
                Some((_, _, why)) => Outcome::Unsupported(format!("accepted on purpose: {why}")),
                None => Outcome::Fail(format!("accepted an input PyTorch refuses ({error})")),
            }
        }
        Ok(Err(Unsupported(why))) if why.starts_with(call::UNREPRESENTABLE) => Outcome::Pass,
        Ok(Err(Unsupported(why))) => Outcome::Unsupported(why),
        Err(p) if p.is_crash() => {
            Outcome::Fail(format!("refused by a crash, not a message: {} ({})", p.message, p.file))
        }
        Err(_) => Outcome::Pass,
    }
}

/// The entries of the fixture nn has no form of yet, each with why: their cases are
/// unsupported. The test fails when one of them passes a case (take it off this list) and
/// when any other entry passes none.
const MISSING: &[(&str, &str)] = &[];

/// Error inputs nn accepts on purpose: (entry, PyTorch's message, why nn computes it).
const ACCEPTED: &[(&str, &str, &str)] = &[
    (
        "amax",
        "only tensors with up to 64 dims are supported",
        "a limit of PyTorch's reduction kernels (a 64-bit dim mask), not of the operation: nn reduces any rank",
    ),
    ("amin", "only tensors with up to 64 dims are supported", "as amax"),
];

/// What one run of the committed cases on one device gave.
struct Sweep {
    passes: HashMap<String, usize>,
    failures: Vec<String>,
    unsupported: BTreeMap<String, usize>,
    total: usize,
    /// `OPINFO_CASE`, when set: the one case run.
    only: Option<usize>,
}

impl Sweep {
    fn passed(&self) -> usize {
        self.passes.values().sum()
    }
}

/// Runs every committed case (or `OPINFO_CASE=<n>` alone, its panics printed, with
/// `RUST_BACKTRACE`) with its tensors on `device`, and prints the summary.
fn sweep(device: Device) -> Sweep {
    let f = fixture();
    let only: Option<usize> = std::env::var("OPINFO_CASE").ok().map(|v| v.parse().expect("OPINFO_CASE is a number"));
    let mut s = Sweep { passes: HashMap::new(), failures: Vec::new(), unsupported: BTreeMap::new(), total: 0, only };
    for (i, case) in f.cases.iter().enumerate() {
        if only.is_some_and(|n| n != i) {
            continue;
        }
        let op = case["op"].as_str().unwrap();
        let kind = case["kind"].as_str().unwrap();
        s.passes.entry(op.to_string()).or_default();
        nn_core::manual_seed(0);
        let outcome = if kind == "error" { run_error(&f, i, case, device) } else { run_sample(&f, i, case, device) };
        s.total += 1;
        match outcome {
            Outcome::Pass => *s.passes.get_mut(op).unwrap() += 1,
            Outcome::Unsupported(why) => *s.unsupported.entry(format!("{op}: {why}")).or_default() += 1,
            Outcome::Fail(why) => {
                s.failures.push(format!("case {i} ({op}, {kind}, {}): {why}", case["dtype"].as_str().unwrap_or("-")))
            }
        }
    }
    eprintln!(
        "OpInfo on {device}: {} of {} cases pass ({:.1}%), {} unsupported, {} fail",
        s.passed(),
        s.total,
        100.0 * s.passed() as f64 / s.total.max(1) as f64,
        s.unsupported.values().sum::<usize>(),
        s.failures.len()
    );
    for (why, n) in &s.unsupported {
        eprintln!("  unsupported x{n:<4} {why}");
    }
    for f in &s.failures {
        eprintln!("  FAIL {f}");
    }
    s
}

#[test]
fn pytorch_opinfo_samples_pass_or_are_unsupported_for_a_listed_reason() {
    let s = sweep(Device::Cpu);
    let missing = |op: &str| MISSING.iter().any(|(m, _)| *m == op);
    for (op, why) in MISSING {
        eprintln!("  missing {op}: {why}");
    }
    let mut none: Vec<&String> = s.passes.iter().filter(|(op, n)| **n == 0 && !missing(op)).map(|(op, _)| op).collect();
    none.sort();
    let gained: Vec<&String> = s.passes.iter().filter(|(op, n)| **n > 0 && missing(op)).map(|(op, _)| op).collect();
    assert!(s.failures.is_empty(), "{} OpInfo cases fail (listed above)", s.failures.len());
    if s.only.is_none() {
        // Issue 52's target: at least 97% of the committed cases pass.
        assert!(s.passed() * 100 >= s.total * 97, "{} of {} OpInfo cases pass, under 97%", s.passed(), s.total);
        assert!(none.is_empty(), "OpInfo entries with no passing case: {none:?}");
        assert!(gained.is_empty(), "entries of MISSING that pass cases now (take them off the list): {gained:?}");
    }
}

/// The same committed cases with their tensors on `gpu:0` (lavapipe in CI), against
/// PyTorch's values within float32's tolerance: every case the CPU passes passes there
/// (host-path kernels included), and the results stay on the device.
#[cfg(feature = "gpu")]
#[test]
#[ignore = "not yet passing: a GPU index check of an error input (gather) is reported at the next host read, \
            outside its case, so the sweep must read back inside each error case first (issue 52 item 5)"]
fn pytorch_opinfo_samples_pass_on_the_gpu() {
    let gpu = Device::Gpu(0);
    gpu.check().unwrap_or_else(|e| panic!("the OpInfo sweep with `gpu` needs gpu:0: {e}"));
    let (cpu, on_gpu) = (sweep(Device::Cpu), sweep(gpu));
    assert!(on_gpu.failures.is_empty(), "{} OpInfo cases fail on {gpu} (listed above)", on_gpu.failures.len());
    assert_eq!(on_gpu.passed(), cpu.passed(), "the GPU passes other cases than the CPU");
}
