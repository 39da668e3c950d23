//! Broadcasting binary ops (table-driven like the unary ones), comparisons, `where_`, and
//! the operator overloads on `Tensor` and `&Tensor`.

use std::ops::{Add, Div, Mul, Neg, Sub};
use std::sync::Arc;

use smallvec::smallvec;

use super::{check_same, cpu, map2, map3};
use crate::autograd::{op_result, Grads};
use crate::device::Device;
use crate::dtype::{DType, Element, FloatElement};
use crate::shape::{broadcast_shapes, Layout};
use crate::storage::{with_cpu, with_float, CpuStorage, Storage};
use crate::tensor::Tensor;

/// An elementwise function of two arguments with its partial derivatives.
pub(crate) trait BinaryOp: Copy + Send + Sync + 'static {
    const NAME: &'static str;
    fn f<T: FloatElement>(a: T, b: T) -> T;
    fn da<T: FloatElement>(a: T, b: T) -> T;
    fn db<T: FloatElement>(a: T, b: T) -> T;
    /// Constant partial derivatives, when they are constants (add, sub): the backward then
    /// skips the elementwise product.
    const CONST_GRADS: Option<(f64, f64)> = None;
}

macro_rules! binary_op {
    ($name:ident, $label:literal, $consts:expr, |$a:ident, $b:ident| $f:expr, $da:expr, $db:expr) => {
        #[derive(Clone, Copy)]
        pub(crate) struct $name;
        impl BinaryOp for $name {
            const NAME: &'static str = $label;
            const CONST_GRADS: Option<(f64, f64)> = $consts;
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

binary_op!(AddOp, "add", Some((1.0, 1.0)), |a, b| a + b, T::one(), T::one());
binary_op!(SubOp, "sub", Some((1.0, -1.0)), |a, b| a - b, T::one(), -T::one());
binary_op!(MulOp, "mul", None, |a, b| a * b, b, a);
binary_op!(DivOp, "div", None, |a, b| a / b, b.recip(), -a / (b * b));
binary_op!(PowOp, "pow", None, |a, b| a.powf(b), if b == T::zero() { T::zero() } else { b * a.powf(b - T::one()) }, {
    // d/db a^b = a^b ln a; PyTorch defines it as 0 where a == 0 and b >= 0.
    if a == T::zero() && b >= T::zero() {
        T::zero()
    } else {
        a.powf(b) * a.ln()
    }
});
binary_op!(
    MaxOp,
    "maximum",
    None,
    |a, b| if a.is_nan() || b.is_nan() {
        T::nan()
    } else if a >= b {
        a
    } else {
        b
    },
    if a > b {
        T::one()
    } else if a == b {
        T::from_f64(0.5)
    } else {
        T::zero()
    },
    if b > a {
        T::one()
    } else if a == b {
        T::from_f64(0.5)
    } else {
        T::zero()
    }
);
binary_op!(
    MinOp,
    "minimum",
    None,
    |a, b| if a.is_nan() || b.is_nan() {
        T::nan()
    } else if a <= b {
        a
    } else {
        b
    },
    if a < b {
        T::one()
    } else if a == b {
        T::from_f64(0.5)
    } else {
        T::zero()
    },
    if b < a {
        T::one()
    } else if a == b {
        T::from_f64(0.5)
    } else {
        T::zero()
    }
);

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
    let (device, dtype) = check_same(O::NAME, &[a, b]);
    super::check_float(O::NAME, a);
    let (la, lb, lo) = broadcast_pair(O::NAME, a, b);
    let storage = if device == Device::Meta {
        Storage::Meta { dtype, len: lo.numel() }
    } else {
        let (sa, sb) = (a.storage_arc(), b.storage_arc());
        Storage::Cpu(with_float!(cpu(&sa), O::NAME, T, va => {
            let vb = T::slice(cpu(&sb)).expect("same dtype");
            T::into_storage(map2(va, &la, vb, &lb, |x: T, y: T| O::f(x, y)))
        }))
    };
    op_result(O::NAME, Arc::new(storage), lo, &[a, b], || {
        let (a, b) = (a.detach(), b.detach());
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
                    None => binary_grad::<O>(g, &a, &b, which),
                };
                full.sum_to_shape(target)
            };
            smallvec![needs[0].then(|| grad_for(0)), needs[1].then(|| grad_for(1))]
        }
    })
}

/// `g * d op / d input` at the broadcast shape.
fn binary_grad<O: BinaryOp>(g: &Tensor, a: &Tensor, b: &Tensor, which: usize) -> Tensor {
    let shape = g.shape();
    if g.device() == Device::Meta {
        return Tensor::full_on(shape, 0.0, g.dtype(), Device::Meta);
    }
    let la = a.layout().broadcast_to(shape).expect("broadcastable");
    let lb = b.layout().broadcast_to(shape).expect("broadcastable");
    let (gs, sa, sb) = (g.storage_arc(), a.storage_arc(), b.storage_arc());
    let out = with_float!(cpu(&gs), O::NAME, T, gv => {
        let va = T::slice(cpu(&sa)).expect("same dtype");
        let vb = T::slice(cpu(&sb)).expect("same dtype");
        T::into_storage(if which == 0 {
            map3(gv, g.layout(), va, &la, vb, &lb, |g: T, x: T, y: T| g * O::da(x, y))
        } else {
            map3(gv, g.layout(), va, &la, vb, &lb, |g: T, x: T, y: T| g * O::db(x, y))
        })
    });
    Tensor::from_cpu(out, shape)
}

