//! `f16` and `bf16` arithmetic: the kernels compute in `f32` (or `f64`), and a half
//! result is rounded (once, to nearest even) from the `f32` one. PyTorch's CPU kernels
//! compute half types in `f32` per op the same way, rounding each op's result; sums and
//! products accumulate in `f32`.
//!
//! Two ways in: the elementwise kernels read and write half types directly through
//! [`Half`] (each element widened as it is read, its result rounded as it is written, in
//! the same vector loop: one pass over memory); the other kernels get `f32` copies of
//! their half operands ([`through_f32`]) and their results rounded back.

use ::half::{bf16, f16};

use super::{CpuElement, CpuStorage};
use crate::dtype::DType;

/// A half type as the elementwise kernels read and write it: exact widening to `f32`, and
/// rounding of an `f32` result to nearest even.
pub(crate) trait Half: CpuElement + Copy + Send + Sync + 'static {
    /// The value as an `f32` (exact).
    fn widen1(self) -> f32;
    /// `x` rounded to this type, ties to even.
    fn narrow1(x: f32) -> Self;
}

impl Half for bf16 {
    #[inline(always)]
    fn widen1(self) -> f32 {
        bf16_to_f32(self)
    }
    #[inline(always)]
    fn narrow1(x: f32) -> Self {
        f32_to_bf16(x)
    }
}

impl Half for f16 {
    #[inline(always)]
    fn widen1(self) -> f32 {
        f16_to_f32(self)
    }
    #[inline(always)]
    fn narrow1(x: f32) -> Self {
        f32_to_f16(x)
    }
}

/// `x` as an `f32` (exact; NaN stays NaN with the quiet bit set): the `half` crate's
/// values, branch-free so that loops over it vectorize (the crate converts one element at
/// a time behind a run-time CPU check, which would make an f16 MNIST CNN slower than a
/// bf16 one).
#[inline(always)]
pub(crate) fn f16_to_f32(x: f16) -> f32 {
    let h = u32::from(x.to_bits());
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7fff;
    let o = em << 13;
    let exp = em & 0x7c00;
    // Normal: rebias the exponent (127 - 15). Infinity and NaN: all exponent bits set,
    // NaN quieted. Subnormal and zero: m 2^-24 as (2^-14 + m 2^-24) - 2^-14, exact.
    let normal = o + (112 << 23);
    let special = o | 0x7f80_0000 | if em & 0x3ff != 0 { 0x0040_0000 } else { 0 };
    let sub = (f32::from_bits(o + (113 << 23)) - f32::from_bits(113 << 23)).to_bits();
    let bits = if exp == 0x7c00 {
        special
    } else if exp == 0 {
        sub
    } else {
        normal
    };
    f32::from_bits(bits | sign)
}

/// `x` rounded to the nearest `f16`, ties to even (overflow to infinity, NaN quieted with
/// its payload's top bits): the `half` crate's values, branch-free.
#[inline(always)]
pub(crate) fn f32_to_f16(x: f32) -> f16 {
    let f = x.to_bits();
    let sign = (f >> 16) & 0x8000;
    let a = f & 0x7fff_ffff;
    // At or past 2^16 (always infinity, or NaN).
    let big = if a > 0x7f80_0000 { 0x7e00 | ((a >> 13) & 0x3ff) } else { 0x7c00 };
    // Below 2^-14 (an f16 subnormal or zero): adding 0.5 puts the bits to keep at the
    // bottom of the mantissa, rounded to nearest even by the addition itself.
    let small = (f32::from_bits(a) + 0.5).to_bits().wrapping_sub(126 << 23);
    // Normal: rebias, round to nearest even on the 13 dropped bits (a carry into the
    // exponent is right, up to infinity).
    let normal = (a.wrapping_add(0xc800_0fff).wrapping_add((a >> 13) & 1)) >> 13;
    let bits = if a >= 0x4780_0000 {
        big
    } else if a < 0x3880_0000 {
        small
    } else {
        normal
    };
    f16::from_bits((bits | sign) as u16)
}

/// Runs `kernel` on `operands`, any `f16`/`bf16` among them widened to `f32`, and rounds
/// each `f32` result whose expected dtype (`outs`) is a half type to it. Operands without
/// a half type go straight to the kernel.
pub(crate) fn through_f32<const N: usize, const M: usize>(
    operands: [&CpuStorage; N],
    outs: [DType; M],
    kernel: impl FnOnce([&CpuStorage; N]) -> [CpuStorage; M],
) -> [CpuStorage; M] {
    if !operands.iter().any(|s| s.dtype().is_half()) {
        return kernel(operands);
    }
    let wide: [Option<CpuStorage>; N] = operands.map(widen);
    let results = kernel(std::array::from_fn(|i| wide[i].as_ref().unwrap_or(operands[i])));
    let mut outs = outs.into_iter();
    results.map(|r| narrow(r, outs.next().expect("one dtype per result")))
}

