//! Parity with PyTorch for the transposed convolutions, the 1-D pools, per-axis 2-D
//! convolution and pooling, the transformer decoder, the whole transformer and softplus, against
//! `tests/fixtures/pytorch/layers_transposed_transformer.py`'s committed outputs (the helpers and tolerances of
//! `layers.rs`; with the `gpu` feature every case runs on `gpu:0` too); their printouts
//! against PyTorch's `repr`, their init, and the messages for bad arguments.

use std::collections::HashMap;
use std::path::Path;

use nn_core::{manual_seed, Forward, Module, StateDict, Tensor};
use nn_layers::*;

use crate::layers::{check, fwd, LOOSE, TIGHT};

fn mask(f: &StateDict, name: &str) -> Tensor {
    f.get(name).unwrap_or_else(|| panic!("fixture has no {name}")).clone()
}

fn convtranspose2d_rect() -> ConvTranspose2d {
    let cfg = ConvTranspose2dAxesConfig {
        stride: (1, 2),
        padding: (2, 0),
        output_padding: (1, 1),
        dilation: (2, 1),
        bias: false,
        ..Default::default()
    };
    ConvTranspose2d::with_kernel(3, 2, (3, 2), cfg)
}

fn conv2d_rect() -> Conv2d {
    let cfg = Conv2dAxesConfig { stride: (2, 1), padding: (1, 0), dilation: (1, 2), ..Default::default() };
    Conv2d::with_kernel(3, 4, (3, 2), cfg)
}

fn decoder_layer(batch_first: bool, norm_first: bool) -> TransformerDecoderLayer {
    let cfg = TransformerDecoderLayerConfig {
        dim_feedforward: 16,
        dropout: 0.0,
        activation: if norm_first { Activation::Gelu } else { Activation::Relu },
        batch_first,
        norm_first,
        ..Default::default()
    };
    TransformerDecoderLayer::with_config(8, 2, cfg)
}

fn small_transformer(dropout: f64, batch_first: bool) -> Transformer {
    let cfg = TransformerConfig {
        num_encoder_layers: 1,
        num_decoder_layers: 1,
        dim_feedforward: 16,
        dropout,
        batch_first,
        ..Default::default()
    };
    Transformer::with_config(8, 2, cfg)
}

#[test]
fn transposed_convolutions() {
    let cfg = ConvTranspose1dConfig { stride: 2, padding: 1, output_padding: 1, groups: 2, dilation: 2, bias: true };
    check("convtranspose1d", || ConvTranspose1d::with_config(4, 6, 3, cfg), fwd, LOOSE);
    let cfg = ConvTranspose2dConfig { stride: 2, padding: 1, output_padding: 1, groups: 2, ..Default::default() };
    check("convtranspose2d", || ConvTranspose2d::with_config(4, 6, 3, cfg), fwd, LOOSE);
    // Output padding 1 on an axis of stride 1 (allowed by its dilation 2).
    check("convtranspose2d_rect", convtranspose2d_rect, fwd, LOOSE);
}

#[test]
fn one_dimensional_pools() {
    let cfg = MaxPool1dConfig { stride: Some(2), padding: 1, ..Default::default() };
    check("maxpool1d", || MaxPool1d::with_config(3, cfg), fwd, TIGHT);
    // Unbatched `[C, L]` input, dilation, ceil mode.
    let cfg = MaxPool1dConfig { stride: Some(3), dilation: 2, ceil_mode: true, ..Default::default() };
    check("maxpool1d_ceil", || MaxPool1d::with_config(2, cfg), fwd, TIGHT);
    let cfg = AvgPool1dConfig { stride: Some(2), padding: 1, ..Default::default() };
    check("avgpool1d", || AvgPool1d::with_config(3, cfg), fwd, TIGHT);
    let cfg = AvgPool1dConfig { stride: Some(3), padding: 2, ceil_mode: true, count_include_pad: false };
    check("avgpool1d_nopad", || AvgPool1d::with_config(4, cfg), fwd, TIGHT);
    check("adaptiveavgpool1d", || AdaptiveAvgPool1d::new(4), fwd, TIGHT);
}

