//! Printouts against PyTorch's `repr`, statistics of every init function and of each
//! layer's default init, dropout's keep rate and scaling, lazy modules, and the messages
//! layers give for wrong input shapes.

use std::collections::HashMap;
use std::path::Path;

use nn_core::init::{self, FanMode, Nonlinearity};
use nn_core::{manual_seed, Forward, Module, Tensor};
use nn_layers::*;

fn stats(t: &Tensor) -> (f64, f64, f64, f64) {
    let v = t.to_vec_f64();
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    (mean, var.sqrt(), min, max)
}

/// Checks a uniform sample on `[-b, b]`: inside the bounds, reaching near them, mean 0 and
/// standard deviation `b / sqrt(3)` within 3%.
fn assert_uniform(t: &Tensor, b: f64, what: &str) {
    let (mean, std, min, max) = stats(t);
    assert!(min >= -b - 1e-7 && max <= b + 1e-7, "{what}: outside [-{b}, {b}]: [{min}, {max}]");
    assert!(min < -0.95 * b && max > 0.95 * b, "{what}: does not span the range: [{min}, {max}]");
    assert!(mean.abs() < 0.02 * b, "{what}: mean {mean}");
    assert!((std / (b / 3f64.sqrt()) - 1.0).abs() < 0.03, "{what}: std {std} for bound {b}");
}

fn assert_normal(t: &Tensor, m: f64, s: f64, what: &str) {
    let (mean, std, _, _) = stats(t);
    assert!((mean - m).abs() < 0.03 * s, "{what}: mean {mean}, expected {m}");
    assert!((std / s - 1.0).abs() < 0.03, "{what}: std {std}, expected {s}");
}

#[test]
fn printouts_match_pytorch() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch/reprs.json");
    let expected: HashMap<String, String> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cfg = TransformerEncoderLayerConfig { dim_feedforward: 16, ..Default::default() };
    let mine: Vec<(&str, String)> = vec![
        ("linear", Linear::new(784, 256).to_string()),
        ("linear_nobias", Linear::with_bias(3, 4, false).to_string()),
        ("bilinear", Bilinear::new(3, 4, 2).to_string()),
        (
            "conv1d",
            Conv1d::with_config(3, 4, 3, Conv1dConfig { stride: 2, padding: 1, ..Default::default() }).to_string(),
        ),
        (
            "conv2d",
            Conv2d::with_config(3, 6, 3, Conv2dConfig { stride: 2, padding: 1, ..Default::default() }).to_string(),
        ),
        (
            "conv2d_groups",
            Conv2d::with_config(
                4,
                6,
                3,
                Conv2dConfig { padding: 2, dilation: 2, groups: 2, bias: false, ..Default::default() },
            )
            .to_string(),
        ),
        ("maxpool2d", MaxPool2d::with_options(3, 2, 1, 1, false).to_string()),
        ("avgpool2d", AvgPool2d::with_options(3, 2, 1, false, true).to_string()),
        ("adaptiveavgpool2d", AdaptiveAvgPool2d::new((3, 2)).to_string()),
        ("batchnorm1d", BatchNorm1d::new(4).to_string()),
        (
            "batchnorm2d_cma",
            BatchNorm2d::with_config(3, BatchNormConfig { momentum: None, ..Default::default() }).to_string(),
        ),
        ("layernorm", LayerNorm::new(6).to_string()),
        ("layernorm_2d", LayerNorm::with_options(&[3, 4], 1e-6, true, true).to_string()),
        ("groupnorm", GroupNorm::new(2, 6).to_string()),
        ("embedding", Embedding::with_padding_idx(10, 4, 1).to_string()),
        ("relu", ReLU::new().to_string()),
        ("leakyrelu", LeakyReLU::new(0.2).to_string()),
        ("gelu_tanh", GELU::with_approximate(GeluApproximate::Tanh).to_string()),
        ("silu", SiLU::new().to_string()),
        ("sigmoid", Sigmoid::new().to_string()),
        ("tanh", Tanh::new().to_string()),
        ("softmax", Softmax::new(1).to_string()),
        ("logsoftmax", LogSoftmax::new(-1).to_string()),
        ("flatten", Flatten::new().to_string()),
        ("identity", Identity::new().to_string()),
        ("dropout", Dropout::new(0.25).to_string()),
        ("mha", MultiheadAttention::new(8, 2).to_string()),
        ("transformer_layer", TransformerEncoderLayer::with_config(8, 2, cfg).to_string()),
    ];
    assert_eq!(mine.len(), expected.len());
    for (k, s) in mine {
        assert_eq!(&s, &expected[k], "printout of {k}");
    }
}

