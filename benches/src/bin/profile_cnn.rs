//! Runs CNN training steps in a loop (for `perf record`), printing the time per step.

use nn_core::functional::cross_entropy;
use nn_core::optim::{Adam, AdamConfig, Optimizer};
use nn_core::{manual_seed, Forward, Module, Tensor};
use nn_layers::{Conv2d, Flatten, Linear, MaxPool2d, ReLU, Sequential};

fn main() {
    manual_seed(0);
    let steps: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(50);
    let model = Sequential::new()
        .add(Conv2d::new(1, 8, 3))
        .add(ReLU::new())
        .add(MaxPool2d::new(2))
        .add(Conv2d::new(8, 16, 3))
        .add(ReLU::new())
        .add(MaxPool2d::new(2))
        .add(Flatten::new())
        .add(Linear::new(16 * 5 * 5, 10));
    let mut opt = Adam::new(model.parameters(), AdamConfig::default());
    let x = Tensor::randn(&[32, 1, 28, 28]);
    let y = Tensor::from_vec_i64((0..32).map(|i| i % 10).collect(), &[32]);
    let t = std::time::Instant::now();
    for _ in 0..steps {
        opt.zero_grad();
        let loss = cross_entropy(&model.forward(&x), &y);
        loss.backward();
        opt.step();
    }
    println!("{:.3} ms per CNN step (batch 32)", t.elapsed().as_secs_f64() * 1e3 / steps as f64);
}