/// Softplus on both sides of its threshold and into its tails (the vectorized `f32`
/// kernel; `x` spans about +-36 and +-12 times beta).
#[test]
fn softplus() {
    check("softplus", Softplus::default, fwd, TIGHT);
    check("softplus_beta", || Softplus::new(2.0, 3.0), fwd, TIGHT);
}

#[test]
fn per_axis_convolution_and_pools() {
    check("conv2d_rect", conv2d_rect, fwd, LOOSE);
    let cfg = MaxPool2dConfig { stride: Some((2, 1)), padding: (1, 0), ..Default::default() };
    check("maxpool2d_rect", || MaxPool2d::with_kernel((3, 1), cfg), fwd, TIGHT);
    let cfg = AvgPool2dConfig { stride: Some((1, 2)), padding: (0, 1), count_include_pad: false, ..Default::default() };
    check("avgpool2d_rect", || AvgPool2d::with_kernel((1, 3), cfg), fwd, TIGHT);
}

#[test]
fn transformer_decoder_layers() {
    check(
        "decoder_layer",
        || decoder_layer(false, false),
        |m, f, x| {
            let input = DecoderInput::new(x, &mask(f, "memory"))
                .tgt_mask(&mask(f, "tgt_mask"))
                .memory_key_padding_mask(&mask(f, "memory_key_padding_mask"));
            m.forward(&input)
        },
        LOOSE,
    );
    check(
        "decoder_layer_norm_first",
        || decoder_layer(true, true),
        |m, f, x| {
            let input = DecoderInput::new(x, &mask(f, "memory"))
                .tgt_mask(&mask(f, "tgt_mask"))
                .memory_mask(&mask(f, "memory_mask"))
                .tgt_key_padding_mask(&mask(f, "tgt_key_padding_mask"))
                .memory_key_padding_mask(&mask(f, "memory_key_padding_mask"));
            m.forward(&input)
        },
        LOOSE,
    );
}

#[test]
fn whole_transformer() {
    check(
        "transformer",
        || small_transformer(0.0, true),
        |m, f, x| {
            let pad = mask(f, "src_key_padding_mask");
            let input = TransformerInput::new(x, &mask(f, "tgt"))
                .tgt_mask(&mask(f, "tgt_mask"))
                .src_key_padding_mask(&pad)
                .memory_key_padding_mask(&pad);
            m.forward(&input)
        },
        LOOSE,
    );
}

