//! Tied parameters (one `Parameter` held by two modules), with PyTorch's semantics and the
//! Hugging Face file convention: listed once, stepped once, gradients of both uses added;
//! saved once under the first name (the others recorded and read back as the same tensor); loaded strictly from any one name, or several equal
//! ones; refused, unchanged, when the file's copies differ; the tie survives load,
//! `to_device`, `to_dtype` and a checkpoint resume.

use nn_core::checkpoint::Checkpoint;
use nn_core::optim::{Adam, AdamConfig, Optimizer, Sgd, SgdConfig};
use nn_core::prelude::*;
use nn_core::{DType, Device, Parameter, StateDict};
use nn_layers::{Embedding, Linear};

/// GPT-2's shape of a tie: the output head's weight is the token embedding.
#[derive(Module)]
struct TinyLm {
    #[module]
    wte: Embedding,
    #[module]
    mid: Linear,
    #[module]
    lm_head: Linear,
    #[base]
    base: ModuleBase,
}

impl TinyLm {
    fn new() -> Self {
        let wte = Embedding::new(7, 4);
        let mut lm_head = Linear::with_bias(4, 7, false);
        lm_head.weight = wte.weight.clone();
        TinyLm { wte, mid: Linear::new(4, 4), lm_head, base: ModuleBase::default() }
    }

    fn tied(&self) -> bool {
        self.wte.weight.id() == self.lm_head.weight.id()
    }
}

impl Compute for TinyLm {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, ids: &Tensor) -> Tensor {
        self.lm_head.forward(&self.mid.forward(&self.wte.forward(ids)).tanh())
    }
}

/// A copy with storage of its own.
fn copy(t: &Tensor) -> Tensor {
    Tensor::from_vec_f64(t.to_vec_f64(), t.shape()).to_dtype(t.dtype())
}

fn ids() -> Tensor {
    Tensor::from_vec_i64(vec![0, 3, 6, 2, 2, 5], &[2, 3])
}

fn loss(m: &TinyLm) -> Tensor {
    let y = m.forward(&ids());
    (&y * &y).mean()
}

#[test]
fn a_tied_parameter_is_listed_once_and_gets_both_uses_gradients() {
    let m = TinyLm::new();
    let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["wte.weight", "mid.weight", "mid.bias"]);
    assert_eq!(m.parameters().len(), 3);
    assert_eq!(m.num_parameters(), 7 * 4 + 4 * 4 + 4);
    assert_eq!(m.state_dict().keys().collect::<Vec<_>>(), ["wte.weight", "mid.weight", "mid.bias", "lm_head.weight"]);
    // The gradient is the sum of the embedding's and the head's: against an untied copy.
    loss(&m).backward();
    let tied_grad = m.wte.weight.grad().unwrap().to_vec();
    let mut untied = TinyLm::new();
    untied.lm_head.weight = Parameter::new(copy(&m.wte.weight));
    untied.wte.weight.set_data(&m.wte.weight.detach());
    untied.mid.weight.set_data(&m.mid.weight.detach());
    untied.mid.bias.as_ref().unwrap().set_data(&m.mid.bias.as_ref().unwrap().detach());
    loss(&untied).backward();
    let sum = (&untied.wte.weight.grad().unwrap() + &untied.lm_head.weight.grad().unwrap()).to_vec();
    for (a, b) in tied_grad.iter().zip(&sum) {
        assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{a} vs {b}");
    }
    // The optimizer steps it once: one SGD step moves it by lr * (summed gradient).
    let before = m.wte.weight.to_vec();
    let mut opt = Sgd::new(m.named_parameters(), SgdConfig { lr: 0.5, ..Default::default() });
    opt.step();
    for ((w, b), g) in m.wte.weight.to_vec().iter().zip(&before).zip(&tied_grad) {
        assert_eq!(*w, b - 0.5 * g);
    }
    assert!(m.tied());
}

/// The header of safetensors `bytes`: its tensor names, and its `__metadata__`.
fn header(bytes: &[u8]) -> (Vec<String>, serde_json::Value) {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut json: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let meta = json.as_object_mut().unwrap().remove("__metadata__").unwrap_or_default();
    let mut names: Vec<String> = json.as_object().unwrap().keys().cloned().collect();
    names.sort();
    (names, meta)
}

