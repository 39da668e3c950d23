//! Tests of the GEMM autotuner (`gemm_tune.rs`), and the hooks that make its kernels faulty.

use super::*;
use crate::{Device, Tensor};

/// Kernels whose source the tests break, to see a compile failure caught.
pub(crate) static BROKEN: Mutex<Vec<Kernel>> = Mutex::new(Vec::new());

/// The lock of the tests that force variants or depend on tuning (the choice is
/// process-wide).
static SERIAL: Mutex<()> = Mutex::new(());

/// The suite's lock, `gpu:0` and its context; fails, saying why, when there is no GPU.
fn serial_gpu() -> (std::sync::MutexGuard<'static, ()>, Device, &'static Ctx) {
    let serial = lock(&SERIAL);
    let gpu = Device::Gpu(0);
    if let Err(e) = gpu.check() {
        panic!("this test needs gpu:0: {e}");
    }
    (serial, gpu, super::super::context::get(0).expect("checked"))
}

/// Kernels the tests make compute a wrong product (alpha scaled by 1.5).
pub(crate) static WRONG: Mutex<Vec<Kernel>> = Mutex::new(Vec::new());

/// Kernels the tests make write nothing.
pub(crate) static SILENT: Mutex<Vec<Kernel>> = Mutex::new(Vec::new());

/// Puts `kernel` on the list of kernels made faulty (`BROKEN`, `WRONG`, `SILENT`) and
/// drops its compiled pipeline, which a test that ran before may have built whole.
fn sabotage(ctx: &'static Ctx, list: &Mutex<Vec<Kernel>>, kernel: Kernel) {
    lock(list).push(kernel);
    lock(&super::state(ctx).kernels).remove(&kernel);
}

#[test]
fn agreement_allows_rounding_and_catches_wrong_values() {
    let want = [1.0, -2.0, 4.0];
    assert_eq!(agrees(Enc::F32, &want, &[1.0, -2.0002, 4.0]), Ok(()));
    let e = agrees(Enc::F32, &want, &[1.0, -2.0, 4.01]).unwrap_err();
    assert!(e.starts_with("element 2 is 4.01, the general variant's 4"), "{e}");
    assert!(agrees(Enc::F16, &want, &[1.1, -2.0, 4.0]).is_ok());
    assert!(agrees(Enc::F16, &want, &[1.0, 2.0, 4.0]).is_err());
    assert!(agrees(Enc::F32, &want, &[1.0, f64::NAN, 4.0]).is_err());
    let e = agrees(Enc::F32, &[f64::INFINITY, 0.0], &[0.0, 9.0]).unwrap_err();
    assert!(e.contains("nothing to compare"), "{e}");
}

/// A candidate whose product is wrong cannot win the tuning: it is refused, and says so
/// in the report.
#[test]
fn a_wrong_candidate_is_refused_while_tuning() {
    let (_serial, gpu, ctx) = serial_gpu();
    let t128 = VARIANTS.iter().position(|v| v.name == "t128x128_8x8").expect("listed");
    sabotage(ctx, &WRONG, Kernel { variant: t128, enc: Enc::F32, input: false, checked: false });
    // A batched class no other test of this binary tunes.
    let (a, b) = (Tensor::randn(&[2, 300, 520]), Tensor::randn(&[2, 520, 36]));
    let want = a.matmul(&b).to_vec();
    let got = a.to_device(gpu).matmul(&b.to_device(gpu)).to_vec();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-3 * w.abs().max(1.0), "{g} against {w}");
    }
    let (variants, tuned, _, _) = report(ctx);
    let (_, refused) = &variants[t128];
    assert!(
        refused.as_deref().is_some_and(|e| e.contains("`t128x128_8x8` computed a wrong product for f32")),
        "{refused:?}"
    );
    let (_, entry) = tuned.iter().find(|(c, _)| c.contains("batched") && c.contains("n<=64")).expect("tuned");
    assert!(!entry.contains("t128x128_8x8"), "{entry}");
}