#[test]
fn printouts_match_pytorch() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch/reprs_transposed_transformer.json");
    let expected: HashMap<String, String> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let t1 = ConvTranspose1dConfig { stride: 2, padding: 1, output_padding: 1, groups: 2, dilation: 2, bias: true };
    let t2 = ConvTranspose2dConfig { stride: 2, padding: 1, output_padding: 1, groups: 2, ..Default::default() };
    let mine: Vec<(&str, String)> = vec![
        ("convtranspose1d", ConvTranspose1d::with_config(4, 6, 3, t1).to_string()),
        ("convtranspose2d", ConvTranspose2d::with_config(4, 6, 3, t2).to_string()),
        ("convtranspose2d_rect", convtranspose2d_rect().to_string()),
        (
            "maxpool1d",
            MaxPool1d::with_config(3, MaxPool1dConfig { stride: Some(2), padding: 1, ..Default::default() })
                .to_string(),
        ),
        (
            "maxpool1d_ceil",
            MaxPool1d::with_config(2, MaxPool1dConfig { stride: Some(3), dilation: 2, ceil_mode: true, padding: 0 })
                .to_string(),
        ),
        (
            "avgpool1d",
            AvgPool1d::with_config(3, AvgPool1dConfig { stride: Some(2), padding: 1, ..Default::default() })
                .to_string(),
        ),
        (
            "avgpool1d_nopad",
            AvgPool1d::with_config(
                4,
                AvgPool1dConfig { stride: Some(3), padding: 2, ceil_mode: true, count_include_pad: false },
            )
            .to_string(),
        ),
        ("adaptiveavgpool1d", AdaptiveAvgPool1d::new(4).to_string()),
        ("conv2d_rect", conv2d_rect().to_string()),
        (
            "maxpool2d_rect",
            MaxPool2d::with_kernel(
                (3, 1),
                MaxPool2dConfig { stride: Some((2, 1)), padding: (1, 0), ..Default::default() },
            )
            .to_string(),
        ),
        (
            "avgpool2d_rect",
            AvgPool2d::with_kernel(
                (1, 3),
                AvgPool2dConfig {
                    stride: Some((1, 2)),
                    padding: (0, 1),
                    count_include_pad: false,
                    ..Default::default()
                },
            )
            .to_string(),
        ),
        ("decoder_layer", decoder_layer(false, false).to_string()),
        ("decoder_layer_norm_first", decoder_layer(true, true).to_string()),
        ("transformer", small_transformer(0.0, true).to_string()),
        ("transformer_default", small_transformer(0.1, false).to_string()),
        ("softplus", Softplus::default().to_string()),
        ("softplus_beta", Softplus::new(2.0, 3.0).to_string()),
    ];
    assert_eq!(mine.len(), expected.len(), "every PyTorch printout is compared");
    for (name, got) in mine {
        let want = expected.get(name).unwrap_or_else(|| panic!("no PyTorch repr for {name}"));
        assert_eq!(&got, want, "{name}");
    }
}

/// Every value within `[-bound, bound]` and some near each end.
fn assert_spans(t: &Tensor, bound: f64, what: &str) {
    let v = t.to_vec_f64();
    let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
    assert!(lo >= -bound - 1e-7 && hi <= bound + 1e-7, "{what}: [{lo}, {hi}] outside +-{bound}");
    assert!(lo < -0.8 * bound && hi > 0.8 * bound, "{what}: [{lo}, {hi}] does not span +-{bound}");
}

#[test]
fn default_inits_follow_reset_parameters() {
    manual_seed(11);
    // Weight [in, out / groups, k, k]: fan_in = out / groups * k * k = 8 / 2 * 9.
    let cfg = ConvTranspose2dConfig { groups: 2, ..Default::default() };
    let t = ConvTranspose2d::with_config(16, 8, 3, cfg);
    assert_eq!(t.weight.shape(), &[16, 4, 3, 3]);
    let bound = 1.0 / 36f64.sqrt();
    assert_spans(&t.weight, bound, "ConvTranspose2d.weight");
    let b = t.bias.as_ref().unwrap();
    assert_eq!(b.shape(), &[8]);
    assert!(b.to_vec_f64().iter().all(|v| v.abs() <= bound), "ConvTranspose2d.bias beyond {bound}");
    let t1 = ConvTranspose1d::new(64, 3, 5);
    assert_eq!(t1.weight.shape(), &[64, 3, 5]);
    assert_spans(&t1.weight, 1.0 / 15f64.sqrt(), "ConvTranspose1d.weight");
    // Transformer: Xavier uniform on every matrix, bound sqrt(6 / (fan_in + fan_out)).
    let m = Transformer::with_config(32, 4, TransformerConfig { dim_feedforward: 64, ..Default::default() });
    let sd = m.state_dict();
    let xavier = |rows: usize, cols: usize| (6.0 / (rows + cols) as f64).sqrt();
    assert_spans(sd.get("encoder.layers.0.linear1.weight").unwrap(), xavier(64, 32), "linear1.weight");
    assert_spans(sd.get("decoder.layers.5.multihead_attn.in_proj_weight").unwrap(), xavier(96, 32), "in_proj_weight");
    assert_spans(sd.get("decoder.layers.0.self_attn.out_proj.weight").unwrap(), xavier(32, 32), "out_proj.weight");
    assert!(sd.get("decoder.layers.0.self_attn.in_proj_bias").unwrap().to_vec().iter().all(|&v| v == 0.0));
    assert!(sd.get("encoder.norm.weight").unwrap().to_vec().iter().all(|&v| v == 1.0));
    // Linear biases keep Linear's U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    let b = sd.get("encoder.layers.0.linear2.bias").unwrap().to_vec_f64();
    assert!(b.iter().all(|v| v.abs() <= 1.0 / 8.0) && b.iter().any(|&v| v != 0.0));
}

