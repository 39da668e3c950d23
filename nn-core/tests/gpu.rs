//! The GPU device against the CPU, op by op (cargo feature `gpu`; on machines without a
//! GPU, Mesa's software Vulkan: `apt-get install mesa-vulkan-drivers`). Every test needs
//! `gpu:0` and fails, saying why, when it cannot be opened: a suite that was asked for
//! never passes by skipping.
#![cfg(feature = "gpu")]
// One-element input lists read best as `&[x.clone()]`; the op table is a plain list of boxed closures.
#![allow(clippy::cloned_ref_to_slice_refs, clippy::type_complexity)]

use nn_core::{gpu, DType, Device, Tensor};

const GPU: Device = Device::Gpu(0);

fn require_gpu() {
    if let Err(e) = GPU.check() {
        panic!("the GPU suite needs gpu:0: {e}");
    }
}

/// The suite's lock: tests seed the global generator and compare what it draws on both
/// devices, so they run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    require_gpu();
    guard
}

#[test]
fn moves_round_trip_every_dtype_bit_for_bit() {
    let _serial = serial();
    require_gpu();
    eprintln!("gpu:0 is {}", gpu::adapter_info(0).unwrap());
    let f = Tensor::from_vec(vec![1.5, -0.0, f32::NAN, f32::INFINITY, 3.25e-39], &[5]);
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::Bool] {
        let x = f.to_dtype(dtype);
        let g = x.to_device(GPU);
        assert_eq!(g.device(), GPU);
        let back = g.to_device(Device::Cpu);
        assert_eq!(format!("{:?}", back.to_vec_f64()), format!("{:?}", x.to_vec_f64()), "{dtype}");
    }
}

/// Worst `|gpu - cpu| / max(|cpu|, 1)` over two tensors of one shape.
fn worst(gpu: &Tensor, cpu: &Tensor) -> f64 {
    assert_eq!(gpu.shape(), cpu.shape());
    let (g, c) = (gpu.to_vec_f64(), cpu.to_vec_f64());
    g.iter()
        .zip(&c)
        .map(|(a, b)| if a.is_nan() && b.is_nan() { 0.0 } else { (a - b).abs() / b.abs().max(1.0) })
        .fold(0.0, |m, e| if e.is_nan() { f64::INFINITY } else { m.max(e) })
}

/// Runs `f` on CPU leaves and on their GPU copies, then the backward of a random
/// weighting of the output on both; asserts the outputs and every float input's gradient
/// agree within `tol` and that the GPU results stay on the GPU. Returns the worst error.
fn check(name: &str, inputs: &[Tensor], tol: f64, f: impl Fn(&[Tensor]) -> Tensor) -> f64 {
    require_gpu();
    let leaf = |t: &Tensor, d: Device| {
        let t = t.detach().to_device(d);
        if t.dtype().is_float() {
            t.requires_grad_(true)
        } else {
            t
        }
    };
    let cpu_in: Vec<Tensor> = inputs.iter().map(|t| leaf(t, Device::Cpu)).collect();
    let gpu_in: Vec<Tensor> = inputs.iter().map(|t| leaf(t, GPU)).collect();
    let before = gpu::stats(0);
    let (yc, yg) = (f(&cpu_in), f(&gpu_in));
    assert_eq!(yg.device(), GPU, "{name}: the output left the GPU");
    let mut err = worst(&yg, &yc);
    if yc.dtype().is_float() && yc.requires_grad() {
        let w = Tensor::randn(yc.shape()).to_dtype(yc.dtype());
        (&yc * &w).sum().backward();
        (&yg * &w.to_device(GPU)).sum().backward();
        for (i, (c, g)) in cpu_in.iter().zip(&gpu_in).enumerate() {
            if let Some(gc) = c.grad() {
                let gg = g.grad().unwrap_or_else(|| panic!("{name}: input {i} has a CPU gradient and no GPU one"));
                assert_eq!(gg.device(), GPU, "{name}: the gradient of input {i} left the GPU");
                err = err.max(worst(&gg, &gc));
            }
        }
    }
    let after = gpu::stats(0);
    let host: Vec<String> = after
        .host_path
        .iter()
        .filter_map(|(k, n)| {
            let was = before.host_path.iter().find(|(b, _)| b == k).map_or(0, |(_, m)| *m);
            (*n > was).then(|| format!("{k} x{}", n - was))
        })
        .collect();
    eprintln!("{name:<24} worst error {err:.2e}  host path: {host:?}");
    // Every method that took the host path (in this op or in another test meanwhile) is
    // one the backend names: a new fallback fails here until it is listed.
    let unnamed: Vec<&str> =
        after.host_path.iter().map(|(k, _)| k.as_str()).filter(|k| !gpu::HOST_PATH.contains(k)).collect();
    assert!(unnamed.is_empty(), "{name}: host-path methods missing from nn_core::gpu::HOST_PATH: {unnamed:?}");
    assert!(err <= tol, "{name}: GPU and CPU differ by {err:e} (tolerance {tol:e})");
    err
}

fn randn(shape: &[usize]) -> Tensor {
    Tensor::randn(shape)
}

fn positive(shape: &[usize]) -> Tensor {
    Tensor::rand(shape) + 0.5
}

const F32: f64 = 1e-5;

#[test]
fn elementwise_ops_match_the_cpu() {
    let _serial = serial();
    nn_core::manual_seed(1);
    let x = randn(&[7, 33]);
    let unary: Vec<(&str, Box<dyn Fn(&Tensor) -> Tensor>)> = vec![
        ("neg", Box::new(|t| t.neg())),
        ("exp", Box::new(|t| t.exp())),
        ("abs", Box::new(|t| t.abs())),
        ("sin", Box::new(|t| t.sin())),
        ("cos", Box::new(|t| t.cos())),
        ("square", Box::new(|t| t.square())),
        ("powf 3", Box::new(|t| t.powf(3.0))),
        ("powf 2", Box::new(|t| t.powf(2.0))),
        ("affine", Box::new(|t| t.affine(0.5, -2.0))),
        ("scalar ops", Box::new(|t| (t * 3.0 - 1.0) / 4.0)),
        ("clamp", Box::new(|t| t.clamp(-0.5, 0.7))),
        ("relu", Box::new(|t| t.relu())),
        ("leaky_relu", Box::new(|t| t.leaky_relu(0.1))),
        ("sigmoid", Box::new(|t| t.sigmoid())),
        ("tanh", Box::new(|t| t.tanh())),
        ("silu", Box::new(|t| t.silu())),
        ("gelu", Box::new(|t| t.gelu())),
        ("gelu tanh", Box::new(|t| t.gelu_with(nn_core::ops::GeluApproximate::Tanh))),
        ("softplus", Box::new(|t| t.softplus(1.0, 20.0))),
        // beta 2 and a threshold inside the inputs' range: both branches.
        ("softplus beta", Box::new(|t| (t * 4.0).softplus(2.0, 1.5))),
    ];
    for (name, f) in &unary {
        check(name, &[x.clone()], F32, |t| f(&t[0]));
        // Through a strided view as well.
        check(&format!("{name} (transposed)"), &[x.clone()], F32, |t| f(&t[0].t()));
    }
    let p = positive(&[5, 6]);
    check("log", &[p.clone()], F32, |t| t[0].log());
    check("sqrt", &[p.clone()], F32, |t| t[0].sqrt());
    check("recip", &[p.clone()], F32, |t| t[0].recip());
    check("powf 0.5", &[p.clone()], F32, |t| t[0].powf(0.5));
    check("rsqrt", &[p.clone()], F32, |t| t[0].rsqrt());
    check("rms_norm", &[x.clone(), randn(&[33])], F32, |t| t[0].rms_norm(&[33], Some(&t[1]), None));
    // Broadcasting binary ops.
    let (a, b) = (randn(&[4, 1, 6]), randn(&[3, 1]));
    check("add", &[a.clone(), b.clone()], F32, |t| &t[0] + &t[1]);
    check("sub", &[a.clone(), b.clone()], F32, |t| &t[0] - &t[1]);
    check("mul", &[a.clone(), b.clone()], F32, |t| &t[0] * &t[1]);
    check("div", &[a.clone(), positive(&[3, 1])], F32, |t| &t[0] / &t[1]);
    check("pow", &[positive(&[4, 6]), randn(&[6])], F32, |t| t[0].pow(&t[1]));
    check("maximum", &[a.clone(), b.clone()], F32, |t| t[0].maximum(&t[1]));
    check("minimum", &[a.clone(), b.clone()], F32, |t| t[0].minimum(&t[1]));
    check("where", &[a.clone(), b.clone()], F32, |t| Tensor::where_cond(&t[0].gt(&t[1]), &t[0], &t[1]));
    check("masked_fill", &[a.clone()], F32, |t| {
        t[0].masked_fill(&t[0].lt(&Tensor::zeros(&[1]).to_device(t[0].device())), -1.0)
    });
}

#[test]
fn f64_arithmetic_matches_the_cpu() {
    let _serial = serial();
    nn_core::manual_seed(2);
    let a = randn(&[5, 4]).to_dtype(DType::F64);
    let b = randn(&[4]).to_dtype(DType::F64);
    check("f64 mul add", &[a.clone(), b.clone()], 1e-12, |t| &(&t[0] * &t[1]) + &t[1]);
    check("f64 sqrt", &[a.abs() + 0.5], 1e-12, |t| t[0].sqrt());
    check("f64 exp (host path)", &[a.clone()], 1e-12, |t| t[0].exp());
    check("f64 matmul", &[a.clone(), randn(&[4, 3]).to_dtype(DType::F64)], 1e-12, |t| t[0].matmul(&t[1]));
}

