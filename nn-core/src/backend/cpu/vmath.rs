//! Row kernels written so the compiler vectorizes them, compiled twice: for the baseline
//! target and with AVX2 and FMA, picked at run time (the default build targets plain
//! x86-64, whose SSE2 vectors are a quarter of what this project's CPUs have).
//!
//! The one math function here, [`exp_f32`], is branch-free so that a loop over it becomes
//! vector code; libm's `expf` is a scalar call per element (a softmax over 262k scores
//! spent 8% of a Transformer step in it, measured on a 2-core Zen 4).

use std::mem::MaybeUninit;

/// `e^x` in `f32` without branches: `x = n ln 2 + r` with `|r| <= ln 2 / 2` (Cody-Waite:
/// `ln 2` in two parts), Cephes' degree-6 polynomial for `e^r`, then `2^n` applied as two
/// exact power-of-two factors so that results down to the subnormal range are right.
/// Within 2 ulp of the exact value wherever the result is a normal float (tested against
/// `f64::exp`); `+inf` above 88.72, `0` below -103.9 and for `-inf`, NaN for NaN.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer (|v| < 2^22 here)
    // without `round`, which SSE2 has no instruction for.
    const ROUND: f32 = 12_582_912.0;
    let xc = x.clamp(-104.0, 88.8); // NaN passes through `clamp`
    let t = xc * LOG2E + ROUND;
    let n = t - ROUND;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e = p * (r * r) + r + 1.0;
    // n in [-150, 128], read from the low bits of `t` (integer arithmetic only: a float
    // to int cast is a scalar sequence, it saturates and checks for NaN; a NaN `x` gives
    // a NaN `e`, whatever the scale). Each half of n is a normal power of two.
    let ni = t.to_bits() as i32 - ROUND.to_bits() as i32;
    let (n1, n2) = (ni >> 1, ni - (ni >> 1));
    let s1 = f32::from_bits(((n1 + 127) as u32) << 23);
    let s2 = f32::from_bits(((n2 + 127) as u32) << 23);
    e * s1 * s2
}

/// Lanes of the vector accumulators below (two AVX2 registers of `f32`).
const LANES: usize = 16;

/// Lanes of the exponential pass (one AVX2 register): with sixteen, its temporaries and
/// constants outnumber the sixteen registers and spill (measured: softmax of 4096 rows of
/// 64, 330 -> 308 us at one thread on a 2-vCPU Xeon).
const EXP_LANES: usize = 8;

/// Softmax (or log-softmax) of each contiguous row of `n` elements of `x` into `y`.
#[inline(always)]
fn softmax_rows_body(x: &[f32], y: &mut [MaybeUninit<f32>], n: usize, log: bool) {
    for (xs, ys) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
        // The maximum: lane-wise, then across lanes (NaN need no care: a NaN in the row
        // makes its sum NaN, so every output of the row is NaN, as in PyTorch).
        let mut lanes = [f32::NEG_INFINITY; LANES];
        let mut chunks = xs.chunks_exact(LANES);
        for c in &mut chunks {
            for (l, &v) in lanes.iter_mut().zip(c) {
                *l = if v > *l { v } else { *l };
            }
        }
        let mut m = chunks.remainder().iter().fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
        // Across lanes in halves (vector shuffles, not sixteen dependent steps).
        let l = fold_lanes(lanes, |a, b| if b > a { b } else { a });
        m = if l > m { l } else { m };
        if m == f32::NEG_INFINITY {
            m = 0.0; // all -inf: 0/0 = NaN below, as PyTorch
        }
        let mut sums = [0.0f32; EXP_LANES];
        let mut yc = ys.chunks_exact_mut(EXP_LANES);
        let mut xc = xs.chunks_exact(EXP_LANES);
        for (yo, xi) in (&mut yc).zip(&mut xc) {
            for ((s, o), &v) in sums.iter_mut().zip(yo.iter_mut()).zip(xi) {
                let e = exp_f32(v - m);
                o.write(e);
                *s += e;
            }
        }
        let mut s: f32 = 0.0;
        for (o, &v) in yc.into_remainder().iter_mut().zip(xc.remainder()) {
            let e = exp_f32(v - m);
            o.write(e);
            s += e;
        }
        s += fold_lanes(sums, |a, b| a + b);
        if log {
            // (x - m) - ln s, in this order: m + ln s would round away ln s's digits
            // when m is large.
            let ls = s.ln();
            for (o, &v) in ys.iter_mut().zip(xs) {
                o.write((v - m) - ls);
            }
        } else {
            let r = 1.0 / s;
            for o in ys.iter_mut() {
                // SAFETY: the loops above wrote every output of the row.
                let e = unsafe { o.assume_init() };
                o.write(e * r);
            }
        }
    }
}

/// `f` folded over `W` lanes (a power of two) pairwise, halving the width each step (an associative `f`:
/// max or a sum, whose reassociation is within the kernel's tolerance).
#[inline(always)]
fn fold_lanes<const W: usize>(mut lanes: [f32; W], f: impl Fn(f32, f32) -> f32) -> f32 {
    const { assert!(W.is_power_of_two(), "fold_lanes: a width that halves down to one lane") };
    let mut w = W;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            lanes[i] = f(lanes[i], lanes[i + w]);
        }
    }
    lanes[0]
}

