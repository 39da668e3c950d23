//! Elementwise kernels: the [`UnaryOp`] and [`BinaryOp`] tables (an op's value and its
//! derivatives, written once, generic over the float type), comparisons, selection and
//! copies between layouts and dtypes.

use std::cmp::Ordering;

use super::cpu::isa_loops::Isa;
use super::cpu::poly_tables::Pieces;
use super::{cpu, Storage};
use crate::dtype::{DType, FloatElement};
use crate::shape::Layout;

/// An elementwise op written in WGSL, for the GPU backend: expressions in the kernel's
/// float type. Helpers every elementwise kernel has, in `f32`: `powf_(a, b)` (the CPU's
/// `powf`, negative bases included), `isnan_(x)` (on the bits: compilers may fold
/// `x != x`), `erfc_(x)` (relative error below 1.2e-7), `erf_(x)` and `erfinv_(x)` (within 3e-7) and
/// `tanh_(x)` (accurate near 0 and finite for large `|x|`, which not every driver's `tanh` is).
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
pub(crate) struct Wgsl {
    /// The value: of `x` (unary; the op's scalars are `p0`, `p1`) or of `a` and `b`.
    pub f: &'static str,
    /// Unary: the derivative in `x`, given the forward output `y`; binary: in `a`.
    pub d1: &'static str,
    /// Binary: the derivative in `b` (unused for unary ops).
    pub d2: &'static str,
    /// Whether the expressions use functions Vulkan has in `f32` only (`exp`, `log`,
    /// `tanh`, `pow`, trigonometry, the helpers): such ops take the host path in `f64`.
    pub f32_only: bool,
}

#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
impl Wgsl {
    /// A unary op's value and derivative.
    pub(crate) const fn unary(f: &'static str, df: &'static str, f32_only: bool) -> Wgsl {
        Wgsl { f, d1: df, d2: "", f32_only }
    }

    /// A binary op's value and partial derivatives.
    pub(crate) const fn binary(f: &'static str, da: &'static str, db: &'static str, f32_only: bool) -> Wgsl {
        Wgsl { f, d1: da, d2: db, f32_only }
    }
}

/// An elementwise function with its derivative.
pub(crate) trait UnaryOp: Copy + Send + Sync + 'static {
    /// The op's name in messages and `grad_fn_name`.
    const NAME: &'static str;
    /// The forward value at `x`.
    fn f<T: FloatElement>(&self, x: T) -> T;
    /// The derivative at input `x` with forward output `y` (whichever is cheaper to use).
    fn df<T: FloatElement>(&self, x: T, y: T) -> T;
    /// The op in WGSL with its two scalars (`p0`, `p1`), for GPU kernels; `None` runs
    /// the CPU kernel on host copies instead.
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    fn wgsl(&self) -> Option<(Wgsl, [f64; 2])> {
        None
    }
    /// Runs the CPU's `f32` loop `l` with this op's `f32` function. The default is `f`;
    /// ops with a transcendental function override it with the branch-free one of
    /// `cpu::vector_fns` (libm's are scalar calls, which no loop vectorizes), and ops with a
    /// constant (`pow`) pick a function per constant here, once, so that the loop body
    /// has no branch on it.
    #[inline(always)]
    fn f32_loop<L: F32Loop>(&self, l: L) -> L::Out {
        let op = *self;
        l.run(
            #[inline(always)]
            move |x| op.f(x),
        )
    }
    /// The same for the derivative `df(x, y)`.
    #[inline(always)]
    fn df32_loop<L: F32GradLoop>(&self, l: L) -> L::Out {
        let op = *self;
        l.run(
            #[inline(always)]
            move |x, y| op.df(x, y),
        )
    }
}

/// A CPU loop over `f32` elements, handed the function to map them with (see
/// [`UnaryOp::f32_loop`]): generic over the function, so that it is inlined into the loop.
pub(crate) trait F32Loop {
    /// What the loop makes.
    type Out;
    /// Runs the loop with `f`, in the vector copy for `isa` (every copy gives the same
    /// bits; the kernel's tuner, `cpu::tune`, picks the fastest).
    fn run_on(self, isa: Isa, f: impl Fn(f32) -> f32 + Copy + Send + Sync) -> Self::Out;
    /// Runs the loop with `f`, which is `p`'s `x p(x)` wherever `p` covers `x`: the loop
    /// may evaluate the table itself there (the CPU's vector lookups, `cpu::poly_tables`). The
    /// default is [`Self::run_on`].
    fn run_pieces_on<const K: usize>(
        self,
        isa: Isa,
        p: &'static Pieces<K>,
        f: impl Fn(f32) -> f32 + Copy + Send + Sync,
    ) -> Self::Out
    where
        Self: Sized,
    {
        let _ = p;
        self.run_on(isa, f)
    }
    /// [`Self::run_on`] in the widest copy this CPU runs.
    fn run(self, f: impl Fn(f32) -> f32 + Copy + Send + Sync) -> Self::Out
    where
        Self: Sized,
    {
        self.run_on(Isa::widest(), f)
    }
}

