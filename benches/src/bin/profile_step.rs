//! Runs training steps of one workload in a loop, for `perf record` (not a benchmark:
//! `nn_bench` and the criterion benches are). Usage: `profile_step mnist_cnn|cnn|mlp|transformer STEPS`.

use nn_bench::{cnn, mlp, transformer_layer, Step};
use nn_layers::{BatchNorm2d, Conv2d, Conv2dConfig, Dropout, Flatten, Linear, MaxPool2d, ReLU, Sequential};

fn main() {
    let which = std::env::args().nth(1).unwrap_or_else(|| "mnist_cnn".into());
    let steps: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(50);
    let pad = Conv2dConfig { padding: 1, ..Default::default() };
    let mut s = match which.as_str() {
        "cnn" => Step::new(cnn(), &[32, 1, 28, 28], true),
        "mlp" => Step::new(mlp(), &[64, 784], true),
        "transformer" => Step::new(transformer_layer(), &[16, 64, 128], false),
        _ => Step::new(
            Sequential::new()
                .add(Conv2d::with_config(1, 16, 3, pad))
                .add(BatchNorm2d::new(16))
                .add(ReLU::new())
                .add(MaxPool2d::new(2))
                .add(Conv2d::with_config(16, 32, 3, pad))
                .add(BatchNorm2d::new(32))
                .add(ReLU::new())
                .add(MaxPool2d::new(2))
                .add(Flatten::new())
                .add(Linear::new(32 * 7 * 7, 128))
                .add(ReLU::new())
                .add(Dropout::new(0.25))
                .add(Linear::new(128, 10)),
            &[64, 1, 28, 28],
            true,
        ),
    };
    let t = std::time::Instant::now();
    for _ in 0..steps {
        s.run();
    }
    println!("{which}: {:.3} ms per step", t.elapsed().as_secs_f64() * 1e3 / steps as f64);
}
