//! The `f32` elementwise functions of the CPU kernels (`exp`, `log`, `tanh`, `sigmoid`,
//! `erf`, both GELUs, SiLU, softplus, `pow`, `rsqrt` and the derivatives that need a
//! transcendental function), written so that a loop over them becomes vector code.
//!
//! libm's `tanhf`, `expf` or `erff` is a scalar call per element: a tanh over a
//! `[2, 128, 3072]` tensor took 14.9 ms where PyTorch's vectorised one takes 0.26 (2-vCPU
//! Emerald Rapids). Here every function is branch-free straight-line arithmetic (special
//! values through selects, never a call), `#[inline(always)]`, so the elementwise loops
//! ([`super::isa_loops::write_items`]) that inline it are compiled to AVX-512 or AVX2 code,
//! picked at run time.
//!
//! **Each is computed in `f64` and rounded to `f32` once.** The `f64` cores ([`exp64`],
//! [`log64`], the `erf` pieces) are polynomials accurate to about `1e-10` relative, far
//! below `f32`'s half-ulp (`3e-8`), so every function here is within 1 ulp of the
//! correctly rounded result over the whole `f32` range, subnormal results included (they
//! are normal `f64` values, rounded once), and the cancellations that make `f32` formulas
//! lose digits (`1 + erf(x)` for negative `x`, `1 + tanh(u)` in the tanh-GELU's tail,
//! `x^3` inside it) cost nothing: `f64` has 29 bits to spare. The price is lanes (eight
//! `f64` per AVX-512 register instead of sixteen `f32`), which these memory-bound loops
//! hardly see. The tests sweep the `f32` range against `f64` references. The exceptions:
//! `sigmoid` computes in `f32` (16 lanes; within 2 ulp), where the `f64` route was twice
//! PyTorch's time; the exact GELU and SiLU look their factor up in the piecewise
//! polynomials of [`super::poly_tables`] over the range where activations lie (GELU within 2
//! ulp there, SiLU within 1), the `f64` route elsewhere.
//!
//! Multiply-adds are written as `mul_add`, always fused (an instruction in the AVX2 and
//! AVX-512 copies), so every copy gives the same bits.
//!
//! Non-finite inputs follow PyTorch: NaN propagates; `gelu(-inf)`, `gelu_tanh(-inf)` and
//! `silu(-inf)` are NaN (PyTorch's formulas multiply `-inf` by 0), their derivatives are
//! NaN at both infinities for the same reason.

use std::f64::consts::{FRAC_1_SQRT_2, LOG2_E};

/// `1.5 * 2^52`: adding and subtracting it rounds an `f64` below `2^51` in magnitude to
/// the nearest integer, which then sits in the low bits of the sum.
const ROUND: f64 = 6_755_399_441_055_744.0;

/// `ln 2` in two parts (fdlibm's): `n * LN2_HI` is exact for the `|n| < 2^11` here.
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000); // 6.93147180369123816490e-01
/// The rest of `ln 2`.
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76); // 1.90821492927058770002e-10

/// `x` evaluated at the polynomial with coefficients `c` (lowest degree first), by Horner.
#[inline(always)]
fn poly<const N: usize>(x: f64, c: &[f64; N]) -> f64 {
    let mut p = c[N - 1];
    for &k in c[..N - 1].iter().rev() {
        p = p.mul_add(x, k);
    }
    p
}

/// `e^x`, relative error below `3e-13`, for `x` clamped to `[-700, 700]` (far past where
/// an `f32` result overflows or underflows); NaN for NaN. `x = n ln 2 + r`, `|r| <= ln 2 /
/// 2`, Taylor to degree 10 for `e^r`, `2^n` built in the exponent bits.
#[inline(always)]
pub(crate) fn exp64(x: f64) -> f64 {
    // 1/k! for k = 0..=10.
    const C: [f64; 11] = [
        1.0,
        1.0,
        0.5,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5040.0,
        1.0 / 40320.0,
        1.0 / 362_880.0,
        1.0 / 3_628_800.0,
    ];
    let x = x.clamp(-700.0, 700.0); // NaN passes through `clamp`
    let t = x.mul_add(LOG2_E, ROUND);
    let n = t - ROUND;
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    // n read from the low bits of `t` (integer arithmetic: no float-to-int conversion,
    // which AVX2 does not have for 64-bit integers).
    let ni = (t.to_bits() as i64).wrapping_sub(ROUND.to_bits() as i64);
    let scale = f64::from_bits((ni.wrapping_add(1023) as u64) << 52);
    poly(r, &C) * scale
}