/// A CPU loop over `f32` inputs and outputs, handed the derivative `df(x, y)` (see
/// [`UnaryOp::df32_loop`]).
pub(crate) trait F32GradLoop {
    /// What the loop makes.
    type Out;
    /// Runs the loop with `df`.
    fn run(self, df: impl Fn(f32, f32) -> f32 + Copy + Send + Sync) -> Self::Out;
}

/// An elementwise function of two arguments with its partial derivatives.
pub(crate) trait BinaryOp: Copy + Send + Sync + 'static {
    /// The op's name in messages and `grad_fn_name`.
    const NAME: &'static str;
    /// The forward value.
    fn f<T: FloatElement>(a: T, b: T) -> T;
    /// The partial derivative in `a`.
    fn da<T: FloatElement>(a: T, b: T) -> T;
    /// The partial derivative in `b`.
    fn db<T: FloatElement>(a: T, b: T) -> T;
    /// Constant partial derivatives, when they are constants (add, sub): the backward then
    /// skips the elementwise product.
    const CONST_GRADS: Option<(f64, f64)> = None;
    /// The op on `i64` operands, where PyTorch defines it for integers (add, sub and mul
    /// wrapping on overflow as PyTorch's, maximum, minimum); `None`: floating only.
    const INT: Option<fn(i64, i64) -> i64> = None;
    /// The op in WGSL, for GPU kernels; `None` runs the CPU kernel on host copies instead.
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    const WGSL: Option<Wgsl> = None;
}

/// Which operand of a binary op a gradient is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operand {
    /// The first operand, `a`.
    Lhs,
    /// The second operand, `b`.
    Rhs,
}

