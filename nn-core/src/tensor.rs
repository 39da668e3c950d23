//! The [`Tensor`] handle: shared storage, an immutable strided layout, and autograd state.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use half::{bf16, f16};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

use crate::autograd::{is_grad_enabled, op_result, Grads, Node};
use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::random::with_rng;
use crate::shape::{for_each_offset, Layout};
use crate::storage::{with_cpu, CpuStorage, Storage};

/// A unique tensor identity. Graph bookkeeping keys on ids, never on values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(u64);

static NEXT_TENSOR_ID: AtomicU64 = AtomicU64::new(1);

impl TensorId {
    fn next() -> Self {
        TensorId(NEXT_TENSOR_ID.fetch_add(1, Ordering::Relaxed))
    }
}

/// An n-dimensional array with reverse-mode autograd.
///
/// A `Tensor` is a cheap-to-clone handle (an `Arc`): clones are the *same* tensor, like two
/// Python references to one `torch.Tensor` (same id, same `.grad`, same
/// `requires_grad`). Views (`transpose`, `permute`, `narrow`, `expand`, `reshape` of a
/// contiguous tensor) share the storage buffer and only change the layout.
///
/// In-place updates ([`copy_`](Tensor::copy_), [`add_`](Tensor::add_), ...) are
/// copy-on-write at the buffer level: they never write through into the buffer of another
/// handle (a view, or a value saved for backward). Where PyTorch raises a version-counter
/// error when a saved value was modified, here the saved value simply stays what it was.
///
/// Values are row-major; the default dtype is `f32`.
///
/// ```
/// use nn_core::Tensor;
/// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
/// assert_eq!(x.shape(), &[2, 3]);
/// let t = x.t(); // a view: no copy
/// assert_eq!(t.shape(), &[3, 2]);
/// assert_eq!(t.to_vec(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
/// ```
#[derive(Clone)]
pub struct Tensor(pub(crate) Arc<TensorImpl>);

pub(crate) struct TensorImpl {
    pub(crate) id: TensorId,
    pub(crate) layout: Layout,
    pub(crate) storage: RwLock<Arc<Storage>>,
    pub(crate) grad_fn: Option<Arc<Node>>,
    pub(crate) requires_grad: AtomicBool,
    pub(crate) grad: Mutex<Option<Tensor>>,
}

// ---------------------------------------------------------------------------------------
// Construction
// ---------------------------------------------------------------------------------------

impl Tensor {
    pub(crate) fn from_parts(storage: Arc<Storage>, layout: Layout, grad_fn: Option<Arc<Node>>) -> Tensor {
        debug_assert!(layout.storage_span() <= storage.len(), "layout exceeds storage");
        Tensor(Arc::new(TensorImpl {
            id: TensorId::next(),
            layout,
            storage: RwLock::new(storage),
            grad_fn,
            requires_grad: AtomicBool::new(false),
            grad: Mutex::new(None),
        }))
    }

    /// A contiguous tensor over `storage` (a leaf with no graph).
    pub(crate) fn from_storage(storage: Storage, shape: &[usize]) -> Tensor {
        Tensor::from_parts(Arc::new(storage), Layout::contiguous(shape), None)
    }

    pub(crate) fn from_cpu(storage: CpuStorage, shape: &[usize]) -> Tensor {
        Tensor::from_storage(Storage::Cpu(storage), shape)
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
        let expected: usize = shape.iter().product();
        if expected != data.len() {
            return Err(Error::ElementCount { op, shape: shape.to_vec(), expected, got: data.len() });
        }
        Ok(Tensor::from_cpu(T::into_storage(data), shape))
    }

    /// A 0-dimensional `f32` tensor.
    pub fn scalar(v: f32) -> Tensor {
        Tensor::from_cpu(CpuStorage::F32(vec![v]), &[])
    }

