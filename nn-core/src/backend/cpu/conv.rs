//! The CPU kernels of the convolutions: im2col / col2im (plain and "wide" for stride 1), the
//! blocked GEMMs over samples, and the forward and backward passes built from them.
//!
//! Written over [`ConvElem`]: `f32` and `f64` sum in their own type; `bf16` (autocast's
//! convolutions, on a CPU with AVX512-BF16) keeps its column matrices in `bf16` for the
//! `bf16` GEMM, sums in `f32` and rounds each result once, as PyTorch's CPU does.

use half::bf16;

use super::gemm::{gemm, MatRef};
use super::{buffer_pool, gemm_bf16, team, with_float, CpuElement, CpuFloat, CpuStorage};
use crate::backend::ConvGeometry as Geometry;

/// An element type the convolutions run on: its column matrices hold it, and its GEMMs
/// sum into [`Acc`](ConvElem::Acc).
pub(crate) trait ConvElem: CpuElement + Copy + Send + Sync + 'static {
    /// The type products are summed in, and the gradients accumulated in.
    type Acc: CpuFloat;
    /// Zero.
    fn zero() -> Self;
    /// The value in the accumulator type (exact).
    fn widen(self) -> Self::Acc;
    /// An accumulated value rounded to this type.
    fn narrow(x: Self::Acc) -> Self;
    /// A buffer of accumulated values rounded to this type (kept as it is when the types
    /// are the same).
    fn narrow_vec(v: Vec<Self::Acc>) -> Vec<Self>;
    /// `c = a b + (c if accumulate)`, `c` row-major `m x n`.
    fn gemm_acc(
        dims: (usize, usize, usize),
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        accumulate: bool,
        c: &mut [Self::Acc],
    );
}

macro_rules! conv_elem_wide {
    ($t:ty) => {
        impl ConvElem for $t {
            type Acc = $t;
            fn zero() -> Self {
                0.0
            }
            #[inline(always)]
            fn widen(self) -> $t {
                self
            }
            #[inline(always)]
            fn narrow(x: $t) -> Self {
                x
            }
            fn narrow_vec(v: Vec<$t>) -> Vec<$t> {
                v
            }
            fn gemm_acc(
                dims: (usize, usize, usize),
                a: MatRef<'_, $t>,
                b: MatRef<'_, $t>,
                accumulate: bool,
                c: &mut [$t],
            ) {
                gemm(dims, 1.0, a, b, if accumulate { 1.0 } else { 0.0 }, c)
            }
        }
    };
}
conv_elem_wide!(f32);
conv_elem_wide!(f64);

