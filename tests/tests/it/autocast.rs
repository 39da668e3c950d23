//! Autocast against PyTorch 2.15's CPU and CUDA autocast
//! (`tests/fixtures/pytorch/autocast.py`): every call of the fixture, made the same way
//! under nn's autocast, gives the dtype PyTorch gives, for bf16 and f16, on the CPU and (with
//! the `gpu` feature) on `gpu:0`; and the scope's semantics (nesting, `enabled = false`,
//! `no_grad` inside, f32 master weights and gradients).

use std::collections::BTreeMap;
use std::path::Path;

use nn_core::amp::{autocast, autocast_dtype, autocast_enabled, AutocastGuard};
use nn_core::functional::{self as F, Reduction};
use nn_core::ops::{
    AttentionConfig, Conv2dConfig, ConvTranspose1dConfig, ConvTranspose2dConfig, GeluApproximate, InterpolateMode,
    InterpolateSize, NormOrd, PadMode, Pool2dConfig,
};
use nn_core::{no_grad, DType, Device, Tensor};

/// The fixture: per autocast dtype, case name to PyTorch's output dtype.
fn fixture() -> BTreeMap<String, BTreeMap<String, String>> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch/autocast.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let mut v: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text).expect("json");
    v.remove("torch");
    v.into_iter()
        .map(|(k, t)| {
            let t = t
                .as_object()
                .expect("a table")
                .iter()
                .map(|(c, d)| (c.clone(), d.as_str().expect("a dtype").to_string()));
            (k, t.collect())
        })
        .collect()
}

/// PyTorch's name of a dtype.
fn torch_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::BF16 => "bfloat16",
        DType::F16 => "float16",
        DType::I64 => "int64",
        DType::Bool => "bool",
    }
}