    /// A tensor filled with `value`, of any dtype and device.
    pub fn full_on(shape: &[usize], value: f64, dtype: DType, device: Device) -> Tensor {
        let len = shape.iter().product();
        let storage = match device {
            Device::Cpu => Storage::Cpu(CpuStorage::full(dtype, len, value)),
            Device::Meta => Storage::Meta { dtype, len },
        };
        Tensor::from_storage(storage, shape)
    }

    /// An `f32` tensor filled with `value`.
    pub fn full(shape: &[usize], value: f64) -> Tensor {
        Tensor::full_on(shape, value, DType::F32, Device::Cpu)
    }

    /// An `f32` tensor of zeros.
    pub fn zeros(shape: &[usize]) -> Tensor {
        Tensor::full(shape, 0.0)
    }

    /// An `f32` tensor of ones.
    pub fn ones(shape: &[usize]) -> Tensor {
        Tensor::full(shape, 1.0)
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
    pub fn eye(n: usize) -> Tensor {
        let mut v = vec![0.0f32; n * n];
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
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        Tensor::from_vec((0..n).map(|i| (start + i as f64 * step) as f32).collect(), &[n])
    }

    /// Standard normal `f32` samples from the global generator ([`crate::manual_seed`]).
    pub fn randn(shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        let v: Vec<f32> = with_rng(|r| (0..n).map(|_| StandardNormal.sample(r)).collect());
        Tensor::from_vec(v, shape)
    }

    /// Uniform `f32` samples in `[0, 1)` from the global generator.
    pub fn rand(shape: &[usize]) -> Tensor {
        Tensor::uniform(shape, 0.0, 1.0)
    }

    /// Uniform `f32` samples in `[low, high)` from the global generator.
    pub fn uniform(shape: &[usize], low: f64, high: f64) -> Tensor {
        let n = shape.iter().product();
        let v: Vec<f32> = with_rng(|r| (0..n).map(|_| (low + (high - low) * r.random::<f64>()) as f32).collect());
        Tensor::from_vec(v, shape)
    }

    /// Normal `f32` samples with the given mean and standard deviation.
    pub fn normal(shape: &[usize], mean: f64, std: f64) -> Tensor {
        let n = shape.iter().product();
        let v: Vec<f32> = with_rng(|r| {
            (0..n)
                .map(|_| {
                    let z: f64 = StandardNormal.sample(r);
                    (mean + std * z) as f32
                })
                .collect()
        });
        Tensor::from_vec(v, shape)
    }

    /// A random permutation of `0..n` as `i64`, from the global generator.
    pub fn randperm(n: usize) -> Tensor {
        let mut v: Vec<i64> = (0..n as i64).collect();
        with_rng(|r| {
            for i in (1..n).rev() {
                let j = r.random_range(0..=i);
                v.swap(i, j);
            }
        });
        Tensor::from_vec_i64(v, &[n])
    }
}

// ---------------------------------------------------------------------------------------
// Metadata and values
// ---------------------------------------------------------------------------------------

impl Tensor {
    /// The unique identity of this tensor (shared by its clones).
    pub fn id(&self) -> TensorId {
        self.0.id
    }

    /// The size of each dimension.
    pub fn shape(&self) -> &[usize] {
        self.0.layout.shape()
    }

    /// The strides of each dimension, in elements.
    pub fn strides(&self) -> &[usize] {
        self.0.layout.strides()
    }

    /// The layout (shape, strides, offset).
    pub fn layout(&self) -> &Layout {
        &self.0.layout
    }

    /// Number of dimensions (0 for a scalar).
    pub fn rank(&self) -> usize {
        self.0.layout.rank()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.0.layout.numel()
    }

    /// True when the elements are row-major without gaps.
    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.storage_arc().dtype()
    }

    /// The device holding the values.
    pub fn device(&self) -> Device {
        self.storage_arc().device()
    }

