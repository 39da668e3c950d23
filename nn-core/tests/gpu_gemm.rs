//! The GPU GEMM's variants against the CPU (cargo feature `gpu`; on machines without a GPU,
//! Mesa's software Vulkan: `apt-get install mesa-vulkan-drivers`). Each variant is forced in
//! turn over odd sizes, transposed, strided, batched and broadcast operands and addmm, in
//! f32, f16 (as `f16` where the adapter has `SHADER_F16`, and as packed words), bf16 and f64.
//! A variant the adapter lacks must be reported as refused, naming the adapter and what it
//! lacks, and its fallback must still be right. Every test needs `gpu:0` and fails, saying
//! why, when it cannot be opened.
//!
//! Tolerance: the CPU and the GPU both sum each output's k products in f32 (f64 for f64) and
//! round the sum once to the result's type; only the order of the sums differs. Two orders
//! differ by at most `2 k u sum|a b|` (u the unit roundoff of the sum's type), and after the
//! final rounding by one more unit in the last place of the result's type, so each element
//! must satisfy `|gpu - cpu| <= ulp(cpu) + k 2^-22 sum|a b|` (`k 2^-51 sum|a b|` in f64); the
//! factor two above `2 k u` leaves room for matrix units, whose f32 sums may truncate.
#![cfg(feature = "gpu")]

use nn_core::{gpu, manual_seed, DType, Device, Tensor};

const GPU: Device = Device::Gpu(0);

/// The adapter's name, or a panic saying why `gpu:0` cannot be used.
fn require_gpu() -> String {
    if let Err(e) = GPU.check() {
        panic!("the GPU GEMM suite needs gpu:0: {e}");
    }
    // `NAME (DeviceType, Backend, driver ...)`, where the name may hold parentheses itself.
    let info = gpu::adapter_info(0).expect("checked");
    let types = ["DiscreteGpu", "IntegratedGpu", "VirtualGpu", "Cpu", "Other"];
    let end = types.iter().filter_map(|t| info.find(&format!(" ({t}, "))).min().unwrap_or(info.len());
    info[..end].to_string()
}

/// The suite's lock: the forced variant is process-wide.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    require_gpu();
    guard
}

/// One product to check: its operands (CPU tensors of one dtype) and how to compute it.
struct Case {
    name: &'static str,
    inputs: Vec<Tensor>,
    f: fn(&[Tensor]) -> Tensor,
    /// `sum |a b|` per output (f64, CPU) and the depth k.
    bound: fn(&[Tensor]) -> (Tensor, usize),
}

fn randn(shape: &[usize], dtype: DType) -> Tensor {
    Tensor::randn(shape).to_dtype(dtype)
}

fn abs64(t: &Tensor) -> Tensor {
    t.to_dtype(DType::F64).abs()
}

fn mm_bound(t: &[Tensor]) -> (Tensor, usize) {
    let k = t[1].shape()[t[1].shape().len() - 2];
    (abs64(&t[0]).matmul(&abs64(&t[1])), k)
}