impl ConvElem for bf16 {
    type Acc = f32;
    fn zero() -> Self {
        bf16::ZERO
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        super::widen::bf16_to_f32(self)
    }
    #[inline(always)]
    fn narrow(x: f32) -> Self {
        super::widen::f32_to_bf16(x)
    }
    fn narrow_vec(v: Vec<f32>) -> Vec<bf16> {
        let out = super::widen::convert(&v, super::widen::f32_to_bf16);
        buffer_pool::recycle(v);
        out
    }
    /// Through [`gemm_bf16`] (the caller checks that the CPU has it).
    fn gemm_acc(
        (m, k, n): (usize, usize, usize),
        a: MatRef<'_, bf16>,
        b: MatRef<'_, bf16>,
        accumulate: bool,
        c: &mut [f32],
    ) {
        fn strided(x: MatRef<'_, bf16>) -> gemm_bf16::Strided<'_> {
            gemm_bf16::Strided { data: x.data, offset: x.offset, rs: x.row_stride, cs: x.col_stride }
        }
        let slots = gemm_bf16::uninit(&mut c[..m * n]);
        gemm_bf16::run(m, k, n, strided(a), strided(b), slots, |_, sums, part| {
            for (d, &s) in part.iter_mut().zip(sums) {
                if accumulate {
                    // SAFETY: the slots are a view of `c`, initialized `f32`s.
                    *unsafe { d.assume_init_mut() } += s;
                } else {
                    d.write(s);
                }
            }
        });
    }
}

/// Whether a `dtype` convolution runs on its own type here (`bf16` on a CPU with
/// AVX512-BF16); other half types, and `bf16` elsewhere, are computed through `f32` copies.
pub(crate) fn native(dtype: crate::dtype::DType) -> bool {
    dtype != crate::dtype::DType::F16 && (dtype != crate::dtype::DType::BF16 || gemm_bf16::available())
}

/// The input columns `lo..hi` of output row `oh` that kernel tap `(ki, kj)` reads, and the
/// input row and first input column: `None` when the tap falls in the vertical padding.
/// Columns outside `lo..hi` read the horizontal padding (zeros).
#[inline]
fn tap_run(g: &Geometry, oh: usize, ki: usize, kj: usize) -> Option<(usize, usize, usize, usize)> {
    let (sh, sw) = g.opt.stride;
    let (ph, pw) = g.opt.padding;
    let (dh, dw) = g.opt.dilation;
    let ih = (oh * sh + ki * dh) as isize - ph as isize;
    if ih < 0 || ih >= g.h as isize {
        return None;
    }
    let off = (kj * dw) as isize - pw as isize;
    let lo = if off >= 0 { 0 } else { ((-off) as usize).div_ceil(sw) }.min(g.wo);
    let hi = if (g.w as isize) <= off { 0 } else { ((g.w as isize - off) as usize).div_ceil(sw) }.clamp(lo, g.wo);
    Some((lo, hi, ih as usize, ((lo * sw) as isize + off).max(0) as usize))
}

/// Fills the columns of one sample in a column matrix `[C/g * kh * kw, row_stride]` from
/// one group of that sample, `x` (`[C/g, H, W]` contiguous): row `r` of the sample's
/// block is `cols[r * row_stride + offset..][..Ho * Wo]`.
fn im2col<T: ConvElem>(x: &[T], g: &Geometry, cols: &mut [T], row_stride: usize, offset: usize) {
    let sw = g.opt.stride.1;
    let hw = g.out_pixels();
    for c in 0..g.in_channels_per_group() {
        let plane = &x[c * g.h * g.w..(c + 1) * g.h * g.w];
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                let row = ((c * g.kh + ki) * g.kw + kj) * row_stride + offset;
                let dst = &mut cols[row..row + hw];
                for oh in 0..g.ho {
                    let line = &mut dst[oh * g.wo..(oh + 1) * g.wo];
                    let Some((lo, hi, ih, first)) = tap_run(g, oh, ki, kj) else {
                        line.fill(T::zero());
                        continue;
                    };
                    // Zeros around a copied (or strided-gathered) middle run.
                    let src = &plane[ih * g.w..(ih + 1) * g.w];
                    line[..lo].fill(T::zero());
                    line[hi..].fill(T::zero());
                    if sw == 1 {
                        line[lo..hi].copy_from_slice(&src[first..first + (hi - lo)]);
                    } else {
                        for (k, v) in line[lo..hi].iter_mut().enumerate() {
                            *v = src[first + k * sw];
                        }
                    }
                }
            }
        }
    }
}

/// Adds one sample's block of a column matrix (laid out as for [`im2col`]) back into one
/// group of that sample's input gradient.
fn col2im<T: CpuFloat>(cols: &[T], g: &Geometry, dx: &mut [T], row_stride: usize, offset: usize) {
    let sw = g.opt.stride.1;
    let hw = g.out_pixels();
    for c in 0..g.in_channels_per_group() {
        let plane = &mut dx[c * g.h * g.w..(c + 1) * g.h * g.w];
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                let row = ((c * g.kh + ki) * g.kw + kj) * row_stride + offset;
                let src = &cols[row..row + hw];
                for oh in 0..g.ho {
                    let Some((lo, hi, ih, first)) = tap_run(g, oh, ki, kj) else { continue };
                    let line = &mut plane[ih * g.w..(ih + 1) * g.w];
                    let run = &src[oh * g.wo + lo..oh * g.wo + hi];
                    if sw == 1 {
                        for (d, &v) in line[first..first + run.len()].iter_mut().zip(run) {
                            *d = *d + v;
                        }
                    } else {
                        for (k, &v) in run.iter().enumerate() {
                            line[first + k * sw] = line[first + k * sw] + v;
                        }
                    }
                }
            }
        }
    }
}