    /// The storage buffer (shared with views).
    pub fn storage_arc(&self) -> Arc<Storage> {
        self.0.storage.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The CPU buffer, or a panic naming `op` when the tensor is on the meta device.
    #[track_caller]
    pub(crate) fn cpu_storage(&self, op: &str) -> Arc<Storage> {
        let s = self.storage_arc();
        if let Storage::Meta { .. } = &*s {
            panic!("{}", Error::MetaHasNoValues { op: leak(op), shape: self.shape().to_vec() });
        }
        s
    }

    /// The values, row-major, converted to `T`.
    #[track_caller]
    pub fn to_vec_of<T: Element>(&self) -> Vec<T> {
        let s = self.cpu_storage("to_vec");
        let Storage::Cpu(c) = &*s else { unreachable!() };
        match T::slice(c) {
            Some(v) => crate::storage::strided_to_vec(v, self.layout()),
            None => {
                let conv = c.convert_layout(self.layout(), T::DTYPE);
                T::slice(&conv).expect("converted").to_vec()
            }
        }
    }

    /// The values as `f32`, row-major, whatever the dtype.
    ///
    /// # Panics
    /// On a meta tensor (it has no values).
    #[track_caller]
    pub fn to_vec(&self) -> Vec<f32> {
        self.to_vec_of::<f32>()
    }

    /// The values as `f64`.
    #[track_caller]
    pub fn to_vec_f64(&self) -> Vec<f64> {
        self.to_vec_of::<f64>()
    }

    /// The values as `i64` (floats truncate toward zero).
    #[track_caller]
    pub fn to_vec_i64(&self) -> Vec<i64> {
        self.to_vec_of::<i64>()
    }

    /// The values as booleans (non-zero is `true`).
    #[track_caller]
    pub fn to_vec_bool(&self) -> Vec<bool> {
        self.to_vec_of::<bool>()
    }

    /// The single value of a one-element tensor, as `f64`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// assert_eq!(Tensor::from_vec(vec![1.0, 2.0], &[2]).sum().item(), 3.0);
    /// ```
    #[track_caller]
    pub fn item(&self) -> f64 {
        if self.numel() != 1 {
            panic!(
                "item: a tensor with {} elements (shape {:?}) cannot be converted to a scalar",
                self.numel(),
                self.shape()
            );
        }
        self.to_vec_f64()[0]
    }
}

/// Turns a runtime op name into a `'static` one for error values (only on the panic path).
fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

// ---------------------------------------------------------------------------------------
// Autograd state
// ---------------------------------------------------------------------------------------

impl Tensor {
    /// True when gradients flow to or through this tensor: a leaf marked with
    /// [`requires_grad_`](Tensor::requires_grad_), or the result of an op on one.
    pub fn requires_grad(&self) -> bool {
        self.0.grad_fn.is_some() || self.0.requires_grad.load(Ordering::Relaxed)
    }

    /// Marks a leaf as requiring (or not) gradients; returns the same tensor.
    ///
    /// # Panics
    /// When asked to require grad on a non-floating dtype, or to stop requiring grad on a
    /// non-leaf (use [`detach`](Tensor::detach)), as PyTorch does.
    #[track_caller]
    pub fn requires_grad_(&self, requires_grad: bool) -> Tensor {
        if self.0.grad_fn.is_some() {
            if !requires_grad {
                panic!("requires_grad_: you can only change requires_grad flags of leaf tensors; use `detach()` to get a tensor without a graph");
            }
            return self.clone();
        }
        if requires_grad && !self.dtype().is_float() {
            panic!("requires_grad_: only tensors of floating-point dtype can require gradients, got {}", self.dtype());
        }
        self.0.requires_grad.store(requires_grad, Ordering::Relaxed);
        self.clone()
    }

    /// True for tensors not produced by a recorded op (user-created, detached, or results
    /// computed under `no_grad`).
    pub fn is_leaf(&self) -> bool {
        self.0.grad_fn.is_none()
    }