/// Odd sizes, every layout the GEMM distinguishes, batches and addmm, in `dtype`.
fn cases(dtype: DType) -> Vec<Case> {
    let r = |s: &[usize]| randn(s, dtype);
    let mm: fn(&[Tensor]) -> Tensor = |t| t[0].matmul(&t[1]);
    let mut v = Vec::new();
    for (m, k, n) in [(1, 1, 1), (7, 65, 130), (130, 7, 65), (65, 130, 1), (1, 130, 7), (130, 130, 130)] {
        v.push(Case { name: "plain", inputs: vec![r(&[m, k]), r(&[k, n])], f: mm, bound: mm_bound });
    }
    let tt: fn(&[Tensor]) -> Tensor = |t| t[0].t().matmul(&t[1].t());
    let tt_bound: fn(&[Tensor]) -> (Tensor, usize) = |t| (abs64(&t[0]).t().matmul(&abs64(&t[1]).t()), t[0].shape()[0]);
    v.push(Case { name: "both transposed", inputs: vec![r(&[65, 130]), r(&[7, 65])], f: tt, bound: tt_bound });
    v.push(Case { name: "both transposed, aligned", inputs: vec![r(&[64, 68]), r(&[36, 64])], f: tt, bound: tt_bound });
    let ta: fn(&[Tensor]) -> Tensor = |t| t[0].t().matmul(&t[1]);
    let ta_bound: fn(&[Tensor]) -> (Tensor, usize) = |t| (abs64(&t[0]).t().matmul(&abs64(&t[1])), t[0].shape()[0]);
    v.push(Case { name: "A transposed", inputs: vec![r(&[130, 65]), r(&[130, 7])], f: ta, bound: ta_bound });
    // Rows padded to a multiple of four with k and n not: the four-wide loads, masked at the edges.
    let padded: fn(&[Tensor]) -> Tensor = |t| t[0].narrow(1, 0, 65).matmul(&t[1].narrow(1, 0, 130));
    let padded_bound: fn(&[Tensor]) -> (Tensor, usize) =
        |t| (abs64(&t[0].narrow(1, 0, 65)).matmul(&abs64(&t[1].narrow(1, 0, 130))), 65);
    v.push(Case { name: "padded rows", inputs: vec![r(&[70, 68]), r(&[65, 132])], f: padded, bound: padded_bound });
    // Offsets of 1: the one-element loads.
    let shifted: fn(&[Tensor]) -> Tensor = |t| t[0].narrow(1, 1, 64).matmul(&t[1].narrow(1, 1, 40));
    let shifted_bound: fn(&[Tensor]) -> (Tensor, usize) =
        |t| (abs64(&t[0].narrow(1, 1, 64)).matmul(&abs64(&t[1].narrow(1, 1, 40))), 64);
    v.push(Case { name: "shifted", inputs: vec![r(&[33, 68]), r(&[64, 41])], f: shifted, bound: shifted_bound });
    v.push(Case { name: "batched broadcast", inputs: vec![r(&[2, 3, 17, 9]), r(&[3, 9, 65])], f: mm, bound: mm_bound });
    v.push(Case { name: "batched aligned", inputs: vec![r(&[3, 64, 32]), r(&[3, 32, 68])], f: mm, bound: mm_bound });
    v.push(Case { name: "vector", inputs: vec![r(&[1, 130]), r(&[130, 7])], f: mm, bound: mm_bound });
    v.push(Case {
        name: "addmm",
        inputs: vec![r(&[65]), r(&[7, 130]), r(&[130, 65])],
        f: |t| t[0].addmm_with(&t[1], &t[2], 0.5, -2.0),
        bound: |t| {
            let p = abs64(&t[1]).matmul(&abs64(&t[2]));
            (&p.affine(2.0, 0.0) + &abs64(&t[0]).affine(0.5, 0.0), 130)
        },
    });
    v
}

/// Unit in the last place of `x` in `dtype` (at least the smallest normal's).
fn ulp(x: f64, dtype: DType) -> f64 {
    let (mant, min_exp) = match dtype {
        DType::F16 => (10, -14),
        DType::BF16 => (7, -126),
        DType::F32 => (23, -126),
        _ => (52, -1022),
    };
    let e = (x.abs().max(f64::MIN_POSITIVE).log2().floor() as i32).max(min_exp);
    2f64.powi(e - mant)
}

/// Runs every case in `dtype` on the GPU under the current forced variant; asserts each
/// against the CPU and returns the variants that ran them (from the GEMM report).
fn run_cases(dtype: DType, label: &str) -> Vec<String> {
    let mut ran = Vec::new();
    for case in cases(dtype) {
        let want = (case.f)(&case.inputs);
        let on_gpu: Vec<Tensor> = case.inputs.iter().map(|t| t.to_device(GPU)).collect();
        let got = (case.f)(&on_gpu);
        assert_eq!(got.device(), GPU, "{label} {}: the result left the GPU", case.name);
        assert_eq!(got.dtype(), dtype);
        assert_eq!(got.shape(), want.shape(), "{label} {}", case.name);
        let (bound, k) = (case.bound)(&case.inputs);
        let unit = if dtype == DType::F64 { 2f64.powi(-51) } else { 2f64.powi(-22) };
        let (g, w, b) = (got.to_vec_f64(), want.to_vec_f64(), bound.to_vec_f64());
        for (i, ((g, w), b)) in g.iter().zip(&w).zip(&b).enumerate() {
            let tol = ulp(*w, dtype) + k as f64 * unit * b;
            assert!(
                (g - w).abs() <= tol,
                "{label} {} {:?}: element {i} is {g}, the CPU's {w} (tolerance {tol:e})",
                case.name,
                case.inputs.iter().map(|t| t.shape().to_vec()).collect::<Vec<_>>()
            );
        }
        ran.push(gpu::gemm_report(0).and_then(|r| r.last).expect("a product ran"));
    }
    ran
}

