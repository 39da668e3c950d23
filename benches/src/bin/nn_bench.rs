//! The benchmark harness: times every workload of `benches/compare.py` and prints one JSON
//! object per line (`{"workload", "median_ms", "unit", "throughput"}`). Threads are set by
//! the caller through `RAYON_NUM_THREADS` (all of nn's threads come from rayon's pool).
//!
//! ```text
//! RAYON_NUM_THREADS=1 cargo run --release -p nn-bench --bin nn_bench
//! cargo run --release -p nn-bench --bin nn_bench -- gpt2 ew_    # only workloads of these prefixes
//! cargo run --release -p nn-bench --features gpu --bin nn_bench -- gpu   # the GPU workloads
//! ```
//!
//! The real-model rows (`gpt2_*`, `bert_fwd`, `llama_*`) also carry `"params"`, the model's
//! parameter count, which compare.py checks against transformers' model.
//!
//! The GPU workloads (`gpu_*`, feature `gpu`) time each step up to a read of one value of its
//! result, so the queued kernels are all counted; they print the adapter first
//! (`{"adapter": ...}`).

use std::time::Instant;

use nn_bench::{bert, cnn, gpt2, llama, mlp, num_parameters, token_ids, transformer_layer, LmStep, Step, LM_INPUT};
use nn_core::ops::{AttentionConfig, GeluApproximate};
use nn_core::{manual_seed, no_grad, DType, Forward, Module, StateDict, Tensor};

