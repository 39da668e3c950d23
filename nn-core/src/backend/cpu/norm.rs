//! Fused row kernels: layer normalization (forward and backward) and the softmax
//! backward, over contiguous rows of `n` elements, in `f32` and `f64`.
//!
//! Composed from primitives, a layer norm is ten passes over its input forward and about
//! twenty backward, each writing a fresh tensor; here each is one pass per row, the row
//! in L1. (The composite remains the reference: these kernels are tested against it.)

use super::parts::{split_parts, PAR_THRESHOLD};
use super::{isa_loops, team, values_of, CpuFloat, CpuStorage};
use std::borrow::Cow;
use std::mem::MaybeUninit;

use crate::shape::Layout;

/// Rows per task when a kernel over `rows` rows of `n` splits over the team, or all of
/// them when it does not pay.
pub(crate) fn rows_per_task(rows: usize, n: usize) -> usize {
    if split_parts(rows * n, PAR_THRESHOLD) && rows > 1 {
        // By the team's size (`team::parts`): the weight and bias gradients add one
        // partial sum per task, so the split must not follow timing.
        (PAR_THRESHOLD / 2).div_ceil(n).min(rows.div_ceil(team::parts()))
    } else {
        rows.max(1)
    }
}

/// Elements summed in `T` before their sum joins the `f64` total in [`sum8`].
const SUM_BLOCK: usize = 1024;

/// `Σ f(a[i], b[i])` (equal lengths) with eight independent partial sums, so that the
/// loop vectorizes (one chain could not be reassociated), over blocks of [`SUM_BLOCK`]
/// whose sums add up in `f64`. (In `f32` alone the rounding grew with the row, and a long
/// row's mean and variance drifted; PyTorch's cascaded sums keep them.)
#[inline(always)]
pub(crate) fn sum8<T: CpuFloat>(a: &[T], b: &[T], f: impl Fn(T, T) -> T) -> T {
    debug_assert_eq!(a.len(), b.len());
    if a.len() <= SUM_BLOCK {
        return sum8_block(a, b, &f);
    }
    let total: f64 = a
        .chunks(SUM_BLOCK)
        .zip(b.chunks(SUM_BLOCK))
        .map(|(a, b)| crate::dtype::Element::as_f64(sum8_block(a, b, &f)))
        .sum();
    <T as crate::dtype::Element>::from_f64(total)
}

/// [`sum8`] of one block, in `T`.
#[inline(always)]
fn sum8_block<T: CpuFloat>(a: &[T], b: &[T], f: &impl Fn(T, T) -> T) -> T {
    let mut acc = [T::zero(); 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: T = ca.remainder().iter().zip(cb.remainder()).map(|(&x, &y)| f(x, y)).fold(T::zero(), |s, v| s + v);
    for (x, y) in ca.zip(cb) {
        let (x, y): (&[T; 8], &[T; 8]) = (x.try_into().expect("chunks of 8"), y.try_into().expect("chunks of 8"));
        for l in 0..8 {
            acc[l] = acc[l] + f(x[l], y[l]);
        }
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// The typed values of an optional per-element operand (weight or bias), or `None`.
fn param<'a, T: CpuFloat>(p: Option<(&'a CpuStorage, &Layout)>) -> Option<Cow<'a, [T]>> {
    p.map(|(s, l)| values_of(T::slice(s).expect("layer_norm: operands of one dtype (checked by the op)"), l))
}

