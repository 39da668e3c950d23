//! `bf16` matrix products with `f32` accumulation on AVX512-BF16.
//!
//! `vdpbf16ps` multiplies 16 pairs of `bf16` pairs and adds each pair's two products into
//! an `f32` lane: 32 multiply-adds per instruction where an `f32` FMA does 16, so a
//! product of `bf16` matrices (what autocast makes of every linear layer) can run at
//! twice the `f32` rate. The operands are packed into pairs along `k` (`A` by rows of
//! [`MR`], `B` by panels of [`NR`] columns), and a 6 x 64 register tile accumulates
//! `f32` sums over blocks of [`KC`] pairs, so every product is summed in `f32` and the
//! result rounds once, when the caller converts it (PyTorch's CPU `bf16` GEMM does the
//! same).
//!
//! Elsewhere (no AVX512-BF16) the caller widens the operands to `f32` and runs the `f32`
//! GEMM: the same products, summed in another order. One more difference: Intel documents
//! `vdpbf16ps` as treating denormal inputs as zero and flushing denormal results, whatever
//! the floating-point control register says, so `bf16` values below about 1.2e-38 (and
//! partial sums that small) count as 0 here and not on the widened path, as in PyTorch's
//! oneDNN kernels on these CPUs.

use std::mem::MaybeUninit;

use half::bf16;

use super::team;

/// Rows of the register tile.
const MR: usize = 6;
/// Columns of the register tile (four registers of 16 `f32`): 24 accumulators, and 6
/// broadcasts of `A` and 4 loads of `B` per 24 products. An 8 x 48 tile (8 broadcasts, 3
/// loads) wastes a third of its last panel on the Transformer's 128-wide products and runs
/// its bf16 step slower (the `compare.py` row `amp_transformer_step_bf16`); 12 x 32 takes
/// 12 broadcasts.
const NR: usize = 64;
/// Registers per row of the tile.
const V: usize = NR / 16;
/// `f32` sums per stripe of rows (256 KiB, a quarter of Zen 5's L2 cache), at least 4
/// register tiles of rows.
const STRIPE_SUMS: usize = 1 << 16;
/// Pairs of `k` per block: a packed `B` panel block is `KC * NR * 4` = 48 KiB, Zen 5's
/// L1 data cache.
const KC: usize = 192;

/// Whether this CPU runs the kernel: AVX-512 (F, VL, DQ, BW, as the other kernels ask)
/// and AVX512-BF16 (`NN_NO_AVX512=1` turns it off with the rest).
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| super::isa_loops::has_avx512() && std::arch::is_x86_feature_detected!("avx512bf16"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A `bf16` matrix read through strides: element `(i, j)` at `offset + i rs + j cs`.
#[derive(Clone, Copy)]
pub(crate) struct Strided<'a> {
    /// The buffer.
    pub data: &'a [bf16],
    /// Where element `(0, 0)` is.
    pub offset: usize,
    /// Elements between rows.
    pub rs: usize,
    /// Elements between columns.
    pub cs: usize,
}

impl Strided<'_> {
    /// The bits of element `(i, j)`.
    #[inline(always)]
    fn bits(&self, i: usize, j: usize) -> u32 {
        self.data[self.offset + i * self.rs + j * self.cs].to_bits() as u32
    }
}

/// `c = a b` for `a: [m, k]` and `b: [k, n]`, `c` row-major `[m, n]` `f32`, every slot
/// written (the tests' entry: the library's callers round or add in [`run`]'s epilogue).
///
/// # Panics
/// When [`available`] is false (the caller checks).
#[cfg(test)]
pub(crate) fn gemm(m: usize, k: usize, n: usize, a: Strided<'_>, b: Strided<'_>, c: &mut [f32]) {
    run(m, k, n, a, b, uninit(&mut c[..m * n]), |_, sums, out: &mut [MaybeUninit<f32>]| {
        for (o, &s) in out.iter_mut().zip(sums) {
            o.write(s);
        }
    });
}