/// The fixture's calls in nn on `dev`, `h` the autocast dtype.
fn call(case: &str, h: DType, dev: Device) -> Tensor {
    let r = |s: &[usize]| Tensor::randn(s).to_device(dev);
    let rh = |s: &[usize]| Tensor::randn(s).to_dtype(h).to_device(dev);
    let rd = |s: &[usize]| Tensor::randn(s).to_dtype(DType::F64).to_device(dev);
    let i = Tensor::from_vec_i64(vec![1, 0], &[2]).to_device(dev);
    let mask = Tensor::from_vec_bool(vec![true, false], &[2]).to_device(dev);
    let attn = |causal, q: Tensor, k: Tensor, v: Tensor| {
        let o = AttentionConfig { is_causal: causal, ..Default::default() };
        q.scaled_dot_product_attention(&k, &v, &o)
    };
    let up = |mode| F::interpolate(&rh(&[1, 1, 2, 2]), InterpolateSize::Size(vec![4, 4]), mode, None);
    match case {
        "matmul/ff" => r(&[2, 3]).matmul(&r(&[3, 4])),
        "matmul/hf" => rh(&[2, 3]).matmul(&r(&[3, 4])),
        "matmul/dd" => rd(&[2, 3]).matmul(&rd(&[3, 4])),
        "addmm/fff" => r(&[4]).addmm(&r(&[2, 3]), &r(&[3, 4])),
        "linear/fff" => F::linear(&r(&[2, 3]), &r(&[4, 3]), Some(&r(&[4]))),
        "linear/hff" => F::linear(&rh(&[2, 3]), &r(&[4, 3]), Some(&r(&[4]))),
        "bilinear/ffff" => F::bilinear(&r(&[2, 3]), &r(&[2, 4]), &r(&[5, 3, 4]), Some(&r(&[5]))),
        "bilinear/hhff" => F::bilinear(&rh(&[2, 3]), &rh(&[2, 4]), &r(&[5, 3, 4]), Some(&r(&[5]))),
        "einsum/ff" => F::einsum("ij,jk->ik", &[&r(&[2, 3]), &r(&[3, 4])]),
        "einsum/hh" => F::einsum("ij,jk->ik", &[&rh(&[2, 3]), &rh(&[3, 4])]),
        "einsum_sum/h" => F::einsum("ij->i", &[&rh(&[2, 3])]),
        "einsum_outer/ff" => F::einsum("i,j->ij", &[&r(&[2]), &r(&[3])]),
        "scatter_add/fh" => {
            let idx = Tensor::from_vec_i64(vec![0, 1, 2, 0], &[2, 2]).to_device(dev);
            r(&[2, 3]).scatter_add(1, &idx, &rh(&[2, 2]))
        }
        "outer/hh" => rh(&[2]).outer(&rh(&[3])),
        "conv1d/fff" => r(&[1, 2, 5]).conv1d(&r(&[3, 2, 2]), Some(&r(&[3])), 1, 0, 1, 1),
        "conv2d/fff" => r(&[1, 2, 5, 5]).conv2d(&r(&[3, 2, 2, 2]), Some(&r(&[3])), Conv2dConfig::default()),
        "conv_transpose1d/fff" => {
            r(&[1, 2, 5]).conv_transpose1d(&r(&[2, 3, 2]), Some(&r(&[3])), ConvTranspose1dConfig::default())
        }
        "conv_transpose2d/fff" => {
            r(&[1, 2, 5, 5]).conv_transpose2d(&r(&[2, 3, 2, 2]), Some(&r(&[3])), ConvTranspose2dConfig::default())
        }
        "scaled_dot_product_attention/fff" => attn(false, r(&[1, 2, 3, 4]), r(&[1, 2, 3, 4]), r(&[1, 2, 3, 4])),
        "scaled_dot_product_attention/fff_causal" => attn(true, r(&[1, 2, 3, 4]), r(&[1, 2, 3, 4]), r(&[1, 2, 3, 4])),
        "scaled_dot_product_attention/hhh" => attn(false, rh(&[1, 2, 3, 4]), rh(&[1, 2, 3, 4]), rh(&[1, 2, 3, 4])),
        "nll_loss/h" => F::nll_loss(&rh(&[2, 3]), &i),
        "cross_entropy/h" => F::cross_entropy(&rh(&[2, 3]), &i),
        "cross_entropy/f" => F::cross_entropy(&r(&[2, 3]), &i),
        "mse_loss/hf" => F::mse_loss(&rh(&[2, 3]), &r(&[2, 3]), Reduction::Mean),
        "mse_loss/hh" => F::mse_loss(&rh(&[2, 3]), &rh(&[2, 3]), Reduction::Mean),
        "l1_loss/hh" => F::l1_loss(&rh(&[2, 3]), &rh(&[2, 3]), Reduction::Mean),
        "binary_cross_entropy_with_logits/hh" => {
            F::binary_cross_entropy_with_logits(&rh(&[2, 3]), &rh(&[2, 3]), None, Reduction::Mean)
        }
        "quantile/h" => rh(&[5]).quantile(0.5, None, false),
        "cat/hf" => Tensor::cat(&[&rh(&[2]), &r(&[2])], 0),
        "cat/hh" => Tensor::cat(&[&rh(&[2]), &rh(&[2])], 0),
        "cat/hd" => Tensor::cat(&[&rh(&[2]), &rd(&[2])], 0),
        "stack/hf" => Tensor::stack(&[&rh(&[2]), &r(&[2])], 0),
        "add/hf" => rh(&[2]) + r(&[2]),
        // A 0-dim tensor is outranked by one with dimensions (PyTorch's type promotion).
        "mul/h0f" => rh(&[2]) * r(&[]),
        "add/0hf" => rh(&[]) + r(&[2]),
        "sub/0h0f" => rh(&[]) - r(&[]),
        "maximum/h0d" => rh(&[2]).maximum(&rd(&[])),
        "sub/hh" => rh(&[2]) - rh(&[2]),
        "mul/hh" => rh(&[2]) * rh(&[2]),
        "div/hh" => rh(&[2]) / rh(&[2]),
        "div/hf" => rh(&[2]) / r(&[2]),
        "mul_scalar/h" => rh(&[2]) * 2.0,
        "add_scalar/h" => rh(&[2]) + 2.0,
        "rsub_scalar/h" => 2.0 - rh(&[2]),
        "rdiv_scalar/h" => 2.0 / rh(&[2]),
        "maximum/hh" => rh(&[2]).maximum(&rh(&[2])),
        "minimum/hf" => rh(&[2]).minimum(&r(&[2])),
        "where/hf" => Tensor::where_cond(&mask, &rh(&[2]), &r(&[2])),
        "masked_fill/h" => rh(&[2]).masked_fill(&mask, 0.0),
        "softmax/f" => r(&[2, 3]).softmax(-1),
        "softmax/h" => rh(&[2, 3]).softmax(-1),
        "log_softmax/h" => rh(&[2, 3]).log_softmax(-1),
        "exp/f" => r(&[2]).exp(),
        "exp/h" => rh(&[2]).exp(),
        "exp/d" => rd(&[2]).exp(),
        "log/h" => rh(&[2]).abs().log(),
        "pow/h" => rh(&[2]).powf(2.0),
        "pow/hh" => rh(&[2]).abs().pow(&rh(&[2])),
        "sqrt/h" => rh(&[2]).abs().sqrt(),
        "rsqrt/h" => rh(&[2]).abs().rsqrt(),
        "reciprocal/h" => rh(&[2]).recip(),
        "square/h" => rh(&[2]).square(),
        "abs/h" => rh(&[2]).abs(),
        "neg/h" => -rh(&[2]),
        "sin/h" => rh(&[2]).sin(),
        "cos/h" => rh(&[2]).cos(),
        "erf/h" => rh(&[2]).erf(),
        "erfinv/h" => (rh(&[2]) * 0.1).erfinv(),
        "clamp/h" => rh(&[2]).clamp(-0.5, 0.5),
        "sum/h" => rh(&[2, 3]).sum(),
        "sum/f" => r(&[2, 3]).sum(),
        "sum_dim/h" => rh(&[2, 3]).sum_dim(1, false),
        "mean/h" => rh(&[2, 3]).mean(),
        "mean_dim/h" => rh(&[2, 3]).mean_dim(1, false),
        "var/h" => rh(&[2, 3]).var_dims(&[1], 1, false),
        "max/h" => rh(&[2, 3]).max(),
        "max_dim/h" => rh(&[2, 3]).max_dim(1, false).0,
        "logsumexp/h" => rh(&[2, 3]).logsumexp(1, false),
        "cumsum/h" => rh(&[2, 3]).cumsum(1),
        "cumprod/h" => rh(&[2, 3]).cumprod(1),
        "vector_norm/h" => rh(&[2, 3]).norm(NormOrd::L2),
        "sort/h" => rh(&[3]).sort(0, false).0,
        "topk/h" => rh(&[3]).topk(2, 0, true, true).0,
        "relu/h" => rh(&[2]).relu(),
        "gelu/h" => rh(&[2]).gelu(),
        "gelu_tanh/h" => rh(&[2]).gelu_with(GeluApproximate::Tanh),
        "tanh/h" => rh(&[2]).tanh(),
        "sigmoid/h" => rh(&[2]).sigmoid(),
        "silu/h" => rh(&[2]).silu(),
        "leaky_relu/h" => rh(&[2]).leaky_relu(0.1),
        "softplus/h" => rh(&[2]).softplus(1.0, 20.0),
        "layer_norm/hff" => rh(&[2, 3]).layer_norm(&[3], Some(&r(&[3])), Some(&r(&[3])), 1e-5),
        "layer_norm/fff" => r(&[2, 3]).layer_norm(&[3], Some(&r(&[3])), Some(&r(&[3])), 1e-5),
        "rms_norm/hf" => rh(&[2, 3]).rms_norm(&[3], Some(&r(&[3])), None),
        "group_norm/hff" => F::group_norm(&rh(&[2, 4, 3]), 2, Some(&r(&[4])), Some(&r(&[4])), 1e-5),
        "batch_norm/hffff" => {
            let (rm, rv) = (r(&[3]), r(&[3]).abs());
            rh(&[2, 3, 4]).batch_norm(Some(&rm), Some(&rv), Some(&r(&[3])), Some(&r(&[3])), true, 0.1, 1e-5)
        }
        "max_pool2d/h" => rh(&[1, 1, 4, 4]).max_pool2d(Pool2dConfig::new(2)),
        "avg_pool2d/h" => rh(&[1, 1, 4, 4]).avg_pool2d(Pool2dConfig::new(2), true),
        "adaptive_avg_pool2d/h" => rh(&[1, 1, 4, 4]).adaptive_avg_pool2d((2, 2)),
        "pad/h" => rh(&[1, 2, 3]).pad(&[1, 1], PadMode::Constant, 0.0),
        "pad_reflect/h" => rh(&[1, 2, 3]).pad(&[1, 1], PadMode::Reflect, 0.0),
        "pad_replicate/h" => rh(&[1, 2, 3, 3]).pad(&[1, 1, 1, 1], PadMode::Replicate, 0.0),
        "pad_circular/h" => rh(&[1, 2, 3]).pad(&[1, 1], PadMode::Circular, 0.0),
        "pad_reflect3d/h" => rh(&[1, 1, 3, 3, 3]).pad(&[1; 6], PadMode::Reflect, 0.0),
        "pad_replicate3d/h" => rh(&[1, 1, 3, 3, 3]).pad(&[1; 6], PadMode::Replicate, 0.0),
        "interpolate_nearest/h" => up(InterpolateMode::Nearest),
        "interpolate_bilinear/h" => up(InterpolateMode::Bilinear),
        "embedding/f" => F::embedding(&i, &r(&[3, 4])),
        "index_select/h" => rh(&[3, 2]).index_select(0, &i),
        "gather/h" => rh(&[2, 2]).gather(1, &i.reshape(&[2, 1])),
        "tril/h" => rh(&[3, 3]).tril(0),
        "flip/h" => rh(&[3]).flip(&[0]),
        "dropout/h" => rh(&[2]).dropout(0.5, true),
        other => panic!("no nn call for the fixture case {other}: add one"),
    }
}

