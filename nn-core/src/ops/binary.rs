//! Broadcasting binary ops (table-driven like the unary ones), comparisons, `where_`, and
//! the operator overloads on `Tensor` and `&Tensor`.

use std::ops::{Add, Div, Mul, Neg, Sub};
use std::sync::Arc;

use smallvec::smallvec;

use super::check_same;
use crate::autograd::entry::op_entry;
use crate::autograd::{op_result, Grads};
pub(crate) use crate::backend::BinaryOp;
use crate::backend::Operand;
use crate::backend::Wgsl;
use crate::dtype::{DType, FloatElement};
use crate::shape::{broadcast_shapes, Layout};
use crate::tensor::Tensor;

macro_rules! binary_op {
    ($name:ident, $label:expr, $consts:expr, |$a:ident, $b:ident| $f:expr, $da:expr, $db:expr, wgsl = $w:expr $(, int = $int:expr)?) => {
        #[derive(Clone, Copy)]
        pub(crate) struct $name;
        impl BinaryOp for $name {
            const NAME: &'static str = $label;
            const CONST_GRADS: Option<(f64, f64)> = $consts;
            $(const INT: Option<fn(i64, i64) -> i64> = Some($int);)?
            const WGSL: Option<Wgsl> = Some($w);
            #[inline(always)]
            fn f<T: FloatElement>($a: T, $b: T) -> T {
                $f
            }
            #[inline(always)]
            #[allow(unused_variables)]
            fn da<T: FloatElement>($a: T, $b: T) -> T {
                $da
            }
            #[inline(always)]
            #[allow(unused_variables)]
            fn db<T: FloatElement>($a: T, $b: T) -> T {
                $db
            }
        }
    };
}

binary_op!(
    AddOp,
    crate::names::ADD,
    Some((1.0, 1.0)),
    |a, b| a + b,
    T::one(),
    T::one(),
    wgsl = Wgsl::binary("a + b", "1.0", "1.0", false),
    int = i64::wrapping_add
);
binary_op!(
    SubOp,
    crate::names::SUB,
    Some((1.0, -1.0)),
    |a, b| a - b,
    T::one(),
    -T::one(),
    wgsl = Wgsl::binary("a - b", "1.0", "-1.0", false),
    int = i64::wrapping_sub
);
binary_op!(
    MulOp,
    crate::names::MUL,
    None,
    |a, b| a * b,
    b,
    a,
    wgsl = Wgsl::binary("a * b", "b", "a", false),
    int = i64::wrapping_mul
);
binary_op!(
    DivOp,
    crate::names::DIV,
    None,
    |a, b| a / b,
    b.recip(),
    -a / (b * b),
    wgsl = Wgsl::binary("a / b", "1.0 / b", "-a / (b * b)", false)
);
binary_op!(
    PowOp,
    crate::names::POW,
    None,
    |a, b| a.powf(b),
    if b == T::zero() { T::zero() } else { b * a.powf(b - T::one()) },
    {
        // d/db a^b = a^b ln a; PyTorch defines it as 0 where a == 0 and b >= 0.
        if a == T::zero() && b >= T::zero() {
            T::zero()
        } else {
            a.powf(b) * a.ln()
        }
    },
    wgsl = Wgsl::binary(
        "powf_(a, b)",
        "select(b * powf_(a, b - 1.0), 0.0, b == 0.0)",
        "select(powf_(a, b) * log(a), 0.0, a == 0.0 && b >= 0.0)",
        true
    )
);
// Gradients as PyTorch's `maximum`/`minimum`: half to each side at a tie, nothing to the
// side that lost, and the whole gradient to both where either operand is NaN (neither
// comparison holds there, so neither side is masked).
binary_op!(
    MaxOp,
    crate::names::MAXIMUM,
    None,
    |a, b| if a.is_nan() || b.is_nan() {
        T::nan()
    } else if a >= b {
        a
    } else {
        b
    },
    tie_or(a == b, a < b),
    tie_or(a == b, a > b),
    wgsl = Wgsl::binary(
        "select(pick_(b, a, a >= b), a + b, isnan_(f32(a)) || isnan_(f32(b)))",
        "select(select(1.0, 0.0, a < b), 0.5, a == b)",
        "select(select(1.0, 0.0, a > b), 0.5, a == b)",
        false
    ),
    int = |a: i64, b: i64| a.max(b)
);
binary_op!(
    MinOp,
    crate::names::MINIMUM,
    None,
    |a, b| if a.is_nan() || b.is_nan() {
        T::nan()
    } else if a <= b {
        a
    } else {
        b
    },
    tie_or(a == b, a > b),
    tie_or(a == b, a < b),
    wgsl = Wgsl::binary(
        "select(pick_(b, a, a <= b), a + b, isnan_(f32(a)) || isnan_(f32(b)))",
        "select(select(1.0, 0.0, a > b), 0.5, a == b)",
        "select(select(1.0, 0.0, a < b), 0.5, a == b)",
        false
    ),
    int = |a: i64, b: i64| a.min(b)
);

/// The local gradient of one side of `maximum`/`minimum`: 0.5 at a tie, 0 where that side
/// `lost`, 1 otherwise (a NaN operand neither ties nor loses).
#[inline(always)]
fn tie_or<T: FloatElement>(tie: bool, lost: bool) -> T {
    if tie {
        T::from_f64(0.5)
    } else if lost {
        T::zero()
    } else {
        T::one()
    }
}

/// The broadcast output shape of `a` and `b`, or a panic naming the op and both shapes.
#[track_caller]
pub(crate) fn broadcast_pair(op: &str, a: &Tensor, b: &Tensor) -> (Layout, Layout, Layout) {
    let Some(shape) = broadcast_shapes(a.shape(), b.shape()) else {
        panic!("{op}: shapes {:?} and {:?} cannot be broadcast together", a.shape(), b.shape());
    };
    let la = a.layout().broadcast_to(&shape).expect("broadcastable");
    let lb = b.layout().broadcast_to(&shape).expect("broadcastable");
    (la, lb, Layout::contiguous(&shape))
}

