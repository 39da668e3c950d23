//! Building tensors: from data, filled, ranges and random draws.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};

use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

use crate::autograd::hooks::GradHooks;
use crate::autograd::Node;
use crate::backend::Storage;
use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::random::with_rng;
use crate::shape::Layout;

use super::{StorageSlot, Tensor, TensorId, TensorImpl};

impl Tensor {
    pub(crate) fn from_parts(storage: Arc<Storage>, layout: Layout, grad_fn: Option<Arc<Node>>) -> Tensor {
        debug_assert!(layout.storage_span() <= storage.len(), "layout exceeds storage");
        Tensor::in_slot(StorageSlot::new(storage), layout, grad_fn)
    }

    /// A tensor reading its buffer from `slot` (shared with the tensors it aliases).
    pub(crate) fn in_slot(slot: Arc<StorageSlot>, layout: Layout, grad_fn: Option<Arc<Node>>) -> Tensor {
        Tensor::in_slot_at(slot, layout, grad_fn, None)
    }

    /// [`in_slot`](Tensor::in_slot), for a value saved for backward at the slot's version
    /// `saved_version`.
    pub(crate) fn in_slot_at(
        slot: Arc<StorageSlot>,
        layout: Layout,
        grad_fn: Option<Arc<Node>>,
        saved_version: Option<u64>,
    ) -> Tensor {
        let t = Tensor(Arc::new(TensorImpl {
            id: TensorId::next(),
            layout,
            storage: RwLock::new(slot),
            grad_fn,
            requires_grad: AtomicBool::new(false),
            grad: Mutex::new(None),
            grad_hooks: GradHooks::default(),
            saved_version,
        }));
        crate::autograd::trace::on_create(&t);
        t
    }

    /// A contiguous tensor over `storage` (a leaf with no graph).
    pub(crate) fn from_storage(storage: Storage, shape: &[usize]) -> Tensor {
        Tensor::from_parts(Arc::new(storage), Layout::contiguous(shape), None)
    }

    /// A tensor of `f32` values with the given shape.
    ///
    /// # Panics
    /// When `data.len()` is not the product of `shape` (use
    /// [`try_from_vec`](Tensor::try_from_vec) for a `Result`).
    #[track_caller]
    pub fn from_vec(data: Vec<f32>, shape: &[usize]) -> Tensor {
        Tensor::try_from_data(data, shape, "Tensor::from_vec").unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`from_vec`](Tensor::from_vec), returning an error on a length mismatch.
    pub fn try_from_vec(data: Vec<f32>, shape: &[usize]) -> Result<Tensor> {
        Tensor::try_from_data(data, shape, "Tensor::try_from_vec")
    }

    /// A tensor of `f64` values.
    #[track_caller]
    pub fn from_vec_f64(data: Vec<f64>, shape: &[usize]) -> Tensor {
        Tensor::try_from_data(data, shape, "Tensor::from_vec_f64").unwrap_or_else(|e| panic!("{e}"))
    }

    /// A tensor of `i64` values (class indices, token ids).
    ///
    /// ```
    /// use nn_core::{DType, Tensor};
    /// let t = Tensor::from_vec_i64(vec![3, 1], &[2]);
    /// assert_eq!(t.dtype(), DType::I64);
    /// assert_eq!(t.to_vec_i64(), vec![3, 1]);
    /// ```
    #[track_caller]
    pub fn from_vec_i64(data: Vec<i64>, shape: &[usize]) -> Tensor {
        Tensor::try_from_data(data, shape, "Tensor::from_vec_i64").unwrap_or_else(|e| panic!("{e}"))
    }

    /// A tensor of booleans (masks).
    #[track_caller]
    pub fn from_vec_bool(data: Vec<bool>, shape: &[usize]) -> Tensor {
        Tensor::try_from_data(data, shape, "Tensor::from_vec_bool").unwrap_or_else(|e| panic!("{e}"))
    }

