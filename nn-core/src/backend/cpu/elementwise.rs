//! Elementwise CPU kernels and the strided map loops under them.

use std::cmp::Ordering;
use std::mem::MaybeUninit;

use super::isa_loops::Isa;
use super::parts::{grain, in_parts};
use super::poly_tables::Pieces;
use super::team;
use super::widen::Half;
use super::{with_cpu, with_float, CpuElement, CpuStorage};
use crate::backend::elementwise::Operand;
use crate::backend::{BinaryOp, F32GradLoop, F32Loop, UnaryOp};
use crate::shape::{for_each_offset, Layout};

/// `op.f(x)` elementwise; `f32` through the op's [`UnaryOp::f32_loop`] (vectorized).
pub(crate) fn unary<O: UnaryOp>(x: &CpuStorage, l: &Layout, op: O) -> CpuStorage {
    /// The loop `op` hands its `f32` function to.
    struct Map<'a>(&'a [f32], &'a Layout);
    impl F32Loop for Map<'_> {
        type Out = Vec<f32>;
        #[inline(always)]
        fn run_on(self, isa: Isa, f: impl Fn(f32) -> f32 + Copy + Send + Sync) -> Vec<f32> {
            self.map(f, |src, part| super::isa_loops::map_elems_on(isa, src, part, f))
        }
        #[inline(always)]
        fn run_pieces_on<const K: usize>(
            self,
            isa: Isa,
            p: &'static Pieces<K>,
            f: impl Fn(f32) -> f32 + Copy + Send + Sync,
        ) -> Vec<f32> {
            self.map(f, |src, part| super::poly_tables::map_pieces_on(isa, p, src, part, f))
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
            in_parts(&self.0[r], map)
        }
    }
    /// The half-type loop: each element widened as it is read, `f`'s result rounded as
    /// it is written.
    struct HalfMap<'a, H>(&'a [H], &'a Layout);
    impl<H: Half> F32Loop for HalfMap<'_, H> {
        type Out = Vec<H>;
        #[inline(always)]
        fn run_on(self, isa: Isa, f: impl Fn(f32) -> f32 + Copy + Send + Sync) -> Vec<H> {
            // Each closure is inlined into its vector loop whole (as `f` is): out of line,
            // `f`'s `mul_add`s would be libm calls on the baseline target (`isa_loops::map_elems`;
            // a bf16 GELU backward would run many times slower).
            let Some(r) = self.1.contiguous_range() else {
                return map1(
                    self.0,
                    self.1,
                    #[inline(always)]
                    move |x: H| H::narrow1(f(x.widen1())),
                );
            };
            in_parts(&self.0[r], |src, part| {
                super::isa_loops::map_elems_on(
                    isa,
                    src,
                    part,
                    #[inline(always)]
                    move |x: H| H::narrow1(f(x.widen1())),
                )
            })
        }
    }
    match x {
        CpuStorage::F32(v) => CpuStorage::F32(op.f32_loop(Map(v, l))),
        CpuStorage::BF16(v) => CpuStorage::BF16(op.f32_loop(HalfMap(v, l))),
        CpuStorage::F16(v) => CpuStorage::F16(op.f32_loop(HalfMap(v, l))),
        _ => with_float!(x, O::NAME, T, v => T::into_storage(map1(v, l, |a: T| op.f(a)))),
    }
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
            contiguous3(
                [&g[rg], &x[rx], &y[ry]],
                #[inline(always)]
                move |g, x, y| g * df(x, y),
            )
        }
    }
    /// The half-type loop: `g`, `x` and `y` widened as they are read, the product rounded
    /// as it is written.
    struct HalfMap<'a, H>([(&'a [H], &'a Layout); 3]);
    impl<H: Half> F32GradLoop for HalfMap<'_, H> {
        type Out = Vec<H>;
        #[inline(always)]
        fn run(self, df: impl Fn(f32, f32) -> f32 + Copy + Send + Sync) -> Vec<H> {
            let [(g, lg), (x, lx), (y, ly)] = self.0;
            // Inlined whole into the vector loops, as in `unary`'s half loop.
            let (Some(rg), Some(rx), Some(ry)) = (lg.contiguous_range(), lx.contiguous_range(), ly.contiguous_range())
            else {
                return map3(
                    g,
                    lg,
                    x,
                    lx,
                    y,
                    ly,
                    #[inline(always)]
                    move |g: H, x: H, y: H| H::narrow1(g.widen1() * df(x.widen1(), y.widen1())),
                );
            };
            contiguous3(
                [&g[rg], &x[rx], &y[ry]],
                #[inline(always)]
                move |g: H, x: H, y: H| H::narrow1(g.widen1() * df(x.widen1(), y.widen1())),
            )
        }
    }
    match (g, x, y) {
        (CpuStorage::F32(gv), CpuStorage::F32(xv), CpuStorage::F32(yv)) => {
            return CpuStorage::F32(op.df32_loop(Map([(gv, lg), (xv, lx), (yv, ly)])));
        }
        (CpuStorage::BF16(gv), CpuStorage::BF16(xv), CpuStorage::BF16(yv)) => {
            return CpuStorage::BF16(op.df32_loop(HalfMap([(gv, lg), (xv, lx), (yv, ly)])));
        }
        (CpuStorage::F16(gv), CpuStorage::F16(xv), CpuStorage::F16(yv)) => {
            return CpuStorage::F16(op.df32_loop(HalfMap([(gv, lg), (xv, lx), (yv, ly)])));
        }
        _ => {}
    }
    with_float!(g, O::NAME, T, gv => {
        let xv = T::slice(x).expect("same dtype");
        let yv = T::slice(y).expect("same dtype");
        T::into_storage(map3(gv, lg, xv, lx, yv, ly, |g: T, x: T, y: T| g * op.df(x, y)))
    })
}

