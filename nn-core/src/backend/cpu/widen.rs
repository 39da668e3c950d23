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
        self.to_f32()
    }
    #[inline(always)]
    fn narrow1(x: f32) -> Self {
        f16::from_f32(x)
    }
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
    super::elementwise::in_parts(v, |src, part| super::vmath::map_elems(src, part, f))
}

#[cfg(test)]
mod tests {
    use half::bf16;

    use super::{bf16_to_f32, f32_to_bf16};

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