/// `ln x` for a positive, finite, normal `x` (every `f32` but 0 is one as an `f64`),
/// relative error below `1e-13`: `x = 2^e m` with `m` in `[sqrt(1/2), sqrt(2))`, then `ln
/// m = 2 atanh(s)`, `s = (m - 1) / (m + 1)`, by its series to `s^13`.
#[inline(always)]
fn log64_core(x: f64) -> f64 {
    // 1 / (2k + 1) for k = 0..=6.
    const C: [f64; 7] = [1.0, 1.0 / 3.0, 1.0 / 5.0, 1.0 / 7.0, 1.0 / 9.0, 1.0 / 11.0, 1.0 / 13.0];
    const MANTISSA: u64 = (1 << 52) - 1;
    let bits = x.to_bits();
    let m = f64::from_bits((bits & MANTISSA) | 1.0f64.to_bits());
    // The biased exponent as an `f64` by the same exponent-bits trick as `ROUND` (an
    // integer below 2^52 in the low bits of 2^52), not an int-to-float conversion.
    let e = f64::from_bits((bits >> 52) | (1075u64 << 52)) - 4_503_599_627_370_496.0 - 1023.0;
    let big = m > std::f64::consts::SQRT_2;
    let (m, e) = if big { (m * 0.5, e + 1.0) } else { (m, e) };
    let s = (m - 1.0) / (m + 1.0);
    let z = s * s;
    e.mul_add(LN2_HI, e.mul_add(LN2_LO, 2.0 * s * poly(z, &C)))
}

/// `ln x` for any `f64` that came from an `f32`: [`log64_core`] with libm's special values
/// (`-inf` at 0, NaN below 0 and for NaN, `inf` at `inf`).
#[inline(always)]
pub(crate) fn log64(x: f64) -> f64 {
    let ok = x > 0.0 && x < f64::INFINITY;
    let y = log64_core(if ok { x } else { 1.0 });
    if ok {
        y
    } else if x == 0.0 {
        f64::NEG_INFINITY
    } else if x == f64::INFINITY {
        x
    } else {
        f64::NAN
    }
}

/// `tanh x`: an odd polynomial below 0.55 (relative error `3.5e-12`), `1 - 2 / (e^(2|x|) +
/// 1)` above (no cancellation there: the result is above one half).
#[inline(always)]
pub(crate) fn tanh64(x: f64) -> f64 {
    // (tanh(x) / x - 1) / x^2 on [0, 0.55^2], a least-squares fit.
    const P: [f64; 7] = [
        -0.333_333_333_322_870_8,
        0.133_333_329_886_689_44,
        -0.053_968_068_358_416_16,
        0.021_865_726_307_916_333,
        -0.008_826_634_572_787_082,
        0.003_406_224_225_294,
        -0.000_967_185_971_402_628_9,
    ];
    // On |x|, the sign restored at the end (odd, and -0 stays -0).
    let a = x.abs();
    let z = a * a;
    let small = (a * z).mul_add(poly(z, &P), a);
    // exp64 clamps: a huge or infinite `a` gives 1 - 2 / (finite huge) = 1, NaN stays NaN.
    let large = 1.0 - 2.0 / (exp64(2.0 * a) + 1.0);
    (if a < 0.55 { small } else { large }).copysign(x)
}

/// `1 / (1 + e^-x)`: one division, no cancellation on either tail.
#[inline(always)]
pub(crate) fn sigmoid64(x: f64) -> f64 {
    1.0 / (1.0 + exp64(-x))
}

