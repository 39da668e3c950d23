//! Row kernels written so the compiler vectorizes them, compiled twice: for the baseline
//! target and with AVX2 and FMA, picked at run time (the default build targets plain
//! x86-64, whose SSE2 vectors are a quarter of what this project's CPUs have).
//!
//! The one math function here, [`exp_f32`], is branch-free so that a loop over it becomes
//! vector code; libm's `expf` is a scalar call per element (through it, a softmax over
//! 262k scores would be a measurable part of the `compare.py` row `transformer_step`).

use std::mem::MaybeUninit;

/// `ln 2` in two parts for the `f32` exponentials' Cody-Waite reduction (`n * LN2_HI` is
/// exact for the `|n| < 2^8` they meet).
pub(crate) const LN2_HI: f32 = 0.693_359_4;
/// The rest of `ln 2`.
pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
/// `1.5 * 2^23`: adding and subtracting it rounds an `f32` below `2^22` to the nearest
/// integer, which then sits in the low bits of the sum (SSE2 has no `round`).
pub(crate) const ROUND: f32 = 12_582_912.0;
/// Cephes' `expf` polynomial, highest degree first: `e^r = 1 + r + r^2 P(r)` for `|r| <=
/// ln 2 / 2`.
pub(crate) const EXP_POLY: [f32; 6] =
    [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5];

/// `e^x` in `f32` without branches: `x = n ln 2 + r` with `|r| <= ln 2 / 2` (Cody-Waite:
/// `ln 2` in two parts), Cephes' degree-6 polynomial for `e^r`, then `2^n` applied as two
/// exact power-of-two factors so that results down to the subnormal range are right.
/// Within 2 ulp of the exact value wherever the result is a normal float (tested against
/// `f64::exp`); `+inf` above 88.72, `0` below -103.9 and for `-inf`, NaN for NaN.
///
/// `FMA`: the multiply-adds fused, for the copies compiled with FMA (elsewhere `mul_add`
/// is a libm call); [`exp_pass_avx2`] is this variant on eight lanes. Rust never fuses
/// `a * b + c` itself, and unfused the polynomial's chain of dependent steps is twice as
/// long: a softmax of 4096 rows of 64 (the Transformer step's, the `compare.py` row
/// `transformer_step`) is slower unfused than fused.
#[inline(always)]
pub(crate) fn exp_f32<const FMA: bool>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer (|v| < 2^22 here)
    // without `round`, which SSE2 has no instruction for.
    let xc = x.clamp(-104.0, 88.8); // NaN passes through `clamp`
    let madd = |a: f32, b: f32, c: f32| if FMA { a.mul_add(b, c) } else { a * b + c };
    let t = madd(xc, LOG2E, ROUND);
    let n = t - ROUND;
    let r = madd(-n, LN2_LO, madd(-n, LN2_HI, xc));
    let mut p = EXP_POLY[0];
    for &k in &EXP_POLY[1..] {
        p = madd(p, r, k);
    }
    let e = madd(p, r * r, r) + 1.0;
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
/// constants outnumber the sixteen registers and spill, which slows a softmax of 4096
/// rows of 64 (the `compare.py` row `transformer_step`).
const EXP_LANES: usize = 8;

