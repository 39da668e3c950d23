#![allow(missing_docs)] // criterion_group!/criterion_main! generate undocumented public items
//! Criterion benchmarks: matmul GFLOP/s at square sizes 64..1024 (f32), the two GEMM
//! backends side by side on the workloads' shapes, conv2d forward and
//! forward+backward, the MLP and CNN training steps, and module-hook overhead.
//!
//! `cargo bench -p nn-bench`; set `RAYON_NUM_THREADS=1` for one core.
//! `benches/compare.py` runs the same workloads against PyTorch and prints ratios.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nn_bench::{cnn, mlp, Step};
use nn_core::{manual_seed, no_grad, ops::Conv2dConfig, Forward, Module, Tensor};

fn matmul(c: &mut Criterion) {
    manual_seed(0);
    let mut g = c.benchmark_group("matmul_f32");
    for n in [64usize, 128, 256, 512, 1024] {
        let a = Tensor::randn(&[n, n]);
        let b = Tensor::randn(&[n, n]);
        g.throughput(Throughput::Elements((2 * n * n * n) as u64)); // FLOPs per iteration
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |bench, _| bench.iter(|| a.matmul(&b)));
    }
    g.finish();
}

/// The two GEMM backends on the shapes nn's workloads produce (what `nn_core::backend::cpu::gemm`'s
/// choice rests on): square sizes, the MLP's forward and gradient products, the CNN's
/// convolution products (im2col'd, batch 32), a Transformer layer's projections.
fn gemm_backends(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemm_backends_f32");
    // (name, m, k, n, a transposed, b transposed)
    let shapes = [
        ("square_128", 128, 128, 128, false, false),
        ("square_512", 512, 512, 512, false, false),
        ("mlp_b64_forward", 64, 784, 256, false, true),
        ("mlp_b64_weight_grad", 256, 64, 784, true, false),
        ("conv1_forward", 8, 9, 23296, false, false),
        ("conv1_weight_grad", 8, 23296, 9, false, true),
        ("conv2_forward", 16, 72, 4576, false, false),
        ("conv2_weight_grad", 16, 4576, 72, false, true),
        ("transformer_qkv", 1024, 128, 384, false, true),
    ];
    for (name, m, k, n, ta, tb) in shapes {
        let a: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 * 0.1).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 11) as f32 * 0.1).collect();
        let mut out = vec![0.0f32; m * n];
        g.throughput(Throughput::Elements((2 * m * k * n) as u64)); // FLOPs per iteration
        for backend in ["gemm", "matrixmultiply"] {
            g.bench_function(BenchmarkId::new(name, backend), |bench| {
                bench.iter(|| nn_core::__private::gemm_f32_with_backend(backend, (m, k, n), &a, ta, &b, tb, &mut out))
            });
        }
    }
    g.finish();
}

fn conv2d(c: &mut Criterion) {
    manual_seed(0);
    let mut g = c.benchmark_group("conv2d_f32");
    let x = Tensor::randn(&[32, 8, 14, 14]);
    let w = Tensor::randn(&[16, 8, 3, 3]);
    let b = Tensor::randn(&[16]);
    let opt = Conv2dConfig { padding: (1, 1), ..Default::default() };
    let flops = 2 * 32 * 16 * 14 * 14 * 8 * 9;
    g.throughput(Throughput::Elements(flops as u64));
    g.bench_function("forward_32x8x14x14_k3", |bench| bench.iter(|| x.conv2d(&w, Some(&b), opt)));
    let xg = x.detach().requires_grad_(true);
    let wg = w.detach().requires_grad_(true);
    g.throughput(Throughput::Elements(3 * flops as u64));
    g.bench_function("forward_backward_32x8x14x14_k3", |bench| {
        bench.iter(|| {
            xg.conv2d(&wg, Some(&b), opt).sum().backward();
            xg.zero_grad();
            wg.zero_grad();
        })
    });
    g.finish();
}

fn training_steps(c: &mut Criterion) {
    let mut g = c.benchmark_group("train_step");
    for batch in [64usize, 256] {
        let mut s = Step::new(mlp(), &[batch, 784], true);
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(format!("mlp_784_256_10_b{batch}"), |bench| bench.iter(|| s.run()));
    }
    let mut s = Step::new(cnn(), &[32, 1, 28, 28], true);
    g.throughput(Throughput::Elements(32));
    g.bench_function("cnn_b32", |bench| bench.iter(|| s.run()));
    g.finish();
}

fn hook_overhead(c: &mut Criterion) {
    manual_seed(0);
    let mut g = c.benchmark_group("mlp_forward_b64");
    let m = mlp();
    let x = Tensor::randn(&[64, 784]);
    g.bench_function("layers_with_hook_machinery", |bench| bench.iter(|| no_grad(|| m.forward(&x))));
    let p: Vec<Tensor> = m.parameters().iter().map(|p| p.tensor().clone()).collect();
    g.bench_function("raw_ops", |bench| {
        bench.iter(|| no_grad(|| (x.matmul(&p[0].t()) + &p[1]).relu().matmul(&p[2].t()) + &p[3]))
    });
    g.finish();
}

criterion_group!(benches, matmul, gemm_backends, conv2d, training_steps, hook_overhead);
criterion_main!(benches);
