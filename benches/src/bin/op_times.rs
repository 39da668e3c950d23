//! Times single ops of the CNN workload, forward and forward+backward with a dense
//! upstream gradient (scratch tool for finding hot spots; `nn_bench` and the criterion
//! benches are the benchmarks).

use nn_core::ops::{Conv2dConfig, Pool2dConfig};
use nn_core::{manual_seed, Tensor};

/// The median of 200 calls (the median, not the mean: this VM's speed drifts).
fn time(name: &str, f: &mut dyn FnMut()) {
    for _ in 0..5 {
        f();
    }
    let mut us: Vec<f64> = (0..200)
        .map(|_| {
            let t = std::time::Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    us.sort_by(f64::total_cmp);
    println!("{name:<32} {:8.1} us", us[us.len() / 2]);
}

/// Forward and backward of `f` with a random upstream gradient.
fn fwd_bwd(x: &Tensor, f: impl Fn(&Tensor) -> Tensor) -> impl FnMut() {
    let g = Tensor::randn(f(&x.detach()).shape());
    let x = x.clone();
    move || f(&x).backward_with(&g, false)
}

fn main() {
    manual_seed(0);
    // `op_times NAME` runs only the rows whose name starts with NAME.
    let only = std::env::args().nth(1).unwrap_or_default();
    let matched = std::cell::Cell::new(false);
    let time = |name: &str, f: &mut dyn FnMut()| {
        if name.starts_with(&only) {
            matched.set(true);
            time(name, f)
        }
    };
    // Elementwise math on a GPT-2 MLP activation, [2, 128, 3072] (forward; `_bwd` rows
    // forward and backward).
    let a = Tensor::randn(&[2, 128, 3072]).requires_grad_(true);
    let a0 = a.detach();
    type Op = fn(&Tensor) -> Tensor;
    let ew: [(&str, Op); 11] = [
        ("ew_tanh", |t| t.tanh()),
        ("ew_gelu", |t| t.gelu()),
        ("ew_gelu_tanh", |t| t.gelu_with(nn_core::ops::GeluApproximate::Tanh)),
        ("ew_exp", |t| t.exp()),
        ("ew_silu", |t| t.silu()),
        ("ew_sigmoid", |t| t.sigmoid()),
        ("ew_log", |t| t.abs().log()),
        ("ew_erf", |t| t.erf()),
        ("ew_softplus", |t| t.softplus(1.0, 20.0)),
        ("ew_pow3", |t| t.powf(3.0)),
        ("ew_pow1.5", |t| t.abs().powf(1.5)),
    ];
    for (name, f) in ew {
        time(name, &mut || drop(f(&a0)));
        time(&format!("{name}_bwd"), &mut fwd_bwd(&a, f));
    }
    // The Transformer workload's matrix products in f32 and bf16 (`gemm_<m>x<k>x<n>`,
    // `t`: the first operand a transposed view, as in a weight's gradient).
    for (m, k, n, ta) in [
        (1024, 128, 128, false),
        (1024, 128, 512, false),
        (1024, 512, 128, false),
        (128, 1024, 128, true),
        (512, 1024, 128, true),
    ] {
        let a = if ta { Tensor::randn(&[k, m]).t() } else { Tensor::randn(&[m, k]) };
        let b = Tensor::randn(&[k, n]);
        let (ah, bh) = (a.to_dtype(nn_core::DType::BF16), b.to_dtype(nn_core::DType::BF16));
        let name = format!("gemm_{m}x{k}x{n}{}", if ta { "t" } else { "" });
        time(&format!("{name}_f32"), &mut || drop(a.matmul(&b)));
        time(&format!("{name}_bf16"), &mut || drop(ah.matmul(&bh)));
    }
    let x = Tensor::randn(&[32, 1, 28, 28]);
    let w1 = Tensor::randn(&[8, 1, 3, 3]).requires_grad_(true);
    let h = Tensor::randn(&[32, 8, 26, 26]).requires_grad_(true);
    let p = Tensor::randn(&[32, 8, 13, 13]).requires_grad_(true);
    let w2 = Tensor::randn(&[16, 8, 3, 3]).requires_grad_(true);
    let h2 = Tensor::randn(&[32, 16, 11, 11]).requires_grad_(true);
    let o = Conv2dConfig::default();
    let pool = Pool2dConfig::new(2);
    time("conv1 fwd", &mut || drop(x.conv2d(&w1.detach(), None, o)));
    time("conv1 fwd+bwd (w only)", &mut fwd_bwd(&x, |x| x.conv2d(&w1, None, o)));
    time("relu1 fwd", &mut || drop(h.detach().relu()));
    time("relu1 fwd+bwd", &mut fwd_bwd(&h, |x| x.relu()));
    time("pool1 fwd", &mut || drop(h.detach().max_pool2d(pool)));
    time("pool1 fwd+bwd", &mut fwd_bwd(&h, |x| x.max_pool2d(pool)));
    time("conv2 fwd", &mut || drop(p.detach().conv2d(&w2.detach(), None, o)));
    time("conv2 fwd+bwd", &mut fwd_bwd(&p, |x| x.conv2d(&w2, None, o)));
    time("pool2 fwd+bwd", &mut fwd_bwd(&h2, |x| x.max_pool2d(pool)));

    // The Transformer workload's non-GEMM ops (batch 16, 64 tokens, d_model 128, 4 heads).
    let scores = Tensor::randn(&[16, 4, 64, 64]).requires_grad_(true);
    time("tf softmax fwd", &mut || drop(scores.detach().softmax(-1)));
    time("tf softmax fwd+bwd", &mut fwd_bwd(&scores, |x| x.softmax(-1)));
    let ff = Tensor::randn(&[16, 64, 512]).requires_grad_(true);
    time("tf relu fwd", &mut || drop(ff.detach().relu()));
    time("tf relu fwd+bwd", &mut fwd_bwd(&ff, |x| x.relu()));
    let tok = Tensor::randn(&[16, 64, 128]).requires_grad_(true);
    let tok2 = Tensor::randn(&[16, 64, 128]);
    time("tf add fwd", &mut || drop(&tok.detach() + &tok2));
    time("tf layer_norm fwd", &mut || drop(tok.detach().layer_norm(&[128], None, None, 1e-5)));
    time("tf layer_norm fwd+bwd", &mut fwd_bwd(&tok, |x| x.layer_norm(&[128], None, None, 1e-5)));
    time("tf head split fwd+bwd", &mut fwd_bwd(&tok, |x| x.reshape(&[16, 64, 4, 32]).transpose(1, 2).contiguous()));
    let g384 = Tensor::randn(&[1024, 384]);
    time("tf bias grad 1024x384", &mut || drop(g384.sum_dims(&[0usize], false)));
    let (aq, ak, av) = (
        Tensor::randn(&[16, 4, 64, 32]).requires_grad_(true),
        Tensor::randn(&[16, 4, 64, 32]).requires_grad_(true),
        Tensor::randn(&[16, 4, 64, 32]).requires_grad_(true),
    );
    time("tf attention core fwd", &mut || {
        drop(aq.detach().matmul(&ak.detach().transpose(-2, -1)).softmax(-1).matmul(&av.detach()))
    });
    time("tf attention core fwd+bwd", &mut fwd_bwd(&aq, |q| q.matmul(&ak.transpose(-2, -1)).softmax(-1).matmul(&av)));
    time("tf head merge fwd", &mut || {
        drop(tok.detach().reshape(&[16, 4, 64, 32]).transpose(1, 2).reshape(&[16, 64, 128]))
    });
    if !matched.get() {
        eprintln!("op_times: no row's name starts with {only:?}");
        std::process::exit(2);
    }
}
