//! `reset_parameters()` against PyTorch's, by distribution: `tests/fixtures/pytorch/reset_init.py`
//! overwrote every entry of each layer, reset it 20 times and summarised what each entry
//! held (element count, mean, standard deviation, range, excess kurtosis, or the one constant
//! it held). Here each layer is built alike, overwritten alike, reset once, and every entry
//! compared with PyTorch's summary within the sampling error of one draw: the family (uniform
//! or normal, by kurtosis), the spread, the centre, the bounds of a uniform, and entries a
//! reset leaves alone (still 7) or sets to a constant. Also: the same parameters (identity)
//! after a reset, dtype kept, the padding row, lazy layers before and after they run.

use std::collections::BTreeMap;

use nn_core::{manual_seed, no_grad, DType, Forward, Module, Tensor};
use nn_layers::*;
use serde_json::Value;

fn fixture() -> Value {
    let text = include_str!("../../fixtures/pytorch/reset_init.json");
    serde_json::from_str(text).expect("reset_init.json")
}

/// Every state-dict entry of `m`, floats filled with 7 and integers with 5, as the fixture
/// script does before its resets.
fn overwrite(m: &dyn Module) {
    no_grad(|| {
        for (_, t) in m.state_dict().iter() {
            t.fill_(if t.dtype().is_float() { 7.0 } else { 5.0 });
        }
    });
}

/// The summary statistics the fixture records, of one draw.
struct Summary {
    n: f64,
    mean: f64,
    std: f64,
    min: f64,
    max: f64,
    kurtosis: f64,
}

fn summarise(v: &[f64]) -> Summary {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    let m4 = v.iter().map(|x| (x - mean).powi(4)).sum::<f64>() / n;
    let (min, max) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
    Summary { n, mean, std: var.sqrt(), min, max, kurtosis: m4 / (var * var) - 3.0 }
}

/// One entry against PyTorch's summary `want`; `Err` says what differs.
fn compare(values: &[f64], want: &Value) -> Result<(), String> {
    let numel = want["numel"].as_u64().unwrap() as usize;
    if values.len() != numel {
        return Err(format!("{} elements, PyTorch's has {numel}", values.len()));
    }
    if let Some(c) = want["constant"].as_f64() {
        return match values.iter().find(|&&v| v != c) {
            None => Ok(()),
            Some(v) => Err(format!("holds {v}; PyTorch's reset leaves every element {c}")),
        };
    }
    let f = |k: &str| want[k].as_f64().unwrap();
    let (mean, std, min, max, kurtosis) = (f("mean"), f("std"), f("min"), f("max"), f("kurtosis"));
    let s = summarise(values);
    if s.std == 0.0 {
        return Err(format!("every element is {}; PyTorch's reset draws them (std {std})", s.mean));
    }
    // Five standard errors of one draw of `n` values.
    let mean_tol = 5.0 * std / s.n.sqrt();
    if (s.mean - mean).abs() > mean_tol {
        return Err(format!("mean {} where PyTorch's is {mean} (tolerance {mean_tol})", s.mean));
    }
    let std_tol = 5.0 * ((kurtosis + 2.0) / (4.0 * s.n)).sqrt();
    if (s.std / std - 1.0).abs() > std_tol {
        return Err(format!("std {} where PyTorch's is {std} (relative tolerance {std_tol})", s.std));
    }
    if s.n >= 1000.0 && (s.kurtosis - kurtosis).abs() > 5.0 * (24.0 / s.n).sqrt() {
        return Err(format!("excess kurtosis {} where PyTorch's is {kurtosis}: another distribution", s.kurtosis));
    }
    // A uniform's bounds: within 1% of PyTorch's range of 20 draws.
    let slack = 0.01 * (max - min);
    if kurtosis < -0.6 && (s.min < min - slack || s.max > max + slack) {
        return Err(format!("range [{}, {}] outside PyTorch's [{min}, {max}]", s.min, s.max));
    }
    Ok(())
}