/// Runs every case of the fixture's table `name` on `dev` under nn's autocast and
/// compares each output dtype with PyTorch's. A case PyTorch refuses must be refused by nn
/// too, or be listed in `refused` with the dtype nn gives instead.
fn check_table(name: &str, dev: Device, refused: &[(&str, DType)]) {
    let fixture = fixture();
    let table = fixture.get(name).unwrap_or_else(|| panic!("no table {name} in the fixture"));
    let h = if name.ends_with("bf16") { DType::BF16 } else { DType::F16 };
    assert!(table.len() >= 100, "{name}: {} cases", table.len());
    let mut wrong = Vec::new();
    for (case, want) in table {
        let run = std::panic::catch_unwind(|| autocast(dev, h, || call(case, h, dev)).dtype());
        let Ok(got) = run.map(torch_name) else {
            // Refused by both is agreement.
            if !want.starts_with("error: ") {
                wrong.push(format!("{case}: nn panicked"));
            }
            continue;
        };
        let want = match want.strip_prefix("error: ") {
            Some(why) => match refused.iter().find(|(c, _)| c == case) {
                Some((_, instead)) => torch_name(*instead),
                None => panic!("{name}: PyTorch refuses {case} ({why}) and nn does not list it"),
            },
            None => want.as_str(),
        };
        if got != want {
            wrong.push(format!("{case}: nn {got}, PyTorch {want}"));
        }
    }
    assert!(wrong.is_empty(), "under {name} autocast on {dev}:\n{}", wrong.join("\n"));
}