/// How one sample's output positions map to columns of the column matrix.
///
/// `Exact` has one column per output position (`Ho * Wo`). `Wide`, used for stride 1,
/// has one per position of the (padded) input row: `Ho * Wp` columns, of which the first
/// `Wo` of every `Wp` are real outputs. Its payoff is that a kernel tap's row of the
/// column matrix is then one contiguous run of the padded input plane, so im2col and
/// col2im are a copy (or add) per tap instead of one per tap and output row (for a
/// 11-wide output, 11x fewer and 13x longer runs). The extra columns cost `Wp / Wo - 1`
/// more GEMM work (18% on 13-wide inputs, 2% at 224); their outputs are dropped, their
/// entries in the column matrix are zeros and their output gradients are zero, and col2im
/// adds only the real columns, so they add nothing to the input or weight gradients, NaN
/// included.
#[derive(Clone, Copy)]
struct Cols {
    /// Padded input height and width (`Wide`), or `(0, 0)` for `Exact`.
    hp: usize,
    wp: usize,
    /// Columns per output row (`Wo` or `Wp`) and per sample.
    row: usize,
    span: usize,
}

impl Cols {
    fn new(g: &Geometry) -> Cols {
        if g.opt.stride == (1, 1) {
            let (hp, wp) = (g.h + 2 * g.opt.padding.0, g.w + 2 * g.opt.padding.1);
            Cols { hp, wp, row: wp, span: g.ho * wp }
        } else {
            Cols { hp: 0, wp: 0, row: g.wo, span: g.out_pixels() }
        }
    }
    fn wide(&self) -> bool {
        self.hp > 0
    }
    /// Start of tap `(ki, kj)`'s run in the padded plane.
    fn tap_offset(&self, g: &Geometry, ki: usize, kj: usize) -> usize {
        ki * g.opt.dilation.0 * self.wp + kj * g.opt.dilation.1
    }
}

/// Copies one group of one sample (`[C/g, H, W]`) into `out` (`[C/g, Hp, Wp]`) with zeros
/// around it, or returns the input itself when there is no padding.
fn padded<'a, T: ConvElem>(x: &'a [T], g: &Geometry, l: &Cols, out: &'a mut Vec<T>) -> &'a [T] {
    let (ph, pw) = g.opt.padding;
    if (ph, pw) == (0, 0) {
        return x;
    }
    out.clear();
    out.resize(g.in_channels_per_group() * l.hp * l.wp, T::zero());
    for c in 0..g.in_channels_per_group() {
        for ih in 0..g.h {
            let dst = &mut out[(c * l.hp + ih + ph) * l.wp + pw..][..g.w];
            dst.copy_from_slice(&x[(c * g.h + ih) * g.w..][..g.w]);
        }
    }
    out
}

/// [`im2col`] for the `Wide` layout, from the padded planes `xp` (`[C/g, Hp, Wp]`).
fn im2col_wide<T: ConvElem>(xp: &[T], g: &Geometry, l: &Cols, cols: &mut [T], row_stride: usize, offset: usize) {
    let plane = l.hp * l.wp;
    for c in 0..g.in_channels_per_group() {
        let src = &xp[c * plane..(c + 1) * plane];
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                let row = ((c * g.kh + ki) * g.kw + kj) * row_stride + offset;
                let dst = &mut cols[row..row + l.span];
                // The run may reach past the plane's end only in dropped columns.
                let start = l.tap_offset(g, ki, kj);
                let n = l.span.min(plane - start);
                dst[..n].copy_from_slice(&src[start..start + n]);
                dst[n..].fill(T::zero());
                // Dropped columns hold zeros, not the input: their zero output gradient
                // times an infinite input would be a NaN in the weight gradient at a tap
                // PyTorch never pairs with that input.
                for oh in 0..g.ho {
                    dst[oh * l.wp + g.wo..(oh + 1) * l.wp].fill(T::zero());
                }
            }
        }
    }
}

/// [`col2im`] for the `Wide` layout, adding into padded planes `dxp` (`[C/g, Hp, Wp]`).
fn col2im_wide<T: CpuFloat>(cols: &[T], g: &Geometry, l: &Cols, dxp: &mut [T], row_stride: usize, offset: usize) {
    let plane = l.hp * l.wp;
    for c in 0..g.in_channels_per_group() {
        let dst = &mut dxp[c * plane..(c + 1) * plane];
        for ki in 0..g.kh {
            for kj in 0..g.kw {
                let row = ((c * g.kh + ki) * g.kw + kj) * row_stride + offset;
                let start = l.tap_offset(g, ki, kj);
                let n = l.span.min(plane - start);
                // Real columns only: a dropped column's value (zero gradient times a
                // non-finite weight: NaN) would reach an input PyTorch's gradient does not.
                for oh in 0..g.ho {
                    let (from, to) = (oh * l.wp, (oh * l.wp + g.wo).min(n));
                    if from >= to {
                        break;
                    }
                    for (d, &v) in dst[start + from..start + to].iter_mut().zip(&cols[row + from..row + to]) {
                        *d = *d + v;
                    }
                }
            }
        }
    }
}

