//! Accuracy of `vector_fns`'s functions over the `f32` range against `f64` references, their
//! special values, and the vector copies against the scalar code bit for bit.

use super::*;
use crate::backend::cpu::powers::{pow, pow_grad, PowKind};

/// The position of `x` among the floats in order (adjacent floats differ by 1; `-0` and
/// `+0` are both 0).
pub(crate) fn ordinal(x: f32) -> i64 {
    let b = x.to_bits();
    if b >> 31 == 1 {
        -((b & 0x7fff_ffff) as i64)
    } else {
        b as i64
    }
}

/// The distance in ulps of `got` from `want` rounded to `f32` (0 for two NaNs, infinite
/// for one).
pub(crate) fn ulps(got: f32, want: f64) -> u64 {
    let w = want as f32;
    match (got.is_nan(), w.is_nan()) {
        (true, true) => 0,
        (false, false) => (ordinal(got) - ordinal(w)).unsigned_abs(),
        _ => u64::MAX,
    }
}

/// Every `f32` a sweep visits: the whole range in steps of `STRIDE` bit patterns (both
/// signs, subnormals, infinities and NaNs included), a dense grid over `[-16, 16]`, and
/// the neighbourhoods of the kernels' branch points.
fn sweep() -> impl Iterator<Item = f32> {
    const STRIDE: usize = 2053;
    let whole = (0..=u32::MAX).step_by(STRIDE).map(f32::from_bits);
    let dense = (-160_000..=160_000).map(|i| i as f32 * 1e-4);
    let edges = [
        0.55f32,
        0.875,
        2.5,
        0.875 * std::f32::consts::SQRT_2,
        2.5 * std::f32::consts::SQRT_2,
        10.2,
        88.72,
        -87.33,
        -103.97,
    ]
    .into_iter()
    .flat_map(|e| [e, -e])
    .flat_map(|e| (-300..=300).map(move |k| f32::from_bits((e.to_bits() as i64 + k) as u32)));
    let special = [0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE, f32::MAX, f32::MIN, 1e-45];
    whole.chain(dense).chain(edges).chain(special)
}

/// Asserts `f` is within `max_ulps` of `reference` (rounded to `f32`) at every point of
/// [`sweep`]; with `abs`, a miss by at most `abs` in absolute terms also passes (the
/// derivatives' zero crossings, where the `f64` reference itself cancels).
fn check(name: &str, f: impl Fn(f32) -> f32, reference: impl Fn(f64) -> f64, max_ulps: u64, abs: f64) {
    let (mut worst, mut at, mut n) = (0, 0.0f32, 0usize);
    for x in sweep() {
        let (got, want) = (f(x), reference(x as f64));
        let u = ulps(got, want);
        if u > max_ulps && (got as f64 - want).abs() > abs {
            panic!("{name}({x:e}) = {got:e}, reference {want:e} ({u} ulp)");
        }
        if u > worst && u != u64::MAX {
            (worst, at) = (u, x);
        }
        n += 1;
    }
    assert!(n > 2_000_000, "{name}: the sweep visited {n} values");
    eprintln!("{name}: worst {worst} ulp at {at:e} over {n} values");
}

/// PyTorch's NaN at `-inf` for the functions whose formula multiplies it by 0.
fn nan_neg_inf(x: f64, y: f64) -> f64 {
    if x == f64::NEG_INFINITY {
        f64::NAN
    } else {
        y
    }
}

/// NaN at both infinities (the derivatives of those functions).
fn nan_inf(x: f64, y: f64) -> f64 {
    if x.is_infinite() {
        f64::NAN
    } else {
        y
    }
}