    /// The accumulated gradient of a leaf, if a backward pass has reached it.
    pub fn grad(&self) -> Option<Tensor> {
        self.0.grad.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the accumulated gradient (`None` clears it, like `zero_grad(set_to_none=True)`).
    ///
    /// # Panics
    /// When the new gradient's shape differs from the tensor's.
    pub fn set_grad(&self, grad: Option<Tensor>) {
        if let Some(g) = &grad {
            assert_eq!(
                g.shape(),
                self.shape(),
                "set_grad: gradient of shape {:?} for a tensor of shape {:?}",
                g.shape(),
                self.shape()
            );
        }
        *self.0.grad.lock().unwrap_or_else(|e| e.into_inner()) = grad.map(|g| g.detach());
    }

    /// Clears the accumulated gradient.
    pub fn zero_grad(&self) {
        self.set_grad(None);
    }

    /// The name of the op that produced this tensor, for non-leaves (`"matmul"`, ...).
    pub fn grad_fn_name(&self) -> Option<&'static str> {
        self.0.grad_fn.as_ref().map(|n| n.name)
    }

    /// A new tensor sharing this one's values but cut from the graph (a leaf that does not
    /// require grad).
    pub fn detach(&self) -> Tensor {
        Tensor::from_parts(self.storage_arc(), self.layout().clone(), None)
    }
}

// ---------------------------------------------------------------------------------------
// Copies, conversions and in-place updates
// ---------------------------------------------------------------------------------------

impl Tensor {
    /// This tensor if already contiguous, otherwise a contiguous copy (differentiable).
    pub fn contiguous(&self) -> Tensor {
        if self.is_contiguous() && self.0.layout.offset() == 0 && self.storage_arc().len() == self.numel() {
            return self.clone();
        }
        let storage = match &*self.storage_arc() {
            Storage::Cpu(c) => Storage::Cpu(c.gather_layout(self.layout())),
            Storage::Meta { dtype, .. } => Storage::Meta { dtype: *dtype, len: self.numel() },
        };
        op_result("contiguous", Arc::new(storage), Layout::contiguous(self.shape()), &[self], || {
            |g: &Tensor, _: &[bool]| -> Grads { smallvec::smallvec![Some(g.clone())] }
        })
    }

    /// Converts to another dtype (differentiable between floating types; gradients are
    /// converted back).
    ///
    /// ```
    /// use nn_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1.5, -2.25], &[2]);
    /// let h = x.to_dtype(DType::BF16);
    /// assert_eq!(h.dtype(), DType::BF16);
    /// assert_eq!(h.to_dtype(DType::F32).to_vec(), vec![1.5, -2.25]);
    /// ```
    pub fn to_dtype(&self, dtype: DType) -> Tensor {
        let src = self.dtype();
        if src == dtype {
            return self.clone();
        }
        let storage = match &*self.storage_arc() {
            Storage::Cpu(c) => Storage::Cpu(c.convert_layout(self.layout(), dtype)),
            Storage::Meta { .. } => Storage::Meta { dtype, len: self.numel() },
        };
        let inputs: &[&Tensor] = if dtype.is_float() { &[self] } else { &[] };
        op_result("to_dtype", Arc::new(storage), Layout::contiguous(self.shape()), inputs, || {
            move |g: &Tensor, _: &[bool]| -> Grads { smallvec::smallvec![Some(g.to_dtype(src))] }
        })
    }

    /// Moves to another device. Moving to `Meta` drops the values; moving a meta tensor to
    /// the CPU allocates zeros (its values are unspecified until loaded or initialised,
    /// like PyTorch's `to_empty`).
    pub fn to_device(&self, device: Device) -> Tensor {
        if self.device() == device {
            return self.clone();
        }
        let dtype = self.dtype();
        let storage = match device {
            Device::Meta => Storage::Meta { dtype, len: self.numel() },
            Device::Cpu => Storage::Cpu(CpuStorage::zeros(dtype, self.numel())),
        };
        op_result("to_device", Arc::new(storage), Layout::contiguous(self.shape()), &[self], || {
            move |g: &Tensor, _: &[bool]| -> Grads { smallvec::smallvec![Some(g.to_device(Device::Cpu))] }
        })
    }

