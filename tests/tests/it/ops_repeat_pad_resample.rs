//! Op parity with PyTorch for `repeat`, `repeat_interleave`, `pad`, `einsum` and
//! `interpolate`: output and input gradients of `sum(y * w)` against
//! `tests/fixtures/pytorch/ops_repeat_pad_resample.py`'s committed values, in f32 (tolerance 1e-5 relative,
//! 1e-5 absolute). With the `gpu` feature every case runs again on `gpu:0`.

use std::path::Path;

use nn_core::functional::{einsum, interpolate};
use nn_core::ops::{InterpolateMode, InterpolateSize, PadMode};
use nn_core::{Device, StateDict, Tensor};

fn load(name: &str) -> StateDict {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/pytorch/ops_repeat_pad_resample")
        .join(format!("{name}.safetensors"));
    StateDict::load(&p).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn devices() -> Vec<Device> {
    let mut d = vec![Device::Cpu];
    if cfg!(feature = "gpu") {
        let gpu = Device::Gpu(0);
        gpu.check().unwrap_or_else(|e| panic!("the parity suite with `gpu` needs gpu:0: {e}"));
        d.push(gpu);
    }
    d
}

#[track_caller]
fn assert_close(what: &str, actual: &Tensor, expected: &Tensor) {
    assert_eq!(actual.shape(), expected.shape(), "{what}: shape");
    let (a, e) = (actual.to_vec(), expected.to_vec());
    for (i, (x, y)) in a.iter().zip(&e).enumerate() {
        assert!((x - y).abs() <= 1e-5 + 1e-5 * y.abs(), "{what}: element {i}: {x} vs PyTorch's {y}");
    }
}

/// Runs case `name` on every device: `op` maps the fixture's inputs `x0, x1, ...` (and
/// the whole fixture, for extra arguments) to the output.
fn check(name: &str, op: impl Fn(&[Tensor], &StateDict) -> Tensor) {
    let f = load(name);
    for device in devices() {
        let ctx = |what: &str| format!("{name} on {device}: {what}");
        let on: StateDict = f.iter().map(|(k, v)| (k.to_string(), v.to_device(device))).collect();
        let xs: Vec<Tensor> =
            (0..).map_while(|i| on.get(&format!("x{i}"))).map(|x| x.detach().requires_grad_(true)).collect();
        assert!(!xs.is_empty(), "{}", ctx("no inputs"));
        let y = op(&xs, &on);
        assert_eq!(y.device(), device, "{}", ctx("the output left the device"));
        assert_close(&ctx("output"), &y, f.get("y").unwrap());
        (&y * on.get("w").unwrap()).sum().backward();
        for (i, x) in xs.iter().enumerate() {
            let g = x.grad().unwrap_or_else(|| panic!("{}", ctx(&format!("no gradient for x{i}"))));
            assert_close(&ctx(&format!("gradient of x{i}")), &g, f.get(&format!("g{i}")).unwrap());
        }
    }
}

#[test]
fn repeat_matches_pytorch() {
    check("repeat", |x, _| x[0].repeat(&[2, 1, 3]));
    check("repeat_interleave", |x, _| x[0].repeat_interleave(3, 1));
    check("repeat_interleave_tensor", |x, f| x[0].repeat_interleave_tensor(f.get("repeats").unwrap(), 0));
}

#[test]
fn pad_matches_pytorch() {
    use PadMode::*;
    check("pad_constant", |x, _| x[0].pad(&[1, 2, 0, 1], Constant, 0.5));
    check("pad_constant_crop", |x, _| x[0].pad(&[-1, 2, 1, -1], Constant, 0.0));
    check("pad_reflect", |x, _| nn_core::functional::pad(&x[0], &[2, 1, 1, 2], Reflect, 0.0));
    check("pad_reflect_1d", |x, _| x[0].pad(&[3, 3], Reflect, 0.0));
    check("pad_replicate", |x, _| x[0].pad(&[2, 3, 4, 1], Replicate, 0.0));
    check("pad_circular", |x, _| x[0].pad(&[1, 2, 3, 1], Circular, 0.0));
    check("pad_circular_crop", |x, _| x[0].pad(&[-1, 2], Circular, 0.0));
    check("pad_replicate_3d", |x, _| x[0].pad(&[1, 0, 0, 1, 1, 1], Replicate, 0.0));
}

#[test]
fn einsum_matches_pytorch() {
    let cases = [
        ("einsum_matmul", "ij,jk->ik"),
        ("einsum_bmm", "bij,bjk->bik"),
        ("einsum_diag", "ii->i"),
        ("einsum_trace", "ii"),
        ("einsum_iji", "iji->j"),
        ("einsum_ellipsis", "...ij,...jk"),
        ("einsum_ellipsis_sum", "...ij->j"),
        ("einsum_bilinear", "ni,ij,nj->n"),
        ("einsum_outer_sum", "i,jk->kij"),
        ("einsum_broadcast", "bi,bi->b"),
        ("einsum_implicit", "bAa,aB"),
        ("einsum_chain", "ab,bc,cd,de->ae"),
        ("einsum_diag_contract", "iij,jk->ik"),
    ];
    for (name, eq) in cases {
        check(name, |x, _| einsum(eq, &x.iter().collect::<Vec<_>>()));
    }
}

#[test]
fn interpolate_matches_pytorch() {
    use InterpolateMode::*;
    use InterpolateSize::*;
    let cases: [(&str, InterpolateSize, InterpolateMode, Option<bool>); 11] = [
        ("interp_nearest_size", Size(vec![5, 7]), Nearest, None),
        ("interp_nearest_scale", ScaleFactor(vec![1.7]), Nearest, None),
        ("interp_nearest_down", Size(vec![2, 3]), Nearest, None),
        ("interp_bilinear_ac", Size(vec![5, 7]), Bilinear, Some(true)),
        ("interp_bilinear", Size(vec![5, 7]), Bilinear, Some(false)),
        ("interp_bilinear_scale", ScaleFactor(vec![1.5, 2.3]), Bilinear, None),
        ("interp_bilinear_down", ScaleFactor(vec![0.6]), Bilinear, None),
        ("interp_bilinear_down_ac", Size(vec![2, 3]), Bilinear, Some(true)),
        ("interp_linear", Size(vec![8]), Linear, None),
        ("interp_linear_ac_scale", ScaleFactor(vec![2.5]), Linear, Some(true)),
        ("interp_nearest_1d", ScaleFactor(vec![2.0]), Nearest, None),
    ];
    for (name, size, mode, align) in cases {
        check(name, |x, _| interpolate(&x[0], size.clone(), mode, align));
    }
}

/// `functional::bilinear` refuses inputs whose rows do not pair (rather than reshape `x2`
/// to `x1`'s rows and pair the wrong ones), as PyTorch and the `Bilinear` layer do.
#[test]
fn bilinear_refuses_inputs_whose_rows_do_not_pair() {
    let w = Tensor::zeros(&[2, 3, 5]);
    let msg = |x1: Tensor, x2: Tensor| {
        let e = std::panic::catch_unwind(|| nn_core::functional::bilinear(&x1, &x2, &w, None)).expect_err("must panic");
        e.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    let m = msg(Tensor::zeros(&[4, 3]), Tensor::zeros(&[2, 10]));
    assert!(m.contains("bilinear: input batch dimensions do not match: got [4] and [2]"), "{m}");
    let m = msg(Tensor::zeros(&[2, 3, 3]), Tensor::zeros(&[6, 5]));
    assert!(m.contains("input dimensions do not match"), "{m}");
    let m = msg(Tensor::zeros(&[4, 3]), Tensor::zeros(&[4, 4]));
    assert!(m.contains("inputs of 3 and 4 features for a weight of shape [2, 3, 5]"), "{m}");
    let y = nn_core::functional::bilinear(&Tensor::ones(&[4, 3]), &Tensor::ones(&[4, 5]), &w, None);
    assert_eq!(y.shape(), &[4, 2]);
}

/// 2x2 max pooling with `ceil_mode` on odd sizes: the last window hangs over the edge.
/// The vectorised 2x2 kernel read past each row there (the next row's first value, and
/// past the plane at the end); it must equal pooling the input padded with -inf.
#[test]
fn max_pool_2x2_with_ceil_mode_on_odd_sizes() {
    use nn_core::ops::Pool2dConfig;
    for (h, w) in [(7, 9), (9, 9), (8, 9), (9, 8)] {
        let x = Tensor::from_vec((0..2 * h * w).map(|i| ((i * 37) % 101) as f32).collect(), &[1, 2, h, w]);
        let y = x.max_pool2d(Pool2dConfig { ceil_mode: true, ..Pool2dConfig::new(2) });
        let padded = x.pad(&[0, (w % 2) as i64, 0, (h % 2) as i64], PadMode::Constant, f64::NEG_INFINITY);
        let want = padded.max_pool2d(Pool2dConfig::new(2));
        assert_eq!(y.shape(), want.shape(), "{h}x{w}");
        assert_eq!(y.to_vec(), want.to_vec(), "{h}x{w}");
    }
}

/// `sort`/`topk` indices written in place after the forward (global ids made with `add_`)
/// do not move the gradient: the backward keeps its own handle (reading the caller's
/// tensor, it would scatter the gradient to the edited positions).
#[test]
fn sort_and_topk_indices_edited_in_place_keep_the_gradient() {
    for topk in [false, true] {
        let run = |edit: bool| {
            let x = Tensor::from_vec(vec![3.0, 1.0, 2.0, 5.0], &[4]).requires_grad_(true);
            let (v, i) = if topk { x.topk(2, 0, true, true) } else { x.sort(0, false) };
            if edit {
                i.fill_(0.0);
            }
            (&v * &Tensor::from_vec((1..=v.numel()).map(|k| k as f32).collect(), v.shape())).sum().backward();
            x.grad().unwrap().to_vec()
        };
        assert_eq!(run(true), run(false), "topk {topk}");
    }
}

/// A leaf frozen between the forward and the backward gets no gradient and runs no hook,
/// as in PyTorch; `set_grad` refuses a gradient of another dtype; a custom op's gradient
/// arrives in its input's dtype.
#[test]
fn gradients_respect_the_leafs_flag_and_dtype() {
    let w = nn_core::Parameter::new(Tensor::ones(&[2]));
    let y = (&*w * 3.0).sum();
    w.requires_grad_(false);
    y.backward();
    assert!(w.grad().is_none(), "a frozen leaf got a gradient");

    let f64_grad = || w.set_grad(Some(Tensor::zeros(&[2]).to_dtype(nn_core::DType::F64)));
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f64_grad)).expect_err("must panic");
    let m = e.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(m.contains("set_grad: a f64 gradient on cpu for a f32 tensor on cpu"), "{m}");

    let x = Tensor::ones(&[2]).requires_grad_(true);
    let out =
        nn_core::autograd::custom_op("f64_grad", &[&x], &x.detach(), |g| vec![Some(g.to_dtype(nn_core::DType::F64))]);
    out.sum().backward();
    assert_eq!(x.grad().unwrap().dtype(), nn_core::DType::F32);
}

