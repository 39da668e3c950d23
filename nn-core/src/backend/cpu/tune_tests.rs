//! Tests of the kernel tuner: every variant this CPU runs, forced through the op, against
//! its scalar algorithm bit for bit and the exact function within the algorithm's bound;
//! `NN_KERNELS`' parsing and its errors.

use super::*;
use crate::backend::cpu::vector_fns;
// `vector_fns`'s test helpers: ulps from the correctly rounded value.
use crate::backend::cpu::vector_fns::tests::ulps;
use crate::Tensor;

/// Inputs: a stride through every bit pattern (subnormals, infinities, NaN, the largest
/// finite values), a dense grid where activations lie, and a length that leaves a tail
/// after the vector blocks. Long enough that the op splits over the team.
fn inputs() -> Vec<f32> {
    let mut v: Vec<f32> = (0..=u32::MAX).step_by(40_009).map(f32::from_bits).collect();
    v.extend((-80_000..80_000).map(|i| i as f32 * 1e-4));
    v.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        1e-45,
        0.625,
    ]);
    v.push(-0.625);
    v
}

/// One tuned kernel's test case: the op on a tensor, each algorithm's scalar function in
/// the kernel's order, the exact function, and each algorithm's bound in ulps.
struct Case {
    kernel: &'static Kernel,
    op: fn(&Tensor) -> Tensor,
    algos: Vec<fn(f32) -> f32>,
    exact: fn(f64) -> f64,
    bounds: Vec<u64>,
}

fn nan_at_neg_inf(x: f64, y: f64) -> f64 {
    if x == f64::NEG_INFINITY {
        f64::NAN
    } else {
        y
    }
}

fn cases() -> Vec<Case> {
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    vec![
        Case {
            kernel: &TANH,
            op: Tensor::tanh,
            algos: vec![vector_fns::tanh, vector_fns::tanh_f32, vector_fns::tanh_table],
            exact: f64::tanh,
            bounds: vec![1, 2, 2],
        },
        Case {
            kernel: &EXP,
            op: Tensor::exp,
            algos: vec![vector_fns::exp, vector_fns::exp_f32],
            exact: f64::exp,
            bounds: vec![1, 2],
        },
        Case {
            kernel: &SIGMOID,
            op: Tensor::sigmoid,
            algos: vec![vector_fns::sigmoid],
            exact: sigmoid,
            bounds: vec![2],
        },
        Case {
            kernel: &SILU,
            op: Tensor::silu,
            algos: vec![vector_fns::silu],
            exact: |x| nan_at_neg_inf(x, x / (1.0 + (-x).exp())),
            bounds: vec![1],
        },
        Case {
            kernel: &GELU,
            op: Tensor::gelu,
            algos: vec![vector_fns::gelu],
            exact: |x| nan_at_neg_inf(x, 0.5 * x * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2)),
            bounds: vec![2],
        },
        Case {
            kernel: &GELU_TANH,
            op: |t| t.gelu_with(crate::ops::GeluApproximate::Tanh),
            algos: vec![vector_fns::gelu_tanh],
            exact: |x| {
                let u = 0.797_884_560_802_865_4 * (x + 0.044_715 * x * x * x);
                nan_at_neg_inf(x, x / (1.0 + (-2.0 * u).exp()))
            },
            bounds: vec![1],
        },
    ]
}

/// The check CI runs on whatever CPU it has: each variant, forced, gives its algorithm's
/// values bit for bit (so the vector copies agree with each other and with the scalar
/// code) and is within that algorithm's bound of the exact function.
#[test]
fn every_variant_this_cpu_runs_matches_its_algorithm_and_bound() {
    let xs = inputs();
    let x = Tensor::from_vec(xs.clone(), &[xs.len()]);
    let cases = cases();
    assert_eq!(cases.len(), ALL.len(), "a case per tuned kernel");
    for case in &cases {
        let k = case.kernel;
        assert_eq!(case.algos.len(), k.algos.len(), "{}: a function per algorithm", k.op);
        let cands = k.candidates();
        assert!(!cands.is_empty());
        for p in cands {
            let y: Vec<f32> = force_for_test(k, p, || (case.op)(&x)).to_vec();
            let name = k.variant_name(p);
            for (&xi, &yi) in xs.iter().zip(&y) {
                let want = (case.algos[p.algo])(xi);
                assert!(
                    yi.to_bits() == want.to_bits() || (yi.is_nan() && want.is_nan()),
                    "{name}({xi:e}) = {yi:e}, its algorithm gives {want:e}"
                );
                let u = ulps(yi, (case.exact)(xi as f64));
                assert!(u <= case.bounds[p.algo], "{name}({xi:e}) = {yi:e}: {u} ulp from the exact value");
            }
        }
    }
}