/// Overwrites `m`, resets it, and compares every entry with the fixture's case `name`;
/// the parameters must be the same tensors afterwards.
fn check<M: Module + ResetParameters>(fixture: &Value, name: &str, mut m: M) {
    let want = fixture[name].as_object().unwrap_or_else(|| panic!("no fixture case {name}"));
    overwrite(&m);
    let ids: Vec<_> = m.parameters().iter().map(|p| p.id()).collect();
    m.reset_parameters();
    assert_eq!(m.parameters().iter().map(|p| p.id()).collect::<Vec<_>>(), ids, "{name}: new parameters");
    let sd = m.state_dict();
    let ours: BTreeMap<&str, &Tensor> = sd.iter().collect();
    assert_eq!(ours.keys().copied().collect::<Vec<_>>(), want.keys().map(String::as_str).collect::<Vec<_>>(), "{name}");
    let mut errors = Vec::new();
    for (key, t) in ours {
        if let Err(e) = compare(&t.to_dtype(DType::F64).to_vec_f64(), &want[key]) {
            errors.push(format!("{name}.{key}: {e}"));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn every_layer_resets_as_pytorchs() {
    manual_seed(0);
    let f = fixture();
    check(&f, "linear", Linear::new(256, 64));
    check(&f, "bilinear", Bilinear::new(16, 8, 32));
    check(&f, "conv1d_gpt2", Conv1D::new(48, 64));
    check(&f, "conv1d", Conv1d::new(16, 32, 5));
    check(&f, "conv2d", Conv2d::new(8, 32, 3));
    check(&f, "conv3d", Conv3d::new(4, 16, 3));
    check(&f, "conv_transpose1d", ConvTranspose1d::new(16, 32, 5));
    check(&f, "conv_transpose2d", ConvTranspose2d::new(8, 16, 3));
    check(&f, "embedding", Embedding::with_padding_idx(500, 16, 3));
    check(&f, "layer_norm", LayerNorm::new(64));
    check(&f, "group_norm", GroupNorm::new(4, 32));
    check(&f, "rms_norm", RMSNorm::new(64));
    check(&f, "batch_norm1d", BatchNorm1d::new(32));
    check(&f, "batch_norm2d", BatchNorm2d::new(16));
    check(&f, "batch_norm3d", BatchNorm3d::new(8));
    check(&f, "multihead_attention", MultiheadAttention::new(64, 4));
    check(&f, "rnn", RNN::with_config(16, 32, RNNConfig { num_layers: 2, ..Default::default() }));
    check(&f, "lstm", LSTM::new(16, 32));
    check(&f, "gru", GRU::with_config(16, 32, GRUConfig { bidirectional: true, ..Default::default() }));
    let c = TransformerConfig {
        num_encoder_layers: 1,
        num_decoder_layers: 1,
        dim_feedforward: 64,
        dropout: 0.0,
        ..Default::default()
    };
    check(&f, "transformer", Transformer::with_config(32, 4, c));
}

#[test]
fn the_check_catches_a_wrong_init() {
    // The comparison is not vacuous: a normal where PyTorch draws a uniform of the same
    // spread, a bound 10% wider, an untouched entry, each fail.
    let want = &fixture()["linear"]["weight"];
    let std = want["std"].as_f64().unwrap();
    manual_seed(1);
    let normal = Tensor::normal(&[64, 256], 0.0, std).to_vec_f64();
    assert!(compare(&normal, want).unwrap_err().contains("kurtosis"));
    let bound = 1.1 / 16.0;
    let wide = Tensor::uniform(&[64, 256], -bound, bound).to_vec_f64();
    assert!(compare(&wide, want).is_err());
    assert!(compare(&vec![7.0; 64 * 256], want).unwrap_err().contains("every element is 7"));
    let right = Tensor::uniform(&[64, 256], -1.0 / 16.0, 1.0 / 16.0).to_vec_f64();
    compare(&right, want).unwrap();
}

#[test]
fn a_reset_keeps_dtype_and_the_padding_row() {
    let mut l = Linear::new(8, 4);
    l.to_dtype(DType::BF16);
    overwrite(&l);
    l.reset_parameters();
    assert_eq!(l.weight.dtype(), DType::BF16);
    assert!(l.weight.to_vec().iter().all(|w| w.abs() <= 1.0 / 8f32.sqrt() && *w != 7.0));

    let mut e = Embedding::with_padding_idx(10, 4, 3);
    overwrite(&e);
    e.reset_parameters();
    assert_eq!(e.weight.narrow(0, 3, 1).to_vec(), [0.0; 4]);
    assert!(e.weight.narrow(0, 4, 1).to_vec().iter().all(|&w| w != 0.0 && w != 7.0));
}

#[test]
fn a_lazy_layer_resets_once_it_has_run() {
    let mut l = LazyLinear::new(3);
    l.reset_parameters(); // nothing to reset yet: no panic, still lazy
    assert!(l.is_uninitialized());
    l.forward(&Tensor::ones(&[2, 16]));
    overwrite(&l);
    l.reset_parameters();
    let w = l.named_parameters().into_iter().find(|(k, _)| k == "weight").unwrap().1;
    assert!(w.to_vec().iter().all(|w| w.abs() <= 0.25 && *w != 7.0));

    let mut bn = LazyBatchNorm1d::new();
    bn.reset_parameters();
    bn.forward(&Tensor::randn(&[4, 5]));
    bn.reset_parameters();
    let mean = bn.named_buffers().into_iter().find(|(k, _)| k == "running_mean").unwrap().1;
    assert_eq!(mean.to_vec(), [0.0; 5]);
}
