//! Pooling kernels on the CPU: max pooling (with a vectorised 2x2 kernel) and average
//! pooling, planes spread over threads.

use super::parts::PAR_THRESHOLD;
use super::team;
use super::{with_float, CpuElement, CpuStorage};
use crate::backend::{AvgPool, MaxPool, PoolPlanes};
use crate::dtype::Element;
use num_traits::{Float, Zero};

/// Max pooling of contiguous planes (see [`crate::backend::Storage::max_pool2d`]).
pub(crate) fn max_pool2d(x: &CpuStorage, pool: &MaxPool) -> (CpuStorage, Argmax) {
    let pl = pool.planes;
    let numel = pl.planes * pl.ho * pl.wo;
    let (k, st, p, d) = (pool.options.kernel, pool.options.stride, pool.options.padding, pool.options.dilation);
    let plane_out = (pl.ho * pl.wo).max(1);
    // Spread planes over threads only when there is enough work per task.
    let parallel = super::parts::split(numel * k.0 * k.1, PAR_THRESHOLD * 8);
    // Only where every window lies inside the plane: with `ceil_mode` the last window of an
    // odd size hangs over the edge (the rows read past it, into the next row or plane).
    let window2x2 = k == (2, 2)
        && st == (2, 2)
        && p == (0, 0)
        && d == (1, 1)
        && pl.wo >= 4
        && 2 * pl.wo <= pl.w
        && 2 * pl.ho <= pl.h;
    with_float!(x, "max_pool2d", T, v => {
        let mut out = T::alloc_buffer(numel);
        out.resize(numel, T::zero());
        let argmax = if window2x2 {
            // The pooling of almost every CNN has its own vectorised kernel.
            let mut codes = vec![0u8; numel];
            let plane = |q: usize, y: &mut [T], c: &mut [u8]| {
                let src = &v[q * pl.h * pl.w..(q + 1) * pl.h * pl.w];
                for oh in 0..pl.ho {
                    let (r, o) = (2 * oh * pl.w, oh * pl.wo);
                    let rows = (&src[r..r + 2 * pl.wo], &src[r + pl.w..r + pl.w + 2 * pl.wo]);
                    max_2x2_row(rows.0, rows.1, &mut y[o..o + pl.wo], &mut c[o..o + pl.wo]);
                }
            };
            if parallel {
                team::for_chunks2((&mut out, plane_out), (&mut codes, plane_out), plane);
            } else {
                out.chunks_mut(plane_out).zip(codes.chunks_mut(plane_out)).enumerate().for_each(|(q, (y, c))| plane(q, y, c));
            }
            Argmax::Window2x2(codes)
        } else {
            let mut idx = vec![0i64; numel];
            let fits = (pl.ho - 1) * st.0 + k.0 <= pl.h && (pl.wo - 1) * st.1 + k.1 <= pl.w;
            let plane = |q: usize, y: &mut [T], ix: &mut [i64]| {
                let src = &v[q * pl.h * pl.w..(q + 1) * pl.h * pl.w];
                if p == (0, 0) && d == (1, 1) && fits {
                    // No padding and every window inside the plane (not so with
                    // `ceil_mode`): walk window rows as slices, no per-tap bounds logic.
                    for oh in 0..pl.ho {
                        for ow in 0..pl.wo {
                            let base = oh * st.0 * pl.w + ow * st.1;
                            let (mut best, mut bi) = (src[base], base);
                            for ki in 0..k.0 {
                                let start = base + ki * pl.w;
                                for (kj, &val) in src[start..start + k.1].iter().enumerate() {
                                    let take = beats(val, best);
                                    best = if take { val } else { best };
                                    bi = if take { start + kj } else { bi };
                                }
                            }
                            y[oh * pl.wo + ow] = best;
                            ix[oh * pl.wo + ow] = bi as i64;
                        }
                    }
                    return;
                }
                for oh in 0..pl.ho {
                    for ow in 0..pl.wo {
                        let mut best = T::neg_infinity();
                        let mut bi: i64 = -1;
                        for ki in 0..k.0 {
                            let ih = (oh * st.0 + ki * d.0) as isize - p.0 as isize;
                            if ih < 0 || ih >= pl.h as isize {
                                continue;
                            }
                            for kj in 0..k.1 {
                                let iw = (ow * st.1 + kj * d.1) as isize - p.1 as isize;
                                if iw < 0 || iw >= pl.w as isize {
                                    continue;
                                }
                                let flat = ih as usize * pl.w + iw as usize;
                                let val = src[flat];
                                if bi < 0 || beats(val, best) {
                                    best = val;
                                    bi = flat as i64;
                                }
                            }
                        }
                        y[oh * pl.wo + ow] = best;
                        ix[oh * pl.wo + ow] = bi.max(0);
                    }
                }
            };
            if parallel {
                team::for_chunks2((&mut out, plane_out), (&mut idx, plane_out), plane);
            } else {
                out.chunks_mut(plane_out).zip(idx.chunks_mut(plane_out)).enumerate().for_each(|(q, (y, ix))| plane(q, y, ix));
            }
            Argmax::Flat(idx)
        };
        (T::into_storage(out), argmax)
    })
}