/// The rows of [`layer_norm`] in `xs` into `ys`, with `[mean, rstd]` per row into `st`
/// (inlined into an AVX2 copy by [`isa_loops::with_avx2`]).
#[inline(always)]
fn ln_rows<T: CpuFloat>(
    (xs, ys, st): (&[T], &mut [MaybeUninit<T>], &mut [MaybeUninit<T>]),
    (w, b): (Option<&[T]>, Option<&[T]>),
    n: usize,
    (nt, eps, centered): (T, T, bool),
) {
    for ((xr, yr), s) in xs.chunks_exact(n).zip(ys.chunks_exact_mut(n)).zip(st.chunks_exact_mut(2)) {
        // RMS norm (`centered` false): the mean is taken as 0, the variance is mean(x^2).
        let mean = if centered { sum8(xr, xr, |v, _| v) / nt } else { T::zero() };
        let var = sum8(xr, xr, |v, _| (v - mean) * (v - mean)) / nt;
        let rstd = T::one() / (var + eps).sqrt();
        let xh = xr.iter().map(|&v| (v - mean) * rstd);
        match (w, b) {
            (Some(w), Some(b)) => {
                for (((o, h), &w), &b) in yr.iter_mut().zip(xh).zip(w).zip(b) {
                    o.write(h * w + b);
                }
            }
            (Some(w), None) => {
                for ((o, h), &w) in yr.iter_mut().zip(xh).zip(w) {
                    o.write(h * w);
                }
            }
            (None, Some(b)) => {
                for ((o, h), &b) in yr.iter_mut().zip(xh).zip(b) {
                    o.write(h + b);
                }
            }
            (None, None) => {
                for (o, h) in yr.iter_mut().zip(xh) {
                    o.write(h);
                }
            }
        }
        s[0].write(mean);
        s[1].write(rstd);
    }
}

/// Layer norm of rows of `n`: `[y, mean, rstd]`, `rstd = 1 / sqrt(var + eps)` with the
/// biased variance (computed in two passes, about the mean). Not `centered`, RMS norm:
/// the mean taken as 0 (and saved as 0), `rstd = 1 / sqrt(mean(x^2) + eps)`. `None` for
/// dtypes other than `f32`/`f64`.
pub(crate) fn layer_norm(
    x: (&CpuStorage, &Layout),
    w: Option<(&CpuStorage, &Layout)>,
    b: Option<(&CpuStorage, &Layout)>,
    n: usize,
    (eps, centered): (f64, bool),
) -> Option<[CpuStorage; 3]> {
    fn typed<T: CpuFloat>(
        (v, l): (&[T], &Layout),
        w: Option<(&CpuStorage, &Layout)>,
        b: Option<(&CpuStorage, &Layout)>,
        n: usize,
        (eps, centered): (f64, bool),
    ) -> [CpuStorage; 3] {
        let x = &*values_of(v, l);
        let (w, b) = (param::<T>(w), param::<T>(b));
        let (w, b) = (w.as_deref(), b.as_deref());
        let rows = x.len() / n;
        let (mut y, mut stats) = (T::alloc_buffer(x.len()), T::alloc_buffer(2 * rows));
        let per = rows_per_task(rows, n);
        let (nt, eps) = (T::from_f64(n as f64), T::from_f64(eps));
        let (ys, st) = (&mut y.spare_capacity_mut()[..x.len()], &mut stats.spare_capacity_mut()[..2 * rows]);
        team::for_chunks2((ys, per * n), (st, 2 * per), |q, ys, st| {
            let xs = &x[q * per * n..][..ys.len()];
            isa_loops::with_avx2(
                #[inline(always)]
                || ln_rows((xs, ys, st), (w, b), n, (nt, eps, centered)),
            )
        });
        // SAFETY: the parts are whole rows covering every row, and `ln_rows` writes each
        // row's `n` outputs and two statistics (a panicking part re-raises before this).
        unsafe {
            y.set_len(x.len());
            stats.set_len(2 * rows);
        }
        let (mean, rstd): (Vec<T>, Vec<T>) = stats.chunks_exact(2).map(|s| (s[0], s[1])).unzip();
        [T::into_storage(y), T::into_storage(mean), T::into_storage(rstd)]
    }
    match x.0 {
        CpuStorage::F32(v) => Some(typed::<f32>((v, x.1), w, b, n, (eps, centered))),
        CpuStorage::F64(v) => Some(typed::<f64>((v, x.1), w, b, n, (eps, centered))),
        _ => None,
    }
}