fn sigmoid_ref(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn exp_log_tanh_are_within_one_ulp_and_sigmoid_two() {
    check("exp", exp, f64::exp, 1, 0.0);
    check("log", log, f64::ln, 1, 0.0);
    check("tanh", tanh, f64::tanh, 1, 0.0);
    // Sigmoid computes in f32 (see `exp_neg_abs_f32`): 2 ulp.
    check("sigmoid", sigmoid, sigmoid_ref, 2, 0.0);
    check("rsqrt", rsqrt, |x| 1.0 / x.sqrt(), 1, 0.0);
}

/// The `f32` algorithms that `cpu::tune` may pick instead of the `f64` ones: 2 ulp.
#[test]
fn the_f32_exp_and_tanh_are_within_two_ulp() {
    check("exp_f32", exp_f32, f64::exp, 2, 0.0);
    check("tanh_f32", tanh_f32, f64::tanh, 2, 0.0);
    // The table within 1 ulp on [-6, 6], the f32 formula (2 ulp) beyond.
    check("tanh_table", tanh_table, f64::tanh, 2, 0.0);
    for i in -60_000..=60_000 {
        let x = i as f32 * 1e-4;
        let u = ulps(tanh_table(x), (x as f64).tanh());
        assert!(u <= 1, "tanh_table({x:e}): {u} ulp");
    }
    // Both sides of the break points (0.625 and the clamp at 10), every float near them.
    for x in [0.625f32, 10.0, 1e-30, 2e-38] {
        for k in -2000..=2000i32 {
            for v in [x, -x] {
                let y = f32::from_bits((v.to_bits() as i64 + k as i64) as u32);
                let u = ulps(tanh_f32(y), (y as f64).tanh());
                assert!(u <= 2, "tanh_f32({y:e}) = {:e}: {u} ulp", tanh_f32(y));
            }
        }
    }
}

#[test]
fn the_f32_algorithms_keep_the_special_values() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    assert_eq!((exp_f32(inf), exp_f32(-inf), exp_f32(89.0), exp_f32(-104.0), exp_f32(0.0)), (inf, 0.0, inf, 0.0, 1.0));
    assert_eq!((tanh_f32(inf), tanh_f32(-inf), tanh_f32(f32::MAX), tanh_f32(f32::MIN)), (1.0, -1.0, 1.0, -1.0));
    assert_eq!((tanh_f32(-0.0).to_bits(), tanh_f32(0.0).to_bits()), ((-0.0f32).to_bits(), 0));
    // Subnormal inputs: tanh x = x.
    assert_eq!(tanh_f32(1e-45), 1e-45);
    assert_eq!(tanh_f32(-3e-42), -3e-42);
    assert!(exp_f32(nan).is_nan() && tanh_f32(nan).is_nan() && tanh_f32(-nan).is_nan() && tanh_table(nan).is_nan());
    assert_eq!((tanh_table(inf), tanh_table(-inf), tanh_table(-0.0).to_bits()), (1.0, -1.0, (-0.0f32).to_bits()));
}

#[test]
fn erf_gelus_and_silu_are_within_one_ulp_and_the_exact_gelu_two() {
    check("erf", erf, libm::erf, 1, 0.0);
    // The exact GELU's table (`poly_tables`, on [-4, 4]) is within 2 ulp; its f64 path within 1.
    check("gelu", gelu, |x| nan_neg_inf(x, 0.5 * x * libm::erfc(-x * FRAC_1_SQRT_2)), 2, 0.0);
    let gelu_tanh_ref = |x: f64| {
        // 0.5 x (1 + tanh u), as x e^(2u) / (1 + e^(2u)) where u < 0 (no cancellation).
        let u = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
        let y = if u >= 0.0 { 0.5 * x * (1.0 + u.tanh()) } else { x * (2.0 * u).exp() / (1.0 + (2.0 * u).exp()) };
        nan_neg_inf(x, y)
    };
    check("gelu_tanh", gelu_tanh, gelu_tanh_ref, 1, 0.0);
    check("silu", silu, |x| nan_neg_inf(x, x * sigmoid_ref(x)), 1, 0.0);
}

#[test]
fn softplus_follows_pytorch_within_one_ulp() {
    for (beta, threshold) in [(1.0, 20.0), (2.0, 20.0), (0.5, 10.0), (1.0, 50.0)] {
        let reference = |x: f64| if x * beta > threshold { x } else { ((x * beta).exp()).ln_1p() / beta };
        check(&format!("softplus({beta}, {threshold})"), |x| softplus(x, beta, threshold), reference, 1, 0.0);
    }
}