/// Applies a broadcasting binary op, recording its backward.
#[track_caller]
pub(crate) fn binary<O: BinaryOp>(a: &Tensor, b: &Tensor) -> Tensor {
    let again = |c: &[Option<&Tensor>]| binary::<O>(c[0].expect("present"), c[1].expect("present"));
    let _op = op_entry!(O::NAME, [a, b], attrs = Vec::new, again = again);
    // Operands of two dtypes compute in PyTorch's result type when it is a floating one
    // (`f32 * bool`, `i64 + f64`, `bf16[3] * f32[]`), inside autocast and outside it.
    if let Some((a, b)) = super::promotion::promoted(a, b) {
        return binary::<O>(&a, &b);
    }
    if a.device() == b.device() {
        let to = super::promotion::result_type(a, b);
        if let (DType::I64, Some(_)) = (to, O::INT) {
            return integer::<O>(&a.to_dtype(DType::I64), &b.to_dtype(DType::I64));
        }
        if !to.is_compute_float() && O::NAME == <DivOp as BinaryOp>::NAME {
            // True division of integers gives the default float dtype, as PyTorch's `/`.
            return binary::<O>(&a.to_dtype(DType::F32), &b.to_dtype(DType::F32));
        }
        if !to.is_compute_float() && a.dtype() != b.dtype() {
            panic!(
                "{}: {} (shape {:?}) with {} (shape {:?}) computes in {to} (PyTorch's type promotion), and nn's \
                 arithmetic runs in floating dtypes only: convert an operand with `to_dtype(DType::F32)`",
                O::NAME,
                a.dtype(),
                a.shape(),
                b.dtype(),
                b.shape()
            );
        }
    }
    check_same(O::NAME, &[a, b]);
    super::check_float(O::NAME, a);
    let (la, lb, lo) = broadcast_pair(O::NAME, a, b);
    let storage = a.storage_arc().binary::<O>(&la, &b.storage_arc(), &lb);
    op_result(O::NAME, Arc::new(storage), lo, &[a, b], || {
        let (a, b) = (a.saved_for_backward(), b.saved_for_backward());
        move |g: &Tensor, needs: &[bool]| -> Grads {
            let grad_for = |which: usize| -> Tensor {
                let target = if which == 0 { a.shape() } else { b.shape() };
                let full = match O::CONST_GRADS {
                    Some((ca, cb)) => {
                        let k = if which == 0 { ca } else { cb };
                        if k == 1.0 {
                            g.clone()
                        } else {
                            g * k
                        }
                    }
                    None => binary_grad::<O>(g, &a, &b, if which == 0 { Operand::Lhs } else { Operand::Rhs }),
                };
                full.sum_to_shape(target)
            };
            smallvec![needs[0].then(|| grad_for(0)), needs[1].then(|| grad_for(1))]
        }
    })
}

/// `O` on two `i64` tensors, with PyTorch's integer results (wrapping on overflow); no
/// gradient (integers have none).
fn integer<O: BinaryOp>(a: &Tensor, b: &Tensor) -> Tensor {
    let (la, lb, lo) = broadcast_pair(O::NAME, a, b);
    Tensor::from_storage(a.storage_arc().binary::<O>(&la, &b.storage_arc(), &lb), lo.shape())
}

/// `g * d op / d input` at the broadcast shape.
fn binary_grad<O: BinaryOp>(g: &Tensor, a: &Tensor, b: &Tensor, wrt: Operand) -> Tensor {
    let shape = g.shape();
    let la = a.layout().broadcast_to(shape).expect("broadcastable");
    let lb = b.layout().broadcast_to(shape).expect("broadcastable");
    let out = g.storage_arc().binary_grad::<O>(g.layout(), (&a.storage_arc(), &la), (&b.storage_arc(), &lb), wrt);
    Tensor::from_storage(out, shape)
}

/// A comparison producing a `Bool` tensor (no gradient).
#[track_caller]
fn compare(op: &'static str, a: &Tensor, b: &Tensor, f: fn(std::cmp::Ordering) -> bool) -> Tensor {
    let _op = op_entry!(
        op,
        [a, b],
        attrs = Vec::new,
        again = |c: &[Option<&Tensor>]| { compare(op, c[0].expect("present"), c[1].expect("present"), f) }
    );
    if a.dtype() != b.dtype() && a.device() == b.device() {
        // Compared in PyTorch's result type (`ids == 2.5`: as floats).
        let to = super::promotion::result_type(a, b);
        return compare(op, &a.to_dtype(to), &b.to_dtype(to), f);
    }
    check_same(op, &[a, b]);
    let (la, lb, lo) = broadcast_pair(op, a, b);
    Tensor::from_storage(a.storage_arc().compare(&la, &b.storage_arc(), &lb, f), lo.shape())
}

impl Tensor {
    /// Elementwise sum with broadcasting (also `&a + &b`).
    #[track_caller]
    pub fn add(&self, other: &Tensor) -> Tensor {
        binary::<AddOp>(self, other)
    }

    /// Elementwise difference with broadcasting (also `&a - &b`).
    #[track_caller]
    pub fn sub(&self, other: &Tensor) -> Tensor {
        binary::<SubOp>(self, other)
    }

    /// Elementwise product with broadcasting (also `&a * &b`).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3, 1]);
    /// let b = Tensor::from_vec(vec![10.0, 20.0], &[2]);
    /// assert_eq!((&a * &b).shape(), &[3, 2]);
    /// assert_eq!((&a * &b).to_vec(), vec![10.0, 20.0, 20.0, 40.0, 30.0, 60.0]);
    /// ```
    #[track_caller]
    pub fn mul(&self, other: &Tensor) -> Tensor {
        binary::<MulOp>(self, other)
    }

    /// Elementwise quotient with broadcasting (also `&a / &b`).
    #[track_caller]
    pub fn div(&self, other: &Tensor) -> Tensor {
        binary::<DivOp>(self, other)
    }

    /// Elementwise power `self ^ exponent` with broadcasting.
    #[track_caller]
    pub fn pow(&self, exponent: &Tensor) -> Tensor {
        binary::<PowOp>(self, exponent)
    }

    /// Elementwise maximum (NaN propagates; ties split the gradient, as PyTorch).
    #[track_caller]
    pub fn maximum(&self, other: &Tensor) -> Tensor {
        binary::<MaxOp>(self, other)
    }

    /// Elementwise minimum (NaN propagates; ties split the gradient, as PyTorch).
    #[track_caller]
    pub fn minimum(&self, other: &Tensor) -> Tensor {
        binary::<MinOp>(self, other)
    }

    /// `self == other` elementwise, as a `Bool` tensor.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let a = Tensor::from_vec_i64(vec![1, 2, 3], &[3]);
    /// let b = Tensor::from_vec_i64(vec![1, 0, 3], &[3]);
    /// assert_eq!(a.eq(&b).to_vec_bool(), vec![true, false, true]);
    /// ```
    #[track_caller]
    pub fn eq(&self, other: &Tensor) -> Tensor {
        compare(crate::names::EQ, self, other, |o| o.is_eq())
    }

