//! Piecewise-polynomial `f32` functions: the exact GELU, SiLU and tanh over the range
//! where nearly all activations lie, at the cost of a table lookup and a short polynomial.
//! (tanh's table, `tanh(x) / x` on `[-6, 6]`, is one of the algorithms `cpu::tune` chooses
//! between by measurement: on Intel's cores it needs no division, where the `f32` formula
//! does one per element.)
//!
//! `vector_fns`'s GELU and SiLU compute in `f64` (an `erfc` or an exponential and a division
//! on eight lanes), slower than PyTorch's on a `[2, 128, 3072]` tensor, and `f32`
//! formulas of the same functions spend most of their instructions keeping within 2 ulp
//! (an `f32` SiLU that does is still slower than PyTorch's; the `compare.py` rows
//! `ew_gelu` and `ew_silu` time that tensor). Both are `x p(x)` with a smooth, bounded
//! `p` (the normal CDF, the logistic sigmoid), so here `p` is 32 polynomials on equal
//! pieces of `[lo, hi]` ([`Pieces`], fitted by `nn-core/tools/poly_tables_fit.py`): on
//! AVX-512 each coefficient is one `vpermt2ps` from two registers holding its 32 values,
//! the index comes from a multiply-add and a truncation, and the polynomial is degree 5
//! or 6 in the offset from a point of the piece where the constant term is exact in
//! `f32`. The value is then `x c0 + x tail`, one rounding at the end (the same two rows
//! time these tables).
//!
//! **Accuracy**: checked exhaustively over every `f32` in the tables' ranges against
//! `f64` references (the `#[ignore]`d test `tables_are_accurate_on_every_float_they_cover`,
//! run in release): SiLU within 1 ulp, GELU within 2.
//!
//! **Outside the range** (and for NaN) the functions are `vector_fns`'s `f64` ones. A
//! function's value depends on its argument only: on AVX-512 a block of 16 lanes takes the
//! table path when all 16 lie in the range and otherwise evaluates the whole function
//! per lane (table where covered, `f64` elsewhere), so the results do not depend on the
//! neighbours, the block boundaries or the thread count, and every copy of the loop
//! (AVX-512, AVX2, baseline) gives the same bits. For normally distributed activations
//! almost every block is in range (the GELU's `[-4, 4]` misses one value in 16,000).

use std::mem::MaybeUninit;

use super::isa_loops::Isa;

#[path = "poly_tables_data.rs"]
mod tables;
pub(crate) use tables::{NORMAL_CDF, SIGMOID, TANH_OVER_X};

/// Pieces per table (two AVX-512 registers of `f32` per coefficient).
const PIECES: usize = 32;

/// `x p(x)` with `p` a polynomial on each of 32 equal pieces of `[lo, hi]` (`lo = -hi`):
/// on piece `i`, `p = coef[0][i] + coef[1][i] u + ... + coef[K-1][i] u^(K-1)` with `u = x -
/// centres[i]`, where the centre is a point of the piece at which `p` is within a
/// thousandth of an ulp of the `f32` `coef[0][i]` (so the table does not round the
/// constant term).
pub(crate) struct Pieces<const K: usize> {
    /// The lower end of the range.
    pub(crate) lo: f32,
    /// The upper end of the range.
    pub(crate) hi: f32,
    /// Pieces per unit: piece `i` holds `x` with `(x - lo) * scale` in `[i, i + 1)`.
    pub(crate) scale: f32,
    /// Each piece's centre.
    pub(crate) centres: [f32; PIECES],
    /// The coefficients, one row per term (see the type's docs).
    pub(crate) coef: [[f32; PIECES]; K],
}

impl<const K: usize> Pieces<K> {
    /// Whether `x` is in the table's range (false for NaN).
    #[inline(always)]
    pub(crate) fn covers(&self, x: f32) -> bool {
        x.abs() <= self.hi
    }