/// `f(a, b, c)` over three contiguous inputs of one length into a new buffer, in parts
/// as [`in_parts`] makes them.
#[inline(always)]
fn contiguous3<T: Copy + Sync, U: CpuElement + Send>(
    [a, b, c]: [&[T]; 3],
    f: impl Fn(T, T, T) -> U + Copy + Send + Sync,
) -> Vec<U> {
    in_parts(a, |part_a, part| {
        let s = a.len() - part_a.len();
        super::isa_loops::map3_elems([part_a, &b[s..], &c[s..]], part, f)
    })
}

/// `O::f(a, b)` elementwise; half types computed in `f32`, each read widened and each
/// result rounded in the one loop.
pub(crate) fn binary<O: BinaryOp>(a: &CpuStorage, la: &Layout, b: &CpuStorage, lb: &Layout) -> CpuStorage {
    fn half<H: Half, O: BinaryOp>(a: &[H], la: &Layout, b: &[H], lb: &Layout) -> Vec<H> {
        map2(a, la, b, lb, |x: H, y: H| H::narrow1(O::f(x.widen1(), y.widen1())))
    }
    match (a, b) {
        (CpuStorage::BF16(va), CpuStorage::BF16(vb)) => return CpuStorage::BF16(half::<_, O>(va, la, vb, lb)),
        (CpuStorage::F16(va), CpuStorage::F16(vb)) => return CpuStorage::F16(half::<_, O>(va, la, vb, lb)),
        (CpuStorage::I64(va), CpuStorage::I64(vb)) => {
            let f = O::INT.unwrap_or_else(|| panic!("{}: not defined on integers (checked by the op)", O::NAME));
            return CpuStorage::I64(map2(va, la, vb, lb, f));
        }
        _ => {}
    }
    with_float!(a, O::NAME, T, va => {
        let vb = T::slice(b).expect("same dtype");
        T::into_storage(map2(va, la, vb, lb, |x: T, y: T| O::f(x, y)))
    })
}