/// Half-precision inputs go through the same choice (widened, mapped, rounded once).
#[test]
fn half_inputs_take_the_forced_variant_too() {
    let xs: Vec<f32> = (-3000..3000).map(|i| i as f32 * 3e-3).collect();
    let x = Tensor::from_vec(xs.clone(), &[xs.len()]).to_dtype(crate::DType::BF16);
    for p in TANH.candidates() {
        let y: Vec<f32> = force_for_test(&TANH, p, || x.tanh()).to_dtype(crate::DType::F32).to_vec();
        let algo = [vector_fns::tanh, vector_fns::tanh_f32, vector_fns::tanh_table][p.algo];
        for (&xi, &yi) in xs.iter().zip(&y) {
            let want = half::bf16::from_f32(algo(half::bf16::from_f32(xi).to_f32())).to_f32();
            assert_eq!(yi.to_bits(), want.to_bits(), "{}({xi})", TANH.variant_name(p));
        }
    }
}

#[test]
fn nn_kernels_takes_algorithms_copies_and_both() {
    let all = |_: Isa| true;
    let got = parse("tanh=f32, exp=f64-avx2,gelu=avx512,silu=base-table", all).expect("valid");
    let specs: Vec<(&str, Spec)> = got.iter().map(|(k, s)| (k.op, *s)).collect();
    assert_eq!(
        specs,
        [
            ("tanh", Spec { algo: Some(1), isa: None }),
            ("exp", Spec { algo: Some(0), isa: Some(Isa::Avx2) }),
            ("gelu", Spec { algo: None, isa: Some(Isa::Avx512) }),
            ("silu", Spec { algo: Some(0), isa: Some(Isa::Base) }),
        ]
    );
    assert!(parse("", all).expect("empty").is_empty());
    assert!(parse(" , ", all).expect("only separators").is_empty());
}

#[test]
fn nn_kernels_errors_name_what_is_wrong() {
    let all = |_: Isa| true;
    let err = |v: &str| parse(v, all).expect_err(v);
    assert!(err("tanh").contains("expected `op=variant`"), "{}", err("tanh"));
    let e = err("softmax=f32");
    assert!(e.contains("`softmax`") && e.contains("tanh, exp"), "{e}");
    let e = err("tanh=f16");
    assert!(e.contains("`f16`") && e.contains("f64, f32") && e.contains("avx512, avx2, base"), "{e}");
    assert!(err("tanh=f32-f64").contains("two algorithms"));
    assert!(err("tanh=avx2-avx512").contains("two instruction sets"));
    assert!(err("tanh=f32,tanh=f64").contains("named twice"));
    // A copy the CPU cannot run: an error naming what it needs and what the CPU has.
    let e = parse("exp=f32-avx512", |i| i != Isa::Avx512).expect_err("no AVX-512");
    assert!(e.contains("cannot run the avx512 copy") && e.contains("avx512f") && e.contains("it has"), "{e}");
    assert!(e.contains(&cpu_features()), "{e}");
}

#[test]
fn the_report_records_each_choice_once() {
    // A kernel this test alone decides (the others may be decided by any test).
    let k = &SIGMOID;
    let x = Tensor::from_vec(vec![0.5f32; 64], &[64]);
    let _ = x.sigmoid();
    let _ = x.sigmoid();
    let recs: Vec<Record> = records().into_iter().filter(|r| r.op == k.op).collect();
    assert_eq!(recs.len(), 1, "{recs:?}");
    let r = &recs[0];
    assert!(k.candidates().iter().any(|p| k.variant_name(*p) == r.chosen), "{r:?}");
    // Timed where there was a choice (every candidate), not where there was one.
    let n = k.candidates().len();
    assert_eq!(r.timings.len(), if n > 1 && !r.forced { n } else { r.timings.len() });
    assert!(r.timings.iter().all(|(_, t)| *t > Duration::ZERO));
}

#[test]
fn the_sample_is_spread_like_activations() {
    let s = sample();
    assert_eq!(s.len(), SAMPLE);
    let mean = s.iter().map(|&v| v as f64).sum::<f64>() / s.len() as f64;
    let var = s.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / s.len() as f64;
    assert!(mean.abs() < 0.05 && (var.sqrt() - 1.5).abs() < 0.1, "mean {mean}, spread {}", var.sqrt());
    assert!(s.iter().all(|v| v.abs() <= 4.5));
}