/// Rows `first..` of [`layer_norm_backward`] (`gxs` holds their `gx` when `need[0]`),
/// adding their `gw` and `gb` terms into `part` (inlined into an AVX2 copy by
/// [`isa_loops::with_avx2`]).
#[inline(always)]
fn ln_backward_rows<T: CpuFloat>(
    (part, gxs): (&mut [T], &mut [MaybeUninit<T>]),
    (first, end): (usize, usize),
    (x, g, mean, rstd): (&[T], &[T], &[T], &[T]),
    w: Option<&[T]>,
    (n, centered): (usize, bool),
    [need_x, need_w, need_b]: [bool; 3],
) {
    let nt = T::from_f64(n as f64);
    let (pw, pb) = part.split_at_mut(n);
    // `gy w` of the row, when there is a weight.
    let mut scaled = if w.is_some() && need_x { vec![T::zero(); n] } else { Vec::new() };
    for r in first..end {
        let (xr, gr) = (&x[r * n..][..n], &g[r * n..][..n]);
        let (m, s) = (mean[r], rstd[r]);
        if need_w {
            for ((p, &gv), &xv) in pw.iter_mut().zip(gr).zip(xr) {
                *p = *p + gv * ((xv - m) * s);
            }
        }
        if need_b {
            for (p, &gv) in pb.iter_mut().zip(gr) {
                *p = *p + gv;
            }
        }
        if need_x {
            let gh: &[T] = match w {
                Some(w) => {
                    for ((o, &gv), &wv) in scaled.iter_mut().zip(gr).zip(w) {
                        *o = gv * wv;
                    }
                    &scaled
                }
                None => gr,
            };
            // RMS norm: no mean was subtracted, so no mean(ĝ) term.
            let a = if centered { sum8(gh, gh, |v, _| v) / nt } else { T::zero() };
            let c = sum8(gh, xr, |hv, xv| hv * ((xv - m) * s)) / nt;
            let gxr = &mut gxs[(r - first) * n..][..n];
            for ((o, &hv), &xv) in gxr.iter_mut().zip(gh).zip(xr) {
                o.write(s * (hv - a - (xv - m) * s * c));
            }
        }
    }
}

/// The gradients of [`layer_norm`] from the upstream gradient `gy` (rows of `n`), the
/// input and the saved `mean`/`rstd`: `[gx, gw, gb]`, each computed when `need` says so
/// (`gw`/`gb` only with a weight/bias, summed over rows). With `x̂ = (x - mean) rstd` and
/// `ĝ = gy w`: `gx = rstd (ĝ - mean(ĝ) - x̂ mean(ĝ x̂))`, `gw = Σ gy x̂`, `gb = Σ gy`; not
/// `centered` (RMS norm, mean 0), `gx = rstd (ĝ - x̂ mean(ĝ x̂))`.
pub(crate) fn layer_norm_backward(
    x: (&CpuStorage, &Layout),
    gy: (&CpuStorage, &Layout),
    (mean, rstd): (&CpuStorage, &CpuStorage),
    w: Option<(&CpuStorage, &Layout)>,
    (n, centered): (usize, bool),
    need: [bool; 3],
) -> Option<[Option<CpuStorage>; 3]> {
    fn typed<T: CpuFloat>(
        (v, l): (&[T], &Layout),
        gy: (&CpuStorage, &Layout),
        (mean, rstd): (&CpuStorage, &CpuStorage),
        w: Option<(&CpuStorage, &Layout)>,
        (n, centered): (usize, bool),
        [need_x, need_w, need_b]: [bool; 3],
    ) -> [Option<CpuStorage>; 3] {
        let one = "layer_norm backward: operands of one dtype (checked by the op)";
        let x = &*values_of(v, l);
        let g = &*values_of(T::slice(gy.0).expect(one), gy.1);
        let (mean, rstd) = (T::slice(mean).expect(one), T::slice(rstd).expect(one));
        let w = param::<T>(w);
        let w = w.as_deref();
        let rows = x.len() / n;
        let mut gx = if need_x { T::alloc_buffer(x.len()) } else { Vec::new() };
        let per = rows_per_task(rows, n);
        let tasks = rows.div_ceil(per);
        // Per task: the partial sums of gw and gb over its rows.
        let mut partial = vec![T::zero(); tasks * 2 * n];
        let work = |q: usize, part: &mut [T], gxs: &mut [MaybeUninit<T>]| {
            let range = (q * per, (q * per + per).min(rows));
            isa_loops::with_avx2(
                #[inline(always)]
                || ln_backward_rows((part, gxs), range, (x, g, mean, rstd), w, (n, centered), [need_x, need_w, need_b]),
            )
        };
        if need_x {
            team::for_chunks2((&mut partial, 2 * n), (&mut gx.spare_capacity_mut()[..x.len()], per * n), work);
            // SAFETY: the parts are whole rows covering every row, and with `need_x`
            // each row's `n` gradients are written (a panicking part re-raises first).
            unsafe { gx.set_len(x.len()) };
        } else {
            team::for_chunks(&mut partial, 2 * n, |q, part| work(q, part, &mut []));
        }
        let mut sums = partial.chunks_exact(2 * n);
        let mut total = sums.next().map(<[T]>::to_vec).unwrap_or_else(|| vec![T::zero(); 2 * n]);
        for p in sums {
            for (t, v) in total.iter_mut().zip(p) {
                *t = *t + *v;
            }
        }
        let gb = total.split_off(n);
        [
            need_x.then(|| T::into_storage(gx)),
            need_w.then(|| T::into_storage(total)),
            need_b.then(|| T::into_storage(gb)),
        ]
    }
    match x.0 {
        CpuStorage::F32(v) => Some(typed::<f32>((v, x.1), gy, (mean, rstd), w, (n, centered), need)),
        CpuStorage::F64(v) => Some(typed::<f64>((v, x.1), gy, (mean, rstd), w, (n, centered), need)),
        _ => None,
    }
}

