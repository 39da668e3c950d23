//! Fused row kernels: layer normalization (forward and backward) and the softmax
//! backward, over contiguous rows of `n` elements, in `f32` and `f64`.
//!
//! Composed from primitives, a layer norm is ten passes over its input forward and about
//! twenty backward, each writing a fresh tensor; here each is one pass per row, the row
//! in L1. (The composite remains the reference: these kernels are tested against it.)

use super::elementwise::{split, PAR_THRESHOLD};
use super::{strided_to_vec, team, vmath, CpuElement, CpuFloat, CpuStorage};
use crate::shape::Layout;

/// Rows per task when a kernel over `rows` rows of `n` splits over the team, or all of
/// them when it does not pay.
fn rows_per_task(rows: usize, n: usize) -> usize {
    if split(rows * n, PAR_THRESHOLD) && rows > 1 {
        (PAR_THRESHOLD / 2).div_ceil(n).min(rows.div_ceil(team::threads()))
    } else {
        rows.max(1)
    }
}

/// `Σ f(i)` for `i < n` with eight independent partial sums (so the loop vectorizes
/// without reassociating a single chain).
#[inline(always)]
fn sum8<T: CpuFloat>(n: usize, f: impl Fn(usize) -> T) -> T {
    let mut acc = [T::zero(); 8];
    let body = n / 8 * 8;
    let mut i = 0;
    while i < body {
        for (l, a) in acc.iter_mut().enumerate() {
            *a = *a + f(i + l);
        }
        i += 8;
    }
    let mut tail = T::zero();
    for j in body..n {
        tail = tail + f(j);
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// The elements of a layout as a borrowed slice when contiguous, else copied.
fn rows_of<'a, T: CpuElement>(v: &'a [T], l: &Layout, copy: &'a mut Vec<T>) -> &'a [T] {
    match l.contiguous_range() {
        Some(r) => &v[r],
        None => {
            *copy = strided_to_vec(v, l);
            copy
        }
    }
}

/// The typed values of an optional per-element operand (weight or bias), or `None`.
fn param<'a, T: CpuFloat>(p: Option<(&'a CpuStorage, &Layout)>, copy: &'a mut Vec<T>) -> Option<&'a [T]> {
    p.map(|(s, l)| rows_of(T::slice(s).expect("layer_norm: operands of one dtype (checked by the op)"), l, copy))
}

/// Layer norm of rows of `n`: `[y, mean, rstd]`, `rstd = 1 / sqrt(var + eps)` with the
/// biased variance (computed in two passes, about the mean). `None` for dtypes other
/// than `f32`/`f64`.
pub(crate) fn layer_norm(
    x: (&CpuStorage, &Layout),
    w: Option<(&CpuStorage, &Layout)>,
    b: Option<(&CpuStorage, &Layout)>,
    n: usize,
    eps: f64,
) -> Option<[CpuStorage; 3]> {
    fn typed<T: CpuFloat>(
        (v, l): (&[T], &Layout),
        w: Option<(&CpuStorage, &Layout)>,
        b: Option<(&CpuStorage, &Layout)>,
        n: usize,
        eps: f64,
    ) -> [CpuStorage; 3] {
        let (mut xc, mut wc, mut bc) = (Vec::new(), Vec::new(), Vec::new());
        let x = rows_of(v, l, &mut xc);
        let (w, b) = (param::<T>(w, &mut wc), param::<T>(b, &mut bc));
        let rows = x.len() / n;
        let mut y = T::alloc_buffer(x.len());
        y.resize(x.len(), T::zero());
        let mut stats = T::alloc_buffer(2 * rows);
        stats.resize(2 * rows, T::zero());
        let per = rows_per_task(rows, n);
        let (nt, eps) = (T::from_f64(n as f64), T::from_f64(eps));
        team::for_chunks2((&mut y, per * n), (&mut stats, 2 * per), |q, ys, st| {
            vmath::with_avx2(|| {
                let xs = &x[q * per * n..][..ys.len()];
                for ((xr, yr), s) in xs.chunks_exact(n).zip(ys.chunks_exact_mut(n)).zip(st.chunks_exact_mut(2)) {
                    let mean = sum8(n, |i| xr[i]) / nt;
                    let var = sum8(n, |i| (xr[i] - mean) * (xr[i] - mean)) / nt;
                    let rstd = T::one() / (var + eps).sqrt();
                    match (w, b) {
                        (Some(w), Some(b)) => {
                            for i in 0..n {
                                yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
                            }
                        }
                        (Some(w), None) => {
                            for i in 0..n {
                                yr[i] = (xr[i] - mean) * rstd * w[i];
                            }
                        }
                        (None, Some(b)) => {
                            for i in 0..n {
                                yr[i] = (xr[i] - mean) * rstd + b[i];
                            }
                        }
                        (None, None) => {
                            for i in 0..n {
                                yr[i] = (xr[i] - mean) * rstd;
                            }
                        }
                    }
                    s[0] = mean;
                    s[1] = rstd;
                }
            })
        });
        let (mean, rstd): (Vec<T>, Vec<T>) = stats.chunks_exact(2).map(|s| (s[0], s[1])).unzip();
        [T::into_storage(y), T::into_storage(mean), T::into_storage(rstd)]
    }
    match x.0 {
        CpuStorage::F32(v) => Some(typed::<f32>((v, x.1), w, b, n, eps)),
        CpuStorage::F64(v) => Some(typed::<f64>((v, x.1), w, b, n, eps)),
        _ => None,
    }
}

/// The gradients of [`layer_norm`] from the upstream gradient `gy` (rows of `n`), the
/// input and the saved `mean`/`rstd`: `[gx, gw, gb]`, each computed when `need` says so
/// (`gw`/`gb` only with a weight/bias, summed over rows). With `x̂ = (x - mean) rstd` and
/// `ĝ = gy w`: `gx = rstd (ĝ - mean(ĝ) - x̂ mean(ĝ x̂))`, `gw = Σ gy x̂`, `gb = Σ gy`.
pub(crate) fn layer_norm_backward(
    x: (&CpuStorage, &Layout),
    gy: (&CpuStorage, &Layout),
    (mean, rstd): (&CpuStorage, &CpuStorage),
    w: Option<(&CpuStorage, &Layout)>,
    n: usize,
    need: [bool; 3],
) -> Option<[Option<CpuStorage>; 3]> {
    fn typed<T: CpuFloat>(
        (v, l): (&[T], &Layout),
        gy: (&CpuStorage, &Layout),
        (mean, rstd): (&CpuStorage, &CpuStorage),
        w: Option<(&CpuStorage, &Layout)>,
        n: usize,
        [need_x, need_w, need_b]: [bool; 3],
    ) -> [Option<CpuStorage>; 3] {
        let one = "layer_norm backward: operands of one dtype (checked by the op)";
        let (mut xc, mut gc, mut wc) = (Vec::new(), Vec::new(), Vec::new());
        let x = rows_of(v, l, &mut xc);
        let g = rows_of(T::slice(gy.0).expect(one), gy.1, &mut gc);
        let (mean, rstd) = (T::slice(mean).expect(one), T::slice(rstd).expect(one));
        let w = param::<T>(w, &mut wc);
        let rows = x.len() / n;
        let mut gx = Vec::new();
        if need_x {
            gx = T::alloc_buffer(x.len());
            gx.resize(x.len(), T::zero());
        }
        let per = rows_per_task(rows, n);
        let tasks = rows.div_ceil(per);
        // Per task: the partial sums of gw and gb over its rows.
        let mut partial = vec![T::zero(); tasks * 2 * n];
        let nt = T::from_f64(n as f64);
        let work = |q: usize, part: &mut [T], gxs: &mut [T]| {
            vmath::with_avx2(|| {
                let (pw, pb) = part.split_at_mut(n);
                let first = q * per;
                for r in first..(first + per).min(rows) {
                    let (xr, gr) = (&x[r * n..][..n], &g[r * n..][..n]);
                    let (m, s) = (mean[r], rstd[r]);
                    if need_w {
                        for i in 0..n {
                            pw[i] = pw[i] + gr[i] * (xr[i] - m) * s;
                        }
                    }
                    if need_b {
                        for i in 0..n {
                            pb[i] = pb[i] + gr[i];
                        }
                    }
                    if need_x {
                        let gxr = &mut gxs[(r - first) * n..][..n];
                        let gh = |i: usize| match w {
                            Some(w) => gr[i] * w[i],
                            None => gr[i],
                        };
                        let a = sum8(n, gh) / nt;
                        let c = sum8(n, |i| gh(i) * (xr[i] - m) * s) / nt;
                        for (i, o) in gxr.iter_mut().enumerate() {
                            *o = s * (gh(i) - a - (xr[i] - m) * s * c);
                        }
                    }
                }
            })
        };
        if need_x {
            team::for_chunks2((&mut partial, 2 * n), (&mut gx, per * n), work);
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
        CpuStorage::F32(v) => Some(typed::<f32>((v, x.1), gy, (mean, rstd), w, n, need)),
        CpuStorage::F64(v) => Some(typed::<f64>((v, x.1), gy, (mean, rstd), w, n, need)),
        _ => None,
    }
}

/// The gradient of a softmax (or log-softmax, `log`) along contiguous rows of `n`, from
/// the upstream gradient `g` and the forward output `y`: `y (g - Σ g y)`, or for the
/// log-softmax `g - exp(y) Σ g`. `None` for dtypes other than `f32`/`f64`.
pub(crate) fn softmax_backward(g: (&CpuStorage, &Layout), y: &CpuStorage, n: usize, log: bool) -> Option<CpuStorage> {
    fn typed<T: CpuFloat>((v, l): (&[T], &Layout), y: &CpuStorage, n: usize, log: bool) -> CpuStorage {
        let mut gc = Vec::new();
        let g = rows_of(v, l, &mut gc);
        let y = T::slice(y).expect("softmax backward: operands of one dtype (checked by the op)");
        let mut gx = T::alloc_buffer(g.len());
        gx.resize(g.len(), T::zero());
        let per = rows_per_task(g.len() / n, n);
        team::for_chunks(&mut gx, per * n, |q, out| {
            vmath::with_avx2(|| {
                let base = q * per * n;
                for (r, o) in out.chunks_exact_mut(n).enumerate() {
                    let (gr, yr) = (&g[base + r * n..][..n], &y[base + r * n..][..n]);
                    if log {
                        let s = sum8(n, |i| gr[i]);
                        for i in 0..n {
                            o[i] = gr[i] - yr[i].exp() * s;
                        }
                    } else {
                        let s = sum8(n, |i| gr[i] * yr[i]);
                        for i in 0..n {
                            o[i] = yr[i] * (gr[i] - s);
                        }
                    }
                }
            })
        });
        T::into_storage(gx)
    }
    match g.0 {
        CpuStorage::F32(v) => Some(typed::<f32>((v, g.1), y, n, log)),
        CpuStorage::F64(v) => Some(typed::<f64>((v, g.1), y, n, log)),
        _ => None,
    }
}