/// Median wall time of `f` in milliseconds over enough runs to fill about `budget_ms` (at
/// most 100 000: a cap of 2000 would sample a microseconds-long call, such as the
/// `gemm_64` row's, for only milliseconds, where one noisy moment moves its median).
fn median_ms(mut f: impl FnMut(), budget_ms: f64) -> f64 {
    for _ in 0..3 {
        f();
    }
    let t = Instant::now();
    f();
    let one = t.elapsed().as_secs_f64() * 1e3;
    let runs = ((budget_ms / one.max(1e-3)) as usize).clamp(5, 100_000);
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

fn emit(workload: &str, ms: f64, unit: &str, throughput: f64) {
    println!("{{\"workload\": \"{workload}\", \"median_ms\": {ms:.6}, \"unit\": \"{unit}\", \"throughput\": {throughput:.3}}}");
}

/// A real-model row: tokens per second over the [`LM_INPUT`] batch, and the model's
/// parameter count.
fn emit_model(workload: &str, ms: f64, params: usize) {
    let tokens = (LM_INPUT[0] * LM_INPUT[1]) as f64 / (ms / 1e3);
    println!(
        "{{\"workload\": \"{workload}\", \"median_ms\": {ms:.6}, \"unit\": \"tokens/s\", \"throughput\": {tokens:.3}, \"params\": {params}}}"
    );
}

/// The GPU twins of the CPU workloads, on `gpu:0`: GEMM 1024 to 8192 (and 4096 in f16) and
/// the three training steps, each timed up to a host read of one value of its result.
#[cfg(feature = "gpu")]
fn gpu_workloads(want: &dyn Fn(&str) -> bool) {
    use nn_core::Device;
    let gpu = Device::Gpu(0);
    if let Err(e) = gpu.check() {
        eprintln!("nn_bench: no GPU workloads: {e}");
        std::process::exit(2);
    }
    println!("{{\"adapter\": {:?}}}", nn_core::gpu::adapter_info(0).unwrap_or_default());
    let sync = |t: &Tensor| drop(t.reshape(&[t.numel()]).narrow(0, 0, 1).to_vec());
    // NN_BENCH_GPU_GEMM_SIZES / NN_BENCH_GPU_GEMM_F16_SIZES (comma lists) replace the sizes,
    // NN_BENCH_BUDGET_MS the time each is sampled for (benches/gpu_gemm_sweep.sh uses them);
    // after each GEMM a `{"gemm_ran": ...}` line names the variant that ran it.
    let sizes = |var: &str, default: &[usize]| -> Vec<usize> {
        std::env::var(var).map_or_else(
            |_| default.to_vec(),
            |v| {
                v.split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(|s| s.trim().parse().unwrap_or_else(|_| panic!("{var}={v:?}: not a list of sizes")))
                    .collect()
            },
        )
    };
    let budget: f64 = std::env::var("NN_BENCH_BUDGET_MS").map_or(3000.0, |v| v.parse().expect("NN_BENCH_BUDGET_MS"));
    let ran = |name: &str| {
        let last = nn_core::gpu::gemm_report(0).and_then(|r| r.last).unwrap_or_default();
        println!("{{\"gemm_ran\": {name:?}, \"variant\": {last:?}}}");
    };
    for n in sizes("NN_BENCH_GPU_GEMM_SIZES", &[1024, 2048, 4096, 8192]) {
        let name = format!("gpu_gemm_{n}");
        if want(&name) {
            let (a, b) = (Tensor::randn(&[n, n]).to_device(gpu), Tensor::randn(&[n, n]).to_device(gpu));
            let ms = median_ms(|| sync(&a.matmul(&b)), budget);
            emit(&name, ms, "GFLOP/s", 2.0 * (n * n * n) as f64 / (ms * 1e6));
            ran(&name);
        }
    }
    // f16 storage, f32 sums: the cooperative-matrix GEMM where the adapter has one.
    for n in sizes("NN_BENCH_GPU_GEMM_F16_SIZES", &[4096]) {
        let name = format!("gpu_gemm_f16_{n}");
        if want(&name) {
            let f16 = |t: Tensor| t.to_dtype(DType::F16).to_device(gpu);
            let (a, b) = (f16(Tensor::randn(&[n, n])), f16(Tensor::randn(&[n, n])));
            let ms = median_ms(|| sync(&a.matmul(&b)), budget);
            emit(&name, ms, "GFLOP/s", 2.0 * (n * n * n) as f64 / (ms * 1e6));
            ran(&name);
        }
    }
    if want("gpu_gemm_report") {
        // The variants (`refused`: why not, or null) and the autotuner's table (size class:
        // chosen variant (every candidate's time)).
        for (variant, refused) in nn_core::gpu::gemm_report(0).map(|r| r.variants).unwrap_or_default() {
            match refused {
                Some(why) => println!("{{\"gemm_variant\": {variant:?}, \"refused\": {why:?}}}"),
                None => println!("{{\"gemm_variant\": {variant:?}, \"refused\": null}}"),
            }
        }
        for (class, choice) in nn_core::gpu::gemm_report(0).map(|r| r.tuned).unwrap_or_default() {
            println!("{{\"gemm_tuned\": {class:?}, \"choice\": {choice:?}}}");
        }
    }
    if want("gpu_launch_1elem") {
        // Host time per launch of a one-element op: 10 000 adds in a row, no wait until
        // the end (the wait is outside the timed loop).
        // Also the recording thread's own run time (on a software GPU such
        // as lavapipe the device's threads share the CPU with it).
        let x = Tensor::from_vec(vec![1.0f32], &[1]).to_device(gpu);
        let mut y = x.clone();
        sync(&y);
        let (t, cpu) = (Instant::now(), thread_run_ns());
        for _ in 0..10_000 {
            y = &y + &x;
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / 1e4;
        let cpu_us = thread_run_ns().zip(cpu).map(|(b, a)| (b - a) as f64 / 1e3 / 1e4);
        assert_eq!(y.item(), 10_001.0, "10 000 one-element adds on the GPU");
        println!("{{\"workload\": \"gpu_launch_1elem\", \"median_ms\": {:.6}, \"unit\": \"us/launch\", \"throughput\": {us:.3}}}", us / 1e3);
        if let Some(c) = cpu_us {
            println!("{{\"launch_thread_us\": {c:.3}}}");
        }
    }
    type MakeStep = Box<dyn Fn() -> Step>;
    let steps: [(String, MakeStep, usize); 4] = [
        ("gpu_mlp_step_b64".into(), Box::new(move || Step::on(mlp(), &[64, 784], true, gpu)), 64),
        ("gpu_mlp_step_b256".into(), Box::new(move || Step::on(mlp(), &[256, 784], true, gpu)), 256),
        ("gpu_cnn_step_b32".into(), Box::new(move || Step::on(cnn(), &[32, 1, 28, 28], true, gpu)), 32),
        (
            "gpu_transformer_step".into(),
            Box::new(move || Step::on(transformer_layer(), &[16, 64, 128], false, gpu)),
            16,
        ),
    ];
    for (name, make, batch) in steps {
        if want(&name) {
            let mut s = make();
            let ms = median_ms(|| sync(&s.step()), 3000.0);
            emit(&name, ms, "samples/s", batch as f64 / (ms / 1e3));
            // What one warm step does on the device, read the way `gpu::stats` counts it.
            let before = nn_core::gpu::stats(0);
            sync(&s.step());
            let after = nn_core::gpu::stats(0);
            println!("{{\"counts\": {:?}, \"per_step\": {:?}}}", name, counters(&after, &before));
        }
    }
}

/// This thread's time on a CPU so far in ns (Linux's schedstat), if the system says.
#[cfg(feature = "gpu")]
fn thread_run_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat").ok()?.split_whitespace().next()?.parse().ok()
}

/// The counters `after - before`, as `name=value` pairs.
#[cfg(feature = "gpu")]
fn counters(after: &nn_core::gpu::GpuStats, before: &nn_core::gpu::GpuStats) -> String {
    format!(
        "allocations={} launches={} submissions={} host_waits={} bind_groups={} host_path={}",
        after.allocations - before.allocations,
        after.dispatches - before.dispatches,
        after.submissions - before.submissions,
        after.host_waits - before.host_waits,
        after.bind_groups - before.bind_groups,
        after.host_path_calls() - before.host_path_calls()
    )
}

fn main() {
    // Workload-name prefixes to run (all workloads without any).
    let only: Vec<String> = std::env::args().skip(1).collect();
    // Which prefixes matched a workload: one that matches none (a typo) is an error, not a
    // run that measures nothing and exits 0.
    let matched = std::cell::RefCell::new(vec![false; only.len()]);
    // `name` is a workload, or a group whose figures are printed under longer names
    // (`state_dict` prints `state_dict_save_64MB`): a prefix of it, or a name in it, selects it.
    let want = |name: &str| {
        let hits: Vec<bool> = only.iter().map(|o| name.starts_with(o.as_str()) || o.starts_with(name)).collect();
        matched.borrow_mut().iter_mut().zip(&hits).for_each(|(m, h)| *m |= *h);
        only.is_empty() || hits.contains(&true)
    };
    let unmatched = || {
        let m = matched.borrow();
        let missed: Vec<&String> = only.iter().zip(m.iter()).filter(|(_, hit)| !**hit).map(|(o, _)| o).collect();
        if !missed.is_empty() {
            eprintln!("nn_bench: no workload name starts with {missed:?}");
            std::process::exit(2);
        }
    };
    if only.first().is_some_and(|o| o.starts_with("gpu")) {
        #[cfg(feature = "gpu")]
        {
            manual_seed(0);
            gpu_workloads(&want);
            unmatched();
            return;
        }
        #[cfg(not(feature = "gpu"))]
        {
            eprintln!("nn_bench: the GPU workloads need `--features gpu`");
            std::process::exit(2);
        }
    }
    manual_seed(0);
    cpu_workloads(&want);
    peak_memory(&want, &only);
    model_workloads(&want);
    elementwise_workloads(&want);
    print_kernel_choices();
    unmatched();
}

/// The GEMMs, mixed-precision products and steps, the small models' training steps, the
/// per-op bookkeeping, the hook overhead and state-dict throughput.
fn cpu_workloads(want: &dyn Fn(&str) -> bool) {
    for n in [64usize, 128, 256, 512, 1024] {
        let name = format!("gemm_{n}");
        if want(&name) {
            let (a, b) = (Tensor::randn(&[n, n]), Tensor::randn(&[n, n]));
            let ms = median_ms(|| drop(a.matmul(&b)), 2000.0);
            emit(&name, ms, "GFLOP/s", 2.0 * (n * n * n) as f64 / (ms * 1e6));
        }
    }
    // Mixed precision: a bf16 GEMM (f32 sums; AVX512-BF16 where the CPU has it), and the
    // Transformer and GPT-2 steps with their forward passes under bf16 autocast.
    if want("amp_gemm_bf16_1024") {
        let n = 1024;
        let (a, b) = (Tensor::randn(&[n, n]).to_dtype(DType::BF16), Tensor::randn(&[n, n]).to_dtype(DType::BF16));
        let ms = median_ms(|| drop(a.matmul(&b)), 2000.0);
        emit("amp_gemm_bf16_1024", ms, "GFLOP/s", 2.0 * (n * n * n) as f64 / (ms * 1e6));
    }
    if want("amp_transformer_step_bf16") {
        let mut s = Step::new(transformer_layer(), &[16, 64, 128], false).with_amp(DType::BF16);
        let ms = median_ms(|| s.run(), 3000.0);
        emit("amp_transformer_step_bf16", ms, "samples/s", 16.0 / (ms / 1e3));
    }
    if want("amp_gpt2_step_bf16") {
        let m = gpt2();
        let params = num_parameters(&m);
        let mut s = LmStep::new(m, token_ids(50257, &LM_INPUT)).with_amp(DType::BF16);
        let ms = median_ms(|| drop(s.step()), 4000.0);
        emit_model("amp_gpt2_step_bf16", ms, params);
    }
    for batch in [64usize, 256] {
        let name = format!("mlp_step_b{batch}");
        if want(&name) {
            let mut s = Step::new(mlp(), &[batch, 784], true);
            let ms = median_ms(|| s.run(), 3000.0);
            emit(&name, ms, "samples/s", batch as f64 / (ms / 1e3));
        }
    }
    if want("cnn_step_b32") {
        let mut s = Step::new(cnn(), &[32, 1, 28, 28], true);
        let ms = median_ms(|| s.run(), 3000.0);
        emit("cnn_step_b32", ms, "samples/s", 32.0 / (ms / 1e3));
    }
    if want("transformer_step") {
        let mut s = Step::new(transformer_layer(), &[16, 64, 128], false);
        let ms = median_ms(|| s.run(), 3000.0);
        emit("transformer_step", ms, "samples/s", 16.0 / (ms / 1e3));
    }
    if want("tiny") {
        // Per-op bookkeeping: an op on 4 elements, and a Linear(4, 4) forward and
        // forward+backward on one sample, where the arithmetic is negligible.
        let (a, b) = (Tensor::randn(&[4]), Tensor::randn(&[4]));
        let ms = median_ms(|| drop(&a + &b), 1000.0);
        emit("tiny_op_add", ms, "us", ms * 1e3);
        let lin = nn_layers::Linear::new(4, 4);
        let x = Tensor::randn(&[1, 4]);
        let ms = median_ms(|| drop(lin.forward(&x)), 1000.0);
        emit("tiny_linear_forward", ms, "us", ms * 1e3);
        let ms = median_ms(|| lin.forward(&x).sum().backward(), 1000.0);
        emit("tiny_linear_forward_backward", ms, "us", ms * 1e3);
    }
    if want("mlp_forward") {
        // Hook overhead: the layer stack (hooks machinery, none registered) vs the same
        // ops called directly.
        let m = mlp();
        let x = Tensor::randn(&[64, 784]);
        let with = median_ms(|| drop(no_grad(|| m.forward(&x))), 1500.0);
        let params: Vec<Tensor> = nn_core::Module::parameters(&m).iter().map(|p| p.tensor().clone()).collect();
        let raw = median_ms(
            || {
                drop(no_grad(|| {
                    let h = (x.matmul(&params[0].t()) + &params[1]).relu();
                    h.matmul(&params[2].t()) + &params[3]
                }))
            },
            1500.0,
        );
        emit("mlp_forward_layers", with, "ms", with);
        emit("mlp_forward_raw_ops", raw, "ms", raw);
    }
    if want("state_dict") {
        let mut sd = StateDict::default();
        for i in 0..16 {
            sd.insert(format!("layer{i}.weight"), Tensor::randn(&[1024, 1024]));
        }
        let mb = 16.0 * 4.0;
        let path = std::env::temp_dir().join(format!("nn-bench-{}.safetensors", std::process::id()));
        let save = median_ms(|| sd.save(&path).expect("save"), 4000.0);
        let load = median_ms(|| drop(StateDict::load(&path).expect("load")), 4000.0);
        let _ = std::fs::remove_file(&path);
        emit("state_dict_save_64MB", save, "MB/s", mb / (save / 1e3));
        emit("state_dict_load_64MB", load, "MB/s", mb / (load / 1e3));
    }
}

/// Peak resident memory of MLP training, measured in a fresh process of this binary.
fn peak_memory(want: &dyn Fn(&str) -> bool, only: &[String]) {
    let peak = want("peak_memory") | want("peak_rss_mlp_training");
    if peak && only != ["peak_memory"] {
        // The figure is a process's peak (VmHWM): measured in a fresh process, as PyTorch's
        // is, not in this one after the GEMMs and the 64 MB state dicts above (which would
        // make it about 455 MB, where the MLP's own peak is a fraction of that).
        let exe = std::env::current_exe().expect("nn_bench: its own path");
        let out =
            std::process::Command::new(exe).arg("peak_memory").output().expect("nn_bench: re-run for peak_memory");
        assert!(out.status.success(), "nn_bench peak_memory failed: {}", String::from_utf8_lossy(&out.stderr));
        print!("{}", String::from_utf8_lossy(&out.stdout));
    } else if peak {
        // Peak resident memory of 200 MLP training steps at batch 256 (this process).
        let mut s = Step::new(mlp(), &[256, 784], true);
        for _ in 0..200 {
            s.run();
        }
        let kb = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|st| {
                st.lines().find_map(|l| {
                    l.strip_prefix("VmHWM:")
                        .map(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().unwrap_or(0.0))
                })
            })
            .unwrap_or(0.0);
        emit("peak_rss_mlp_training", kb / 1024.0, "MB", kb / 1024.0);
    }
}

