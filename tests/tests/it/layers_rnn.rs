//! Parity with PyTorch of the recurrent layers (`RNN`, `LSTM`, `GRU`), `RMSNorm` and
//! Hugging Face's `Conv1D`, against `tests/fixtures/pytorch/layers_rnn.py`'s committed
//! outputs: outputs (and final states), the gradients of the input, of the initial states
//! and of every parameter, in training and in evaluation mode; with the `gpu` feature
//! again on `gpu:0`. Also their printouts against PyTorch's `repr`, state-dict keys,
//! default init, dropout between layers, and the messages for wrong shapes.

use std::collections::HashMap;
use std::path::Path;

use nn_core::{manual_seed, no_grad, Device, Forward, Module, Tensor};
use nn_layers::*;

use crate::layers::{assert_close_ctx, devices, load, LOOSE, TIGHT};

/// A case's inputs, each tracking its gradient: `x` and, where the case has them, the
/// initial states `h0` and `c0`.
struct Inputs {
    x: Tensor,
    h0: Option<Tensor>,
    c0: Option<Tensor>,
}

/// Builds the module, loads `state.*` strictly and compares everything PyTorch recorded,
/// on every device of [`devices`].
fn check<M: Module>(name: &str, build: impl Fn() -> M, call: impl Fn(&M, &Inputs) -> Tensor, tol: f32) {
    for device in devices() {
        check_on(device, name, &build, &call, tol);
    }
}

fn check_on<M: Module>(
    device: Device,
    name: &str,
    build: &impl Fn() -> M,
    call: &impl Fn(&M, &Inputs) -> Tensor,
    tol: f32,
) {
    let f = load(name);
    let state: nn_core::StateDict =
        f.iter().filter_map(|(k, v)| k.strip_prefix("state.").map(|k| (k.to_string(), v.clone()))).collect();
    let on = |k: &str| f.get(k).map(|t| t.to_device(device));
    let case = format!("{name} on {device}");
    for mode in ["train", "eval"] {
        let mut m = build();
        m.to_device(device);
        m.load_state_dict(&state, true).unwrap_or_else(|e| panic!("{case}: {e}"));
        if mode == "train" {
            m.train()
        } else {
            m.eval()
        }
        let track = |t: Tensor| t.detach().requires_grad_(true);
        let inputs = Inputs {
            x: track(on("x").expect("every case has an input `x`")),
            h0: on("h0").map(track),
            c0: on("c0").map(track),
        };
        let ctx = |what: &str| format!("{case} [{mode}] {what}");
        let expect = |k: &str| f.get(&format!("{mode}.{k}")).unwrap_or_else(|| panic!("{}: missing", ctx(k))).to_vec();
        let y = call(&m, &inputs);
        assert_eq!(y.device(), device, "{}", ctx("output device"));
        assert_close_ctx(&y.to_vec(), &expect("y"), tol, &ctx("output"));
        (&y * &on("w").unwrap()).sum().backward();
        let named = [("x", Some(&inputs.x)), ("h0", inputs.h0.as_ref()), ("c0", inputs.c0.as_ref())];
        for (k, t) in named.iter().filter_map(|(k, t)| t.map(|t| (k, t))) {
            let g = t.grad().unwrap_or_else(|| panic!("{}: no gradient", ctx(k)));
            assert_close_ctx(&g.to_vec(), &expect(&format!("g{k}")), tol, &ctx(&format!("gradient of {k}")));
        }
        let mut seen = 0;
        for (k, p) in m.named_parameters() {
            let g = p.grad().unwrap_or_else(|| panic!("{}: no gradient", ctx(&k)));
            assert_close_ctx(&g.to_vec(), &expect(&format!("grad.{k}")), tol, &ctx(&format!("gradient of {k}")));
            seen += 1;
        }
        let recorded = f.keys().filter(|k| k.starts_with(&format!("{mode}.grad."))).count();
        assert_eq!(seen, recorded, "{}", ctx("parameter gradients compared"));
    }
}