#[test]
fn every_op_gives_pytorchs_dtype_under_bf16_and_f16_autocast() {
    let keys: Vec<String> = fixture().keys().cloned().collect();
    assert_eq!(keys, ["bf16", "f16", "gpu_bf16", "gpu_f16"]);
    // PyTorch's CPU autocast refuses a bilinear of half inputs and f32 weights; nn promotes
    // them, as PyTorch's CUDA autocast does.
    let refused = [("bilinear/hhff", DType::F32)];
    check_table("bf16", Device::Cpu, &refused);
    check_table("f16", Device::Cpu, &refused);
}

/// The CUDA tables on `gpu:0`. PyTorch's CUDA `quantile` refuses half inputs; nn keeps
/// the CPU list's `f32` policy for it on the GPU too, so it computes in `f32` instead.
#[cfg(feature = "gpu")]
#[test]
fn every_op_gives_pytorchs_cuda_dtype_under_gpu_autocast() {
    let refused = [("quantile/h", DType::F32)];
    check_table("gpu_bf16", Device::Gpu(0), &refused);
    check_table("gpu_f16", Device::Gpu(0), &refused);
}

/// Autocast casts the ops a user calls, not the ops an op is built from: `bilinear` (not
/// on PyTorch's lists) is a matrix product and a sum inside, and under autocast it gives
/// its f32 values bit for bit, as PyTorch's does; the same product called directly is
/// cast.
#[test]
fn the_parts_of_an_op_are_not_cast() {
    let (x1, x2, w, b) =
        (Tensor::randn(&[3, 4]), Tensor::randn(&[3, 5]), Tensor::randn(&[2, 4, 5]), Tensor::randn(&[2]));
    let want = F::bilinear(&x1, &x2, &w, Some(&b));
    let got = autocast(Device::Cpu, DType::BF16, || F::bilinear(&x1, &x2, &w, Some(&b)));
    assert_eq!(got.dtype(), DType::F32);
    assert_eq!(got.to_vec(), want.to_vec());
    let direct =
        autocast(Device::Cpu, DType::BF16, || x1.matmul(&w.reshape(&[2, 4, 5]).permute(&[1, 0, 2]).reshape(&[4, 10])));
    assert_eq!(direct.dtype(), DType::BF16);
}