/// `g * dO/d(wrt)` elementwise; half types as in [`binary`].
pub(crate) fn binary_grad<O: BinaryOp>(
    g: &CpuStorage,
    lg: &Layout,
    (a, la): (&CpuStorage, &Layout),
    (b, lb): (&CpuStorage, &Layout),
    wrt: Operand,
) -> CpuStorage {
    fn half<H: Half, O: BinaryOp>(g: (&[H], &Layout), a: (&[H], &Layout), b: (&[H], &Layout), wrt: Operand) -> Vec<H> {
        let ((g, lg), (a, la), (b, lb)) = (g, a, b);
        let w = |x: H| x.widen1();
        match wrt {
            Operand::Lhs => map3(g, lg, a, la, b, lb, |g: H, x: H, y: H| H::narrow1(w(g) * O::da(w(x), w(y)))),
            Operand::Rhs => map3(g, lg, a, la, b, lb, |g: H, x: H, y: H| H::narrow1(w(g) * O::db(w(x), w(y)))),
        }
    }
    match (g, a, b) {
        (CpuStorage::BF16(gv), CpuStorage::BF16(va), CpuStorage::BF16(vb)) => {
            return CpuStorage::BF16(half::<_, O>((gv, lg), (va, la), (vb, lb), wrt));
        }
        (CpuStorage::F16(gv), CpuStorage::F16(va), CpuStorage::F16(vb)) => {
            return CpuStorage::F16(half::<_, O>((gv, lg), (va, la), (vb, lb), wrt));
        }
        _ => {}
    }
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
        let mut out = T::alloc_buffer(lc.numel());
        let shape = lc.shape();
        let Some(r) = shape.len().checked_sub(1) else {
            out.push(if cv[lc.offset()] { va[la.offset()] } else { vb[lb.offset()] });
            return T::into_storage(out);
        };
        // Outer dims by odometer, the innermost as one run (an attention mask broadcast
        // over the batch, a scalar fill value): element by element through the odometer,
        // a masked fill would take a sizeable share of a small Transformer's step.
        let (len, (sc, sa, sb)) = (shape[r], (lc.strides()[r], la.strides()[r], lb.strides()[r]));
        for_each_offset(
            &shape[..r],
            [&lc.strides()[..r], &la.strides()[..r], &lb.strides()[..r]],
            [lc.offset(), la.offset(), lb.offset()],
            |[i, j, k]| out.extend((0..len).map(|t| if cv[i + t * sc] { va[j + t * sa] } else { vb[k + t * sb] })),
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
        team::fill(&mut out, src.len(), grain(src.len(), false), |r| src[r].iter().map(|&x| f(x)));
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
        team::fill(&mut out, sa.len(), grain(sa.len(), false), |r| {
            sa[r.clone()].iter().zip(&sb[r]).map(|(&x, &y)| f(x, y))
        });
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
        team::fill(&mut out, sa.len(), grain(sa.len(), false), |r| {
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

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::{binary, binary_grad, unary, unary_grad, CpuStorage};
    use crate::backend::cpu::widen::widen;
    use crate::backend::elementwise::Operand;
    use crate::backend::{BinaryOp, UnaryOp};
    use crate::dtype::DType;
    use crate::ops::activation::{Gelu, Sigmoid, Tanh};
    use crate::ops::binary::{AddOp, DivOp, MulOp};
    use crate::ops::unary::Exp;
    use crate::shape::Layout;

    /// Values over several binades (and a zero), as `f32`.
    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len).map(|i| ((i as u32 * 7919 + seed * 104_729) % 211) as f32 / 37.0 - 2.8).collect()
    }

    /// An `f32` buffer rounded to `dtype` (`BF16` or `F16`) by the `half` crate: the
    /// reference rounding, independent of the kernels' own.
    fn narrow(s: CpuStorage, dtype: DType) -> CpuStorage {
        let CpuStorage::F32(ref v) = s else { panic!("not an f32 buffer") };
        match dtype {
            DType::BF16 => CpuStorage::BF16(v.iter().map(|&x| bf16::from_f32(x)).collect()),
            DType::F16 => CpuStorage::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
            other => panic!("not a half type: {other}"),
        }
    }

    /// The buffer of `v` in `dtype` (`BF16` or `F16`).
    fn buffer(v: &[f32], dtype: DType) -> CpuStorage {
        narrow(CpuStorage::F32(v.to_vec()), dtype)
    }

    /// The bits of a half buffer, to compare exactly.
    fn bits(s: &CpuStorage) -> Vec<u16> {
        match s {
            CpuStorage::BF16(v) => v.iter().map(|x: &bf16| x.to_bits()).collect(),
            CpuStorage::F16(v) => v.iter().map(|x: &f16| x.to_bits()).collect(),
            other => panic!("not a half buffer: {}", other.dtype()),
        }
    }

    /// `got` and `want` hold the same half values, bit for bit (the first difference named).
    fn same(got: &CpuStorage, want: &CpuStorage, what: &str) {
        let (g, w) = (bits(got), bits(want));
        assert_eq!(g.len(), w.len(), "{what}: lengths");
        if let Some(i) = (0..g.len()).find(|&i| g[i] != w[i]) {
            panic!("{what}: element {i} is {:#06x}, the f32 result rounded once is {:#06x}", g[i], w[i]);
        }
    }

    /// The layouts the kernels take apart: contiguous (long enough to split over
    /// threads), a transposed view, a row broadcast, and an offset slice.
    fn layouts() -> Vec<(Layout, usize)> {
        let n = 1 << 16;
        vec![
            (Layout::contiguous(&[n]), n),
            (Layout::contiguous(&[48, 40]).permute(&[1, 0]), 48 * 40),
            (Layout::contiguous(&[40]).broadcast_to(&[48, 40]).unwrap(), 40),
            (Layout::new(smallvec::smallvec![30, 7], smallvec::smallvec![9, 1], 5), 5 + 29 * 9 + 7),
        ]
    }

    /// A half buffer through a kernel directly gives the widened `f32` result rounded once
    /// (the half kernels read and write half types in one pass, and match that path),
    /// bit for bit, for maps, their gradients, binary ops and theirs, in every layout.
    #[test]
    fn half_kernels_equal_the_f32_result_rounded_once() {
        fn check_unary<O: UnaryOp>(op: O) {
            for dt in [DType::BF16, DType::F16] {
                for (l, len) in layouts() {
                    let (x, y, g) =
                        (buffer(&values(len, 1), dt), buffer(&values(len, 2), dt), buffer(&values(len, 3), dt));
                    let wide = |s: &CpuStorage| widen(s).unwrap();
                    let want = narrow(unary(&wide(&x), &l, op), dt);
                    same(&unary(&x, &l, op), &want, &format!("{} {dt} {l:?}", O::NAME));
                    let want = narrow(unary_grad(&wide(&g), &l, (&wide(&x), &l), (&wide(&y), &l), op), dt);
                    same(&unary_grad(&g, &l, (&x, &l), (&y, &l), op), &want, &format!("{} grad {dt} {l:?}", O::NAME));
                }
            }
        }
        fn check_binary<O: BinaryOp>() {
            for dt in [DType::BF16, DType::F16] {
                for (l, len) in layouts() {
                    let (a, b, g) =
                        (buffer(&values(len, 4), dt), buffer(&values(len, 5), dt), buffer(&values(len, 6), dt));
                    let wide = |s: &CpuStorage| widen(s).unwrap();
                    // `b` contiguous against `a` strided: mixed layouts take the odometer.
                    let lb = Layout::contiguous(l.shape());
                    let b = if lb.numel() > len { buffer(&values(lb.numel(), 5), dt) } else { b };
                    let want = narrow(binary::<O>(&wide(&a), &l, &wide(&b), &lb), dt);
                    same(&binary::<O>(&a, &l, &b, &lb), &want, &format!("{} {dt} {l:?}", O::NAME));
                    for wrt in [Operand::Lhs, Operand::Rhs] {
                        let g = if lb.numel() > len { buffer(&values(lb.numel(), 6), dt) } else { g.clone() };
                        let got = binary_grad::<O>(&g, &lb, (&a, &l), (&b, &lb), wrt);
                        let want = narrow(binary_grad::<O>(&wide(&g), &lb, (&wide(&a), &l), (&wide(&b), &lb), wrt), dt);
                        same(&got, &want, &format!("{} grad {wrt:?} {dt} {l:?}", O::NAME));
                    }
                }
            }
        }
        check_unary(Exp);
        check_unary(Tanh);
        check_unary(Gelu);
        check_unary(Sigmoid);
        check_binary::<AddOp>();
        check_binary::<MulOp>();
        check_binary::<DivOp>();
    }
}