    #[track_caller]
    fn check_inplace(&self, op: &str) {
        if is_grad_enabled() && self.requires_grad() {
            panic!(
                "{op}: in-place update of a tensor that requires grad; run it inside `no_grad(|| ...)` \
                 (as optimizers and init functions do)"
            );
        }
    }

    /// Replaces this tensor's values (and dtype and device) with `src`'s, keeping its
    /// identity, so every handle (a module's parameter, an optimizer's copy) sees the new
    /// values: PyTorch's `param.data = src`. Shares `src`'s buffer when the layouts allow.
    ///
    /// # Panics
    /// When the shapes differ.
    #[track_caller]
    pub fn set_data(&self, src: &Tensor) {
        if src.shape() != self.shape() {
            panic!("set_data: source of shape {:?} for a tensor of shape {:?}", src.shape(), self.shape());
        }
        let new = if src.layout() == self.layout() {
            src.storage_arc()
        } else if self.is_contiguous() && self.layout().offset() == 0 {
            src.detach().contiguous().storage_arc()
        } else {
            // A strided leaf: rebuild a buffer in this tensor's own layout.
            let span = self.layout().storage_span();
            match &*src.storage_arc() {
                Storage::Meta { dtype, .. } => Arc::new(Storage::Meta { dtype: *dtype, len: span }),
                Storage::Cpu(c) => {
                    let vals = c.gather_layout(src.layout());
                    let mut out = CpuStorage::zeros(vals.dtype(), span);
                    scatter_into(&mut out, self.layout(), &vals);
                    Arc::new(Storage::Cpu(out))
                }
            }
        };
        *self.0.storage.write().unwrap_or_else(|e| e.into_inner()) = new;
    }

    /// Runs `f` on this tensor's buffer for writing, copying the buffer first if any other
    /// handle shares it (copy-on-write).
    pub(crate) fn modify_storage<R>(&self, op: &str, f: impl FnOnce(&mut CpuStorage, &Layout) -> R) -> R {
        let mut guard = self.0.storage.write().unwrap_or_else(|e| e.into_inner());
        match Arc::make_mut(&mut guard) {
            Storage::Cpu(c) => f(c, &self.0.layout),
            Storage::Meta { .. } => {
                panic!("{op}: tensor on the meta device has no values to update")
            }
        }
    }

    /// Copies `src` (broadcast to this shape, converted to this dtype) into this tensor's
    /// values, in place. Not recorded by autograd.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::zeros(&[2, 2]);
    /// x.copy_(&Tensor::from_vec(vec![1.0, 2.0], &[2]));
    /// assert_eq!(x.to_vec(), vec![1.0, 2.0, 1.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn copy_(&self, src: &Tensor) -> &Tensor {
        self.check_inplace("copy_");
        if self.device() == Device::Meta && src.device() == Device::Meta {
            return self;
        }
        let Some(b) = src.layout().broadcast_to(self.shape()) else {
            panic!("copy_: source of shape {:?} cannot be broadcast to {:?}", src.shape(), self.shape());
        };
        let dtype = self.dtype();
        let s = src.cpu_storage("copy_");
        let Storage::Cpu(c) = &*s else { unreachable!() };
        let vals = c.convert_layout(&b, dtype);
        self.modify_storage("copy_", |dst, layout| scatter_into(dst, layout, &vals));
        self
    }

    /// Sets every element to `value`, in place.
    #[track_caller]
    pub fn fill_(&self, value: f64) -> &Tensor {
        self.copy_(&Tensor::full_on(&[], value, self.dtype(), self.device()))
    }

    /// Sets every element to zero, in place.
    #[track_caller]
    pub fn zero_(&self) -> &Tensor {
        self.fill_(0.0)
    }

    /// `self += other` (broadcast), in place. Not recorded by autograd.
    #[track_caller]
    pub fn add_(&self, other: &Tensor) -> &Tensor {
        self.check_inplace("add_");
        let sum = crate::autograd::no_grad(|| self + other);
        self.copy_(&sum)
    }

