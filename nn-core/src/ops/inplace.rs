//! In-place arithmetic: `add_`, `sub_`, `mul_` and the `+=`, `-=`, `*=` operators, exact
//! (checked integer arithmetic) on `i64` tensors.

use std::ops::{AddAssign, MulAssign, SubAssign};

use crate::autograd::no_grad;
use crate::dtype::DType;
use crate::tensor::Tensor;

/// The right-hand side of in-place arithmetic ([`Tensor::add_`], [`Tensor::sub_`],
/// [`Tensor::mul_`] and `+=`, `-=`, `*=`): a tensor, broadcast to the updated tensor's
/// shape, or a number. Built by `From` from `&Tensor`, `&Parameter`, `f64` and `i64`, so
/// the methods take any of them, as PyTorch's `add_(other)` takes a tensor or a number.
///
/// ```
/// use nn_core::{ops::Operand, Tensor};
/// let t = Tensor::ones(&[1]);
/// assert!(matches!(Operand::from(2), Operand::Int(2)));
/// assert!(matches!(Operand::from(0.5), Operand::Float(v) if v == 0.5));
/// assert!(matches!(Operand::from(&t), Operand::Broadcast(_)));
/// ```
#[derive(Clone, Copy, Debug)]
pub enum Operand<'a> {
    /// A tensor broadcast to the updated tensor's shape (one way: the update never
    /// changes the shape).
    Broadcast(&'a Tensor),
    /// A floating-point number; an `i64` tensor refuses it, as PyTorch does.
    Float(f64),
    /// An integer: exact on `i64` tensors, converted on floating-point ones.
    Int(i64),
}

impl<'a> From<&'a Tensor> for Operand<'a> {
    fn from(t: &'a Tensor) -> Self {
        Operand::Broadcast(t)
    }
}

impl From<f64> for Operand<'_> {
    fn from(v: f64) -> Self {
        Operand::Float(v)
    }
}

impl From<i64> for Operand<'_> {
    fn from(v: i64) -> Self {
        Operand::Int(v)
    }
}

/// The three in-place operations.
#[derive(Clone, Copy)]
enum Arith {
    Add,
    Sub,
    Mul,
}

impl Arith {
    fn name(self) -> &'static str {
        match self {
            Arith::Add => "add_",
            Arith::Sub => "sub_",
            Arith::Mul => "mul_",
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            Arith::Add => "+",
            Arith::Sub => "-",
            Arith::Mul => "*",
        }
    }

    fn checked(self, a: i64, b: i64) -> Option<i64> {
        match self {
            Arith::Add => a.checked_add(b),
            Arith::Sub => a.checked_sub(b),
            Arith::Mul => a.checked_mul(b),
        }
    }

    fn tensors(self, a: &Tensor, b: &Tensor) -> Tensor {
        match self {
            Arith::Add => a + b,
            Arith::Sub => a - b,
            Arith::Mul => a * b,
        }
    }

    fn scalar(self, a: &Tensor, v: f64) -> Tensor {
        match self {
            Arith::Add => a.affine(1.0, v),
            Arith::Sub => a.affine(1.0, -v),
            Arith::Mul => a.affine(v, 0.0),
        }
    }
}