#[test]
fn transformer_state_dict_keys_are_pytorchs() {
    let m = small_transformer(0.1, false);
    let keys: Vec<String> = m.state_dict().keys().map(String::from).collect();
    for k in [
        "encoder.layers.0.self_attn.in_proj_weight",
        "encoder.layers.0.norm2.bias",
        "encoder.norm.weight",
        "decoder.layers.0.self_attn.out_proj.weight",
        "decoder.layers.0.multihead_attn.in_proj_bias",
        "decoder.layers.0.linear1.weight",
        "decoder.layers.0.linear2.bias",
        "decoder.layers.0.norm3.weight",
        "decoder.norm.bias",
    ] {
        assert!(keys.iter().any(|x| x == k), "missing {k} in {keys:?}");
    }
    // Encoder layer: attention 4, two linears 4, two norms 4; the decoder layer adds an
    // attention block and a norm; two final norms.
    assert_eq!(keys.len(), 12 + 18 + 4);
}

#[test]
fn generate_square_subsequent_mask_and_tgt_is_causal() {
    let m = Transformer::generate_square_subsequent_mask(4);
    let v = m.to_vec();
    for i in 0..4 {
        for j in 0..4 {
            assert_eq!(v[i * 4 + j] == f32::NEG_INFINITY, j > i, "({i}, {j})");
            assert!(j > i || v[i * 4 + j] == 0.0);
        }
    }
    manual_seed(2);
    let model = small_transformer(0.0, false);
    let (src, tgt) = (Tensor::randn(&[5, 2, 8]), Tensor::randn(&[4, 2, 8]));
    let with_mask = model.forward(&TransformerInput::new(&src, &tgt).tgt_mask(&m));
    let hinted = model.forward(&TransformerInput::new(&src, &tgt).tgt_is_causal(true));
    let plain = model.forward((&src, &tgt));
    assert_eq!(with_mask.to_vec(), hinted.to_vec());
    assert_ne!(with_mask.to_vec(), plain.to_vec(), "the mask changes the output");
    // Causal: the first target position's output does not depend on the later ones.
    let mut later = tgt.to_vec();
    later[2 * 8..].iter_mut().for_each(|v| *v += 1.0);
    let changed = model.forward(&TransformerInput::new(&src, &Tensor::from_vec(later, &[4, 2, 8])).tgt_is_causal(true));
    assert_eq!(changed.to_vec()[..16], hinted.to_vec()[..16]);
    assert_ne!(changed.to_vec()[16..], hinted.to_vec()[16..]);
    // A src_is_causal encoder equals one given the causal mask.
    let src_causal = TransformerInput::new(&src, &tgt).src_is_causal(true);
    let src_masked = TransformerInput::new(&src, &tgt).src_mask(&Transformer::generate_square_subsequent_mask(5));
    let (a, b) = (model.forward(&src_causal).to_vec(), model.forward(&src_masked).to_vec());
    assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-6));
}