/// The rows of [`softmax_backward`] starting at row `base / n` into `out` (inlined into
/// an AVX2 copy by [`isa_loops::with_avx2`]).
#[inline(always)]
fn softmax_backward_rows<T: CpuFloat>(
    out: &mut [MaybeUninit<T>],
    (g, y): (&[T], &[T]),
    base: usize,
    n: usize,
    log: bool,
) {
    for (r, o) in out.chunks_exact_mut(n).enumerate() {
        let (gr, yr) = (&g[base + r * n..][..n], &y[base + r * n..][..n]);
        if log {
            let s = sum8(gr, gr, |v, _| v);
            for ((o, &gv), &yv) in o.iter_mut().zip(gr).zip(yr) {
                o.write(gv - yv.exp() * s);
            }
        } else {
            let s = sum8(gr, yr, |gv, yv| gv * yv);
            for ((o, &gv), &yv) in o.iter_mut().zip(gr).zip(yr) {
                o.write(yv * (gv - s));
            }
        }
    }
}

/// The gradient of a softmax (or log-softmax, `log`) along contiguous rows of `n`, from
/// the upstream gradient `g` and the forward output `y`: `y (g - Σ g y)`, or for the
/// log-softmax `g - exp(y) Σ g`. `None` for dtypes other than `f32`/`f64`.
pub(crate) fn softmax_backward(g: (&CpuStorage, &Layout), y: &CpuStorage, n: usize, log: bool) -> Option<CpuStorage> {
    fn typed<T: CpuFloat>((v, l): (&[T], &Layout), y: &CpuStorage, n: usize, log: bool) -> CpuStorage {
        let g = &*values_of(v, l);
        let y = T::slice(y).expect("softmax backward: operands of one dtype (checked by the op)");
        let mut gx = T::alloc_buffer(g.len());
        let per = rows_per_task(g.len() / n, n);
        team::for_chunks(&mut gx.spare_capacity_mut()[..g.len()], per * n, |q, out| {
            isa_loops::with_avx2(
                #[inline(always)]
                || softmax_backward_rows(out, (g, y), q * per * n, n, log),
            )
        });
        // SAFETY: the parts are whole rows covering every row, each of whose `n`
        // gradients is written above (a panicking part re-raises first).
        unsafe { gx.set_len(g.len()) };
        T::into_storage(gx)
    }
    match g.0 {
        CpuStorage::F32(v) => Some(typed::<f32>((v, g.1), y, n, log)),
        CpuStorage::F64(v) => Some(typed::<f64>((v, g.1), y, n, log)),
        _ => None,
    }
}
