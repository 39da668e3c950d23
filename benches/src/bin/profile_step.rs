//! Runs training steps of one `nn_bench` workload in a loop, for `perf record` (not a
//! benchmark: `nn_bench` and the criterion benches are). Usage:
//! `profile_step cnn|mlp|mlp256|transformer|transformer_bf16|gpt2|gpt2_bf16 STEPS` (`_bf16`: under bf16
//! autocast).

use nn_bench::{cnn, gpt2, mlp, token_ids, transformer_layer, LmStep, Step, LM_INPUT};

fn main() {
    let which = std::env::args().nth(1).unwrap_or_else(|| "cnn".into());
    let steps: usize = match std::env::args().nth(2) {
        None => 50,
        Some(s) => s.parse().unwrap_or_else(|_| {
            eprintln!("profile_step: STEPS {s:?} is not a count");
            std::process::exit(2);
        }),
    };
    if let Some(amp) = which.strip_prefix("gpt2") {
        if !["", "_bf16"].contains(&amp) {
            eprintln!("profile_step: unknown workload {which:?} (expected gpt2 or gpt2_bf16)");
            std::process::exit(2);
        }
        // The GPT-2 workload (`gpt2`, or `gpt2_bf16` under bf16 autocast).
        let mut s = LmStep::new(gpt2(), token_ids(50257, &LM_INPUT));
        if amp == "_bf16" {
            s = s.with_amp(nn_core::DType::BF16);
        }
        let t = std::time::Instant::now();
        for _ in 0..steps {
            drop(s.step());
        }
        println!("{which}: {:.3} ms per step", t.elapsed().as_secs_f64() * 1e3 / steps as f64);
        return;
    }
    let mut s = match which.as_str() {
        "cnn" => Step::new(cnn(), &[32, 1, 28, 28], true),
        "mlp" => Step::new(mlp(), &[64, 784], true),
        "mlp256" => Step::new(mlp(), &[256, 784], true),
        "transformer" => Step::new(transformer_layer(), &[16, 64, 128], false),
        "transformer_bf16" => Step::new(transformer_layer(), &[16, 64, 128], false).with_amp(nn_core::DType::BF16),
        other => {
            eprintln!(
                "profile_step: unknown workload {other:?} (expected cnn, mlp, mlp256, transformer or transformer_bf16)"
            );
            std::process::exit(2);
        }
    };
    let t = std::time::Instant::now();
    for _ in 0..steps {
        s.run();
    }
    println!("{which}: {:.3} ms per step", t.elapsed().as_secs_f64() * 1e3 / steps as f64);
}
