//! Runs training steps of one `nn_bench` workload in a loop, for `perf record` (not a
//! benchmark: `nn_bench` and the criterion benches are). Usage:
//! `profile_step cnn|mlp|mlp256|transformer|transformer_bf16|gpt2|gpt2_bf16 STEPS` (`_bf16`: under bf16
//! autocast), or `gpt2_fwd|bert_fwd|llama_fwd STEPS` (eval-mode forwards without grad).

use nn_bench::{cnn, gpt2, mlp, token_ids, transformer_layer, LmStep, Step, LM_INPUT};
use nn_core::{Forward, Module};

fn main() {
    let which = std::env::args().nth(1).unwrap_or_else(|| "cnn".into());
    let steps: usize = match std::env::args().nth(2) {
        None => 50,
        Some(s) => s.parse().unwrap_or_else(|_| {
            eprintln!("profile_step: STEPS {s:?} is not a count");
            std::process::exit(2);
        }),
    };
    if which == "linear" {
        // `x W^T` at `[M, K] x [N, K]^T` (a linear layer), the fastest of STEPS calls:
        // `profile_step linear STEPS M K N`.
        let dims: Vec<usize> = std::env::args().skip(3).map(|a| a.parse().expect("a dimension")).collect();
        let [m, k, n] = dims[..] else {
            eprintln!("profile_step: linear STEPS M K N");
            std::process::exit(2);
        };
        let (x, w) = (nn_core::Tensor::randn(&[m, k]), nn_core::Tensor::randn(&[n, k]));
        let median = |f: &dyn Fn() -> nn_core::Tensor| {
            let mut ms: Vec<f64> = (0..steps.max(1))
                .map(|_| {
                    let t = std::time::Instant::now();
                    drop(f());
                    t.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            // The fastest call: on a shared VM the others carry other tenants' work.
            ms.sort_by(f64::total_cmp);
            ms[0]
        };
        let direct = median(&|| x.matmul(&w.t()));
        // The same product's transpose, `W x^T`, and with both operands row-major.
        let swapped = median(&|| w.matmul(&x.t()));
        let wt = w.t().contiguous();
        let plain = median(&|| x.matmul(&wt));
        println!("linear {m}x{k}x{n} (fastest of {steps}): x W^T {direct:.3} ms, W x^T {swapped:.3} ms, x (W^T contiguous) {plain:.3} ms");
        return;
    }
    if let Some(model) = which.strip_suffix("_fwd") {
        // The eval-mode forwards of the real-model workloads (`nn_bench`'s `*_fwd`).
        let t = std::time::Instant::now();
        macro_rules! forwards {
            ($model:expr, $vocab:expr, |$ids:ident| $input:expr) => {{
                let mut m = $model;
                m.eval();
                let $ids = token_ids($vocab, &LM_INPUT);
                let input = $input;
                let t0 = std::time::Instant::now();
                for _ in 0..steps {
                    drop(nn_core::no_grad(|| m.forward(&input)));
                }
                t0
            }};
        }
        let t0 = match model {
            "gpt2" => forwards!(gpt2(), 50257, |ids| ids),
            // nn_bench's mask: the second sequence's last 32 tokens are padding.
            "bert" => forwards!(nn_bench::bert(), 30522, |ids| {
                let l = LM_INPUT[1];
                let mask: Vec<i64> = (0..2 * l).map(|i| i64::from(i < 2 * l - 32)).collect();
                (ids, nn_core::Tensor::from_vec_i64(mask, &LM_INPUT))
            }),
            "llama" => forwards!(nn_bench::llama(), 32000, |ids| ids),
            other => {
                eprintln!("profile_step: unknown forward {other:?} (expected gpt2_fwd, bert_fwd or llama_fwd)");
                std::process::exit(2);
            }
        };
        println!(
            "{which}: {:.3} ms per forward (the model built in {:.0} ms)",
            t0.elapsed().as_secs_f64() * 1e3 / steps as f64,
            (t0 - t).as_secs_f64() * 1e3
        );
        return;
    }
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