/// The real models (GPT-2, BERT, Llama) forward and training steps, and causal attention.
fn model_workloads(want: &dyn Fn(&str) -> bool) {
    // The real models and their parts (`peak_memory` runs in its own process, so their
    // gigabytes do not reach its figure).
    if want("gpt2_fwd") {
        let mut m = gpt2();
        m.eval();
        let ids = token_ids(50257, &LM_INPUT);
        let ms = median_ms(|| drop(no_grad(|| m.forward(&ids))), 3000.0);
        emit_model("gpt2_fwd", ms, num_parameters(&m));
    }
    if want("gpt2_step") {
        let m = gpt2();
        let params = num_parameters(&m);
        let mut s = LmStep::new(m, token_ids(50257, &LM_INPUT));
        let ms = median_ms(|| drop(s.step()), 4000.0);
        emit_model("gpt2_step", ms, params);
    }
    if want("bert_fwd") {
        let mut m = bert();
        m.eval();
        let ids = token_ids(30522, &LM_INPUT);
        // Hugging Face's mask (1 = attend): the second sequence's last 32 tokens are padding.
        let l = LM_INPUT[1];
        let mask: Vec<i64> = (0..2 * l).map(|i| i64::from(i < 2 * l - 32)).collect();
        let mask = Tensor::from_vec_i64(mask, &LM_INPUT);
        let ms = median_ms(|| drop(no_grad(|| m.forward((&ids, &mask)))), 3000.0);
        emit_model("bert_fwd", ms, num_parameters(&m));
    }
    if want("llama_fwd") {
        let mut m = llama();
        m.eval();
        let ids = token_ids(32000, &LM_INPUT);
        let ms = median_ms(|| drop(no_grad(|| m.forward(&ids))), 3000.0);
        emit_model("llama_fwd", ms, num_parameters(&m));
    }
    if want("llama_step") {
        let m = llama();
        let params = num_parameters(&m);
        let mut s = LmStep::new(m, token_ids(32000, &LM_INPUT));
        let ms = median_ms(|| drop(s.step()), 4000.0);
        emit_model("llama_step", ms, params);
    }
    if want("attn_causal") {
        // GPT-2-small's attention shapes: forward and backward from a fixed upstream
        // gradient, the leaves' gradients cleared each time (PyTorch's `grad = None`).
        let shape = [2, 12, 128, 64];
        let [q, k, v] = [(); 3].map(|()| Tensor::randn(&shape).requires_grad_(true));
        let grad = Tensor::randn(&shape);
        let causal = AttentionConfig { is_causal: true, ..Default::default() };
        let ms = median_ms(
            || {
                for t in [&q, &k, &v] {
                    t.zero_grad();
                }
                q.scaled_dot_product_attention(&k, &v, &causal).backward_with(&grad, false);
            },
            2000.0,
        );
        emit("attn_causal", ms, "ms", ms);
    }
}

