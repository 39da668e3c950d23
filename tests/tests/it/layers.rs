//! Layer parity with PyTorch: for every layer, output, input gradient, parameter
//! gradients and buffers (running statistics) after a forward, in training and in
//! evaluation mode, against `tests/fixtures/pytorch/layers.py`'s committed outputs.
//! Tolerance: 1e-5 relative (1e-4 for convolutions, attention and whole models).
//! With the `gpu` feature every case runs again on `gpu:0` (model, inputs and fixture
//! tensors moved there), against the same PyTorch outputs.

use std::path::Path;
use std::sync::{Arc, Barrier, Mutex};

use nn_core::module::{ForwardArg, ModuleIo};
use nn_core::{no_grad, DType, Forward, Module, StateDict, Tensor};
use nn_core::{Compute, Layer};
use nn_layers::*;

pub(crate) fn load(name: &str) -> StateDict {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch/layers").join(format!("{name}.safetensors"));
    StateDict::load(&p).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs one fixture case: builds the module, loads `state.*` strictly, and compares
/// everything PyTorch recorded in both modes.
pub(crate) fn check<M: Module>(
    name: &str,
    build: impl Fn() -> M,
    call: impl Fn(&M, &StateDict, &Tensor) -> Tensor,
    tol: f32,
) {
    for device in devices() {
        check_on(device, name, &build, &call, tol);
    }
}

/// The devices every parity case runs on: the CPU, and `gpu:0` with the `gpu` feature (a
/// missing adapter then fails the case, saying why).
pub(crate) fn devices() -> Vec<nn_core::Device> {
    let mut d = vec![nn_core::Device::Cpu];
    if cfg!(feature = "gpu") {
        let gpu = nn_core::Device::Gpu(0);
        gpu.check().unwrap_or_else(|e| panic!("the parity suite with `gpu` needs gpu:0: {e}"));
        d.push(gpu);
    }
    d
}

fn check_on<M: Module>(
    device: nn_core::Device,
    name: &str,
    build: &impl Fn() -> M,
    call: &impl Fn(&M, &StateDict, &Tensor) -> Tensor,
    tol: f32,
) {
    let cpu_f = load(name);
    let f: StateDict = cpu_f.iter().map(|(k, v)| (k.to_string(), v.to_device(device))).collect();
    let state: StateDict =
        cpu_f.iter().filter_map(|(k, v)| k.strip_prefix("state.").map(|k| (k.to_string(), v.clone()))).collect();
    let first_input = ["x", "x1"].iter().find_map(|k| f.get(k)).cloned();
    let name = &format!("{name} on {device}");
    for mode in ["train", "eval"] {
        let mut m = build();
        m.to_device(device);
        m.load_state_dict(&state, true).unwrap_or_else(|e| panic!("{name}: {e}"));
        if mode == "train" {
            m.train()
        } else {
            m.eval()
        }
        // The eval pass runs on a deep copy, which shares no tensor with the layer and
        // computes what PyTorch's layer computes, values and gradients.
        let m = if mode == "eval" {
            let copy = m.deep_copy();
            let ids = |m: &M| -> Vec<nn_core::TensorId> {
                m.parameters().iter().map(|p| p.id()).chain(m.buffers().iter().map(Tensor::id)).collect()
            };
            let original = ids(&m);
            let shared = ids(&copy).iter().any(|id| original.contains(id));
            assert!(!shared && !copy.is_training(), "{name}: deep_copy shares a tensor or lost the mode");
            copy
        } else {
            m
        };
        let x = first_input
            .as_ref()
            .map(|x| x.detach().requires_grad_(true))
            .unwrap_or_else(|| Tensor::zeros(&[0]).to_device(device));
        let y = call(&m, &f, &x);
        let ctx = |what: &str| format!("{name} [{mode}] {what}");
        let expect =
            |k: &str| cpu_f.get(&format!("{mode}.{k}")).unwrap_or_else(|| panic!("{}: missing", ctx(k))).to_vec();
        assert_eq!(y.shape(), f.get(&format!("{mode}.y")).unwrap().shape(), "{}", ctx("output shape"));
        assert_close_ctx(&y.to_vec(), &expect("y"), tol, &ctx("output"));
        (&y * f.get("w").unwrap()).sum().backward();
        if f.get(&format!("{mode}.gx")).is_some() {
            assert_close_ctx(&x.grad().expect("input grad").to_vec(), &expect("gx"), tol, &ctx("input grad"));
        }
        let mut seen = 0;
        for (k, p) in m.named_parameters() {
            if let Some(g) = f.get(&format!("{mode}.grad.{k}")) {
                let mine = p.grad().unwrap_or_else(|| panic!("{}: no gradient", ctx(&k)));
                assert_close_ctx(&mine.to_vec(), &g.to_vec(), tol, &ctx(&format!("grad of {k}")));
                seen += 1;
            }
        }
        let expected_grads = f.keys().filter(|k| k.starts_with(&format!("{mode}.grad."))).count();
        assert_eq!(seen, expected_grads, "{}", ctx("parameter gradients compared"));
        let sd = m.state_dict();
        for (k, v) in f.iter() {
            if let Some(buf) = k.strip_prefix(&format!("{mode}.after.")) {
                let mine = sd.get(buf).unwrap_or_else(|| panic!("{}: no buffer", ctx(buf)));
                assert_close_ctx(&mine.to_vec(), &v.to_vec(), tol, &ctx(&format!("buffer {buf}")));
            }
        }
    }
}

/// `|a - e| <= tol / 10 + tol * |e|` elementwise, with the case named on failure.
pub(crate) fn assert_close_ctx(a: &[f32], e: &[f32], tol: f32, ctx: &str) {
    assert_eq!(a.len(), e.len(), "{ctx}: lengths differ");
    for (i, (x, y)) in a.iter().zip(e).enumerate() {
        assert!((x - y).abs() <= tol * 0.1 + tol * y.abs(), "{ctx}: element {i}: {x} vs PyTorch {y} (rtol {tol})");
    }
}

pub(crate) fn fwd<M: Layer>(m: &M, _: &StateDict, x: &Tensor) -> Tensor {
    m.forward(x)
}

/// Layers with masks run on the input alone (no masks) and return the primary output.
pub(crate) fn fwd_primary<M: Compute>(m: &M, _: &StateDict, x: &Tensor) -> Tensor
where
    for<'a> &'a Tensor: ForwardArg<'a, M::Input>,
{
    m.forward(x).primary().clone()
}

pub(crate) const TIGHT: f32 = 1e-5;
pub(crate) const LOOSE: f32 = 1e-4;

#[test]
fn linear_and_bilinear() {
    check("linear", || Linear::new(5, 4), fwd, TIGHT);
    check("linear_nobias", || Linear::with_bias(5, 4, false), fwd, TIGHT);
    check("bilinear", || Bilinear::new(3, 4, 2), |m, f, x| m.forward((x, f.get("x2").unwrap())), TIGHT);
}

#[test]
fn convolutions() {
    check(
        "conv1d",
        || Conv1d::with_config(3, 4, 3, Conv1dConfig { stride: 2, padding: 1, ..Default::default() }),
        fwd,
        LOOSE,
    );
    check(
        "conv2d",
        || Conv2d::with_config(3, 6, 3, Conv2dConfig { stride: 2, padding: 1, ..Default::default() }),
        fwd,
        LOOSE,
    );
    let cfg = Conv2dConfig { padding: 2, dilation: 2, groups: 2, bias: false, ..Default::default() };
    check("conv2d_groups", || Conv2d::with_config(4, 6, 3, cfg), fwd, LOOSE);
}

#[test]
fn pooling() {
    check("maxpool2d", || MaxPool2d::with_options(3, 2, 1, 1, false), fwd, TIGHT);
    check("maxpool2d_ceil", || MaxPool2d::with_options(2, 2, 0, 1, true), fwd, TIGHT);
    check("avgpool2d", || AvgPool2d::with_options(3, 2, 1, false, true), fwd, TIGHT);
    check("avgpool2d_nopad", || AvgPool2d::with_options(3, 2, 1, true, false), fwd, TIGHT);
    check("adaptiveavgpool2d", || AdaptiveAvgPool2d::new((3, 2)), fwd, TIGHT);
}

#[test]
fn normalisation() {
    check("batchnorm1d", || BatchNorm1d::new(4), fwd, TIGHT);
    let cma = BatchNormConfig { momentum: None, ..Default::default() };
    check("batchnorm1d_cma", || BatchNorm1d::with_config(3, cma), fwd, TIGHT);
    check("batchnorm2d", || BatchNorm2d::new(3), fwd, TIGHT);
    check("layernorm", || LayerNorm::new(6), fwd, TIGHT);
    check("layernorm_2d", || LayerNorm::with_options(&[3, 4], 1e-5, true, true), fwd, TIGHT);
    check("groupnorm", || GroupNorm::new(2, 6), fwd, TIGHT);
}

#[test]
fn embedding_with_padding_idx() {
    check("embedding", || Embedding::with_padding_idx(10, 4, 1), |m, f, _| m.forward(f.get("idx").unwrap()), TIGHT);
}

#[test]
fn activations_and_shape_layers() {
    check("relu", ReLU::new, fwd, TIGHT);
    check("leakyrelu", || LeakyReLU::new(0.2), fwd, TIGHT);
    check("gelu", GELU::new, fwd, TIGHT);
    check("gelu_tanh", || GELU::with_approximate(GeluApproximate::Tanh), fwd, TIGHT);
    check("silu", SiLU::new, fwd, TIGHT);
    check("sigmoid", Sigmoid::new, fwd, TIGHT);
    check("tanh", Tanh::new, fwd, TIGHT);
    check("softmax", || Softmax::new(1), fwd, TIGHT);
    check("logsoftmax", || LogSoftmax::new(-1), fwd, TIGHT);
    check("flatten", Flatten::new, fwd, TIGHT);
    check("identity", Identity::new, fwd, TIGHT);
    check("dropout", || Dropout::new(0.0), fwd, TIGHT);
}

#[test]
fn attention() {
    check("mha", || MultiheadAttention::new(8, 2), fwd_primary, LOOSE);
    check(
        "mha_masked",
        || MultiheadAttention::with_options(8, 2, 0.0, true, true),
        |m, f, x| {
            let mut a = AttentionInput::self_attention(x);
            a.attn_mask = f.get("attn_mask").cloned();
            a.key_padding_mask = f.get("key_padding_mask").cloned();
            let (y, w) = m.forward(&a);
            Tensor::cat(&[&y.reshape(&[y.numel()]), &w.unwrap().reshape(&[2 * 4 * 4])], 0)
        },
        LOOSE,
    );
    let cfg = TransformerEncoderLayerConfig { dim_feedforward: 16, dropout: 0.0, ..Default::default() };
    check("transformer_layer", || TransformerEncoderLayer::with_config(8, 2, cfg), fwd_primary, LOOSE);
    let pre = TransformerEncoderLayerConfig {
        dim_feedforward: 16,
        dropout: 0.0,
        activation: Activation::Gelu,
        batch_first: true,
        norm_first: true,
        ..Default::default()
    };
    check("transformer_layer_prenorm", || TransformerEncoderLayer::with_config(8, 2, pre), fwd_primary, LOOSE);
}

#[test]
fn whole_models_load_pytorch_state_dicts_strictly() {
    let cnn = || {
        Sequential::new()
            .add(Conv2d::with_config(1, 4, 3, Conv2dConfig { padding: 1, ..Default::default() }))
            .add(BatchNorm2d::new(4))
            .add(ReLU::new())
            .add(MaxPool2d::new(2))
            .add(Conv2d::new(4, 8, 3))
            .add(ReLU::new())
            .add(AdaptiveAvgPool2d::new((1, 1)))
            .add(Flatten::new())
            .add(Linear::new(8, 10))
    };
    let keys: Vec<String> = cnn().state_dict().keys().map(String::from).collect();
    assert_eq!(
        &keys[..7],
        ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked"]
    );
    check("model_cnn", cnn, fwd, LOOSE);
    let cfg =
        TransformerEncoderLayerConfig { dim_feedforward: 16, dropout: 0.0, batch_first: true, ..Default::default() };
    check(
        "model_transformer",
        || TransformerEncoder::new(2, || TransformerEncoderLayer::with_config(8, 2, cfg), None),
        fwd_primary,
        LOOSE,
    );
}

#[test]
fn batch_norm_in_training_mode_refuses_batches_without_statistics() {
    let message = |f: &dyn Fn()| {
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("no panic");
        e.downcast_ref::<String>().cloned().unwrap()
    };
    let bn1 = BatchNorm1d::new(3);
    let before: Vec<Vec<f64>> = bn1.state_dict().values().map(|t| t.to_vec_f64()).collect();
    let m = message(&|| drop(bn1.forward(&Tensor::zeros(&[1, 3]))));
    assert!(
        m.starts_with("BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True): training mode needs more than 1 value per channel"),
        "{m}"
    );
    assert!(m.contains("got input of shape [1, 3] (1 per channel): a batch of one value"), "{m}");
    // Nothing was counted or updated by the refused batch.
    let after: Vec<Vec<f64>> = bn1.state_dict().values().map(|t| t.to_vec_f64()).collect();
    assert_eq!(before, after);
}

/// An empty batch in training mode gives an empty output, leaves the running statistics as
/// they are and counts the batch, as PyTorch 2.15 (`BatchNorm1d(3)(torch.zeros(0, 3))`
/// keeps mean 0 and variance 1 and sets `num_batches_tracked` to 1); its gradients are
/// empty or zero.
#[test]
fn batch_norm_in_training_mode_passes_an_empty_batch_through() {
    for (shape, bn) in [
        (vec![0, 8, 4, 4], Box::new(BatchNorm2d::new(8)) as Box<dyn Module>),
        (vec![0, 3], Box::new(BatchNorm1d::new(3))),
    ] {
        let before: Vec<Vec<f64>> = bn.state_dict().values().map(|t| t.to_vec_f64()).collect();
        let x = Tensor::zeros(&shape).requires_grad_(true);
        let y = if shape.len() == 4 {
            bn.as_any().downcast_ref::<BatchNorm2d>().unwrap().forward(&x)
        } else {
            bn.as_any().downcast_ref::<BatchNorm1d>().unwrap().forward(&x)
        };
        assert_eq!(y.shape(), &shape[..]);
        y.sum().backward();
        let sd = bn.state_dict();
        let after: Vec<Vec<f64>> = sd.values().map(|t| t.to_vec_f64()).collect();
        assert_eq!(after[..4], before[..4], "weight, bias and running statistics unchanged");
        assert_eq!(sd.get("num_batches_tracked").unwrap().to_vec_i64(), [1]);
        for (name, p) in bn.named_parameters() {
            assert!(p.grad().unwrap().to_vec().iter().all(|&g| g == 0.0), "{name}");
        }
    }
    // And in eval mode, with the running statistics.
    let mut bn = BatchNorm2d::new(8);
    bn.eval();
    assert_eq!(bn.forward(&Tensor::zeros(&[0, 8, 4, 4])).shape(), &[0, 8, 4, 4]);
}

/// PyTorch's eps checks: positive in training, non-negative in evaluation.
#[test]
fn batch_norm_refuses_an_eps_pytorch_refuses() {
    let x = Tensor::ones(&[4, 3]);
    let cfg = |eps| BatchNormConfig { eps, ..Default::default() };
    for eps in [0.0, -1.0, f64::NAN] {
        let bn = BatchNorm1d::with_config(3, cfg(eps));
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bn.forward(&x))).expect_err("accepted");
        let m = e.downcast_ref::<String>().cloned().unwrap();
        assert!(m.contains("batch_norm: eps must be positive during training, got"), "{m}");
    }
    let mut bn = BatchNorm1d::with_config(3, cfg(0.0));
    bn.eval();
    assert_eq!(bn.forward(&x).shape(), &[4, 3], "eps 0 is allowed in evaluation, as PyTorch");
    let mut bn = BatchNorm1d::with_config(3, cfg(-1.0));
    bn.eval();
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bn.forward(&x))).expect_err("accepted");
    assert!(e.downcast_ref::<String>().unwrap().contains("batch_norm: eps must be non-negative, got -1"));
}