/// Softmax (or log-softmax) of each contiguous row of `n` elements of `x` into `y`.
/// (`FMA` as in [`exp_f32`].)
#[inline(always)]
fn softmax_rows_body<const FMA: bool>(x: &[f32], y: &mut [MaybeUninit<f32>], n: usize, log: bool) {
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
        let s = if FMA {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `FMA` is only set by the AVX2 + FMA copy, run where the CPU has both.
            unsafe {
                exp_pass_avx2(xs, ys, m)
            }
            #[cfg(not(target_arch = "x86_64"))]
            exp_pass::<true>(xs, ys, m)
        } else {
            exp_pass::<false>(xs, ys, m)
        };
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

/// `ys = e^(xs - m)`, returning the sum of `ys`: sums kept in `EXP_LANES` lanes, then
/// folded, the tail added last (the same order as [`exp_pass_avx2`]).
#[inline(always)]
fn exp_pass<const FMA: bool>(xs: &[f32], ys: &mut [MaybeUninit<f32>], m: f32) -> f32 {
    let mut sums = [0.0f32; EXP_LANES];
    let mut yc = ys.chunks_exact_mut(EXP_LANES);
    let mut xc = xs.chunks_exact(EXP_LANES);
    for (yo, xi) in (&mut yc).zip(&mut xc) {
        for ((s, o), &v) in sums.iter_mut().zip(yo.iter_mut()).zip(xi) {
            let e = exp_f32::<FMA>(v - m);
            o.write(e);
            *s += e;
        }
    }
    let mut s = fold_lanes(sums, |a, b| a + b);
    for (o, &v) in yc.into_remainder().iter_mut().zip(xc.remainder()) {
        let e = exp_f32::<FMA>(v - m);
        o.write(e);
        s += e;
    }
    s
}

/// [`exp_pass`] with fused multiply-adds in AVX2 intrinsics, [`exp_f32`]'s steps on eight
/// lanes (bit for bit its fused variant). Written out because the compiler, left to
/// vectorize the fused scalar code, splits it into four-lane halves, which slows a
/// softmax of 4096 rows of 64 severalfold (the `compare.py` row `transformer_step`).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_pass_avx2(xs: &[f32], ys: &mut [MaybeUninit<f32>], m: f32) -> f32 {
    use std::arch::x86_64::*;
    let c = |v: f32| _mm256_set1_ps(v);
    let (lo, hi, log2e, round) = (c(-104.0), c(88.8), c(std::f32::consts::LOG2_E), c(ROUND));
    let (ln2_hi, ln2_lo, mv) = (c(LN2_HI), c(LN2_LO), c(m));
    let (round_bits, bias) = (_mm256_set1_epi32(ROUND.to_bits() as i32), _mm256_set1_epi32(127));
    let mut sums = _mm256_setzero_ps();
    let mut yc = ys.chunks_exact_mut(EXP_LANES);
    let mut xc = xs.chunks_exact(EXP_LANES);
    for (yo, xi) in (&mut yc).zip(&mut xc) {
        // SAFETY: `xi` holds eight floats (an unaligned load).
        let x = _mm256_sub_ps(unsafe { _mm256_loadu_ps(xi.as_ptr()) }, mv);
        // `max(lo, x)` returns `x` when it is NaN (the second operand), as `clamp` does.
        let xc = _mm256_min_ps(hi, _mm256_max_ps(lo, x));
        let t = _mm256_fmadd_ps(xc, log2e, round);
        let n = _mm256_sub_ps(t, round);
        let r = _mm256_fnmadd_ps(n, ln2_lo, _mm256_fnmadd_ps(n, ln2_hi, xc));
        let mut p = c(EXP_POLY[0]);
        for &k in &EXP_POLY[1..] {
            p = _mm256_fmadd_ps(p, r, c(k));
        }
        let e = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), c(1.0));
        let ni = _mm256_sub_epi32(_mm256_castps_si256(t), round_bits);
        let n1 = _mm256_srai_epi32::<1>(ni);
        let n2 = _mm256_sub_epi32(ni, n1);
        let s1 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n1, bias)));
        let s2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n2, bias)));
        let e = _mm256_mul_ps(_mm256_mul_ps(e, s1), s2);
        // SAFETY: `yo` holds eight slots (an unaligned store of initialized values).
        unsafe { _mm256_storeu_ps(yo.as_mut_ptr().cast(), e) };
        sums = _mm256_add_ps(sums, e);
    }
    let mut lanes = [0.0f32; EXP_LANES];
    // SAFETY: `lanes` holds eight floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sums) };
    let mut s = fold_lanes(lanes, |a, b| a + b);
    for (o, &v) in yc.into_remainder().iter_mut().zip(xc.remainder()) {
        let e = exp_f32::<true>(v - m);
        o.write(e);
        s += e;
    }
    s
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
    softmax_rows_body::<false>(x, y, n, log)
}

/// The AVX2 + FMA copy of [`softmax_rows_body`].
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_rows_avx2(x: &[f32], y: &mut [MaybeUninit<f32>], n: usize, log: bool) {
    softmax_rows_body::<true>(x, y, n, log)
}

/// Writes the items of `items` into `slots` in order until either ends; how many it
/// wrote. The elementwise kernels' inner loop: the iterator (a map over slices) is inlined
/// here, so on the AVX-512 and AVX2 copies its arithmetic is vector code of that width
/// (the `f64` math of `vector_fns` gains most: eight lanes instead of four).
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
    #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
    unsafe fn body_avx512<U, I: Iterator<Item = U>>(slots: &mut [std::mem::MaybeUninit<U>], items: I) -> usize {
        body(slots, items)
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has these AVX-512 subsets, AVX2 and FMA.
        return unsafe { body_avx512(slots, items) };
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { body_avx2(slots, items) };
    }
    body(slots, items)
}