impl Tensor {
    /// `self += other`, in place: `other` is a tensor broadcast to this shape, or a number.
    /// Not recorded by autograd (run it inside `no_grad` on a tensor that requires grad).
    ///
    /// On `i64` tensors the arithmetic is exact integer arithmetic: the operand must be an
    /// integer, or an `i64` or `bool` tensor (a float operand panics, as PyTorch's
    /// "result type Float can't be cast to the desired output type Long"), and an overflow
    /// panics instead of wrapping. Floating-point tensors take any operand, converted to
    /// their dtype; `f16`/`bf16` tensors compute in `f32` and round back.
    ///
    /// ```
    /// use nn_core::{DType, Tensor};
    /// let steps = Tensor::from_vec_i64(vec![41], &[]);
    /// steps.add_(1);
    /// assert_eq!((steps.dtype(), steps.to_vec_i64()), (DType::I64, vec![42]));
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    /// x.add_(&Tensor::from_vec(vec![10.0, 20.0], &[2])).add_(0.5);
    /// assert_eq!(x.to_vec(), vec![11.5, 22.5, 13.5, 24.5]);
    /// ```
    ///
    /// # Panics
    /// When `other` does not broadcast to this shape, on the dtype and overflow cases
    /// above, on a `bool` tensor, and outside `no_grad` on a tensor that requires grad or
    /// an `other` that does (no gradient would reach it: PyTorch records the update,
    /// nn does not, so it refuses it).
    #[track_caller]
    pub fn add_<'a>(&self, other: impl Into<Operand<'a>>) -> &Tensor {
        self.arith_(Arith::Add, other.into())
    }

    /// `self -= other`, in place, with the operands and integer rules of
    /// [`add_`](Tensor::add_).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec_i64(vec![5, 7], &[2]);
    /// x.sub_(&Tensor::from_vec_i64(vec![1, 10], &[2]));
    /// assert_eq!(x.to_vec_i64(), vec![4, -3]);
    /// ```
    #[track_caller]
    pub fn sub_<'a>(&self, other: impl Into<Operand<'a>>) -> &Tensor {
        self.arith_(Arith::Sub, other.into())
    }

    /// `self *= other`, in place, with the operands and integer rules of
    /// [`add_`](Tensor::add_).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, -2.0], &[2]);
    /// x.mul_(0.5);
    /// assert_eq!(x.to_vec(), vec![0.5, -1.0]);
    /// let n = Tensor::from_vec_i64(vec![3], &[1]);
    /// n.mul_(&Tensor::from_vec_i64(vec![-4], &[]));
    /// assert_eq!(n.to_vec_i64(), vec![-12]);
    /// ```
    #[track_caller]
    pub fn mul_<'a>(&self, other: impl Into<Operand<'a>>) -> &Tensor {
        self.arith_(Arith::Mul, other.into())
    }

    #[track_caller]
    fn arith_(&self, op: Arith, rhs: Operand<'_>) -> &Tensor {
        let name = op.name();
        let sources: &[&Tensor] = match &rhs {
            Operand::Broadcast(t) => std::slice::from_ref(t),
            _ => &[],
        };
        crate::autograd::trace::on_access_from(crate::autograd::trace::OpKind::InPlace, name, self, sources);
        self.check_inplace(name, sources);
        if let Operand::Broadcast(t) = rhs {
            if t.device() != self.device() {
                panic!(
                    "{name}: expected both tensors on one device, got {} (shape {:?}) and {} (shape {:?})",
                    self.device(),
                    self.shape(),
                    t.device(),
                    t.shape()
                );
            }
            if t.layout().broadcast_to(self.shape()).is_none() {
                panic!(
                    "{name}: operand of shape {:?} cannot be broadcast to the updated tensor's shape {:?}",
                    t.shape(),
                    self.shape()
                );
            }
        }
        match self.dtype() {
            DType::Bool => {
                panic!("{name}: in-place arithmetic needs a numeric tensor, got bool (shape {:?})", self.shape())
            }
            DType::I64 => self.int_arith_(op, rhs),
            _ => self.float_arith_(op, rhs),
        }
    }

    #[track_caller]
    fn float_arith_(&self, op: Arith, rhs: Operand<'_>) -> &Tensor {
        let compute = if self.dtype().is_compute_float() { self.dtype() } else { DType::F32 };
        let result = no_grad(|| {
            let a = self.to_dtype(compute);
            match rhs {
                Operand::Broadcast(t) => op.tensors(&a, &t.to_dtype(compute)),
                Operand::Float(v) => op.scalar(&a, v),
                Operand::Int(v) => op.scalar(&a, v as f64),
            }
        });
        self.copy_(&result)
    }

    #[track_caller]
    fn int_arith_(&self, op: Arith, rhs: Operand<'_>) -> &Tensor {
        let name = op.name();
        let refused = match rhs {
            Operand::Float(_) => Some(DType::F64),
            Operand::Broadcast(t) if !matches!(t.dtype(), DType::I64 | DType::Bool) => Some(t.dtype()),
            _ => None,
        };
        if let Some(dtype) = refused {
            panic!(
                "{name}: result type {dtype} can't be cast to the desired output type i64 (tensor of shape {:?}); \
                 use an integer operand",
                self.shape()
            );
        }
        let rhs = match rhs {
            // Exact: through f64, values past 2^53 would be rounded (and i64::MAX refused).
            Operand::Int(v) => Tensor::from_vec_i64(vec![v], &[]).to_device(self.device()),
            Operand::Broadcast(t) => t.clone(),
            Operand::Float(_) => unreachable!("refused above"),
        };
        let rhs_layout = rhs.layout().broadcast_to(self.shape()).expect("checked in arith_");
        let rhs_storage = rhs.storage_arc();
        // The backend computes every result before writing any, so an overflow panics with
        // the tensor unchanged.
        let overflow = self.update_storage(|dst, layout| {
            dst.checked_int_update(layout, (&rhs_storage, &rhs_layout), &|a, b| op.checked(a, b))
        });
        if let Some((a, b)) = overflow {
            panic!("{name}: i64 overflow computing {a} {} {b} (tensor of shape {:?})", op.symbol(), self.shape());
        }
        self
    }
}