/// `(output, h_n)` flattened and joined, as the generator records it.
fn flat(y: &Tensor, states: &[&Tensor]) -> Tensor {
    let parts: Vec<Tensor> =
        std::iter::once(y).chain(states.iter().copied()).map(|t| t.reshape(&[t.numel()])).collect();
    Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0)
}

/// RNN and GRU: `(&x, &h0)` when the case has `h0`, else `&x`.
fn run_rnn<M>(m: &M, i: &Inputs) -> Tensor
where
    M: Forward<Input = RNNInput, Output = (Tensor, Tensor)>,
{
    let (y, h) = match &i.h0 {
        Some(h0) => m.forward((&i.x, h0)),
        None => m.forward(&i.x),
    };
    flat(&y, &[&h])
}

/// LSTM: `(&x, (&h0, &c0))` when the case has them, else `&x`.
fn run_lstm(m: &LSTM, i: &Inputs) -> Tensor {
    let (y, (h, c)) = match (&i.h0, &i.c0) {
        (Some(h0), Some(c0)) => m.forward((&i.x, (h0, c0))),
        _ => m.forward(&i.x),
    };
    flat(&y, &[&h, &c])
}

#[test]
fn rnn_matches_pytorch() {
    check("rnn_tanh", || RNN::new(3, 4), run_rnn, LOOSE);
    let cfg =
        RNNConfig { num_layers: 2, nonlinearity: RnnNonlinearity::Relu, bidirectional: true, ..Default::default() };
    check("rnn_relu_2layer_bidir", || RNN::with_config(3, 4, cfg), run_rnn, LOOSE);
}

#[test]
fn lstm_matches_pytorch() {
    check("lstm", || LSTM::new(3, 4), run_lstm, LOOSE);
    let cfg = LSTMConfig { num_layers: 2, batch_first: true, bidirectional: true, ..Default::default() };
    check("lstm_2layer_bidir_batchfirst", || LSTM::with_config(3, 4, cfg), run_lstm, LOOSE);
    let proj = LSTMConfig { num_layers: 2, bidirectional: true, proj_size: 2, ..Default::default() };
    check("lstm_proj_2layer_bidir", || LSTM::with_config(3, 5, proj), run_lstm, LOOSE);
    // The input struct with its builder, on unbatched input and states.
    check(
        "lstm_unbatched",
        || LSTM::new(3, 4),
        |m, i| {
            let (y, (h, c)) = m.forward(&LSTMInput::new(&i.x).hx(i.h0.as_ref().unwrap(), i.c0.as_ref().unwrap()));
            flat(&y, &[&h, &c])
        },
        LOOSE,
    );
}

#[test]
fn gru_matches_pytorch() {
    check("gru", || GRU::new(3, 4), run_rnn, LOOSE);
    check(
        "gru_bidir",
        || GRU::with_config(3, 4, GRUConfig { bidirectional: true, ..Default::default() }),
        run_rnn,
        LOOSE,
    );
    let cfg = GRUConfig { num_layers: 2, bias: false, ..Default::default() };
    check("gru_nobias_2layer_unbatched", || GRU::with_config(3, 4, cfg), run_rnn, LOOSE);
}

#[test]
fn rms_norm_matches_pytorch() {
    check("rmsnorm", || RMSNorm::new(6), |m, i| m.forward(&i.x), TIGHT);
    let cfg = RMSNormConfig { eps: Some(1e-6), elementwise_affine: false };
    check("rmsnorm_2d", || RMSNorm::with_config(&[3, 4], cfg), |m, i| m.forward(&i.x), TIGHT);
}

#[test]
fn hugging_face_conv1d_matches_transformers() {
    check("conv1d_hf", || Conv1D::new(6, 4), |m, i| m.forward(&i.x), TIGHT);
}