/// An instruction set a vector copy of a loop is compiled for: the kernels' variants
/// along this axis give the same bits (every multiply-add is fused in each), so which one
/// runs is a question of speed only, measured where the CPU has more than one
/// ([`super::tune`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    /// AVX-512 F, VL, DQ and BW with AVX2 and FMA ([`has_avx512`]).
    Avx512,
    /// AVX2 and FMA ([`has_avx2`]).
    Avx2,
    /// The build's baseline target (SSE2 on x86-64; fused multiply-adds are libm calls).
    Base,
}

impl Isa {
    /// Every instruction set, widest first.
    pub(crate) const ALL: [Isa; 3] = [Isa::Avx512, Isa::Avx2, Isa::Base];

    /// The name in `NN_KERNELS` and in the kernel report.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::Base => "base",
        }
    }

    /// The CPU features a copy for this instruction set needs, as `lscpu` names them.
    pub(crate) fn features(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512f avx512vl avx512dq avx512bw avx2 fma",
            Isa::Avx2 => "avx2 fma",
            Isa::Base => "",
        }
    }

    /// Whether this CPU runs the copy (`NN_NO_AVX512=1` takes AVX-512 away).
    pub(crate) fn available(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => has_avx512(),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => has_avx2(),
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx512 | Isa::Avx2 => false,
            Isa::Base => true,
        }
    }

    /// The widest copy this CPU runs.
    pub(crate) fn widest() -> Isa {
        Isa::ALL.into_iter().find(|i| i.available()).unwrap_or(Isa::Base)
    }

    /// The instruction sets this CPU runs, widest first. The baseline counts only where
    /// nothing wider runs: its `mul_add` is a libm call per element, far slower, so
    /// timing it would only spend the first call's time.
    pub(crate) fn candidates() -> Vec<Isa> {
        let wide: Vec<Isa> = [Isa::Avx512, Isa::Avx2].into_iter().filter(|i| i.available()).collect();
        if wide.is_empty() {
            vec![Isa::Base]
        } else {
            wide
        }
    }
}

/// `dst[i] = f(src[i])` over the shorter of the two, in the widest vector copy this CPU
/// runs (AVX-512, AVX2 + FMA, or the baseline): [`map_elems_on`] with [`Isa::widest`].
#[inline]
pub(crate) fn map_elems<T: Copy, U>(src: &[T], dst: &mut [MaybeUninit<U>], f: impl Fn(T) -> U + Copy) {
    map_elems_on(Isa::widest(), src, dst, f)
}

