//! Safetensors checkpoints: round trips, PyTorch interop in both directions (against the
//! committed fixtures of `tests/fixtures/pytorch/generate.py`), hostile files, atomic
//! saves, and a property test over mutated files.

use std::path::{Path, PathBuf};

use nn_core::testing::assert_close;
use nn_core::{DType, Device, Error, Forward, Module, Parameter, StateDict, Tensor};
use nn_layers::{Linear, ModuleDict, ModuleList, ReLU, Sequential};
use proptest::prelude::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch").join(name)
}

/// Mirrors `Block` in generate.py.
#[derive(Module)]
struct Block {
    #[module]
    fc: Linear,
    #[buffer]
    scale: Tensor,
    #[buffer]
    steps: Tensor,
    #[buffer(persistent = false)]
    cache: Tensor,
}

/// Mirrors `Ref` in generate.py.
#[derive(Module)]
struct Ref {
    #[module]
    inp: Sequential,
    #[module]
    blocks: ModuleList<Block>,
    #[module]
    heads: ModuleDict<Linear>,
    #[param]
    temperature: Parameter,
}

impl Ref {
    fn new() -> Self {
        let block = || Block {
            fc: Linear::new(8, 8),
            scale: Tensor::rand(&[8]),
            steps: Tensor::from_vec_i64(vec![0], &[]),
            cache: Tensor::zeros(&[2]),
        };
        Ref {
            inp: Sequential::new().add(Linear::new(5, 8)).add(ReLU::new()),
            blocks: ModuleList::from(vec![block(), block()]),
            heads: [("cls".to_string(), Linear::new(8, 3)), ("aux".to_string(), Linear::with_bias(8, 2, false))]
                .into_iter()
                .collect(),
            temperature: Parameter::new(Tensor::scalar(1.0)),
        }
    }
}

impl Ref {
    /// Like `Ref.forward` in generate.py (a plain method: the tests call no hooks on it).
    fn forward(&self, x: &Tensor) -> Tensor {
        let mut h = self.inp.forward(x);
        for b in &self.blocks {
            h = b.fc.forward(&h).relu() * &b.scale;
        }
        self.heads["cls"].forward(&h) / &*self.temperature
    }
}

#[test]
fn pytorch_checkpoints_load_strictly_with_equal_values() {
    for name in ["f32", "f64", "f16", "bf16"] {
        let path = fixture(&format!("ref_{name}.safetensors"));
        let file = StateDict::load(&path).unwrap();
        let mut model = Ref::new();
        let report = model.load(&path).unwrap();
        assert!(report.is_empty());
        let sd = model.state_dict();
        assert_eq!(sd.len(), file.len());
        for (k, v) in file.iter() {
            let mine = sd.get(k).unwrap();
            assert_eq!(mine.shape(), v.shape(), "{k}");
            // Values arrive converted to the model's dtype, exactly (every f16/bf16 value is an f32).
            assert_eq!(mine.to_vec_f64(), v.to_vec_f64(), "{name}: {k}");
        }
        assert_eq!(sd.get("blocks.1.steps").unwrap().dtype(), DType::I64);
        assert_eq!(file.get("blocks.0.fc.weight").unwrap().dtype().as_str(), name);
    }
}

#[test]
fn pytorch_weights_give_pytorch_outputs() {
    let io = StateDict::load(fixture("ref_io.safetensors")).unwrap();
    let mut model = Ref::new();
    model.load(fixture("ref_f32.safetensors")).unwrap();
    let y = model.forward(io.get("x").unwrap());
    assert_close(&y.to_vec(), &io.get("y").unwrap().to_vec(), 1e-6, 1e-5);
}

#[derive(serde::Deserialize)]
struct KeyInfo {
    key: String,
    dtype: String,
    shape: Vec<usize>,
}