/// [`gemm`] with the sums rounded to `bf16` (once each) into `c` (every slot written),
/// each part of rows by the thread that computed it, in a vector loop.
pub(crate) fn gemm_to_bf16(m: usize, k: usize, n: usize, a: Strided<'_>, b: Strided<'_>, c: &mut [MaybeUninit<bf16>]) {
    run(m, k, n, a, b, &mut c[..m * n], |_, sums, out: &mut [MaybeUninit<bf16>]| {
        super::isa_loops::map_elems(sums, out, super::widen::f32_to_bf16)
    });
}

/// `s` as slots to overwrite (the kernels' loops write `MaybeUninit` slots).
pub(crate) fn uninit<T>(s: &mut [T]) -> &mut [MaybeUninit<T>] {
    // SAFETY: `MaybeUninit<T>` has `T`'s layout, and the slots start initialized; writers
    // through the view only store values of `T` (never `uninit()`), so the slice stays
    // initialized.
    unsafe { &mut *(s as *mut [T] as *mut [MaybeUninit<T>]) }
}

/// The product in parts of whole register tiles of rows, in parallel when it is large:
/// each part's `f32` sums go to `finish(first row, sums, the part of c)` on the thread
/// that computed them, while they are in its cache (an epilogue: rounding, a bias), which
/// writes every slot of its part (`c` may be a fresh buffer's spare capacity).
pub(crate) fn run<T: Send>(
    m: usize,
    k: usize,
    n: usize,
    a: Strided<'_>,
    b: Strided<'_>,
    c: &mut [MaybeUninit<T>],
    finish: impl Fn(usize, &[f32], &mut [MaybeUninit<T>]) + Sync,
) {
    assert!(available(), "gemm_bf16: this CPU has no AVX512-BF16");
    assert!(c.len() == m * n, "gemm_bf16: output of {} for [{m}, {n}]", c.len());
    if m == 0 || n == 0 {
        return;
    }
    let large = m * k * n >= 1 << 21;
    let threads = if large { team::threads_for_large() } else { 1 };
    let mut bp = SCRATCH.with(|s| std::mem::take(&mut s.borrow_mut().b));
    let bp_words = pack_b(b, k, n, large, threads, &mut bp);
    let rows = m.div_ceil(threads).div_ceil(MR) * MR;
    team::for_chunks_with(large, c, rows * n, |q, part| {
        let r0 = q * rows;
        let mr = part.len() / n;
        let (mut sums, mut ap) = SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            (std::mem::take(&mut s.sums), std::mem::take(&mut s.a))
        });
        // By stripes of rows whose sums stay in the L2 cache until `finish` reads them
        // (the sums of a whole part would go out to memory and back).
        let stripe = (STRIPE_SUMS / n.max(1)).max(4 * MR) / MR * MR;
        // Every slot is written by the first block of `k` (or zeroed for `k = 0`): the
        // buffer only grows, zeroed once (zeroing it on every call that needs more than
        // the last would slow the `compare.py` row `amp_transformer_step_bf16`).
        let most = stripe.min(mr) * n;
        if sums.len() < most {
            sums.resize(most, 0.0);
        }
        for (i, out) in part.chunks_mut(stripe * n).enumerate() {
            let (first, rows_here) = (r0 + i * stripe, out.len() / n);
            let sums_part = &mut sums[..out.len()];
            // SAFETY: `available()` (checked above): the CPU has the target features.
            unsafe { avx512::rows(first, rows_here, k, n, a, bp_words, &mut ap, sums_part) };
            finish(first, sums_part, out);
        }
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            (s.sums, s.a) = (sums, ap);
        });
    });
    SCRATCH.with(|s| s.borrow_mut().b = bp);
}