/// The input gradient of [`max_pool2d`] from the contiguous output gradient `g`.
pub(crate) fn max_pool2d_backward(g: &CpuStorage, saved: &Argmax, pool: &MaxPool) -> CpuStorage {
    let pl = pool.planes;
    let plane_out = (pl.ho * pl.wo).max(1);
    let flat = match saved {
        Argmax::Flat(idx) => Some(&idx[..]),
        Argmax::Window2x2(_) => None,
    };
    with_float!(g, "max_pool2d", T, gv => {
        let n = pl.planes * pl.h * pl.w;
        let mut dx = T::alloc_buffer(n);
        dx.resize(n, T::zero());
        let scatter = |q: usize, dxp: &mut [T]| {
            let gq = &gv[q * plane_out..(q + 1) * plane_out];
            match (saved, flat) {
                (Argmax::Window2x2(codes), _) => {
                    let cq = &codes[q * plane_out..(q + 1) * plane_out];
                    for oh in 0..pl.ho {
                        let (rows, o) = (&mut dxp[2 * oh * pl.w..(2 * oh + 2) * pl.w], oh * pl.wo);
                        let (r0, r1) = rows.split_at_mut(pl.w);
                        max_2x2_row_backward(&cq[o..o + pl.wo], &gq[o..o + pl.wo], r0, r1);
                    }
                }
                (_, Some(idx)) => {
                    for (&t, &gj) in idx[q * plane_out..(q + 1) * plane_out].iter().zip(gq) {
                        dxp[t as usize] += gj;
                    }
                }
                _ => unreachable!(),
            }
        };
        if super::parts::split(n, PAR_THRESHOLD * 4) {
            team::for_chunks(&mut dx, pl.h * pl.w, scatter);
        } else {
            dx.chunks_mut((pl.h * pl.w).max(1)).enumerate().for_each(|(q, dxp)| scatter(q, dxp));
        }
        T::into_storage(dx)
    })
}

/// Average pooling of contiguous planes (see [`crate::backend::Storage::avg_pool2d`]).
pub(crate) fn avg_pool2d(x: &CpuStorage, pool: &AvgPool) -> CpuStorage {
    let pl = pool.planes;
    let numel = pl.planes * pl.ho * pl.wo;
    with_float!(x, "avg_pool2d", T, v => {
        let mut out = vec![T::zero(); numel];
        team::for_chunks(&mut out, pl.ho * pl.wo, |q, y| {
            let src = &v[q * pl.h * pl.w..(q + 1) * pl.h * pl.w];
            for oh in 0..pl.ho {
                for ow in 0..pl.wo {
                    let (h0, h1, w0, w1, div) = pool.window(oh, ow);
                    let mut acc = T::zero();
                    for ih in h0..h1 {
                        for iw in w0..w1 {
                            acc += src[ih * pl.w + iw];
                        }
                    }
                    y[oh * pl.wo + ow] = acc / T::from_f64(div);
                }
            }
        });
        T::into_storage(out)
    })
}

/// The input gradient of [`avg_pool2d`] from the contiguous output gradient `g`.
pub(crate) fn avg_pool2d_backward(g: &CpuStorage, pool: &AvgPool) -> CpuStorage {
    let pl = pool.planes;
    with_float!(g, "avg_pool2d", T, gv => {
        let mut dx = vec![T::zero(); pl.planes * pl.h * pl.w];
        team::for_chunks(&mut dx, pl.h * pl.w, |q, dxp| {
            for oh in 0..pl.ho {
                for ow in 0..pl.wo {
                    let (h0, h1, w0, w1, div) = pool.window(oh, ow);
                    let share = gv[q * pl.ho * pl.wo + oh * pl.wo + ow] / T::from_f64(div);
                    for ih in h0..h1 {
                        for iw in w0..w1 {
                            dxp[ih * pl.w + iw] += share;
                        }
                    }
                }
            }
        });
        T::into_storage(dx)
    })
}