/// `erf(x) / x - 1` on `x^2` in `[0, 0.875^2]` (a least-squares fit, error `4.7e-12`
/// relative to `erf`): `erf(x) = x + x * ERF_SMALL(x^2)`, the exact `x` carrying most of
/// the value. (Degree 7, not 6 at `2.3e-10`: GELU's derivative `Phi(x) + x phi(x)` cancels
/// near its zero at `x = -0.75`, multiplying this error.)
const ERF_SMALL: [f64; 8] = [
    0.128_379_167_091_283_1,
    -0.376_126_388_317_908_57,
    0.112_837_896_929_516_7,
    -0.026_865_961_556_887_114,
    0.005_222_888_938_405_695,
    -0.000_851_736_383_078_644,
    0.000_115_615_258_418_577_67,
    -1.069_847_955_378_899_8e-5,
];

/// `a erfc(a) e^(a^2)` on `a` in `[0.875, 2.5]`, as a polynomial in `1 / a - ERFC_CENTER.0`
/// (fit error `3.8e-10` relative).
const ERFC_NEAR: [f64; 11] = [
    0.464_565_698_456_005_5,
    -0.168_198_229_510_161_3,
    0.021_802_764_152_721_81,
    0.036_137_824_464_602_66,
    -0.046_552_347_460_631_93,
    0.035_339_558_660_523_82,
    -0.017_891_161_632_790_253,
    0.002_735_891_237_763_883,
    0.008_102_118_261_481_375,
    -0.016_924_626_744_522_716,
    0.014_884_652_766_334_33,
];

/// The same on `[2.5, 10.2]` (fit error `4.5e-12`), past which `e^(-a^2)` underflows `f32`.
const ERFC_FAR: [f64; 11] = [
    0.548_114_773_856_887,
    -0.119_117_306_485_271_72,
    -0.168_431_973_357_400_5,
    0.219_620_661_153_381_44,
    -0.026_744_275_756_610_834,
    -0.275_219_247_748_018_6,
    0.411_931_614_553_579,
    -0.088_803_499_746_982_62,
    -0.735_110_484_533_729,
    1.341_976_526_274_79,
    -0.492_672_190_725_719_05,
];

/// The centres of `1 / a` for [`ERFC_NEAR`] and [`ERFC_FAR`] (midpoints of their ranges).
const ERFC_CENTER: (f64, f64) = (0.771_428_571_428_571_4, 0.249_019_607_843_137_26);

/// `erfc(a)` for `a >= 0.875` (any value elsewhere; `0` at `inf`, NaN for NaN): `e^(-a^2)`
/// times the fitted `a erfc(a) e^(a^2)` over `a`. Each lane picks its coefficients (a
/// select per coefficient, not two polynomials).
#[inline(always)]
fn erfc_tail(a: f64) -> f64 {
    let near = a < 2.5;
    let r = 1.0 / a; // one division, used twice
    let t = r - if near { ERFC_CENTER.0 } else { ERFC_CENTER.1 };
    let mut p = if near { ERFC_NEAR[10] } else { ERFC_FAR[10] };
    for i in (0..10).rev() {
        p = p.mul_add(t, if near { ERFC_NEAR[i] } else { ERFC_FAR[i] });
    }
    exp64(-a * a) * p * r
}

/// `erf x`: the small-argument polynomial below 0.875, `1 - erfc(|x|)` above.
#[inline(always)]
pub(crate) fn erf64(x: f64) -> f64 {
    let a = x.abs();
    let small = a.mul_add(poly(a * a, &ERF_SMALL), a);
    let large = 1.0 - erfc_tail(a);
    (if a < 0.875 { small } else { large }).copysign(x)
}