/// What each special variant needs, as its refusal names it.
fn needs(variant: &str) -> &'static [&'static str] {
    match variant {
        "sg64x64_4x4" => &["SUBGROUP", "subgroups of a power-of-two size"],
        "coop64x64_f16" | "coop128x128_f16" | "coop128x128_db_f16" => &[
            "EXPERIMENTAL_COOPERATIVE_MATRIX",
            "SHADER_F16",
            "SUBGROUP",
            "16x16x16 cooperative matrices",
            "a fixed subgroup size",
        ],
        _ => &[],
    }
}

#[test]
fn every_variant_matches_the_cpu_or_is_refused_with_a_right_fallback() {
    let _serial = serial();
    let adapter = require_gpu();
    eprintln!("gpu:0 is {}", gpu::adapter_info(0).unwrap());
    manual_seed(7);
    let report = gpu::gemm_report(0).expect("gpu:0 is open");
    assert_eq!(report.variants.len(), 16, "{report:?}");
    let mut summary = Vec::new();
    for (variant, refused) in &report.variants {
        match refused {
            Some(why) => {
                eprintln!("{variant}: refused: {why}");
                assert!(why.contains(&format!("adapter `{adapter}`")), "{why}");
                assert!(why.contains(&format!("`{variant}`")), "{why}");
                assert!(
                    needs(variant).iter().any(|n| why.contains(n)),
                    "{variant}: {why} names none of {:?}",
                    needs(variant)
                );
            }
            None => eprintln!("{variant}: offered"),
        }
        for (dtype, spec) in [
            (DType::F32, variant.clone()),
            (DType::F16, variant.clone()),
            (DType::F16, format!("{variant}+packed")),
            (DType::BF16, variant.clone()),
            (DType::F64, variant.clone()),
        ] {
            if dtype == DType::F64 && !gpu_has_f64() {
                continue;
            }
            gpu::force_gemm(Some(&spec));
            let ran = run_cases(dtype, &format!("{spec} {dtype}"));
            gpu::force_gemm(None);
            for last in &ran {
                match refused {
                    None if last.starts_with(&format!("{variant} (forced)")) => {}
                    // Offered, but the compiler rejected it for this dtype: refused cleanly.
                    None if last.contains(&format!("failed to compile GEMM variant `{variant}`")) => {
                        eprintln!("{spec} {dtype}: REFUSED BY THE COMPILER: {last}");
                        assert!(
                            last.starts_with("t64x64_4x4 (") && last.contains(&format!("adapter `{adapter}`")),
                            "{last}"
                        );
                    }
                    // Not this dtype's variant (coop takes f16 only, subgroups no f64).
                    None => assert!(
                        last.starts_with("t64x64_4x4 (") && last.contains("does not take"),
                        "{spec} {dtype}: {last}"
                    ),
                    Some(why) => {
                        assert!(last.starts_with("t64x64_4x4 (forced "), "{spec} {dtype}: {last}");
                        assert!(last.contains(why.as_str()), "{spec} {dtype}: {last}");
                    }
                }
            }
            if spec.ends_with("+packed") {
                assert!(ran.iter().all(|l| l.ends_with("[f16 (packed words)]")), "{spec}: {ran:?}");
            }
            // The variant and the encoding of each product.
            let mut kinds: Vec<String> = ran
                .iter()
                .map(|l| format!("{} {}", l.split(' ').next().unwrap_or(""), &l[l.rfind('[').unwrap_or(0)..]))
                .collect();
            kinds.dedup();
            summary.push(format!("forced {spec:<22} {dtype:<5} ran {}", kinds.join(", ")));
        }
    }
    eprintln!("{}", summary.join("\n"));
}

/// Whether f64 tensors can live on gpu:0.
fn gpu_has_f64() -> bool {
    std::panic::catch_unwind(|| Tensor::zeros(&[1]).to_dtype(DType::F64).to_device(GPU)).is_ok()
}