#[test]
fn printouts_match_pytorch() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch/layers_rnn_reprs.json");
    let expected: HashMap<String, String> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let relu2 =
        RNNConfig { num_layers: 2, nonlinearity: RnnNonlinearity::Relu, bidirectional: true, ..Default::default() };
    let nobias = RNNConfig { num_layers: 3, bias: false, dropout: 0.25, ..Default::default() };
    let lstm2 = LSTMConfig { num_layers: 2, batch_first: true, bidirectional: true, ..Default::default() };
    let proj = LSTMConfig { num_layers: 2, bidirectional: true, ..Default::default() };
    let mine = [
        ("rnn", RNN::new(3, 4).to_string()),
        ("rnn_relu_2layer_bidir", RNN::with_config(3, 4, relu2).to_string()),
        ("rnn_nobias_dropout", RNN::with_config(3, 4, nobias).to_string()),
        ("lstm", LSTM::new(3, 4).to_string()),
        ("lstm_2layer_bidir_batchfirst", LSTM::with_config(10, 20, lstm2).to_string()),
        ("lstm_proj", LSTM::with_config(3, 5, LSTMConfig { proj_size: 2, ..proj }).to_string()),
        ("gru", GRU::new(3, 4).to_string()),
        ("gru_bidir", GRU::with_config(3, 4, GRUConfig { bidirectional: true, ..Default::default() }).to_string()),
        ("rmsnorm", RMSNorm::new(6).to_string()),
        (
            "rmsnorm_2d",
            RMSNorm::with_config(&[3, 4], RMSNormConfig { eps: Some(1e-6), elementwise_affine: false }).to_string(),
        ),
        ("conv1d_hf", Conv1D::new(6, 4).to_string()),
    ];
    assert_eq!(mine.len(), expected.len(), "every printout in the fixture is checked");
    for (k, s) in mine {
        assert_eq!(s, expected[k], "printout of {k}");
    }
}

#[test]
fn state_dict_keys_and_shapes_are_pytorchs() {
    let gru = GRU::with_config(3, 4, GRUConfig { num_layers: 2, bidirectional: true, ..Default::default() });
    let keys: Vec<(String, Vec<usize>)> =
        gru.state_dict().iter().map(|(k, v)| (k.to_string(), v.shape().to_vec())).collect();
    let want: Vec<(&str, &[usize])> = vec![
        ("weight_ih_l0", &[12, 3]),
        ("weight_hh_l0", &[12, 4]),
        ("bias_ih_l0", &[12]),
        ("bias_hh_l0", &[12]),
        ("weight_ih_l0_reverse", &[12, 3]),
        ("weight_hh_l0_reverse", &[12, 4]),
        ("bias_ih_l0_reverse", &[12]),
        ("bias_hh_l0_reverse", &[12]),
        ("weight_ih_l1", &[12, 8]),
        ("weight_hh_l1", &[12, 4]),
        ("bias_ih_l1", &[12]),
        ("bias_hh_l1", &[12]),
        ("weight_ih_l1_reverse", &[12, 8]),
        ("weight_hh_l1_reverse", &[12, 4]),
        ("bias_ih_l1_reverse", &[12]),
        ("bias_hh_l1_reverse", &[12]),
    ];
    let want: Vec<(String, Vec<usize>)> = want.into_iter().map(|(k, s)| (k.to_string(), s.to_vec())).collect();
    assert_eq!(keys, want);
    // The accessors name the same parameters as the state dict.
    assert_eq!(gru.weight_ih(1, true).id(), gru.named_parameters()[12].1.id());
    assert_eq!(gru.all_weights().len(), 4);
    let lstm = LSTM::with_config(3, 5, LSTMConfig { bias: false, ..Default::default() });
    let keys: Vec<String> = lstm.state_dict().keys().map(String::from).collect();
    assert_eq!(keys, ["weight_ih_l0", "weight_hh_l0"]);
    assert_eq!(lstm.weight_hh(0, false).shape(), &[20, 5]);
    assert!(lstm.bias_ih(0, false).is_none());
    let proj = LSTM::with_config(3, 5, LSTMConfig { proj_size: 2, ..Default::default() });
    let keys: Vec<(String, Vec<usize>)> =
        proj.state_dict().iter().map(|(k, v)| (k.to_string(), v.shape().to_vec())).collect();
    let want: Vec<(String, Vec<usize>)> = [
        ("weight_ih_l0", vec![20, 3]),
        ("weight_hh_l0", vec![20, 2]),
        ("bias_ih_l0", vec![20]),
        ("bias_hh_l0", vec![20]),
        ("weight_hr_l0", vec![2, 5]),
    ]
    .into_iter()
    .map(|(k, s)| (k.to_string(), s))
    .collect();
    assert_eq!(keys, want);
    assert_eq!(proj.weight_hr(0, false).unwrap().id(), proj.named_parameters()[4].1.id());
    assert_eq!(proj.all_weights()[0].len(), 5);
    let conv = Conv1D::new(6, 4);
    let keys: Vec<(String, Vec<usize>)> =
        conv.state_dict().iter().map(|(k, v)| (k.to_string(), v.shape().to_vec())).collect();
    assert_eq!(keys, [("weight".to_string(), vec![4, 6]), ("bias".to_string(), vec![6])]);
    let keys: Vec<String> = RMSNorm::new(6).state_dict().keys().map(String::from).collect();
    assert_eq!(keys, ["weight"]);
}