/// The baseline-target copy of [`softmax_rows_body`].
fn softmax_rows_base(x: &[f32], y: &mut [MaybeUninit<f32>], n: usize, log: bool) {
    softmax_rows_body(x, y, n, log)
}

/// The AVX2 + FMA copy of [`softmax_rows_body`].
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_rows_avx2(x: &[f32], y: &mut [MaybeUninit<f32>], n: usize, log: bool) {
    softmax_rows_body(x, y, n, log)
}

/// Writes the items of `items` into `slots` in order until either ends; how many it
/// wrote. The elementwise kernels' inner loop: the iterator (a map over slices) is inlined
/// here, so on the AVX2 copy its arithmetic is AVX2 vector code.
#[inline]
pub(crate) fn write_items<U, I: Iterator<Item = U>>(slots: &mut [std::mem::MaybeUninit<U>], items: I) -> usize {
    #[inline(always)]
    fn body<U, I: Iterator<Item = U>>(slots: &mut [std::mem::MaybeUninit<U>], items: I) -> usize {
        let mut written = 0;
        for (slot, v) in slots.iter_mut().zip(items) {
            slot.write(v);
            written += 1;
        }
        written
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn body_avx2<U, I: Iterator<Item = U>>(slots: &mut [std::mem::MaybeUninit<U>], items: I) -> usize {
        body(slots, items)
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { body_avx2(slots, items) };
    }
    body(slots, items)
}

/// Runs `f` from a function compiled with AVX2 and FMA when the CPU has them, so that the
/// loops `f` inlines (a reduction's row sums and row adds) are vectorized 8 lanes wide
/// instead of the baseline target's 4.
#[inline]
pub(crate) fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { run_avx2(f) };
    }
    f()
}

/// Whether this CPU runs the AVX2 + FMA copies (checked once).
#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

/// Softmax (or log-softmax) along contiguous rows of `n` elements: `x` and `y` hold whole
/// rows (`n > 0`, lengths equal multiples of `n`).
pub(crate) fn softmax_rows(x: &[f32], y: &mut [MaybeUninit<f32>], n: usize, log: bool) {
    debug_assert!(n > 0 && x.len() == y.len() && x.len() % n == 0);
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { softmax_rows_avx2(x, y, n, log) };
    }
    softmax_rows_base(x, y, n, log)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The output `f` writes into uninitialized room for `x.len()` values.
    fn filled(x: &[f32], f: impl FnOnce(&mut [MaybeUninit<f32>])) -> Vec<f32> {
        let mut y = Vec::with_capacity(x.len());
        f(&mut y.spare_capacity_mut()[..x.len()]);
        // SAFETY: the softmax rows write every output.
        unsafe { y.set_len(x.len()) };
        y
    }

    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn exp_is_within_two_ulp_of_the_exact_value() {
        let mut worst = 0;
        let mut x = -87.0f32;
        while x < 88.7 {
            let exact = (x as f64).exp() as f32;
            let u = ulps(exp_f32(x), exact);
            assert!(u <= 2, "exp({x}) = {} against {exact} ({u} ulp)", exp_f32(x));
            worst = worst.max(u);
            x += 0.000_731;
        }
        assert!(worst >= 1, "a perfect polynomial is suspicious: the sweep did not run");
    }

    #[test]
    fn exp_edge_cases() {
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-200.0), 0.0);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert!(exp_f32(f32::NAN).is_nan());
        assert!(exp_f32(88.7).is_finite());
        // The subnormal range: close to the exact value in absolute terms.
        for x in [-88.0f32, -95.0, -100.0, -103.0] {
            let exact = (x as f64).exp();
            assert!((exp_f32(x) as f64 - exact).abs() <= 2.0 * f32::from_bits(1) as f64, "exp({x})");
        }
    }

    #[test]
    fn softmax_rows_match_a_reference_on_both_paths() {
        for n in [1, 3, 16, 17, 64, 100] {
            let x: Vec<f32> = (0..3 * n).map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.7).collect();
            for log in [false, true] {
                let want: Vec<f64> = x
                    .chunks(n)
                    .flat_map(|r| {
                        let m = r.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
                        let s: f64 = r.iter().map(|&v| (v as f64 - m).exp()).sum();
                        r.iter().map(move |&v| if log { v as f64 - m - s.ln() } else { (v as f64 - m).exp() / s })
                    })
                    .collect();
                let y = filled(&x, |y| softmax_rows_base(&x, y, n, log));
                let z = filled(&x, |z| softmax_rows(&x, z, n, log));
                for ((a, b), w) in y.iter().zip(&z).zip(&want) {
                    assert!((*a as f64 - w).abs() <= 1e-6 * w.abs().max(1.0), "n={n} log={log}: {a} vs {w}");
                    assert!((*b as f64 - w).abs() <= 1e-6 * w.abs().max(1.0), "n={n} log={log}: {b} vs {w}");
                }
            }
        }
        // A NaN makes its row NaN; an all -inf row is NaN; other rows are untouched.
        let x = [1.0, f32::NAN, f32::NEG_INFINITY, f32::NEG_INFINITY, 0.0, 0.0];
        let y = filled(&x, |y| softmax_rows(&x, y, 2, false));
        assert!(y[..4].iter().all(|v| v.is_nan()), "{y:?}");
        assert_eq!(&y[4..], &[0.5, 0.5]);
    }
}