#[test]
fn the_tuner_measures_a_size_class_once_and_keeps_its_choice() {
    let _serial = serial();
    manual_seed(3);
    gpu::force_gemm(Some("auto"));
    let (a, b) = (Tensor::randn(&[160, 148]), Tensor::randn(&[148, 140]));
    let want = a.matmul(&b).to_vec();
    let (ga, gb) = (a.to_device(GPU), b.to_device(GPU));
    let before = gpu::gemm_report(0).unwrap().tuning_waits;
    let got = ga.matmul(&gb).to_vec();
    let first = gpu::gemm_report(0).unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "{g} against {w}");
    }
    let last = first.last.clone().expect("a product ran");
    assert!(last.ends_with("(tuned) [f32]"), "{last}");
    let chosen = last.split(' ').next().unwrap_or("");
    assert!(first.variants.iter().any(|(v, refused)| v == chosen && refused.is_none()), "{last}");
    assert!(first.tuning_waits > before, "tuning a new class waits for its timings");
    let (class, entry) =
        first.tuned.iter().find(|(c, _)| c.starts_with("f32 m<=256 n<=256 k<=256")).expect("the class is in the table");
    eprintln!("{class}: {entry}");
    assert!(entry.starts_with(chosen), "{entry}");
    // Same class, other sizes: no more timing, same variant.
    let again = Tensor::randn(&[200, 132]).to_device(GPU).matmul(&Tensor::randn(&[132, 188]).to_device(GPU));
    drop(again.to_vec());
    let second = gpu::gemm_report(0).unwrap();
    assert_eq!(second.tuning_waits, first.tuning_waits, "a known class is not timed again");
    assert_eq!(second.last.as_deref(), Some(last.as_str()));
    // Past 1024 rows: timed on the leading 1024 rows, then the finalists at the real size
    // (cheap here), which decides.
    let (a, b) = (Tensor::randn(&[1100, 64]), Tensor::randn(&[64, 32]));
    let want = a.matmul(&b).to_vec();
    let got = a.to_device(GPU).matmul(&b.to_device(GPU)).to_vec();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "{g} against {w}");
    }
    let third = gpu::gemm_report(0).unwrap();
    let (class, entry) = third.tuned.iter().find(|(c, _)| c.starts_with("f32 m<=4096 n<=64 k<=64")).expect("tuned");
    eprintln!("{class}: {entry}");
    let chosen = third.last.as_deref().unwrap_or("").split(' ').next().unwrap_or("").to_string();
    let finals = entry.split("at 1100x64x32:").nth(1).unwrap_or_else(|| panic!("no second round: {entry}"));
    assert!(finals.trim_start().starts_with(&format!("{chosen} ")), "the fastest finalist decides: {entry}");
    // Small products are not tuned.
    drop(Tensor::ones(&[3, 4]).to_device(GPU).matmul(&Tensor::ones(&[4, 5]).to_device(GPU)).to_vec());
    assert_eq!(gpu::gemm_report(0).unwrap().last.as_deref(), Some("t32x32_4x4 (small) [f32]"));
}

#[test]
fn forcing_an_unknown_variant_lists_the_variants() {
    let _serial = serial();
    let e = std::panic::catch_unwind(|| gpu::force_gemm(Some("t3x3"))).expect_err("no such variant");
    let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("t3x3") && msg.contains("t64x64_4x4") && msg.contains("coop64x64_f16"), "{msg}");
}

/// The kernels compile without wgpu's runtime checks unless asked: each variant the adapter
/// runs gives the same bits both ways (same arithmetic; the checks only guard the indices),
/// and the report says which form ran.
#[test]
fn checked_and_unchecked_kernels_agree() {
    let _serial = serial();
    manual_seed(11);
    let report = gpu::gemm_report(0).expect("gpu:0 is open");
    for (variant, refused) in &report.variants {
        if refused.is_some() {
            continue;
        }
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for case in cases(dtype).iter().filter(|c| ["plain", "A transposed", "addmm", "shifted"].contains(&c.name))
            {
                let on_gpu: Vec<Tensor> = case.inputs.iter().map(|t| t.to_device(GPU)).collect();
                let mut out = Vec::new();
                for spec in [variant.clone(), format!("{variant}+checked")] {
                    gpu::force_gemm(Some(&spec));
                    out.push((case.f)(&on_gpu).to_vec_f64());
                    let last = gpu::gemm_report(0).and_then(|r| r.last).expect("a product ran");
                    gpu::force_gemm(None);
                    let ran_it = last.starts_with(&format!("{variant} (forced"));
                    assert_eq!(
                        ran_it && last.contains(", checked"),
                        ran_it && spec.ends_with("+checked"),
                        "{spec}: {last}"
                    );
                }
                let same = out[0].iter().zip(&out[1]).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{variant} {dtype} {}: checked and unchecked kernels differ", case.name);
            }
        }
    }
}