#[test]
fn files_saved_here_have_pytorch_keys_dtypes_and_shapes() {
    let expected: Vec<KeyInfo> =
        serde_json::from_str(&std::fs::read_to_string(fixture("ref_keys.json")).unwrap()).unwrap();
    let dir = std::env::var_os("NN_INTEROP_OUT").map(PathBuf::from);
    let tmp = tempfile::tempdir().unwrap();
    let out = dir.as_deref().unwrap_or(tmp.path());
    std::fs::create_dir_all(out).unwrap();
    let mut model = Ref::new();
    model.load(fixture("ref_f32.safetensors")).unwrap();
    let path = out.join("from_rust_f32.safetensors");
    model.save(&path).unwrap();
    let back = StateDict::load(&path).unwrap();
    let mut got: Vec<(String, String, Vec<usize>)> =
        back.iter().map(|(k, t)| (k.to_string(), t.dtype().as_str().to_uppercase(), t.shape().to_vec())).collect();
    let mut want: Vec<(String, String, Vec<usize>)> = expected.into_iter().map(|k| (k.key, k.dtype, k.shape)).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    // The model's own order is PyTorch's.
    let order: Vec<String> = model.state_dict().keys().map(String::from).collect();
    let json: Vec<KeyInfo> = serde_json::from_str(&std::fs::read_to_string(fixture("ref_keys.json")).unwrap()).unwrap();
    assert_eq!(order, json.into_iter().map(|k| k.key).collect::<Vec<_>>());
    // A half-precision copy for the PyTorch-side check.
    model.to_dtype(DType::BF16);
    model.save(out.join("from_rust_bf16.safetensors")).unwrap();
}

#[test]
fn round_trip_every_dtype_and_shape() {
    let dir = tempfile::tempdir().unwrap();
    let mut sd = StateDict::default();
    sd.insert("f32".into(), Tensor::from_vec(vec![1.5, -0.0, f32::INFINITY, f32::MIN_POSITIVE], &[2, 2]));
    sd.insert("f64".into(), Tensor::from_vec_f64(vec![std::f64::consts::PI], &[1]));
    sd.insert("f16".into(), Tensor::from_vec(vec![0.1, 65504.0], &[2]).to_dtype(DType::F16));
    sd.insert("bf16".into(), Tensor::from_vec(vec![0.1, -3.0e38], &[2]).to_dtype(DType::BF16));
    sd.insert("i64".into(), Tensor::from_vec_i64(vec![i64::MIN, -1, i64::MAX], &[3]));
    sd.insert("bool".into(), Tensor::from_vec_bool(vec![true, false], &[2]));
    sd.insert("scalar".into(), Tensor::scalar(7.0));
    sd.insert("empty".into(), Tensor::zeros(&[0, 3]));
    sd.insert("strided".into(), Tensor::arange(0.0, 6.0, 1.0).reshape(&[2, 3]).t());
    let path = dir.path().join("all.safetensors");
    sd.save(&path).unwrap();
    let back = StateDict::load(&path).unwrap();
    assert_eq!(back.len(), sd.len());
    for (k, t) in sd.iter() {
        let b = back.get(k).unwrap();
        assert_eq!((b.shape(), b.dtype()), (t.shape(), t.dtype()), "{k}");
        assert_eq!(format!("{:?}", b.to_vec_f64()), format!("{:?}", t.to_vec_f64()), "{k}");
    }
    assert_eq!(back.get("i64").unwrap().to_vec_i64(), vec![i64::MIN, -1, i64::MAX]);
    let meta = [("format".to_string(), "pt".to_string())].into_iter().collect();
    sd.save_with_metadata(&path, Some(meta)).unwrap();
    assert_eq!(StateDict::load_with_metadata(&path).unwrap().1.get("format").map(String::as_str), Some("pt"));
}

fn valid_bytes() -> Vec<u8> {
    std::fs::read(fixture("ref_f32.safetensors")).unwrap()
}