/// Two "processes" as two threads: `all_reduce_sum` hands each thread's tensor to the other
/// at a rendezvous and returns the sum; its backward does the same with the gradients.
struct ThreadPair {
    slots: Mutex<[Option<Tensor>; 2]>,
    barrier: Barrier,
}

/// One thread's end of a [`ThreadPair`].
struct Replica {
    pair: Arc<ThreadPair>,
    rank: usize,
}

impl Replica {
    fn exchange(pair: &ThreadPair, rank: usize, t: &Tensor) -> Tensor {
        pair.slots.lock().unwrap()[rank] = Some(t.detach());
        pair.barrier.wait();
        let sum = {
            let s = pair.slots.lock().unwrap();
            s[0].as_ref().unwrap() + s[1].as_ref().unwrap()
        };
        pair.barrier.wait(); // nobody overwrites a slot before both have read
        sum
    }
}

impl BatchStatsSync for Replica {
    fn all_reduce_sum(&self, t: &Tensor) -> Tensor {
        let out = Replica::exchange(&self.pair, self.rank, t);
        let (pair, rank) = (self.pair.clone(), self.rank);
        nn_core::autograd::custom_op("all_reduce_sum", &[t], &out, move |g| {
            vec![Some(Replica::exchange(&pair, rank, g))]
        })
    }
}

