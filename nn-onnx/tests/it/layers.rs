//! Every layer of nn-layers, in eval mode, exported and run in tract at two batch sizes.

use nn_core::prelude::*;
use nn_core::{manual_seed, no_grad};
use nn_layers::*;
use nn_onnx::{DynamicAxes, DynamicAxis, ExportConfig};

use crate::support::{check, check_with, vals};

/// Runs a few training-mode forwards so batch norms hold non-trivial running statistics.
fn warm_up<M: Forward<Input = Tensor> + Module>(m: &mut M, shape: &[usize]) {
    m.train();
    for s in 0..3 {
        no_grad(|| m.forward(&(vals(shape, s + 100) * 1.5 + 0.3)));
    }
    m.eval();
}

#[test]
fn mlp_with_every_activation() {
    manual_seed(1);
    let mut net = Sequential::new()
        .add(Linear::new(6, 8))
        .add(ReLU::new())
        .add(Linear::new(8, 8))
        .add(LeakyReLU::new(0.1))
        .add(GELU::new())
        .add(GELU::with_approximate(GeluApproximate::Tanh))
        .add(SiLU::new())
        .add(Dropout::new(0.3))
        .add(Tanh::new())
        .add(Softplus::new(2.0, 0.5))
        .add(RMSNorm::new(8))
        .add(Softplus::default())
        .add(Linear::with_bias(8, 8, false))
        .add(Sigmoid::new())
        .add(Identity::new())
        .add(Softmax::new(-1))
        .add(LogSoftmax::new(1));
    net.eval();
    let bytes = check("mlp", &net, |b| vals(&[b, 6], 1));
    let s = nn_onnx::inspect(&bytes).unwrap();
    let keys: Vec<String> = net.state_dict().keys().map(str::to_string).collect();
    assert_eq!(s.initializers, keys, "initializers are the state dict, by key");
    assert_eq!(s.inputs, [("input".to_string(), vec!["batch".to_string(), "6".to_string()])]);
    assert_eq!(s.outputs, [("output".to_string(), vec!["batch".to_string(), "8".to_string()])]);
    assert!(s.op_types.iter().filter(|t| *t == "Gemm").count() == 3, "{:?}", s.op_types);
    assert!(s.op_types.contains(&"Erf".to_string()) && s.op_types.contains(&"Tanh".to_string()));
    assert!(s.op_types.contains(&"Softplus".to_string()) && s.op_types.contains(&"Where".to_string()));
}

#[test]
fn linear_on_3d_input_and_bilinear() {
    manual_seed(2);
    let lin = Linear::new(5, 3);
    check("linear 3-D", &lin, |b| vals(&[b, 4, 5], 2));
    let bil = Bilinear::new(3, 4, 2);
    check("bilinear", &bil, |b| (vals(&[b, 3], 3), vals(&[b, 4], 4)));
}

#[test]
fn cnn_with_groups_dilation_norms_and_pools() {
    manual_seed(3);
    let mut net = Sequential::new()
        .add(Conv2d::with_config(2, 4, 3, Conv2dConfig { stride: 1, padding: 1, ..Default::default() }))
        .add(BatchNorm2d::new(4))
        .add(ReLU::new())
        .add(Conv2d::with_config(4, 8, 3, Conv2dConfig { stride: 2, padding: 2, dilation: 2, groups: 2, bias: true }))
        .add(GroupNorm::new(2, 8))
        .add(MaxPool2d::new(2))
        .add(Conv2d::with_config(8, 8, 1, Conv2dConfig { bias: false, ..Default::default() }))
        .add(MaxPool2d::with_options(3, 1, 1, 2, false))
        .add(AvgPool2d::with_options(2, 1, 1, false, true))
        .add(AvgPool2d::with_options(2, 1, 1, false, false))
        .add(AdaptiveAvgPool2d::new((2, 2)))
        .add(AdaptiveAvgPool2d::new((1, 1)))
        .add(Flatten::new())
        .add(Linear::new(8, 3));
    warm_up(&mut net, &[4, 2, 16, 16]);
    check("cnn", &net, |b| vals(&[b, 2, 16, 16], 5));
}

