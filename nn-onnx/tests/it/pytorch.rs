//! Exported models reproduce PyTorch's outputs for the same weights (fixtures written by
//! tests/fixtures/pytorch/onnx_models.py): each model is built in nn, loads PyTorch's state
//! dict strictly, is exported with a batch-1 example, and runs in tract at batch 2 and 5.

use std::path::PathBuf;

use nn_core::prelude::*;
use nn_core::StateDict;
use nn_layers::*;
use nn_onnx::{DynamicAxes, DynamicAxis, ExportConfig, ExportInput, ExportOutput};

use crate::support::{assert_matches, run_tract};

fn fixture(name: &str) -> StateDict {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/pytorch/onnx")
        .join(format!("{name}.safetensors"));
    StateDict::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Loads the `state.` entries (less `strip`) into `model`, exports it, and compares tract's
/// outputs with PyTorch's at both batch sizes. `input(tensors)` builds the model input.
fn reproduce<M>(name: &str, model: &mut M, strip: &str, input: impl Fn(Vec<Tensor>) -> M::Input, opts: &ExportConfig)
where
    M: Forward + Module,
    M::Input: ExportInput,
    M::Output: ExportOutput,
{
    let f = fixture(name);
    let mut sd = StateDict::new();
    for (k, t) in f.iter() {
        if let Some(key) = k.strip_prefix("state.") {
            sd.insert(key.strip_prefix(strip).unwrap_or(key).to_string(), t.clone());
        }
    }
    model.load_state_dict(&sd, true).unwrap_or_else(|e| panic!("{name}: {e}"));
    model.eval();
    let xs =
        |b: usize| -> Vec<Tensor> { ["x", "x2"].iter().filter_map(|k| f.get(&format!("{k}.b{b}")).cloned()).collect() };
    // A batch-1 example: the first sample of the batch-2 input (the batch axis may be 1).
    let example: Vec<Tensor> = xs(2).iter().map(|t| t.narrow(batch_axis(opts), 0, 1).contiguous()).collect();
    let bytes = nn_onnx::to_bytes(model, &input(example), opts).unwrap_or_else(|e| panic!("{name}: {e}"));
    for b in [2, 5] {
        let inputs = input(xs(b));
        let got = run_tract(&bytes, &inputs.tensors());
        let want = f.get(&format!("y.b{b}")).unwrap();
        assert_eq!(got[0].0.as_slice(), want.shape(), "{name}: output shape at batch {b}");
        assert_matches(&format!("{name} vs PyTorch (batch {b})"), &got[0].1, &want.to_vec_f64());
    }
}

fn batch_axis(opts: &ExportConfig) -> usize {
    match &opts.dynamic_axes {
        DynamicAxes::Custom(v) => v[0].axis,
        _ => 0,
    }
}

fn one(mut v: Vec<Tensor>) -> Tensor {
    v.remove(0)
}

#[test]
fn example_models_reproduce_pytorch() {
    let d = ExportConfig::default();
    let mut digits =
        Sequential::new().add(Linear::new(64, 128)).add(ReLU::new()).add(Dropout::new(0.1)).add(Linear::new(128, 10));
    reproduce("digits_mlp", &mut digits, "", one, &d);
    let mut mlp = Sequential::new()
        .add(Flatten::new())
        .add(Linear::new(784, 256))
        .add(ReLU::new())
        .add(Dropout::new(0.1))
        .add(Linear::new(256, 10));
    reproduce("mnist_mlp", &mut mlp, "", one, &d);
    let pad = Conv2dConfig { padding: 1, ..Default::default() };
    let mut cnn = Sequential::new()
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
        .add(Linear::new(128, 10));
    reproduce("mnist_cnn", &mut cnn, "", one, &d);
}

#[test]
fn layer_mixes_reproduce_pytorch() {
    let d = ExportConfig::default();
    let mut conv = Sequential::new()
        .add(Conv2d::with_config(2, 4, 3, Conv2dConfig { stride: 2, padding: 2, dilation: 2, groups: 2, bias: true }))
        .add(GroupNorm::new(2, 4))
        .add(GELU::with_approximate(GeluApproximate::Tanh))
        .add(MaxPool2d::with_options(3, 1, 1, 1, false))
        .add(AvgPool2d::with_options(2, 1, 1, false, false))
        .add(AdaptiveAvgPool2d::new((2, 2)))
        .add(Flatten::new())
        .add(LayerNorm::new(16))
        .add(Linear::new(16, 3))
        .add(LogSoftmax::new(1));
    reproduce("conv_mix", &mut conv, "", one, &d);
    let mut c1 = Sequential::new()
        .add(Conv1d::with_config(3, 6, 3, Conv1dConfig { padding: 1, groups: 3, ..Default::default() }))
        .add(BatchNorm1d::new(6))
        .add(SiLU::new())
        .add(Flatten::new())
        .add(Linear::new(42, 4))
        .add(Tanh::new());
    reproduce("conv1d_mix", &mut c1, "", one, &d);
    let mut emb = Sequential::new()
        .add(Embedding::new(20, 6))
        .add(Flatten::new())
        .add(Linear::new(18, 5))
        .add(LeakyReLU::new(0.2));
    reproduce("embedding_mlp", &mut emb, "", one, &d);
    let mut bil = Bilinear::new(4, 3, 5);
    reproduce("bilinear", &mut bil, "", |v| (v[0].clone(), v[1].clone()), &d);
}

#[test]
fn attention_models_reproduce_pytorch() {
    let mut mha = MultiheadAttention::new(8, 2);
    let axes = (0..3).map(|i| DynamicAxis { input: i, axis: 1, name: "batch".into() }).collect();
    let seq_first = ExportConfig { dynamic_axes: DynamicAxes::Custom(axes), ..Default::default() };
    reproduce(
        "mha_seq_first",
        &mut mha,
        "attn.",
        |v| AttentionInput::new(&v[0], &v[0], &v[0]).need_weights(false),
        &seq_first,
    );
    let cfg = TransformerEncoderLayerConfig {
        dim_feedforward: 16,
        dropout: 0.1,
        activation: Activation::Gelu,
        batch_first: true,
        norm_first: true,
        ..Default::default()
    };
    let mut enc =
        TransformerEncoder::new(2, || TransformerEncoderLayer::with_config(8, 2, cfg), Some(LayerNorm::new(8)));
    reproduce("transformer", &mut enc, "", |v| EncoderInput::new(&v[0]), &ExportConfig::default());
}
