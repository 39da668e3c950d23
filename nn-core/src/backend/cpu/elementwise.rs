//! Elementwise CPU kernels and the strided map loops under them.

use std::cmp::Ordering;
use std::mem::MaybeUninit;

use super::team::{self, GRAIN};
use super::vtab::Pieces;
use super::{with_cpu, with_float, CpuElement, CpuStorage};
use crate::backend::elementwise::Operand;
use crate::backend::{BinaryOp, F32GradLoop, F32Loop, UnaryOp};
use crate::shape::{for_each_offset, Layout};

/// Below this many elements, elementwise kernels stay on one thread.
pub(crate) const PAR_THRESHOLD: usize = 1 << 15;

/// Whether a kernel with `work` elements should split across the CPU team's threads
/// ([`team`]): at least `threshold` of them, and more than one thread to run on.
#[inline]
pub(crate) fn split(work: usize, threshold: usize) -> bool {
    work >= threshold && team::threads() > 1
}

/// From this many elements on, the `f32` loops of the ops with a vectorized function
/// (`vfun`: `exp`, `tanh`, the GELUs, ...) split over the team wherever its cores are
/// (`team::threads_for_large`): a GELU over a GPT-2 MLP activation ([2, 128, 3072]) is
/// hundreds of microseconds of arithmetic per thread, against a few hundred nanoseconds
/// for a loop's opening to cross between far cores.
const LARGE_MAP: usize = 1 << 17;

/// Elements per task of a contiguous elementwise loop of `len`: [`GRAIN`] when it is worth
/// splitting, else all of them (one task, on this thread).
fn grain(len: usize) -> usize {
    if split(len, PAR_THRESHOLD) {
        GRAIN
    } else {
        len
    }
}

/// `op.f(x)` elementwise; `f32` through the op's [`UnaryOp::f32_loop`] (vectorized).
pub(crate) fn unary<O: UnaryOp>(x: &CpuStorage, l: &Layout, op: O) -> CpuStorage {
    /// The loop `op` hands its `f32` function to.
    struct Map<'a>(&'a [f32], &'a Layout);
    impl F32Loop for Map<'_> {
        type Out = Vec<f32>;
        #[inline(always)]
        fn run(self, f: impl Fn(f32) -> f32 + Copy + Send + Sync) -> Vec<f32> {
            self.map(f, |src, part| super::vmath::map_f32(src, part, f))
        }
        #[inline(always)]
        fn run_pieces<const K: usize>(
            self,
            p: &'static Pieces<K>,
            f: impl Fn(f32) -> f32 + Copy + Send + Sync,
        ) -> Vec<f32> {
            self.map(f, |src, part| super::vtab::map_pieces(p, src, part, f))
        }
    }
    impl Map<'_> {
        /// `f` over the input: `map(src, part)` fills each part of a contiguous input (in
        /// parallel above the split threshold), `map1` walks a strided one.
        #[inline(always)]
        fn map(
            self,
            f: impl Fn(f32) -> f32 + Copy + Send + Sync,
            map: impl Fn(&[f32], &mut [MaybeUninit<f32>]) + Sync,
        ) -> Vec<f32> {
            let Some(r) = self.1.contiguous_range() else { return map1(self.0, self.1, f) };
            let src = &self.0[r];
            let mut out = f32::alloc_buffer(src.len());
            let grain = grain(src.len());
            let large = src.len() >= LARGE_MAP;
            team::for_chunks_with(large, &mut out.spare_capacity_mut()[..src.len()], grain, |q, part| {
                map(&src[q * grain..], part)
            });
            // SAFETY: the parts cover every slot, and `map` writes all of a part's.
            unsafe { out.set_len(src.len()) };
            out
        }
    }
    if let CpuStorage::F32(v) = x {
        return CpuStorage::F32(op.f32_loop(Map(v, l)));
    }
    with_float!(x, O::NAME, T, v => T::into_storage(map1(v, l, |a: T| op.f(a))))
}