    /// A tensor of any element type, checking the length.
    pub fn from_data<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        Tensor::try_from_data(data, shape, "Tensor::from_data")
    }

    fn try_from_data<T: Element>(data: Vec<T>, shape: &[usize], op: &'static str) -> Result<Tensor> {
        let expected = crate::shape::try_numel(op, shape)?;
        if expected != data.len() {
            return Err(Error::ElementCount { op, shape: shape.to_vec(), expected, got: data.len() });
        }
        Ok(Tensor::from_storage(Storage::from_vec(data), shape))
    }

    /// A 0-dimensional `f32` tensor.
    pub fn scalar(v: f32) -> Tensor {
        Tensor::from_storage(Storage::from_vec(vec![v]), &[])
    }

    /// A tensor filled with `value`, of any dtype and device.
    ///
    /// # Panics
    /// Where [`try_full_on`](Tensor::try_full_on) returns an error, with its message.
    #[track_caller]
    pub fn full_on(shape: &[usize], value: f64, dtype: DType, device: Device) -> Tensor {
        Tensor::try_full_on("Tensor::full_on", shape, value, dtype, device).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`full_on`](Tensor::full_on), returning an error naming `op` instead of
    /// panicking.
    ///
    /// ```
    /// use nn_core::{DType, Device, Error, Tensor};
    /// let e = Tensor::try_full_on("zeros", &[1 << 32, 1 << 32], 0.0, DType::F32, Device::Cpu).unwrap_err();
    /// assert!(matches!(e, Error::ShapeOverflow { .. }));
    /// ```
    ///
    /// # Errors
    /// [`Error::ShapeOverflow`] when the shape's dimensions multiply past
    /// [`crate::shape::MAX_NUMEL`]; [`Error::Allocation`] when the allocator cannot provide
    /// the buffer; [`Error::FillValue`] when `dtype` cannot hold `value` (`-1e9` in f16, NaN
    /// in i64), as PyTorch refuses: it would be infinite or saturate. An infinite value is
    /// a float type's own; truncation toward zero (1.5 in i64 is 1) is PyTorch's too.
    pub fn try_full_on(op: &'static str, shape: &[usize], value: f64, dtype: DType, device: Device) -> Result<Tensor> {
        let len = crate::shape::try_numel(op, shape)?;
        let overflows = match dtype {
            DType::F32 => value.is_finite() && (value as f32).is_infinite(),
            DType::F16 => value.is_finite() && half::f16::from_f64(value).is_infinite(),
            DType::BF16 => value.is_finite() && half::bf16::from_f64(value).is_infinite(),
            // i64::MAX as f64 is 2^63, one past the range.
            DType::I64 => !(value >= i64::MIN as f64 && value < i64::MAX as f64),
            DType::F64 | DType::Bool => false,
        };
        if overflows {
            return Err(Error::FillValue { op, value, dtype });
        }
        let storage = Storage::try_full(device, dtype, len, value).ok_or_else(|| Error::Allocation {
            op,
            shape: shape.to_vec(),
            bytes: len as u128 * dtype.size_in_bytes() as u128,
        })?;
        Ok(Tensor::from_storage(storage, shape))
    }

    /// An `f32` tensor filled with `value` (on the default device, see
    /// [`crate::device::with_device`]).
    ///
    /// # Panics
    /// When the shape's dimensions multiply past [`crate::shape::MAX_NUMEL`] or the buffer
    /// cannot be allocated (see [`try_full_on`](Tensor::try_full_on)).
    #[track_caller]
    pub fn full(shape: &[usize], value: f64) -> Tensor {
        Tensor::try_full_on("Tensor::full", shape, value, DType::F32, crate::device::default_device())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Host-drawn values moved to the default device when it is a GPU: random factories draw
    /// on the host, so one seed gives the same values on every device.
    fn onto_default_device(self) -> Tensor {
        match crate::device::default_device() {
            Device::Cpu => self,
            device => self.to_device(device),
        }
    }

    /// A meta tensor when the default device is `Meta` (random factories then draw nothing).
    fn meta_default(shape: &[usize]) -> Option<Tensor> {
        (crate::device::default_device() == Device::Meta).then(|| Tensor::full_on(shape, 0.0, DType::F32, Device::Meta))
    }

    /// An `f32` tensor of zeros.
    ///
    /// # Panics
    /// When the shape's dimensions multiply past [`crate::shape::MAX_NUMEL`] or the buffer
    /// cannot be allocated ([`try_zeros`](Tensor::try_zeros) returns an error instead):
    /// `Tensor::zeros: shape [4294967296, 4294967296] is unrepresentable: ...`.
    #[track_caller]
    pub fn zeros(shape: &[usize]) -> Tensor {
        Tensor::try_zeros(shape).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`zeros`](Tensor::zeros), returning an error instead of panicking.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// assert_eq!(Tensor::try_zeros(&[2, 0]).unwrap().shape(), &[2, 0]);
    /// let e = Tensor::try_zeros(&[1 << 32, 1 << 32]).unwrap_err();
    /// assert!(e.to_string().contains("[4294967296, 4294967296]"), "{e}");
    /// ```
    ///
    /// # Errors
    /// As [`try_full_on`](Tensor::try_full_on).
    pub fn try_zeros(shape: &[usize]) -> Result<Tensor> {
        Tensor::try_full_on("Tensor::zeros", shape, 0.0, DType::F32, crate::device::default_device())
    }

    /// An `f32` tensor of ones.
    ///
    /// # Panics
    /// As [`zeros`](Tensor::zeros).
    #[track_caller]
    pub fn ones(shape: &[usize]) -> Tensor {
        Tensor::try_full_on("Tensor::ones", shape, 1.0, DType::F32, crate::device::default_device())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Zeros with the shape, dtype and device of `t`.
    pub fn zeros_like(t: &Tensor) -> Tensor {
        Tensor::full_on(t.shape(), 0.0, t.dtype(), t.device())
    }

    /// Ones with the shape, dtype and device of `t`.
    pub fn ones_like(t: &Tensor) -> Tensor {
        Tensor::full_on(t.shape(), 1.0, t.dtype(), t.device())
    }

    /// The `n x n` identity matrix (`f32`).
    #[track_caller]
    pub fn eye(n: usize) -> Tensor {
        let mut v = vec![0.0f32; crate::shape::numel_of("Tensor::eye", &[n, n])];
        for i in 0..n {
            v[i * n + i] = 1.0;
        }
        Tensor::from_vec(v, &[n, n])
    }

    /// `f32` values `start, start + step, ...` up to (excluding) `end`, like `torch.arange`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// assert_eq!(Tensor::arange(0.0, 2.0, 0.5).to_vec(), vec![0.0, 0.5, 1.0, 1.5]);
    /// ```
    ///
    /// # Panics
    /// When `step` is zero or has the wrong sign for the range.
    pub fn arange(start: f64, end: f64, step: f64) -> Tensor {
        if step == 0.0 || (end - start) * step < 0.0 {
            panic!("arange: step {step} cannot go from {start} to {end}");
        }
        let count = ((end - start) / step).ceil().max(0.0);
        if count > crate::shape::MAX_NUMEL as f64 {
            panic!("arange: {count} values from {start} to {end} in steps of {step} are more than a tensor can hold");
        }
        let n = count as usize;
        Tensor::from_vec((0..n).map(|i| (start + i as f64 * step) as f32).collect(), &[n])
    }

    /// A tensor of `dtype` filled with `value`, on the default device: `torch.full(shape,
    /// value, dtype=dtype)` ([`full`](Tensor::full) is the `f32` form, [`full_on`](Tensor::full_on)
    /// names the device too). `value` converts as a cast does (truncated toward zero for
    /// `i64`, `value != 0` for `bool`).
    ///
    /// ```
    /// use nn_core::{DType, Tensor};
    /// let t = Tensor::full_dtype(&[2], -3.0, DType::I64);
    /// assert_eq!((t.dtype(), t.to_vec_i64()), (DType::I64, vec![-3, -3]));
    /// ```
    ///
    /// # Panics
    /// As [`zeros`](Tensor::zeros).
    #[track_caller]
    pub fn full_dtype(shape: &[usize], value: f64, dtype: DType) -> Tensor {
        Tensor::try_full_on("Tensor::full_dtype", shape, value, dtype, crate::device::default_device())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Zeros of `dtype` on the default device, `torch.zeros(shape, dtype=dtype)`.
    ///
    /// ```
    /// use nn_core::{DType, Tensor};
    /// let t = Tensor::zeros_dtype(&[2, 1], DType::F64);
    /// assert_eq!((t.dtype(), t.shape()), (DType::F64, &[2, 1][..]));
    /// assert_eq!(t.to_vec_f64(), vec![0.0, 0.0]);
    /// ```
    ///
    /// # Panics
    /// As [`zeros`](Tensor::zeros).
    #[track_caller]
    pub fn zeros_dtype(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::try_full_on("Tensor::zeros_dtype", shape, 0.0, dtype, crate::device::default_device())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Ones of `dtype` on the default device, `torch.ones(shape, dtype=dtype)`.
    ///
    /// ```
    /// use nn_core::{DType, Tensor};
    /// let m = Tensor::ones_dtype(&[3], DType::Bool);
    /// assert_eq!((m.dtype(), m.to_vec_f64()), (DType::Bool, vec![1.0, 1.0, 1.0]));
    /// ```
    ///
    /// # Panics
    /// As [`zeros`](Tensor::zeros).
    #[track_caller]
    pub fn ones_dtype(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::try_full_on("Tensor::ones_dtype", shape, 1.0, dtype, crate::device::default_device())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// `torch.arange(start, end, step, dtype=dtype)` on the default device:
    /// `ceil((end - start) / step)` values `start + i * step`.
    ///
    /// Floating dtypes compute each value as `start + i * step` in `f64` and round it once
    /// (as [`arange`](Tensor::arange), the `f32` form; PyTorch's vectorized kernel may
    /// differ in the last bit). `I64` gives exact integers (position ids, index ranges): as in
    /// PyTorch, the count comes from the `f64` arguments while `start` and `step` are
    /// truncated toward zero for the values, so `arange_dtype(0.0, 5.0, 1.5, I64)` is
    /// `[0, 1, 2, 3]`.
    ///
    /// ```
    /// use nn_core::{DType, Tensor};
    /// let pos = Tensor::arange_dtype(0.0, 4.0, 1.0, DType::I64);
    /// assert_eq!((pos.dtype(), pos.to_vec_i64()), (DType::I64, vec![0, 1, 2, 3]));
    /// let f = Tensor::arange_dtype(1.0, 0.0, -0.25, DType::F64);
    /// assert_eq!(f.to_vec_f64(), vec![1.0, 0.75, 0.5, 0.25]);
    /// ```
    ///
    /// # Panics
    /// When `step` is zero or has the wrong sign for the range, the count is more than a
    /// tensor can hold, or `dtype` is `Bool` (PyTorch has no bool arange).
    #[track_caller]
    pub fn arange_dtype(start: f64, end: f64, step: f64, dtype: DType) -> Tensor {
        const OP: &str = "arange_dtype";
        if step == 0.0 || (end - start) * step < 0.0 || !(start.is_finite() && end.is_finite()) {
            panic!("{OP}: step {step} cannot go from {start} to {end}");
        }
        if dtype == DType::Bool {
            panic!("{OP}: no arange of dtype bool (as in PyTorch); build an i64 range and compare it");
        }
        let count = ((end - start) / step).ceil().max(0.0);
        if count > crate::shape::MAX_NUMEL as f64 {
            panic!("{OP}: {count} values from {start} to {end} in steps of {step} are more than a tensor can hold");
        }
        let n = count as usize;
        let t = if dtype == DType::I64 {
            let (s, st) = (start as i64, step as i64);
            let v: Vec<i64> = (0..n as i64).map(|i| s.wrapping_add(i.wrapping_mul(st))).collect();
            Tensor::from_vec_i64(v, &[n])
        } else {
            Tensor::from_vec_f64((0..n).map(|i| start + i as f64 * step).collect(), &[n]).to_dtype(dtype)
        };
        t.onto_default_device()
    }

    /// Standard normal `f32` samples from the global generator ([`crate::manual_seed`]).
    pub fn randn(shape: &[usize]) -> Tensor {
        if let Some(t) = Tensor::meta_default(shape) {
            return t;
        }
        let v: Vec<f32> = random_values("Tensor::randn", shape, |r| StandardNormal.sample(r));
        Tensor::from_vec(v, shape).onto_default_device()
    }

    /// Uniform `f32` samples in `[0, 1)` from the global generator.
    pub fn rand(shape: &[usize]) -> Tensor {
        Tensor::uniform(shape, 0.0, 1.0)
    }

    /// Uniform `f32` samples in `[low, high)` from the global generator.
    pub fn uniform(shape: &[usize], low: f64, high: f64) -> Tensor {
        if let Some(t) = Tensor::meta_default(shape) {
            return t;
        }
        let v: Vec<f32> = random_values("Tensor::uniform", shape, |r| (low + (high - low) * r.random::<f64>()) as f32);
        Tensor::from_vec(v, shape).onto_default_device()
    }

    /// Normal `f32` samples with the given mean and standard deviation.
    pub fn normal(shape: &[usize], mean: f64, std: f64) -> Tensor {
        if let Some(t) = Tensor::meta_default(shape) {
            return t;
        }
        let v: Vec<f32> = random_values("Tensor::normal", shape, |r| {
            let z: f64 = StandardNormal.sample(r);
            (mean + std * z) as f32
        });
        Tensor::from_vec(v, shape).onto_default_device()
    }

    /// A random permutation of `0..n` as `i64`, from the global generator.
    ///
    /// # Panics
    /// When the `n` values cannot be allocated.
    #[track_caller]
    pub fn randperm(n: usize) -> Tensor {
        let mut v: Vec<i64> = crate::backend::try_host_vec(n).unwrap_or_else(|| {
            panic!("{}", Error::Allocation { op: "Tensor::randperm", shape: vec![n], bytes: n as u128 * 8 })
        });
        v.extend(0..n as i64);
        with_rng(|r| {
            for i in (1..n).rev() {
                let j = r.random_range(0..=i);
                v.swap(i, j);
            }
        });
        Tensor::from_vec_i64(v, &[n])
    }
}

/// `numel(shape)` draws of `draw` from the global generator, checking the shape and the
/// allocation first (a clear panic naming `op`, never a wrapped count or an abort).
#[track_caller]
pub(super) fn random_values(
    op: &'static str,
    shape: &[usize],
    mut draw: impl FnMut(&mut rand_chacha::ChaCha8Rng) -> f32,
) -> Vec<f32> {
    let n = crate::shape::numel_of(op, shape);
    let mut v = crate::backend::try_host_vec(n)
        .unwrap_or_else(|| panic!("{}", Error::Allocation { op, shape: shape.to_vec(), bytes: n as u128 * 4 }));
    with_rng(|r| v.extend((0..n).map(|_| draw(r))));
    v
}

#[cfg(test)]
mod dtype_tests {
    use crate::device::{with_device, Device};
    use crate::{DType, Tensor};

    #[test]
    fn filled_constructors_take_a_dtype() {
        for dtype in [DType::F32, DType::F64, DType::I64, DType::F16, DType::BF16, DType::Bool] {
            let z = Tensor::zeros_dtype(&[2, 3], dtype);
            let o = Tensor::ones_dtype(&[4], dtype);
            assert_eq!((z.dtype(), z.shape(), z.to_vec_f64()), (dtype, &[2, 3][..], vec![0.0; 6]));
            assert_eq!((o.dtype(), o.to_vec_f64()), (dtype, vec![1.0; 4]));
        }
        assert_eq!(Tensor::full_dtype(&[2], 2.75, DType::F64).to_vec_f64(), vec![2.75, 2.75]);
        assert_eq!(Tensor::full_dtype(&[1], -2.75, DType::I64).to_vec_i64(), vec![-2]);
        assert_eq!(Tensor::full_dtype(&[1], 0.5, DType::Bool).to_vec_f64(), vec![1.0]);
        let m = with_device(Device::Meta, || Tensor::ones_dtype(&[3], DType::I64));
        assert_eq!((m.device(), m.dtype()), (Device::Meta, DType::I64));
    }

    #[test]
    fn arange_dtype_matches_pytorch() {
        // torch.arange(0, 5, 1.5, dtype=torch.int64) and (-1.5, 3.7, 1.2): the count from
        // the f64 arguments, the values from the truncated start and step.
        assert_eq!(Tensor::arange_dtype(0.0, 5.0, 1.5, DType::I64).to_vec_i64(), vec![0, 1, 2, 3]);
        assert_eq!(Tensor::arange_dtype(-1.5, 3.7, 1.2, DType::I64).to_vec_i64(), vec![-1, 0, 1, 2, 3]);
        assert_eq!(Tensor::arange_dtype(5.0, 0.0, -2.0, DType::I64).to_vec_i64(), vec![5, 3, 1]);
        // Exact integers above 2^53 (which f64 could not hold).
        let big = (1i64 << 53) as f64;
        assert_eq!(Tensor::arange_dtype(big, big + 4.0, 2.0, DType::I64).to_vec_i64(), vec![1 << 53, (1 << 53) + 2]);
        let f = Tensor::arange_dtype(0.0, 1.0, 0.1, DType::F64);
        assert_eq!(f.numel(), 10);
        assert_eq!(f.to_vec_f64()[3], 3.0 * 0.1);
        assert_eq!(Tensor::arange_dtype(0.0, 1.0, 0.25, DType::F32).to_vec(), Tensor::arange(0.0, 1.0, 0.25).to_vec());
        assert_eq!(Tensor::arange_dtype(0.0, 3.0, 1.0, DType::BF16).dtype(), DType::BF16);
        assert_eq!(Tensor::arange_dtype(2.0, 2.0, 1.0, DType::I64).shape(), &[0]);
        let m = with_device(Device::Meta, || Tensor::arange_dtype(0.0, 6.0, 1.0, DType::I64));
        assert_eq!((m.device(), m.shape()), (Device::Meta, &[6][..]));
    }

    #[test]
    #[should_panic(expected = "arange_dtype: step -1 cannot go from 0 to 5")]
    fn arange_dtype_with_a_wrong_step_panics() {
        Tensor::arange_dtype(0.0, 5.0, -1.0, DType::I64);
    }

    #[test]
    #[should_panic(expected = "arange_dtype: no arange of dtype bool")]
    fn arange_dtype_bool_panics() {
        Tensor::arange_dtype(0.0, 2.0, 1.0, DType::Bool);
    }
}
