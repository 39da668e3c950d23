//! The [`Tensor`] handle: shared storage, an immutable strided layout, and autograd state.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use half::{bf16, f16};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

use crate::autograd::hooks::GradHooks;
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
    /// Post-accumulate-grad hooks (leaves only; see `autograd::hooks`).
    pub(crate) grad_hooks: GradHooks,
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
            grad_hooks: GradHooks::default(),
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

    /// An `f32` tensor filled with `value` (on the default device, see
    /// [`crate::device::with_device`]).
    pub fn full(shape: &[usize], value: f64) -> Tensor {
        Tensor::full_on(shape, value, DType::F32, crate::device::default_device())
    }

    /// A meta tensor when the default device is `Meta` (random factories then draw nothing).
    fn meta_default(shape: &[usize]) -> Option<Tensor> {
        (crate::device::default_device() == Device::Meta).then(|| Tensor::full_on(shape, 0.0, DType::F32, Device::Meta))
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
        if let Some(t) = Tensor::meta_default(shape) {
            return t;
        }
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
        if let Some(t) = Tensor::meta_default(shape) {
            return t;
        }
        let n = shape.iter().product();
        let v: Vec<f32> = with_rng(|r| (0..n).map(|_| (low + (high - low) * r.random::<f64>()) as f32).collect());
        Tensor::from_vec(v, shape)
    }

    /// Normal `f32` samples with the given mean and standard deviation.
    pub fn normal(shape: &[usize], mean: f64, std: f64) -> Tensor {
        if let Some(t) = Tensor::meta_default(shape) {
            return t;
        }
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
    pub(crate) fn check_inplace(&self, op: &str) {
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

    // In-place arithmetic (`add_`, `sub_`, `mul_`, `+=`, ...) lives in `ops/inplace.rs`.
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::testing::support::{assert_close64, grad, leaf, rng_lock, t64};
    use crate::testing::{gradcheck_with, GradcheckOptions};
    use crate::{manual_seed, no_grad, DType, Device, Tensor};

    // ---- dtype conversions --------------------------------------------------------------

    #[test]
    fn float_round_trips_are_exact_where_representable() {
        let v = vec![1.5f32, -2.25, 0.0, 65504.0, -0.125, 1024.0];
        let x = Tensor::from_vec(v.clone(), &[6]);
        for d in [DType::F64, DType::F16, DType::BF16] {
            if d == DType::BF16 {
                // bf16 has 8 significant bits: 65504 rounds, the rest are exact.
                let back = x.to_dtype(d).to_dtype(DType::F32).to_vec();
                assert_eq!(back, vec![1.5, -2.25, 0.0, 65536.0, -0.125, 1024.0]);
                continue;
            }
            let y = x.to_dtype(d);
            assert_eq!(y.dtype(), d);
            assert_eq!(y.to_dtype(DType::F32).to_vec(), v, "f32 -> {d} -> f32");
        }
        // f16 -> bf16 -> f64 -> f16 for values both half types hold exactly.
        let h = Tensor::from_vec(vec![0.5, -3.0, 96.0], &[3]).to_dtype(DType::F16);
        assert_eq!(h.to_dtype(DType::BF16).to_dtype(DType::F64).to_dtype(DType::F16).to_vec(), vec![0.5, -3.0, 96.0]);
    }

    #[test]
    fn float_conversions_round_to_nearest_even() {
        let x = t64(&[0.1, 1.0 + 2f64.powi(-11), 1.0 + 3.0 * 2f64.powi(-11), 70000.0], &[4]);
        assert_eq!(x.to_dtype(DType::F16).to_vec_f64(), vec![0.0999755859375, 1.0, 1.001953125, f64::INFINITY]);
        let b = t64(&[0.1, 1.0 + 2f64.powi(-8), 1.0 + 3.0 * 2f64.powi(-8), 1e38], &[4]);
        let bv = b.to_dtype(DType::BF16).to_vec_f64();
        assert_eq!(bv[..3], [0.10009765625, 1.0, 1.015625]);
        assert!(bv[3].is_finite() && (bv[3] / 1e38 - 1.0).abs() < 4e-3, "bf16 keeps f32's range");
        let third = t64(&[1.0 / 3.0], &[1]).to_dtype(DType::F32).to_vec_f64();
        assert_eq!(third, vec![0.3333333432674408]);
    }

    #[test]
    fn integer_and_bool_conversions() {
        let x = Tensor::from_vec(vec![1.9, -1.9, 2.5, -0.4, 0.0], &[5]);
        assert_eq!(x.to_dtype(DType::I64).to_vec_i64(), vec![1, -1, 2, 0, 0], "truncation toward zero");
        assert_eq!(x.to_dtype(DType::Bool).to_vec_bool(), vec![true, true, true, true, false]);
        let i = Tensor::from_vec_i64(vec![3, -2, 0, 1 << 53], &[4]);
        assert_eq!(i.to_dtype(DType::F64).to_vec_f64(), vec![3.0, -2.0, 0.0, 9007199254740992.0]);
        assert_eq!(i.to_dtype(DType::Bool).to_vec_bool(), vec![true, true, false, true]);
        assert_eq!(i.to_dtype(DType::F16).to_vec(), vec![3.0, -2.0, 0.0, f32::INFINITY]);
        let b = Tensor::from_vec_bool(vec![true, false], &[2]);
        assert_eq!(b.to_dtype(DType::F32).to_vec(), vec![1.0, 0.0]);
        assert_eq!(b.to_dtype(DType::I64).to_vec_i64(), vec![1, 0]);
        assert_eq!(b.to_dtype(DType::BF16).to_dtype(DType::Bool).to_vec_bool(), vec![true, false]);
        // Round trip i64 -> f32 -> i64 is exact below 2^24.
        let j = Tensor::from_vec_i64(vec![16_777_215, -7], &[2]);
        assert_eq!(j.to_dtype(DType::F32).to_dtype(DType::I64).to_vec_i64(), vec![16_777_215, -7]);
    }

    #[test]
    fn to_dtype_of_a_strided_view_and_the_same_dtype() {
        let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
        let y = x.t().to_dtype(DType::F64);
        assert!(y.is_contiguous());
        assert_eq!(y.to_vec_f64(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        assert_eq!(x.to_dtype(DType::F32).id(), x.id(), "same dtype returns the tensor itself");
    }

    #[test]
    fn to_dtype_backward_converts_the_gradient_back() {
        let x = Tensor::from_vec(vec![1.0, 2.0], &[2]).requires_grad_(true);
        let y = x.to_dtype(DType::F64);
        assert_eq!(y.grad_fn_name(), Some("to_dtype"));
        (y.exp() * t64(&[1.0, 3.0], &[2])).sum().backward();
        let g = x.grad().unwrap();
        assert_eq!(g.dtype(), DType::F32);
        crate::testing::assert_close(&g.to_vec(), &[1f32.exp(), 3.0 * 2f32.exp()], 1e-6, 1e-6);
        // A half-precision leaf gets a half-precision gradient.
        let h = Tensor::from_vec(vec![0.5, -1.0], &[2]).to_dtype(DType::F16).requires_grad_(true);
        (h.to_dtype(DType::F32) * 4.0).sum().backward();
        let gh = h.grad().unwrap();
        assert_eq!((gh.dtype(), gh.to_vec()), (DType::F16, vec![4.0, 4.0]));
        // Conversions to non-float types cut the graph.
        assert!(!x.to_dtype(DType::I64).requires_grad());
        // Finite differences through an f32 round trip need a coarser step.
        let o = GradcheckOptions { eps: 1e-3, atol: 1e-3, rtol: 1e-3 };
        gradcheck_with(|t| t[0].to_dtype(DType::F32).exp().to_dtype(DType::F64), &[t64(&[0.3, -1.2, 0.8], &[3])], o)
            .unwrap();
    }

    // ---- meta device --------------------------------------------------------------------

    #[test]
    fn meta_tensors_propagate_shapes_and_dtypes_through_a_model() {
        let x = Tensor::full_on(&[8, 3, 16, 16], 0.0, DType::F32, Device::Meta);
        let w = Tensor::full_on(&[4, 3, 3, 3], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        let l = Tensor::full_on(&[10, 64], 0.0, DType::F32, Device::Meta).requires_grad_(true);
        let h = x.conv2d(&w, None, crate::ops::Conv2dOptions { padding: (1, 1), ..Default::default() });
        let h = h.relu().max_pool2d(crate::ops::Pool2dOptions::new(4)).flatten(1, -1);
        assert_eq!(h.shape(), &[8, 64]);
        let logits = h.matmul(&l.t());
        let loss = logits.log_softmax(-1).mean();
        assert_eq!((loss.shape(), loss.dtype(), loss.device()), (&[] as &[usize], DType::F32, Device::Meta));
        assert!(loss.requires_grad());
        loss.backward();
        assert_eq!((w.grad().unwrap().shape(), w.grad().unwrap().device()), (&[4, 3, 3, 3][..], Device::Meta));
        assert_eq!(format!("{l}"), "tensor(..., size=[10, 64], device=meta, requires_grad=true)");
    }

    #[test]
    fn to_device_round_trip() {
        let x = Tensor::from_vec(vec![1.0, 2.0], &[2]);
        let m = x.to_device(Device::Meta);
        assert_eq!((m.device(), m.shape(), m.dtype()), (Device::Meta, &[2][..], DType::F32));
        let back = m.to_device(Device::Cpu);
        assert_eq!(back.to_vec(), vec![0.0, 0.0], "materialising gives zeros, like to_empty");
        assert_eq!(x.to_device(Device::Cpu).id(), x.id());
    }

    #[test]
    #[should_panic(
        expected = "to_vec: tensor on the meta device has no values (shape [2, 3]); materialise it first with `to_device(Device::Cpu)`"
    )]
    fn to_vec_on_meta_panics_with_a_clear_message() {
        Tensor::full_on(&[2, 3], 0.0, DType::F32, Device::Meta).to_vec();
    }

    #[test]
    #[should_panic(expected = "tensor on the meta device has no values (shape [])")]
    fn item_on_meta_panics_with_a_clear_message() {
        Tensor::full_on(&[], 0.0, DType::F64, Device::Meta).item();
    }

    #[test]
    #[should_panic(
        expected = "matmul: expected all tensors on one device, got meta (shape [2, 2]) and cpu (shape [2, 2])"
    )]
    fn mixing_meta_and_cpu_panics() {
        Tensor::full_on(&[2, 2], 0.0, DType::F32, Device::Meta).matmul(&Tensor::ones(&[2, 2]));
    }

    // ---- random generator ---------------------------------------------------------------

    #[test]
    fn manual_seed_makes_randn_and_rand_reproducible() {
        let _rng = rng_lock();
        manual_seed(123);
        let (a, b) = (Tensor::randn(&[50]).to_vec(), Tensor::rand(&[50]).to_vec());
        manual_seed(123);
        assert_eq!(Tensor::randn(&[50]).to_vec(), a);
        assert_eq!(Tensor::rand(&[50]).to_vec(), b);
        manual_seed(124);
        assert_ne!(Tensor::randn(&[50]).to_vec(), a);
        manual_seed(5);
        let p = Tensor::randperm(10).to_vec_i64();
        manual_seed(5);
        assert_eq!(Tensor::randperm(10).to_vec_i64(), p);
        let mut sorted = p.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<i64>>());
    }

    #[test]
    fn random_constructors_have_the_right_distributions() {
        let _rng = rng_lock();
        manual_seed(0);
        let n = 20_000;
        let u = Tensor::rand(&[n]).to_vec();
        assert!(u.iter().all(|&v| (0.0..1.0).contains(&v)));
        let mean = u.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        assert!((mean - 0.5).abs() < 0.01, "uniform mean {mean}");
        let z = Tensor::randn(&[n]);
        let (m, v) = (z.mean().item(), z.var_dims::<usize>(&[], 1, false).item());
        assert!(m.abs() < 0.03 && (v - 1.0).abs() < 0.05, "normal mean {m} var {v}");
        let g = Tensor::normal(&[n], 3.0, 0.5);
        assert!(
            (g.mean().item() - 3.0).abs() < 0.02 && (g.var_dims::<usize>(&[], 1, false).item() - 0.25).abs() < 0.02
        );
        let w = Tensor::uniform(&[n], -2.0, -1.0).to_vec();
        assert!(w.iter().all(|&v| (-2.0..-1.0).contains(&v)));
    }

    // ---- constructors and values --------------------------------------------------------

    #[test]
    fn constructors() {
        assert_eq!(Tensor::eye(2).to_vec(), vec![1.0, 0.0, 0.0, 1.0]);
        assert_eq!(Tensor::arange(1.0, 0.0, -0.25).to_vec(), vec![1.0, 0.75, 0.5, 0.25]);
        assert_eq!(Tensor::full(&[2], 1.5).to_vec(), vec![1.5, 1.5]);
        let i = Tensor::from_vec_i64(vec![1, 2], &[2]);
        assert_eq!((Tensor::ones_like(&i).dtype(), Tensor::ones_like(&i).to_vec_i64()), (DType::I64, vec![1, 1]));
        assert_eq!(Tensor::scalar(2.0).shape(), &[] as &[usize]);
        assert!(Tensor::try_from_vec(vec![1.0; 3], &[2, 2]).is_err());
        assert_eq!(
            Tensor::try_from_vec(vec![1.0; 3], &[2, 2]).unwrap_err().to_string(),
            "Tensor::try_from_vec: shape [2, 2] needs 4 elements, got 3"
        );
        assert_eq!(Tensor::from_data(vec![true], &[1]).unwrap().dtype(), DType::Bool);
        assert_eq!(format!("{}", t64(&[1.0, 2.5], &[2])), "tensor([1.0000, 2.5000], dtype=f64)");
        assert_eq!(format!("{}", leaf(&[1.0], &[1]) * 2.0), "tensor([2.0000], dtype=f64, grad_fn=affine)");
    }

    #[test]
    #[should_panic(expected = "Tensor::from_vec: shape [2, 2] needs 4 elements, got 3")]
    fn from_vec_with_wrong_length_panics() {
        Tensor::from_vec(vec![1.0; 3], &[2, 2]);
    }

    #[test]
    #[should_panic(expected = "item: a tensor with 2 elements (shape [2]) cannot be converted to a scalar")]
    fn item_of_a_vector_panics() {
        Tensor::ones(&[2]).item();
    }

    // ---- in-place updates and autograd state --------------------------------------------

    #[test]
    fn in_place_updates_are_copy_on_write() {
        let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
        let view = x.t();
        x.add_(&Tensor::from_vec(vec![10.0, 20.0], &[2]));
        assert_eq!(x.to_vec(), vec![11.0, 22.0, 13.0, 24.0]);
        assert_eq!(view.to_vec(), vec![1.0, 3.0, 2.0, 4.0], "the old view keeps its values");
        x.mul_(0.5);
        assert_eq!(x.to_vec(), vec![5.5, 11.0, 6.5, 12.0]);
        x.fill_(7.0);
        assert_eq!(x.to_vec(), vec![7.0; 4]);
        x.zero_();
        assert_eq!(x.to_vec(), vec![0.0; 4]);
        // copy_ into a strided view writes through its own layout.
        let t = Tensor::from_vec(vec![0.0; 4], &[2, 2]).t();
        t.copy_(&Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]));
        assert_eq!(t.to_vec(), vec![1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn in_place_on_a_parameter_inside_no_grad_is_allowed() {
        let w = Tensor::ones(&[2]).requires_grad_(true);
        no_grad(|| w.add_(&Tensor::full(&[2], 0.5)));
        assert_eq!(w.to_vec(), vec![1.5, 1.5]);
        assert!(w.requires_grad() && w.is_leaf());
    }

    #[test]
    #[should_panic(expected = "add_: in-place update of a tensor that requires grad; run it inside `no_grad(|| ...)`")]
    fn in_place_on_a_tensor_requiring_grad_panics() {
        Tensor::ones(&[2]).requires_grad_(true).add_(&Tensor::ones(&[2]));
    }

    #[test]
    #[should_panic(expected = "copy_: in-place update of a tensor that requires grad")]
    fn copy_into_a_tensor_requiring_grad_panics() {
        Tensor::ones(&[2]).requires_grad_(true).copy_(&Tensor::ones(&[2]));
    }

    #[test]
    #[should_panic(expected = "requires_grad_: only tensors of floating-point dtype can require gradients, got i64")]
    fn requires_grad_on_integers_panics() {
        Tensor::from_vec_i64(vec![1], &[1]).requires_grad_(true);
    }

    #[test]
    #[should_panic(expected = "requires_grad_: you can only change requires_grad flags of leaf tensors")]
    fn clearing_requires_grad_on_a_non_leaf_panics() {
        (Tensor::ones(&[1]).requires_grad_(true) * 2.0).requires_grad_(false);
    }

    #[test]
    fn detach_shares_values_but_not_the_graph() {
        let x = leaf(&[1.0, 2.0], &[2]);
        let y = &x * 3.0;
        let d = y.detach();
        assert!(!d.requires_grad() && d.is_leaf() && d.grad_fn_name().is_none());
        assert!(Arc::ptr_eq(&d.storage_arc(), &y.storage_arc()));
        assert_ne!(d.id(), y.id());
        (&d * &x).sum().backward();
        assert_eq!(grad(&x), vec![3.0, 6.0], "no gradient flows through the detached factor");
    }

    #[test]
    fn clones_are_the_same_tensor() {
        let x = leaf(&[1.0], &[1]);
        let c = x.clone();
        assert_eq!(c.id(), x.id());
        (&c * 2.0).sum().backward();
        assert_eq!(grad(&x), vec![2.0]);
        x.zero_grad();
        assert!(c.grad().is_none());
        x.set_grad(Some(t64(&[5.0], &[1])));
        assert_eq!(grad(&c), vec![5.0]);
    }

    #[test]
    #[should_panic(expected = "set_grad: gradient of shape [2] for a tensor of shape [1]")]
    fn set_grad_with_the_wrong_shape_panics() {
        leaf(&[1.0], &[1]).set_grad(Some(t64(&[1.0, 2.0], &[2])));
    }

    #[test]
    fn contiguous_and_to_device_backward() {
        let x = leaf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
        (x.t().contiguous() * t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])).sum().backward();
        assert_eq!(grad(&x), vec![1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
        // Through a meta round trip the values are gone but the gradient still arrives.
        let y = leaf(&[1.0, 2.0], &[2]);
        let back = y.to_device(Device::Meta).to_device(Device::Cpu);
        assert!(back.requires_grad());
        (back + 1.0).exp().sum().backward();
        assert_close64(&grad(&y), &[1f64.exp(), 1f64.exp()], 1e-15);
    }
}