/// The standard normal CDF `Phi(x) = (1 + erf(x / sqrt 2)) / 2`, through `erfc` on the
/// negative tail (no cancellation: `Phi(-10)` keeps its digits).
#[inline(always)]
pub(crate) fn normal_cdf64(x: f64) -> f64 {
    let z = x * FRAC_1_SQRT_2;
    let a = z.abs();
    let small = 0.5 * (1.0 + z.mul_add(poly(z * z, &ERF_SMALL), z));
    let tail = 0.5 * erfc_tail(a);
    if a < 0.875 {
        small
    } else if x > 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// `1 / sqrt(2 pi)`.
const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// `sqrt(2 / pi)`, the tanh-GELU's inner factor.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

/// The tanh-GELU's `2u = 2 sqrt(2/pi) (x + 0.044715 x^3)` and its derivative in `x`.
#[inline(always)]
fn gelu_tanh_inner(x: f64) -> (f64, f64) {
    let z = x * x;
    let v = 2.0 * SQRT_2_OVER_PI * (0.044_715 * z).mul_add(x, x);
    let dv = 2.0 * SQRT_2_OVER_PI * (3.0 * 0.044_715f64).mul_add(z, 1.0);
    (v, dv)
}

/// NaN where `x` is `-inf` (the GELUs' and SiLU's value there, as PyTorch's `-inf * 0`),
/// `y` elsewhere.
#[inline(always)]
fn nan_at_neg_inf(x: f64, y: f64) -> f64 {
    if x == f64::NEG_INFINITY {
        f64::NAN
    } else {
        y
    }
}

/// NaN where `x` is infinite (the GELUs' and SiLU's derivatives there: PyTorch's formulas
/// give `inf * 0`), `y` elsewhere.
#[inline(always)]
fn nan_at_inf(x: f64, y: f64) -> f64 {
    if x.abs() == f64::INFINITY {
        f64::NAN
    } else {
        y
    }
}

// The `f32` functions: each widens, computes in `f64` and rounds once.

/// `e^x`.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    exp64(x as f64) as f32
}

/// `ln x`.
#[inline(always)]
pub(crate) fn log(x: f32) -> f32 {
    log64(x as f64) as f32
}

/// `tanh x`.
#[inline(always)]
pub(crate) fn tanh(x: f32) -> f32 {
    tanh64(x as f64) as f32
}

// The `f32` algorithms: the second variant of the kernels that `cpu::tune` chooses by
// measurement, for CPUs where the `f64` route is slow. Within 2 ulp of the correctly
// rounded value where the `f64` one is within 1 (tested over the same sweep).

/// `e^x` in `f32` ([`super::isa_loops::exp_f32`], fused): within 2 ulp wherever the result
/// is a normal float, `+inf` above 88.72, `0` below -103.9; NaN for NaN.
///
/// Why it exists: [`exp`]'s `f64` route is a degree-10 polynomial on eight lanes, 2.8x
/// PyTorch's time on a 2-vCPU Emerald Rapids (one thread, [2, 128, 3072]), where this one,
/// degree 6 on sixteen lanes, needs a quarter of the multiply-adds per element.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    super::isa_loops::exp_f32::<true>(x)
}

/// `(tanh(x) / x - 1) / x^2` on `x^2` in `[0, 0.625^2]`, lowest degree first: a weighted
/// least-squares fit of the relative error of `tanh` (0.89 ulp evaluated in `f32`, checked
/// on 2M points; refit by `nn-core/tools/tanh_fit.py`).
const TANH_P32: [f32; 5] = [-0.333_332_8, 0.133_313_82, -0.053_735_32, 0.020_626_292, -0.005_691_985_6];

/// `tanh x` in `f32`: `x + x^3 P(x^2)` below 0.625, `1 - 2 / (e^(2|x|) + 1)` above (no
/// cancellation: the result is above one half, the quotient below 0.45), the sign put
/// back; within 2 ulp of the correctly rounded value. `|x| >= 10` gives 1 exactly (the
/// exponential is clamped at `e^20`), NaN stays NaN.
///
/// Why it exists: [`tanh`]'s `f64` route pays for an `f64` division per element, and on
/// Intel's cores (Sapphire and Emerald Rapids) a 512-bit `vdivpd` holds the divider for
/// about 16 cycles, two per element; with the `f64` exponential's 20 multiply-adds per
/// eight elements, tanh took 4x PyTorch's time there (0.31x on Zen 5). Here: sixteen lanes,
/// an `f32` division (half the divider's time per element) and a degree-6 exponential.
#[inline(always)]
pub(crate) fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let z = a * a;
    let mut p = TANH_P32[4];
    for &k in TANH_P32[..4].iter().rev() {
        p = p.mul_add(z, k);
    }
    let small = (a * z).mul_add(p, a);
    // `min` drops a NaN `a` (giving 20): the select below takes `small` then, which is NaN.
    let e = super::isa_loops::exp_f32::<true>((a + a).min(20.0));
    let large = 1.0 - 2.0 / (e + 1.0);
    (if a >= 0.625 { large } else { small }).copysign(x)
}