/// Scratch memory for one column matrix, at most this many bytes per task: samples are
/// processed in blocks that fit (at least one sample per block).
const COLS_BYTES: usize = 8 << 20;

/// How many samples each task takes: the batch split evenly over the threads when the
/// work is worth splitting, capped so one block's column matrix fits [`COLS_BYTES`].
fn samples_per_task<T>(g: &Geometry, l: &Cols) -> usize {
    let per_sample = g.col_rows() * l.span;
    let fit = (COLS_BYTES / std::mem::size_of::<T>() / per_sample.max(1)).max(1);
    let flops = 2 * g.n * per_sample * g.out_channels_per_group() * g.opt.groups;
    // By the team's size, not by whether the team runs this loop: the weight gradient
    // adds one partial sum per block of samples, so the split must not follow timing.
    let threads = if flops >= 1 << 21 { team::parts() } else { 1 };
    g.n.div_ceil(threads).clamp(1, fit)
}

/// The convolution of contiguous buffers (see [`crate::backend::Storage::conv2d`]):
/// `f32`, `f64`, and `bf16` where [`native`] says so (the caller widens the rest).
pub(crate) fn forward(x: &CpuStorage, w: &CpuStorage, bias: Option<&CpuStorage>, g: &Geometry) -> CpuStorage {
    fn run<T: ConvElem>(x: &[T], w: &CpuStorage, bias: Option<&CpuStorage>, g: &Geometry) -> CpuStorage {
        let wv = T::slice(w).expect("same dtype");
        let bv = bias.map(|b| T::slice(b).expect("same dtype"));
        T::into_storage(conv_forward(x, wv, bv, g))
    }
    if let CpuStorage::BF16(xv) = x {
        assert!(native(x.dtype()), "conv2d: bf16 kernels need AVX512-BF16 (the caller widens)");
        return run(xv, w, bias, g);
    }
    with_float!(x, "conv2d", T, xv => run(xv, w, bias, g))
}

/// The input and weight gradients (see [`crate::backend::Storage::conv2d_backward`]),
/// for the types [`forward`] takes.
pub(crate) fn backward(
    gy: &CpuStorage,
    x: &CpuStorage,
    w: &CpuStorage,
    g: &Geometry,
    (need_dx, need_dw): (bool, bool),
) -> (CpuStorage, CpuStorage) {
    fn run<T: ConvElem>(
        gv: &[T],
        x: &CpuStorage,
        w: &CpuStorage,
        g: &Geometry,
        need: (bool, bool),
    ) -> (CpuStorage, CpuStorage) {
        let wv = T::slice(w).expect("same dtype");
        let xv = T::slice(x).expect("same dtype");
        let (dx, dw) = conv_backward(xv, wv, gv, g, need.0, need.1);
        (T::into_storage(dx), T::into_storage(dw))
    }
    if let CpuStorage::BF16(gv) = gy {
        assert!(native(gy.dtype()), "conv2d: bf16 kernels need AVX512-BF16 (the caller widens)");
        return run(gv, x, w, g, (need_dx, need_dw));
    }
    with_float!(gy, "conv2d", T, gv => run(gv, x, w, g, (need_dx, need_dw)))
}