    /// `self *= value`, in place. Not recorded by autograd.
    #[track_caller]
    pub fn mul_(&self, value: f64) -> &Tensor {
        self.check_inplace("mul_");
        let prod = crate::autograd::no_grad(|| self * value);
        self.copy_(&prod)
    }
}

/// Writes row-major `vals` into the positions of `layout` inside `dst` (same dtype).
pub(crate) fn scatter_into(dst: &mut CpuStorage, layout: &Layout, vals: &CpuStorage) {
    fn go<T: Element>(dst: &mut [T], layout: &Layout, vals: &[T]) {
        if let Some(r) = layout.contiguous_range() {
            dst[r].copy_from_slice(vals);
            return;
        }
        let mut i = 0;
        for_each_offset(layout.shape(), [layout.strides()], [layout.offset()], |[o]| {
            dst[o] = vals[i];
            i += 1;
        });
    }
    let dtype = dst.dtype();
    let vals = if vals.dtype() == dtype {
        std::borrow::Cow::Borrowed(vals)
    } else {
        std::borrow::Cow::Owned(vals.convert_layout(&Layout::contiguous(&[vals.len()]), dtype))
    };
    with_cpu!(dst, T, d => go::<T>(d, layout, T::slice(&vals).expect("same dtype")))
}

// ---------------------------------------------------------------------------------------
// Printing
// ---------------------------------------------------------------------------------------

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// PyTorch-style printout: `tensor([[1.0000, 2.0000], ...], dtype=f64, requires_grad=true)`.
/// Large tensors show their first and last three entries per dimension.
impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut extras = Vec::new();
        if self.device() == Device::Meta {
            write!(f, "tensor(..., size={:?}", self.shape())?;
            extras.push("device=meta".to_string());
        } else {
            f.write_str("tensor(")?;
            let vals = self.to_vec_f64();
            let dtype = self.dtype();
            let fmt_v = |v: f64| -> String {
                match dtype {
                    DType::I64 => format!("{}", v as i64),
                    DType::Bool => format!("{}", v != 0.0),
                    _ => format!("{v:.4}"),
                }
            };
            let strides = crate::shape::contiguous_strides(self.shape());
            fn rec(
                f: &mut fmt::Formatter<'_>,
                vals: &[f64],
                shape: &[usize],
                strides: &[usize],
                base: usize,
                depth: usize,
                fmt_v: &dyn Fn(f64) -> String,
            ) -> fmt::Result {
                if shape.is_empty() {
                    return f.write_str(&fmt_v(vals[base]));
                }
                f.write_str("[")?;
                let n = shape[0];
                let elide = n > 6 && vals.len() > 1000;
                let idx: Vec<Option<usize>> = if elide {
                    (0..3).map(Some).chain([None]).chain((n - 3..n).map(Some)).collect()
                } else {
                    (0..n).map(Some).collect()
                };
                for (k, i) in idx.iter().enumerate() {
                    if k > 0 {
                        if shape.len() > 1 {
                            write!(f, ",\n{}", " ".repeat(depth + 8))?;
                        } else {
                            f.write_str(", ")?;
                        }
                    }
                    match i {
                        Some(i) => rec(f, vals, &shape[1..], &strides[1..], base + i * strides[0], depth + 1, fmt_v)?,
                        None => f.write_str("...")?,
                    }
                }
                f.write_str("]")
            }
            rec(f, &vals, self.shape(), &strides, 0, 0, &fmt_v)?;
            if dtype != DType::F32 {
                extras.push(format!("dtype={dtype}"));
            }
        }
        if let Some(n) = self.grad_fn_name() {
            extras.push(format!("grad_fn={n}"));
        } else if self.requires_grad() {
            extras.push("requires_grad=true".to_string());
        }
        for e in extras {
            write!(f, ", {e}")?;
        }
        f.write_str(")")
    }
}

// Element conversions used by tests and docs.
impl From<f32> for Tensor {
    fn from(v: f32) -> Self {
        Tensor::scalar(v)
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Tensor>();
    let _ = (f16::ZERO, bf16::ZERO);
}
