//! Table-driven elementwise unary ops: each op supplies `f` and its derivative `df`, one
//! generic kernel runs them forward and backward (dfdx's approach).

use std::sync::Arc;

use smallvec::smallvec;

use super::check_float;
use crate::autograd::entry::op_entry;
use crate::autograd::{op_result, Grads};
use crate::backend::cpu::powers::{self, PowKind};
use crate::backend::cpu::tune;
use crate::backend::cpu::vector_fns;
pub(crate) use crate::backend::UnaryOp;
use crate::backend::{F32GradLoop, F32Loop, Wgsl};
use crate::dtype::FloatElement;
use crate::shape::Layout;
use crate::tensor::Tensor;

#[inline(always)]
pub(crate) fn c<T: FloatElement>(v: f64) -> T {
    T::from_f64(v)
}

/// Applies `op` elementwise, recording its backward.
pub(crate) fn unary<O: UnaryOp>(x: &Tensor, op: O) -> Tensor {
    unary_with(x, op, O::NAME, Vec::new)
}

/// [`unary`] entered as the op `name` (which autocast and traces know it by, where it differs
/// from the kernel's: `powf` runs the `pow` kernel), with the attributes a trace records.
pub(crate) fn unary_with<O: UnaryOp>(
    x: &Tensor,
    op: O,
    name: &'static str,
    attrs: impl Fn() -> Vec<(&'static str, crate::autograd::trace::Attr)> + Copy,
) -> Tensor {
    let _op = op_entry!(
        name,
        [x],
        attrs = attrs,
        again = |c: &[Option<&Tensor>]| { unary_with(c[0].expect("present"), op, name, attrs) }
    );
    check_float(O::NAME, x);
    let storage = Arc::new(x.storage_arc().unary(x.layout(), op));
    let y = storage.clone();
    op_result(O::NAME, storage, Layout::contiguous(x.shape()), &[x], || {
        let x = x.saved_for_backward();
        move |g: &Tensor, _: &[bool]| -> Grads {
            let ly = Layout::contiguous(x.shape());
            let dx = g.storage_arc().unary_grad(g.layout(), (&x.storage_arc(), x.layout()), (&y, &ly), op);
            smallvec![Some(Tensor::from_storage(dx, x.shape()))]
        }
    })
}

/// Declares a unary op from its value `f` and derivative `df` (generic over the float
/// type), its WGSL, and optionally the CPU's vectorizable `f32` functions of `cpu::vector_fns`:
/// `fast = f` (an `fn(f32) -> f32`) and `fast_df = df` (the derivative, an `fn(f32) -> f32`
/// of `x`), used instead of `f`/`df` on `f32` tensors (see `UnaryOp::f32_loop`). With
/// `pieces = table` after `fast`, `f` is the table's `x p(x)` where the table covers `x`
/// and the loop may look the table up itself there (`cpu::poly_tables`). With `tune = KERNEL`
/// (a `cpu::tune::Kernel`), the loop's vector copy is chosen by measurement, and with
/// `algos = (..)` before it (a tuple of `cpu::tune::Plain` and `Table` algorithms, in
/// `KERNEL`'s order, `fast` first) the algorithm too.
macro_rules! unary_op {
    (@run $l:ident, [], $fast:expr, [], []) => {
        $l.run(#[inline(always)] |x| ($fast)(x))
    };
    (@run $l:ident, [], $fast:expr, [$pieces:expr], []) => {
        $l.run_pieces(&$pieces, #[inline(always)] |x| ($fast)(x))
    };
    (@run $l:ident, [$k:path], $fast:expr, [], []) => {
        $crate::backend::cpu::tune::run(&$k, ($crate::backend::cpu::tune::Plain(#[inline(always)] |x| ($fast)(x)),), $l)
    };
    (@run $l:ident, [$k:path], $fast:expr, [$pieces:expr], []) => {
        $crate::backend::cpu::tune::run(
            &$k,
            ($crate::backend::cpu::tune::Table(&$pieces, #[inline(always)] |x| ($fast)(x)),),
            $l,
        )
    };
    (@run $l:ident, [$k:path], $fast:expr, [], [$algos:expr]) => {
        $crate::backend::cpu::tune::run(&$k, $algos, $l)
    };
    ($(#[$doc:meta])* $name:ident, $label:expr, |$s:ident, $x:ident| $f:expr, |$s2:ident, $x2:ident, $y2:ident| $df:expr, wgsl = $w:expr
     $(, fast = $fast:expr $(, pieces = $pieces:expr)? $(, algos = $algos:expr)? $(, tune = $tune:path)?)? $(, fast_df = $fast_df:expr)? $(,)?) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub(crate) struct $name;
        impl UnaryOp for $name {
            const NAME: &'static str = $label;
            #[inline(always)]
            fn f<T: FloatElement>(&self, $x: T) -> T {
                let $s = self;
                let _ = $s;
                $f
            }
            #[inline(always)]
            #[allow(unused_variables)]
            fn df<T: FloatElement>(&self, $x2: T, $y2: T) -> T {
                let $s2 = self;
                let _ = $s2;
                $df
            }
            fn wgsl(&self) -> Option<($crate::backend::Wgsl, [f64; 2])> {
                Some(($w, [0.0, 0.0]))
            }
            $(
                #[inline(always)]
                fn f32_loop<L: $crate::backend::F32Loop>(&self, l: L) -> L::Out {
                    unary_op!(@run l, [$($tune)?], $fast, [$($pieces)?], [$($algos)?])
                }
            )?
            $(
                #[inline(always)]
                fn df32_loop<L: $crate::backend::F32GradLoop>(&self, l: L) -> L::Out {
                    l.run(#[inline(always)] |x, _y| ($fast_df)(x))
                }
            )?
        }
    };
}
pub(crate) use unary_op;

unary_op!(Neg, crate::names::NEG, |s, x| -x, |s, x, y| -T::one(), wgsl = Wgsl::unary("-x", "-1.0", false));
unary_op!(
    Exp,
    crate::names::EXP,
    |s, x| x.exp(),
    |s, x, y| y,
    wgsl = Wgsl::unary("exp(x)", "y", true),
    fast = vector_fns::exp,
    algos = (tune::Plain(vector_fns::exp), tune::Plain(vector_fns::exp_f32)),
    tune = tune::EXP
);
unary_op!(
    Log,
    crate::names::LOG,
    |s, x| x.ln(),
    |s, x, y| x.recip(),
    wgsl = Wgsl::unary("log(x)", "1.0 / x", true),
    fast = vector_fns::log
);
unary_op!(
    Sqrt,
    crate::names::SQRT,
    |s, x| x.sqrt(),
    |s, x, y| c::<T>(0.5) / y,
    wgsl = Wgsl::unary("sqrt(x)", "0.5 / y", false)
);
unary_op!(
    Abs,
    crate::names::ABS,
    |s, x| x.abs(),
    |s, x, y| if x > T::zero() {
        T::one()
    } else if x < T::zero() {
        -T::one()
    } else {
        T::zero()
    },
    wgsl = Wgsl::unary("abs(x)", "select(select(0.0, -1.0, x < 0.0), 1.0, x > 0.0)", false)
);
unary_op!(Sin, crate::names::SIN, |s, x| x.sin(), |s, x, y| x.cos(), wgsl = Wgsl::unary("sin(x)", "cos(x)", true));
unary_op!(Cos, crate::names::COS, |s, x| x.cos(), |s, x, y| -x.sin(), wgsl = Wgsl::unary("cos(x)", "-sin(x)", true));
unary_op!(
    Square,
    crate::names::SQUARE,
    |s, x| x * x,
    |s, x, y| c::<T>(2.0) * x,
    wgsl = Wgsl::unary("x * x", "2.0 * x", false)
);
unary_op!(
    Recip,
    crate::names::RECIPROCAL,
    |s, x| x.recip(),
    |s, x, y| -(y * y),
    wgsl = Wgsl::unary("1.0 / x", "-(y * y)", false)
);

/// `x ^ e` for a constant exponent.
#[derive(Clone, Copy)]
pub(crate) struct PowScalar(pub f64);
impl UnaryOp for PowScalar {
    const NAME: &'static str = crate::names::POW;
    fn f<T: FloatElement>(&self, x: T) -> T {
        if self.0 == 2.0 {
            x * x
        } else {
            x.powf(c(self.0))
        }
    }
    fn df<T: FloatElement>(&self, x: T, _y: T) -> T {
        if self.0 == 0.0 {
            T::zero()
        } else {
            c::<T>(self.0) * x.powf(c(self.0 - 1.0))
        }
    }
    fn wgsl(&self) -> Option<(Wgsl, [f64; 2])> {
        let w = Wgsl::unary(
            "select(powf_(x, p0), x * x, p0 == 2.0)",
            "select(p0 * powf_(x, p0 - 1.0), 0.0, p0 == 0.0)",
            true,
        );
        Some((w, [self.0, 0.0]))
    }
    /// One loop per kind of exponent (see [`PowKind`]; small integers each with their
    /// own), so that the loop body never branches on the exponent.
    #[inline(always)]
    fn f32_loop<L: F32Loop>(&self, l: L) -> L::Out {
        let p = self.0;
        let Some(kind) = PowKind::of(p) else {
            return l.run(
                #[inline(always)]
                move |x: f32| x.powf(p as f32),
            );
        };
        macro_rules! run {
            (|$x:ident| $e:expr) => {
                l.run(
                    #[inline(always)]
                    move |$x: f32| ($e) as f32,
                )
            };
        }
        powers::with_pow!(kind, run)
    }
    /// `p x^(p-1)` by the kind of `p - 1`, as [`Self::f32_loop`].
    #[inline(always)]
    fn df32_loop<L: F32GradLoop>(&self, l: L) -> L::Out {
        let p = self.0;
        if p == 0.0 {
            return l.run(
                #[inline(always)]
                |_, _| 0.0,
            );
        }
        let Some(kind) = PowKind::of(p - 1.0) else {
            return l.run(
                #[inline(always)]
                move |x: f32, _| (p as f32) * x.powf((p - 1.0) as f32),
            );
        };
        macro_rules! run {
            (|$x:ident| $e:expr) => {
                l.run(
                    #[inline(always)]
                    move |$x: f32, _| (p * $e) as f32,
                )
            };
        }
        powers::with_pow!(kind, run)
    }
}

/// `1 / sqrt(x)`.
#[derive(Clone, Copy)]
pub(crate) struct Rsqrt;
impl UnaryOp for Rsqrt {
    const NAME: &'static str = crate::names::RSQRT;
    fn f<T: FloatElement>(&self, x: T) -> T {
        x.sqrt().recip()
    }
    fn df<T: FloatElement>(&self, _x: T, y: T) -> T {
        c::<T>(-0.5) * y * y * y
    }
    fn wgsl(&self) -> Option<(Wgsl, [f64; 2])> {
        Some((Wgsl::unary("1.0 / sqrt(x)", "-0.5 * y * y * y", false), [0.0, 0.0]))
    }
    #[inline(always)]
    // A closure marked for inlining, not the fn item: an fn item goes through a call shim
    // that is not inlined into the vector loop (see `isa_loops::map_elems`).
    #[allow(clippy::redundant_closure)]
    fn f32_loop<L: F32Loop>(&self, l: L) -> L::Out {
        l.run(
            #[inline(always)]
            |x| vector_fns::rsqrt(x),
        )
    }
}

/// `a * x + b` (scalar arithmetic: `x + s`, `x * s`, `s - x`, ...).
#[derive(Clone, Copy)]
pub(crate) struct Affine(pub f64, pub f64);
impl UnaryOp for Affine {
    const NAME: &'static str = crate::names::AFFINE;
    fn f<T: FloatElement>(&self, x: T) -> T {
        if self.0 == 1.0 {
            x + c(self.1)
        } else if self.1 == 0.0 {
            x * c(self.0)
        } else {
            x * c(self.0) + c(self.1)
        }
    }
    fn df<T: FloatElement>(&self, _x: T, _y: T) -> T {
        c(self.0)
    }
    fn wgsl(&self) -> Option<(Wgsl, [f64; 2])> {
        // Adding a zero `p1` would turn -0 into +0: the CPU skips it, and so does this.
        Some((Wgsl::unary("select(x * p0 + p1, x * p0, p1 == 0.0)", "p0 + 0.0 * x", false), [self.0, self.1]))
    }
}

/// `x / s` (kept apart from `Affine` so that division rounds exactly like PyTorch's).
#[derive(Clone, Copy)]
pub(crate) struct DivScalar(pub f64);
impl UnaryOp for DivScalar {
    const NAME: &'static str = crate::names::DIV;
    fn f<T: FloatElement>(&self, x: T) -> T {
        x / c(self.0)
    }
    fn df<T: FloatElement>(&self, _x: T, _y: T) -> T {
        T::one() / c(self.0)
    }
    fn wgsl(&self) -> Option<(Wgsl, [f64; 2])> {
        Some((Wgsl::unary("x / p0", "1.0 / p0 + 0.0 * x", false), [self.0, 0.0]))
    }
}

/// `s / x`.
#[derive(Clone, Copy)]
pub(crate) struct ScalarDiv(pub f64);
impl UnaryOp for ScalarDiv {
    const NAME: &'static str = crate::names::DIV;
    fn f<T: FloatElement>(&self, x: T) -> T {
        c::<T>(self.0) / x
    }
    fn df<T: FloatElement>(&self, x: T, _y: T) -> T {
        -c::<T>(self.0) / (x * x)
    }
    fn wgsl(&self) -> Option<(Wgsl, [f64; 2])> {
        Some((Wgsl::unary("p0 / x", "-p0 / (x * x)", false), [self.0, 0.0]))
    }
}

/// Clamps into `[min, max]`; the gradient passes where `min <= x <= max`, as in PyTorch.
#[derive(Clone, Copy)]
pub(crate) struct Clamp(pub f64, pub f64);
impl UnaryOp for Clamp {
    const NAME: &'static str = crate::names::CLAMP;
    fn f<T: FloatElement>(&self, x: T) -> T {
        if x.is_nan() {
            return x;
        }
        let (lo, hi) = (c::<T>(self.0), c::<T>(self.1));
        if x < lo {
            lo
        } else if x > hi {
            hi
        } else {
            x
        }
    }
    fn df<T: FloatElement>(&self, x: T, _y: T) -> T {
        if x >= c(self.0) && x <= c(self.1) {
            T::one()
        } else {
            T::zero()
        }
    }
    fn wgsl(&self) -> Option<(Wgsl, [f64; 2])> {
        let f = "select(select(select(x, p1, x > p1), p0, x < p0), x, isnan_(f32(x)))";
        Some((Wgsl::unary(f, "select(0.0, 1.0, x >= p0 && x <= p1)", false), [self.0, self.1]))
    }
}

impl Tensor {
    /// `-x` elementwise.
    pub fn neg(&self) -> Tensor {
        unary(self, Neg)
    }

    /// `e^x` elementwise.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let y = Tensor::from_vec(vec![0.0, 1.0], &[2]).exp();
    /// assert!((y.to_vec()[1] - std::f32::consts::E).abs() < 1e-6);
    /// ```
    pub fn exp(&self) -> Tensor {
        unary(self, Exp)
    }

    /// Natural logarithm elementwise.
    pub fn log(&self) -> Tensor {
        unary(self, Log)
    }

    /// Square root elementwise.
    pub fn sqrt(&self) -> Tensor {
        unary(self, Sqrt)
    }

    /// Absolute value elementwise (gradient 0 at 0, as PyTorch).
    pub fn abs(&self) -> Tensor {
        unary(self, Abs)
    }

    /// Sine elementwise.
    pub fn sin(&self) -> Tensor {
        unary(self, Sin)
    }

    /// Cosine elementwise.
    pub fn cos(&self) -> Tensor {
        unary(self, Cos)
    }

    /// `x * x` elementwise.
    pub fn square(&self) -> Tensor {
        unary(self, Square)
    }

    /// `1 / x` elementwise.
    pub fn recip(&self) -> Tensor {
        unary(self, Recip)
    }

    /// `1 / sqrt(x)` elementwise (`inf` at `+0`, `-inf` at `-0`, NaN below 0, as
    /// PyTorch's `rsqrt`).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// assert_eq!(Tensor::from_vec(vec![4.0, 0.25], &[2]).rsqrt().to_vec(), vec![0.5, 2.0]);
    /// ```
    pub fn rsqrt(&self) -> Tensor {
        unary(self, Rsqrt)
    }

    /// `x ^ exponent` elementwise for a constant exponent.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// assert_eq!(Tensor::from_vec(vec![2.0, 3.0], &[2]).powf(3.0).to_vec(), vec![8.0, 27.0]);
    /// ```
    pub fn powf(&self, exponent: f64) -> Tensor {
        unary_with(self, PowScalar(exponent), crate::names::POWF, move || {
            vec![("exponent", crate::autograd::trace::Attr::Float(exponent))]
        })
    }

    /// Clamps every element into `[min, max]` (use `f64::NEG_INFINITY`/`INFINITY` for one
    /// side only). NaN stays NaN.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let y = Tensor::from_vec(vec![-2.0, 0.5, 3.0], &[3]).clamp(-1.0, 1.0);
    /// assert_eq!(y.to_vec(), vec![-1.0, 0.5, 1.0]);
    /// ```
    ///
    /// # Panics
    /// When `min > max`, or a bound is NaN (accepted, it would pass every element through
    /// forward and send no gradient back; PyTorch returns NaN).
    #[track_caller]
    pub fn clamp(&self, min: f64, max: f64) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::CLAMP, &[self], &[], || {
            vec![("min", crate::autograd::trace::Attr::Float(min)), ("max", crate::autograd::trace::Attr::Float(max))]
        });
        if min.is_nan() || max.is_nan() {
            panic!("clamp: a bound is NaN (min {min}, max {max}); use infinity for an open side");
        }
        if min > max {
            panic!("clamp: min {min} is greater than max {max}");
        }
        unary(self, Clamp(min, max))
    }

    /// `a * x + b` elementwise in one pass.
    pub fn affine(&self, a: f64, b: f64) -> Tensor {
        use crate::autograd::trace::Attr::Float;
        unary_with(self, Affine(a, b), crate::names::AFFINE, move || vec![("a", Float(a)), ("b", Float(b))])
    }

    pub(crate) fn div_scalar(&self, s: f64) -> Tensor {
        unary_with(self, DivScalar(s), crate::names::DIV_SCALAR, move || {
            vec![("s", crate::autograd::trace::Attr::Float(s))]
        })
    }

    pub(crate) fn scalar_div(&self, s: f64) -> Tensor {
        unary_with(self, ScalarDiv(s), crate::names::SCALAR_DIV, move || {
            vec![("s", crate::autograd::trace::Attr::Float(s))]
        })
    }
}

#[cfg(test)]
mod tests {
    use std::f64::consts::{E, FRAC_PI_2, FRAC_PI_3, FRAC_PI_6, LN_2, PI, SQRT_2};

    use crate::testing::assert_close;
    use crate::testing::support::{check_noncontig, grad, leaf, noncontig, t64, unary_suite};
    use crate::{DType, Device, Tensor};

    // One suite per op: forward values (hand-computed), backward through
    // `op(x).exp().mean()` against the analytic derivative, and a finite-difference check.
    unary_suite!(
        rsqrt: |x: &Tensor| x.rsqrt(),
        x = [0.25, 1.0, 2.0, 9.0],
        y = [2.0, 1.0, std::f64::consts::FRAC_1_SQRT_2, 0.3333333333333333],
        dy = |x: f64| -0.5 * x.powf(-1.5),
    );
    unary_suite!(neg: |x: &Tensor| x.neg(), x = [-1.5, 0.0, 2.0, 3.25], y = [1.5, -0.0, -2.0, -3.25], dy = |_| -1.0);
    unary_suite!(
        exp: |x: &Tensor| x.exp(),
        x = [-1.0, 0.0, 0.5, 2.0],
        y = [0.36787944117144233, 1.0, 1.6487212707001282, 7.38905609893065],
        dy = |x: f64| x.exp(),
    );
    unary_suite!(
        log: |x: &Tensor| x.log(),
        x = [0.5, 1.0, E, 4.0],
        y = [-LN_2, 0.0, 1.0, 2.0 * LN_2],
        dy = |x: f64| 1.0 / x,
    );
    unary_suite!(
        sqrt: |x: &Tensor| x.sqrt(),
        x = [0.25, 1.0, 2.0, 9.0],
        y = [0.5, 1.0, SQRT_2, 3.0],
        dy = |x: f64| 0.5 / x.sqrt(),
    );
    unary_suite!(
        abs: |x: &Tensor| x.abs(),
        x = [-2.0, -0.5, 0.75, 3.0],
        y = [2.0, 0.5, 0.75, 3.0],
        dy = |x: f64| x.signum(),
    );
    unary_suite!(
        sin: |x: &Tensor| x.sin(),
        x = [0.0, FRAC_PI_6, FRAC_PI_2, -1.0],
        y = [0.0, 0.5, 1.0, -0.8414709848078965],
        dy = |x: f64| x.cos(),
    );
    unary_suite!(
        cos: |x: &Tensor| x.cos(),
        x = [0.0, FRAC_PI_3, PI, 2.0],
        y = [1.0, 0.5, -1.0, -0.4161468365471424],
        dy = |x: f64| -x.sin(),
    );
    unary_suite!(
        square: |x: &Tensor| x.square(),
        x = [-3.0, -0.5, 1.5, 2.0],
        y = [9.0, 0.25, 2.25, 4.0],
        dy = |x: f64| 2.0 * x,
    );
    unary_suite!(
        recip: |x: &Tensor| x.recip(),
        x = [-2.0, 0.5, 1.0, 4.0],
        y = [-0.5, 2.0, 1.0, 0.25],
        dy = |x: f64| -1.0 / (x * x),
    );
    unary_suite!(
        powf_cube: |x: &Tensor| x.powf(3.0),
        x = [-1.5, 0.5, 1.0, 2.0],
        y = [-3.375, 0.125, 1.0, 8.0],
        dy = |x: f64| 3.0 * x * x,
    );
    unary_suite!(
        powf_two: |x: &Tensor| x.powf(2.0),
        x = [-3.0, -0.5, 1.5, 2.0],
        y = [9.0, 0.25, 2.25, 4.0],
        dy = |x: f64| 2.0 * x,
    );
    unary_suite!(
        powf_half: |x: &Tensor| x.powf(0.5),
        x = [0.25, 1.0, 4.0, 9.0],
        y = [0.5, 1.0, 2.0, 3.0],
        dy = |x: f64| 0.5 / x.sqrt(),
    );
    unary_suite!(
        powf_negative: |x: &Tensor| x.powf(-2.0),
        x = [-2.0, 0.5, 1.0, 4.0],
        y = [0.25, 4.0, 1.0, 0.0625],
        dy = |x: f64| -2.0 / (x * x * x),
    );
    unary_suite!(
        clamp: |x: &Tensor| x.clamp(-1.0, 2.0),
        x = [-3.0, -0.5, 1.5, 4.0],
        y = [-1.0, -0.5, 1.5, 2.0],
        dy = |x: f64| if (-1.0..=2.0).contains(&x) { 1.0 } else { 0.0 },
    );
    unary_suite!(
        affine: |x: &Tensor| x.affine(2.0, -1.0),
        x = [-1.0, 0.0, 0.5, 3.0],
        y = [-3.0, -1.0, 0.0, 5.0],
        dy = |_| 2.0,
    );
    unary_suite!(
        affine_shift_only: |x: &Tensor| x.affine(1.0, 0.5),
        x = [-1.0, 0.0, 0.5, 3.0],
        y = [-0.5, 0.5, 1.0, 3.5],
        dy = |_| 1.0,
    );
    unary_suite!(
        affine_scale_only: |x: &Tensor| x.affine(-3.0, 0.0),
        x = [-1.0, 0.0, 0.5, 3.0],
        y = [3.0, -0.0, -1.5, -9.0],
        dy = |_| -3.0,
    );

    #[test]
    fn clamp_passes_the_gradient_at_the_bounds_like_pytorch() {
        let x = leaf(&[-1.0, 2.0, 2.5], &[3]);
        (x.clamp(-1.0, 2.0) * 3.0).sum().backward();
        assert_eq!(grad(&x), vec![3.0, 3.0, 0.0]);
    }

    #[test]
    fn clamp_keeps_nan_and_accepts_infinite_bounds() {
        let x = Tensor::from_vec(vec![f32::NAN, -5.0, 5.0], &[3]);
        let y = x.clamp(0.0, f64::INFINITY).to_vec();
        assert!(y[0].is_nan());
        assert_eq!(&y[1..], &[0.0, 5.0]);
        assert_eq!(x.clamp(f64::NEG_INFINITY, 1.0).to_vec()[1..], [-5.0, 1.0]);
    }

    #[test]
    #[should_panic(expected = "clamp: min 2 is greater than max 1")]
    fn clamp_rejects_inverted_bounds() {
        Tensor::ones(&[2]).clamp(2.0, 1.0);
    }

    #[test]
    fn abs_has_zero_gradient_at_zero() {
        let x = leaf(&[0.0, -0.0, 1.0], &[3]);
        x.abs().sum().backward();
        assert_eq!(grad(&x), vec![0.0, 0.0, 1.0]);
    }

    #[test]
    fn powf_zero_is_one_with_zero_gradient() {
        let x = leaf(&[-2.0, 0.0, 3.0], &[3]);
        let y = x.powf(0.0);
        assert_eq!(y.to_vec_f64(), vec![1.0, 1.0, 1.0]);
        y.sum().backward();
        assert_eq!(grad(&x), vec![0.0, 0.0, 0.0]);
    }

    #[test]
    fn domain_errors_give_nan_and_inf_like_ieee() {
        let x = Tensor::from_vec(vec![-1.0, 0.0], &[2]);
        let l = x.log().to_vec();
        assert!(l[0].is_nan());
        assert_eq!(l[1], f32::NEG_INFINITY);
        assert!(x.sqrt().to_vec()[0].is_nan());
        assert_eq!(x.recip().to_vec()[1], f32::INFINITY);
    }

    #[test]
    fn sqrt_of_rank0_tensor_and_its_gradient() {
        let x = Tensor::from_vec_f64(vec![4.0], &[]).requires_grad_(true);
        let y = x.sqrt();
        assert_eq!(y.shape(), &[] as &[usize]);
        assert_eq!(y.item(), 2.0);
        y.exp().backward();
        let g = x.grad().unwrap();
        assert_eq!(g.shape(), &[] as &[usize]);
        // d/dx exp(sqrt(x)) = exp(2) / (2 * 2)
        assert!((g.item() - 2f64.exp() / 4.0).abs() < 1e-12);
    }

    #[test]
    fn unary_on_empty_tensor_keeps_the_shape() {
        let x = Tensor::zeros(&[0, 3]).requires_grad_(true);
        let y = x.exp();
        assert_eq!(y.shape(), &[0, 3]);
        assert_eq!(y.to_vec(), Vec::<f32>::new());
        y.sum().backward();
        assert_eq!(x.grad().unwrap().shape(), &[0, 3]);
    }

    #[test]
    fn unary_ops_on_noncontiguous_inputs() {
        type Op = fn(&Tensor) -> Tensor;
        let ops: [(&str, Op); 13] = [
            ("neg", |x| x.neg()),
            ("exp", |x| x.exp()),
            ("log", |x| x.abs().log()),
            ("sqrt", |x| x.abs().sqrt()),
            ("abs", |x| x.abs()),
            ("sin", |x| x.sin()),
            ("cos", |x| x.cos()),
            ("square", |x| x.square()),
            ("recip", |x| x.recip()),
            ("powf", |x| x.powf(3.0)),
            ("clamp", |x| x.clamp(-0.5, 0.5)),
            ("affine", |x| x.affine(2.0, 1.0)),
            ("div", |x| x.div_scalar(4.0)),
        ];
        let base = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4], &[2, 3]);
        for (name, op) in ops {
            // The shared helper: a strided copy with NaN in the gaps.
            check_noncontig(|t| op(&t[0]), std::slice::from_ref(&base));
            // Transposed, permuted, narrowed and expanded views against contiguous copies.
            let views = [
                base.t(),
                base.reshape(&[1, 2, 3]).permute(&[2, 0, 1]),
                base.narrow(1, 1, 2),
                base.narrow(0, 1, 1).expand(&[4, 3]),
            ];
            for v in views {
                assert_eq!(op(&v).to_vec_f64(), op(&v.contiguous()).to_vec_f64(), "{name} on a view");
            }
        }
    }

    #[test]
    fn large_inputs_take_the_parallel_path_with_the_same_values() {
        let n = super::super::PAR_THRESHOLD * 2 + 3;
        let x = Tensor::arange(0.0, n as f64, 1.0) * 1e-4;
        let y = x.sin().to_vec();
        for i in [0, 1, n / 2, n - 1] {
            assert_eq!(y[i], ((i as f32) * 1e-4).sin(), "element {i}");
        }
        let y2 = noncontig(&x).sin().to_vec();
        assert_eq!(y, y2);
    }

    #[test]
    fn unary_ops_on_meta_propagate_shape_and_dtype() {
        let x = Tensor::full_on(&[2, 5], 0.0, DType::F64, Device::Meta).requires_grad_(true);
        let y = x.exp().clamp(0.0, 1.0).powf(2.0).affine(2.0, 1.0);
        assert_eq!((y.shape(), y.dtype(), y.device()), (&[2, 5][..], DType::F64, Device::Meta));
        assert!(y.requires_grad());
        // Backward on meta runs shape-only.
        y.sum().backward();
        let g = x.grad().unwrap();
        assert_eq!((g.shape(), g.device()), (&[2, 5][..], Device::Meta));
    }

    #[test]
    #[should_panic(expected = "exp: expected a floating-point tensor (f32, f64, bf16 or f16), got i64")]
    fn unary_op_on_integers_names_the_op() {
        Tensor::from_vec_i64(vec![1, 2], &[2]).exp();
    }

    #[test]
    fn unary_ops_on_half_types_compute_in_f32_and_round_once() {
        for dt in [DType::F16, DType::BF16] {
            let x = Tensor::from_vec(vec![2.0, 0.3, -1.5], &[3]).to_dtype(dt);
            let y = x.exp();
            assert_eq!(y.dtype(), dt);
            // The f32 result of the half input, rounded to the half type.
            let want = x.to_dtype(DType::F32).exp().to_dtype(dt);
            assert_eq!(y.to_vec(), want.to_vec());
        }
    }

    #[test]
    fn f32_forward_rounds_like_f32() {
        // 1/3 in f32 is not the f64 value rounded late: the op computes in f32.
        let y = Tensor::from_vec(vec![3.0], &[1]).recip().to_vec()[0];
        assert_eq!(y, 1.0f32 / 3.0);
        assert_close(&Tensor::from_vec(vec![1.0], &[1]).exp().to_vec(), &[std::f32::consts::E], 0.0, 0.0);
    }
}