#[test]
fn outside_autocast_nothing_is_cast() {
    let y = F::linear(&Tensor::randn(&[2, 3]), &Tensor::randn(&[4, 3]), None);
    assert_eq!(y.dtype(), DType::F32);
    // Mixed dtypes promote as PyTorch's type promotion does (the widest float), and a
    // matrix product of two dtypes stays an error, as PyTorch's.
    assert_eq!((Tensor::randn(&[2]).to_dtype(DType::BF16) + Tensor::randn(&[2])).dtype(), DType::F32);
    let r = std::panic::catch_unwind(|| Tensor::randn(&[2, 2]).to_dtype(DType::BF16).matmul(&Tensor::randn(&[2, 2])));
    assert!(r.is_err());
}

#[test]
fn scopes_nest_disable_and_restore() {
    let (a, b) = (Tensor::randn(&[2, 2]), Tensor::randn(&[2, 2]));
    autocast(Device::Cpu, DType::BF16, || {
        assert_eq!(a.matmul(&b).dtype(), DType::BF16);
        autocast(Device::Cpu, DType::F16, || assert_eq!(a.matmul(&b).dtype(), DType::F16));
        assert_eq!(a.matmul(&b).dtype(), DType::BF16, "the outer scope is back");
        autocast_enabled(Device::Cpu, DType::BF16, false, || {
            assert_eq!(autocast_dtype(Device::Cpu), None);
            assert_eq!(a.matmul(&b).dtype(), DType::F32);
        });
        // no_grad inside autocast still casts.
        assert_eq!(no_grad(|| a.matmul(&b)).dtype(), DType::BF16);
    });
    assert_eq!(autocast_dtype(Device::Cpu), None);
    // A panic inside the scope restores the state.
    let _ = std::panic::catch_unwind(|| autocast(Device::Cpu, DType::BF16, || panic!("inside")));
    assert_eq!(autocast_dtype(Device::Cpu), None);
    // Other threads are not affected.
    let _g = AutocastGuard::new(Device::Cpu, DType::BF16);
    let other = std::thread::spawn(move || Tensor::randn(&[2, 2]).matmul(&Tensor::randn(&[2, 2])).dtype());
    assert_eq!(other.join().expect("thread"), DType::F32);
}

/// A backward pass does not autocast (gradients keep their forward's dtypes), but a scope
/// a hook opens during it casts the hook's own ops, as in PyTorch, rather than report
/// itself on (`autocast_dtype`) and cast nothing.
#[test]
fn an_autocast_scope_opened_in_a_backward_hook_casts_there() {
    let w = Tensor::randn(&[2, 2]).requires_grad_(true);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let _h = w.register_post_accumulate_grad_hook(move |t| {
        let g = t.grad().expect("accumulated");
        let plain = g.matmul(&g).dtype();
        let _amp = AutocastGuard::new(Device::Cpu, DType::BF16);
        log.lock().unwrap().extend([plain, g.matmul(&g).dtype()]);
    });
    // backward inside the scope: the pass itself is still not cast (`plain` is f32).
    autocast(Device::Cpu, DType::BF16, || w.matmul(&w).sum().backward());
    assert_eq!(*seen.lock().unwrap(), vec![DType::F32, DType::BF16]);
    assert_eq!(w.grad().unwrap().dtype(), DType::F32);
}