/// `g * op.df(x, y)` elementwise; `f32` through the op's [`UnaryOp::df32_loop`].
pub(crate) fn unary_grad<O: UnaryOp>(
    g: &CpuStorage,
    lg: &Layout,
    (x, lx): (&CpuStorage, &Layout),
    (y, ly): (&CpuStorage, &Layout),
    op: O,
) -> CpuStorage {
    /// The loop `op` hands its `f32` derivative to.
    struct Map<'a>([(&'a [f32], &'a Layout); 3]);
    impl F32GradLoop for Map<'_> {
        type Out = Vec<f32>;
        #[inline(always)]
        fn run(self, df: impl Fn(f32, f32) -> f32 + Copy + Send + Sync) -> Vec<f32> {
            let [(g, lg), (x, lx), (y, ly)] = self.0;
            let (Some(rg), Some(rx), Some(ry)) = (lg.contiguous_range(), lx.contiguous_range(), ly.contiguous_range())
            else {
                return map3(g, lg, x, lx, y, ly, move |g, x, y| g * df(x, y));
            };
            let (g, x, y) = (&g[rg], &x[rx], &y[ry]);
            let mut out = f32::alloc_buffer(g.len());
            let grain = grain(g.len());
            let large = g.len() >= LARGE_MAP;
            team::for_chunks_with(large, &mut out.spare_capacity_mut()[..g.len()], grain, |q, part| {
                let s = q * grain;
                super::vmath::map3_f32([&g[s..], &x[s..], &y[s..]], part, df)
            });
            // SAFETY: the parts cover every slot, and `map3_f32` writes all of a part's.
            unsafe { out.set_len(g.len()) };
            out
        }
    }
    if let (CpuStorage::F32(gv), CpuStorage::F32(xv), CpuStorage::F32(yv)) = (g, x, y) {
        return CpuStorage::F32(op.df32_loop(Map([(gv, lg), (xv, lx), (yv, ly)])));
    }
    with_float!(g, O::NAME, T, gv => {
        let xv = T::slice(x).expect("same dtype");
        let yv = T::slice(y).expect("same dtype");
        T::into_storage(map3(gv, lg, xv, lx, yv, ly, |g: T, x: T, y: T| g * op.df(x, y)))
    })
}

/// `O::f(a, b)` elementwise.
pub(crate) fn binary<O: BinaryOp>(a: &CpuStorage, la: &Layout, b: &CpuStorage, lb: &Layout) -> CpuStorage {
    with_float!(a, O::NAME, T, va => {
        let vb = T::slice(b).expect("same dtype");
        T::into_storage(map2(va, la, vb, lb, |x: T, y: T| O::f(x, y)))
    })
}

/// `g * dO/d(wrt)` elementwise.
pub(crate) fn binary_grad<O: BinaryOp>(
    g: &CpuStorage,
    lg: &Layout,
    (a, la): (&CpuStorage, &Layout),
    (b, lb): (&CpuStorage, &Layout),
    wrt: Operand,
) -> CpuStorage {
    with_float!(g, O::NAME, T, gv => {
        let va = T::slice(a).expect("same dtype");
        let vb = T::slice(b).expect("same dtype");
        T::into_storage(match wrt {
            Operand::Lhs => map3(gv, lg, va, la, vb, lb, |g: T, x: T, y: T| g * O::da(x, y)),
            Operand::Rhs => map3(gv, lg, va, la, vb, lb, |g: T, x: T, y: T| g * O::db(x, y)),
        })
    })
}

/// `test(a.partial_cmp(b))` elementwise, as `Bool`.
pub(crate) fn compare(
    a: &CpuStorage,
    la: &Layout,
    b: &CpuStorage,
    lb: &Layout,
    test: fn(Ordering) -> bool,
) -> CpuStorage {
    CpuStorage::Bool(with_cpu!(a, T, va => {
        let vb = T::slice(b).expect("same dtype");
        map2(va, la, vb, lb, |x: T, y: T| x.partial_cmp(&y).is_some_and(test))
    }))
}