/// The panic message of `f`, which must panic.
fn panics(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let e = std::panic::catch_unwind(f).expect_err("a panic");
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

/// Means (and variances, and the class losses' means) of half tensors sum in f32, as
/// PyTorch's: rounded to f16, the sum of 100,000 ones would be inf, and so their mean.
#[test]
fn half_means_and_class_loss_means_sum_in_f32() {
    use nn_core::DType;
    for dtype in [DType::F16, DType::BF16] {
        let x = Tensor::ones(&[100_000]).to_dtype(dtype);
        assert_eq!(x.mean().to_dtype(DType::F32).item(), 1.0, "{dtype}");
        assert_eq!(x.var_dims(&[0], 1, false).to_dtype(DType::F32).item(), 0.0, "{dtype}");
        // 70,000 kept targets: their count is 70,000, not inf (f16) or 69,632 (bf16).
        let logits = Tensor::zeros(&[70_000, 2]).to_dtype(dtype);
        let t = Tensor::from_vec_i64(vec![0; 70_000], &[70_000]);
        let loss = nn_core::functional::cross_entropy(&logits, &t).to_dtype(DType::F32).item();
        assert!((loss - std::f64::consts::LN_2).abs() < 1e-2, "{dtype}: {loss}");
    }
}

/// A fill value the dtype cannot hold is refused, as PyTorch's "cannot be converted ...
/// without overflow": `-1e9` in f16 filled -inf (a fully masked row's softmax then NaN),
/// NaN in i64 filled 0.
#[test]
fn fill_values_the_dtype_cannot_hold_are_refused() {
    use nn_core::{DType, Device};
    let f16 = Tensor::zeros(&[2]).to_dtype(DType::F16);
    let m = Tensor::from_vec_bool(vec![true, false], &[2]);
    let msg = panics(|| drop(f16.masked_fill(&m, -1e9)));
    assert!(msg.contains("value -1000000000 cannot be converted to f16 without overflow"), "{msg}");
    let i = Tensor::from_vec_i64(vec![5, 6], &[2]);
    for v in [f64::NAN, f64::NEG_INFINITY, 1e19] {
        let msg = panics(|| drop(i.masked_fill(&m, v)));
        assert!(msg.contains("cannot be converted to i64 without overflow"), "{v}: {msg}");
    }
    let msg = panics(|| drop(Tensor::full_on(&[1], 1e39, DType::F32, Device::Cpu)));
    assert!(msg.contains("cannot be converted to f32"), "{msg}");
    // What each dtype holds: infinities in floats, truncation in i64 (as PyTorch).
    assert_eq!(f16.masked_fill(&m, f64::NEG_INFINITY).to_dtype(DType::F32).to_vec()[0], f32::NEG_INFINITY);
    assert_eq!(i.masked_fill(&m, 1.5).to_vec_i64(), [1, 6]);
    assert_eq!(i.masked_fill(&m, -9.2e18).to_vec_i64()[0], -9_200_000_000_000_000_000);
}

/// Arguments a 0-d or empty tensor ignored, and a clamp bound of NaN (forward passed
/// every element through, backward sent no gradient): refused or PyTorch's result.
#[test]
fn degenerate_arguments_are_refused_or_follow_pytorch() {
    let s = Tensor::scalar(1.0);
    assert!(panics(|| drop(s.max_dim(7, false))).contains("dimension 7 out of range for a tensor of rank 0"));
    assert!(panics(|| drop(s.squeeze_dim(3))).contains("out of range"));
    assert!(panics(|| drop(s.flatten(0, 2))).contains("out of range"));
    assert_eq!(s.max_dim(-1, false).0.item(), 1.0);
    let two = Tensor::from_vec_i64(vec![0, 0], &[2]);
    assert!(panics(|| drop(s.index_select(0, &two))).contains("index to a 0-d tensor can have only 1 value, got 2"));
    // A usize that wrapped below zero is not the last dim.
    let x = Tensor::ones(&[2, 3]);
    assert!(panics(|| drop(x.sum_dim(usize::MAX, false))).contains("a usize that wrapped below zero"));
    // An empty dim splits into one empty piece, as PyTorch's.
    let e = Tensor::zeros(&[0, 3]);
    assert_eq!(e.split(2, 0).iter().map(|t| t.shape().to_vec()).collect::<Vec<_>>(), [vec![0, 3]]);
    assert_eq!(e.chunk(2, 0).len(), 1);
    let msg = panics(|| drop(Tensor::ones(&[2]).clamp(f64::NAN, 1.0)));
    assert!(msg.contains("clamp: a bound is NaN"), "{msg}");
}

/// The composed attention path counts masked keys in f32: in bf16, 259 masked keys of 260
/// would round to 260, and a row with one key left would give zeros.
#[test]
fn half_attention_counts_masked_keys_exactly() {
    use nn_core::ops::AttentionConfig;
    use nn_core::DType;
    let s = 260;
    let q = Tensor::ones(&[1, 1, 4]).to_dtype(DType::BF16);
    let k = Tensor::ones(&[1, s, 4]).to_dtype(DType::BF16);
    let v = Tensor::ones(&[1, s, 2]).to_dtype(DType::BF16);
    let mask = Tensor::from_vec_bool((0..s).map(|i| i == 7).collect(), &[1, 1, s]);
    let config = AttentionConfig { attn_mask: Some(&mask), ..Default::default() };
    let (y, w) = q.scaled_dot_product_attention_with_weights(&k, &v, &config);
    assert_eq!(y.to_dtype(DType::F32).to_vec(), [1.0, 1.0]);
    assert_eq!(w.to_dtype(DType::F32).to_vec()[7], 1.0);
}

/// Integer in-place operands are exact: through f64, 2^53 + 1 would be added as 2^53.
#[test]
fn integer_in_place_operands_are_exact() {
    let x = Tensor::from_vec_i64(vec![0, 1], &[2]);
    x.add_((1i64 << 53) + 1);
    assert_eq!(x.to_vec_i64(), [(1 << 53) + 1, (1 << 53) + 2]);
    let y = Tensor::from_vec_i64(vec![0], &[1]);
    y.add_(i64::MAX);
    assert_eq!(y.to_vec_i64(), [i64::MAX]);
}