/// A comparison producing a `Bool` tensor (no gradient).
#[track_caller]
fn compare(op: &'static str, a: &Tensor, b: &Tensor, f: fn(std::cmp::Ordering) -> bool) -> Tensor {
    let (device, _) = check_same(op, &[a, b]);
    let (la, lb, lo) = broadcast_pair(op, a, b);
    if device == Device::Meta {
        return Tensor::full_on(lo.shape(), 0.0, DType::Bool, Device::Meta);
    }
    let (sa, sb) = (a.storage_arc(), b.storage_arc());
    let out = with_cpu!(cpu(&sa), T, va => {
        let vb = T::slice(cpu(&sb)).expect("same dtype");
        map2(va, &la, vb, &lb, |x: T, y: T| x.partial_cmp(&y).is_some_and(f))
    });
    Tensor::from_cpu(CpuStorage::Bool(out), lo.shape())
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
        compare("eq", self, other, |o| o.is_eq())
    }

    /// `self != other` elementwise (NaN compares unequal to everything).
    #[track_caller]
    pub fn ne(&self, other: &Tensor) -> Tensor {
        let e = self.eq(other);
        Tensor::from_cpu(CpuStorage::Bool(e.to_vec_bool().into_iter().map(|v| !v).collect()), e.shape())
    }

    /// `self < other` elementwise.
    #[track_caller]
    pub fn lt(&self, other: &Tensor) -> Tensor {
        compare("lt", self, other, |o| o.is_lt())
    }

    /// `self <= other` elementwise.
    #[track_caller]
    pub fn le(&self, other: &Tensor) -> Tensor {
        compare("le", self, other, |o| o.is_le())
    }

    /// `self > other` elementwise.
    #[track_caller]
    pub fn gt(&self, other: &Tensor) -> Tensor {
        compare("gt", self, other, |o| o.is_gt())
    }

    /// `self >= other` elementwise.
    #[track_caller]
    pub fn ge(&self, other: &Tensor) -> Tensor {
        compare("ge", self, other, |o| o.is_ge())
    }

    /// A 0-d tensor holding `value` with this tensor's dtype and device.
    pub(crate) fn scalar_like(&self, value: f64) -> Tensor {
        Tensor::full_on(&[], value, self.dtype(), self.device())
    }

    /// Picks `a` where `cond` is true and `b` elsewhere, all three broadcast together
    /// (`torch.where`). Differentiable in `a` and `b`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let c = Tensor::from_vec_bool(vec![true, false], &[2]);
    /// let y = Tensor::where_cond(&c, &Tensor::ones(&[2]), &Tensor::zeros(&[2]));
    /// assert_eq!(y.to_vec(), vec![1.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn where_cond(cond: &Tensor, a: &Tensor, b: &Tensor) -> Tensor {
        const OP: &str = "where";
        if cond.dtype() != DType::Bool {
            panic!("{OP}: condition must be a bool tensor, got {}", cond.dtype());
        }
        let (device, dtype) = check_same(OP, &[a, b]);
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
        let storage = if device == Device::Meta {
            Storage::Meta { dtype, len: lo.numel() }
        } else {
            let lc = cond.layout().broadcast_to(&shape).expect("broadcastable");
            let la = a.layout().broadcast_to(&shape).expect("broadcastable");
            let lb = b.layout().broadcast_to(&shape).expect("broadcastable");
            let (sc, sa, sb) = (cond.storage_arc(), a.storage_arc(), b.storage_arc());
            let cv = bool::slice(cpu(&sc)).expect("bool");
            Storage::Cpu(with_cpu!(cpu(&sa), T, va => {
                let vb = T::slice(cpu(&sb)).expect("same dtype");
                let mut out = Vec::with_capacity(lo.numel());
                crate::shape::for_each_offset(
                    &shape,
                    [lc.strides(), la.strides(), lb.strides()],
                    [lc.offset(), la.offset(), lb.offset()],
                    |[i, j, k]| out.push(if cv[i] { va[j] } else { vb[k] }),
                );
                T::into_storage(out)
            }))
        };
        op_result(OP, Arc::new(storage), lo, &[a, b], || {
            let cond = cond.detach();
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

    /// `value` where `mask` is true, `self` elsewhere (`masked_fill`).
    #[track_caller]
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Tensor {
        Tensor::where_cond(mask, &self.scalar_like(value), self)
    }

    /// Elementwise logical not of a `Bool` tensor.
    #[track_caller]
    pub fn logical_not(&self) -> Tensor {
        if self.dtype() != DType::Bool {
            panic!("logical_not: expected a bool tensor, got {}", self.dtype());
        }
        if self.device() == Device::Meta {
            return self.detach();
        }
        Tensor::from_cpu(CpuStorage::Bool(self.to_vec_bool().into_iter().map(|v| !v).collect()), self.shape())
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
                let $t = self;
                $scalar
            }
        }
        impl $trait<f64> for Tensor {
            type Output = Tensor;
            fn $method(self, $s: f64) -> Tensor {
                let $t = &self;
                $scalar
            }
        }
        impl $trait<&Tensor> for f64 {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                let ($s2, $t2) = (self, rhs);
                $rscalar
            }
        }
        impl $trait<Tensor> for f64 {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                let ($s2, $t2) = (self, &rhs);
                $rscalar
            }
        }
    };
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