/// Mean, standard deviation, minimum and maximum.
fn stats(v: &[f64]) -> (f64, f64, f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (mean, std, min, max)
}

#[test]
fn default_inits_match_reset_parameters() {
    manual_seed(0);
    // Every recurrent weight and bias: U(-1/sqrt(H), 1/sqrt(H)), H = 64.
    let b = 1.0 / 8.0;
    let lstm = LSTM::with_config(32, 64, LSTMConfig { num_layers: 2, bidirectional: true, ..Default::default() });
    let mut all = Vec::new();
    for (name, p) in lstm.named_parameters() {
        let v = p.to_vec_f64();
        let (_, _, min, max) = stats(&v);
        assert!(min >= -b && max <= b && min < -0.95 * b && max > 0.95 * b, "{name}: range [{min}, {max}]");
        all.extend(v);
    }
    // Over all 2 * 2 * 4 tensors (about 100k values), mean and spread of U(-b, b).
    let (mean, std, _, _) = stats(&all);
    assert!(mean.abs() < 0.02 * b, "mean {mean}");
    assert!((std / (b / 3f64.sqrt()) - 1.0).abs() < 0.01, "std {std}");
    // Distinct draws, not one tensor repeated.
    assert_ne!(lstm.weight_ih(0, false).to_vec(), lstm.weight_ih(0, true).to_vec());
    // Conv1D: weight N(0, 0.02), bias zeros, as transformers' Conv1D.
    let conv = Conv1D::new(300, 200);
    let (mean, std, _, _) = stats(&conv.weight.to_vec_f64());
    assert!(mean.abs() < 0.001 && (std / 0.02 - 1.0).abs() < 0.03, "Conv1D.weight: mean {mean}, std {std}");
    assert!(conv.bias.to_vec().iter().all(|&v| v == 0.0));
    // RMSNorm: weight ones.
    assert!(RMSNorm::new(5).weight.as_ref().unwrap().to_vec().iter().all(|&v| v == 1.0));
}

/// Sets every parameter of `m` to `value` on the diagonal of its matrices and 0 elsewhere
/// (biases 0).
fn identity_weights(m: &impl Module) {
    no_grad(|| {
        for (_, p) in m.named_parameters() {
            let s = p.shape().to_vec();
            let v: Vec<f32> =
                (0..p.numel()).map(|k| if s.len() == 2 && k / s[1] == k % s[1] { 1.0 } else { 0.0 }).collect();
            p.copy_(&Tensor::from_vec(v, &s));
        }
    });
}