/// Forward over blocks of samples: one im2col for the whole block (`[C/g * kh * kw,
/// B * span]`, see [`Cols`]) and one GEMM per group, so the GEMM sees a wide matrix instead
/// of one small product per sample; the `[O/g, B * span]` result (in the accumulator type)
/// is copied into the `[B, O, Ho, Wo]` output with the bias added, each value rounded once.
fn conv_forward<T: ConvElem>(x: &[T], w: &[T], bias: Option<&[T]>, g: &Geometry) -> Vec<T> {
    let (cg, og, ckk, hw) = (g.in_channels_per_group(), g.out_channels_per_group(), g.col_rows(), g.out_pixels());
    let (in_sample, out_sample, group_in) = (g.c * g.h * g.w, g.o * hw, g.in_channels_per_group() * g.h * g.w);
    let l = Cols::new(g);
    let block = samples_per_task::<T>(g, &l);
    let mut out = T::alloc_buffer(g.n * out_sample);
    out.resize(g.n * out_sample, T::zero());
    let body = |(bi, y): (usize, &mut [T])| {
        let nb = y.len() / out_sample.max(1);
        let cols_n = nb * l.span;
        let mut cols = T::alloc_buffer(ckk * cols_n);
        cols.resize(ckk * cols_n, T::zero());
        let mut yg = T::Acc::alloc_buffer(og * cols_n);
        yg.resize(og * cols_n, <T::Acc as num_traits::Zero>::zero());
        let mut pad = Vec::new();
        for gi in 0..g.opt.groups {
            for i in 0..nb {
                let xg = &x[(bi * block + i) * in_sample + gi * cg * g.h * g.w..][..group_in];
                if l.wide() {
                    im2col_wide(padded(xg, g, &l, &mut pad), g, &l, &mut cols, cols_n, i * l.span);
                } else {
                    im2col(xg, g, &mut cols, cols_n, i * l.span);
                }
            }
            let wg = MatRef::row_major(&w[gi * og * ckk..(gi + 1) * og * ckk], (og, ckk), false);
            T::gemm_acc((og, ckk, cols_n), wg, MatRef::row_major(&cols, (ckk, cols_n), false), false, &mut yg);
            for i in 0..nb {
                for o in 0..og {
                    let oc = gi * og + o;
                    let b = bias.map_or(T::zero(), |b| b[oc]).widen();
                    let src = &yg[o * cols_n + i * l.span..][..l.span];
                    let dst = &mut y[i * out_sample + oc * hw..][..hw];
                    for (d, s) in dst.chunks_exact_mut(g.wo).zip(src.chunks(l.row)) {
                        for (d, &v) in d.iter_mut().zip(s) {
                            *d = T::narrow(v + b);
                        }
                    }
                }
            }
        }
        buffer_pool::recycle(cols);
        buffer_pool::recycle(yg);
    };
    if g.n <= block {
        // One task: run it here (its GEMM may then use the pool) instead of handing it to
        // a worker and sleeping until it is done.
        body((0, &mut out[..]));
    } else {
        team::for_chunks(&mut out, block * out_sample, |bi, y| body((bi, y)));
    }
    out
}