/// Buffers kept per thread between products: fresh ones of these sizes would come from
/// `mmap` and be unmapped after every call (page faults and unmapping would be a large
/// share of a 1024 x 1024 product's time: the `compare.py` row `amp_gemm_bf16_1024`).
#[derive(Default)]
struct Scratch {
    /// Packed `B`.
    b: Vec<Line>,
    /// Packed rows of `A`.
    a: Vec<u32>,
    /// A part's `f32` sums.
    sums: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// `b` packed in panels of [`NR`] columns, each `[pairs][NR]` words holding `(b[2p][j],
/// b[2p + 1][j])` (low half, high half; zero past `k` and past `n`); panels in parallel
/// when the product is large.
fn pack_b<'o>(b: Strided<'_>, k: usize, n: usize, large: bool, threads: usize, lines: &'o mut Vec<Line>) -> &'o [u32] {
    let pairs = k.div_ceil(2);
    let panels = n.div_ceil(NR);
    // Only grows (zeroing it on every call would slow `amp_transformer_step_bf16`): every
    // slot of the panels is written below, zeros where the last panel passes `n`.
    let words = (panels * pairs * NR).div_ceil(16);
    if lines.len() < words {
        lines.resize(words, Line([0; 16]));
    }
    let lines = &mut lines[..words];
    // SAFETY: `Line` is 16 `u32`s without padding; the view covers the vector's elements.
    let out = unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<u32>(), lines.len() * 16) };
    let per = panels.div_ceil(threads).max(1);
    team::for_chunks_with(large, out, (per * pairs * NR).max(1), |q, part| {
        // Along `b`'s rows (contiguous in a row-major `b`): walking down its columns
        // instead read a new cache line per element.
        for (i, panel) in part.chunks_mut((pairs * NR).max(1)).enumerate() {
            // SAFETY: `run`, this function's only caller, asserted `available()`.
            unsafe { avx512::pack_panel(b, k, n, q * per + i, panel) };
        }
    });
    out
}

/// Panel `jp` of `b` packed into `panel` (`[pairs][NR]` words; see [`pack_b`]), inlined
/// into its AVX-512 copy.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[inline(always)]
fn pack_panel(b: Strided<'_>, k: usize, n: usize, jp: usize, panel: &mut [u32]) {
    let pairs = k.div_ceil(2);
    let cols = NR.min(n - jp * NR);
    if cols < NR {
        for p in 0..pairs {
            panel[p * NR + cols..(p + 1) * NR].fill(0);
        }
    }
    // Pairs with both halves inside `k`; an odd `k`'s last pair goes below.
    let full = k / 2;
    let col0 = jp * NR;
    if b.cs == 1 {
        // Rows of a row-major `b`: two contiguous runs interleaved (vectorizes).
        for p in 0..full {
            let at = |i: usize| b.offset + i * b.rs + col0;
            let (lo, hi) = (&b.data[at(2 * p)..][..cols], &b.data[at(2 * p + 1)..][..cols]);
            for ((d, &l), &h) in panel[p * NR..p * NR + cols].iter_mut().zip(lo).zip(hi) {
                *d = pair_word(l, h);
            }
        }
    } else if b.rs == 1 {
        // A transposed `b` (`x W^T`, `q k^T`): each column is a contiguous run,
        // read in order (by pairs, the panel's strided writes staying in the L1
        // cache); walking across columns read a new cache line per element.
        for j in 0..cols {
            let run = &b.data[b.offset + (col0 + j) * b.cs..][..2 * full];
            for (p, w) in run.chunks_exact(2).enumerate() {
                panel[p * NR + j] = pair_word(w[0], w[1]);
            }
        }
    } else {
        for p in 0..full {
            for (j, d) in panel[p * NR..p * NR + cols].iter_mut().enumerate() {
                *d = b.bits(2 * p, col0 + j) | (b.bits(2 * p + 1, col0 + j) << 16);
            }
        }
    }
    for p in full..pairs {
        for (j, d) in panel[p * NR..p * NR + cols].iter_mut().enumerate() {
            *d = b.bits(2 * p, col0 + j);
        }
    }
}

/// The word holding the pair `(lo, hi)`: `lo` in the low half.
#[inline(always)]
fn pair_word(lo: bf16, hi: bf16) -> u32 {
    u32::from(lo.to_bits()) | (u32::from(hi.to_bits()) << 16)
}