#[test]
fn dropout_acts_between_layers_in_training_only() {
    manual_seed(5);
    // Two ReLU layers with W_ih = I, W_hh = 0 and no bias pass a positive input through
    // unchanged: the output shows the dropout mask between the layers, scaled by 1/(1-p).
    let cfg = RNNConfig {
        num_layers: 2,
        nonlinearity: RnnNonlinearity::Relu,
        bias: false,
        dropout: 0.5,
        ..Default::default()
    };
    let mut rnn = RNN::with_config(8, 8, cfg);
    identity_weights(&rnn);
    no_grad(|| {
        rnn.weight_hh(0, false).copy_(&Tensor::zeros(&[8, 8]));
        rnn.weight_hh(1, false).copy_(&Tensor::zeros(&[8, 8]));
    });
    let x = Tensor::ones(&[50, 10, 8]);
    let (y, _) = rnn.forward(&x);
    let v = y.to_vec();
    let zeros = v.iter().filter(|&&e| e == 0.0).count();
    assert!(v.iter().all(|&e| e == 0.0 || e == 2.0), "kept values are scaled by 1 / (1 - p)");
    let rate = zeros as f64 / v.len() as f64;
    assert!((rate - 0.5).abs() < 0.05, "dropped fraction {rate}, expected 0.5");
    rnn.eval();
    assert!(rnn.forward(&x).0.to_vec().iter().all(|&e| e == 1.0), "no dropout in evaluation mode");
    // No dropout after the last layer: a second mask would leave values of 4 as well as 2.
    // (With one layer the option could do nothing, and is refused: see
    // `dropout_on_a_single_layer_is_refused`.)
}

#[test]
fn a_square_conv1d_weight_in_linear_is_the_transposed_map() {
    manual_seed(1);
    let conv = Conv1D::new(4, 4);
    let x = Tensor::randn(&[3, 4]);
    let mut lin = Linear::new(4, 4);
    let sd = conv.state_dict();
    // The checkpoint loads into Linear without any complaint...
    lin.load_state_dict(&sd, true).unwrap();
    let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(a, b)| (a - b).abs() < 1e-6);
    assert!(!close(&lin.forward(&x).to_vec(), &conv.forward(&x).to_vec()), "silently a different map");
    // ...while Linear with the transposed weight is the same layer.
    no_grad(|| lin.weight.copy_(&conv.weight.t()));
    assert!(close(&lin.forward(&x).to_vec(), &conv.forward(&x).to_vec()));
}

#[test]
fn batch_first_and_unbatched_inputs_are_layouts_of_one_computation() {
    manual_seed(2);
    let lstm = LSTM::new(3, 4);
    let mut bf = LSTM::with_config(3, 4, LSTMConfig { batch_first: true, ..Default::default() });
    bf.load_state_dict(&lstm.state_dict(), true).unwrap();
    bf.eval();
    let x = Tensor::randn(&[5, 2, 3]);
    let (y, (h, c)) = lstm.forward(&x);
    let (yb, (hb, cb)) = bf.forward(&x.transpose(0, 1));
    assert_eq!(y.to_vec(), yb.transpose(0, 1).contiguous().to_vec());
    assert_eq!((h.to_vec(), c.to_vec()), (hb.to_vec(), cb.to_vec()));
    let (y1, (h1, _)) = lstm.forward(&x.narrow(1, 1, 1).squeeze_dim(1));
    assert_eq!(y1.shape(), &[5, 4]);
    assert_eq!(h1.shape(), &[1, 4]);
    let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(a, b)| (a - b).abs() < 1e-6);
    assert!(close(&y1.to_vec(), &y.narrow(1, 1, 1).contiguous().to_vec()));
}

#[test]
#[should_panic(expected = "LSTM(10, 20) expects input [L, N, H_in] with H_in = 10, got [5, 3, 8]")]
fn lstm_rejects_a_wrong_feature_size() {
    LSTM::new(10, 20).forward(&Tensor::zeros(&[5, 3, 8]));
}

#[test]
#[should_panic(
    expected = "GRU(3, 4, num_layers=2, batch_first=True) expects input [N, L, H_in] (or unbatched [L, H_in]) with H_in = 3, got [2, 5, 3, 1]"
)]
fn gru_rejects_a_wrong_rank() {
    GRU::with_config(3, 4, GRUConfig { num_layers: 2, batch_first: true, ..Default::default() })
        .forward(&Tensor::zeros(&[2, 5, 3, 1]));
}