/// Type promotion and integer arithmetic (the integer ops run on host copies, counted
/// under the listed `i64`): the same dtypes and values on both devices.
#[test]
fn promotion_and_integer_arithmetic_match_the_cpu() {
    let _serial = serial();
    let ids = Tensor::from_vec_i64(vec![1, -2, i64::MAX], &[3]);
    let mask = Tensor::from_vec_bool(vec![true, false, true], &[3]);
    let x = Tensor::from_vec(vec![0.5, 1.5, -2.0], &[3]);
    let cases: Vec<(&str, Box<dyn Fn(&Tensor, &Tensor, &Tensor) -> Tensor>)> = vec![
        ("ids + 1", Box::new(|i, _, _| i + 1)),
        ("ids * ids", Box::new(|i, _, _| i * i)),
        ("ids - mask", Box::new(|i, m, _| i - m)),
        ("maximum", Box::new(|i, _, _| i.maximum(&(i * -1)))),
        ("ids / 2", Box::new(|i, _, _| i / 2)),
        ("x * mask", Box::new(|_, m, x| x * m)),
        ("x + ids", Box::new(|i, _, x| x + &i.to_dtype(DType::F64))),
        ("ids == x", Box::new(|i, _, x| i.eq(x))),
    ];
    for (name, f) in cases {
        let cpu = f(&ids, &mask, &x);
        let gpu = f(&ids.to_device(GPU), &mask.to_device(GPU), &x.to_device(GPU));
        assert_eq!((gpu.device(), gpu.dtype()), (GPU, cpu.dtype()), "{name}");
        let gpu = gpu.to_device(Device::Cpu);
        assert_eq!(format!("{:?}", gpu.to_vec_f64()), format!("{:?}", cpu.to_vec_f64()), "{name}");
    }
    let host = gpu::stats(0).host_path;
    let unnamed: Vec<&str> = host.iter().map(|(k, _)| k.as_str()).filter(|k| !gpu::HOST_PATH.contains(k)).collect();
    assert!(unnamed.is_empty(), "host-path methods missing from nn_core::gpu::HOST_PATH: {unnamed:?}");
    assert!(host.iter().any(|(k, n)| k == "i64" && *n > 0), "integer arithmetic not counted under i64: {host:?}");
}

#[test]
fn reductions_and_softmax_match_the_cpu() {
    let _serial = serial();
    nn_core::manual_seed(3);
    let x = randn(&[6, 300, 5]);
    check("sum", &[x.clone()], F32, |t| t[0].sum());
    check("sum_dim 1", &[x.clone()], F32, |t| t[0].sum_dim(1, true));
    check("sum_dims 0 2", &[x.clone()], F32, |t| t[0].sum_dims(&[0, 2], false));
    check("mean_dim", &[x.clone()], F32, |t| t[0].mean_dim(-1, false));
    check("var", &[x.clone()], F32, |t| t[0].var_dims(&[1], 1, false));
    check("max_dim", &[x.clone()], F32, |t| t[0].max_dim(1, false).0);
    check("argmax", &[x.clone()], 0.0, |t| t[0].argmax(1, false));
    check("softmax last", &[x.clone()], F32, |t| t[0].softmax(-1));
    check("softmax middle", &[x.clone()], F32, |t| t[0].softmax(1));
    check("log_softmax", &[x.clone()], F32, |t| t[0].log_softmax(1));
    check("logsumexp", &[x.clone()], F32, |t| t[0].logsumexp(1, false));
}

#[test]
fn matrix_products_match_the_cpu() {
    let _serial = serial();
    nn_core::manual_seed(4);
    check("matmul", &[randn(&[70, 45]), randn(&[45, 130])], F32, |t| t[0].matmul(&t[1]));
    check("matmul transposed", &[randn(&[45, 70]), randn(&[130, 45])], F32, |t| t[0].t().matmul(&t[1].t()));
    check("batched broadcast", &[randn(&[2, 3, 17, 9]), randn(&[3, 9, 11])], F32, |t| t[0].matmul(&t[1]));
    check("vector", &[randn(&[9]), randn(&[9, 5])], F32, |t| t[0].matmul(&t[1]));
    check("addmm", &[randn(&[13]), randn(&[8, 21]), randn(&[21, 13])], F32, |t| t[0].addmm(&t[1], &t[2]));
    check("addmm beta alpha", &[randn(&[8, 13]), randn(&[8, 21]), randn(&[21, 13])], F32, |t| {
        t[0].addmm_with(&t[1], &t[2], 0.5, -2.0)
    });
}

#[test]
fn layers_ops_match_the_cpu() {
    let _serial = serial();
    use nn_core::backend::{Conv2dConfig, Pool2dConfig};
    nn_core::manual_seed(5);
    let img = randn(&[2, 4, 9, 9]);
    let conv = Conv2dConfig { stride: (2, 1), padding: (1, 2), dilation: (1, 2), groups: 2 };
    check("conv2d", &[img.clone(), randn(&[6, 2, 3, 3]), randn(&[6])], F32, |t| t[0].conv2d(&t[1], Some(&t[2]), conv));
    check("conv1d", &[randn(&[2, 4, 15]), randn(&[6, 4, 3])], F32, |t| t[0].conv1d(&t[1], None, 2, 1, 1, 1));
    let tconv = nn_core::ops::ConvTranspose2dConfig {
        stride: (2, 1),
        padding: (1, 0),
        output_padding: (1, 0),
        dilation: (1, 2),
        groups: 2,
    };
    check("conv_transpose2d", &[img.clone(), randn(&[4, 3, 3, 2]), randn(&[6])], F32, |t| {
        t[0].conv_transpose2d(&t[1], Some(&t[2]), tconv)
    });
    let t1 = nn_core::ops::ConvTranspose1dConfig { stride: 2, padding: 1, output_padding: 1, ..Default::default() };
    check("conv_transpose1d", &[randn(&[2, 4, 7]), randn(&[4, 3, 3])], F32, |t| t[0].conv_transpose1d(&t[1], None, t1));
    let pool = Pool2dConfig { kernel: (3, 3), stride: (2, 2), padding: (1, 1), dilation: (1, 1), ceil_mode: false };
    check("max_pool2d", &[img.clone()], F32, |t| t[0].max_pool2d(pool));
    check("avg_pool2d", &[img.clone()], F32, |t| t[0].avg_pool2d(pool, true));
    check("adaptive_avg_pool2d", &[img.clone()], F32, |t| t[0].adaptive_avg_pool2d((2, 3)));
    check("layer_norm", &[randn(&[3, 5, 8]), randn(&[8]), randn(&[8])], F32, |t| {
        t[0].layer_norm(&[8], Some(&t[1]), Some(&t[2]), 1e-5)
    });
    check("batch_norm", &[img.clone(), randn(&[4]), randn(&[4])], F32, |t| {
        t[0].batch_norm(None, None, Some(&t[1]), Some(&t[2]), true, 0.1, 1e-5)
    });
    let idx = Tensor::from_vec_i64(vec![3, 0, 2, 2, 1], &[5]);
    check("embedding", &[idx.clone(), randn(&[4, 6])], F32, |t| Tensor::embedding(&t[0], &t[1]));
    check("index_select", &[randn(&[4, 6]), idx.clone()], F32, |t| t[0].index_select(0, &t[1]));
    let gidx = Tensor::from_vec_i64(vec![0, 2, 1, 1, 0, 2], &[2, 3]);
    check("gather", &[randn(&[2, 3]), gidx], F32, |t| t[0].gather(1, &t[1]));
    check("cat/stack/narrow", &[randn(&[2, 3]), randn(&[2, 3])], F32, |t| {
        Tensor::stack(&[&Tensor::cat(&[&t[0], &t[1]], 1).narrow(1, 1, 4), &t[1].narrow(1, 0, 1).expand(&[2, 4])], 0)
    });
    check("attention", &[randn(&[2, 3, 5, 8]), randn(&[2, 3, 7, 8]), randn(&[2, 3, 7, 8])], F32, |t| {
        t[0].scaled_dot_product_attention(&t[1], &t[2], &Default::default())
    });
    // A bool mask broadcast over batch and heads, query row 1 fully masked (zeros, no
    // gradient: PyTorch's safe softmax), and the same as a float mask.
    let mut keep = vec![true; 5 * 7];
    keep[7..14].fill(false);
    keep[3] = false;
    let keep = Tensor::from_vec_bool(keep, &[5, 7]);
    let additive = Tensor::zeros(&[5, 7]).masked_fill(&keep.logical_not(), f64::NEG_INFINITY);
    for mask in [keep, additive] {
        check(
            "masked attention",
            &[randn(&[2, 3, 5, 8]), randn(&[2, 3, 7, 8]), randn(&[2, 3, 7, 8]), mask],
            F32,
            |t| {
                let config = nn_core::ops::AttentionConfig { attn_mask: Some(&t[3]), ..Default::default() };
                t[0].scaled_dot_product_attention(&t[1], &t[2], &config)
            },
        );
    }
    let target = Tensor::from_vec_i64(vec![1, 0, 3, 2, 2], &[5]);
    check("cross_entropy", &[randn(&[5, 4]), target], F32, |t| nn_core::functional::cross_entropy(&t[0], &t[1]));
    check("mse_loss", &[randn(&[5, 4]), randn(&[5, 4])], F32, |t| t[0].mse_loss(&t[1]));
    nn_core::manual_seed(9);
    let a = randn(&[40, 30]);
    nn_core::manual_seed(10);
    let yc = a.clone().requires_grad_(true).dropout(0.3, true);
    nn_core::manual_seed(10);
    let yg = a.to_device(GPU).requires_grad_(true).dropout(0.3, true);
    assert_eq!(worst(&yg, &yc), 0.0, "one seed, one dropout mask on both devices");
}

/// Ops composed of others (views, `index_select`, `cat`, sums, `matmul`): they run on the
/// GPU through their parts, with no host path.
#[test]
fn tiling_padding_einsum_and_resampling_match_the_cpu() {
    let _serial = serial();
    use nn_core::functional::{einsum, interpolate};
    use nn_core::ops::{InterpolateMode, InterpolateSize, PadMode};
    nn_core::manual_seed(11);
    let before = gpu::stats(0).host_path_calls();
    check("repeat", &[randn(&[2, 3])], F32, |t| t[0].repeat(&[2, 1, 3]));
    check("repeat_interleave", &[randn(&[2, 3])], F32, |t| t[0].repeat_interleave(3, 1));
    let img = randn(&[2, 3, 5, 6]);
    for mode in [PadMode::Constant, PadMode::Reflect, PadMode::Replicate, PadMode::Circular] {
        check(&format!("pad {mode}"), &[img.clone()], F32, |t| t[0].pad(&[2, 3, -1, 4], mode, 0.0));
    }
    check("pad constant value", &[img.clone()], F32, |t| t[0].pad(&[1, 1, 2, 0], PadMode::Constant, 0.5));
    check("einsum bmm", &[randn(&[4, 5, 6]), randn(&[4, 6, 3])], F32, |t| einsum("bij,bjk->bik", &[&t[0], &t[1]]));
    check("einsum diag chain", &[randn(&[3, 3, 4]), randn(&[4, 5]), randn(&[5])], F32, |t| {
        einsum("iij,jk,k->i", &[&t[0], &t[1], &t[2]])
    });
    check("einsum ellipsis", &[randn(&[2, 1, 3, 4]), randn(&[5, 4, 2])], F32, |t| {
        einsum("...ij,...jk", &[&t[0], &t[1]])
    });
    let sizes = [
        (InterpolateSize::Size(vec![7, 9]), InterpolateMode::Nearest, None),
        (InterpolateSize::ScaleFactor(vec![1.5, 0.7]), InterpolateMode::Bilinear, None),
        (InterpolateSize::Size(vec![8, 4]), InterpolateMode::Bilinear, Some(true)),
    ];
    for (size, mode, align) in sizes {
        check(&format!("interpolate {mode} {align:?}"), &[img.clone()], F32, |t| {
            interpolate(&t[0], size.clone(), mode, align)
        });
    }
    let line = randn(&[2, 3, 5]);
    check("interpolate linear", &[line], F32, |t| {
        interpolate(&t[0], InterpolateSize::Size(vec![11]), InterpolateMode::Linear, None)
    });
    assert_eq!(gpu::stats(0).host_path_calls(), before, "a composed op took a host path");
    // Per-element repeats are read on the host (the output size depends on them).
    let reps = Tensor::from_vec_i64(vec![1, 0, 3], &[3]);
    check("repeat_interleave tensor", &[randn(&[3, 2]), reps], F32, |t| t[0].repeat_interleave_tensor(&t[1], 0));
}

