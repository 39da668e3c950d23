//! Random factories beside PyTorch's: `randint` and the `*_like` forms, drawing from the
//! global generator ([`crate::manual_seed`]) as [`Tensor::randn`] does.

use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

use super::construct::random_values;
use crate::device::Device;
use crate::dtype::DType;
use crate::tensor::Tensor;

impl Tensor {
    /// Integers drawn uniformly from `[low, high)`, as `i64` (PyTorch's
    /// `torch.randint(low, high, size)`), on the default device.
    ///
    /// ```
    /// use nn_core::{DType, Tensor};
    /// nn_core::manual_seed(0);
    /// let ix = Tensor::randint(0, 10, &[4, 8]);
    /// assert_eq!((ix.dtype(), ix.shape()), (DType::I64, &[4, 8][..]));
    /// assert!(ix.to_vec_i64().iter().all(|&i| (0..10).contains(&i)));
    /// ```
    ///
    /// # Panics
    /// When `low >= high` (PyTorch: "random_ expects 'from' to be less than 'to'"), or as
    /// [`zeros`](Tensor::zeros) for the shape.
    #[track_caller]
    pub fn randint(low: i64, high: i64, shape: &[usize]) -> Tensor {
        Tensor::randint_on(low, high, shape, DType::I64, crate::device::default_device())
    }

    /// [`randint`](Tensor::randint) with the shape, dtype and device of `t` (PyTorch's
    /// `torch.randint_like`): the integers stored in `t`'s dtype.
    ///
    /// ```
    /// use nn_core::{DType, Tensor};
    /// let x = Tensor::zeros(&[3]);
    /// let r = Tensor::randint_like(&x, 5, 6);
    /// assert_eq!((r.dtype(), r.to_vec()), (DType::F32, vec![5.0; 3]));
    /// ```
    ///
    /// # Panics
    /// As [`randint`](Tensor::randint), and when `t` is `Bool` (no range of integers fits it).
    #[track_caller]
    pub fn randint_like(t: &Tensor, low: i64, high: i64) -> Tensor {
        if t.dtype() == DType::Bool {
            panic!("randint_like: a bool tensor holds no range of integers; build an i64 one and compare it");
        }
        Tensor::randint_on(low, high, t.shape(), t.dtype(), t.device())
    }

    #[track_caller]
    fn randint_on(low: i64, high: i64, shape: &[usize], dtype: DType, device: Device) -> Tensor {
        if low >= high {
            panic!("randint: expected low < high, got low={low} >= high={high}");
        }
        if device == Device::Meta {
            return Tensor::full_on(shape, 0.0, dtype, Device::Meta);
        }
        let n = crate::shape::numel_of("Tensor::randint", shape);
        let mut v: Vec<i64> = crate::backend::try_host_vec(n).unwrap_or_else(|| {
            let e = crate::Error::Allocation { op: "Tensor::randint", shape: shape.to_vec(), bytes: n as u128 * 8 };
            panic!("{e}")
        });
        crate::random::with_rng(|r| v.extend((0..n).map(|_| r.random_range(low..high))));
        let t = Tensor::from_vec_i64(v, shape);
        let t = if dtype == DType::I64 { t } else { t.to_dtype(dtype) };
        if device == Device::Cpu {
            t
        } else {
            t.to_device(device)
        }
    }

    /// Uniform samples in `[0, 1)` with the shape, dtype and device of `t` (PyTorch's
    /// `torch.rand_like`); drawn in `f32` and converted, as the factories draw.
    ///
    /// ```
    /// use nn_core::{DType, Tensor};
    /// let r = Tensor::rand_like(&Tensor::zeros_dtype(&[2, 2], DType::F64));
    /// assert_eq!(r.dtype(), DType::F64);
    /// assert!(r.to_vec_f64().iter().all(|v| (0.0..1.0).contains(v)));
    /// ```
    ///
    /// # Panics
    /// When `t` is not floating-point (PyTorch refuses integer dtypes too).
    #[track_caller]
    pub fn rand_like(t: &Tensor) -> Tensor {
        like("rand_like", t, |r| r.random::<f32>())
    }

    /// Standard normal samples with the shape, dtype and device of `t` (PyTorch's
    /// `torch.randn_like`).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::zeros(&[1000]);
    /// let r = Tensor::randn_like(&x);
    /// assert_eq!(r.shape(), &[1000]);
    /// assert!(r.mean().item().abs() < 0.2);
    /// ```
    ///
    /// # Panics
    /// When `t` is not floating-point.
    #[track_caller]
    pub fn randn_like(t: &Tensor) -> Tensor {
        like("randn_like", t, |r| StandardNormal.sample(r))
    }
}

#[track_caller]
fn like(op: &'static str, t: &Tensor, draw: impl FnMut(&mut rand_chacha::ChaCha8Rng) -> f32) -> Tensor {
    if !t.dtype().is_float() {
        panic!("{op}: expected a floating-point tensor, got {} of shape {:?}", t.dtype(), t.shape());
    }
    if t.device() == Device::Meta {
        return Tensor::full_on(t.shape(), 0.0, t.dtype(), Device::Meta);
    }
    let y = Tensor::from_vec(random_values(op, t.shape(), draw), t.shape());
    let y = if t.dtype() == DType::F32 { y } else { y.to_dtype(t.dtype()) };
    if t.device() == Device::Cpu {
        y
    } else {
        y.to_device(t.device())
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

    #[test]
    fn randint_covers_its_range_and_repeats_with_the_seed() {
        // In a fork: other tests draw from the global generator on parallel threads.
        crate::random::fork_rng(randint_forked);
    }

    fn randint_forked() {
        crate::manual_seed(7);
        let a = Tensor::randint(-3, 3, &[2000]).to_vec_i64();
        crate::manual_seed(7);
        let b = Tensor::randint(-3, 3, &[2000]).to_vec_i64();
        assert_eq!(a, b);
        for k in -3..3 {
            assert!(a.contains(&k), "{k} never drawn");
        }
        assert!(a.iter().all(|&i| (-3..3).contains(&i)));
        assert_eq!(Tensor::randint(0, 1, &[0, 3]).shape(), &[0, 3]);
    }

    #[test]
    #[should_panic(expected = "randint: expected low < high, got low=5 >= high=5")]
    fn randint_with_an_empty_range_panics() {
        Tensor::randint(5, 5, &[1]);
    }

    #[test]
    fn likes_keep_shape_dtype_and_device() {
        for dtype in [DType::F32, DType::F64, DType::BF16, DType::F16] {
            let t = Tensor::zeros_dtype(&[3, 2], dtype);
            for r in [Tensor::rand_like(&t), Tensor::randn_like(&t), Tensor::randint_like(&t, 0, 4)] {
                assert_eq!((r.shape(), r.dtype(), r.device()), (&[3, 2][..], dtype, Device::Cpu));
            }
        }
        let m = Tensor::full_on(&[2], 0.0, DType::F32, Device::Meta);
        assert_eq!(Tensor::randn_like(&m).device(), Device::Meta);
        assert_eq!(Tensor::randint_like(&Tensor::zeros_dtype(&[2], DType::I64), 0, 2).dtype(), DType::I64);
    }

    #[test]
    #[should_panic(expected = "randn_like: expected a floating-point tensor, got i64")]
    fn randn_like_of_integers_panics() {
        Tensor::randn_like(&Tensor::zeros_dtype(&[2], DType::I64));
    }
}