impl Storage {
    /// `op.f(x)` elementwise over the elements `l` selects.
    pub(crate) fn unary<O: UnaryOp>(&self, l: &Layout, op: O) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::unary(self, l, &op) {
            return Storage::Gpu(out);
        }
        // Half types are read and written by the kernel itself (one pass, `cpu::widen::Half`).
        Storage::run_exact([self], (self.dtype(), l.numel()), |[x]| cpu::elementwise::unary(x, l, op))
    }

    /// `g * op.df(x, y)` elementwise (the three layouts have one shape).
    pub(crate) fn unary_grad<O: UnaryOp>(
        &self,
        lg: &Layout,
        (x, lx): (&Storage, &Layout),
        (y, ly): (&Storage, &Layout),
        op: O,
    ) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::unary_grad((self, lg), (x, lx), (y, ly), &op) {
            return Storage::Gpu(out);
        }
        Storage::run_exact([self, x, y], (self.dtype(), lg.numel()), |[g, x, y]| {
            cpu::elementwise::unary_grad(g, lg, (x, lx), (y, ly), op)
        })
    }

    /// `O::f(a, b)` elementwise; the layouts are already broadcast to one shape.
    pub(crate) fn binary<O: BinaryOp>(&self, la: &Layout, b: &Storage, lb: &Layout) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::binary::<O>((self, la), (b, lb)) {
            return Storage::Gpu(out);
        }
        Storage::run_exact([self, b], (self.dtype(), la.numel()), |[a, b]| cpu::elementwise::binary::<O>(a, la, b, lb))
    }

    /// `g * dO/d(wrt)` at the broadcast shape of `g`.
    pub(crate) fn binary_grad<O: BinaryOp>(
        &self,
        lg: &Layout,
        (a, la): (&Storage, &Layout),
        (b, lb): (&Storage, &Layout),
        wrt: Operand,
    ) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::binary_grad::<O>((self, lg), (a, la), (b, lb), wrt == Operand::Lhs) {
            return Storage::Gpu(out);
        }
        Storage::run_exact([self, a, b], (self.dtype(), lg.numel()), |[g, a, b]| {
            cpu::elementwise::binary_grad::<O>(g, lg, (a, la), (b, lb), wrt)
        })
    }

    /// A `Bool` buffer: `test(a.partial_cmp(b))` elementwise (false where unordered).
    pub(crate) fn compare(&self, la: &Layout, b: &Storage, lb: &Layout, test: fn(Ordering) -> bool) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::compare((self, la), (b, lb), test) {
            return Storage::Gpu(out);
        }
        Storage::run([self, b], (DType::Bool, la.numel()), |[a, b]| cpu::elementwise::compare(a, la, b, lb, test))
    }

    /// `a` where `self` (a `Bool` buffer) is true, `b` elsewhere; layouts of one shape.
    pub(crate) fn select(&self, lc: &Layout, (a, la): (&Storage, &Layout), (b, lb): (&Storage, &Layout)) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::select((self, lc), (a, la), (b, lb)) {
            return Storage::Gpu(out);
        }
        // A copy of values: half types are picked as they are (no f32 copies).
        Storage::run_exact([self, a, b], (a.dtype(), lc.numel()), |[c, a, b]| {
            cpu::elementwise::select(c, lc, (a, la), (b, lb))
        })
    }

    /// Logical not of a `Bool` buffer.
    pub(crate) fn logical_not(&self, l: &Layout) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::logical_not(self, l) {
            return Storage::Gpu(out);
        }
        Storage::run([self], (DType::Bool, l.numel()), |[x]| cpu::elementwise::logical_not(x, l))
    }

    /// The elements `l` selects, row-major, as a new buffer.
    pub(crate) fn gather_layout(&self, l: &Layout) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::convert(self, l, self.dtype()) {
            return Storage::Gpu(out);
        }
        Storage::run_exact([self], (self.dtype(), l.numel()), |[x]| x.gather_layout(l))
    }

    /// The elements `l` selects, converted to `dtype` (copied as they are when it is
    /// already the buffer's).
    pub(crate) fn convert(&self, l: &Layout, dtype: DType) -> Storage {
        #[cfg(feature = "gpu")]
        if let Some(out) = super::gpu::interface::convert(self, l, dtype) {
            return Storage::Gpu(out);
        }
        Storage::run_exact([self], (dtype, l.numel()), |[x]| x.convert_layout(l, dtype))
    }

    /// In-place integer arithmetic on an `i64` buffer: `dst = f(dst, rhs)` at the
    /// positions `layout` selects, `rhs` (any integer or bool buffer, read as `i64`)
    /// through `rhs_layout` of the same shape. Every result is computed before any is
    /// written: on the first `(a, b)` for which `f` returns `None` (an overflow) nothing
    /// changes and that pair is returned. A meta buffer has nothing to update.
    pub(crate) fn checked_int_update(
        &mut self,
        layout: &Layout,
        (rhs, rhs_layout): (&Storage, &Layout),
        f: &dyn Fn(i64, i64) -> Option<i64>,
    ) -> Option<(i64, i64)> {
        match (self, rhs) {
            (Storage::Cpu(dst), Storage::Cpu(rhs)) => {
                cpu::elementwise::checked_int_update(dst, layout, (rhs, rhs_layout), f)
            }
            (Storage::Meta { .. }, _) => None,
            #[cfg(feature = "gpu")]
            (Storage::Gpu(dst), Storage::Gpu(rhs)) => {
                let mut host = dst.host("checked_int_update");
                let bad = cpu::elementwise::checked_int_update(&mut host, layout, (&rhs.to_cpu(), rhs_layout), f);
                if bad.is_none() {
                    dst.overwrite(&host);
                }
                bad
            }
            (dst, rhs) => {
                panic!("checked_int_update: a {} buffer cannot take values from {}", dst.device(), rhs.device())
            }
        }
    }

    /// Writes the elements `src_layout` selects from `src` (converted to this buffer's
    /// dtype) into the positions `layout` selects here, in place.
    pub(crate) fn write_from(&mut self, layout: &Layout, src: &Storage, src_layout: &Layout) {
        // Nothing to write; an empty layout's offset may lie past the buffer's end (the
        // last slice of an empty `cat` operand), so it is not read.
        if layout.numel() == 0 {
            return;
        }
        match (self, src) {
            (Storage::Cpu(dst), Storage::Cpu(src)) => {
                let vals = src.convert_layout(src_layout, dst.dtype());
                cpu::scatter_into(dst, layout, &vals)
            }
            (Storage::Meta { .. }, _) => {}
            #[cfg(feature = "gpu")]
            (Storage::Gpu(dst), Storage::Gpu(src)) => super::gpu::write_from(dst, layout, src, src_layout),
            (dst, src) => panic!("write_from: a {} buffer cannot take values from {}", dst.device(), src.device()),
        }
    }
}