#[test]
fn init_functions_follow_pytorch_formulas() {
    manual_seed(1);
    let t = Tensor::zeros(&[400, 300]); // fan_in 300, fan_out 400
    init::uniform_(&t, -0.5, 0.5);
    assert_uniform(&t, 0.5, "uniform_");
    init::normal_(&t, 2.0, 0.5);
    assert_normal(&t, 2.0, 0.5, "normal_");
    init::kaiming_uniform_(&t, FanMode::FanIn, Nonlinearity::Relu);
    assert_uniform(&t, 2f64.sqrt() * (3.0 / 300.0f64).sqrt(), "kaiming_uniform_ fan_in relu");
    init::kaiming_uniform_(&t, FanMode::FanOut, Nonlinearity::LeakyRelu(0.01));
    assert_uniform(&t, (2.0 / (1.0 + 1e-4f64)).sqrt() * (3.0 / 400.0f64).sqrt(), "kaiming_uniform_ fan_out");
    init::kaiming_normal_(&t, FanMode::FanIn, Nonlinearity::Relu);
    assert_normal(&t, 0.0, (2.0 / 300.0f64).sqrt(), "kaiming_normal_");
    init::xavier_uniform_(&t, 1.0);
    assert_uniform(&t, (6.0 / 700.0f64).sqrt(), "xavier_uniform_");
    init::xavier_normal_(&t, 5.0 / 3.0);
    assert_normal(&t, 0.0, 5.0 / 3.0 * (2.0 / 700.0f64).sqrt(), "xavier_normal_");
    init::constant_(&t, 0.25);
    assert!(t.to_vec().iter().all(|&v| v == 0.25));
    init::ones_(&t);
    assert!(t.to_vec().iter().all(|&v| v == 1.0));
    init::zeros_(&t);
    assert!(t.to_vec().iter().all(|&v| v == 0.0));
    let conv = Tensor::zeros(&[64, 16, 3, 3]);
    assert_eq!(init::calculate_fan_in_and_fan_out(conv.shape()), (144, 576));
    assert!((init::calculate_gain(Nonlinearity::Tanh) - 5.0 / 3.0).abs() < 1e-12);
}

#[test]
fn layer_default_inits_match_reset_parameters() {
    manual_seed(2);
    let lin = Linear::new(300, 400);
    let b = 1.0 / 300f64.sqrt();
    assert_uniform(&lin.weight, b, "Linear.weight");
    let (_, _, lo, hi) = stats(lin.bias.as_ref().unwrap());
    assert!(lo >= -b && hi <= b);
    let conv = Conv2d::with_config(32, 64, 3, Conv2dConfig { groups: 2, ..Default::default() });
    assert_uniform(&conv.weight, 1.0 / (16.0 * 9.0f64).sqrt(), "Conv2d.weight");
    let emb = Embedding::new(500, 200);
    assert_normal(&emb.weight, 0.0, 1.0, "Embedding.weight");
    let bn = BatchNorm2d::new(5);
    assert_eq!(bn.weight.as_ref().unwrap().to_vec(), vec![1.0; 5]);
    assert_eq!(bn.running_var.as_ref().unwrap().to_vec(), vec![1.0; 5]);
    assert_eq!(bn.num_batches_tracked.as_ref().unwrap().to_vec_i64(), vec![0]);
    let mha = MultiheadAttention::new(64, 4);
    assert_uniform(&mha.in_proj_weight, (6.0 / (64.0 + 192.0f64)).sqrt(), "MultiheadAttention.in_proj_weight");
    assert!(mha.in_proj_bias.as_ref().unwrap().to_vec().iter().all(|&v| v == 0.0));
    assert!(mha.out_proj.bias.as_ref().unwrap().to_vec().iter().all(|&v| v == 0.0));
    let bil = Bilinear::new(40, 30, 50);
    assert_uniform(&bil.weight, 1.0 / 40f64.sqrt(), "Bilinear.weight");
}