/// 64 bytes, aligned to 64: packed `B` lives in these, so that each of the kernel's
/// 512-bit loads reads one cache line (a `Vec<u32>` could start anywhere, and the product
/// is slower when it does: the `compare.py` row `amp_gemm_bf16_1024`).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u32; 16]);

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Strided, KC, MR, NR, V};

    /// [`super::pack_panel`] compiled for AVX-512 (its loops vectorize 4 times wider than
    /// the baseline's SSE2, and packing is a measurable part of a bf16 Transformer step:
    /// the `compare.py` row `amp_transformer_step_bf16`).
    ///
    /// # Safety
    /// The CPU must have the features (see [`super::available`]).
    #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx512bf16,avx2,fma")]
    pub(super) unsafe fn pack_panel(b: Strided<'_>, k: usize, n: usize, jp: usize, panel: &mut [u32]) {
        super::pack_panel(b, k, n, jp, panel)
    }

    /// Rows `r0..r0 + mr` of the product into `c` (`[mr, n]` row-major), block by block
    /// of [`KC`] pairs: `A`'s rows packed per block, every `B` panel against every row
    /// tile.
    #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx512bf16,avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn rows(
        r0: usize,
        mr: usize,
        k: usize,
        n: usize,
        a: Strided<'_>,
        bp: &[u32],
        ap: &mut Vec<u32>,
        c: &mut [f32],
    ) {
        let pairs = k.div_ceil(2);
        let tiles = mr.div_ceil(MR);
        // Every slot of a block is written below before it is read.
        ap.resize(tiles * KC.min(pairs.max(1)) * MR, 0);
        let mut p0 = 0;
        // k = 0: no block runs; the output is zeros.
        if pairs == 0 {
            c.fill(0.0);
            return;
        }
        // A row-major `a` of whole pairs is read in place: each row's words are its pairs,
        // broadcast straight from it (packing them would be a large share of a 1024 x 128
        // x 128 product's time, amortized over only two panels). Every word the tiles read is
        // inside the matrix (rows past it read its last row, and are not stored).
        let direct = a.cs == 1 && k.is_multiple_of(2);
        if direct {
            assert!(a.offset + (r0 + mr - 1) * a.rs + k <= a.data.len(), "gemm_bf16: `a` is outside its buffer");
        }
        while p0 < pairs {
            let kc = KC.min(pairs - p0);
            // A's rows for this block: [tile][pair][MR].
            for t in (0..tiles).filter(|_| !direct) {
                let dst = &mut ap[t * kc * MR..(t + 1) * kc * MR];
                let rows_here = MR.min(mr - t * MR);
                for r in 0..rows_here {
                    let row = r0 + t * MR + r;
                    if a.cs == 1 && 2 * (p0 + kc) <= k {
                        // A contiguous run of the row: its words are the pairs.
                        let run = &a.data[a.offset + row * a.rs + 2 * p0..][..2 * kc];
                        for (p, pair) in run.chunks_exact(2).enumerate() {
                            dst[p * MR + r] = super::pair_word(pair[0], pair[1]);
                        }
                        continue;
                    }
                    if a.rs == 1 && r == 0 && rows_here == MR && 2 * (p0 + kc) <= k {
                        // A transposed view (`g^T x`, a weight's gradient): columns of
                        // `a` are contiguous, so the tile's MR rows of columns `2p` and
                        // `2p + 1` are two contiguous runs, interleaved (vectorizes).
                        let first = r0 + t * MR;
                        for p in 0..kc {
                            let at = |kk: usize| a.offset + kk * a.cs + first;
                            let (lo, hi) = (&a.data[at(2 * (p0 + p))..][..MR], &a.data[at(2 * (p0 + p) + 1)..][..MR]);
                            for ((d, l), h) in dst[p * MR..(p + 1) * MR].iter_mut().zip(lo).zip(hi) {
                                *d = super::pair_word(*l, *h);
                            }
                        }
                        break;
                    }
                    for p in 0..kc {
                        let kk = 2 * (p0 + p);
                        let lo = a.bits(row, kk);
                        let hi = if kk + 1 < k { a.bits(row, kk + 1) } else { 0 };
                        dst[p * MR + r] = lo | (hi << 16);
                    }
                }
                // Rows past the matrix: zeros (their sums are computed and not stored).
                for r in MR.min(mr - t * MR)..MR {
                    for p in 0..kc {
                        dst[p * MR + r] = 0;
                    }
                }
            }
            for jp in 0..n.div_ceil(NR) {
                let panel = &bp[(jp * pairs + p0) * NR..];
                let cols = NR.min(n - jp * NR);
                assert!(panel.len() >= kc * NR, "gemm_bf16: a packed panel of {kc} pairs");
                for t in 0..tiles {
                    let rows = MR.min(mr - t * MR);
                    // SAFETY: the tile's `rows` rows and `cols` columns are inside `c`
                    // (row stride `n`); every row's `kc` words from `p0` are inside `a`
                    // (asserted above) or `ap` (`tiles` blocks of `kc * MR` words); `panel`
                    // holds `kc` pairs (asserted); and this function's callers guarantee
                    // the CPU features.
                    unsafe {
                        let (a_rows, step) = if direct {
                            let row = |r: usize| r0 + t * MR + r.min(rows - 1);
                            let at = |r: usize| a.data.as_ptr().add(a.offset + row(r) * a.rs + 2 * p0).cast::<u32>();
                            (std::array::from_fn(at), 1)
                        } else {
                            let block = ap.as_ptr().add(t * kc * MR);
                            (std::array::from_fn(|r| block.add(r)), MR)
                        };
                        let ct = c.as_mut_ptr().add(t * MR * n + jp * NR);
                        tile((a_rows, step), panel, kc, ct, n, (rows, cols), p0 == 0);
                    }
                }
            }
            p0 += kc;
        }
    }

    /// One `MR x NR` tile: `c (+)= a b` over `kc` pairs, row `r` of `a` the words at
    /// `a_rows[r]`, `step` words apart (1: a row-major matrix read in place; `MR`: packed
    /// `[kc][MR]`), and `b` `[kc][NR]` words of two `bf16`; `first` starts from zero, else
    /// from `c`. Only the `rows x cols` corner of `c` is read and written.
    ///
    /// # Safety
    /// `a_rows[r] + p step` must be readable (unaligned) for `p < kc`, `c`'s `rows x cols`
    /// corner (row stride `ldc`) writable, and the CPU must have the features.
    #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx512bf16,avx2,fma")]
    #[inline]
    unsafe fn tile(
        (a_rows, step): ([*const u32; MR], usize),
        b: &[u32],
        kc: usize,
        c: *mut f32,
        ldc: usize,
        (rows, cols): (usize, usize),
        first: bool,
    ) {
        // SAFETY: `b` holds `kc` pairs of rows (checked by the slicing below), the caller
        // guarantees `a`'s words, that `c`'s `rows x cols` corner (row stride `ldc`) is
        // writable and the CPU features; a 512-bit integer vector and `__m512bh` have one
        // layout.
        unsafe {
            let mask = |h: usize| -> __mmask16 {
                let valid = cols.saturating_sub(16 * h).min(16);
                ((1u32 << valid) - 1) as __mmask16
            };
            let masks: [__mmask16; V] = std::array::from_fn(mask);
            let mut acc = [[_mm512_setzero_ps(); V]; MR];
            if !first {
                for (r, row) in acc.iter_mut().enumerate().take(rows) {
                    for (h, v) in row.iter_mut().enumerate() {
                        *v = _mm512_maskz_loadu_ps(masks[h], c.add(r * ldc + 16 * h));
                    }
                }
            }
            // By whole pairs of rows of both (indexing `a[p * MR + r]` would keep a bounds
            // check in the loop, a measurable cost in the `compare.py` row `amp_gemm_bf16_1024`).
            for (p, bp) in b[..kc * NR].chunks_exact(NR).enumerate() {
                let bv: [__m512bh; V] =
                    std::array::from_fn(|h| std::mem::transmute(_mm512_loadu_si512(bp.as_ptr().add(16 * h).cast())));
                for (row, ar) in acc.iter_mut().zip(a_rows) {
                    let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(ar.add(p * step).read_unaligned() as i32));
                    for (v, &bh) in row.iter_mut().zip(&bv) {
                        *v = _mm512_dpbf16_ps(*v, av, bh);
                    }
                }
            }
            for (r, row) in acc.iter().enumerate().take(rows) {
                for (h, v) in row.iter().enumerate() {
                    _mm512_mask_storeu_ps(c.add(r * ldc + 16 * h), masks[h], *v);
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod avx512 {
    use super::Strided;

    /// Never called: [`super::available`] is false here.
    pub(super) unsafe fn pack_panel(_: Strided<'_>, _: usize, _: usize, _: usize, _: &mut [u32]) {
        unreachable!("gemm_bf16 without AVX512-BF16")
    }

    /// Never called: [`super::available`] is false here.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn rows(
        _: usize,
        _: usize,
        _: usize,
        _: usize,
        _: Strided<'_>,
        _: &[u32],
        _: &mut Vec<u32>,
        _: &mut [f32],
    ) {
        unreachable!("gemm_bf16 without AVX512-BF16")
    }
}

#[cfg(test)]
mod tests {
    use half::bf16;

    use super::{available, gemm, Strided};

    /// Deterministic values of a few bits of mantissa (so that `bf16` holds them and the
    /// `f32` sums of their products are exact in any order).
    fn values(len: usize, seed: u32) -> Vec<bf16> {
        (0..len)
            .map(|i| bf16::from_f32((((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 17) as f32 / 4.0 - 2.0))
            .collect()
    }

    /// Every shape class (tile edges in m, n, odd k, one block and several of k), both
    /// operands in both orientations (each packed by its own path), starting past the
    /// buffer's first elements: equal to the `f64` product (exact here).
    #[test]
    fn products_match_the_exact_product() {
        if !available() {
            eprintln!("no AVX512-BF16 here: nothing to test");
            return;
        }
        for &(m, k, n) in &[(1, 1, 1), (12, 2, 32), (13, 3, 33), (25, 517, 70), (7, 1030, 5), (40, 64, 96)] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                const AT: usize = 3;
                let (av, bv) = (values(m * k + AT, 1), values(k * n + AT, 2));
                let a = if ta {
                    Strided { data: &av, offset: AT, rs: 1, cs: m }
                } else {
                    Strided { data: &av, offset: AT, rs: k, cs: 1 }
                };
                let b = if tb {
                    Strided { data: &bv, offset: AT, rs: 1, cs: k }
                } else {
                    Strided { data: &bv, offset: AT, rs: n, cs: 1 }
                };
                let mut c = vec![f32::NAN; m * n];
                gemm(m, k, n, a, b, &mut c);
                for i in 0..m {
                    for j in 0..n {
                        let want: f64 = (0..k)
                            .map(|p| {
                                let x = av[AT + if ta { p * m + i } else { i * k + p }].to_f64();
                                let y = bv[AT + if tb { j * k + p } else { p * n + j }].to_f64();
                                x * y
                            })
                            .sum();
                        let got = c[i * n + j];
                        assert_eq!(got as f64, want, "[{m}, {k}, {n}] ta {ta} tb {tb} at ({i}, {j})");
                    }
                }
            }
            // `b` with neither unit stride (every other row and column of a larger
            // matrix): the general packing path.
            let (av, bv) = (values(m * k, 3), values(4 * k * n, 4));
            let a = Strided { data: &av, offset: 0, rs: k, cs: 1 };
            let b = Strided { data: &bv, offset: 1, rs: 4 * n, cs: 2 };
            let mut c = vec![f32::NAN; m * n];
            gemm(m, k, n, a, b, &mut c);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k).map(|p| av[i * k + p].to_f64() * bv[1 + p * 4 * n + 2 * j].to_f64()).sum();
                    assert_eq!(c[i * n + j] as f64, want, "[{m}, {k}, {n}] spaced b at ({i}, {j})");
                }
            }
        }
    }
}