#[test]
fn conv1d_batchnorm1d_layernorm() {
    manual_seed(4);
    let mut net = Sequential::new()
        .add(Conv1d::with_config(3, 6, 3, Conv1dConfig { padding: 1, dilation: 1, stride: 2, groups: 3, bias: true }))
        .add(BatchNorm1d::new(6))
        .add(LayerNorm::new(4))
        .add(LayerNorm::with_options(&[6, 4], 1e-3, false, false))
        .add(Flatten::new())
        .add(BatchNorm1d::with_config(24, BatchNormConfig { affine: false, ..Default::default() }));
    warm_up(&mut net, &[4, 3, 8]);
    check("conv1d", &net, |b| vals(&[b, 3, 8], 6));
}

#[test]
fn embedding_takes_token_ids() {
    manual_seed(5);
    let net = Sequential::new().add(Embedding::new(11, 4)).add(Flatten::new()).add(Linear::new(12, 2));
    check("embedding", &net, |b| Tensor::from_vec_i64((0..3 * b as i64).map(|i| (i * 7) % 11).collect(), &[b, 3]));
}

#[test]
fn multihead_attention_both_layouts() {
    manual_seed(6);
    let mut mha = MultiheadAttention::with_options(8, 2, 0.1, true, true);
    mha.eval();
    check("mha batch-first", &mha, |b| {
        let x = vals(&[b, 5, 8], 7);
        AttentionInput::new(&x, &vals(&[b, 4, 8], 8), &vals(&[b, 4, 8], 9))
    });
    let mut mha = MultiheadAttention::new(8, 4);
    mha.eval();
    // Sequence-first: the batch is axis 1 of query, key and value.
    let axes = (0..3).map(|i| DynamicAxis { input: i, axis: 1, name: "batch".into() }).collect();
    let opts = ExportConfig { dynamic_axes: DynamicAxes::Custom(axes), ..Default::default() };
    check_with(
        "mha seq-first",
        &mha,
        |b| AttentionInput::new(&vals(&[5, b, 8], 10), &vals(&[5, b, 8], 11), &vals(&[5, b, 8], 12)),
        &[1, 3, 4],
        &opts,
    );
}

#[test]
fn transformer_encoder_layers_and_stack() {
    manual_seed(7);
    let cfg = TransformerEncoderLayerConfig {
        dim_feedforward: 16,
        batch_first: true,
        norm_first: true,
        activation: Activation::Gelu,
        ..Default::default()
    };
    let mut layer = TransformerEncoderLayer::with_config(8, 2, cfg);
    layer.eval();
    check("encoder layer", &layer, |b| EncoderInput::new(&vals(&[b, 6, 8], 13)));
    let mut enc = TransformerEncoder::new(
        2,
        || {
            TransformerEncoderLayer::with_config(
                8,
                2,
                TransformerEncoderLayerConfig { dim_feedforward: 16, batch_first: true, ..Default::default() },
            )
        },
        Some(LayerNorm::new(8)),
    );
    enc.eval();
    let causal = Tensor::ones(&[6, 6]).triu(1).gt(&Tensor::zeros(&[]));
    // The mask is a second graph input, with no batch axis.
    let axes = vec![DynamicAxis { input: 0, axis: 0, name: "batch".into() }];
    let opts = ExportConfig { dynamic_axes: DynamicAxes::Custom(axes), ..Default::default() };
    let make = |b| EncoderInput::new(&vals(&[b, 6, 8], 14)).src_mask(&causal);
    let bytes = check_with("encoder stack, causal mask", &enc, make, &[2, 1, 3], &opts);
    let s = nn_onnx::inspect(&bytes).unwrap();
    assert_eq!(s.inputs[1], ("input_1".to_string(), vec!["6".to_string(), "6".to_string()]));
}