// ---- compound assignment operators ------------------------------------------------------

macro_rules! impl_assign_operator {
    ($trait:ident, $method:ident, $inplace:ident) => {
        /// In place through [`Tensor::add_`] and its siblings: every handle to this tensor
        /// (its clones) sees the new values, as every Python reference sees `t += 1`.
        impl $trait<&Tensor> for Tensor {
            #[track_caller]
            fn $method(&mut self, rhs: &Tensor) {
                self.$inplace(rhs);
            }
        }
        impl $trait<Tensor> for Tensor {
            #[track_caller]
            fn $method(&mut self, rhs: Tensor) {
                self.$inplace(&rhs);
            }
        }
        impl $trait<f64> for Tensor {
            #[track_caller]
            fn $method(&mut self, rhs: f64) {
                self.$inplace(rhs);
            }
        }
        impl $trait<i64> for Tensor {
            #[track_caller]
            fn $method(&mut self, rhs: i64) {
                self.$inplace(rhs);
            }
        }
    };
}

impl_assign_operator!(AddAssign, add_assign, add_);
impl_assign_operator!(SubAssign, sub_assign, sub_);
impl_assign_operator!(MulAssign, mul_assign, mul_);

#[cfg(test)]
mod tests {
    use crate::testing::support::t64;
    use crate::{no_grad, DType, Device, Parameter, Tensor};

    #[test]
    fn counter_plus_one_reads_42_and_stays_i64() {
        let mut n = Tensor::from_vec_i64(vec![41], &[]);
        let alias = n.clone();
        n += 1;
        assert_eq!((n.dtype(), n.shape(), n.to_vec_i64()), (DType::I64, &[] as &[usize], vec![42]));
        assert_eq!(alias.to_vec_i64(), vec![42], "every handle sees the update");
        n -= 50;
        assert_eq!(n.to_vec_i64(), vec![-8]);
        n *= -3;
        assert_eq!(n.to_vec_i64(), vec![24]);
        n += &Tensor::from_vec_i64(vec![1], &[1]).reshape(&[]);
        n -= Tensor::from_vec_i64(vec![5], &[]);
        assert_eq!(n.to_vec_i64(), vec![20]);
    }

    #[test]
    fn integer_updates_are_exact_beyond_two_to_the_53() {
        // 2^53 + 1 is not an f64: a float round trip would give 2^53 + 2 or 2^53.
        let big = (1i64 << 53) + 1;
        let x = Tensor::from_vec_i64(vec![big, -big], &[2]);
        x.add_(2);
        assert_eq!(x.to_vec_i64(), vec![big + 2, -big + 2]);
        x.sub_(&Tensor::from_vec_i64(vec![1, 3], &[2]));
        assert_eq!(x.to_vec_i64(), vec![big + 1, -big - 1]);
        x.mul_(1);
        assert_eq!(x.to_vec_i64(), vec![big + 1, -big - 1]);
        // copy_ between i64 tensors is exact too.
        let y = Tensor::from_vec_i64(vec![0, 0], &[2]);
        y.copy_(&x);
        assert_eq!(y.to_vec_i64(), vec![big + 1, -big - 1]);
    }

    #[test]
    fn integer_updates_broadcast_bool_and_strided_operands_into_a_strided_target() {
        let base = Tensor::from_vec_i64(vec![1, 2, 3, 4, 5, 6], &[2, 3]);
        let t = base.t(); // [3, 2], strided
        t.add_(&Tensor::from_vec_i64(vec![10, 20], &[2]));
        assert_eq!(t.to_vec_i64(), vec![11, 24, 12, 25, 13, 26]);
        assert_eq!(base.to_vec_i64(), vec![11, 12, 13, 24, 25, 26], "the view writes through into its base");
        t.add_(&Tensor::from_vec_bool(vec![true, false, true], &[3, 1]));
        assert_eq!(t.to_vec_i64(), vec![12, 25, 12, 25, 14, 27]);
        let col = Tensor::from_vec_i64(vec![2, 0, 0, 3, 0, 0], &[2, 3]).t().narrow(0, 0, 1); // [1, 2]
        t.mul_(&col);
        assert_eq!(t.to_vec_i64(), vec![24, 75, 24, 75, 28, 81]);
    }