#[test]
fn dropout_keep_rate_and_scaling() {
    manual_seed(3);
    let mut d = Dropout::new(0.3);
    let x = Tensor::ones(&[200_000]);
    let y = d.forward(&x).to_vec();
    let zeros = y.iter().filter(|&&v| v == 0.0).count() as f64 / y.len() as f64;
    assert!((zeros - 0.3).abs() < 0.005, "drop rate {zeros}");
    let keep_scale = 1.0 / 0.7f32;
    assert!(y.iter().all(|&v| v == 0.0 || (v - keep_scale).abs() < 1e-6), "kept values are scaled by 1 / (1 - p)");
    let mean = y.iter().map(|&v| v as f64).sum::<f64>() / y.len() as f64;
    assert!((mean - 1.0).abs() < 0.01, "expected value preserved: {mean}");
    d.eval();
    assert_eq!(d.forward(&x).to_vec(), x.to_vec());
    // Gradients flow only through kept elements, scaled the same way.
    d.train();
    let xg = Tensor::ones(&[1000]).requires_grad_(true);
    let y = d.forward(&xg);
    y.sum().backward();
    assert_eq!(xg.grad().unwrap().to_vec(), y.to_vec());
}

#[test]
fn lazy_modules_infer_shapes_and_refuse_state_before_that() {
    let lazy = LazyLinear::new(3);
    let e = lazy.try_state_dict().unwrap_err().to_string();
    assert!(e.contains("LazyLinear") && e.contains("forward"), "{e}");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| lazy.state_dict()));
    assert!(r.is_err(), "state_dict() of an uninitialised lazy module must fail loudly");
    assert_eq!(lazy.forward(&Tensor::ones(&[2, 5])).shape(), &[2, 3]);
    assert_eq!(lazy.state_dict().get("weight").unwrap().shape(), &[3, 5]);
    // Materialised, it prints as the layer it became, as PyTorch's.
    assert_eq!(lazy.to_string(), "Linear(in_features=5, out_features=3, bias=True)");
    let conv = LazyConv2d::new(4, 3);
    assert!(conv.try_state_dict().is_err());
    assert_eq!(conv.forward(&Tensor::ones(&[1, 2, 5, 5])).shape(), &[1, 4, 3, 3]);
    assert_eq!(conv.state_dict().get("weight").unwrap().shape(), &[4, 2, 3, 3]);
    // Inside a container, the whole model reports the uninitialised layer.
    let net = Sequential::new().add(LazyLinear::new(2)).add(ReLU::new());
    assert!(net.try_state_dict().unwrap_err().to_string().contains("LazyLinear"));
}