/// `tanh x` through the table [`super::poly_tables::TANH_OVER_X`] on `[-6, 6]` (within 1 ulp
/// there), [`tanh_f32`] elsewhere (within 2): no division where the table covers `x`, and
/// a lookup the AVX-512 loop does with `vpermt2ps` from registers.
#[inline(always)]
pub(crate) fn tanh_table(x: f32) -> f32 {
    let t = &super::poly_tables::TANH_OVER_X;
    if t.covers(x) {
        t.eval(x)
    } else {
        tanh_f32(x)
    }
}

/// `e^(-|x|)` in `f32` as `(s, n)` with `e^(-|x|) = (1 + s) 2^n`: Cody-Waite reduction
/// and Cephes' `expf` polynomial for `e^r - 1`, kept apart from the 1 so that a product
/// with it rounds once. For sigmoid, which PyTorch computes in `f32` fast enough that the
/// `f64` route is slower (on the 2-vCPU Zen 5 it took 373 us over [2, 128, 3072] against
/// PyTorch's 171).
#[inline(always)]
fn exp_neg_abs_f32(x: f32) -> (f32, i32) {
    use super::isa_loops::{EXP_POLY, LN2_HI, LN2_LO, ROUND};
    // Clamped where the result is 0 in f32 whatever follows, NaN kept.
    let xc = if x.is_nan() { x } else { (-x.abs()).max(-112.0) };
    let t = xc.mul_add(std::f32::consts::LOG2_E, ROUND);
    let n = t - ROUND;
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, xc));
    let mut p = EXP_POLY[0];
    for &k in &EXP_POLY[1..] {
        p = p.mul_add(r, k);
    }
    let s = p.mul_add(r * r, r);
    (s, t.to_bits() as i32 - ROUND.to_bits() as i32)
}

/// `v 2^n` for `n` in `[-162, 0]`, as two exact power-of-two factors (each normal: `n1 +
/// 127` and `n2 + 127` stay in `46..=127`), so the one rounding is the last product's
/// (into the subnormal range where the result is).
#[inline(always)]
fn scale_f32(v: f32, n: i32) -> f32 {
    let (n1, n2) = (n >> 1, n - (n >> 1));
    v * f32::from_bits(((n1 + 127) as u32) << 23) * f32::from_bits(((n2 + 127) as u32) << 23)
}

/// `1 / (1 + e^-x)` in `f32`: with `t = e^(-|x|)`, `1 / (1 + t)` for `x >= 0` and
/// `t / (1 + t)` below, one division either way; within 2 ulp of the correctly rounded
/// value, subnormal results included. (SiLU stays in `f64`: an `f32` version, `x (1 + s)`
/// over `1 + t` scaled by `2^n`, was 3 ulp off at `x = -5.94`, the rounding of `1 + t`
/// adding to the product's and the quotient's.)
#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    let (s, n) = exp_neg_abs_f32(x);
    let t = scale_f32(1.0 + s, n);
    (if x >= 0.0 { 1.0 } else { t }) / (1.0 + t)
}

/// `x sigmoid(x)`: the table of [`super::poly_tables::SIGMOID`] on `[-8, 8]`, `f64` elsewhere.
#[inline(always)]
pub(crate) fn silu(x: f32) -> f32 {
    let t = &super::poly_tables::SIGMOID;
    if t.covers(x) {
        t.eval(x)
    } else {
        let x = x as f64;
        nan_at_neg_inf(x, x / (1.0 + exp64(-x))) as f32
    }
}