/// The models' activations and two more transcendental functions, forward only.
fn elementwise_workloads(want: &dyn Fn(&str) -> bool) {
    // The activations of the models' MLPs (GPT-2's tanh GELU, BERT's exact one, Llama's
    // SiLU) and two more transcendentals, forward only, at GPT-2's MLP width.
    type Op = fn(&Tensor) -> Tensor;
    let ops: [(&str, Op); 5] = [
        ("ew_tanh", Tensor::tanh),
        ("ew_gelu", Tensor::gelu),
        ("ew_gelu_tanh", |x| x.gelu_with(GeluApproximate::Tanh)),
        ("ew_exp", Tensor::exp),
        ("ew_silu", Tensor::silu),
    ];
    if ops.iter().any(|(name, _)| want(name)) {
        let x = Tensor::randn(&[2, 128, 3072]);
        for (name, op) in ops.into_iter().filter(|(name, _)| want(name)) {
            let ms = median_ms(|| drop(op(&x)), 1500.0);
            emit(name, ms, "ms", ms);
        }
    }
}

/// The CPU kernels chosen by measurement in this run, on stderr.
fn print_kernel_choices() {
    // The CPU kernels chosen by measurement in this run, for the record (`compare.py`
    // prints them beside the table).
    for c in nn_core::cpu::kernel_report() {
        let times: Vec<String> =
            c.timings.iter().map(|(v, t)| format!("{v} {:.1} us", t.as_secs_f64() * 1e6)).collect();
        let how = if c.forced { "forced" } else { "measured" };
        eprintln!("nn_bench: kernel {} = {} ({how}; {})", c.op, c.variant, times.join(", "));
    }
}
