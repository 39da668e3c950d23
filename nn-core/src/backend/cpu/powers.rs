//! `x^p` for a constant `p` on the CPU: [`PowKind`], the way a power is computed, decided
//! once per kernel, and [`with_pow!`], which builds one closure per kind so that the loop
//! around it is straight-line code.

use super::vector_fns::{exp64, log64};

/// How `x^p` is computed for a constant `p`, decided once per kernel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum PowKind {
    /// `p = 0`: 1, NaN included (libm's `pow(NaN, 0) = 1`).
    One,
    /// A small integer exponent (`|p| <= 4`): repeated products in `f64` (exact before
    /// the one rounding for `|p| <= 2`), the reciprocal for negative `p`.
    SmallInt(i32),
    /// `p = 1/2`: `sqrt`, with `pow`'s values at `-0` (+0) and `-inf` (+inf).
    Sqrt,
    /// Any other `p`: `e^(p ln |x|)` in `f64`, the sign of an odd integer power restored,
    /// NaN for a negative base and a non-integer `p`.
    General {
        /// The exponent.
        p: f64,
        /// Whether `p` is an odd integer (the result keeps the sign of `x`).
        odd: bool,
        /// Whether `p` is an integer (a negative base is then allowed).
        int: bool,
    },
}

impl PowKind {
    /// The kernel for exponent `p` (finite; NaN or infinite exponents take the scalar
    /// `powf`).
    pub(crate) fn of(p: f64) -> Option<PowKind> {
        if !p.is_finite() {
            return None;
        }
        let int = p.fract() == 0.0;
        Some(if p == 0.0 {
            PowKind::One
        } else if int && p.abs() <= 4.0 {
            PowKind::SmallInt(p as i32)
        } else if p == 0.5 {
            PowKind::Sqrt
        } else {
            PowKind::General { p, odd: int && (p % 2.0).abs() == 1.0, int }
        })
    }
}

/// `x^N` for a small integer `N` (`|N| <= 4`) in `f64`: products (exact up to `N = 2`),
/// the reciprocal for a negative `N`. A constant, so that the loop has no inner loop.
#[inline(always)]
pub(crate) fn pow_int64<const N: i32>(x: f32) -> f64 {
    let xd = x as f64;
    let mut y = xd;
    for _ in 1..N.unsigned_abs() {
        y *= xd;
    }
    if N < 0 {
        1.0 / y
    } else {
        y
    }
}

/// `x^(1/2)`: `sqrt`, with `pow`'s `+0` at `-0` and `+inf` at `-inf` (where `sqrt` gives
/// `-0` and NaN).
#[inline(always)]
pub(crate) fn pow_sqrt64(x: f32) -> f64 {
    let xd = x as f64;
    if xd == 0.0 {
        0.0
    } else if xd == f64::NEG_INFINITY {
        f64::INFINITY
    } else {
        xd.sqrt()
    }
}

/// `x^p` for any finite `p` by `e^(p ln |x|)` (see [`PowKind::General`]).
#[inline(always)]
pub(crate) fn pow_general64(x: f32, p: f64, odd: bool, int: bool) -> f64 {
    let xd = x as f64;
    // ln 0 = -inf and ln inf = inf give e^(-+inf) through exp64's clamp: e^-700 and
    // e^700, which round to 0 and inf in f32, as libm's values.
    let mag = exp64(p * log64(xd.abs()));
    if xd < 0.0 && xd > f64::NEG_INFINITY && !int {
        f64::NAN
    } else if odd && x.is_sign_negative() {
        -mag
    } else {
        mag
    }
}

/// Calls `$run!(|x| e)` with `e` the `f64` power of the `f32` `x` for the [`PowKind`]
/// `$kind` (`$run` builds its closure from it): one closure per kind and per small
/// integer, so that every loop the caller builds around it is straight-line code.
macro_rules! with_pow {
    ($kind:expr, $run:ident) => {
        match $kind {
            $crate::backend::cpu::powers::PowKind::One => $run!(|_x| 1.0f64),
            $crate::backend::cpu::powers::PowKind::SmallInt(n) => match n {
                1 => $run!(|x| $crate::backend::cpu::powers::pow_int64::<1>(x)),
                2 => $run!(|x| $crate::backend::cpu::powers::pow_int64::<2>(x)),
                3 => $run!(|x| $crate::backend::cpu::powers::pow_int64::<3>(x)),
                4 => $run!(|x| $crate::backend::cpu::powers::pow_int64::<4>(x)),
                -1 => $run!(|x| $crate::backend::cpu::powers::pow_int64::<-1>(x)),
                -2 => $run!(|x| $crate::backend::cpu::powers::pow_int64::<-2>(x)),
                -3 => $run!(|x| $crate::backend::cpu::powers::pow_int64::<-3>(x)),
                _ => $run!(|x| $crate::backend::cpu::powers::pow_int64::<-4>(x)),
            },
            $crate::backend::cpu::powers::PowKind::Sqrt => $run!(|x| $crate::backend::cpu::powers::pow_sqrt64(x)),
            $crate::backend::cpu::powers::PowKind::General { p, odd, int } => {
                $run!(|x| $crate::backend::cpu::powers::pow_general64(x, p, odd, int))
            }
        }
    };
}
pub(crate) use with_pow;

/// `x^p` by `kind` (see [`PowKind`]), in `f64`; libm's special values (`pow(0, -1) =
/// inf`, `pow(-0, -1) = -inf`, `pow(-8, 1/3) = NaN`, `pow(-inf, 1/3) = inf`, `pow(1, p) =
/// 1`, ...).
#[cfg(test)]
fn pow64(x: f32, kind: PowKind) -> f64 {
    macro_rules! at {
        (|$x:ident| $e:expr) => {{
            let $x = x;
            $e
        }};
    }
    with_pow!(kind, at)
}

/// `x^p` by `kind`, rounded to `f32`.
#[cfg(test)]
pub(crate) fn pow(x: f32, kind: PowKind) -> f32 {
    pow64(x, kind) as f32
}

/// `x^p`'s derivative `p x^(p-1)` (`minus_one` is the kind of `p - 1`), 0 for `p = 0`.
#[cfg(test)]
pub(crate) fn pow_grad(x: f32, p: f64, minus_one: PowKind) -> f32 {
    if p == 0.0 {
        0.0
    } else {
        (p * pow64(x, minus_one)) as f32
    }
}