/// A synced batch norm of a half input (a bf16 model, or a bf16 activation into f32
/// parameters) computes in f32 and gives the input's dtype, as the unsynced layer does.
#[test]
fn synced_batch_norm_of_a_half_input_keeps_its_dtype() {
    struct Alone;
    impl BatchStatsSync for Alone {
        fn all_reduce_sum(&self, t: &Tensor) -> Tensor {
            t.clone()
        }
    }
    nn_core::manual_seed(4);
    let x = Tensor::randn(&[6, 3, 2, 2]);
    for half_params in [true, false] {
        let (mut plain, mut synced) = (BatchNorm2d::new(3), BatchNorm2d::new(3));
        if half_params {
            plain.to_dtype(DType::BF16);
            synced.to_dtype(DType::BF16);
        }
        synced.set_stats_sync(Some(Arc::new(Alone)));
        let xh = x.to_dtype(DType::BF16);
        let (want, got) = (plain.forward(&xh), synced.forward(&xh));
        assert_eq!(got.dtype(), DType::BF16, "half parameters: {half_params}");
        let (g, w) = (got.to_vec(), want.to_vec());
        assert!(g.iter().zip(&w).all(|(a, b)| (a - b).abs() <= 0.02 * b.abs().max(1.0)), "{g:?} vs {w:?}");
    }
}

