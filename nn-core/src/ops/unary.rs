//! Table-driven elementwise unary ops: each op supplies `f` and its derivative `df`, one
//! generic kernel runs them forward and backward (dfdx's approach).

use std::sync::Arc;

use smallvec::smallvec;

use super::{check_float, cpu, map1, map3};
use crate::autograd::{op_result, Grads};
use crate::dtype::FloatElement;
use crate::shape::Layout;
use crate::storage::{with_float, Storage};
use crate::tensor::Tensor;

/// An elementwise function with its derivative.
pub(crate) trait UnaryOp: Copy + Send + Sync + 'static {
    /// The op's name in messages and `grad_fn_name`.
    const NAME: &'static str;
    /// The forward value at `x`.
    fn f<T: FloatElement>(&self, x: T) -> T;
    /// The derivative at input `x` with forward output `y` (whichever is cheaper to use).
    fn df<T: FloatElement>(&self, x: T, y: T) -> T;
}

#[inline(always)]
pub(crate) fn c<T: FloatElement>(v: f64) -> T {
    T::from_f64(v)
}

/// Applies `op` elementwise, recording its backward.
pub(crate) fn unary<O: UnaryOp>(x: &Tensor, op: O) -> Tensor {
    check_float(O::NAME, x);
    let storage = Arc::new(match &*x.storage_arc() {
        Storage::Meta { dtype, .. } => Storage::Meta { dtype: *dtype, len: x.numel() },
        Storage::Cpu(cs) => Storage::Cpu(with_float!(cs, O::NAME, T, v => {
            crate::dtype::Element::into_storage(map1(v, x.layout(), |a: T| op.f(a)))
        })),
    });
    let y = storage.clone();
    op_result(O::NAME, storage, Layout::contiguous(x.shape()), &[x], || {
        let x = x.detach();
        move |g: &Tensor, _: &[bool]| -> Grads { smallvec![Some(unary_backward(op, g, &x, &y))] }
    })
}

/// `g * df(x, y)` elementwise.
fn unary_backward<O: UnaryOp>(op: O, g: &Tensor, x: &Tensor, y: &Arc<Storage>) -> Tensor {
    let (gs, xs) = (g.storage_arc(), x.storage_arc());
    if let Storage::Meta { dtype, .. } = &*gs {
        return Tensor::full_on(x.shape(), 0.0, *dtype, crate::Device::Meta);
    }
    let ly = Layout::contiguous(x.shape());
    let out = with_float!(cpu(&gs), O::NAME, T, gv => {
        let xv = <T as crate::dtype::Element>::slice(cpu(&xs)).expect("same dtype");
        let yv = <T as crate::dtype::Element>::slice(cpu(y)).expect("same dtype");
        crate::dtype::Element::into_storage(map3(gv, g.layout(), xv, x.layout(), yv, &ly, |g: T, x: T, y: T| g * op.df(x, y)))
    });
    Tensor::from_cpu(out, x.shape())
}

macro_rules! unary_op {
    ($(#[$doc:meta])* $name:ident, $label:literal, |$s:ident, $x:ident| $f:expr, |$s2:ident, $x2:ident, $y2:ident| $df:expr) => {
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
        }
    };
}
pub(crate) use unary_op;

unary_op!(Neg, "neg", |s, x| -x, |s, x, y| -T::one());
unary_op!(Exp, "exp", |s, x| x.exp(), |s, x, y| y);
unary_op!(Log, "log", |s, x| x.ln(), |s, x, y| x.recip());
unary_op!(Sqrt, "sqrt", |s, x| x.sqrt(), |s, x, y| c::<T>(0.5) / y);
unary_op!(Abs, "abs", |s, x| x.abs(), |s, x, y| if x > T::zero() {
    T::one()
} else if x < T::zero() {
    -T::one()
} else {
    T::zero()
});
unary_op!(Sin, "sin", |s, x| x.sin(), |s, x, y| x.cos());
unary_op!(Cos, "cos", |s, x| x.cos(), |s, x, y| -x.sin());
unary_op!(Square, "square", |s, x| x * x, |s, x, y| c::<T>(2.0) * x);
unary_op!(Recip, "reciprocal", |s, x| x.recip(), |s, x, y| -(y * y));

/// `x ^ e` for a constant exponent.
#[derive(Clone, Copy)]
pub(crate) struct PowScalar(pub f64);
impl UnaryOp for PowScalar {
    const NAME: &'static str = "pow";
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
}

/// `a * x + b` (scalar arithmetic: `x + s`, `x * s`, `s - x`, ...).
#[derive(Clone, Copy)]
pub(crate) struct Affine(pub f64, pub f64);
impl UnaryOp for Affine {
    const NAME: &'static str = "affine";
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
}

/// `x / s` (kept apart from `Affine` so that division rounds exactly like PyTorch's).
#[derive(Clone, Copy)]
pub(crate) struct DivScalar(pub f64);
impl UnaryOp for DivScalar {
    const NAME: &'static str = "div";
    fn f<T: FloatElement>(&self, x: T) -> T {
        x / c(self.0)
    }
    fn df<T: FloatElement>(&self, _x: T, _y: T) -> T {
        T::one() / c(self.0)
    }
}

/// `s / x`.
#[derive(Clone, Copy)]
pub(crate) struct ScalarDiv(pub f64);
impl UnaryOp for ScalarDiv {
    const NAME: &'static str = "div";
    fn f<T: FloatElement>(&self, x: T) -> T {
        c::<T>(self.0) / x
    }
    fn df<T: FloatElement>(&self, x: T, _y: T) -> T {
        -c::<T>(self.0) / (x * x)
    }
}

/// Clamps into `[min, max]`; the gradient passes where `min <= x <= max`, as in PyTorch.
#[derive(Clone, Copy)]
pub(crate) struct Clamp(pub f64, pub f64);
impl UnaryOp for Clamp {
    const NAME: &'static str = "clamp";
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

    /// `x ^ exponent` elementwise for a constant exponent.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// assert_eq!(Tensor::from_vec(vec![2.0, 3.0], &[2]).powf(3.0).to_vec(), vec![8.0, 27.0]);
    /// ```
    pub fn powf(&self, exponent: f64) -> Tensor {
        unary(self, PowScalar(exponent))
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
    /// When `min > max`.
    pub fn clamp(&self, min: f64, max: f64) -> Tensor {
        if min > max {
            panic!("clamp: min {min} is greater than max {max}");
        }
        unary(self, Clamp(min, max))
    }

    /// `a * x + b` elementwise in one pass.
    pub fn affine(&self, a: f64, b: f64) -> Tensor {
        unary(self, Affine(a, b))
    }

    pub(crate) fn div_scalar(&self, s: f64) -> Tensor {
        unary(self, DivScalar(s))
    }

    pub(crate) fn scalar_div(&self, s: f64) -> Tensor {
        unary(self, ScalarDiv(s))
    }
}
