//! Kernel throughput: matmul GFLOP/s at square sizes 64..1024 (f32), and conv2d forward
#![allow(missing_docs)] // criterion_group!/criterion_main! generate undocumented public items
//! and forward+backward on a small-CNN-sized layer.
//!
//! Run with `cargo bench -p nn-bench --bench kernels`. Set `RAYON_NUM_THREADS=1` and
//! `MATMUL_NUM_THREADS=1` to measure one core.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nn_core::{manual_seed, ops::Conv2dOptions, Tensor};

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

fn conv2d(c: &mut Criterion) {
    manual_seed(0);
    let mut g = c.benchmark_group("conv2d_f32");
    // batch 32, 8 -> 16 channels, 3x3, padding 1, on 14x14 maps (the second conv of a small MNIST CNN)
    let x = Tensor::randn(&[32, 8, 14, 14]);
    let w = Tensor::randn(&[16, 8, 3, 3]);
    let b = Tensor::randn(&[16]);
    let opt = Conv2dOptions { padding: (1, 1), ..Default::default() };
    let flops = 2 * 32 * 16 * 14 * 14 * 8 * 9;
    g.throughput(Throughput::Elements(flops as u64));
    g.bench_function("forward_32x8x14x14_k3", |bench| bench.iter(|| x.conv2d(&w, Some(&b), opt)));
    let xg = x.detach().requires_grad_(true);
    let wg = w.detach().requires_grad_(true);
    g.throughput(Throughput::Elements(3 * flops as u64));
    g.bench_function("forward_backward_32x8x14x14_k3", |bench| {
        bench.iter(|| {
            let y = xg.conv2d(&wg, Some(&b), opt).sum();
            y.backward();
            xg.zero_grad();
            wg.zero_grad();
        })
    });
    g.finish();
}

criterion_group!(benches, matmul, conv2d);
criterion_main!(benches);