#[test]
fn synced_batch_norm_on_two_half_batches_equals_batch_norm_on_the_whole_batch() {
    nn_core::manual_seed(3);
    let x = Tensor::randn(&[8, 3, 2, 2]).to_dtype(DType::F64);
    let w_out = Tensor::randn(&[8, 3, 2, 2]).to_dtype(DType::F64);
    let build = || {
        let mut bn = BatchNorm2d::new(3);
        bn.to_dtype(DType::F64);
        no_grad(|| bn.weight.as_ref().unwrap().copy_(&Tensor::from_vec(vec![0.5, 1.5, -1.0], &[3])));
        bn
    };
    // One process, the whole batch.
    let bn = build();
    let xf = x.detach().requires_grad_(true);
    (bn.forward(&xf) * &w_out).sum().backward();
    let want_gx = xf.grad().unwrap().to_vec_f64();
    let want_gw = bn.weight.as_ref().unwrap().grad().unwrap().to_vec_f64();
    let want_rv = bn.running_var.as_ref().unwrap().to_vec_f64();
    // Two replicas, four samples each, in two threads.
    let pair = Arc::new(ThreadPair { slots: Mutex::new([None, None]), barrier: Barrier::new(2) });
    let results: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|rank| {
                let (pair, x, w_out) = (pair.clone(), &x, &w_out);
                s.spawn(move || {
                    let mut bn = build();
                    bn.set_stats_sync(Some(Arc::new(Replica { pair, rank })));
                    assert!(bn.is_synced());
                    let xr = x.narrow(0, 4 * rank, 4).contiguous().requires_grad_(true);
                    (bn.forward(&xr) * &w_out.narrow(0, 4 * rank, 4)).sum().backward();
                    let gw = bn.weight.as_ref().unwrap().grad().unwrap().to_vec_f64();
                    (xr.grad().unwrap().to_vec_f64(), gw, bn.running_var.as_ref().unwrap().to_vec_f64())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let gx: Vec<f64> = [results[0].0.clone(), results[1].0.clone()].concat();
    let gw: Vec<f64> = (0..3).map(|c| results[0].1[c] + results[1].1[c]).collect();
    let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(a, b)| (a - b).abs() < 1e-12);
    assert!(close(&gx, &want_gx), "input gradients {gx:?} vs {want_gx:?}");
    assert!(close(&gw, &want_gw), "weight gradients {gw:?} vs {want_gw:?}");
    // Running statistics use the unbiased variance over all 16 values per channel.
    assert!(close(&results[0].2, &want_rv) && close(&results[1].2, &want_rv), "{results:?} vs {want_rv:?}");
}

#[test]
fn upsample_matches_pytorch() {
    // Cases of tests/fixtures/pytorch/upsample.py.
    use nn_core::ops::{InterpolateMode, InterpolateSize};
    let cfg = |size: Option<Vec<usize>>, scale: Option<Vec<f64>>, mode, align_corners| UpsampleConfig {
        size,
        scale_factor: scale,
        mode,
        align_corners,
    };
    check(
        "upsample_nearest",
        || Upsample::new(InterpolateSize::ScaleFactor(vec![2.0]), InterpolateMode::Nearest),
        fwd,
        TIGHT,
    );
    check(
        "upsample_nearest_size",
        || Upsample::with_config(cfg(Some(vec![5, 7]), None, InterpolateMode::Nearest, None)),
        fwd,
        TIGHT,
    );
    let bilinear = || Upsample::with_config(cfg(None, Some(vec![1.5, 2.0]), InterpolateMode::Bilinear, None));
    check("upsample_bilinear", bilinear, fwd, TIGHT);
    let ac = || Upsample::with_config(cfg(Some(vec![5, 6]), None, InterpolateMode::Bilinear, Some(true)));
    check("upsample_bilinear_ac", ac, fwd, TIGHT);
    assert_eq!(ac().to_string(), "Upsample(size=(5, 6), mode='bilinear')");
    let linear = || Upsample::new(InterpolateSize::ScaleFactor(vec![2.5]), InterpolateMode::Linear);
    check("upsample_linear", linear, fwd, TIGHT);
    assert_eq!(linear().to_string(), "Upsample(scale_factor=2.5, mode='linear')");
}