fn panic_message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let err = std::panic::catch_unwind(f).expect_err("expected a panic");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
fn wrong_input_shapes_are_caught_at_the_layer() {
    let m = panic_message(|| {
        Linear::new(784, 256).forward(&Tensor::zeros(&[32, 100]));
    });
    assert_eq!(m, "Linear(in_features=784, out_features=256, bias=True) expects input [..., 784], got [32, 100]");
    let m = panic_message(|| {
        Conv2d::new(3, 8, 3).forward(&Tensor::zeros(&[2, 4, 9, 9]));
    });
    assert!(
        m.starts_with("Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1)) expects input [N, 3, H, W], got [2, 4, 9, 9]"),
        "{m}"
    );
    let m = panic_message(|| {
        BatchNorm2d::new(3).forward(&Tensor::zeros(&[2, 3, 4]));
    });
    assert!(m.contains("BatchNorm2d(3") && m.contains("[N, C, H, W]") && m.contains("[2, 3, 4]"), "{m}");
    let m = panic_message(|| {
        LayerNorm::new(6).forward(&Tensor::zeros(&[2, 5]));
    });
    assert!(m.contains("LayerNorm((6,)") && m.contains("[2, 5]"), "{m}");
    let m = panic_message(|| {
        Embedding::new(10, 3).forward(&Tensor::zeros(&[2]));
    });
    assert!(m.contains("Embedding(10, 3) expects i64 indices, got f32"), "{m}");
    let m = panic_message(|| {
        Embedding::new(10, 3).forward(&Tensor::from_vec_i64(vec![10], &[1]));
    });
    assert!(m.contains("index 10 is out of range for 10 embeddings"), "{m}");
    let m = panic_message(|| {
        MultiheadAttention::new(8, 2).forward(&Tensor::zeros(&[3, 2, 6]));
    });
    assert!(
        m.contains("MultiheadAttention(embed_dim=8, num_heads=2) expects query [L, N, E] with E = 8, got [3, 2, 6]"),
        "{m}"
    );
    let m = panic_message(|| {
        GroupNorm::new(4, 6);
    });
    assert!(m.contains("num_channels 6 must be divisible by num_groups 4"), "{m}");
    let m = panic_message(|| {
        MaxPool2d::new(2).forward(&Tensor::zeros(&[4, 4]));
    });
    assert!(m.contains("MaxPool2d(kernel_size=2") && m.contains("got [4, 4]"), "{m}");
}

#[test]
fn attention_layers_name_themselves_and_both_shapes() {
    let mha = || MultiheadAttention::new(8, 2); // [L, N, E]
    let (q, kv) = (Tensor::zeros(&[5, 3, 8]), Tensor::zeros(&[7, 3, 8]));
    type Case<'a> = (Box<dyn Fn() + 'a>, &'a str);
    let cases: Vec<Case<'_>> = vec![
        (
            Box::new(|| {
                mha().forward((&q, &Tensor::zeros(&[7, 2, 8]), &Tensor::zeros(&[7, 2, 8])));
            }),
            "MultiheadAttention(embed_dim=8, num_heads=2): query [5, 3, 8] and key [7, 2, 8] have different batch sizes (3 vs 2)",
        ),
        (
            Box::new(|| {
                mha().forward((&q, &kv, &Tensor::zeros(&[6, 3, 8])));
            }),
            "MultiheadAttention(embed_dim=8, num_heads=2): key [7, 3, 8] and value [6, 3, 8] must have the same shape",
        ),
        (
            Box::new(|| {
                mha().forward((&q, &Tensor::zeros(&[7, 3, 4]), &Tensor::zeros(&[7, 3, 4])));
            }),
            "MultiheadAttention(embed_dim=8, num_heads=2) expects key [L, N, E] with E = 8 (query [5, 3, 8]), got [7, 3, 4]",
        ),
        (
            Box::new(|| {
                mha().forward(&AttentionInput::new(&q, &kv, &kv).attn_mask(&Tensor::zeros(&[5, 5])));
            }),
            "MultiheadAttention(embed_dim=8, num_heads=2): attn_mask must be [L, S] = [5, 7] or [3 * 2, 5, 7] for query [5, 3, 8] and key [7, 3, 8], got [5, 5]",
        ),
        (
            Box::new(|| {
                let pad = Tensor::from_vec_bool(vec![false; 15], &[3, 5]);
                mha().forward(&AttentionInput::new(&q, &kv, &kv).key_padding_mask(&pad));
            }),
            "MultiheadAttention(embed_dim=8, num_heads=2): key_padding_mask must be [3, 7] ([N, S], or [S] unbatched) for key [7, 3, 8], got [3, 5]",
        ),
        (
            Box::new(|| {
                TransformerEncoderLayer::new(8, 2).forward(&Tensor::zeros(&[4, 3, 6]));
            }),
            "TransformerEncoderLayer(d_model=8, nhead=2) expects src [L, N, E] (or unbatched [L, E]) with E = 8, got [4, 3, 6]",
        ),
        (
            Box::new(|| {
                let layer = TransformerEncoderLayer::new(8, 2);
                layer.forward(&EncoderInput::new(&q).src_mask(&Tensor::zeros(&[4, 4])));
            }),
            "MultiheadAttention(embed_dim=8, num_heads=2): attn_mask must be [L, S] = [5, 5] or [3 * 2, 5, 5] for query [5, 3, 8] and key [5, 3, 8], got [4, 4]",
        ),
    ];
    for (f, want) in cases {
        let m = panic_message(std::panic::AssertUnwindSafe(f));
        assert_eq!(m, want);
    }
}