/// Whether `val` replaces `best` as the running maximum: it is larger, or it is NaN, so
/// that NaN propagates and the *last* NaN of a window wins, as PyTorch's kernels
/// (`(val > maxval) || isnan(val)`) pick it and send it the gradient. Ties keep the
/// earlier position.
#[inline(always)]
fn beats<T: Float>(val: T, best: T) -> bool {
    // Non-short-circuit `|`: a select, not a jump; on real data the comparison is a coin
    // toss the branch predictor loses.
    (val > best) | val.is_nan()
}

/// Where each maximum of a max pool came from, saved for backward.
pub(crate) enum Argmax {
    /// 2x2 windows with stride 2: the winner's position in its window (`0..4`, row-major).
    Window2x2(Vec<u8>),
    /// Any other window: the flat `H * W` index in the plane.
    Flat(Vec<i64>),
}

impl Argmax {
    /// PyTorch's flat in-plane indices (`i64`).
    pub(crate) fn flat_indices(&self, pl: &PoolPlanes) -> CpuStorage {
        let (plane_out, wo, w) = (pl.ho * pl.wo, pl.wo, pl.w);
        CpuStorage::I64(match self {
            Argmax::Flat(idx) => idx.clone(),
            Argmax::Window2x2(codes) => codes
                .iter()
                .enumerate()
                .map(|(j, &c)| {
                    let (oh, ow) = ((j % plane_out.max(1)) / wo, j % wo);
                    ((2 * oh + (c as usize >> 1)) * w + 2 * ow + (c as usize & 1)) as i64
                })
                .collect(),
        })
    }
}

/// Four outputs of a 2x2, stride-2 max pool from eight values of each of the two input
/// rows. A tree of three comparisons per window (left pair, right pair, then the two
/// winners) picks the same element as a row-major scan would; written over fixed-size
/// arrays without branches so the compiler turns the four lanes into vector instructions
/// (faster than the scalar loop on a `[32, 8, 26, 26]` input, the CNN's pooling in the
/// `compare.py` row `cnn_step_b32`).
#[inline(always)]
fn max_2x2_group<T: Float>(r0: &[T; 8], r1: &[T; 8], y: &mut [T; 4], code: &mut [u8; 4]) {
    for l in 0..4 {
        let (a, b, c, d) = (r0[2 * l], r0[2 * l + 1], r1[2 * l], r1[2 * l + 1]);
        let tb = beats(b, a);
        let m0 = if tb { b } else { a };
        let td = beats(d, c);
        let m1 = if td { d } else { c };
        let t = beats(m1, m0);
        y[l] = if t { m1 } else { m0 };
        code[l] = if t { 2 + td as u8 } else { tb as u8 };
    }
}

/// One output row (`y.len() >= 4` outputs) of a 2x2, stride-2 max pool from its two input
/// rows. Groups of four; the last group overlaps the one before when the width is not a
/// multiple of four (rewriting the same values), so there is no scalar tail.
#[inline]
fn max_2x2_row<T: Float>(r0: &[T], r1: &[T], y: &mut [T], code: &mut [u8]) {
    let wo = y.len();
    let mut ow = 0;
    loop {
        let s = ow.min(wo - 4);
        let (a, b) = (&r0[2 * s..2 * s + 8], &r1[2 * s..2 * s + 8]);
        let (ys, cs) = (&mut y[s..s + 4], &mut code[s..s + 4]);
        max_2x2_group(a.try_into().unwrap(), b.try_into().unwrap(), ys.try_into().unwrap(), cs.try_into().unwrap());
        if s == wo - 4 {
            break;
        }
        ow += 4;
    }
}

/// Backward of [`max_2x2_row`]: routes each gradient to its window's winner and writes
/// zeros to the other three positions (windows do not overlap), branch-free.
#[inline]
fn max_2x2_row_backward<T: Float>(code: &[u8], g: &[T], r0: &mut [T], r1: &mut [T]) {
    for (((&c, &g), d0), d1) in code.iter().zip(g).zip(r0.chunks_exact_mut(2)).zip(r1.chunks_exact_mut(2)) {
        let z = T::zero();
        d0[0] = if c == 0 { g } else { z };
        d0[1] = if c == 1 { g } else { z };
        d1[0] = if c == 2 { g } else { z };
        d1[1] = if c == 3 { g } else { z };
    }
}