/// A candidate that writes nothing is refused too: the tuner does not compare it with
/// the product the variant before it left in the output.
#[test]
fn a_candidate_that_writes_nothing_is_refused_while_tuning() {
    let (_serial, gpu, ctx) = serial_gpu();
    let silent = VARIANTS.iter().position(|v| v.name == "u64x64_8x8").expect("listed");
    let kernel = Kernel { variant: silent, enc: Enc::F32, input: false, checked: false };
    sabotage(ctx, &SILENT, kernel);
    // A batched class no other test of this binary tunes.
    let (a, b) = (Tensor::randn(&[3, 200, 100]), Tensor::randn(&[3, 100, 300]));
    let want = a.matmul(&b).to_vec();
    let got = a.to_device(gpu).matmul(&b.to_device(gpu)).to_vec();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-3 * w.abs().max(1.0), "{g} against {w}");
    }
    let (variants, tuned, _, _) = report(ctx);
    let (_, refused) = &variants[silent];
    assert!(
        refused.as_deref().is_some_and(|e| e.contains("`u64x64_8x8` computed a wrong product for f32")),
        "{refused:?}"
    );
    let (_, entry) = tuned.iter().find(|(c, _)| c.contains("n<=1024") && c.contains("batched")).expect("tuned");
    assert!(!entry.contains("u64x64_8x8"), "{entry}");
}

/// Operands whose product is not finite do not tune their class (any candidate would
/// pass a comparison with it): the general variant runs, and a later finite product of
/// the class tunes it.
#[test]
fn a_non_finite_product_does_not_tune_its_class() {
    let (_serial, gpu, ctx) = serial_gpu();
    let class = |tuned: &[(String, String)]| tuned.iter().any(|(c, _)| c.contains("m<=256 n<=16 k<=4096"));
    let a = Tensor::full(&[100, 3000], f64::INFINITY);
    let got = a.to_device(gpu).matmul(&Tensor::ones(&[3000, 10]).to_device(gpu)).to_vec();
    assert!(got.iter().all(|v| *v == f32::INFINITY), "{got:?}");
    let (_, tuned, last, _) = report(ctx);
    assert!(last.is_some_and(|l| l.starts_with("t64x64_4x4 (untuned: a product with inf or NaN")));
    assert!(!class(&tuned), "{tuned:?}");
    let (a, b) = (Tensor::randn(&[100, 3000]), Tensor::randn(&[3000, 10]));
    let want = a.matmul(&b).to_vec();
    let got = a.to_device(gpu).matmul(&b.to_device(gpu)).to_vec();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-3 * w.abs().max(1.0), "{g} against {w}");
    }
    assert!(class(&report(ctx).1), "the finite product tunes the class");
    // A class whose products stay non-finite keeps the general variant after a few,
    // instead of paying for a tuning attempt on every call.
    let a = Tensor::full(&[100, 3000], f64::NAN).to_device(gpu);
    let b = Tensor::ones(&[3000, 20]).to_device(gpu);
    for _ in 0..NON_FINITE_TRIES {
        assert!(a.matmul(&b).to_vec().iter().all(|v| v.is_nan()));
    }
    let tuned = report(ctx).1;
    let (_, entry) = tuned.iter().find(|(c, _)| c.contains("m<=256 n<=64 k<=4096")).expect("settled");
    assert!(entry.starts_with("t64x64_4x4 (general variant kept: 3 products in a row were not finite"), "{entry}");
}

#[test]
fn specs_parse_and_bad_ones_list_the_variants() {
    assert_eq!("auto".parse::<Forced>(), Ok(Forced::default()));
    assert_eq!("t64x64_8x8+packed".parse::<Forced>(), Ok(Forced { variant: Some(2), packed: true, checked: false }));
    let both = Forced { variant: Some(7), packed: true, checked: true };
    assert_eq!("db128x128_k8+checked+packed".parse::<Forced>(), Ok(both));
    assert_eq!("db128x128_k8+packed+checked".parse::<Forced>(), Ok(both));
    let e = "t9x9".parse::<Forced>().unwrap_err();
    assert!(e.contains("t9x9") && e.contains("coop64x64_f16"), "{e}");
}

/// A variant the compiler rejects is refused with a message naming the adapter and the
/// variant, and the product still comes out right, from the general variant.
#[test]
fn a_compile_failure_falls_back_and_is_remembered() {
    let (_serial, gpu, ctx) = serial_gpu();
    // t128x64_8x4 with an input, in f32: a kernel no other test of this binary runs.
    let kernel = Kernel { variant: 3, enc: Enc::F32, input: true, checked: false };
    sabotage(ctx, &BROKEN, kernel);
    force(Some("t128x64_8x4"));
    let (i, a, b) = (Tensor::randn(&[9, 5]), Tensor::randn(&[9, 6]), Tensor::randn(&[6, 5]));
    let want = i.addmm(&a, &b).to_vec();
    let got = i.to_device(gpu).addmm(&a.to_device(gpu), &b.to_device(gpu)).to_vec();
    let (variants, _, last, _) = report(ctx);
    force(None);
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{got:?} against {want:?}");
    }
    let last = last.expect("a product ran");
    assert!(last.starts_with("t64x64_4x4 ("), "{last}");
    assert!(last.contains("failed to compile GEMM variant `t128x64_8x4` for f32"), "{last}");
    assert!(last.contains(&format!("adapter `{}`", ctx.gemm_caps.adapter)), "{last}");
    let (_, refused) = &variants[3];
    assert!(refused.as_deref().is_some_and(|e| e.contains("failed to compile")), "{refused:?}");
}