/// `a` where `c` is true, `b` elsewhere.
pub(crate) fn select(
    c: &CpuStorage,
    lc: &Layout,
    (a, la): (&CpuStorage, &Layout),
    (b, lb): (&CpuStorage, &Layout),
) -> CpuStorage {
    let cv = bool::slice(c).expect("a bool condition");
    with_cpu!(a, T, va => {
        let vb = T::slice(b).expect("same dtype");
        let mut out = Vec::with_capacity(lc.numel());
        for_each_offset(
            lc.shape(),
            [lc.strides(), la.strides(), lb.strides()],
            [lc.offset(), la.offset(), lb.offset()],
            |[i, j, k]| out.push(if cv[i] { va[j] } else { vb[k] }),
        );
        T::into_storage(out)
    })
}

/// See [`crate::backend::Storage::checked_int_update`].
pub(crate) fn checked_int_update(
    dst: &mut CpuStorage,
    layout: &Layout,
    (rhs, rhs_layout): (&CpuStorage, &Layout),
    f: &dyn Fn(i64, i64) -> Option<i64>,
) -> Option<(i64, i64)> {
    let a = dst.to_vec_of::<i64>(layout);
    let b = rhs.to_vec_of::<i64>(rhs_layout);
    let mut new = Vec::with_capacity(a.len());
    for (&x, &y) in a.iter().zip(&b) {
        match f(x, y) {
            Some(v) => new.push(v),
            None => return Some((x, y)),
        }
    }
    super::scatter_into(dst, layout, &CpuStorage::I64(new));
    None
}

/// Logical not of a `Bool` buffer.
pub(crate) fn logical_not(x: &CpuStorage, l: &Layout) -> CpuStorage {
    CpuStorage::Bool(map1(bool::slice(x).expect("a bool tensor"), l, |v: bool| !v))
}

/// Elementwise map of one strided input to a contiguous vector.
pub(crate) fn map1<T: Copy + Send + Sync, U: CpuElement>(
    a: &[T],
    la: &Layout,
    f: impl Fn(T) -> U + Sync + Send,
) -> Vec<U> {
    if let Some(r) = la.contiguous_range() {
        let src = &a[r];
        let mut out = U::alloc_buffer(src.len());
        team::fill(&mut out, src.len(), grain(src.len()), |r| src[r].iter().map(|&x| f(x)));
        return out;
    }
    let mut out = U::alloc_buffer(la.numel());
    let shape = la.shape();
    if shape.is_empty() {
        out.push(f(a[la.offset()]));
        return out;
    }
    let r = shape.len() - 1;
    let (len, sa) = (shape[r], la.strides()[r]);
    for_each_offset(&shape[..r], [&la.strides()[..r]], [la.offset()], |[i]| {
        if sa == 1 {
            out.extend(a[i..i + len].iter().map(|&x| f(x)));
        } else {
            out.extend((0..len).map(|k| f(a[i + k * sa])));
        }
    });
    out
}

/// Elementwise map of two strided inputs with the same shape (broadcast already applied).
pub(crate) fn map2<T: Copy + Send + Sync, U: CpuElement>(
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    f: impl Fn(T, T) -> U + Sync + Send,
) -> Vec<U> {
    debug_assert_eq!(la.shape(), lb.shape());
    if let (Some(ra), Some(rb)) = (la.contiguous_range(), lb.contiguous_range()) {
        let (sa, sb) = (&a[ra], &b[rb]);
        let mut out = U::alloc_buffer(sa.len());
        team::fill(&mut out, sa.len(), grain(sa.len()), |r| sa[r.clone()].iter().zip(&sb[r]).map(|(&x, &y)| f(x, y)));
        return out;
    }
    // Outer dims by odometer, the innermost as a run: contiguous (stride 1) or broadcast
    // (stride 0) operands become slice loops the compiler can vectorise.
    let mut out = U::alloc_buffer(la.numel());
    let shape = la.shape();
    if shape.is_empty() {
        out.push(f(a[la.offset()], b[lb.offset()]));
        return out;
    }
    let r = shape.len() - 1;
    let (len, sa, sb) = (shape[r], la.strides()[r], lb.strides()[r]);
    for_each_offset(
        &shape[..r],
        [&la.strides()[..r], &lb.strides()[..r]],
        [la.offset(), lb.offset()],
        |[i, j]| match (sa, sb) {
            (1, 1) => out.extend(a[i..i + len].iter().zip(&b[j..j + len]).map(|(&x, &y)| f(x, y))),
            (1, 0) => {
                let y = b[j];
                out.extend(a[i..i + len].iter().map(|&x| f(x, y)));
            }
            (0, 1) => {
                let x = a[i];
                out.extend(b[j..j + len].iter().map(|&y| f(x, y)));
            }
            _ => out.extend((0..len).map(|k| f(a[i + k * sa], b[j + k * sb]))),
        },
    );
    out
}