#[test]
fn save_writes_a_tied_parameter_once_under_its_first_name() {
    let dir = tempfile::tempdir().unwrap();
    let m = TinyLm::new();
    let path = dir.path().join("m.safetensors");
    m.save(&path).unwrap();
    // The file holds the tensor once, under its first name, and records the other.
    let (names, meta) = header(&std::fs::read(&path).unwrap());
    assert_eq!(names, ["mid.bias", "mid.weight", "wte.weight"]);
    assert_eq!(meta["nn.tied_names"], r#"{"lm_head.weight":"wte.weight"}"#);
    // Read back, it lists every name again, the two as one tensor (none is dropped).
    let file = StateDict::load(&path).unwrap();
    assert_eq!(file.len(), 4);
    assert_eq!(file.get("lm_head.weight").unwrap().id(), file.get("wte.weight").unwrap().id());
    assert!(StateDict::load_with_metadata(&path).unwrap().1.is_empty(), "nn's key is not the caller's metadata");
    // The same through the bytes helper.
    let bytes = m.state_dict().to_safetensors_bytes(None).unwrap();
    assert_eq!(header(&bytes).0, ["mid.bias", "mid.weight", "wte.weight"]);
    assert_eq!(StateDict::from_safetensors_bytes(&bytes).unwrap().0.len(), 4);
    // Distinct tensors with equal values are not merged.
    let mut sd = StateDict::default();
    sd.insert("a".into(), Tensor::ones(&[2]));
    sd.insert("b".into(), Tensor::ones(&[2]));
    sd.save(dir.path().join("two.safetensors")).unwrap();
    assert_eq!(StateDict::load(dir.path().join("two.safetensors")).unwrap().len(), 2);
    assert!(header(&std::fs::read(dir.path().join("two.safetensors")).unwrap()).1.get("nn.tied_names").is_none());
}

/// The recorded names are untrusted input: each must name a tensor the file does not hold
/// to one it holds. And the key is nn's: a caller's metadata may not use it.
#[test]
fn hostile_tied_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut sd = StateDict::default();
    sd.insert("a".into(), Tensor::ones(&[2]));
    sd.insert("b".into(), Tensor::zeros(&[2]));
    let path = dir.path().join("f.safetensors");
    for (tied, want) in [
        (r#"{"c":"zz"}"#, "ties `c` to `zz`, which the file does not hold"),
        (r#"{"b":"a"}"#, "ties `b`, which the file holds as a tensor of its own"),
        (r#"{"c":"a","c":"b"}"#, "duplicate"),
        (r#"["a"]"#, "is not a map of names"),
        (r#"{"c":1}"#, "is not a map of names"),
    ] {
        // Written by hand: `save` refuses the key from a caller.
        let raw = safetensors_with_metadata(&sd, [("nn.tied_names".to_string(), tied.to_string())].into());
        std::fs::write(&path, raw).unwrap();
        let e = StateDict::load(&path).unwrap_err().to_string();
        assert!(e.contains(want), "{tied}: {e}");
    }
    let e = sd.save_with_metadata(&path, Some([("nn.tied_names".to_string(), "{}".to_string())].into()));
    assert!(e.unwrap_err().to_string().contains("the metadata key `nn.tied_names` is nn's own"));
}

/// Safetensors bytes of `sd` with `meta` as its metadata verbatim (what another writer
/// could produce): the tensors' header entries as `StateDict` writes them.
fn safetensors_with_metadata(sd: &StateDict, meta: std::collections::HashMap<String, String>) -> Vec<u8> {
    let bytes = sd.to_safetensors_bytes(None).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut json: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    json["__metadata__"] = serde_json::to_value(&meta).unwrap();
    let mut head = json.to_string();
    while !head.len().is_multiple_of(8) {
        head.push(' ');
    }
    let mut out = (head.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(&bytes[8 + n..]);
    out
}

#[test]
fn strict_loading_takes_any_one_name_of_a_tie_or_several_equal_ones() {
    let src = TinyLm::new();
    let full = src.state_dict();
    let without = |drop: &str| -> StateDict {
        full.iter().filter(|(k, _)| *k != drop).map(|(k, v)| (k.to_string(), copy(v))).collect()
    };
    for sd in [without("lm_head.weight"), without("wte.weight"), without("nothing")] {
        let mut m = TinyLm::new();
        let report = m.load_state_dict(&sd, true).unwrap_or_else(|e| panic!("{e}"));
        assert!(report.is_empty());
        assert!(m.tied(), "the tie survives the load");
        assert_eq!(m.lm_head.weight.to_vec(), src.wte.weight.to_vec());
        assert_eq!(m.forward(&ids()).to_vec(), src.forward(&ids()).to_vec());
    }
    // Neither name: both are missing.
    let mut m = TinyLm::new();
    let sd: StateDict = without("wte.weight")
        .iter()
        .filter(|(k, _)| *k != "lm_head.weight")
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let err = m.load_state_dict(&sd, true).unwrap_err().to_string();
    assert!(err.contains("\"wte.weight\"") && err.contains("\"lm_head.weight\""), "{err}");
}

#[test]
fn a_tie_whose_file_values_disagree_is_refused_and_nothing_changes() {
    let src = TinyLm::new();
    let mut sd: StateDict = src.state_dict().iter().map(|(k, v)| (k.to_string(), copy(v))).collect();
    sd.insert("lm_head.weight".into(), &src.wte.weight.detach() + 1.0);
    let mut m = TinyLm::new();
    let before: Vec<Vec<f32>> = m.state_dict().values().map(|t| t.to_vec()).collect();
    for strict in [true, false] {
        let err = m.load_state_dict(&sd, strict).unwrap_err().to_string();
        assert!(
            err.contains("tied entries with different values: \"wte.weight\" and \"lm_head.weight\""),
            "strict {strict}: {err}"
        );
        let after: Vec<Vec<f32>> = m.state_dict().values().map(|t| t.to_vec()).collect();
        assert_eq!(before, after, "nothing changed");
    }
    // NaN equal to NaN: two copies of one value with NaNs are one value.
    let nan = Tensor::full(&[7, 4], f64::NAN);
    sd.insert("wte.weight".into(), copy(&nan));
    sd.insert("lm_head.weight".into(), copy(&nan));
    m.load_state_dict(&sd, true).unwrap();
}

#[test]
fn the_tie_survives_to_device_and_to_dtype() {
    let mut m = TinyLm::new();
    m.to_dtype(DType::F64);
    assert!(m.tied() && m.lm_head.weight.dtype() == DType::F64);
    m.to_device(Device::Meta);
    assert!(m.tied() && m.lm_head.weight.device() == Device::Meta);
    // Materialised from a file that holds the tie once.
    let src = TinyLm::new();
    let dir = tempfile::tempdir().unwrap();
    src.save(dir.path().join("m.safetensors")).unwrap();
    m.load(dir.path().join("m.safetensors")).unwrap();
    assert!(m.tied() && m.lm_head.weight.device() == Device::Cpu);
    assert_eq!(m.lm_head.weight.to_vec(), src.wte.weight.to_vec());
}

#[test]
fn a_checkpoint_of_a_tied_model_resumes_bit_for_bit() {
    nn_core::manual_seed(5);
    let train = |m: &TinyLm, opt: &mut Adam, steps: usize| {
        for _ in 0..steps {
            opt.zero_grad();
            loss(m).backward();
            opt.step();
        }
    };
    let config = AdamConfig { lr: 0.05, ..Default::default() };
    let a = TinyLm::new();
    let mut opt_a = Adam::new(a.named_parameters(), config);
    train(&a, &mut opt_a, 3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    Checkpoint::new(a.state_dict(), Some(opt_a.state_dict()), None, 0, 3).save(&path).unwrap();
    train(&a, &mut opt_a, 3);

    let mut b = TinyLm::new();
    let mut opt_b = Adam::new(b.named_parameters(), config);
    Checkpoint::load(&path).unwrap().restore(&mut b, Some(&mut opt_b), None).unwrap();
    assert!(b.tied());
    train(&b, &mut opt_b, 3);
    for ((na, pa), (nb, pb)) in a.named_parameters().iter().zip(b.named_parameters()) {
        assert_eq!(*na, nb);
        assert_eq!(pa.to_vec(), pb.to_vec(), "{na}");
    }
}

/// Only a tie is written once: two modules loaded from one state dict share its storage
/// (copy on write) but are distinct parameters, and a file keeps both; so do two entries
/// with equal values, or two detached handles of one tensor.
#[test]
fn distinct_tensors_sharing_storage_are_all_saved() {
    let src = nn_layers::Linear::new(3, 2);
    let sd = src.state_dict();
    #[derive(Module)]
    struct Pair {
        #[module]
        student: nn_layers::Linear,
        #[module]
        teacher: nn_layers::Linear,
    }
    let mut pair = Pair { student: nn_layers::Linear::new(3, 2), teacher: nn_layers::Linear::new(3, 2) };
    pair.student.load_state_dict(&sd, true).unwrap();
    pair.teacher.load_state_dict(&sd, true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    pair.save(dir.path().join("pair.safetensors")).unwrap();
    let file = StateDict::load(dir.path().join("pair.safetensors")).unwrap();
    assert_eq!(file.len(), 4, "{:?}", file.keys().collect::<Vec<_>>());
    let t = Tensor::ones(&[2]);
    let mut by_hand = StateDict::default();
    by_hand.insert("a".into(), t.detach());
    by_hand.insert("b".into(), t.detach());
    by_hand.save(dir.path().join("hand.safetensors")).unwrap();
    assert_eq!(StateDict::load(dir.path().join("hand.safetensors")).unwrap().len(), 2);
    // The same handle twice is one tensor: written once, read back under both names.
    by_hand.insert("c".into(), by_hand.get("a").unwrap().clone());
    by_hand.save(dir.path().join("hand.safetensors")).unwrap();
    let bytes = std::fs::read(dir.path().join("hand.safetensors")).unwrap();
    assert_eq!(header(&bytes).0, ["a", "b"]);
    let back = StateDict::load(dir.path().join("hand.safetensors")).unwrap();
    assert_eq!(back.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(back.get("c").unwrap().id(), back.get("a").unwrap().id());
}