#[test]
fn decoder_stack_runs_its_layers_then_the_norm() {
    manual_seed(5);
    let norm = LayerNorm::new(8);
    let dec = TransformerDecoder::new(2, || decoder_layer(true, false), Some(norm));
    let (tgt, memory) = (Tensor::randn(&[2, 3, 8]), Tensor::randn(&[2, 4, 8]));
    let input = DecoderInput::new(&tgt, &memory).tgt_is_causal(true);
    let mut h = tgt.clone();
    for layer in &dec.layers {
        h = layer.forward(&DecoderInput::new(&h, &memory).tgt_mask(&Transformer::generate_square_subsequent_mask(3)));
    }
    let want = dec.norm.as_ref().unwrap().forward(&h).to_vec();
    let got = dec.forward(&input).to_vec();
    assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6), "{got:?} vs {want:?}");
    // Unbatched [T, E] / [S, E] inputs give the batch of one's rows.
    let one = dec.forward((&tgt.narrow(0, 0, 1).squeeze_dim(0), &memory.narrow(0, 0, 1).squeeze_dim(0)));
    let both = dec.forward((&tgt, &memory));
    assert_eq!(one.shape(), &[3, 8]);
    assert!(one.to_vec().iter().zip(&both.to_vec()[..24]).all(|(a, b)| (a - b).abs() < 1e-5));
}

#[test]
fn transposed_convolutions_in_a_sequential_and_unbatched() {
    manual_seed(9);
    // The usual decoder shape: a strided convolution down, a transposed one back up.
    let down = Conv2dConfig { stride: 2, padding: 1, ..Default::default() };
    let up = ConvTranspose2dConfig { stride: 2, padding: 1, output_padding: 1, ..Default::default() };
    let net = Sequential::new()
        .add(Conv2d::with_config(3, 8, 3, down))
        .add(ReLU::new())
        .add(ConvTranspose2d::with_config(8, 3, 3, up));
    assert_eq!(net.forward(&Tensor::randn(&[2, 3, 16, 16])).shape(), &[2, 3, 16, 16]);
    assert_eq!(net.state_dict().get("2.weight").unwrap().shape(), &[8, 3, 3, 3]);
    let t = ConvTranspose2d::new(3, 2, 2);
    let x = Tensor::randn(&[3, 4, 5]);
    assert_eq!(t.forward(&x).to_vec(), t.forward(&x.unsqueeze(0)).squeeze_dim(0).to_vec());
    let t1 = ConvTranspose1d::new(3, 2, 2);
    assert_eq!(t1.forward(&Tensor::randn(&[3, 5])).shape(), &[2, 6]);
    assert_eq!(MaxPool1d::new(2).forward(&Tensor::randn(&[3, 8])).shape(), &[3, 4]);
    assert_eq!(AdaptiveAvgPool1d::new(3).forward(&Tensor::randn(&[2, 3, 8])).shape(), &[2, 3, 3]);
}

fn panic_message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let e = std::panic::catch_unwind(f).expect_err("no panic");
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
}