    /// `self != other` elementwise (NaN compares unequal to everything).
    #[track_caller]
    pub fn ne(&self, other: &Tensor) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::NE, &[self, other], &[], Vec::new);
        // Through `logical_not`, which handles meta tensors (reading `eq`'s values here
        // would panic on the meta device).
        self.eq(other).logical_not()
    }

    /// `self < other` elementwise.
    #[track_caller]
    pub fn lt(&self, other: &Tensor) -> Tensor {
        compare(crate::names::LT, self, other, |o| o.is_lt())
    }

    /// `self <= other` elementwise.
    #[track_caller]
    pub fn le(&self, other: &Tensor) -> Tensor {
        compare(crate::names::LE, self, other, |o| o.is_le())
    }

    /// `self > other` elementwise.
    #[track_caller]
    pub fn gt(&self, other: &Tensor) -> Tensor {
        compare(crate::names::GT, self, other, |o| o.is_gt())
    }

    /// `self >= other` elementwise.
    #[track_caller]
    pub fn ge(&self, other: &Tensor) -> Tensor {
        compare(crate::names::GE, self, other, |o| o.is_ge())
    }

    /// A 0-d tensor holding `value` with this tensor's dtype and device.
    pub(crate) fn scalar_like(&self, value: f64) -> Tensor {
        Tensor::full_on(&[], value, self.dtype(), self.device())
    }

    /// Picks `a` where `cond` is true and `b` elsewhere, all three broadcast together:
    /// PyTorch's `torch.where(condition, input, other)` (and `input.where(condition, other)`),
    /// under another name because `where` is a Rust keyword. `cond` is a `Bool` tensor;
    /// `a` and `b` share a dtype (any). Differentiable in `a` and `b`: the gradient goes to
    /// the side that was picked, summed back over broadcast dims.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let c = Tensor::from_vec_bool(vec![true, false], &[2]);
    /// let y = Tensor::where_cond(&c, &Tensor::ones(&[2]), &Tensor::zeros(&[2]));
    /// assert_eq!(y.to_vec(), vec![1.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn where_cond(cond: &Tensor, a: &Tensor, b: &Tensor) -> Tensor {
        if a.dtype() != b.dtype() && a.device() == b.device() {
            // The values in PyTorch's result type (`where(mask, x, 0-dim f64)` stays x's).
            let to = super::promotion::result_type(a, b);
            return Tensor::where_cond(cond, &a.to_dtype(to), &b.to_dtype(to));
        }
        let _op = crate::autograd::entry::enter_uncast(crate::names::WHERE, &[cond, a, b], &[], Vec::new);
        const OP: &str = crate::names::WHERE;
        if cond.dtype() != DType::Bool {
            panic!("{OP}: condition must be a bool tensor, got {} (shape {:?})", cond.dtype(), cond.shape());
        }
        let (device, _) = check_same(OP, &[a, b]);
        if cond.device() != device {
            panic!("{OP}: condition on {} but values on {device}", cond.device());
        }
        let Some(s1) = broadcast_shapes(a.shape(), b.shape()) else {
            panic!("{OP}: shapes {:?} and {:?} cannot be broadcast together", a.shape(), b.shape());
        };
        let Some(shape) = broadcast_shapes(&s1, cond.shape()) else {
            panic!("{OP}: condition of shape {:?} cannot be broadcast to {:?}", cond.shape(), s1.as_slice());
        };
        let lo = Layout::contiguous(&shape);
        let lc = cond.layout().broadcast_to(&shape).expect("broadcastable");
        let la = a.layout().broadcast_to(&shape).expect("broadcastable");
        let lb = b.layout().broadcast_to(&shape).expect("broadcastable");
        let storage = cond.storage_arc().select(&lc, (&a.storage_arc(), &la), (&b.storage_arc(), &lb));
        op_result(OP, Arc::new(storage), lo, &[a, b], || {
            let cond = cond.saved_for_backward();
            let (sa, sb): (crate::shape::Dims, crate::shape::Dims) = (a.shape().into(), b.shape().into());
            move |g: &Tensor, needs: &[bool]| -> Grads {
                let zero = g.scalar_like(0.0);
                smallvec![
                    needs[0].then(|| Tensor::where_cond(&cond, g, &zero).sum_to_shape(&sa)),
                    needs[1].then(|| Tensor::where_cond(&cond, &zero, g).sum_to_shape(&sb)),
                ]
            }
        })
    }

    /// `value` where `mask` is true, `self` elsewhere: PyTorch's `masked_fill(mask, value)`.
    /// `mask` is a `Bool` tensor broadcastable with `self` (the result has the broadcast
    /// shape, as PyTorch's out-of-place form); `value` is converted to `self`'s dtype.
    /// Differentiable in `self`, with a zero gradient where filled.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let scores = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    /// let future = Tensor::from_vec_bool(vec![false, true, false, false], &[2, 2]);
    /// let masked = scores.masked_fill(&future, f64::NEG_INFINITY);
    /// assert_eq!(masked.to_vec(), vec![1.0, f32::NEG_INFINITY, 3.0, 4.0]);
    /// ```
    ///
    /// # Panics
    /// When `mask` is not a `Bool` tensor or does not broadcast with `self`, or `self`'s
    /// dtype cannot hold `value` (`-1e9` in f16: [`Error::FillValue`](crate::Error::FillValue)).
    #[track_caller]
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Tensor {
        if mask.dtype() != DType::Bool {
            panic!(
                "masked_fill: mask must be a bool tensor, got {} (shape {:?}); build it with a comparison such as `eq`",
                mask.dtype(),
                mask.shape()
            );
        }
        if broadcast_shapes(self.shape(), mask.shape()).is_none() {
            panic!(
                "masked_fill: mask of shape {:?} cannot be broadcast with the input's shape {:?}",
                mask.shape(),
                self.shape()
            );
        }
        let fill = Tensor::try_full_on("masked_fill", &[], value, self.dtype(), self.device())
            .unwrap_or_else(|e| panic!("{e}"));
        Tensor::where_cond(mask, &fill, self)
    }

    /// Elementwise logical not, as a `Bool` tensor: of a `Bool` tensor its negation, of a
    /// number tensor `x == 0` (as PyTorch: every nonzero value, NaN included, is true).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![0.0, -2.0, f32::NAN], &[3]);
    /// assert_eq!(x.logical_not().to_vec_bool(), [true, false, false]);
    /// ```
    #[track_caller]
    pub fn logical_not(&self) -> Tensor {
        if self.dtype() != DType::Bool {
            return self.eq_scalar(0);
        }
        let _op = crate::autograd::entry::enter_uncast(crate::names::LOGICAL_NOT, &[self], &[], Vec::new);
        Tensor::from_storage(self.storage_arc().logical_not(self.layout()), self.shape())
    }
}

// ---- operator overloads --------------------------------------------------------------

