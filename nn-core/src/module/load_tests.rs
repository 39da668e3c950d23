//! Tests of `load_state_dict_with(assign)`: the entries take the state dict's tensors
//! (dtype, device, buffer, shared copy-on-write) and keep their own `requires_grad`; ties
//! stay ties; nothing is tied by the load, neither to the state dict nor to another
//! module; every refusal leaves the module as it was.

use crate::module::{LoadStateDictConfig, ModuleExt};
use crate::prelude::*;
use crate::{no_grad, StateDict};

const ASSIGN: LoadStateDictConfig = LoadStateDictConfig { strict: true, assign: true };

#[derive(Module)]
struct Pair {
    #[param]
    a: Parameter,
    #[param]
    b: Parameter,
    #[buffer]
    steps: Tensor,
}

fn meta(shape: &[usize]) -> Parameter {
    Parameter::new(Tensor::full_on(shape, 0.0, DType::F32, Device::Meta))
}

fn pair_state(a: Vec<f32>, b: Vec<f32>) -> StateDict {
    let mut sd = StateDict::new();
    sd.insert("a".to_string(), Tensor::from_vec(a, &[2]));
    sd.insert("b".to_string(), Tensor::from_vec(b, &[2]).to_dtype(DType::F64));
    sd.insert("steps".to_string(), Tensor::from_vec_i64(vec![3], &[]));
    sd
}

#[test]
fn an_assigning_load_takes_the_state_dicts_tensors() {
    let frozen = Parameter::with_requires_grad(Tensor::full_on(&[2], 0.0, DType::F32, Device::Meta), false);
    let mut m = Pair { a: meta(&[2]), b: frozen, steps: Tensor::from_vec_i64(vec![0], &[]) };
    let sd = pair_state(vec![1.0, 2.0], vec![3.0, 4.0]);
    m.load_state_dict_with(&sd, ASSIGN).unwrap();
    assert_eq!((m.a.to_vec(), m.a.device()), (vec![1.0, 2.0], Device::Cpu));
    // The file's dtype, the module's `requires_grad`.
    assert_eq!((m.b.dtype(), m.b.requires_grad(), m.a.requires_grad()), (DType::F64, false, true));
    assert_eq!(m.steps.to_vec_i64(), [3]);
    // The state dict's buffer itself, not a copy ...
    assert!(std::sync::Arc::ptr_eq(&m.a.storage_arc(), &sd.get("a").unwrap().storage_arc()));
    // ... copied on the first write to either side.
    no_grad(|| sd.get("a").unwrap().fill_(9.0));
    no_grad(|| m.b.fill_(8.0));
    assert_eq!(m.a.to_vec(), [1.0, 2.0]);
    assert_eq!(sd.get("b").unwrap().to_vec(), [3.0, 4.0]);
}

#[test]
fn an_assigning_load_ties_nothing_that_was_apart() {
    // From another module's state dict: the source keeps its own weights.
    let src = Pair {
        a: Parameter::new(Tensor::from_vec(vec![1.0, 2.0], &[2])),
        b: Parameter::new(Tensor::from_vec(vec![3.0, 4.0], &[2])),
        steps: Tensor::from_vec_i64(vec![1], &[]),
    };
    let mut dst = Pair { a: meta(&[2]), b: meta(&[2]), steps: Tensor::from_vec_i64(vec![0], &[]) };
    dst.load_state_dict_with(&src.state_dict(), ASSIGN).unwrap();
    no_grad(|| dst.a.fill_(0.0));
    assert_eq!((src.a.to_vec(), dst.a.to_vec()), (vec![1.0, 2.0], vec![0.0, 0.0]));
    // One tensor under two keys of untied entries: still apart after a write.
    let t = Tensor::from_vec(vec![5.0, 6.0], &[2]);
    let mut sd = StateDict::new();
    sd.insert("a".to_string(), t.clone());
    sd.insert("b".to_string(), t);
    sd.insert("steps".to_string(), Tensor::from_vec_i64(vec![0], &[]));
    let mut m = Pair { a: meta(&[2]), b: meta(&[2]), steps: Tensor::from_vec_i64(vec![0], &[]) };
    m.load_state_dict_with(&sd, ASSIGN).unwrap();
    no_grad(|| m.a.fill_(0.0));
    assert_eq!(m.b.to_vec(), [5.0, 6.0]);
}

#[test]
fn a_tie_stays_a_tie_under_assign() {
    let shared = meta(&[2]);
    let mut m = Pair { a: shared.clone(), b: shared, steps: Tensor::from_vec_i64(vec![0], &[]) };
    let mut sd = StateDict::new();
    sd.insert("a".to_string(), Tensor::from_vec(vec![1.0, 2.0], &[2]));
    sd.insert("steps".to_string(), Tensor::from_vec_i64(vec![0], &[]));
    m.load_state_dict_with(&sd, ASSIGN).unwrap();
    assert_eq!(m.a.id(), m.b.id());
    assert_eq!(m.b.to_vec(), [1.0, 2.0]);
}

#[test]
fn assign_still_refuses_wrong_shapes_and_kinds_changing_nothing() {
    let mut m = Pair {
        a: Parameter::new(Tensor::zeros(&[2])),
        b: Parameter::new(Tensor::zeros(&[2])),
        steps: Tensor::from_vec_i64(vec![0], &[]),
    };
    let mut sd = pair_state(vec![1.0, 2.0], vec![3.0, 4.0]);
    sd.insert("b".to_string(), Tensor::zeros(&[3]));
    let e = m.load_state_dict_with(&sd, ASSIGN).unwrap_err().to_string();
    assert!(e.contains("size mismatch"), "{e}");
    sd.insert("b".to_string(), Tensor::from_vec_i64(vec![1, 2], &[2]));
    let e = m.load_state_dict_with(&sd, ASSIGN).unwrap_err().to_string();
    assert!(e.contains("dtype mismatch"), "{e}");
    assert_eq!((m.a.to_vec(), m.b.dtype()), (vec![0.0, 0.0], DType::F32));
    // Not strict: the missing entry is reported and left as it was.
    sd.remove("b");
    let report = m.load_state_dict_with(&sd, LoadStateDictConfig { strict: false, assign: true }).unwrap();
    assert_eq!(report.missing_keys, ["b"]);
    assert_eq!((m.a.to_vec(), m.b.to_vec()), (vec![1.0, 2.0], vec![0.0, 0.0]));
}

#[test]
fn a_sharded_entry_cannot_take_a_tensor() {
    let a = Parameter::new(Tensor::zeros(&[2]));
    a.share_storage_with_views();
    let mut m = Pair { a, b: Parameter::new(Tensor::zeros(&[2])), steps: Tensor::from_vec_i64(vec![0], &[]) };
    let e = m.load_state_dict_with(&pair_state(vec![1.0, 2.0], vec![3.0, 4.0]), ASSIGN).unwrap_err().to_string();
    assert!(e.contains("shares its storage with its views"), "{e}");
    assert_eq!(m.b.to_vec(), [0.0, 0.0]);
    // Without assign it copies in place.
    m.load_state_dict(&pair_state(vec![1.0, 2.0], vec![3.0, 4.0]), true).unwrap();
    assert_eq!(m.a.to_vec(), [1.0, 2.0]);
}