/// `x` as an `f32` (exact: a `bf16` is the top half of an `f32`). A shift, so that loops
/// over it vectorize (`bf16::to_f32` did not).
#[inline(always)]
pub(crate) fn bf16_to_f32(x: bf16) -> f32 {
    f32::from_bits((x.to_bits() as u32) << 16)
}

/// `x` rounded to the nearest `bf16`, ties to even; NaN stays NaN (quieted), infinities
/// and overflow give infinities: `bf16::from_f32`'s values, branch-free so that loops over
/// it vectorize.
#[inline(always)]
pub(crate) fn f32_to_bf16(x: f32) -> bf16 {
    let b = x.to_bits();
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
    bf16::from_bits(if x.is_nan() { (b >> 16) | 0x40 } else { rounded } as u16)
}

/// The `f32` copy of a half-type buffer; `None` for other types.
pub(crate) fn widen(s: &CpuStorage) -> Option<CpuStorage> {
    match s {
        CpuStorage::F16(v) => Some(CpuStorage::F32(convert(v, Half::widen1))),
        CpuStorage::BF16(v) => Some(CpuStorage::F32(convert(v, Half::widen1))),
        _ => None,
    }
}

/// `s` rounded to `dtype` when `s` is `f32` and `dtype` a half type; `s` otherwise.
pub(crate) fn narrow(s: CpuStorage, dtype: DType) -> CpuStorage {
    match (&s, dtype) {
        (CpuStorage::F32(v), DType::F16) => CpuStorage::F16(convert(v, f16::narrow1)),
        (CpuStorage::F32(v), DType::BF16) => CpuStorage::BF16(convert(v, bf16::narrow1)),
        _ => s,
    }
}

/// `f` over `v` into a new buffer, in the widest vector loop the CPU runs, in parallel
/// when it is long (as the elementwise maps split).
pub(crate) fn convert<T: Copy + Sync, U: CpuElement + Send>(v: &[T], f: impl Fn(T) -> U + Copy + Sync) -> Vec<U> {
    super::parts::in_parts(v, |src, part| super::isa_loops::map_elems(src, part, f))
}

#[cfg(test)]
mod tests {
    use half::bf16;

    use super::{bf16_to_f32, f32_to_bf16};

    /// The f16 conversions give the `half` crate's values: every `f16` widened, and a
    /// sweep of the whole `f32` range (ties, subnormals, overflow, infinities, NaN) rounded.
    #[test]
    fn the_f16_conversions_are_the_half_crates() {
        use super::{f16_to_f32, f32_to_f16};
        use half::f16;
        for bits in 0..=u16::MAX {
            let h = f16::from_bits(bits);
            let (got, want) = (f16_to_f32(h), h.to_f32());
            if want.is_nan() {
                assert!(got.is_nan(), "{bits:#x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{bits:#x}");
            }
        }
        let edges =
            [0x477f_f000u32, 0x477f_efff, 0x477f_f001, 0x3880_0000, 0x387f_ffff, 0x3300_0000, 0x3300_0001, 0x7fc0_0001];
        for bits in (0..=u32::MAX).step_by(331).chain(edges).chain(edges.map(|b| b | 0x8000_0000)) {
            let x = f32::from_bits(bits);
            let (got, want) = (f32_to_f16(x), f16::from_f32(x));
            if x.is_nan() {
                assert!(got.is_nan(), "{x:e} ({bits:#x})");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{x:e} ({bits:#x})");
            }
        }
    }

    /// The fast conversions give the `half` crate's values, on a sweep of the whole `f32`
    /// range (ties, subnormals, overflow, infinities and NaN included) and on every `bf16`.
    #[test]
    fn the_bf16_conversions_are_the_half_crates() {
        for bits in (0..=u32::MAX).step_by(997).chain([0x7f7f_ffff, 0x3f80_8000, 0x3f81_8000, 0x7fc0_0001, 0xff80_0000])
        {
            let x = f32::from_bits(bits);
            assert_eq!(f32_to_bf16(x).to_bits(), bf16::from_f32(x).to_bits(), "{x:e} ({bits:#x})");
        }
        for bits in 0..=u16::MAX {
            let h = bf16::from_bits(bits);
            if h.is_nan() {
                // NaN stays NaN (the crate also sets the quiet bit of a signalling one).
                assert!(bf16_to_f32(h).is_nan(), "{bits:#x}");
            } else {
                assert_eq!(bf16_to_f32(h).to_bits(), h.to_f32().to_bits(), "{bits:#x}");
            }
        }
    }
}