    /// `x p(x)` for a covered `x`. The AVX-512 loop below computes the same operations
    /// in the same order, so it gives the same bits.
    #[inline(always)]
    pub(crate) fn eval(&self, x: f32) -> f32 {
        // A float-to-int truncation: 0 for `x = lo` (a product just below 0 truncates
        // to 0 too), 32 for `x = hi`, which joins the last piece.
        let i = (x.mul_add(self.scale, -self.lo * self.scale) as i32).min(PIECES as i32 - 1) as usize;
        let u = x - self.centres[i];
        let mut p = self.coef[K - 1][i];
        for k in (1..K - 1).rev() {
            p = p.mul_add(u, self.coef[k][i]);
        }
        let tail = p * u;
        // `p > 0`, so this only gives `-0` its sign back (`x tail` can be `+0` there).
        x.mul_add(self.coef[0][i], x * tail).copysign(x)
    }
}

/// Lanes per block: one AVX-512 register of `f32`.
const LANES: usize = 16;

/// `dst[i] = f(src[i])` over the shorter of the two, where `f` is `x p(x)` wherever `p`
/// covers `x` (it may differ only elsewhere): a block of [`LANES`] that `p` covers
/// entirely is evaluated through the table (vector lookups on AVX-512), any other block
/// through `f`. The values are `f`'s either way, in every copy (`isa`; the baseline where
/// the CPU lacks it, as [`super::isa_loops::map_elems_on`]).
#[inline]
pub(crate) fn map_pieces_on<const K: usize>(
    isa: Isa,
    p: &Pieces<K>,
    src: &[f32],
    dst: &mut [MaybeUninit<f32>],
    f: impl Fn(f32) -> f32 + Copy,
) {
    #[inline(always)]
    fn body<const K: usize>(p: &Pieces<K>, src: &[f32], dst: &mut [MaybeUninit<f32>], f: impl Fn(f32) -> f32 + Copy) {
        let n = src.len().min(dst.len());
        let (src, dst) = (&src[..n], &mut dst[..n]);
        for (s, d) in src.chunks(LANES).zip(dst.chunks_mut(LANES)) {
            if s.iter().all(|&x| p.covers(x)) {
                for (x, y) in s.iter().zip(d) {
                    y.write(p.eval(*x));
                }
            } else {
                for (x, y) in s.iter().zip(d) {
                    y.write(f(*x));
                }
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn body_avx2<const K: usize>(
        p: &Pieces<K>,
        src: &[f32],
        dst: &mut [MaybeUninit<f32>],
        f: impl Fn(f32) -> f32 + Copy,
    ) {
        body(p, src, dst, f)
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && super::isa_loops::has_avx512() {
        // SAFETY: the CPU has these AVX-512 subsets, AVX2 and FMA.
        return unsafe { avx512::map(p, src, dst, f) };
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && super::isa_loops::has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { body_avx2(p, src, dst, f) };
    }
    body(p, src, dst, f)
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    use super::{Pieces, LANES, PIECES};

    /// Blocks of [`LANES`] per call of [`covered_blocks`] (the bits of its mask).
    const BLOCKS: usize = 64;

    /// [`super::map_pieces_on`] on AVX-512: runs of [`BLOCKS`] blocks through
    /// [`covered_blocks`], then `f` on the blocks it left, then `f` on the tail.
    #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
    pub(super) unsafe fn map<const K: usize>(
        p: &Pieces<K>,
        src: &[f32],
        dst: &mut [MaybeUninit<f32>],
        f: impl Fn(f32) -> f32 + Copy,
    ) {
        let n = src.len().min(dst.len());
        let whole = n / LANES * LANES;
        let mut start = 0;
        while start < whole {
            let end = (start + BLOCKS * LANES).min(whole);
            // SAFETY: the caller's CPU has the features (this function's contract).
            let mut left = unsafe { covered_blocks(p, &src[start..end], &mut dst[start..end]) };
            while left != 0 {
                let b = start + left.trailing_zeros() as usize * LANES;
                left &= left - 1;
                for i in b..b + LANES {
                    dst[i].write(f(src[i]));
                }
            }
            start = end;
        }
        for i in whole..n {
            dst[i].write(f(src[i]));
        }
    }

    /// Writes `x p(x)` for every block of [`LANES`] of `src` (at most [`BLOCKS`] whole
    /// blocks) that `p` covers, and returns a mask of the blocks it did not write.
    ///
    /// Out of line, so that the table's registers (two per coefficient, loaded once per
    /// call) are not spilled around the slow path's code, as they would be if both shared
    /// one loop (the lookups would then read the stack, slowing a SiLU over 786k values:
    /// the `compare.py` row `ew_silu`).
    #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
    #[inline(never)]
    unsafe fn covered_blocks<const K: usize>(p: &Pieces<K>, src: &[f32], dst: &mut [MaybeUninit<f32>]) -> u64 {
        // Opaque, so that the tables are loaded into registers here rather than folded
        // into every lookup as memory operands.
        let p = std::hint::black_box(p);
        // SAFETY (the loads here and below): each reads 16 `f32`s inside an array of 32
        // or inside `src[..16 * blocks]`; each store writes 16 inside `dst[..16 * blocks]`.
        let load =
            |row: &[f32; PIECES]| unsafe { (_mm512_loadu_ps(row.as_ptr()), _mm512_loadu_ps(row.as_ptr().add(LANES))) };
        let centres = load(&p.centres);
        let coef: [(__m512, __m512); K] = std::array::from_fn(|k| load(&p.coef[k]));
        let hi = _mm512_set1_ps(p.hi);
        let (scale, offset) = (_mm512_set1_ps(p.scale), _mm512_set1_ps(-p.lo * p.scale));
        let last = _mm512_set1_epi32(PIECES as i32 - 1);
        let sign = _mm512_set1_ps(-0.0);
        let blocks = (src.len().min(dst.len()) / LANES).min(BLOCKS);
        let mut left = 0u64;
        for b in 0..blocks {
            let x = unsafe { _mm512_loadu_ps(src.as_ptr().add(b * LANES)) };
            // An ordered comparison: false for NaN, as `Pieces::covers`.
            let covered = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(_mm512_abs_ps(x), hi);
            if covered != 0xffff {
                left |= 1 << b;
                continue;
            }
            let i = _mm512_min_epi32(_mm512_cvttps_epi32(_mm512_fmadd_ps(x, scale, offset)), last);
            let at = |row: (__m512, __m512)| _mm512_permutex2var_ps(row.0, i, row.1);
            let u = _mm512_sub_ps(x, at(centres));
            let mut q = at(coef[K - 1]);
            for k in (1..K - 1).rev() {
                q = _mm512_fmadd_ps(q, u, at(coef[k]));
            }
            let tail = _mm512_mul_ps(q, u);
            let y = _mm512_fmadd_ps(x, at(coef[0]), _mm512_mul_ps(x, tail));
            // `copysign(y, x)`, as `Pieces::eval`.
            let y = _mm512_or_ps(_mm512_and_ps(x, sign), _mm512_andnot_ps(sign, y));
            unsafe { _mm512_storeu_ps(dst.as_mut_ptr().add(b * LANES).cast::<f32>(), y) };
        }
        left
    }
}

#[cfg(test)]
mod tests {
    use std::f64::consts::FRAC_1_SQRT_2;
    use std::mem::MaybeUninit;

    use super::{map_pieces_on, Pieces, NORMAL_CDF, SIGMOID, TANH_OVER_X};
    use crate::backend::cpu::isa_loops::Isa;

    fn gelu_ref(x: f64) -> f64 {
        0.5 * x * libm::erfc(-x * FRAC_1_SQRT_2)
    }

    fn silu_ref(x: f64) -> f64 {
        x / (1.0 + (-x).exp())
    }

    /// The ulps between `got` and `want` rounded to `f32` (both finite here).
    fn ulps(got: f32, want: f64) -> u32 {
        let ord =
            |v: f32| if v.is_sign_negative() { -((v.to_bits() & 0x7fff_ffff) as i64) } else { v.to_bits() as i64 };
        (ord(got) - ord(want as f32)).unsigned_abs() as u32
    }

    /// The worst ulp error of the table on the covered floats `x` whose bit pattern is a
    /// multiple of `stride` (both signs), and where.
    fn worst<const K: usize>(p: &Pieces<K>, reference: fn(f64) -> f64, stride: usize) -> (u32, f32) {
        let mut worst = (0, 0.0);
        for sign in [0, 0x8000_0000u32] {
            let top = if sign == 0 { p.hi } else { -p.lo };
            for bits in (0..=top.to_bits()).step_by(stride) {
                let x = f32::from_bits(bits | sign);
                let u = ulps(p.eval(x), reference(x as f64));
                if u > worst.0 {
                    worst = (u, x);
                }
            }
        }
        worst
    }

    #[test]
    fn tables_are_accurate_on_a_sample_of_the_floats_they_cover() {
        // About 10 million floats each (every 211th bit pattern), all binades included.
        let (g, at) = worst(&NORMAL_CDF, gelu_ref, 211);
        assert!(g <= 2, "gelu table: {g} ulp at {at:e}");
        let (s, at) = worst(&SIGMOID, silu_ref, 211);
        assert!(s <= 1, "silu table: {s} ulp at {at:e}");
        let (t, at) = worst(&TANH_OVER_X, f64::tanh, 211);
        assert!(t <= 1, "tanh table: {t} ulp at {at:e}");
    }

    /// Every covered float (2.2e9 per table): `cargo test --release -p nn-core --lib poly_tables --
    /// --ignored`.
    #[test]
    #[ignore = "every f32 in both ranges: a minute in release"]
    fn tables_are_accurate_on_every_float_they_cover() {
        let (g, at) = worst(&NORMAL_CDF, gelu_ref, 1);
        assert!(g <= 2, "gelu table: {g} ulp at {at:e}");
        let (s, at) = worst(&SIGMOID, silu_ref, 1);
        assert!(s <= 1, "silu table: {s} ulp at {at:e}");
        let (t, at) = worst(&TANH_OVER_X, f64::tanh, 1);
        assert!(t <= 1, "tanh table: {t} ulp at {at:e}");
    }

    #[test]
    fn the_ends_of_the_range_and_nan() {
        // `covers` compares |x| with `hi`.
        assert!(NORMAL_CDF.lo == -NORMAL_CDF.hi && SIGMOID.lo == -SIGMOID.hi);
        for p in [NORMAL_CDF.lo, NORMAL_CDF.hi] {
            assert!(NORMAL_CDF.covers(p));
            assert!(!NORMAL_CDF.covers(p * (1.0 + f32::EPSILON)));
            assert!(ulps(NORMAL_CDF.eval(p), gelu_ref(p as f64)) <= 1, "gelu({p})");
        }
        assert!(!NORMAL_CDF.covers(f32::NAN) && !SIGMOID.covers(f32::NAN));
        // Signed zeros as PyTorch's x sigmoid(x) and x Phi(x).
        assert_eq!(SIGMOID.eval(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(NORMAL_CDF.eval(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(NORMAL_CDF.eval(0.0).to_bits(), 0);
    }

    /// Blocks wholly in the range, partly in it, with NaN, and a tail: the map gives `f`'s
    /// values bit for bit, whichever path each block took.
    #[test]
    fn the_map_is_the_function_bit_for_bit() {
        let f = |x: f32| if SIGMOID.covers(x) { SIGMOID.eval(x) } else { -1.0 };
        let n = 16 * 70 + 5;
        let mut src: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1601) as f32 * 0.01 - 8.0).collect();
        src[16 * 3 + 2] = 9.0;
        src[16 * 65] = f32::NAN;
        src[n - 1] = -100.0;
        for isa in Isa::candidates().into_iter().chain([Isa::Base]) {
            let mut dst = vec![MaybeUninit::uninit(); n];
            map_pieces_on(isa, &SIGMOID, &src, &mut dst, f);
            for (x, y) in src.iter().zip(&dst) {
                // SAFETY: `map_pieces_on` writes every slot.
                let y = unsafe { y.assume_init() };
                assert_eq!(y.to_bits(), f(*x).to_bits(), "{isa:?} at {x}");
            }
        }
    }
}