/// Two guards dropped in the order they were made would leave the outer guard's dtype on
/// for the rest of the thread: the drop that would do it panics instead. (A guard moved to
/// another thread is a compile error: the guard is not `Send`.)
#[test]
fn autocast_guards_dropped_out_of_order_panic() {
    let outer = AutocastGuard::new(Device::Cpu, DType::BF16);
    let inner = AutocastGuard::new(Device::Cpu, DType::F16);
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(outer))).unwrap_err();
    let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("CPU autocast guards dropped out of order"), "{msg}");
    drop(inner);
    // With the panic caught, the thread is as before the outer guard once the inner one
    // drops (not left in bf16 autocast).
    assert_eq!(autocast_dtype(Device::Cpu), None);
    // The CPU's and the GPU's scopes nest separately, as their states are separate.
    let cpu = AutocastGuard::new(Device::Cpu, DType::BF16);
    let off = AutocastGuard::with_enabled(Device::Cpu, DType::BF16, false);
    drop(off);
    drop(cpu);
}

#[test]
fn master_weights_stay_f32_and_get_f32_gradients() {
    nn_core::manual_seed(7);
    let w = Tensor::randn(&[4, 3]).requires_grad_(true);
    let b = Tensor::randn(&[4]).requires_grad_(true);
    let x = Tensor::randn(&[5, 3]);
    let t = Tensor::from_vec_i64(vec![0, 1, 2, 3, 0], &[5]);
    let loss = autocast(Device::Cpu, DType::BF16, || {
        let logits = F::linear(&x, &w, Some(&b));
        assert_eq!(logits.dtype(), DType::BF16);
        // (No ReLU here: a logit near 0 can change sides when rounded to bf16, and its
        // gradient with it.)
        let loss = F::cross_entropy(&logits, &t);
        assert_eq!(loss.dtype(), DType::F32);
        loss
    });
    loss.backward();
    let (gw, gb) = (w.grad().expect("a gradient"), b.grad().expect("a gradient"));
    assert_eq!((gw.dtype(), gb.dtype()), (DType::F32, DType::F32));
    // Close to the f32 gradient (bf16 has 8 bits of mantissa).
    let w32 = w.detach().requires_grad_(true);
    F::cross_entropy(&F::linear(&x, &w32, Some(&b.detach())), &t).backward();
    let (g16, g32) = (gw.to_vec(), w32.grad().expect("a gradient").to_vec());
    let scale = g32.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (a, e) in g16.iter().zip(&g32) {
        assert!((a - e).abs() <= 0.03 * scale, "{a} vs {e}");
    }
}

#[test]
#[should_panic(expected = "autocast: the dtype must be bf16 or f16, got f32")]
fn an_autocast_dtype_that_is_not_half_is_refused() {
    autocast(Device::Cpu, DType::F32, || ());
}

/// A GPU that cannot be opened (here: a build without the `gpu` feature, or an ordinal
/// past the adapters) is refused when the scope opens, naming it; so is the meta device.
#[test]
fn autocast_on_a_device_that_cannot_compute_is_refused_by_name() {
    let msg = |f: fn()| {
        let e = std::panic::catch_unwind(f).expect_err("refused");
        e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
    };
    let gpu = msg(|| drop(AutocastGuard::new(Device::Gpu(99), DType::F16)));
    assert!(gpu.starts_with("autocast on gpu:99: "), "{gpu}");
    let meta = msg(|| drop(AutocastGuard::new(Device::Meta, DType::BF16)));
    assert!(meta.contains("autocast: the meta device computes nothing"), "{meta}");
    assert_eq!(autocast_dtype(Device::Gpu(0)), None);
}

