//! Times single ops of the CNN workload (scratch tool for finding hot spots).

use nn_core::ops::{Conv2dOptions, Pool2dOptions};
use nn_core::{manual_seed, Tensor};

fn time(name: &str, mut f: impl FnMut()) {
    for _ in 0..5 {
        f();
    }
    let n = 200;
    let t = std::time::Instant::now();
    for _ in 0..n {
        f();
    }
    println!("{name:<32} {:8.1} us", t.elapsed().as_secs_f64() * 1e6 / n as f64);
}

fn main() {
    manual_seed(0);
    let x = Tensor::randn(&[32, 1, 28, 28]).requires_grad_(true);
    let w1 = Tensor::randn(&[8, 1, 3, 3]).requires_grad_(true);
    let h = Tensor::randn(&[32, 8, 26, 26]).requires_grad_(true);
    let p = Tensor::randn(&[32, 8, 13, 13]).requires_grad_(true);
    let w2 = Tensor::randn(&[16, 8, 3, 3]).requires_grad_(true);
    let o = Conv2dOptions::default();
    time("conv1 fwd", || drop(x.detach().conv2d(&w1.detach(), None, o)));
    time("conv1 fwd+bwd", || x.conv2d(&w1, None, o).sum().backward());
    time("relu1 fwd+bwd", || h.relu().sum().backward());
    time("pool1 fwd", || drop(h.detach().max_pool2d(Pool2dOptions::new(2))));
    time("pool1 fwd+bwd", || h.max_pool2d(Pool2dOptions::new(2)).sum().backward());
    time("conv2 fwd", || drop(p.detach().conv2d(&w2.detach(), None, o)));
    time("conv2 fwd+bwd", || p.conv2d(&w2, None, o).sum().backward());
    time("sum [32,8,26,26] fwd+bwd", || h.sum().backward());
    let tiny = Tensor::randn(&[1, 1, 4, 4]);
    time("pool tiny fwd", || drop(tiny.max_pool2d(Pool2dOptions::new(2))));
    let mid = Tensor::randn(&[32, 8, 26, 26]);
    time("pool no-grad fwd", || drop(mid.max_pool2d(Pool2dOptions::new(2))));
    time("relu no-grad", || drop(mid.relu()));
}