macro_rules! impl_binary_operator {
    ($trait:ident, $method:ident, $fn:ident, |$t:ident, $s:ident| $scalar:expr, |$s2:ident, $t2:ident| $rscalar:expr) => {
        impl $trait<&Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                Tensor::$fn(self, rhs)
            }
        }
        impl $trait<Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                Tensor::$fn(self, &rhs)
            }
        }
        impl $trait<&Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                Tensor::$fn(&self, rhs)
            }
        }
        impl $trait<Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                Tensor::$fn(&self, &rhs)
            }
        }
        impl $trait<f64> for &Tensor {
            type Output = Tensor;
            fn $method(self, $s: f64) -> Tensor {
                let t = float_for_scalar(self);
                let $t: &Tensor = &t;
                $scalar
            }
        }
        impl $trait<f64> for Tensor {
            type Output = Tensor;
            fn $method(self, $s: f64) -> Tensor {
                $trait::$method(&self, $s)
            }
        }
        impl $trait<&Tensor> for f64 {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                let t = float_for_scalar(rhs);
                let ($s2, $t2): (f64, &Tensor) = (self, &t);
                $rscalar
            }
        }
        impl $trait<Tensor> for f64 {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                $trait::$method(self, &rhs)
            }
        }
        /// An integer scalar: the tensor's own dtype for a floating tensor (a wrapped
        /// number), integer arithmetic on an `i64` or bool tensor (PyTorch's `ids + 1`).
        impl $trait<i64> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, s: i64) -> Tensor {
                if self.dtype().is_float() {
                    $trait::$method(self, s as f64)
                } else {
                    Tensor::$fn(self, &int_scalar(s, self))
                }
            }
        }
        impl $trait<i64> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, s: i64) -> Tensor {
                $trait::$method(&self, s)
            }
        }
        impl $trait<&Tensor> for i64 {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                if rhs.dtype().is_float() {
                    $trait::$method(self as f64, rhs)
                } else {
                    Tensor::$fn(&int_scalar(self, rhs), rhs)
                }
            }
        }
        impl $trait<Tensor> for i64 {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                $trait::$method(self, &rhs)
            }
        }
    };
}

/// The tensor a Rust `f64` scalar combines with: itself, or for an integer or bool
/// tensor its `f32` copy (a Python float with an integer tensor computes in the default
/// float dtype: `ids * 0.5` is f32).
fn float_for_scalar(t: &Tensor) -> std::borrow::Cow<'_, Tensor> {
    if t.dtype().is_float() {
        std::borrow::Cow::Borrowed(t)
    } else {
        std::borrow::Cow::Owned(t.to_dtype(DType::F32))
    }
}

/// `s` as a 0-dim `i64` tensor on `like`'s device.
fn int_scalar(s: i64, like: &Tensor) -> Tensor {
    Tensor::from_vec_i64(vec![s], &[]).to_device(like.device())
}

impl_binary_operator!(Add, add, add, |t, s| t.affine(1.0, s), |s, t| t.affine(1.0, s));
impl_binary_operator!(Sub, sub, sub, |t, s| t.affine(1.0, -s), |s, t| t.affine(-1.0, s));
impl_binary_operator!(Mul, mul, mul, |t, s| t.affine(s, 0.0), |s, t| t.affine(s, 0.0));
impl_binary_operator!(Div, div, div, |t, s| t.div_scalar(s), |s, t| t.scalar_div(s));

impl Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        Tensor::neg(self)
    }
}