/// A CNN (convolution, batch norm with f32 statistics, max pooling, linear) and a
/// Transformer encoder layer (attention, layer norm, GELU) train under both half dtypes:
/// the loss is f32 and close to the f32 model's, every gradient is f32.
#[test]
fn a_cnn_and_a_transformer_layer_step_under_autocast() {
    use nn_core::{manual_seed, Forward, Module};
    use nn_layers::{
        BatchNorm2d, Conv2d, Conv2dConfig as LayerConv, Flatten, Linear, MaxPool2d, ReLU, Sequential,
        TransformerEncoderLayer, TransformerEncoderLayerConfig,
    };
    manual_seed(0);
    let cnn = Sequential::new()
        .add(Conv2d::with_config(1, 4, 3, LayerConv { padding: 1, ..Default::default() }))
        .add(BatchNorm2d::new(4))
        .add(ReLU::new())
        .add(MaxPool2d::new(2))
        .add(Flatten::new())
        .add(Linear::new(4 * 4 * 4, 3));
    let x = Tensor::randn(&[6, 1, 8, 8]);
    let y = Tensor::from_vec_i64(vec![0, 1, 2, 0, 1, 2], &[6]);
    let want = F::cross_entropy(&cnn.forward(&x), &y).item();
    for h in [DType::BF16, DType::F16] {
        cnn.zero_grad();
        let loss = autocast(Device::Cpu, h, || F::cross_entropy(&cnn.forward(&x), &y));
        assert_eq!(loss.dtype(), DType::F32);
        assert!((loss.item() - want).abs() <= 0.02 * want.abs() + 0.01, "{h}: {} vs {want}", loss.item());
        loss.backward();
        for (name, p) in cnn.named_parameters() {
            assert_eq!(p.grad().unwrap_or_else(|| panic!("{name}: no gradient")).dtype(), DType::F32, "{name}");
        }
    }
    let c =
        TransformerEncoderLayerConfig { dim_feedforward: 32, dropout: 0.0, batch_first: true, ..Default::default() };
    let layer = TransformerEncoderLayer::with_config(16, 2, c);
    let x = Tensor::randn(&[2, 5, 16]);
    let want = layer.forward(&x).square().mean().item();
    for h in [DType::BF16, DType::F16] {
        layer.zero_grad();
        let loss = autocast(Device::Cpu, h, || layer.forward(&x).square().mean());
        assert!((loss.to_dtype(DType::F32).item() - want).abs() <= 0.03 * want.abs(), "{h}");
        loss.backward();
        for (name, p) in layer.named_parameters() {
            assert_eq!(p.grad().unwrap_or_else(|| panic!("{name}: no gradient")).dtype(), DType::F32, "{name}");
        }
    }
}

/// bf16 matrix products (the AVX512-BF16 kernel where the CPU has it) equal the f32
/// products of the same bf16 values rounded once, for every layout a model makes:
/// transposed views, batches, a broadcast operand, odd inner sizes, `addmm` with a bias.
#[test]
fn bf16_products_are_the_f32_products_of_the_same_values() {
    let bf = |t: Tensor| t.to_dtype(DType::BF16);
    let close = |got: &Tensor, want: &Tensor, what: &str| {
        assert_eq!(got.dtype(), DType::BF16, "{what}");
        let want = want.to_dtype(DType::BF16).to_vec();
        for (i, (g, w)) in got.to_vec().iter().zip(&want).enumerate() {
            // Sums in another order, rounded to bf16: within 2 bf16 ulps (2^-7 relative).
            assert!((g - w).abs() <= w.abs() / 64.0 + 1e-6, "{what}[{i}]: {g} vs {w}");
        }
    };
    for &(m, k, n) in &[(5, 3, 4), (13, 7, 33), (40, 65, 70), (2, 1, 3)] {
        let (a, b) = (bf(Tensor::randn(&[m, k])), bf(Tensor::randn(&[k, n])));
        let f = |t: &Tensor| t.to_dtype(DType::F32);
        close(&a.matmul(&b), &f(&a).matmul(&f(&b)), "a b");
        let bt = bf(Tensor::randn(&[n, k]));
        close(&a.matmul(&bt.t()), &f(&a).matmul(&f(&bt).t()), "a bt^T");
        let at = bf(Tensor::randn(&[k, m]));
        close(&at.t().matmul(&b), &f(&at).t().matmul(&f(&b)), "at^T b");
        let bias = bf(Tensor::randn(&[n]));
        close(&F::linear(&a, &bt, Some(&bias)), &F::linear(&f(&a), &f(&bt), Some(&f(&bias))), "linear");
        let (ba, bb) = (bf(Tensor::randn(&[3, m, k])), bf(Tensor::randn(&[k, n])));
        close(&ba.matmul(&bb), &f(&ba).matmul(&f(&bb)), "batched, broadcast b");
        let (qa, qb) = (bf(Tensor::randn(&[2, 3, m, k])), bf(Tensor::randn(&[2, 3, n, k])));
        close(&qa.matmul(&qb.transpose(-1, -2)), &f(&qa).matmul(&f(&qb).transpose(-1, -2)), "batched, transposed b");
    }
}