    #[test]
    fn float_updates_take_tensors_and_numbers_of_any_dtype() {
        let x = t64(&[1.0, 2.0, 3.0], &[3]);
        x.add_(0.25).mul_(2).sub_(&Tensor::from_vec_i64(vec![1, 2, 3], &[3]));
        assert_eq!(x.to_vec_f64(), vec![1.5, 2.5, 3.5]);
        x.mul_(&Tensor::from_vec(vec![2.0], &[1]));
        assert_eq!((x.dtype(), x.to_vec_f64()), (DType::F64, vec![3.0, 5.0, 7.0]));
        let mut y = Tensor::from_vec(vec![1.0, 2.0], &[2]);
        y += 1.5;
        y *= 2.0;
        y -= &Tensor::ones(&[2]);
        assert_eq!(y.to_vec(), vec![4.0, 6.0]);
        let h = Tensor::from_vec(vec![1.0, 2.0], &[2]).to_dtype(DType::BF16);
        h.mul_(3.0);
        assert_eq!((h.dtype(), h.to_vec()), (DType::BF16, vec![3.0, 6.0]));
        let p = Parameter::new(Tensor::ones(&[2]));
        let w = Tensor::zeros(&[2]);
        no_grad(|| w.add_(&p));
        w.add_(&p.detach());
        assert_eq!(w.to_vec(), vec![2.0, 2.0]);
        no_grad(|| p.add_(&w));
        assert_eq!(p.to_vec(), vec![3.0, 3.0]);
    }

    #[test]
    fn meta_tensors_accept_updates_without_values() {
        let m = Tensor::full_on(&[2, 3], 0.0, DType::I64, Device::Meta);
        m.add_(1);
        let f = Tensor::full_on(&[2, 3], 0.0, DType::F32, Device::Meta);
        f.mul_(&Tensor::full_on(&[3], 0.0, DType::F32, Device::Meta));
        assert_eq!((m.shape(), f.device()), (&[2, 3][..], Device::Meta));
    }

    #[test]
    #[should_panic(expected = "add_: i64 overflow computing 9223372036854775807 + 1 (tensor of shape [2])")]
    fn integer_overflow_panics_instead_of_wrapping() {
        Tensor::from_vec_i64(vec![0, i64::MAX], &[2]).add_(1);
    }

    #[test]
    fn an_overflowing_update_leaves_the_tensor_unchanged() {
        let x = Tensor::from_vec_i64(vec![1, i64::MIN], &[2]);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| x.mul_(-1)));
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert_eq!(msg, "mul_: i64 overflow computing -9223372036854775808 * -1 (tensor of shape [2])");
        assert_eq!(x.to_vec_i64(), vec![1, i64::MIN]);
    }

    #[test]
    #[should_panic(
        expected = "sub_: result type f64 can't be cast to the desired output type i64 (tensor of shape []); use an integer operand"
    )]
    fn float_number_on_an_integer_tensor_panics() {
        Tensor::from_vec_i64(vec![1], &[]).sub_(1.0);
    }

    #[test]
    #[should_panic(
        expected = "mul_: result type f32 can't be cast to the desired output type i64 (tensor of shape [2])"
    )]
    fn float_tensor_on_an_integer_tensor_panics() {
        let mut x = Tensor::from_vec_i64(vec![1, 2], &[2]);
        x *= Tensor::ones(&[2]);
    }

    #[test]
    #[should_panic(expected = "add_: operand of shape [2, 3] cannot be broadcast to the updated tensor's shape [3]")]
    fn operand_must_broadcast_to_the_target_shape() {
        Tensor::zeros(&[3]).add_(&Tensor::zeros(&[2, 3]));
    }

    #[test]
    #[should_panic(expected = "add_: in-place arithmetic needs a numeric tensor, got bool (shape [1])")]
    fn bool_targets_panic() {
        Tensor::from_vec_bool(vec![true], &[1]).add_(1);
    }

    #[test]
    #[should_panic(expected = "sub_: in-place update of a tensor that requires grad")]
    fn updating_a_tensor_that_requires_grad_outside_no_grad_panics() {
        let mut w = Tensor::ones(&[2]).requires_grad_(true);
        w -= 0.1;
    }

    #[test]
    #[should_panic(expected = "add_: expected both tensors on one device, got cpu (shape [2]) and meta (shape [2])")]
    fn mixing_devices_panics() {
        Tensor::zeros(&[2]).add_(&Tensor::full_on(&[2], 0.0, DType::F32, Device::Meta));
    }
}