#[test]
fn index_ops_with_repeats_ties_and_nan_match_the_cpu() {
    let _serial = serial();
    nn_core::manual_seed(6);
    // Repeated rows: the backward adds several slices into one row.
    let idx = Tensor::from_vec_i64(vec![1, 1, 3, 3, 0, 1], &[6]);
    check("index_select repeats", &[randn(&[4, 300]), idx.clone()], F32, |t| t[0].index_select(0, &t[1]));
    check("index_select dim 1", &[randn(&[3, 4, 5]), idx.clone()], F32, |t| t[0].index_select(1, &t[1]));
    let g = Tensor::from_vec_i64(vec![2, 2, 0, 1, 1, 1, 0, 2], &[4, 2]);
    check("gather dim 0 repeats", &[randn(&[3, 2]), g], F32, |t| t[0].gather(0, &t[1]));
    let ties = Tensor::from_vec(vec![1.0, 3.0, 3.0, f32::NAN, 2.0, f32::NAN, -1.0, -1.0, -5.0], &[3, 3]);
    check("argmax ties and NaN", &[ties.clone()], 0.0, |t| t[0].argmax(1, false));
    check("argmin ties and NaN", &[ties], 0.0, |t| t[0].argmin(1, false));
}

#[test]
#[should_panic(expected = "index_select: index 4 is out of bounds for dimension 0 with size 4")]
fn an_index_out_of_range_on_the_gpu_panics_with_the_cpu_message_at_the_next_read() {
    let _serial = serial();
    let x = Tensor::zeros(&[4, 2]).to_device(GPU);
    // Checked on the device: the op returns without waiting, and the next read reports it.
    let y = x.index_select(0, &Tensor::from_vec_i64(vec![0, 4], &[2]).to_device(GPU));
    let _ = y.to_vec();
}

/// A negative index is out of bounds on the GPU too (it was counted from the back), as
/// on the CPU and in PyTorch.
#[test]
#[should_panic(expected = "gather: index -1 is out of bounds for dimension 1 with size 2")]
fn a_negative_index_on_the_gpu_is_out_of_bounds() {
    let _serial = serial();
    let x = Tensor::zeros(&[2, 2]).to_device(GPU);
    let y = x.gather(1, &Tensor::from_vec_i64(vec![0, -1], &[2, 1]).to_device(GPU));
    let _ = y.to_vec();
}

