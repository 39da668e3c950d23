//! Attention masks against PyTorch 2.15 (`tests/fixtures/pytorch/masks.py`): the two mask
//! kinds (bool and float) give the same results as PyTorch, fully masked rows give what
//! PyTorch gives on each path (zeros without weights, NaN with them), and every other mask
//! dtype is refused with a message naming the argument and both accepted kinds.

use std::path::Path;

use nn_core::{ops::AttentionConfig, Forward, Module, StateDict, Tensor};
use nn_layers::{
    AttentionInput, EncoderInput, MultiheadAttention, TransformerEncoderLayer, TransformerEncoderLayerConfig,
};

fn load(name: &str) -> StateDict {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch/masks").join(format!("{name}.safetensors"));
    StateDict::load(&p).unwrap_or_else(|e| panic!("{e}"))
}

fn state(f: &StateDict) -> StateDict {
    f.iter().filter_map(|(k, v)| k.strip_prefix("state.").map(|k| (k.to_string(), v.clone()))).collect()
}

fn get<'a>(f: &'a StateDict, key: &str) -> &'a Tensor {
    f.get(key).unwrap_or_else(|| panic!("fixture entry {key} missing"))
}

/// Equal within `tol` (relative to 1 + |expected|), NaN exactly where PyTorch has NaN.
#[track_caller]
fn assert_close(got: &Tensor, expected: &Tensor, tol: f64, what: &str) {
    assert_eq!(got.shape(), expected.shape(), "{what}: shapes");
    for (i, (g, e)) in got.to_vec_f64().iter().zip(expected.to_vec_f64()).enumerate() {
        let ok = if e.is_nan() { g.is_nan() } else { (g - e).abs() <= tol * (1.0 + e.abs()) };
        assert!(ok, "{what}: element {i} is {g}, PyTorch gives {e}");
    }
}

fn panic_message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let err = std::panic::catch_unwind(f).expect_err("expected a panic");
    err.downcast_ref::<String>().cloned().or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
}

#[test]
fn multihead_attention_masks_of_both_kinds_match_pytorch() {
    let f = load("mha");
    let mut m = MultiheadAttention::with_options(8, 2, 0.0, true, true);
    m.load_state_dict(&state(&f), true).unwrap();
    m.eval();
    for kind in ["bool", "float"] {
        let x = get(&f, "x").detach().requires_grad_(true);
        let input = AttentionInput::self_attention(&x)
            .key_padding_mask(get(&f, &format!("kpm_{kind}")))
            .attn_mask(get(&f, &format!("am_{kind}")));
        // No weights: the scaled-dot-product path; batch entry 1 (all keys padding) and
        // query row 2 (may attend nowhere) give zeros before the output projection.
        let (y, w) = m.forward(&input.clone().need_weights(false));
        assert!(w.is_none());
        assert_close(&y, get(&f, &format!("{kind}.y")), 1e-5, &format!("{kind} masks, no weights: output"));
        (&y * get(&f, "wy")).sum().backward();
        assert_close(
            &x.grad().unwrap(),
            get(&f, &format!("{kind}.gx")),
            1e-5,
            &format!("{kind} masks: input gradient"),
        );
        // With weights: plain softmax, NaN on the fully masked rows, as PyTorch.
        let (yw, w) = m.forward(&input.need_weights(true));
        assert_close(&yw, get(&f, &format!("{kind}.yw")), 1e-5, &format!("{kind} masks, weights: output"));
        assert_close(&w.unwrap(), get(&f, &format!("{kind}.w")), 1e-5, &format!("{kind} masks, weights: weights"));
    }
}

#[test]
fn encoder_layer_with_a_fully_padded_entry_matches_pytorch() {
    let f = load("encoder");
    let cfg =
        TransformerEncoderLayerConfig { dim_feedforward: 16, dropout: 0.0, batch_first: true, ..Default::default() };
    let mut layer = TransformerEncoderLayer::with_config(8, 2, cfg);
    layer.load_state_dict(&state(&f), true).unwrap();
    layer.eval();
    for kind in ["bool", "float"] {
        let y = layer.forward(&EncoderInput::new(get(&f, "x")).src_key_padding_mask(get(&f, &format!("kpm_{kind}"))));
        assert_close(&y, get(&f, &format!("{kind}.y")), 1e-5, &format!("{kind} padding mask"));
        assert!(y.to_vec().iter().all(|v| v.is_finite()));
    }
}

#[test]
fn scaled_dot_product_attention_broadcast_masks_and_a_fully_masked_row_match_pytorch() {
    let f = load("sdpa");
    for (kind, mask) in [("bool", "keep"), ("float", "keep_float")] {
        let [q, k, v] = ["q", "k", "v"].map(|n| get(&f, n).detach().requires_grad_(true));
        let config = AttentionConfig { attn_mask: Some(get(&f, mask)), ..Default::default() };
        let y = q.scaled_dot_product_attention(&k, &v, &config);
        assert_close(&y, get(&f, &format!("{kind}.y")), 1e-12, &format!("{kind} mask: output"));
        (&y * get(&f, "wy")).sum().backward();
        for (t, g) in [(&q, "gq"), (&k, "gk"), (&v, "gv")] {
            assert_close(&t.grad().unwrap(), get(&f, &format!("{kind}.{g}")), 1e-12, &format!("{kind} mask: {g}"));
        }
    }
}

#[test]
fn integer_masks_are_refused_naming_the_argument_and_both_kinds() {
    let m = MultiheadAttention::with_options(8, 2, 0.0, true, true);
    let x = Tensor::randn(&[2, 3, 8]);
    // Hugging Face's attention_mask: 1 = attend. Read as PyTorch's bool it would mask the
    // wrong positions; added to the scores it would mask nothing.
    let hf = Tensor::from_vec_i64(vec![1, 1, 0, 1, 1, 1], &[2, 3]);
    let msg = panic_message(|| {
        m.forward(&AttentionInput::self_attention(&x).key_padding_mask(&hf));
    });
    for part in
        ["key_padding_mask", "dtype i64", "true = ignore this key position", "float mask", "added to the scores"]
    {
        assert!(msg.contains(part), "{part:?} missing from {msg:?}");
    }
    assert!(!msg.contains("to_dtype"), "{msg}");
    let am = Tensor::from_vec_i64(vec![0; 9], &[3, 3]);
    let msg = panic_message(|| {
        m.forward(&AttentionInput::self_attention(&x).attn_mask(&am).need_weights(false));
    });
    assert!(msg.contains("attn_mask of shape [3, 3] has dtype i64") && msg.contains("true = may not attend"), "{msg}");
    // A float mask of another float dtype: refused, as PyTorch.
    let f64_mask = Tensor::zeros(&[2, 3]).to_dtype(nn_core::DType::F64);
    let msg = panic_message(|| {
        m.forward(&AttentionInput::self_attention(&x).key_padding_mask(&f64_mask));
    });
    assert!(msg.contains("key_padding_mask has dtype f64 but the query is f32"), "{msg}");
    // The encoder layer passes its masks to the attention, so it refuses them too.
    let layer = TransformerEncoderLayer::with_config(
        8,
        2,
        TransformerEncoderLayerConfig { dim_feedforward: 16, batch_first: true, ..Default::default() },
    );
    let msg = panic_message(|| {
        layer.forward(&EncoderInput::new(&x).src_key_padding_mask(&hf));
    });
    assert!(msg.contains("key_padding_mask") && msg.contains("dtype i64"), "{msg}");
}