/// Input and weight gradients over the same sample blocks as the forward: the block's
/// output gradient is gathered to `[O/g, B * span]` (zeros in dropped columns), then one
/// GEMM gives the weight gradient (against the recomputed columns) and one the column
/// gradient (scattered back by col2im). Each task accumulates its own weight-gradient
/// partial. Gradients accumulate in the accumulator type and are rounded once at the end.
fn conv_backward<T: ConvElem>(
    x: &[T],
    w: &[T],
    gy: &[T],
    geo: &Geometry,
    need_dx: bool,
    need_dw: bool,
) -> (Vec<T>, Vec<T>) {
    let zero = <T::Acc as num_traits::Zero>::zero();
    let (cg, og, ckk, hw) =
        (geo.in_channels_per_group(), geo.out_channels_per_group(), geo.col_rows(), geo.out_pixels());
    let (in_sample, out_sample, group_in) =
        (geo.c * geo.h * geo.w, geo.o * hw, geo.in_channels_per_group() * geo.h * geo.w);
    let l = Cols::new(geo);
    let block = samples_per_task::<T>(geo, &l);
    // Sized by the geometry, not by `x`: without the weight gradient `x` is never read (a
    // transposed convolution passes a stand-in).
    let dx_len = if need_dx { geo.n * in_sample } else { 0 };
    let mut dx = T::Acc::alloc_buffer(dx_len);
    dx.resize(dx_len, zero);
    let wlen = w.len();
    let (ph, pw) = geo.opt.padding;
    // One block of samples starting at sample `n0`; `dxs` is the block's input gradient.
    let per_block = |n0: usize, nb: usize, dxs: &mut [T::Acc], dw: &mut Vec<T::Acc>| {
        let cols_n = nb * l.span;
        let mut cols = T::alloc_buffer(ckk * cols_n);
        cols.resize(ckk * cols_n, T::zero());
        let mut dcols = T::Acc::alloc_buffer(if need_dx { ckk * cols_n } else { 0 });
        dcols.resize(if need_dx { ckk * cols_n } else { 0 }, zero);
        let mut gyg = T::alloc_buffer(og * cols_n);
        gyg.resize(og * cols_n, T::zero());
        let (mut pad, mut dpad) = (Vec::new(), Vec::new());
        for gi in 0..geo.opt.groups {
            for i in 0..nb {
                for o in 0..og {
                    let src = &gy[(n0 + i) * out_sample + (gi * og + o) * hw..][..hw];
                    let dst = &mut gyg[o * cols_n + i * l.span..][..l.span];
                    for (d, s) in dst.chunks_mut(l.row).zip(src.chunks_exact(geo.wo)) {
                        d[..geo.wo].copy_from_slice(s);
                        d[geo.wo..].fill(T::zero());
                    }
                }
            }
            let xg = |i: usize| &x[(n0 + i) * in_sample + gi * group_in..][..group_in];
            if need_dw {
                for i in 0..nb {
                    if l.wide() {
                        im2col_wide(padded(xg(i), geo, &l, &mut pad), geo, &l, &mut cols, cols_n, i * l.span);
                    } else {
                        im2col(xg(i), geo, &mut cols, cols_n, i * l.span);
                    }
                }
                // dW_g += gy_g (og x B span) * cols^T (B span x ckk)
                let (gy_rows, cols_t) =
                    (MatRef::row_major(&gyg, (og, cols_n), false), MatRef::row_major(&cols, (cols_n, ckk), true));
                T::gemm_acc((og, cols_n, ckk), gy_rows, cols_t, true, &mut dw[gi * og * ckk..(gi + 1) * og * ckk]);
            }
            if need_dx {
                // dcols = W_g^T (ckk x og) * gy_g (og x B span)
                let wt = MatRef::row_major(&w[gi * og * ckk..(gi + 1) * og * ckk], (ckk, og), true);
                T::gemm_acc((ckk, og, cols_n), wt, MatRef::row_major(&gyg, (og, cols_n), false), false, &mut dcols);
                for i in 0..nb {
                    let d = &mut dxs[i * in_sample + gi * group_in..][..group_in];
                    if !l.wide() {
                        col2im(&dcols, geo, d, cols_n, i * l.span);
                    } else if (ph, pw) == (0, 0) {
                        col2im_wide(&dcols, geo, &l, d, cols_n, i * l.span);
                    } else {
                        // Into a padded scratch plane, then its interior into the gradient.
                        dpad.clear();
                        dpad.resize(cg * l.hp * l.wp, zero);
                        col2im_wide(&dcols, geo, &l, &mut dpad, cols_n, i * l.span);
                        for c in 0..cg {
                            for ih in 0..geo.h {
                                let src = &dpad[(c * l.hp + ih + ph) * l.wp + pw..][..geo.w];
                                for (d, &v) in d[(c * geo.h + ih) * geo.w..][..geo.w].iter_mut().zip(src) {
                                    *d = *d + v;
                                }
                            }
                        }
                    }
                }
            }
        }
        buffer_pool::recycle(cols);
        buffer_pool::recycle(dcols);
        buffer_pool::recycle(gyg);
    };
    let zeros = || vec![zero; if need_dw { wlen } else { 0 }];
    let dw = if geo.n <= block {
        // One task: here, as in the forward.
        let mut dw = zeros();
        per_block(0, geo.n, if need_dx { &mut dx[..] } else { &mut [] }, &mut dw);
        dw
    } else {
        // One weight-gradient partial per block, summed after.
        let mut partials: Vec<Vec<T::Acc>> = (0..geo.n.div_ceil(block)).map(|_| zeros()).collect();
        if need_dx && !dx.is_empty() {
            team::for_chunks2((&mut dx, block * in_sample), (&mut partials, 1), |bi, dxs, dw| {
                per_block(bi * block, dxs.len() / in_sample.max(1), dxs, &mut dw[0])
            });
        } else {
            team::for_chunks(&mut partials, 1, |bi, dw| {
                per_block(bi * block, block.min(geo.n - bi * block), &mut [], &mut dw[0])
            });
        }
        partials.into_iter().reduce(add_vecs).unwrap_or_else(zeros)
    };
    (T::narrow_vec(dx), T::narrow_vec(dw))
}

fn add_vecs<T: CpuFloat>(mut a: Vec<T>, b: Vec<T>) -> Vec<T> {
    if a.is_empty() {
        return b;
    }
    for (x, y) in a.iter_mut().zip(b) {
        *x = *x + y;
    }
    a
}