#[test]
fn unbatched_attention_is_a_batch_of_one() {
    manual_seed(3);
    let mha = MultiheadAttention::new(8, 2);
    let (q, kv) = (Tensor::randn(&[5, 8]), Tensor::randn(&[7, 8]));
    let pad = Tensor::from_vec_bool(vec![false, false, true, false, false, false, true], &[7]);
    let mask = Tensor::from_vec_bool((0..35).map(|k| k % 7 > k / 7 + 2).collect(), &[5, 7]);
    let (y, w) = mha.forward(&AttentionInput::new(&q, &kv, &kv).key_padding_mask(&pad).attn_mask(&mask));
    assert_eq!((y.shape(), w.as_ref().unwrap().shape()), (&[5, 8][..], &[5, 7][..]));
    let (yb, wb) = mha.forward(
        &AttentionInput::new(&q.unsqueeze(1), &kv.unsqueeze(1), &kv.unsqueeze(1))
            .key_padding_mask(&pad.unsqueeze(0))
            .attn_mask(&mask),
    );
    assert_eq!(y.to_vec(), yb.squeeze_dim(1).to_vec());
    assert_eq!(w.unwrap().to_vec(), wb.unwrap().squeeze_dim(0).to_vec());
    // Masked key positions get no weight.
    let w = mha.forward(&AttentionInput::new(&q, &kv, &kv).key_padding_mask(&pad)).1.unwrap().to_vec();
    assert!(w.iter().skip(2).step_by(7).all(|&v| v == 0.0));
    // The Transformer layer takes unbatched input too.
    let cfg = TransformerEncoderLayerConfig { dropout: 0.0, dim_feedforward: 16, ..Default::default() };
    let layer = TransformerEncoderLayer::with_config(8, 2, cfg);
    let y = layer.forward(&q);
    let yb = layer.forward(&q.unsqueeze(1));
    assert_eq!(y.to_vec(), yb.squeeze_dim(1).to_vec());
}

/// A training forward that panics (an input of another dtype than the statistics) leaves
/// `num_batches_tracked` as it was: counting the batch first would make the next batch,
/// with `momentum: None`, be averaged as the second.
#[test]
fn a_batch_norm_forward_that_fails_counts_no_batch() {
    let bn = BatchNorm1d::new(3);
    let bad = Tensor::ones(&[4, 3]).to_dtype(nn_core::DType::F64);
    assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bn.forward(&bad))).is_err());
    assert_eq!(bn.num_batches_tracked.as_ref().unwrap().to_vec_i64(), vec![0]);
    bn.forward(&Tensor::ones(&[4, 3]));
    assert_eq!(bn.num_batches_tracked.as_ref().unwrap().to_vec_i64(), vec![1]);
}