/// SiLU's derivative `s (1 + x (1 - s))`, `s = sigmoid(x)`.
#[inline(always)]
pub(crate) fn silu_grad(x: f32) -> f32 {
    let x = x as f64;
    let e = exp64(-x);
    let s = 1.0 / (1.0 + e);
    nan_at_inf(x, s * x.mul_add(e * s, 1.0)) as f32
}

/// `erf x`.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    erf64(x as f64) as f32
}

/// `erf`'s derivative `2 / sqrt(pi) e^(-x^2)`.
#[inline(always)]
pub(crate) fn erf_grad(x: f32) -> f32 {
    let x = x as f64;
    (std::f64::consts::FRAC_2_SQRT_PI * exp64(-x * x)) as f32
}

/// Exact GELU, `x Phi(x)`: the table of [`super::poly_tables::NORMAL_CDF`] on `[-4, 4]` (within
/// 2 ulp), `f64` elsewhere.
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    let t = &super::poly_tables::NORMAL_CDF;
    if t.covers(x) {
        t.eval(x)
    } else {
        let x = x as f64;
        nan_at_neg_inf(x, x * normal_cdf64(x)) as f32
    }
}

/// Exact GELU's derivative `Phi(x) + x phi(x)`.
#[inline(always)]
pub(crate) fn gelu_grad(x: f32) -> f32 {
    let x = x as f64;
    let pdf = FRAC_1_SQRT_2PI * exp64(-0.5 * x * x);
    nan_at_inf(x, x.mul_add(pdf, normal_cdf64(x))) as f32
}

/// The tanh GELU, `x / 2 (1 + tanh u)`, computed as `x sigmoid(2u)` (the same function;
/// `1 + tanh u` cancels for negative `u`).
#[inline(always)]
pub(crate) fn gelu_tanh(x: f32) -> f32 {
    let x = x as f64;
    let (v, _) = gelu_tanh_inner(x);
    nan_at_neg_inf(x, x / (1.0 + exp64(-v))) as f32
}

/// The tanh GELU's derivative: `s + x s (1 - s) v'`, `s = sigmoid(v)`, `v = 2u`.
#[inline(always)]
pub(crate) fn gelu_tanh_grad(x: f32) -> f32 {
    let x = x as f64;
    let (v, dv) = gelu_tanh_inner(x);
    let e = exp64(-v);
    let s = 1.0 / (1.0 + e);
    nan_at_inf(x, (x * s * e * s).mul_add(dv, s)) as f32
}

/// `ln(1 + t)` for `t >= 0`: the series where `1 + t` would round `t` away, `ln` of it
/// elsewhere.
#[inline(always)]
fn log1p64(t: f64) -> f64 {
    let series = t * (1.0 - t * (0.5 - t * (1.0 / 3.0 - t * 0.25)));
    if t < 1e-4 {
        series
    } else {
        log64(1.0 + t)
    }
}

/// PyTorch's softplus: `x` where `beta x > threshold`, else `ln(1 + e^(beta x)) / beta`.
/// (Where `beta x` exceeds 36 below a larger threshold, `x` too: the `f64` value there.)
#[inline(always)]
pub(crate) fn softplus(x: f32, beta: f64, threshold: f64) -> f32 {
    let x = x as f64;
    let bx = x * beta;
    let y = log1p64(exp64(bx)) / beta;
    if bx > threshold || bx > 36.0 {
        x as f32
    } else {
        y as f32
    }
}

/// Softplus's derivative: `sigmoid(beta x)`, 1 above the threshold.
#[inline(always)]
pub(crate) fn softplus_grad(x: f32, beta: f64, threshold: f64) -> f32 {
    let bx = x as f64 * beta;
    if bx > threshold {
        1.0
    } else {
        sigmoid64(bx) as f32
    }
}

/// `1 / sqrt(x)`, correctly rounded in `f64` and then to `f32` (`inf` at `+0`, `-inf` at
/// `-0`, NaN below 0, as PyTorch).
#[inline(always)]
pub(crate) fn rsqrt(x: f32) -> f32 {
    (1.0 / (x as f64).sqrt()) as f32
}

#[cfg(test)]
#[path = "vector_fns_tests.rs"]
pub(crate) mod tests;