fn load_err(bytes: &[u8]) -> String {
    match StateDict::from_safetensors_bytes(bytes) {
        Ok(_) => panic!("hostile bytes were accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn hostile_files_are_errors() {
    let good = valid_bytes();
    assert!(load_err(&good[..good.len() - 1]).contains("not a valid safetensors file"));
    assert!(load_err(&good[..5]).contains("not a valid safetensors file"));
    assert!(load_err(&[]).contains("not a valid safetensors file"));
    // Header length claims more than the file (and more than any sane header).
    let mut huge = good.clone();
    huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    load_err(&huge);
    let mut long = good.clone();
    long[..8].copy_from_slice(&(good.len() as u64).to_le_bytes());
    load_err(&long);
    // Lying offsets and shapes, written by hand.
    let forge = |header: &str, data: usize| {
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend(header.as_bytes());
        v.extend(std::iter::repeat_n(0u8, data));
        v
    };
    load_err(&forge(r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,64]}}"#, 16));
    load_err(&forge(r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}"#, 24));
    load_err(&forge(r#"{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]}}"#, 16));
    load_err(&forge(
        r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
        8,
    ));
    load_err(&forge(r#"{"a": not json"#, 0));
    let e = load_err(&forge(r#"{"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}"#, 2));
    assert!(e.contains("tensor `a` has dtype F8_E4M3"), "{e}");
    // Integers narrower than 64 bits widen losslessly.
    let (sd, _) =
        StateDict::from_safetensors_bytes(&forge(r#"{"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}"#, 4))
            .unwrap();
    assert_eq!(sd.get("a").unwrap().to_vec_i64(), vec![0]);
    // A zero-element tensor whose strides would overflow (and panic in
    // `contiguous_strides` under the overflow-checked test profile).
    let e =
        load_err(&forge(r#"{"a":{"dtype":"F32","shape":[0,1099511627776,1099511627776],"data_offsets":[0,0]}}"#, 0));
    assert!(e.contains("tensor `a` has shape [0, 1099511627776, 1099511627776]"), "{e}");
    // Names given twice: serde_json would keep the last one silently.
    let e = load_err(&forge(
        r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
        8,
    ));
    assert!(e.contains("names tensor `a` twice"), "{e}");
    let e = load_err(&forge(r#"{"__metadata__":{"k":"1","k":"2"}}"#, 0));
    assert!(e.contains("duplicate key `k` in `__metadata__`"), "{e}");
    let e = load_err(&forge(r#"{"__metadata__":{},"__metadata__":{}}"#, 0));
    assert!(e.contains("duplicate key `__metadata__`"), "{e}");
    let e = load_err(&forge(r#"{"a":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}}"#, 4));
    assert!(e.contains("duplicate field `dtype`"), "{e}");
    // The format's 100 MB header limit, checked before anything is read.
    let mut big = 100_000_001u64.to_le_bytes().to_vec();
    big.extend(b"{}");
    let e = load_err(&big);
    assert!(e.contains("header length 100000001 is over the format's limit of 100000000 bytes"), "{e}");
    let missing = StateDict::load("/nonexistent/nn/x.safetensors").unwrap_err();
    assert!(matches!(missing, Error::Io { .. }) && missing.to_string().contains("/nonexistent/nn/x.safetensors"));
}

#[test]
fn only_regular_files_are_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.safetensors");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    // On a thread, so that a regression fails the test instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    let paths = [fifo.clone(), "/dev/zero".into(), dir.path().to_path_buf()];
    std::thread::spawn(move || {
        for p in paths {
            let r = StateDict::load(&p).map(|_| ()).map_err(|e| e.to_string());
            tx.send(r).unwrap();
        }
    });
    for want in ["(a FIFO)", "(a character device)", "(a directory)"] {
        let r = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("load blocked");
        let e = r.unwrap_err();
        assert!(e.contains(want) && e.contains("is not a regular file"), "{e}");
    }
    let mut model = Ref::new();
    assert!(matches!(model.load(&fifo), Err(Error::NotARegularFile { .. })));
    assert!(matches!(nn_core::checkpoint::Checkpoint::load("/dev/zero"), Err(Error::NotARegularFile { .. })));
}

#[test]
fn errors_name_a_bounded_number_of_keys() {
    // 20,000 stray zero-size entries (the probe used a million).
    let n = 20_000;
    let mut header = String::from("{");
    for i in 0..n {
        header.push_str(&format!(r#""stray.{i}":{{"dtype":"F32","shape":[0],"data_offsets":[0,0]}},"#));
    }
    header.pop();
    header.push('}');
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stray.safetensors");
    std::fs::write(&path, &bytes).unwrap();
    let mut model = Ref::new();
    let e = model.load(&path).unwrap_err();
    let Error::StateDict(details) = &e else { panic!("{e:?}") };
    assert_eq!(details.unexpected_keys.len(), n, "every key is kept for callers");
    let msg = e.to_string();
    assert!(msg.len() < 20_000, "{} bytes", msg.len());
    assert!(msg.contains("\"stray.0\"") && msg.contains(" ... and 19,900 more"), "{msg}");
    assert!(msg.contains("\"heads.cls.weight\""), "every missing key of this small model is named: {msg}");
    // Non-strict: the report's display is bounded too.
    let report = model.load_state_dict(&StateDict::load(&path).unwrap(), false).unwrap();
    assert_eq!(report.unexpected_keys.len(), n);
    let shown = report.to_string();
    assert!(shown.len() < 20_000 && shown.ends_with(" ... and 19,900 more]"), "{shown}");
}

#[test]
fn failed_file_load_leaves_model_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Ref::new();
    let before: Vec<Vec<f32>> = model.state_dict().values().map(|t| t.to_vec()).collect();
    let mut sd = StateDict::load(fixture("ref_f32.safetensors")).unwrap();
    sd.insert("heads.cls.weight".into(), Tensor::zeros(&[4, 8]));
    let path = dir.path().join("bad.safetensors");
    sd.save(&path).unwrap();
    let err = model.load(&path).unwrap_err().to_string();
    assert!(err.contains("heads.cls.weight") && err.contains("[4, 8]") && err.contains("[3, 8]"), "{err}");
    let after: Vec<Vec<f32>> = model.state_dict().values().map(|t| t.to_vec()).collect();
    assert_eq!(before, after);
    std::fs::write(&path, b"garbage").unwrap();
    assert!(model.load(&path).is_err());
    let after: Vec<Vec<f32>> = model.state_dict().values().map(|t| t.to_vec()).collect();
    assert_eq!(before, after);
}

#[test]
fn interrupted_save_keeps_the_previous_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    let model = Ref::new();
    model.save(&path).unwrap();
    let original = std::fs::read(&path).unwrap();
    // Inject a failure halfway through writing a new checkpoint.
    let bytes = Ref::new().state_dict().to_safetensors_bytes(None).unwrap();
    let r = nn_core::io::atomic_write(&path, |f| {
        std::io::Write::write_all(f, &bytes[..bytes.len() / 2])?;
        Err(std::io::Error::other("injected failure"))
    });
    let err = r.unwrap_err().to_string();
    assert!(err.contains("injected failure") && err.contains("model.safetensors"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), original, "previous checkpoint damaged");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers.len(), 1, "temporary file left behind: {leftovers:?}");
    StateDict::load(&path).unwrap();
    // Saving into a missing folder is an error naming the path.
    let e = model.save(dir.path().join("no/such/dir/m.safetensors")).unwrap_err().to_string();
    assert!(e.contains("no/such/dir"), "{e}");
}

#[test]
fn meta_state_dicts_cannot_be_saved() {
    let mut model = Ref::new();
    model.to_device(Device::Meta);
    let e = model.save(std::env::temp_dir().join("never-written.safetensors")).unwrap_err().to_string();
    assert!(e.contains("meta device") && e.contains("temperature"), "{e}");
}

proptest! {
    // 2,000 cases per test run; run longer with PROPTEST_CASES=200000.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]
    #[test]
    fn mutated_files_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = valid_bytes();
        for (i, v) in flips {
            let i = i.index(bytes.len());
            bytes[i] = v;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        // Either a clean error or a state dict whose tensors are consistent with their data.
        if let Ok((sd, _)) = StateDict::from_safetensors_bytes(&bytes) {
            for (_, t) in sd.iter() {
                prop_assert!(t.numel() * t.dtype().size_in_bytes() <= bytes.len());
                let _ = t.to_vec_f64();
            }
        }
    }
}