/// A product with an input (addmm) runs other kernels than one without (the input's
/// epilogue): its class is tuned, and its candidates checked, on its own, also after a
/// matmul of the same sizes tuned theirs.
#[test]
fn an_addmm_is_tuned_apart_from_a_matmul_of_its_sizes() {
    let (_serial, gpu, ctx) = serial_gpu();
    let t64 = VARIANTS.iter().position(|v| v.name == "t64x64_8x8").expect("listed");
    sabotage(ctx, &WRONG, Kernel { variant: t64, enc: Enc::F32, input: true, checked: false });
    // A class no other test of this binary tunes: m, n and k up to 256, no batch.
    let (a, b, bias) = (Tensor::randn(&[150, 200]), Tensor::randn(&[200, 100]), Tensor::randn(&[100]));
    let (ga, gb) = (a.to_device(gpu), b.to_device(gpu));
    drop(ga.matmul(&gb).to_vec());
    let want = bias.addmm(&a, &b).to_vec();
    let got = bias.to_device(gpu).addmm(&ga, &gb).to_vec();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-3 * w.abs().max(1.0), "{g} against {w}");
    }
    let (variants, tuned, _, _) = report(ctx);
    let class = |input: bool| {
        tuned.iter().any(|(c, _)| {
            c.starts_with("f32 m<=256 n<=256 k<=256 ") && !c.contains("batched") && c.contains(" input") == input
        })
    };
    assert!(class(false) && class(true), "a class each: {tuned:?}");
    let (_, refused) = &variants[t64];
    assert!(
        refused.as_deref().is_some_and(|e| e.contains("`t64x64_8x8` computed a wrong product for f32 with an input")),
        "the addmm's candidates were checked: {refused:?}"
    );
}

/// A variant summing in f16 serves no product of its class deeper than the block it was
/// checked on: the fastest variant summing in f32 runs those (no GPU needed).
#[test]
fn an_f16_sum_variant_runs_no_deeper_product_than_it_was_checked_at() {
    let coop = VARIANTS.iter().position(|v| v.name == "coop128x128_f16").expect("listed");
    let t64 = VARIANTS.iter().position(|v| v.name == "t64x64_8x8").expect("listed");
    let ms = Duration::from_millis;
    let times = [(ms(1), coop), (ms(2), t64), (ms(3), GENERAL)];
    let caps = |coop_f16| Caps {
        ordinal: 0,
        adapter: "test adapter".into(),
        features: wgpu::Features::all(),
        subgroup_sizes: [32, 32],
        coop_f16,
        coop_f16_sums: true,
    };
    let f16_only = GemmState::new(Box::leak(Box::new(caps(false))));
    // Such an adapter refuses the variant (`Caps::refusal`): the limit below is a guard.
    assert!(f16_only.caps.refusal(&VARIANTS[coop]).is_some_and(|why| why.contains("f16 sums only")));
    assert!(f16_only.f16_sums(coop) && !f16_only.f16_sums(t64));
    assert_eq!(f16_only.deeper(coop, &times, &[]), Some(t64));
    assert_eq!(f16_only.deeper(coop, &times, &[(ms(1), coop), (ms(2), GENERAL)]), Some(GENERAL), "finals decide");
    assert_eq!(f16_only.deeper(t64, &times, &[]), None);
    assert_eq!(GemmState::new(Box::leak(Box::new(caps(true)))).deeper(coop, &times, &[]), None, "f32 sums: no limit");
    let entry = Tuned { variant: coop, times: String::new(), shallow: Some((300, t64)) };
    assert_eq!(entry.for_depth(300), (coop, None));
    assert_eq!(entry.for_depth(17), (coop, None));
    let (v, why) = entry.for_depth(301);
    assert_eq!(v, t64);
    assert!(why.as_deref().is_some_and(|w| w.contains("`coop128x128_f16` sums in f16") && w.contains("k = 300")));
    assert_eq!(Tuned { variant: t64, times: String::new(), shallow: None }.for_depth(1 << 20), (t64, None));
}