impl Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        Tensor::neg(&self)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64};
    use crate::{no_grad, DType, Device, Tensor};

    type BinFn = fn(&Tensor, &Tensor) -> Tensor;

    const A: [f64; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // [2, 3]
    const W: [f64; 6] = [1.0, -1.0, 2.0, 0.5, 3.0, -2.0]; // [2, 3] weights of the loss

    /// Forward `op(a [2, 3], b [3])`, backward of `(op(a, b) * w).sum()` (the gradient of
    /// `b` sums over the broadcast rows), and finite differences on three broadcast
    /// patterns: `[2, 3] x [3]`, `[3, 1] x [1, 4]` and `[2, 2] x 0-d`.
    macro_rules! binary_suite {
        ($name:ident: $op:expr, b = $b:expr, y = $y:expr, ga = $ga:expr, gb = $gb:expr) => {
            mod $name {
                use super::*;
                const OP: BinFn = $op;
                #[test]
                fn forward() {
                    let a = Tensor::from_vec(A.iter().map(|&v| v as f32).collect(), &[2, 3]);
                    let b = Tensor::from_vec($b.iter().map(|&v| v as f32).collect(), &[3]);
                    let y = OP(&a, &b);
                    assert_eq!(y.shape(), &[2, 3]);
                    let y32: Vec<f32> = $y.iter().map(|&v: &f64| v as f32).collect();
                    crate::testing::assert_close(&y.to_vec(), &y32, 1e-6, 1e-6);
                    assert_close64(&OP(&t64(&A, &[2, 3]), &t64(&$b, &[3])).to_vec_f64(), &$y, 1e-12);
                }
                #[test]
                fn backward_with_broadcast_gradient() {
                    let (a, b) = (leaf(&A, &[2, 3]), leaf(&$b, &[3]));
                    (OP(&a, &b) * t64(&W, &[2, 3])).sum().backward();
                    assert_close64(&grad(&a), &$ga, 1e-12);
                    assert_eq!(b.grad().unwrap().shape(), &[3]);
                    assert_close64(&grad(&b), &$gb, 1e-12);
                }
                #[test]
                fn gradcheck_f64() {
                    let f = |t: &[Tensor]| OP(&t[0], &t[1]);
                    let a = t64(&[0.3, 1.2, 2.0, 0.7, 1.1, 0.4], &[2, 3]);
                    gradcheck(f, &[a.clone(), t64(&[0.5, -0.9, 1.5], &[3])]).unwrap();
                    let a3 = t64(&[0.3, 0.8, 1.9], &[3, 1]);
                    gradcheck(f, &[a3.clone(), t64(&[0.45, 1.25, -0.6, 2.2], &[1, 4])]).unwrap();
                    gradcheck(f, &[a.narrow(1, 0, 2).contiguous(), t64(&[0.65], &[])]).unwrap();
                    gradcheck(f, &[t64(&[0.65], &[]), a3]).unwrap();
                }
            }
        };
    }

    binary_suite!(add: |a, b| a + b, b = [0.5, -1.0, 2.0],
        y = [1.5, 1.0, 5.0, 4.5, 4.0, 8.0], ga = W, gb = [1.5, 2.0, 0.0]);
    binary_suite!(sub: |a, b| a - b, b = [0.5, -1.0, 2.0],
        y = [0.5, 3.0, 1.0, 3.5, 6.0, 4.0], ga = W, gb = [-1.5, -2.0, 0.0]);
    binary_suite!(mul: |a, b| a * b, b = [0.5, -1.0, 2.0],
        y = [0.5, -2.0, 6.0, 2.0, -5.0, 12.0], ga = [0.5, 1.0, 4.0, 0.25, -3.0, -4.0], gb = [3.0, 13.0, -6.0]);
    binary_suite!(div: |a, b| a / b, b = [0.5, -1.0, 2.0],
        y = [2.0, -2.0, 1.5, 8.0, -5.0, 3.0], ga = [2.0, 1.0, 1.0, 1.0, -3.0, -1.0], gb = [-12.0, -13.0, 1.5]);
    binary_suite!(pow: |a, b| a.pow(b), b = [0.5, -1.0, 2.0],
        y = [1.0, 0.5, 9.0, 2.0, 0.2, 36.0],
        ga = [0.5, 0.25, 12.0, 0.125, -0.12, -24.0],
        gb = [1.3862943611198906, 0.6190891571804875, -109.23166058839398]);
    binary_suite!(maximum: |a, b| a.maximum(b), b = [2.5, -1.0, 5.5],
        y = [2.5, 2.0, 5.5, 4.0, 5.0, 6.0], ga = [0.0, -1.0, 0.0, 0.5, 3.0, -2.0], gb = [1.0, 0.0, 2.0]);
    binary_suite!(minimum: |a, b| a.minimum(b), b = [2.5, -1.0, 5.5],
        y = [1.0, -1.0, 3.0, 2.5, -1.0, 5.5], ga = [1.0, 0.0, 2.0, 0.0, 0.0, 0.0], gb = [0.5, 2.0, -2.0]);
    binary_suite!(add_method: |a, b| a.add(b), b = [0.5, -1.0, 2.0],
        y = [1.5, 1.0, 5.0, 4.5, 4.0, 8.0], ga = W, gb = [1.5, 2.0, 0.0]);
    binary_suite!(sub_method: |a, b| a.sub(b), b = [0.5, -1.0, 2.0],
        y = [0.5, 3.0, 1.0, 3.5, 6.0, 4.0], ga = W, gb = [-1.5, -2.0, 0.0]);
    binary_suite!(mul_method: |a, b| a.mul(b), b = [0.5, -1.0, 2.0],
        y = [0.5, -2.0, 6.0, 2.0, -5.0, 12.0], ga = [0.5, 1.0, 4.0, 0.25, -3.0, -4.0], gb = [3.0, 13.0, -6.0]);
    binary_suite!(div_method: |a, b| a.div(b), b = [0.5, -1.0, 2.0],
        y = [2.0, -2.0, 1.5, 8.0, -5.0, 3.0], ga = [2.0, 1.0, 1.0, 1.0, -3.0, -1.0], gb = [-12.0, -13.0, 1.5]);

    #[test]
    fn every_operator_form_computes_the_same() {
        let a = Tensor::from_vec(vec![1.0, 2.0], &[2]);
        let b = Tensor::from_vec(vec![4.0, 8.0], &[2]);
        for (y, e) in [
            (&a + &b, [5.0, 10.0]),
            (a.clone() + &b, [5.0, 10.0]),
            (&a + b.clone(), [5.0, 10.0]),
            (a.clone() + b.clone(), [5.0, 10.0]),
            (&a - &b, [-3.0, -6.0]),
            (a.clone() - b.clone(), [-3.0, -6.0]),
            (&a * &b, [4.0, 16.0]),
            (a.clone() * b.clone(), [4.0, 16.0]),
            (&a / &b, [0.25, 0.25]),
            (a.clone() / b.clone(), [0.25, 0.25]),
            (-&a, [-1.0, -2.0]),
            (-a.clone(), [-1.0, -2.0]),
        ] {
            assert_eq!(y.to_vec(), e.to_vec());
        }
    }

    #[test]
    fn scalar_operators_on_both_sides_forward() {
        let x = Tensor::from_vec(vec![1.0, -2.0, 4.0], &[3]);
        let cases: [(Tensor, [f32; 3]); 12] = [
            (&x + 1.5, [2.5, -0.5, 5.5]),
            (x.clone() + 1.5, [2.5, -0.5, 5.5]),
            (1.5 + &x, [2.5, -0.5, 5.5]),
            (1.5 + x.clone(), [2.5, -0.5, 5.5]),
            (&x - 1.5, [-0.5, -3.5, 2.5]),
            (1.5 - &x, [0.5, 3.5, -2.5]),
            (1.5 - x.clone(), [0.5, 3.5, -2.5]),
            (&x * 3.0, [3.0, -6.0, 12.0]),
            (3.0 * &x, [3.0, -6.0, 12.0]),
            (&x / 4.0, [0.25, -0.5, 1.0]),
            (x.clone() / 4.0, [0.25, -0.5, 1.0]),
            (4.0 / &x, [4.0, -2.0, 1.0]),
        ];
        for (i, (y, e)) in cases.into_iter().enumerate() {
            assert_eq!(y.to_vec(), e.to_vec(), "case {i}");
            assert_eq!(y.dtype(), DType::F32);
        }
        assert_eq!((4.0 / x.clone()).to_vec(), vec![4.0, -2.0, 1.0]);
        assert_eq!((x.clone() - 1.5).to_vec(), vec![-0.5, -3.5, 2.5]);
        assert_eq!((x.clone() * 3.0).to_vec(), vec![3.0, -6.0, 12.0]);
        assert_eq!((3.0 * x).to_vec(), vec![3.0, -6.0, 12.0]);
    }

    #[test]
    fn scalar_operators_backward() {
        // d/dx of each form, through `.exp().mean()` would hide the constant; use weights.
        let xs = [1.0, -2.0, 4.0];
        let w = t64(&[1.0, 2.0, -1.0], &[3]);
        type F = fn(&Tensor) -> Tensor;
        let cases: [(F, [f64; 3]); 8] = [
            (|x| x + 1.5, [1.0, 2.0, -1.0]),
            (|x| 1.5 + x, [1.0, 2.0, -1.0]),
            (|x| x - 1.5, [1.0, 2.0, -1.0]),
            (|x| 1.5 - x, [-1.0, -2.0, 1.0]),
            (|x| x * 3.0, [3.0, 6.0, -3.0]),
            (|x| 3.0 * x, [3.0, 6.0, -3.0]),
            (|x| x / 4.0, [0.25, 0.5, -0.25]),
            // d(4/x) = -4/x^2
            (|x| 4.0 / x, [-4.0, -2.0, 0.25]),
        ];
        for (i, (f, e)) in cases.into_iter().enumerate() {
            let x = leaf(&xs, &[3]);
            (f(&x) * &w).sum().backward();
            assert_close64(&grad(&x), &e, 1e-12);
            gradcheck(|t| f(&t[0]), &[t64(&xs, &[3])]).unwrap_or_else(|e| panic!("case {i}: {e}"));
        }
    }

    #[test]
    fn broadcast_scalar_against_tensor_both_ways() {
        let s = Tensor::from_vec_f64(vec![2.0], &[]).requires_grad_(true);
        let x = leaf(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
        let y = &s * &x + &x / &s;
        assert_eq!(y.shape(), &[2, 2]);
        assert_eq!(y.to_vec_f64(), vec![2.5, 5.0, 7.5, 10.0]);
        y.sum().backward();
        // d/ds = sum(x) - sum(x) / s^2 = 10 - 2.5; d/dx = s + 1/s
        let gs = s.grad().unwrap();
        assert_eq!(gs.shape(), &[] as &[usize]);
        assert_eq!(gs.item(), 7.5);
        assert_eq!(grad(&x), vec![2.5; 4]);
    }

    #[test]
    fn broadcast_column_against_row() {
        let c = leaf(&[1.0, 2.0, 3.0], &[3, 1]);
        let r = leaf(&[10.0, 20.0, 30.0, 40.0], &[1, 4]);
        let y = &c * &r;
        assert_eq!(y.shape(), &[3, 4]);
        assert_eq!(y.to_vec_f64(), vec![10., 20., 30., 40., 20., 40., 60., 80., 30., 60., 90., 120.]);
        y.sum().backward();
        assert_eq!(c.grad().unwrap().shape(), &[3, 1]);
        assert_eq!(grad(&c), vec![100.0; 3]);
        assert_eq!(r.grad().unwrap().shape(), &[1, 4]);
        assert_eq!(grad(&r), vec![6.0; 4]);
    }

    #[test]
    fn broadcast_with_zero_size_dims() {
        let a = leaf(&[], &[0, 1]);
        let b = leaf(&[1.0, 2.0, 3.0, 4.0, 5.0], &[1, 5]);
        let y = &a + &b;
        assert_eq!(y.shape(), &[0, 5]);
        assert!(y.to_vec().is_empty());
        y.sum().backward();
        assert_eq!(a.grad().unwrap().shape(), &[0, 1]);
        // b was broadcast along a dimension of size 0: its gradient is all zeros.
        assert_eq!(grad(&b), vec![0.0; 5]);
        let e = Tensor::zeros(&[2, 0]) * 3.0;
        assert_eq!(e.shape(), &[2, 0]);
    }

    #[test]
    fn rank0_with_rank0_stays_rank0() {
        let a = Tensor::from_vec_f64(vec![3.0], &[]).requires_grad_(true);
        let b = Tensor::from_vec_f64(vec![-2.0], &[]).requires_grad_(true);
        let y = a.pow(&b.abs()) - &b;
        assert_eq!(y.shape(), &[] as &[usize]);
        assert_eq!(y.item(), 11.0);
        y.backward();
        assert_eq!(a.grad().unwrap().item(), 6.0);
        // d/db (a^|b| - b) = a^|b| ln a * sign(b) - 1
        assert!((b.grad().unwrap().item() - (-9.0 * 3f64.ln() - 1.0)).abs() < 1e-12);
    }

    #[test]
    fn leading_broadcast_dims_sum_back() {
        let a = leaf(&[1.0, 2.0], &[2]);
        let b = leaf(&[1.0; 12], &[2, 3, 2]);
        (&a * &b).sum().backward();
        assert_eq!(grad(&a), vec![6.0, 6.0]);
        assert_eq!(grad(&b), [1.0, 2.0].repeat(6));
    }

    #[test]
    fn maximum_and_minimum_split_ties_and_propagate_nan() {
        let a = leaf(&[1.0, 2.0, 3.0], &[3]);
        let b = leaf(&[1.0, 0.0, 5.0], &[3]);
        (a.maximum(&b) + a.minimum(&b) * 10.0).sum().backward();
        // Tie at 0: each side gets half of each incoming gradient (PyTorch).
        assert_eq!(grad(&a), vec![5.5, 1.0, 10.0]);
        assert_eq!(grad(&b), vec![5.5, 10.0, 1.0]);
        let n = Tensor::from_vec(vec![f32::NAN, 1.0], &[2]);
        let z = Tensor::from_vec(vec![0.0, f32::NAN], &[2]);
        assert!(n.maximum(&z).to_vec().iter().all(|v| v.is_nan()));
        assert!(z.minimum(&n).to_vec().iter().all(|v| v.is_nan()));
    }

    /// Where either operand is NaN, both get the whole gradient (PyTorch 2.15:
    /// `torch.maximum([1, 2, nan, 3], [1, nan, 1, 5])` gives `[0.5, 1, 1, 0]` and
    /// `[0.5, 1, 1, 1]`).
    #[test]
    fn maximum_and_minimum_pass_the_gradient_to_both_sides_at_nan() {
        let nan = f64::NAN;
        for (f, ga, gb) in [
            (Tensor::maximum as fn(&Tensor, &Tensor) -> Tensor, [0.5, 1.0, 1.0, 0.0], [0.5, 1.0, 1.0, 1.0]),
            (Tensor::minimum, [0.5, 1.0, 1.0, 1.0], [0.5, 1.0, 1.0, 0.0]),
        ] {
            let a = leaf(&[1.0, 2.0, nan, 3.0], &[4]);
            let b = leaf(&[1.0, nan, 1.0, 5.0], &[4]);
            f(&a, &b).sum().backward();
            assert_eq!((grad(&a), grad(&b)), (ga.to_vec(), gb.to_vec()));
        }
    }

    #[test]
    fn pow_exponent_gradient_is_zero_at_zero_base() {
        let a = leaf(&[0.0, 2.0], &[2]);
        let b = leaf(&[2.0, 0.0], &[2]);
        let y = a.pow(&b);
        assert_eq!(y.to_vec_f64(), vec![0.0, 1.0]);
        y.sum().backward();
        assert_eq!(grad(&a), vec![0.0, 0.0]);
        assert_eq!(grad(&b), vec![0.0, 2f64.ln()]);
    }

    #[test]
    fn comparisons_broadcast_and_handle_nan() {
        let a = Tensor::from_vec(vec![1.0, 2.0, 3.0, f32::NAN], &[2, 2]);
        let b = Tensor::from_vec(vec![2.0, 2.0], &[2]);
        assert_eq!(a.eq(&b).to_vec_bool(), vec![false, true, false, false]);
        assert_eq!(a.ne(&b).to_vec_bool(), vec![true, false, true, true]);
        assert_eq!(a.lt(&b).to_vec_bool(), vec![true, false, false, false]);
        assert_eq!(a.le(&b).to_vec_bool(), vec![true, true, false, false]);
        assert_eq!(a.gt(&b).to_vec_bool(), vec![false, false, true, false]);
        assert_eq!(a.ge(&b).to_vec_bool(), vec![false, true, true, false]);
        assert_eq!(a.gt(&b).dtype(), DType::Bool);
        assert!(!a.requires_grad_(true).gt(&b).requires_grad());
        let i = Tensor::from_vec_i64(vec![1, 5, -3], &[3]);
        let j = Tensor::from_vec_i64(vec![1], &[]);
        assert_eq!(i.gt(&j).to_vec_bool(), vec![false, true, false]);
        assert_eq!(i.t().le(&j).logical_not().to_vec_bool(), vec![false, true, false]);
    }

    #[test]
    fn comparisons_on_meta_give_meta_bools() {
        // Regression: `ne` read the values of its `eq` result, panicking on meta.
        let a = Tensor::full_on(&[2, 3], 0.0, DType::F32, Device::Meta);
        let b = Tensor::full_on(&[3], 0.0, DType::F32, Device::Meta);
        for c in [a.eq(&b), a.ne(&b), a.lt(&b), a.le(&b), a.gt(&b), a.ge(&b), a.gt(&b).logical_not()] {
            assert_eq!((c.shape(), c.dtype(), c.device()), (&[2, 3][..], DType::Bool, Device::Meta));
        }
    }

    #[test]
    fn where_cond_forward_backward_and_gradcheck() {
        let c = Tensor::from_vec_bool(vec![true, false], &[2, 1]);
        let a = leaf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
        let b = Tensor::from_vec_f64(vec![-1.0], &[]).requires_grad_(true);
        let y = Tensor::where_cond(&c, &a, &b);
        assert_eq!(y.shape(), &[2, 3]);
        assert_eq!(y.to_vec_f64(), vec![1.0, 2.0, 3.0, -1.0, -1.0, -1.0]);
        (y * t64(&W, &[2, 3])).sum().backward();
        assert_eq!(grad(&a), vec![1.0, -1.0, 2.0, 0.0, 0.0, 0.0]);
        assert_eq!(b.grad().unwrap().shape(), &[] as &[usize]);
        assert_eq!(grad(&b), vec![1.5]);
        let cond = Tensor::from_vec_bool(vec![true, false, false, true, true, false], &[2, 3]);
        gradcheck(
            |t| Tensor::where_cond(&cond, &t[0], &t[1]).exp(),
            &[t64(&[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], &[2, 3]), t64(&[-0.5, 0.5, 1.5], &[3])],
        )
        .unwrap();
    }

    #[test]
    fn where_cond_works_on_integers_and_noncontiguous_condition() {
        let c = Tensor::from_vec_bool(vec![true, false, false, true], &[2, 2]).t();
        let a = Tensor::from_vec_i64(vec![1, 2, 3, 4], &[2, 2]);
        let b = Tensor::from_vec_i64(vec![0], &[1]);
        assert_eq!(Tensor::where_cond(&c, &a, &b).to_vec_i64(), vec![1, 0, 0, 4]);
        let c2 = Tensor::from_vec_bool(vec![true, false, true], &[3]).expand(&[2, 3]);
        let x = t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]).t();
        let z = Tensor::where_cond(&c2, &x, &x.neg());
        assert_eq!(z.to_vec_f64(), vec![1.0, -3.0, 5.0, 2.0, -4.0, 6.0]);
    }

    #[test]
    #[should_panic(expected = "where: condition must be a bool tensor, got f32 (shape [2])")]
    fn where_cond_needs_a_bool_condition() {
        Tensor::where_cond(&Tensor::ones(&[2]), &Tensor::ones(&[2]), &Tensor::ones(&[2]));
    }

    #[test]
    fn masked_fill_forward_backward_and_gradcheck() {
        let x = leaf(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
        let m = Tensor::from_vec_bool(vec![false, true], &[2]);
        let y = x.masked_fill(&m, -7.5);
        assert_eq!(y.to_vec_f64(), vec![1.0, -7.5, 3.0, -7.5]);
        y.exp().mean().backward();
        let e = [1f64.exp() / 4.0, 0.0, 3f64.exp() / 4.0, 0.0];
        assert_close64(&grad(&x), &e, 1e-12);
        gradcheck(|t| t[0].masked_fill(&m, f64::NEG_INFINITY).softmax(-1), &[t64(&[0.1, 0.2, 0.3, 0.4], &[2, 2])])
            .unwrap();
        let f = Tensor::from_vec(vec![1.0, 2.0], &[2]).masked_fill(&Tensor::from_vec_bool(vec![true], &[]), 0.0);
        assert_eq!(f.to_vec(), vec![0.0, 0.0]);
    }

    #[test]
    fn masked_fill_broadcasts_both_ways_and_keeps_integer_dtypes() {
        // A [2, 1] mask against a [3] input gives [2, 3] (PyTorch's out-of-place form).
        let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]);
        let m = Tensor::from_vec_bool(vec![true, false], &[2, 1]);
        let y = x.masked_fill(&m, 9.0);
        assert_eq!((y.shape(), y.to_vec()), (&[2, 3][..], vec![9.0, 9.0, 9.0, 1.0, 2.0, 3.0]));
        let i = Tensor::from_vec_i64(vec![5, 6], &[2]);
        let j = i.masked_fill(&Tensor::from_vec_bool(vec![false, true], &[2]), -1.0);
        assert_eq!((j.dtype(), j.to_vec_i64()), (DType::I64, vec![5, -1]));
    }

    #[test]
    #[should_panic(expected = "masked_fill: mask must be a bool tensor, got f32 (shape [2])")]
    fn masked_fill_needs_a_bool_mask() {
        Tensor::ones(&[2]).masked_fill(&Tensor::ones(&[2]), 0.0);
    }

    #[test]
    #[should_panic(expected = "masked_fill: mask of shape [3] cannot be broadcast with the input's shape [2, 2]")]
    fn masked_fill_mask_shape_mismatch_names_both_shapes() {
        Tensor::ones(&[2, 2]).masked_fill(&Tensor::from_vec_bool(vec![true; 3], &[3]), 0.0);
    }

    #[test]
    fn binary_ops_on_noncontiguous_inputs() {
        let ops: [BinFn; 8] = [
            |a, b| a + b,
            |a, b| a - b,
            |a, b| a * b,
            |a, b| a / b,
            |a, b| a.pow(b),
            |a, b| a.maximum(b),
            |a, b| a.minimum(b),
            |a, b| Tensor::where_cond(&a.gt(b), a, b),
        ];
        let a = t64(&[0.3, 1.2, 2.0, 0.7, 1.1, 0.4], &[2, 3]);
        let b = t64(&[0.5, -0.9, 1.5, 0.25, 0.8, -1.3], &[2, 3]);
        let bc = t64(&[0.5, -0.9, 1.5], &[3]);
        for (i, op) in ops.into_iter().enumerate() {
            check_noncontig(|t| op(&t[0], &t[1]), &[a.clone(), b.clone()]);
            check_noncontig(|t| op(&t[0], &t[1]), &[a.clone(), bc.clone()]);
            let at = t64(&[0.3, 0.7, 1.2, 1.1, 2.0, 0.4], &[3, 2]).t(); // == a, stored transposed
            let ex = bc.reshape(&[1, 3]).expand(&[2, 3]);
            assert_eq!(op(&at, &ex).to_vec_f64(), op(&a, &bc).to_vec_f64(), "op {i}");
            let big = t64(&[9.0, 0.3, 1.2, 2.0, 9.0, 0.7, 1.1, 0.4], &[2, 4]).narrow(1, 1, 3);
            assert_eq!(op(&big, &b.permute(&[0, 1])).to_vec_f64(), op(&a, &b).to_vec_f64(), "op {i}");
        }
    }

    #[test]
    fn large_inputs_take_the_parallel_path() {
        let n = super::super::PAR_THRESHOLD + 5;
        let a = Tensor::arange(0.0, n as f64, 1.0);
        let b = Tensor::full(&[n], 2.0);
        let y = (&a * &b).to_vec();
        assert!(y.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32));
    }

    #[test]
    fn binary_ops_on_meta_broadcast_shapes() {
        let a = Tensor::full_on(&[4, 1, 3], 0.0, DType::F64, Device::Meta).requires_grad_(true);
        let b = Tensor::full_on(&[2, 1], 0.0, DType::F64, Device::Meta);
        let y = (&a * &b + 1.0).pow(&b).maximum(&a);
        assert_eq!((y.shape(), y.dtype(), y.device()), (&[4, 2, 3][..], DType::F64, Device::Meta));
        y.sum().backward();
        assert_eq!((a.grad().unwrap().shape(), a.grad().unwrap().device()), (&[4, 1, 3][..], Device::Meta));
        let w = Tensor::where_cond(&a.gt(&b), &a, &b);
        assert_eq!((w.shape(), w.device()), (&[4, 2, 3][..], Device::Meta));
    }

    #[test]
    fn no_grad_results_of_binary_ops_do_not_require_grad() {
        let a = leaf(&[1.0], &[1]);
        let y = no_grad(|| &a + &a);
        assert!(!y.requires_grad() && y.is_leaf());
    }

    #[test]
    #[should_panic(expected = "add: shapes [2, 3] and [4] cannot be broadcast together")]
    fn broadcast_failure_names_the_op_and_both_shapes() {
        let _ = Tensor::zeros(&[2, 3]) + Tensor::zeros(&[4]);
    }

    #[test]
    fn dtype_mix_promotes_as_pytorch() {
        let y = Tensor::zeros(&[2]) * Tensor::from_vec_f64(vec![1.0, 2.0], &[2]);
        assert_eq!(y.dtype(), DType::F64);
        let ids = Tensor::from_vec_i64(vec![1, 2], &[2]);
        assert_eq!((&ids + &Tensor::full(&[], 0.5)).to_vec(), [1.5, 2.5]);
        let mask = Tensor::from_vec_bool(vec![true, false], &[2]);
        assert_eq!(ids.eq(&Tensor::full(&[], 2.0)).to_vec_of::<bool>(), [false, true]);
        assert_eq!(
            Tensor::where_cond(&mask, &Tensor::ones(&[2]), &Tensor::zeros(&[2]).to_dtype(DType::F64)).dtype(),
            DType::F64
        );
    }

    #[test]
    #[should_panic(
        expected = "pow: i64 (shape [2]) with bool (shape [2]) computes in i64 (PyTorch's type promotion), and nn's"
    )]
    fn integer_arithmetic_without_an_integer_form_is_refused_by_name() {
        let ids = Tensor::from_vec_i64(vec![1, 2], &[2]);
        let _ = ids.pow(&Tensor::from_vec_bool(vec![true, false], &[2]));
    }

    #[test]
    #[should_panic(expected = "sub: expected all tensors on one device, got cpu (shape [3]) and meta (shape [1, 3])")]
    fn device_mix_names_the_op_and_both_shapes() {
        let _ = Tensor::zeros(&[3]) - Tensor::full_on(&[1, 3], 0.0, DType::F32, Device::Meta);
    }

    #[test]
    #[should_panic(expected = "pow: expected a floating-point tensor (f32, f64, bf16 or f16), got i64")]
    fn arithmetic_on_integers_without_an_integer_form_names_the_op() {
        let i = Tensor::from_vec_i64(vec![1, 2], &[2]);
        let _ = i.pow(&i);
    }

    #[test]
    fn integer_arithmetic_has_pytorchs_results() {
        let ids = Tensor::from_vec_i64(vec![1, 2, i64::MAX], &[3]);
        assert_eq!((&ids + 1).to_vec_of::<i64>(), [2, 3, i64::MIN]); // wraps, as PyTorch
        assert_eq!((3 * &ids).to_vec_of::<i64>()[..2], [3, 6]);
        assert_eq!(
            (&ids - &Tensor::from_vec_bool(vec![true, false, true], &[3])).to_vec_of::<i64>(),
            [0, 2, i64::MAX - 1]
        );
        assert_eq!(ids.maximum(&Tensor::from_vec_i64(vec![5], &[1])).to_vec_of::<i64>(), [5, 5, i64::MAX]);
        // A float scalar with an integer tensor: the default float dtype.
        let half = &ids.narrow(0, 0, 2) * 0.5;
        assert_eq!((half.dtype(), half.to_vec()), (DType::F32, vec![0.5, 1.0]));
        // An integer scalar with a float tensor keeps the tensor's dtype.
        assert_eq!((Tensor::full(&[1], 1.5).to_dtype(DType::BF16) + 1).dtype(), DType::BF16);
        assert_eq!((&ids / 2).to_vec()[..2], [0.5, 1.0]);
    }

    #[test]
    fn integer_true_division_gives_the_default_float_dtype() {
        let i = Tensor::from_vec_i64(vec![1, 3], &[2]);
        let y = &i / &Tensor::from_vec_i64(vec![2, 2], &[2]);
        assert_eq!((y.dtype(), y.to_vec()), (DType::F32, vec![0.5, 1.5]));
    }
}