#[test]
fn derivatives_are_within_two_ulp() {
    // Near a derivative's zero crossing its terms cancel, which multiplies the f64
    // approximations' error (1e-11 relative at most) there: 1e-12 absolute passes too.
    check(
        "silu'",
        silu_grad,
        |x| {
            let s = sigmoid_ref(x);
            nan_inf(x, s * (1.0 + x * (1.0 - s)))
        },
        2,
        1e-12,
    );
    check(
        "gelu'",
        gelu_grad,
        |x| {
            let cdf = 0.5 * libm::erfc(-x * FRAC_1_SQRT_2);
            nan_inf(x, cdf + x * (-0.5 * x * x).exp() * FRAC_1_SQRT_2PI)
        },
        2,
        1e-12,
    );
    check(
        "gelu_tanh'",
        gelu_tanh_grad,
        |x| {
            let u = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
            let s = sigmoid_ref(2.0 * u);
            nan_inf(x, s + x * s * (1.0 - s) * 2.0 * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044_715 * x * x))
        },
        2,
        1e-12,
    );
    check("erf'", erf_grad, |x| std::f64::consts::FRAC_2_SQRT_PI * (-x * x).exp(), 2, 0.0);
    check("softplus'", |x| softplus_grad(x, 1.0, 20.0), |x| if x > 20.0 { 1.0 } else { sigmoid_ref(x) }, 2, 0.0);
}

#[test]
fn pow_matches_libm_for_every_kind_of_exponent() {
    for p in [0.0, 1.0, 2.0, 3.0, 4.0, -1.0, -2.0, -3.0, -4.0, 0.5, -0.5, 1.5, 2.5, 1.0 / 3.0, 7.0, -7.0, 6.0, 0.1] {
        let kind = PowKind::of(p).expect("a finite exponent");
        check(&format!("pow(x, {p})"), |x| pow(x, kind), |x| x.powf(p), 1, 0.0);
        if p != 0.0 {
            let km1 = PowKind::of(p - 1.0).expect("finite");
            check(&format!("pow'(x, {p})"), |x| pow_grad(x, p, km1), |x| p * x.powf(p - 1.0), 2, 0.0);
        }
    }
    assert_eq!(PowKind::of(f64::NAN), None);
    assert_eq!(PowKind::of(2.0), Some(PowKind::SmallInt(2)));
    assert_eq!(PowKind::of(3.0), Some(PowKind::SmallInt(3)));
}

#[test]
fn special_values_are_libm_and_pytorch() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    assert_eq!((exp(inf), exp(-inf), exp(89.0), exp(-104.0)), (inf, 0.0, inf, 0.0));
    assert!(exp(nan).is_nan() && log(nan).is_nan() && log(-1.0).is_nan() && log(-0.0) == -inf);
    assert_eq!((log(0.0), log(inf), log(1.0)), (-inf, inf, 0.0));
    assert_eq!((tanh(inf), tanh(-inf), tanh(-0.0).to_bits()), (1.0, -1.0, (-0.0f32).to_bits()));
    assert_eq!((sigmoid(inf), sigmoid(-inf), sigmoid(-200.0)), (1.0, 0.0, 0.0));
    assert_eq!((erf(inf), erf(-inf), erf(-0.0).to_bits()), (1.0, -1.0, (-0.0f32).to_bits()));
    assert_eq!((gelu(inf), gelu_tanh(inf), silu(inf)), (inf, inf, inf));
    assert!(gelu(-inf).is_nan() && gelu_tanh(-inf).is_nan() && silu(-inf).is_nan());
    assert!(gelu_grad(inf).is_nan() && gelu_tanh_grad(-inf).is_nan() && silu_grad(inf).is_nan());
    assert_eq!((softplus(inf, 1.0, 20.0), softplus(-inf, 1.0, 20.0)), (inf, 0.0));
    assert_eq!((rsqrt(0.0), rsqrt(-0.0), rsqrt(inf)), (inf, -inf, 0.0));
    assert!(rsqrt(-1.0).is_nan());
    for f in [exp, log, tanh, sigmoid, erf, gelu, gelu_tanh, silu, rsqrt, silu_grad, gelu_grad, gelu_tanh_grad] {
        assert!(f(nan).is_nan());
    }
    // pow's corners (C99 Annex F, as PyTorch's std::pow).
    let k = |p: f64| PowKind::of(p).expect("finite");
    assert_eq!(pow(nan, k(0.0)), 1.0);
    assert_eq!((pow(-0.0, k(-1.0)), pow(0.0, k(-1.0)), pow(-0.0, k(-2.0))), (-inf, inf, inf));
    assert_eq!((pow(-0.0, k(0.5)).to_bits(), pow(-inf, k(0.5))), (0, inf));
    assert!(pow(-8.0, k(1.0 / 3.0)).is_nan());
    assert_eq!(
        (pow(-inf, k(1.0 / 3.0)), pow(-inf, k(-2.5)), pow(-2.0, k(5.0)), pow(1.0, k(1e9))),
        (inf, 0.0, -32.0, 1.0)
    );
}