/// The message of a panic raised by `f`.
fn panic_message(f: impl FnOnce()) -> String {
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("expected a panic");
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

#[test]
fn a_result_built_on_a_bad_index_is_never_read_as_right() {
    let _serial = serial();
    let w = Tensor::randn(&[4, 3]).to_device(GPU);
    let clean = (&w * 2.0).sum();
    let bad = w.index_select(0, &Tensor::from_vec_i64(vec![1, -5, 2], &[3]).to_device(GPU));
    let derived = (&bad + 1.0).sum();
    let copy = bad.clone();
    // The first read anywhere on the thread reports the failure, even of a clean value.
    let m = panic_message(|| {
        clean.item();
    });
    assert!(m.contains("index_select: index -5 is out of bounds for dimension 0 with size 4"), "{m}");
    assert!(m.contains("gpu:0") && m.contains("next host read"), "{m}");
    // Afterwards clean values read normally; everything computed from the bad op panics,
    // also what is computed from it after the report.
    assert!((clean.item() - (&w * 2.0).sum().item()).abs() < 1e-5);
    for (what, t) in [("the op's result", &bad), ("a value computed from it", &derived), ("a copy", &copy)] {
        let m = panic_message(|| drop(t.to_vec()));
        assert!(m.contains("index -5 is out of bounds"), "{what}: {m}");
    }
    let later = &derived * 3.0;
    assert!(
        panic_message(|| {
            later.item();
        })
        .contains("index -5"),
        "computed after the report"
    );
    // A good index on the same weights still works.
    let ok = w.index_select(0, &Tensor::from_vec_i64(vec![3, 3], &[2]).to_device(GPU));
    assert_eq!(
        ok.to_vec(),
        w.to_device(nn_core::Device::Cpu).index_select(0, &Tensor::from_vec_i64(vec![3, 3], &[2])).to_vec()
    );
}

/// An index tensor written in place between the op and the read no longer holds the bad
/// value: the report names the position and says what it holds now, never the new value
/// as the one that failed.
#[test]
fn a_bad_index_overwritten_before_the_read_is_reported_by_position() {
    let _serial = serial();
    let x = Tensor::zeros(&[4, 2]).to_device(GPU);
    let idx = Tensor::from_vec_i64(vec![0, 9], &[2]).to_device(GPU);
    let y = x.index_select(0, &idx);
    idx.fill_(1.0);
    let m = panic_message(|| drop(y.to_vec()));
    assert!(m.contains("index_select: the index at position 1 was out of bounds for dimension 0 with size 4"), "{m}");
    assert!(m.contains("it holds 1 there now") && !m.contains("index 1 is out of bounds"), "{m}");
}

#[test]
fn a_bad_class_target_on_the_gpu_is_reported_at_the_loss_read() {
    let _serial = serial();
    let logits = Tensor::randn(&[3, 5]).to_device(GPU);
    let before = nn_core::gpu::stats(0);
    let loss = nn_core::functional::cross_entropy(&logits, &Tensor::from_vec_i64(vec![0, 7, 4], &[3]).to_device(GPU));
    let after = nn_core::gpu::stats(0);
    assert_eq!(after.host_waits, before.host_waits, "the targets are checked without a host wait");
    let m = panic_message(|| {
        loss.item();
    });
    assert!(m.contains("nll_loss: index 7 is out of bounds for dimension 1 with size 5"), "{m}");
    // ignore_index targets are skipped, as on the CPU.
    let t = Tensor::from_vec_i64(vec![0, -100, 4], &[3]);
    let cfg = nn_core::functional::ClassLossConfig::default();
    let gpu = nn_core::functional::cross_entropy_with(&logits, &t.to_device(GPU), cfg).item();
    let cpu = nn_core::functional::cross_entropy_with(&logits.to_device(nn_core::Device::Cpu), &t, cfg).item();
    assert!((gpu - cpu).abs() < 1e-5, "{gpu} vs {cpu}");
}

#[test]
fn empty_tensors_read_back_without_a_wait() {
    let _serial = serial();
    let e = Tensor::zeros(&[0, 3]).to_device(GPU);
    let before = nn_core::gpu::stats(0);
    assert!((&e + 1.0).to_vec().is_empty());
    assert_eq!(nn_core::gpu::stats(0).host_waits, before.host_waits);
}

#[test]
#[should_panic(expected = "embedding: index 9 is out of bounds for dimension 0 with size 4")]
fn an_embedding_id_out_of_range_on_the_gpu_panics() {
    let _serial = serial();
    let w = Tensor::zeros(&[4, 2]).to_device(GPU);
    let e = Tensor::embedding(&Tensor::from_vec_i64(vec![0, 9], &[2]).to_device(GPU), &w);
    let _ = e.to_vec();
}

/// Writing through an `expand`ed view (a zero stride: every element written many times)
/// is refused on both devices, as in PyTorch; on the GPU the writing threads would race.
#[test]
fn writes_through_an_expanded_view_are_refused() {
    let _serial = serial();
    for d in [GPU, Device::Cpu] {
        let expanded = Tensor::zeros(&[2, 1]).to_device(d).expand(&[2, 4]);
        let m = panic_message(|| {
            expanded.copy_(&Tensor::ones(&[2, 4]).to_device(d));
        });
        assert!(m.contains("copy_: unsupported operation: more than one element"), "{d}: {m}");
        let m = panic_message(|| {
            expanded.add_(&Tensor::ones(&[2, 4]).to_device(d));
        });
        assert!(m.contains("more than one element of the written-to tensor"), "{d}: {m}");
    }
}

/// A max pooling whose dtype has no GPU kernel (f64 here) runs on the host, and its
/// indices still come back on the GPU, beside its values.
#[test]
fn max_pool_indices_stay_on_the_device_of_the_values() {
    let _serial = serial();
    use nn_core::backend::Pool2dConfig;
    let pool = Pool2dConfig { kernel: (2, 2), stride: (2, 2), padding: (0, 0), dilation: (1, 1), ceil_mode: false };
    for dtype in [DType::F32, DType::F64] {
        let x = Tensor::randn(&[1, 2, 4, 4]).to_dtype(dtype);
        let (v, i) = x.to_device(GPU).max_pool2d_with_indices(pool);
        assert_eq!((v.device(), i.device()), (GPU, GPU), "{dtype}");
        let (cv, ci) = x.max_pool2d_with_indices(pool);
        assert_eq!((v.to_vec_f64(), i.to_vec_f64()), (cv.to_vec_f64(), ci.to_vec_f64()), "{dtype}");
    }
}

/// Several checks failing at one read, one of them on an index that an earlier report
/// made unreadable: every failure is still marked (reporting the first read that index's
/// values and panicked before the others were marked).
#[test]
fn failures_read_together_are_all_marked() {
    let _serial = serial();
    let table = Tensor::from_vec_i64(vec![7, 1, 2], &[3]).to_device(GPU);
    let t = table.index_select(0, &Tensor::from_vec_i64(vec![-9], &[1]).to_device(GPU));
    assert!(panic_message(|| drop(t.to_vec_f64())).contains("index -9"));
    let x = Tensor::randn(&[3, 2]).to_device(GPU);
    // t is marked; its bad position holds table[0] = 7, out of range for x.
    let z1 = x.index_select(0, &t);
    let z2 = x.index_select(0, &Tensor::from_vec_i64(vec![5], &[1]).to_device(GPU));
    let first = panic_message(|| drop(z2.to_vec()));
    assert!(first.contains("index 7") || first.contains("index 5"), "{first}");
    for (what, z) in [("z1", &z1), ("z2", &z2)] {
        let m = panic_message(|| drop(z.to_vec()));
        assert!(m.contains("index 7") || m.contains("index 5") || m.contains("index -9"), "{what} read as right: {m}");
    }
}

/// Two checks failing at one read: each op's result carries its own op's report, and the
/// marks of a check spread from its own launch on (an op that read the second check's
/// index tensor before that check ran stays readable).
#[test]
fn failures_read_together_each_carry_their_own_report() {
    let _serial = serial();
    let w = Tensor::randn(&[4, 2]).to_device(GPU);
    let w8 = Tensor::randn(&[8, 2]);
    let ids = Tensor::from_vec_i64(vec![0, 7], &[2]);
    let gids = ids.to_device(GPU);
    let a = w.index_select(0, &Tensor::from_vec_i64(vec![9], &[1]).to_device(GPU));
    // Reads `gids` (in range for 8 rows) before the embedding below finds 7 out of range.
    let early = w8.to_device(GPU).index_select(0, &gids);
    let b = Tensor::embedding(&gids, &w);
    let m = panic_message(|| drop(a.to_vec()));
    assert!(m.contains("index_select: index 9 is out of bounds for dimension 0 with size 4"), "{m}");
    let m = panic_message(|| drop(b.to_vec()));
    assert!(m.contains("embedding: index 7 is out of bounds for dimension 0 with size 4"), "b: {m}");
    let m = panic_message(|| drop(a.to_vec()));
    assert!(m.contains("index_select: index 9"), "a, read again: {m}");
    assert_eq!(early.to_vec(), w8.index_select(0, &ids).to_vec(), "computed before the check that failed");
}

/// A negative embedding id (refused by `embedding`, and by the `index_select` it runs on)
/// is reported, and what was computed from it stays unreadable: on a second read, and on
/// another thread that never got the report.
#[test]
fn a_negative_embedding_id_is_never_read_as_a_row() {
    let _serial = serial();
    let w = Tensor::arange(0.0, 6.0, 1.0).reshape(&[3, 2]).to_device(GPU);
    let e = Tensor::embedding(&Tensor::from_vec_i64(vec![-1], &[1]).to_device(GPU), &w);
    let m = panic_message(|| drop(e.to_vec()));
    assert!(m.contains("embedding: index -1 is out of bounds for dimension 0 with size 3"), "{m}");
    let m = panic_message(|| drop(e.to_vec()));
    assert!(m.contains("index -1"), "second read: {m}");
    let e2 = Tensor::embedding(&Tensor::from_vec_i64(vec![-2], &[1]).to_device(GPU), &w);
    let other = std::thread::spawn(move || panic_message(|| drop(e2.to_vec()))).join().unwrap();
    assert!(other.contains("index -2"), "another thread: {other}");
    // The report of the other thread's check went to this thread's next read.
    let _ = panic_message(|| {
        w.sum().item();
    });
    assert_eq!(w.sum().item(), 15.0);
}

#[test]
#[should_panic(expected = "add: expected all tensors on one device, got gpu:0 (shape [2]) and cpu (shape [2])")]
fn mixing_devices_in_one_op_panics_naming_both() {
    let _serial = serial();
    let _ = Tensor::zeros(&[2]).to_device(GPU) + Tensor::zeros(&[2]);
}

#[test]
fn half_precision_conversions_on_the_gpu_give_the_cpu_bits() {
    let _serial = serial();
    // Ties, subnormals of both formats, overflow, infinities, NaN, signed zeros.
    let mut v = vec![
        0.0f32,
        -0.0,
        1.0,
        65504.0,
        65520.0,
        1e6,
        -1e-8,
        6.0e-8,
        3.0e-8,
        5.96e-8,
        1.0 + 1.0 / 2048.0,
        1.0 + 3.0 / 2048.0,
        1.0 + 1.0 / 256.0,
        1.0 + 3.0 / 256.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-40,
        f32::MAX,
        f32::MIN_POSITIVE,
    ];
    nn_core::manual_seed(7);
    v.extend((Tensor::randn(&[999]) * 300.0).to_vec());
    let x = Tensor::from_vec(v.clone(), &[v.len()]);
    let g = x.to_device(GPU);
    for dtype in [DType::F16, DType::BF16, DType::F64, DType::Bool] {
        let (on_gpu, on_cpu) = (g.to_dtype(dtype), x.to_dtype(dtype));
        assert_eq!(on_gpu.device(), GPU);
        let bits = |t: &Tensor| format!("{:?}", t.to_device(Device::Cpu).to_vec_f64());
        assert_eq!(bits(&on_gpu), bits(&on_cpu), "f32 -> {dtype}");
        // And back, from the device's own half-precision buffer (odd length: a half word).
        let back = on_gpu.narrow(0, 1, v.len() - 2).to_dtype(DType::F32);
        assert_eq!(bits(&back), bits(&on_cpu.narrow(0, 1, v.len() - 2).to_dtype(DType::F32)), "{dtype} -> f32");
    }
    // Between 16-bit buffers: a strided copy (a transposed view at an odd offset) and the
    // other half format; then bool from the device's own f16, bf16 and f64 buffers.
    let bits = |t: &Tensor| format!("{:?}", t.to_device(Device::Cpu).to_vec_f64());
    for (from, to) in [(DType::F16, DType::F16), (DType::BF16, DType::BF16), (DType::F16, DType::BF16)] {
        let view = |t: &Tensor| t.to_dtype(from).narrow(0, 1, 1018).reshape(&[2, 509]).t();
        let (on_gpu, on_cpu) = (view(&g).to_dtype(to).contiguous(), view(&x).to_dtype(to).contiguous());
        assert_eq!(on_gpu.device(), GPU);
        assert_eq!(bits(&on_gpu), bits(&on_cpu), "{from} -> {to}, transposed");
    }
    for from in [DType::F16, DType::BF16, DType::F64] {
        let (on_gpu, on_cpu) = (g.to_dtype(from).to_dtype(DType::Bool), x.to_dtype(from).to_dtype(DType::Bool));
        assert_eq!(bits(&on_gpu), bits(&on_cpu), "{from} -> bool");
    }
    // bf16 -> f64 from the device's own bf16 buffer: subnormals (bits 0x0001, 0x8001 and
    // 0x007f are f32 subnormals, which a driver's f32 -> f64 conversion may flush to zero)
    // and normal values, in both halves of a word and through a view at an odd offset.
    if gpu_has_f64() {
        let v: Vec<f32> = [0x0001u32, 0x8001, 0x007f, 0x3fc0, 0xc049].iter().map(|b| f32::from_bits(b << 16)).collect();
        let h = Tensor::from_vec(v.clone(), &[v.len()]).to_dtype(DType::BF16);
        let hg = h.to_device(GPU);
        let f64_bits =
            |t: &Tensor| t.to_device(Device::Cpu).to_vec_f64().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let on_cpu = h.to_dtype(DType::F64);
        assert_eq!(on_cpu.to_vec_f64()[..2], [2f64.powi(-133), -(2f64.powi(-133))], "the CPU's bf16 subnormals");
        let on_gpu = hg.to_dtype(DType::F64);
        assert_eq!(on_gpu.device(), GPU);
        assert_eq!(f64_bits(&on_gpu), f64_bits(&on_cpu), "bf16 -> f64");
        let view = |t: &Tensor| t.narrow(0, 1, 3).to_dtype(DType::F64);
        assert_eq!(f64_bits(&view(&hg)), f64_bits(&view(&h)), "bf16 -> f64 (a view at an odd offset)");
    }
}

/// Whether gpu:0 holds f64 tensors (its adapter offers f64 shaders).
fn gpu_has_f64() -> bool {
    std::panic::catch_unwind(|| Tensor::zeros(&[1]).to_dtype(DType::F64).to_device(GPU)).is_ok()
}

/// Elementwise ops on f16 and bf16 run in the GPU's own kernels (no host path): each half
/// operand widened as it is read, the value computed in f32 and rounded once, two
/// elements per thread (odd lengths and strided views included). Exact arithmetic and
/// comparisons give the CPU's bits; the others (the GPU's f32 `exp`, `tanh`, ...) land
/// within one rounding of the half type.
#[test]
fn half_elementwise_ops_run_on_the_gpu_and_match_the_cpu() {
    let _serial = serial();
    nn_core::manual_seed(3);
    let (x, y) = (randn(&[7, 33]), randn(&[33]));
    let same = |name: &str, dtype: DType, a: Tensor, b: Tensor| {
        let bits = |t: &Tensor| format!("{:?}", t.to_device(Device::Cpu).to_vec_f64());
        assert_eq!(a.dtype(), b.dtype(), "{name} {dtype}");
        assert_eq!(bits(&a), bits(&b), "{name} {dtype}: the GPU's half result is not the CPU's");
    };
    for dtype in [DType::F16, DType::BF16] {
        let one_ulp = if dtype == DType::F16 { 1e-3 } else { 8e-3 };
        let (xh, yh) = (x.to_dtype(dtype), y.to_dtype(dtype));
        let (xg, yg) = (xh.to_device(GPU), yh.to_device(GPU));
        let before = gpu::stats(0).host_path_calls();
        // Exact in f32, then rounded once: bit for bit.
        same("add", dtype, &xg + &yg, &xh + &yh);
        same("mul (transposed, odd length)", dtype, xg.t() * 3.0, xh.t() * 3.0);
        same("relu", dtype, xg.relu(), xh.relu());
        same("neg of a narrow", dtype, xg.narrow(1, 1, 31).neg(), xh.narrow(1, 1, 31).neg());
        same("maximum", dtype, xg.maximum(&yg), xh.maximum(&yh));
        same("gt", dtype, xg.gt(&yg), xh.gt(&yh));
        same("where", dtype, Tensor::where_cond(&xg.gt(&yg), &xg, &yg), Tensor::where_cond(&xh.gt(&yh), &xh, &yh));
        // Through the GPU's f32 transcendental functions: within one half rounding.
        for (name, f) in [
            ("exp", Box::new(|t: &Tensor| t.exp()) as Box<dyn Fn(&Tensor) -> Tensor>),
            ("gelu", Box::new(|t: &Tensor| t.gelu())),
            ("tanh", Box::new(|t: &Tensor| t.tanh())),
            ("sigmoid", Box::new(|t: &Tensor| t.sigmoid())),
        ] {
            let (on_gpu, on_cpu) = (f(&xg), f(&xh));
            assert_eq!(on_gpu.dtype(), dtype);
            let err = worst(&on_gpu.to_device(Device::Cpu).to_dtype(DType::F64), &on_cpu.to_dtype(DType::F64));
            assert!(err <= one_ulp, "{name} {dtype}: {err:e}");
        }
        // Sums (a bias gradient's, over leading dims, and a whole tensor's): f32 sums of the
        // half values, rounded once.
        for (name, on_gpu, on_cpu) in [
            ("sum over rows", xg.sum_dims(&[0usize], false), xh.sum_dims(&[0usize], false)),
            ("sum", xg.t().sum(), xh.t().sum()),
        ] {
            assert_eq!((on_gpu.device(), on_gpu.dtype()), (GPU, dtype), "{name}");
            let err = worst(&on_gpu.to_device(Device::Cpu).to_dtype(DType::F64), &on_cpu.to_dtype(DType::F64));
            assert!(err <= one_ulp, "{name} {dtype}: {err:e}");
        }
        // Gradients of a half activation, on the device.
        let leaf = xg.detach().requires_grad_(true);
        (leaf.gelu() * &yg).sum().backward();
        let cpu_leaf = xh.detach().requires_grad_(true);
        (cpu_leaf.gelu() * &yh).sum().backward();
        let (gg, gc) = (leaf.grad().expect("a gradient"), cpu_leaf.grad().expect("a gradient"));
        assert_eq!((gg.device(), gg.dtype()), (GPU, dtype));
        let err = worst(&gg.to_device(Device::Cpu).to_dtype(DType::F64), &gc.to_dtype(DType::F64));
        assert!(err <= 2.0 * one_ulp, "gelu backward {dtype}: {err:e}");
        let host = gpu::stats(0).host_path_calls() - before;
        assert_eq!(host, 0, "{dtype}: a half elementwise op took the host path: {:?}", gpu::stats(0).host_path);
    }
}

#[test]
fn gradchecks_run_on_the_gpu_in_f64() {
    use nn_core::backend::{Conv2dConfig, Pool2dConfig};
    use nn_core::testing::gradcheck;
    let _serial = serial();
    nn_core::manual_seed(8);
    let on = |shape: &[usize]| randn(shape).to_dtype(DType::F64).to_device(GPU);
    let conv = Conv2dConfig { stride: (2, 1), padding: (1, 1), dilation: (1, 1), groups: 2 };
    let cases: Vec<(&str, Vec<Tensor>, Box<dyn Fn(&[Tensor]) -> Tensor>)> = vec![
        ("mul div sqrt", vec![on(&[3, 4]), on(&[4])], Box::new(|t| (&t[0] * &t[1]) / (t[1].square() + 1.0).sqrt())),
        ("matmul", vec![on(&[3, 5]), on(&[5, 2])], Box::new(|t| t[0].matmul(&t[1]))),
        ("sum_dim relu", vec![on(&[4, 3, 2])], Box::new(|t| t[0].relu().sum_dim(1, false))),
        ("softmax", vec![on(&[2, 5])], Box::new(|t| t[0].softmax(-1))),
        ("conv2d", vec![on(&[1, 4, 5, 5]), on(&[2, 2, 3, 3])], Box::new(move |t| t[0].conv2d(&t[1], None, conv))),
        (
            "conv_transpose2d",
            vec![on(&[1, 2, 3, 3]), on(&[2, 2, 3, 2]), on(&[4])],
            Box::new(|t| {
                let o = nn_core::ops::ConvTranspose2dConfig { stride: (2, 1), groups: 2, ..Default::default() };
                t[0].conv_transpose2d(&t[1], Some(&t[2]), o)
            }),
        ),
        ("max_pool2d", vec![on(&[1, 2, 4, 4])], Box::new(|t| t[0].max_pool2d(Pool2dConfig::new(2)))),
        (
            "layer_norm",
            vec![on(&[3, 6]), on(&[6]), on(&[6])],
            Box::new(|t| t[0].layer_norm(&[6], Some(&t[1]), Some(&t[2]), 1e-5)),
        ),
        (
            "index_select",
            vec![on(&[4, 3]), Tensor::from_vec_i64(vec![3, 0, 3], &[3]).to_device(GPU)],
            Box::new(|t| t[0].index_select(0, &t[1])),
        ),
        ("cumsum", vec![on(&[3, 4])], Box::new(|t| t[0].cumsum(1))),
        (
            "cumprod with a zero",
            vec![Tensor::from_vec_f64(vec![0.5, 0.0, -1.5, 2.0, 0.7, 1.1], &[2, 3]).to_device(GPU)],
            Box::new(|t| t[0].cumprod(1)),
        ),
        ("topk", vec![on(&[3, 5])], Box::new(|t| t[0].topk(2, 1, true, true).0)),
        ("sort", vec![on(&[3, 5])], Box::new(|t| t[0].sort(0, true).0)),
        ("flip roll", vec![on(&[3, 4])], Box::new(|t| t[0].flip(&[1]).roll(&[1], &[0]))),
        ("outer", vec![on(&[3]), on(&[2])], Box::new(|t| t[0].outer(&t[1]))),
        (
            "clamp_tensor",
            vec![on(&[3, 4]), on(&[4]), Tensor::from_vec_f64(vec![5.0, -5.0, 0.5], &[3, 1]).to_device(GPU)],
            Box::new(|t| t[0].clamp_tensor(Some(&t[1]), Some(&t[2]))),
        ),
    ];
    for (name, inputs, f) in cases {
        gradcheck(|t| f(t), &inputs).unwrap_or_else(|e| panic!("{name} on the GPU: {e}"));
    }
}

#[test]
fn scans_sorts_shifts_and_special_functions_match_the_cpu() {
    let _serial = serial();
    nn_core::manual_seed(11);
    let x = randn(&[5, 7]);
    check("cumsum", &[x.clone()], F32, |t| t[0].cumsum(1));
    check("cumsum dim 0 (view)", &[x.clone()], F32, |t| t[0].t().cumsum(0));
    let mut z = x.to_vec();
    for i in [3, 10, 12, 29] {
        z[i] = 0.0;
    }
    check("cumprod with zeros", &[Tensor::from_vec(z, &[5, 7])], F32, |t| t[0].cumprod(1));
    check("cumsum i64", &[Tensor::from_vec_i64(vec![0, 1, 1, 0, 1], &[5])], 0.0, |t| t[0].cumsum(0));
    check("sort values", &[x.clone()], 0.0, |t| t[0].sort(1, true).0);
    check("sort indices", &[x.clone()], 0.0, |t| t[0].sort(0, false).1);
    check("argsort", &[x.clone()], 0.0, |t| t[0].argsort(-1, false));
    check("topk values", &[x.clone()], 0.0, |t| t[0].topk(3, 1, true, true).0);
    check("topk smallest unsorted", &[x.clone()], 0.0, |t| t[0].topk(2, 0, false, false).0);
    check("topk indices", &[x.clone()], 0.0, |t| t[0].topk(3, 1, true, true).1);
    check("erf", &[x.clone()], F32, |t| t[0].erf());
    check("erfinv", &[Tensor::rand(&[5, 7]) * 1.98 - 0.99], F32, |t| t[0].erfinv());
    check("flip", &[x.clone()], 0.0, |t| t[0].flip(&[0, 1]));
    check("roll", &[x.clone()], 0.0, |t| t[0].roll(&[2, -3], &[0, 1]));
    check("roll flattened", &[x.clone()], 0.0, |t| t[0].roll(&[4], &[]));
    check("outer", &[randn(&[5]), randn(&[3])], F32, |t| t[0].outer(&t[1]));
    check("clamp_tensor", &[x.clone(), randn(&[7]) - 0.5, randn(&[5, 1]) + 0.5], F32, |t| {
        t[0].clamp_tensor(Some(&t[1]), Some(&t[2]))
    });
}

#[test]
fn erf_and_erfinv_have_f32_kernels_and_agree_with_the_cpu_at_the_edges() {
    let _serial = serial();
    let v = vec![0.0, -0.0, 1e-30, -1e-6, 0.3, 0.4999, 0.5, -2.0, 5.0, 12.0, f32::INFINITY, f32::NAN];
    let x = Tensor::from_vec(v.clone(), &[v.len()]);
    let before = gpu::stats(0).host_path_calls();
    let g = x.to_device(GPU).erf();
    assert_eq!(gpu::stats(0).host_path_calls(), before, "erf took the host path");
    let (gv, cv) = (g.to_vec(), x.erf().to_vec());
    for (i, (a, b)) in gv.iter().zip(&cv).enumerate() {
        assert!((a - b).abs() <= 3e-7 * b.abs() || (a.is_nan() && b.is_nan()), "erf({}) = {a} vs {b}", v[i]);
    }
    let y = vec![0.0, 1e-30, -1e-6, 0.3, -0.7, 0.999, -0.99999, 1.0, -1.0, 1.5, f32::NAN];
    let x = Tensor::from_vec(y.clone(), &[y.len()]);
    let before = gpu::stats(0).host_path_calls();
    let g = x.to_device(GPU).erfinv();
    assert_eq!(gpu::stats(0).host_path_calls(), before, "erfinv took the host path");
    let (gv, cv) = (g.to_vec(), x.erfinv().to_vec());
    for (i, (a, b)) in gv.iter().zip(&cv).enumerate() {
        let ok = (a - b).abs() <= 2e-6 * b.abs() || a == b || (a.is_nan() && b.is_nan());
        assert!(ok, "erfinv({}) = {a} vs {b}", y[i]);
    }
}

#[test]
fn sorting_on_the_device_is_stable_and_orders_nan_like_the_cpu() {
    let _serial = serial();
    nn_core::manual_seed(12);
    // Rows of 300 (not a power of two, more than a workgroup's threads) with many ties,
    // NaN and infinities; sorted along both dims, and a view.
    let mut v: Vec<f32> = (Tensor::randn(&[4, 300]) * 3.0).to_vec().iter().map(|x| x.round()).collect();
    for i in [5, 17, 301, 302, 900] {
        v[i] = f32::NAN;
    }
    v[40] = f32::INFINITY;
    v[41] = f32::NEG_INFINITY;
    v[42] = -0.0;
    let x = Tensor::from_vec(v, &[4, 300]);
    let g = x.to_device(GPU);
    let bits = |t: &Tensor| format!("{:?}", t.to_device(Device::Cpu).to_vec_f64());
    let before = gpu::stats(0).host_path_calls();
    for descending in [false, true] {
        for (name, f) in [
            (
                "sort dim 1",
                Box::new(move |t: &Tensor| t.sort(1, descending)) as Box<dyn Fn(&Tensor) -> (Tensor, Tensor)>,
            ),
            ("sort dim 0", Box::new(move |t: &Tensor| t.sort(0, descending))),
            ("sort of a view", Box::new(move |t: &Tensor| t.t().sort(0, descending))),
            ("topk sorted", Box::new(move |t: &Tensor| t.topk(37, 1, descending, true))),
            ("topk unsorted", Box::new(move |t: &Tensor| t.topk(37, 1, descending, false))),
        ] {
            let ((cv, ci), (gv, gi)) = (f(&x), f(&g));
            assert_eq!((gv.device(), gi.device()), (GPU, GPU));
            assert_eq!(gi.to_vec_i64(), ci.to_vec_i64(), "{name} (descending {descending}): indices");
            assert_eq!(bits(&gv), bits(&cv), "{name} (descending {descending}): values");
        }
    }
    assert_eq!(gpu::stats(0).host_path_calls(), before, "f32 sorts took the host path");
    // Longer lines sort on the host path, with the same results.
    let long = Tensor::randn(&[2, 1500]);
    assert_eq!(long.to_device(GPU).sort(1, false).1.to_vec_i64(), long.sort(1, false).1.to_vec_i64());
}

#[test]
fn multinomial_and_dtype_factories_on_the_gpu() {
    let _serial = serial();
    let w = Tensor::from_vec(vec![0.1, 0.0, 2.0, 1.0, 1.0, 1.0, 1.0, 0.5], &[2, 4]);
    for replacement in [true, false] {
        nn_core::manual_seed(9);
        let c = w.multinomial(3, replacement);
        nn_core::manual_seed(9);
        let g = w.to_device(GPU).multinomial(3, replacement);
        assert_eq!((g.device(), g.dtype()), (GPU, DType::I64));
        assert_eq!(g.to_vec_i64(), c.to_vec_i64(), "one seed, one draw on every device");
    }
    nn_core::device::with_device(GPU, || {
        let pos = Tensor::arange_dtype(0.0, 6.0, 1.0, DType::I64);
        assert_eq!((pos.device(), pos.to_vec_i64()), (GPU, vec![0, 1, 2, 3, 4, 5]));
        let z = Tensor::zeros_dtype(&[2, 3], DType::I64);
        assert_eq!((z.device(), z.dtype(), z.to_vec_i64()), (GPU, DType::I64, vec![0; 6]));
        assert_eq!(Tensor::ones_dtype(&[2], DType::F64).device(), GPU);
        assert_eq!(Tensor::full_dtype(&[2], 1.5, DType::F32).to_vec(), vec![1.5, 1.5]);
    });
}

#[test]
fn nan_and_infinities_propagate_as_on_the_cpu() {
    let _serial = serial();
    let v = vec![f32::NAN, 1.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, -2.5, 0.0, f32::NAN];
    let w = vec![0.5, f32::NAN, 0.0, f32::INFINITY, 3.0, f32::NAN, -0.0, 2.0];
    let (a, b) = (Tensor::from_vec(v, &[8]), Tensor::from_vec(w, &[8]));
    let same = |name: &str, f: &dyn Fn(&Tensor, &Tensor) -> Tensor| {
        let (c, g) = (f(&a, &b), f(&a.to_device(GPU), &b.to_device(GPU)));
        let bits = |t: &Tensor| format!("{:?}", t.to_device(Device::Cpu).to_vec_f64());
        assert_eq!(bits(&g), bits(&c), "{name}");
    };
    same("maximum", &|x, y| x.maximum(y));
    same("minimum", &|x, y| x.minimum(y));
    same("clamp", &|x, _| x.clamp(-1.0, 2.0));
    same("relu", &|x, _| x.relu());
    same("abs", &|x, _| x.abs());
    same("gt", &|x, y| x.gt(y).to_dtype(DType::F32));
    same("eq", &|x, y| x.eq(y).to_dtype(DType::F32));
    same("ne", &|x, y| x.ne(y).to_dtype(DType::F32));
    same("le", &|x, y| x.le(y).to_dtype(DType::F32));
    same("isnan", &|x, _| x.isnan().to_dtype(DType::F32));
    same("sum with NaN", &|x, _| x.sum());
    same("max_dim", &|x, _| x.reshape(&[2, 4]).max_dim(1, false).0);
    same("softmax", &|x, _| x.reshape(&[2, 4]).softmax(1));
    // NaN passes through relu (PyTorch's; a `max(x, 0)` gave 0) and leaky_relu, in f32 and
    // in the half kernels; relu's gradient there is PyTorch's: it passes (zeroed where
    // `x <= 0` only).
    same("leaky_relu", &|x, _| x.leaky_relu(0.1));
    same("relu f16", &|x, _| x.to_dtype(DType::F16).relu());
    same("relu bf16", &|x, _| x.to_dtype(DType::BF16).relu());
    let relu_grad = |d: Device| {
        let leaf = a.detach().to_device(d).requires_grad_(true);
        leaf.relu().backward_with(&Tensor::ones(&[8]).to_device(d), false);
        format!("{:?}", leaf.grad().expect("a gradient").to_device(Device::Cpu).to_vec_f64())
    };
    assert_eq!(relu_grad(GPU), relu_grad(Device::Cpu), "relu backward");
    assert_eq!(relu_grad(GPU), "[1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]");

    // pow at signed zeros, infinities and NaN: IEEE `pow`, as Rust's `powf` (the CPU's) and
    // PyTorch. Every value here is exact (0, inf, 1, NaN with their signs), so bit for bit.
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let pairs: &[(f32, f32)] = &[
        (-0.0, -1.0),      // -inf
        (-0.0, 3.0),       // -0
        (-0.0, -2.0),      // inf
        (-0.0, 0.5),       // 0
        (-0.0, -0.5),      // inf
        (0.0, -1.0),       // inf
        (0.0, 3.0),        // 0
        (-inf, 0.5),       // inf
        (-inf, -0.5),      // 0
        (-inf, 3.0),       // -inf
        (-inf, -3.0),      // -0
        (-inf, 2.0),       // inf
        (inf, -2.0),       // 0
        (-1.0, inf),       // 1
        (-1.0, -inf),      // 1
        (-2.0, inf),       // inf
        (-2.0, -inf),      // 0
        (-0.5, inf),       // 0
        (-0.5, -inf),      // inf
        (0.5, inf),        // 0
        (-0.0, inf),       // 0
        (-0.0, -inf),      // inf
        (nan, 0.0),        // 1
        (nan, -0.0),       // 1
        (1.0, nan),        // 1
        (1.0, -inf),       // 1
        (-2.5, 0.5),       // NaN
        (-8.0, 1.0 / 3.0), // NaN
        (nan, 2.0),        // NaN
        (2.0, nan),        // NaN
    ];
    let (base, exponent): (Vec<f32>, Vec<f32>) = pairs.iter().copied().unzip();
    let n = base.len();
    let (pa, pb) = (Tensor::from_vec(base, &[n]), Tensor::from_vec(exponent, &[n]));
    let bits = |t: &Tensor| format!("{:?}", t.to_device(Device::Cpu).to_vec_f64());
    let want = pa.pow(&pb);
    assert_eq!(bits(&want).split(", ").take(3).collect::<Vec<_>>(), ["[-inf", "-0.0", "inf"], "the CPU's pow");
    assert_eq!(bits(&pa.to_device(GPU).pow(&pb.to_device(GPU))), bits(&want), "pow");
    // powf of the special bases by constant exponents (2.0 takes `x * x`).
    let specials = Tensor::from_vec(vec![-0.0, 0.0, -inf, inf, nan, 1.0], &[6]);
    for p in [-1.0, 3.0, -2.0, -3.0, 2.0, 0.5, -0.5, 2.5, 0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
        assert_eq!(bits(&specials.to_device(GPU).powf(p)), bits(&specials.powf(p)), "powf {p}");
    }
}

/// GELU's tanh form on the GPU is the CPU's `x sigmoid(2u)`, without the cancellation of
/// `0.5 x (1 + tanh u)` on the negative tail (which gave -0 at x = -5.5, for -5.9e-9):
/// value and gradient within a relative 1e-4 of the CPU's at every point (the GPU's f32
/// `exp` near -87, where x = -10 takes it, is within a few 1e-6).
#[test]
fn gelu_tanh_keeps_its_negative_tail_on_the_gpu() {
    let _serial = serial();
    let v = vec![-10.0f32, -8.0, -6.0, -5.5, -5.0, 0.0, 5.0, -1e14];
    let x = Tensor::from_vec(v.clone(), &[v.len()]);
    let run = |d: Device| {
        let leaf = x.detach().to_device(d).requires_grad_(true);
        let y = leaf.gelu_with(nn_core::ops::GeluApproximate::Tanh);
        y.sum().backward();
        let g = leaf.grad().expect("a gradient");
        assert_eq!((y.device(), g.device()), (d, d));
        (y.to_device(Device::Cpu).to_vec(), g.to_device(Device::Cpu).to_vec())
    };
    let ((yc, gc), (yg, gg)) = (run(Device::Cpu), run(GPU));
    assert!(yc[3] < -5e-9 && yc[3] > -7e-9, "the CPU's gelu_tanh(-5.5) is {}", yc[3]);
    for (i, &xi) in v.iter().enumerate() {
        for (what, a, b) in [("value", yg[i], yc[i]), ("gradient", gg[i], gc[i])] {
            assert!((a - b).abs() <= 1e-4 * b.abs(), "gelu tanh {what} at {xi}: {a:e} on the GPU, {b:e} on the CPU");
        }
    }
}

/// A long row sums accurately on the GPU: 2^22 copies of 0.1 (16384 terms per thread of
/// the row's workgroup) average 0.1 within 1e-6, as on the CPU (a plain f32 sum per thread
/// gave 0.10006 for 2^24); var of a constant row is 0 within the same error.
#[test]
fn long_rows_sum_and_average_accurately() {
    let _serial = serial();
    let n = 1usize << 22;
    let x = Tensor::full(&[n], 0.1).to_device(GPU);
    let exact = f64::from(0.1f32);
    let mean = x.mean();
    assert_eq!(mean.device(), GPU);
    let got = mean.item();
    assert!((got - exact).abs() <= 1e-6 * exact, "mean {got} for {exact}");
    let sum = x.sum().item();
    assert!((sum - exact * n as f64).abs() <= 1e-6 * exact * n as f64, "sum {sum}");
    let rows = x.reshape(&[2, n / 2]).mean_dim(1, false).to_device(Device::Cpu).to_vec();
    assert!(rows.iter().all(|&m| (f64::from(m) - exact).abs() <= 1e-6 * exact), "{rows:?}");
    let var = x.var_dims(&[0usize], 1, false).item();
    assert!(var.abs() <= 1e-6 * exact * exact, "var {var}");
}

/// GPU autocast follows its own table (PyTorch's CUDA lists, `amp::policy`): each
/// listed call gives the table's dtype on the GPU, in both half dtypes; the CPU's scope and
/// the GPU's do not touch each other's tensors.
#[test]
fn gpu_autocast_casts_by_the_gpu_table() {
    use nn_core::amp::{autocast, autocast_dtype, policy, CastPolicy};
    use nn_core::functional as F;
    let _serial = serial();
    nn_core::manual_seed(5);
    let r = |s: &[usize]| Tensor::randn(s).to_device(GPU);
    let i = Tensor::from_vec_i64(vec![1, 0], &[2]).to_device(GPU);
    for h in [DType::F16, DType::BF16] {
        let rh = |s: &[usize]| r(s).to_dtype(h);
        let calls: Vec<(&str, Box<dyn Fn() -> Tensor>)> = vec![
            ("matmul", Box::new(|| r(&[2, 3]).matmul(&r(&[3, 4])))),
            ("linear", Box::new(|| F::linear(&r(&[2, 3]), &r(&[4, 3]), Some(&r(&[4]))))),
            ("addmm", Box::new(|| r(&[4]).addmm(&r(&[2, 3]), &r(&[3, 4])))),
            ("softmax", Box::new(|| rh(&[2, 3]).softmax(-1))),
            ("log_softmax", Box::new(|| rh(&[2, 3]).log_softmax(-1))),
            ("layer_norm", Box::new(|| rh(&[2, 3]).layer_norm(&[3], Some(&r(&[3])), Some(&r(&[3])), 1e-5))),
            ("rms_norm", Box::new(|| rh(&[2, 3]).rms_norm(&[3], Some(&r(&[3])), None))),
            ("group_norm", Box::new(|| F::group_norm(&rh(&[2, 4, 3]), 2, Some(&r(&[4])), Some(&r(&[4])), 1e-5))),
            ("cross_entropy", Box::new(|| F::cross_entropy(&rh(&[2, 3]), &i))),
            ("mse_loss", Box::new(|| F::mse_loss(&rh(&[2, 3]), &rh(&[2, 3]), F::Reduction::Mean))),
            ("cat", Box::new(|| Tensor::cat(&[&rh(&[2]), &r(&[2])], 0))),
        ];
        autocast(GPU, h, || {
            assert_eq!(autocast_dtype(GPU), Some(h));
            assert_eq!(autocast_dtype(Device::Cpu), None);
            for (op, call) in &calls {
                let want = match policy(GPU, op) {
                    Some(CastPolicy::Lower) => h,
                    Some(CastPolicy::F32) | Some(CastPolicy::Promote) => DType::F32,
                    None => panic!("{op} is not in the GPU table"),
                };
                let y = call();
                assert_eq!((y.dtype(), y.device()), (want, GPU), "{op} under {h} GPU autocast");
            }
            // Not on the GPU lists: the argument's dtype.
            assert_eq!(rh(&[3]).relu().dtype(), h);
            // The CPU is not in this scope.
            assert_eq!(Tensor::randn(&[2, 3]).matmul(&Tensor::randn(&[3, 2])).dtype(), DType::F32);
        });
        // And a CPU scope leaves GPU tensors alone (softmax is not on the CPU's f32 list).
        autocast(Device::Cpu, h, || {
            assert_eq!(r(&[2, 3]).matmul(&r(&[3, 4])).dtype(), DType::F32);
            assert_eq!(Tensor::randn(&[2, 3]).to_dtype(h).softmax(-1).dtype(), h);
        });
    }
}

/// `steps` SGD steps (learning rate `lr`) of the GPU parameters `p` on the loss `forward`
/// gives, under GPU autocast to `amp` (or in f32): the losses. The loss is f32, every
/// parameter's gradient f32 on the GPU, and no op takes the host path after the first step.
fn amp_steps(p: &[Tensor], steps: usize, lr: f64, amp: Option<DType>, forward: impl Fn() -> Tensor) -> Vec<f64> {
    let mut losses = Vec::new();
    let mut host_after_warmup = 0;
    for step in 0..steps {
        let before = gpu::stats(0).host_path_calls();
        let loss = match amp {
            Some(h) => nn_core::amp::autocast(GPU, h, &forward),
            None => forward(),
        };
        assert_eq!(loss.dtype(), DType::F32);
        loss.backward();
        for t in p {
            let g = t.grad().expect("a gradient");
            assert_eq!((g.dtype(), g.device()), (DType::F32, GPU), "master gradients are f32");
            nn_core::no_grad(|| t.sub_(&(g * lr)));
            t.set_grad(None);
        }
        losses.push(loss.item());
        if step > 0 {
            host_after_warmup += gpu::stats(0).host_path_calls() - before;
        }
    }
    assert_eq!(host_after_warmup, 0, "{amp:?}: host path: {:?}", gpu::stats(0).host_path);
    losses
}

/// A training step under GPU autocast, in both half dtypes: linear layers in the half
/// dtype, layer norm and the loss in f32, f32 master weights whose gradients arrive in
/// f32; the loss tracks the f32 model's within the half type's precision and goes down;
/// and after a warm-up step no op takes the host path.
#[test]
fn a_model_trains_under_gpu_autocast_on_the_device() {
    use nn_core::functional as F;
    let _serial = serial();
    nn_core::manual_seed(11);
    let x = Tensor::randn(&[32, 16]).to_device(GPU);
    let y = Tensor::from_vec_i64((0..32).map(|k| k % 4).collect(), &[32]).to_device(GPU);
    let init =
        [Tensor::randn(&[32, 16]) * 0.25, Tensor::zeros(&[32]), Tensor::randn(&[4, 32]) * 0.2, Tensor::zeros(&[4])];
    let run = |amp: Option<DType>| -> Vec<f64> {
        let p: Vec<Tensor> = init.iter().map(|t| t.to_device(GPU).requires_grad_(true)).collect();
        let forward = || {
            let h = F::linear(&x, &p[0], Some(&p[1])).relu();
            let h = h.layer_norm(&[32], None, None, 1e-5);
            F::cross_entropy(&F::linear(&h, &p[2], Some(&p[3])), &y)
        };
        amp_steps(&p, 6, 0.5, amp, forward)
    };
    let f32_losses = run(None);
    for (h, tol) in [(DType::F16, 5e-3), (DType::BF16, 3e-2)] {
        let losses = run(Some(h));
        eprintln!("{h}: {losses:?} (f32: {f32_losses:?})");
        for (a, b) in losses.iter().zip(&f32_losses) {
            assert!((a - b).abs() <= tol * b.abs().max(1.0), "{h}: loss {a} against f32 {b}");
        }
        assert!(losses[5] < losses[0], "{h}: the loss went from {} to {}", losses[0], losses[5]);
    }
}

/// A CNN step (convolution, batch norm with f32 statistics, ReLU, max and average
/// pooling) and an attention step (layer norm, scaled dot-product attention, GELU, a
/// residual) under GPU autocast in both half types: after the first step no op takes the
/// host path, and the f32 loss tracks the f32 model's.
#[test]
fn cnn_and_attention_steps_stay_on_the_gpu_under_autocast() {
    use nn_core::functional as F;
    use nn_core::ops::{AttentionConfig, Conv2dConfig, Pool2dConfig};
    let _serial = serial();
    nn_core::manual_seed(5);
    let x = Tensor::randn(&[4, 2, 8, 8]).to_device(GPU);
    let y = Tensor::from_vec_i64(vec![0, 1, 2, 1], &[4]).to_device(GPU);
    let s = Tensor::randn(&[2, 6, 16]).to_device(GPU);
    let init = [
        Tensor::randn(&[4, 2, 3, 3]) * 0.3,
        Tensor::zeros(&[4]),
        Tensor::ones(&[4]),
        Tensor::zeros(&[4]),
        Tensor::randn(&[3, 16]) * 0.2,
        Tensor::randn(&[48, 16]) * 0.2,
        Tensor::randn(&[16, 16]) * 0.2,
    ];
    let run = |amp: Option<DType>| -> Vec<f64> {
        let p: Vec<Tensor> = init.iter().map(|t| t.to_device(GPU).requires_grad_(true)).collect();
        let (rm, rv) = (Tensor::zeros(&[4]).to_device(GPU), Tensor::ones(&[4]).to_device(GPU));
        let forward = || {
            let pad = Conv2dConfig { padding: (1, 1), ..Default::default() };
            let h = x.conv2d(&p[0], Some(&p[1]), pad);
            let h = h.batch_norm(Some(&rm), Some(&rv), Some(&p[2]), Some(&p[3]), true, 0.1, 1e-5).relu();
            let h = h.max_pool2d(Pool2dConfig::new(2)).avg_pool2d(Pool2dConfig::new(2), true);
            let cnn = F::cross_entropy(&F::linear(&h.reshape(&[4, 16]), &p[4], None), &y);
            let qkv = F::linear(&s.layer_norm(&[16], None, None, 1e-5), &p[5], None).chunk(3, -1);
            let a = qkv[0].scaled_dot_product_attention(&qkv[1], &qkv[2], &AttentionConfig::default());
            let t = (&s + &F::linear(&a, &p[6], None).gelu()).square().mean();
            cnn + t
        };
        amp_steps(&p, 4, 0.1, amp, forward)
    };
    let f32_losses = run(None);
    for (h, tol) in [(DType::F16, 1e-2), (DType::BF16, 5e-2)] {
        let losses = run(Some(h));
        for (a, b) in losses.iter().zip(&f32_losses) {
            assert!((a - b).abs() <= tol * b.abs().max(1.0), "{h}: loss {a} against f32 {b}");
        }
    }
}

/// Convolutions, poolings, softmax, index ops, sorting and writes into a slice of a half
/// tensor run on the device (the kernels with `f32` versions only on `f32` copies made
/// there, rounded once as the CPU rounds; the write with atomics on each element's half of
/// a word), and agree with the CPU, gradients included.
#[test]
fn half_ops_without_half_kernels_run_on_the_gpu() {
    use nn_core::ops::{Conv2dConfig, ConvTranspose2dConfig, Pool2dConfig};
    let _serial = serial();
    nn_core::manual_seed(8);
    let (x, w, b) = (randn(&[2, 3, 7, 7]), randn(&[4, 3, 3, 3]), randn(&[4]));
    let ops: Vec<(&str, Box<dyn Fn(&[Tensor]) -> Tensor>)> = vec![
        (
            "conv2d",
            Box::new(|t| t[0].conv2d(&t[1], Some(&t[2]), Conv2dConfig { stride: (2, 2), ..Default::default() })),
        ),
        (
            "conv_transpose2d",
            Box::new(|t| t[0].conv_transpose2d(&t[1].permute(&[1, 0, 2, 3]), None, ConvTranspose2dConfig::default())),
        ),
        ("max_pool2d", Box::new(|t| t[0].max_pool2d(Pool2dConfig::new(2)) * &t[2].sum())),
        (
            "avg_pool2d",
            Box::new(|t| t[0].avg_pool2d(Pool2dConfig { padding: (1, 1), ..Pool2dConfig::new(3) }, false) + t[1].sum()),
        ),
        (
            "chunk and cat",
            Box::new(|t| {
                let c = t[0].reshape(&[2, 147]).chunk(3, -1);
                Tensor::cat(&[&c[2], &(&c[0] * &t[1].reshape(&[108]).narrow(0, 0, 49))], 1)
            }),
        ),
        ("softmax of a transposed view", Box::new(|t| t[0].reshape(&[6, 49]).t().softmax(-1))),
        ("log_softmax", Box::new(|t| t[0].reshape(&[6, 49]).log_softmax(0))),
        (
            "index_select and gather",
            Box::new(|t| {
                let dev = t[0].device();
                let i = Tensor::from_vec_i64(vec![3, 0, 3, 1], &[4]).to_device(dev);
                let j = Tensor::from_vec_i64((0..24).map(|k| (k * 5) % 7).collect(), &[4, 6]).to_device(dev);
                t[1].reshape(&[4, 27]).index_select(1, &i).sum() + t[0].reshape(&[42, 7]).narrow(0, 3, 4).gather(1, &j)
            }),
        ),
        (
            "max_dim, sort and topk",
            Box::new(|t| {
                let x = t[0].reshape(&[6, 49]);
                let (m, _) = x.max_dim(1, true);
                let (s, _) = x.sort(1, true);
                let (k, _) = x.topk(5, 1, true, false);
                Tensor::cat(&[&m, &s.narrow(1, 0, 5), &k], 1)
            }),
        ),
    ];
    for dtype in [DType::F16, DType::BF16] {
        // A few roundings of sums of up to 27 products: within 4 half-type ulps.
        let tol = if dtype == DType::F16 { 4e-3 } else { 3e-2 };
        let cpu: Vec<Tensor> = [&x, &w, &b].iter().map(|t| t.to_dtype(dtype).requires_grad_(true)).collect();
        let dev: Vec<Tensor> = cpu.iter().map(|t| t.detach().to_device(GPU).requires_grad_(true)).collect();
        for (name, f) in &ops {
            let before = gpu::stats(0).host_path_calls();
            let (yg, yc) = (f(&dev), f(&cpu));
            assert_eq!((yg.device(), yg.dtype()), (GPU, dtype), "{name}");
            let wg = Tensor::randn(yc.shape()).to_dtype(dtype);
            (&yg * &wg.to_device(GPU)).sum().backward();
            (&yc * &wg).sum().backward();
            let err = worst(&yg.to_device(Device::Cpu).to_dtype(DType::F64), &yc.to_dtype(DType::F64));
            assert!(err <= tol, "{name} {dtype}: {err:e}");
            for (i, (g, c)) in dev.iter().zip(&cpu).enumerate() {
                let (Some(gg), Some(gc)) = (g.grad(), c.grad()) else { continue };
                assert_eq!((gg.device(), gg.dtype()), (GPU, dtype), "{name}: gradient {i}");
                let scale = gc.to_dtype(DType::F64).abs().max().item().max(1.0);
                let err = worst(&gg.to_device(Device::Cpu).to_dtype(DType::F64), &gc.to_dtype(DType::F64));
                assert!(err <= tol * scale, "{name} {dtype}: gradient {i}: {err:e}");
                g.set_grad(None);
                c.set_grad(None);
            }
            assert_eq!(gpu::stats(0).host_path_calls(), before, "{name} {dtype}: {:?}", gpu::stats(0).host_path);
        }
        // Writes into a strided slice of a tensor holding other values: the neighbours of
        // each written element in its word keep their bits.
        let before = gpu::stats(0).host_path_calls();
        let (dc, src) = (x.to_dtype(dtype).reshape(&[6, 49]), w.to_dtype(dtype).reshape(&[12, 9]));
        let dg = dc.to_device(GPU);
        for (d, s) in [(&dc, src.clone()), (&dg, src.to_device(GPU))] {
            d.share_storage_with_views(); // writes through its views reach it
            d.narrow(1, 3, 9).narrow(0, 1, 5).copy_(&s.narrow(0, 2, 5));
            d.t().narrow(0, 20, 1).copy_(&s.reshape(&[108]).narrow(0, 0, 6).unsqueeze(0));
        }
        let bits = |t: &Tensor| format!("{:?}", t.to_device(Device::Cpu).to_vec_f64());
        assert_ne!(bits(&dc), bits(&x.to_dtype(dtype).reshape(&[6, 49])), "the writes changed it");
        assert_eq!(bits(&dg), bits(&dc), "{dtype}: a slice write on the GPU is not the CPU's");
        assert_eq!(gpu::stats(0).host_path_calls(), before, "{dtype}: {:?}", gpu::stats(0).host_path);
    }
}

/// Attention on half operands under GPU autocast is one op: the softmax it is built from
/// (on the GPU's `f32` list when called directly) stays in the operands' dtype, as in
/// PyTorch's fused attention; every op the trace records gives `f16`.
#[test]
fn attention_parts_are_not_cast_under_gpu_autocast() {
    use nn_core::amp::autocast;
    use nn_core::ops::AttentionConfig;
    let _serial = serial();
    let h = |s: &[usize]| Tensor::randn(s).to_dtype(DType::F16).to_device(GPU);
    let (q, k, v) = (h(&[1, 2, 5, 8]), h(&[1, 2, 5, 8]), h(&[1, 2, 5, 8]));
    let (y, t) = nn_core::trace::trace(|| {
        autocast(GPU, DType::F16, || q.scaled_dot_product_attention(&k, &v, &AttentionConfig::default()))
    });
    assert_eq!(y.dtype(), DType::F16);
    assert!(!t.ops.is_empty());
    for op in &t.ops {
        let out = op.output.as_ref().map(Tensor::dtype);
        assert!(out.is_none_or(|d| d == DType::F16), "{} gave {out:?}", op.name);
    }
    // Called directly, the softmax is on the list.
    assert_eq!(autocast(GPU, DType::F16, || q.softmax(-1)).dtype(), DType::F32);
}

/// Softplus of large negative values keeps `e^x` on the GPU as on the CPU (`log1p`), and
/// with it a confident logit's binary cross-entropy (it rounded to 0 past 17 on the GPU).
#[test]
fn softplus_keeps_tiny_values_on_the_gpu() {
    let _serial = serial();
    let x = Tensor::from_vec(vec![-30.0, -20.0, -5.0, -1e-3, 0.0, 5.0, 30.0], &[7]);
    for threshold in [20.0, f64::INFINITY] {
        let cpu = x.softplus(1.0, threshold).to_vec();
        let gpu = x.to_device(GPU).softplus(1.0, threshold).to_device(Device::Cpu).to_vec();
        for (g, c) in gpu.iter().zip(&cpu) {
            assert!((g - c).abs() <= 1e-5 * c.abs(), "softplus: {g} on the GPU, {c} on the CPU");
        }
    }
    let (logit, target) = (Tensor::from_vec(vec![30.0], &[1]), Tensor::from_vec(vec![1.0], &[1]));
    let loss = nn_core::functional::binary_cross_entropy_with_logits(
        &logit.to_device(GPU),
        &target.to_device(GPU),
        None,
        nn_core::functional::Reduction::Mean,
    );
    let want = (-30f64).exp();
    let got = loss.item();
    assert!((got - want).abs() < 1e-5 * want, "{got} against {want}");
}

/// Gradients at NaN and ties take PyTorch's rule on the GPU as on the CPU: `maximum` and
/// `minimum` give both sides the whole gradient where either is NaN and half at a tie, and
/// `clamp_tensor` with both bounds follows PyTorch 2.15's rule.
#[test]
fn gradients_at_nan_and_ties_match_the_cpu() {
    let _serial = serial();
    let vals = [0.0f32, 1.0, 2.0, f32::NAN];
    let mut cols = [vec![], vec![], vec![]];
    for a in vals {
        for b in vals {
            for c in vals {
                cols[0].push(a);
                cols[1].push(b);
                cols[2].push(c);
            }
        }
    }
    type Op = fn(&[Tensor]) -> Tensor;
    let ops: [(&str, Op); 5] = [
        ("maximum", |t| t[0].maximum(&t[1])),
        ("minimum", |t| t[0].minimum(&t[1])),
        ("clamp_tensor", |t| t[0].clamp_tensor(Some(&t[1]), Some(&t[2]))),
        ("clamp_tensor lo", |t| t[0].clamp_tensor(Some(&t[1]), None)),
        ("clamp_tensor hi", |t| t[0].clamp_tensor(None, Some(&t[2]))),
    ];
    for (name, f) in ops {
        let grads = |device: Device| -> Vec<Vec<f64>> {
            let ts: Vec<Tensor> = cols
                .iter()
                .map(|c| Tensor::from_vec(c.clone(), &[64]).to_device(device).requires_grad_(true))
                .collect();
            f(&ts).sum().backward();
            ts.iter().map(|t| t.grad().map_or(vec![], |g| g.to_device(Device::Cpu).to_vec_f64())).collect()
        };
        assert_eq!(grads(GPU), grads(Device::Cpu), "{name}");
    }
}