#[test]
fn bad_arguments_are_named() {
    let m = panic_message(|| {
        ConvTranspose2d::with_config(4, 6, 3, ConvTranspose2dConfig { groups: 4, ..Default::default() });
    });
    assert_eq!(m, "ConvTranspose2d: in_channels 4 and out_channels 6 must be divisible by groups 4");
    let m = panic_message(|| {
        ConvTranspose1d::with_config(
            2,
            2,
            3,
            ConvTranspose1dConfig { stride: 2, output_padding: 2, ..Default::default() },
        );
    });
    assert_eq!(m, "ConvTranspose1d: output_padding [2] must be smaller than either the stride [2] or the dilation [1]");
    let m = panic_message(|| drop(ConvTranspose2d::new(4, 2, 3).forward(&Tensor::zeros(&[1, 3, 5, 5]))));
    assert!(
        m.starts_with("ConvTranspose2d(4, 2, kernel_size=(3, 3), stride=(1, 1)) expects input [N, 4, H, W]"),
        "{m}"
    );
    assert!(m.ends_with("got [1, 3, 5, 5]"), "{m}");
    let m = panic_message(|| {
        Conv2d::with_kernel(3, 4, (3, 0), Conv2dAxesConfig::default());
    });
    assert_eq!(m, "Conv2d: kernel_size, stride and dilation must be positive, got (3, 0), (1, 1), (1, 1)");
    let m = panic_message(|| drop(MaxPool1d::new(2).forward(&Tensor::zeros(&[1, 2, 3, 4]))));
    assert!(m.ends_with("expects input [N, C, L] or [C, L], got [1, 2, 3, 4]"), "{m}");
    // Only the batch may be empty (PyTorch refuses `max_pool1d` of `[0, 10]`).
    for shape in [[0, 10], [3, 0]] {
        let m = panic_message(|| drop(MaxPool1d::new(2).forward(&Tensor::zeros(&shape))));
        assert!(m.ends_with(&format!("with C and L non-zero (N may be 0), got {shape:?}")), "{m}");
    }
    assert_eq!(MaxPool1d::new(2).forward(&Tensor::zeros(&[0, 3, 10])).shape(), &[0, 3, 5]);
    let m = panic_message(|| {
        AvgPool1d::with_config(2, AvgPool1dConfig { padding: 2, ..Default::default() });
    });
    assert_eq!(m, "AvgPool1d: padding 2 should be at most half of the kernel size 2");
    let layer = decoder_layer(false, false);
    let m = panic_message(|| drop(layer.forward((&Tensor::zeros(&[4, 2, 8]), &Tensor::zeros(&[5, 2, 6])))));
    assert!(m.contains("TransformerDecoderLayer(d_model=8, nhead=2) expects memory [S, N, E]"), "{m}");
    assert!(m.ends_with("with E = 8, got [5, 2, 6]"), "{m}");
    let model = small_transformer(0.0, true);
    let m = panic_message(|| drop(model.forward((&Tensor::zeros(&[2, 5, 8]), &Tensor::zeros(&[3, 4, 8])))));
    assert_eq!(
        m,
        "Transformer(d_model=8, nhead=2): the batch number of src [2, 5, 8] and tgt [3, 4, 8] must be equal (dim 0)"
    );
}

#[test]
fn hooks_fire_in_every_transformer_module_and_see_the_primary_inputs() {
    use nn_core::Hooks;
    use std::sync::{Arc, Mutex};
    manual_seed(6);
    let model = small_transformer(0.0, true);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for (name, m) in model.named_modules() {
        let log = seen.clone();
        let name = name.to_string();
        let hook = m.register_forward_hook(move |x, y| {
            log.lock().unwrap().push((name.clone(), x.shape().to_vec(), y.shape().to_vec()));
            None
        });
        // A ModuleList is never run (as in PyTorch), so it takes no hooks.
        match hook {
            Ok(h) => handles.push(h),
            Err(e) => assert_eq!(m.type_name(), "ModuleList", "{e}"),
        }
    }
    let (src, tgt) = (Tensor::randn(&[2, 5, 8]), Tensor::randn(&[2, 3, 8]));
    model.forward((&src, &tgt));
    let seen = seen.lock().unwrap();
    let find =
        |n: &str| seen.iter().find(|(name, _, _)| name == n).unwrap_or_else(|| panic!("{n} did not run: {seen:?}"));
    // The model's primary input is `src`, the decoder's is `tgt`; the memory attention's
    // query is the target stream.
    assert_eq!(find(""), &(String::new(), vec![2, 5, 8], vec![2, 3, 8]));
    assert_eq!(find("encoder").1, vec![2, 5, 8]);
    assert_eq!(find("decoder").1, vec![2, 3, 8]);
    assert_eq!(find("decoder.layers.0.multihead_attn").1, vec![2, 3, 8]);
    assert_eq!(find("decoder.layers.0.norm3").2, vec![2, 3, 8]);
    assert_eq!(find("decoder.norm").2, vec![2, 3, 8]);
    for h in handles {
        h.remove();
    }
}