#[test]
#[should_panic(
    expected = "RNN(3, 4, bidirectional=True) expects h_0 [2, 6, 4] ([num_layers * num_directions, N, H]) for input [5, 6, 3], got [1, 6, 4]"
)]
fn rnn_rejects_a_wrong_initial_state() {
    let rnn = RNN::with_config(3, 4, RNNConfig { bidirectional: true, ..Default::default() });
    rnn.forward((&Tensor::zeros(&[5, 6, 3]), &Tensor::zeros(&[1, 6, 4])));
}

#[test]
#[should_panic(
    expected = "LSTM(3, 4) expects c_0 [1, 4] ([num_layers * num_directions, H]) for input [5, 3], got [1, 2, 4]"
)]
fn lstm_rejects_a_batched_cell_state_for_an_unbatched_input() {
    LSTM::new(3, 4).forward((&Tensor::zeros(&[5, 3]), (&Tensor::zeros(&[1, 4]), &Tensor::zeros(&[1, 2, 4]))));
}

#[test]
#[should_panic(
    expected = "LSTM(3, 5, proj_size=2) expects h_0 [1, 2, 2] ([num_layers * num_directions, N, proj_size]) for input [4, 2, 3], got [1, 2, 5]"
)]
fn a_projecting_lstm_wants_h0_of_proj_size() {
    let x = Tensor::zeros(&[4, 2, 3]);
    let c0 = Tensor::zeros(&[1, 2, 5]);
    LSTM::with_config(3, 5, LSTMConfig { proj_size: 2, ..Default::default() }).forward((&x, (&c0, &c0)));
}

#[test]
#[should_panic(expected = "LSTM: proj_size (4) must be smaller than hidden_size (4)")]
fn lstm_rejects_a_projection_as_large_as_the_hidden_state() {
    LSTM::with_config(3, 4, LSTMConfig { proj_size: 4, ..Default::default() });
}

#[test]
#[should_panic(expected = "RNN: dropout must be a probability in [0, 1], got 1.5")]
fn rnn_rejects_a_dropout_outside_0_1() {
    RNN::with_config(3, 4, RNNConfig { dropout: 1.5, ..Default::default() });
}

#[test]
#[should_panic(expected = "LSTM: no weights for layer 0 reverse (num_layers=1, bidirectional=False)")]
fn a_missing_direction_is_named() {
    LSTM::new(3, 4).weight_ih(0, true);
}

#[test]
#[should_panic(
    expected = "RMSNorm((3, 4), eps=None, elementwise_affine=True) expects input [..., [3, 4]], got [2, 4, 3]"
)]
fn rms_norm_rejects_a_wrong_shape() {
    RMSNorm::with_config(&[3, 4], RMSNormConfig::default()).forward(&Tensor::zeros(&[2, 4, 3]));
}

#[test]
#[should_panic(expected = "Conv1D(nf=6, nx=4) expects input [..., 4] (nx), got [2, 6]")]
fn conv1d_rejects_a_wrong_feature_size() {
    Conv1D::new(6, 4).forward(&Tensor::zeros(&[2, 6]));
}

/// Dropout between stacked layers cannot act on one layer: an error, where PyTorch warns.
#[test]
#[should_panic(expected = "dropout 0.3 has no effect with num_layers=1 (it applies between stacked layers)")]
fn dropout_on_a_single_layer_is_refused() {
    LSTM::with_config(3, 4, LSTMConfig { dropout: 0.3, ..Default::default() });
}

/// PyTorch's `ValueError: input_size must be greater than zero`, for each recurrent layer.
#[test]
fn an_input_size_of_zero_is_refused() {
    let message = |f: fn()| std::panic::catch_unwind(f).unwrap_err().downcast_ref::<String>().cloned().unwrap();
    assert_eq!(message(|| drop(RNN::new(0, 3))), "RNN: input_size must be greater than zero, got 0");
    assert_eq!(message(|| drop(LSTM::new(0, 3))), "LSTM: input_size must be greater than zero, got 0");
    assert_eq!(message(|| drop(GRU::new(0, 3))), "GRU: input_size must be greater than zero, got 0");
}