/// Elementwise map of three strided inputs with the same shape.
#[allow(clippy::too_many_arguments)]
pub(crate) fn map3<T: Copy + Send + Sync, U: CpuElement>(
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    c: &[T],
    lc: &Layout,
    f: impl Fn(T, T, T) -> U + Sync + Send,
) -> Vec<U> {
    if let (Some(ra), Some(rb), Some(rc)) = (la.contiguous_range(), lb.contiguous_range(), lc.contiguous_range()) {
        let (sa, sb, sc) = (&a[ra], &b[rb], &c[rc]);
        let mut out = U::alloc_buffer(sa.len());
        team::fill(&mut out, sa.len(), grain(sa.len()), |r| {
            sa[r.clone()].iter().zip(&sb[r.clone()]).zip(&sc[r]).map(|((&x, &y), &z)| f(x, y, z))
        });
        return out;
    }
    let mut out = U::alloc_buffer(la.numel());
    let shape = la.shape();
    if shape.is_empty() {
        out.push(f(a[la.offset()], b[lb.offset()], c[lc.offset()]));
        return out;
    }
    let r = shape.len() - 1;
    let (len, sa, sb, sc) = (shape[r], la.strides()[r], lb.strides()[r], lc.strides()[r]);
    for_each_offset(
        &shape[..r],
        [&la.strides()[..r], &lb.strides()[..r], &lc.strides()[..r]],
        [la.offset(), lb.offset(), lc.offset()],
        // Contiguous (stride 1) and broadcast (stride 0) runs as slice loops the compiler
        // vectorizes (a layer norm's backward multiplies rows by per-row and per-column
        // factors this way); other strides element by element.
        |[i, j, k]| match (sa, sb, sc) {
            (1, 1, 1) => out
                .extend(a[i..i + len].iter().zip(&b[j..j + len]).zip(&c[k..k + len]).map(|((&x, &y), &z)| f(x, y, z))),
            (1, 1, 0) => {
                let z = c[k];
                out.extend(a[i..i + len].iter().zip(&b[j..j + len]).map(|(&x, &y)| f(x, y, z)))
            }
            (1, 0, 1) => {
                let y = b[j];
                out.extend(a[i..i + len].iter().zip(&c[k..k + len]).map(|(&x, &z)| f(x, y, z)))
            }
            (0, 1, 1) => {
                let x = a[i];
                out.extend(b[j..j + len].iter().zip(&c[k..k + len]).map(|(&y, &z)| f(x, y, z)))
            }
            (1, 0, 0) => {
                let (y, z) = (b[j], c[k]);
                out.extend(a[i..i + len].iter().map(|&x| f(x, y, z)))
            }
            (0, 1, 0) => {
                let (x, z) = (a[i], c[k]);
                out.extend(b[j..j + len].iter().map(|&y| f(x, y, z)))
            }
            (0, 0, 1) => {
                let (x, y) = (a[i], b[j]);
                out.extend(c[k..k + len].iter().map(|&z| f(x, y, z)))
            }
            _ => out.extend((0..len).map(|t| f(a[i + t * sa], b[j + t * sb], c[k + t * sc]))),
        },
    );
    out
}