/// `dst[i] = f(src[i])` over the shorter of the two, in the copy for `isa` (the baseline
/// where the CPU lacks it, so a stale choice can never run an instruction the CPU does not
/// have). An index loop, not an iterator chain:
/// `vector_fns`'s functions inline into it whole, where a `zip` adapter around them is left
/// out of line once they are large (its `next` then runs scalar code without FMA, calling
/// the software `fma`: an exact GELU over 786k elements, the `compare.py` row `ew_gelu`,
/// runs many times slower).
/// Generic over the element types, so that a half-type map widens each element as it
/// reads it and rounds each result as it writes it, in the same vector loop.
#[inline]
pub(crate) fn map_elems_on<T: Copy, U>(isa: Isa, src: &[T], dst: &mut [MaybeUninit<U>], f: impl Fn(T) -> U + Copy) {
    #[inline(always)]
    fn body<T: Copy, U>(src: &[T], dst: &mut [MaybeUninit<U>], f: impl Fn(T) -> U + Copy) {
        let n = src.len().min(dst.len());
        let (src, dst) = (&src[..n], &mut dst[..n]);
        for i in 0..n {
            dst[i].write(f(src[i]));
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
    unsafe fn body_avx512<T: Copy, U>(src: &[T], dst: &mut [MaybeUninit<U>], f: impl Fn(T) -> U + Copy) {
        body(src, dst, f)
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn body_avx2<T: Copy, U>(src: &[T], dst: &mut [MaybeUninit<U>], f: impl Fn(T) -> U + Copy) {
        body(src, dst, f)
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && has_avx512() {
        // SAFETY: the CPU has these AVX-512 subsets, AVX2 and FMA.
        return unsafe { body_avx512(src, dst, f) };
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { body_avx2(src, dst, f) };
    }
    let _ = isa;
    body(src, dst, f)
}

/// `dst[i] = f(a[i], b[i])` over the shortest of the three, for inputs of two element
/// types (a GEMM's `f32` sums and a `bf16` input to add), as [`map_elems`] does its map.
#[inline]
pub(crate) fn map2_elems<T: Copy, V: Copy, U>(
    a: &[T],
    b: &[V],
    dst: &mut [MaybeUninit<U>],
    f: impl Fn(T, V) -> U + Copy,
) {
    #[inline(always)]
    fn body<T: Copy, V: Copy, U>(a: &[T], b: &[V], dst: &mut [MaybeUninit<U>], f: impl Fn(T, V) -> U + Copy) {
        let n = dst.len().min(a.len()).min(b.len());
        let (a, b, dst) = (&a[..n], &b[..n], &mut dst[..n]);
        for i in 0..n {
            dst[i].write(f(a[i], b[i]));
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
    unsafe fn body_avx512<T: Copy, V: Copy, U>(
        a: &[T],
        b: &[V],
        dst: &mut [MaybeUninit<U>],
        f: impl Fn(T, V) -> U + Copy,
    ) {
        body(a, b, dst, f)
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn body_avx2<T: Copy, V: Copy, U>(
        a: &[T],
        b: &[V],
        dst: &mut [MaybeUninit<U>],
        f: impl Fn(T, V) -> U + Copy,
    ) {
        body(a, b, dst, f)
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has these AVX-512 subsets, AVX2 and FMA.
        return unsafe { body_avx512(a, b, dst, f) };
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { body_avx2(a, b, dst, f) };
    }
    body(a, b, dst, f)
}

/// `dst[i] = f(a[i], b[i], c[i])` (a unary op's backward: `g * df(x, y)`) as
/// [`map_elems`] does its map.
#[inline]
pub(crate) fn map3_elems<T: Copy, U>(s: [&[T]; 3], dst: &mut [MaybeUninit<U>], f: impl Fn(T, T, T) -> U + Copy) {
    #[inline(always)]
    fn body<T: Copy, U>([a, b, c]: [&[T]; 3], dst: &mut [MaybeUninit<U>], f: impl Fn(T, T, T) -> U + Copy) {
        let n = dst.len().min(a.len()).min(b.len()).min(c.len());
        let (a, b, c, dst) = (&a[..n], &b[..n], &c[..n], &mut dst[..n]);
        for i in 0..n {
            dst[i].write(f(a[i], b[i], c[i]));
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
    unsafe fn body_avx512<T: Copy, U>(s: [&[T]; 3], dst: &mut [MaybeUninit<U>], f: impl Fn(T, T, T) -> U + Copy) {
        body(s, dst, f)
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn body_avx2<T: Copy, U>(s: [&[T]; 3], dst: &mut [MaybeUninit<U>], f: impl Fn(T, T, T) -> U + Copy) {
        body(s, dst, f)
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has these AVX-512 subsets, AVX2 and FMA.
        return unsafe { body_avx512(s, dst, f) };
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { body_avx2(s, dst, f) };
    }
    body(s, dst, f)
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

/// Whether this CPU runs the AVX-512 copies (F, VL, DQ and BW, with AVX2 and FMA; checked
/// once). `NN_NO_AVX512=1` in the environment turns them off, to compare or to test the
/// AVX2 copies on an AVX-512 machine.
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        let off = std::env::var_os("NN_NO_AVX512").is_some_and(|v| v == "1");
        !off && has_avx2()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512bw")
    })
}

/// Whether this CPU runs the AVX2 + FMA copies (checked once).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

/// Softmax (or log-softmax) along contiguous rows of `n` elements: `x` and `y` hold whole
/// rows (`n > 0`, lengths equal multiples of `n`).
pub(crate) fn softmax_rows(x: &[f32], y: &mut [MaybeUninit<f32>], n: usize, log: bool) {
    // Checked in release builds too: callers' buffers are filled on the strength of it
    // (`set_len` after the rows are written).
    assert!(n > 0 && x.len() == y.len() && x.len().is_multiple_of(n), "softmax_rows: whole rows of {n}");
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        return unsafe { softmax_rows_avx2(x, y, n, log) };
    }
    softmax_rows_base(x, y, n, log)
}

/// Softmax along contiguous rows by element type (the fused attention's rows): the
/// vectorized kernel for `f32`, a scalar one for `f64`.
pub(crate) trait RowSoftmax: Sized {
    /// Softmax of the rows of `n` elements of `x` into `y` (equal lengths, whole rows).
    fn softmax_rows(x: &[Self], y: &mut [MaybeUninit<Self>], n: usize);
}

impl RowSoftmax for f32 {
    fn softmax_rows(x: &[f32], y: &mut [MaybeUninit<f32>], n: usize) {
        softmax_rows(x, y, n, false)
    }
}

impl RowSoftmax for f64 {
    fn softmax_rows(x: &[f64], y: &mut [MaybeUninit<f64>], n: usize) {
        for (xs, ys) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
            // As the f32 kernel: a NaN makes the row NaN, an all -inf row is 0/0 = NaN.
            let m = xs.iter().fold(f64::NEG_INFINITY, |m, &v| if v > m { v } else { m });
            let m = if m == f64::NEG_INFINITY { 0.0 } else { m };
            let mut s = 0.0;
            for (o, &v) in ys.iter_mut().zip(xs) {
                let e = (v - m).exp();
                o.write(e);
                s += e;
            }
            let r = 1.0 / s;
            for o in ys.iter_mut() {
                // SAFETY: the loop above wrote every output of the row.
                let e = unsafe { o.assume_init() };
                o.write(e * r);
            }
        }
    }
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

    /// An exponential and the name of its variant.
    type Exp = (fn(f32) -> f32, &'static str);

    /// Both variants: unfused and fused multiply-adds.
    const EXPS: [Exp; 2] = [(exp_f32::<false>, "unfused"), (exp_f32::<true>, "fused")];

    #[test]
    fn exp_is_within_two_ulp_of_the_exact_value() {
        for (exp, variant) in EXPS {
            let mut worst = 0;
            let mut x = -87.0f32;
            while x < 88.7 {
                let exact = (x as f64).exp() as f32;
                let u = ulps(exp(x), exact);
                assert!(u <= 2, "{variant} exp({x}) = {} against {exact} ({u} ulp)", exp(x));
                worst = worst.max(u);
                x += 0.000_731;
            }
            assert!(worst >= 1, "a perfect polynomial is suspicious: the sweep did not run");
        }
    }

    #[test]
    fn exp_edge_cases() {
        for (exp, variant) in EXPS {
            assert_eq!(exp(0.0), 1.0, "{variant}");
            assert_eq!(exp(f32::NEG_INFINITY), 0.0, "{variant}");
            assert_eq!(exp(-200.0), 0.0, "{variant}");
            assert_eq!(exp(f32::INFINITY), f32::INFINITY, "{variant}");
            assert_eq!(exp(89.0), f32::INFINITY, "{variant}");
            assert!(exp(f32::NAN).is_nan(), "{variant}");
            assert!(exp(88.7).is_finite(), "{variant}");
            // The subnormal range: close to the exact value in absolute terms.
            for x in [-88.0f32, -95.0, -100.0, -103.0] {
                let exact = (x as f64).exp();
                assert!((exp(x) as f64 - exact).abs() <= 2.0 * f32::from_bits(1) as f64, "{variant} exp({x})");
            }
        }
    }

    /// The eight-lane exponential pass is the fused scalar one, bit for bit: a sweep with
    /// a tail, NaN, infinities and the subnormal and overflow ranges in vector lanes.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_exponential_pass_is_the_fused_scalar_pass_bit_for_bit() {
        if !has_avx2() {
            eprintln!("no AVX2 + FMA on this CPU: the eight-lane pass never runs here");
            return;
        }
        let mut xs: Vec<f32> = (0..3001).map(|i| -110.0 + i as f32 * 0.0663).collect();
        xs.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 88.7, 88.8, 89.0, -103.9, -104.0, 0.0, -0.0]);
        for m in [0.0f32, 1.5, -3.25] {
            let (mut a, mut b) = (Vec::with_capacity(xs.len()), Vec::with_capacity(xs.len()));
            let sa = exp_pass::<true>(&xs, &mut a.spare_capacity_mut()[..xs.len()], m);
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            let sb = unsafe { exp_pass_avx2(&xs, &mut b.spare_capacity_mut()[..xs.len()], m) };
            // SAFETY: both passes write every slot.
            unsafe { (a.set_len(xs.len()), b.set_len(xs.len())) };
            let bits = |v: &Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "m = {m}");
            assert!(a[3001].is_nan() && a[3002] == f32::INFINITY && a[3003] == 0.0);
            assert_eq!(sa.to_bits(), sb.to_bits(), "sum, m = {m}");
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
