//! [`autocast`]: PyTorch's `torch.autocast` on the CPU. Inside the scope, the ops of
//! [`POLICIES`] cast their floating-point arguments first: matrix products, linear layers,
//! convolutions and attention to the scope's half dtype (`bf16` or `f16`), the losses and
//! a few numerically delicate ops to `f32`, `cat`/`stack` to the widest of their
//! arguments' dtypes; every other op runs in the dtype it is given, with PyTorch's type
//! promotion between floating dtypes (a `bf16` activation plus an `f32` residual is `f32`).
//!
//! The casts are ordinary differentiable [`Tensor::to_dtype`] calls, so parameters stay
//! `f32` ("master weights") and their gradients arrive in `f32`. An op that casts runs
//! with autocast excluded (PyTorch's dispatcher does the same), so the ops it is built
//! from do not cast again.
//!
//! Autocast applies to the ops a user calls, not to the ops nn builds an op from: PyTorch
//! casts at its dispatcher, which sees `aten::mean` as one op, while nn's `mean` is a
//! `sum` and a division, and that `sum` must not turn a `bf16` mean into an `f32` one.
//! So every public op that calls listed ops marks itself as running while autocast is on
//! (the scope that also delimits an op for [`trace`](crate::trace), or an explicit mark in
//! composites without one), and an op called inside another runs in the dtype it is given.
//! On the CPU, `einsum` is left unmarked: PyTorch's CPU lists do not name it, and the `bmm`
//! it is built from is cast there; its CUDA list names it, so on the GPU it is one op.
//!
//! The state is per thread and per device kind, as PyTorch's is per device type: a CPU
//! scope does not touch GPU tensors, and a GPU scope (any `gpu:n`, as `"cuda"` covers
//! every CUDA device) does not touch CPU tensors. The GPU scope follows PyTorch's CUDA
//! lists ([`GPU_POLICIES`]): on top of the CPU's, softmax, the norms, the elementwise
//! functions and reductions of CUDA's `f32` list in `f32`, `einsum` in the half dtype and
//! `scatter_add` promoted. [`policy`] looks an op up for a device.

use crate::names;
use std::cell::Cell;

use crate::device::Device;
use crate::dtype::DType;
use crate::tensor::Tensor;

/// What autocast does to an op's floating-point arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CastPolicy {
    /// Cast to the autocast dtype (PyTorch's "lower precision fp" list). `f64` arguments
    /// are left alone, as PyTorch leaves them.
    Lower,
    /// Cast to `f32` (PyTorch's "fp32" list). `f64` arguments are left alone.
    F32,
    /// Cast to the widest floating dtype among the arguments (PyTorch's "promote" list).
    Promote,
}

/// The ops autocast changes on the CPU, with PyTorch 2.15's CPU lists (`torch.autocast(
/// "cpu")`), restricted to the ops nn has. Written once: every op looks itself up here by
/// the name it reports in errors and traces, and `tests/fixtures/pytorch/autocast.py`
/// records what PyTorch gives for each, which a test compares.
///
/// ```
/// use nn_core::amp::{CastPolicy, POLICIES};
/// let policy = |op| POLICIES.iter().find(|(name, _)| *name == op).map(|p| p.1);
/// assert_eq!(policy("linear"), Some(CastPolicy::Lower));
/// assert_eq!(policy("cross_entropy"), Some(CastPolicy::F32));
/// assert_eq!(policy("softmax"), None); // runs in its argument's dtype
/// ```
pub const POLICIES: &[(&str, CastPolicy)] = &[
    // Lower precision: the matrix products and what is built on them.
    (names::MATMUL, CastPolicy::Lower),
    (names::ADDMM, CastPolicy::Lower),
    (names::LINEAR, CastPolicy::Lower),
    (names::CONV1D, CastPolicy::Lower),
    (names::CONV2D, CastPolicy::Lower),
    (names::CONV3D, CastPolicy::Lower),
    (names::CONV_TRANSPOSE1D, CastPolicy::Lower),
    (names::CONV_TRANSPOSE2D, CastPolicy::Lower),
    (names::SCALED_DOT_PRODUCT_ATTENTION, CastPolicy::Lower),
    // f32: the losses and the reductions PyTorch keeps in f32 on the CPU.
    (names::NLL_LOSS, CastPolicy::F32),
    (names::CROSS_ENTROPY, CastPolicy::F32),
    (names::MSE_LOSS, CastPolicy::F32),
    (names::L1_LOSS, CastPolicy::F32),
    (names::BINARY_CROSS_ENTROPY_WITH_LOGITS, CastPolicy::F32),
    (names::QUANTILE, CastPolicy::F32),
    // Promote: joins of several tensors.
    (names::CAT, CastPolicy::Promote),
    (names::STACK, CastPolicy::Promote),
    // On PyTorch's CUDA promote list; its CPU autocast refuses mixed dtypes here, nn
    // promotes on both devices (a bf16 activation into a Bilinear layer's f32 weight).
    (names::BILINEAR, CastPolicy::Promote),
];

/// What autocast does on the GPU device beyond [`POLICIES`]: PyTorch 2.15's CUDA lists
/// (`torch.autocast("cuda")`) are the CPU's plus these entries (`f32` ones, `einsum` lower,
/// `scatter_add` promoted), restricted to the ops nn has. `tests/fixtures/pytorch/autocast.py` records what PyTorch's own CUDA
/// autocast kernels give for each call (on fake CUDA tensors, so no GPU is needed), and a
/// test runs the same calls on `gpu:0` and compares. Look an op up on either device with
/// [`policy`].
///
/// An op called inside another is not cast (see the [module](crate::amp) docs): a `bf16`
/// `mean` stays `bf16` on the GPU, as in PyTorch, though the `sum` it is built from is on
/// this list. One difference: PyTorch's CUDA `quantile` refuses half inputs, nn's keeps
/// the CPU list's `f32` policy and computes.
///
/// ```
/// use nn_core::amp::{policy, CastPolicy};
/// use nn_core::Device;
/// assert_eq!(policy(Device::Gpu(0), "linear"), Some(CastPolicy::Lower));
/// assert_eq!(policy(Device::Gpu(0), "softmax"), Some(CastPolicy::F32));
/// assert_eq!(policy(Device::Gpu(0), "exp"), Some(CastPolicy::F32));
/// assert_eq!(policy(Device::Cpu, "softmax"), None); // its input's dtype on the CPU
/// ```
pub const GPU_POLICIES: &[(&str, CastPolicy)] = &[
    (names::SOFTMAX, CastPolicy::F32),
    (names::LOG_SOFTMAX, CastPolicy::F32),
    (names::LAYER_NORM, CastPolicy::F32),
    (names::GROUP_NORM, CastPolicy::F32),
    (names::RMS_NORM, CastPolicy::F32),
    // The elementwise functions (`powf` and `pow` are both `aten::pow`; `square` is
    // `pow(x, 2)` in PyTorch; a scalar divided by a tensor is `__rtruediv__`).
    (names::EXP, CastPolicy::F32),
    (names::LOG, CastPolicy::F32),
    (names::POW, CastPolicy::F32),
    (names::POWF, CastPolicy::F32),
    (names::SQUARE, CastPolicy::F32),
    (names::RECIPROCAL, CastPolicy::F32),
    (names::SCALAR_DIV, CastPolicy::F32),
    (names::RSQRT, CastPolicy::F32),
    (names::ERFINV, CastPolicy::F32),
    (names::SOFTPLUS, CastPolicy::F32),
    // The reductions and scans.
    (names::SUM, CastPolicy::F32),
    (names::LOGSUMEXP, CastPolicy::F32),
    (names::CUMSUM, CastPolicy::F32),
    (names::CUMPROD, CastPolicy::F32),
    (names::NORM, CastPolicy::F32),
    // Resampling (`upsample_nearest*`, `upsample_bilinear2d`, ...).
    (names::INTERPOLATE, CastPolicy::F32),
    // PyTorch's CUDA lower-precision list names `einsum` itself (on the CPU only the `bmm`
    // inside it is cast).
    (names::EINSUM, CastPolicy::Lower),
    // PyTorch's CUDA promote list.
    (names::SCATTER_ADD, CastPolicy::Promote),
];

/// What autocast does on the CPU only, beyond [`POLICIES`]: entries of PyTorch 2.15's CPU
/// f32 list that its CUDA list lacks. `pad` in the reflect and replicate modes is
/// `reflection_pad1d/2d` / `replication_pad1d/2d/3d` in PyTorch (f32 under CPU autocast,
/// the input's dtype under CUDA autocast); its constant and circular modes, and reflect
/// padding of three dims (`reflection_pad3d`), are not listed.
///
/// ```
/// use nn_core::amp::{autocast, policy, CastPolicy};
/// use nn_core::ops::PadMode;
/// use nn_core::{DType, Device, Tensor};
/// assert_eq!(policy(Device::Cpu, "replication_pad"), Some(CastPolicy::F32));
/// assert_eq!(policy(Device::Gpu(0), "replication_pad"), None);
/// let x = Tensor::randn(&[1, 2, 3]).to_dtype(DType::BF16);
/// let y = autocast(Device::Cpu, DType::BF16, || x.pad(&[1, 1], PadMode::Replicate, 0.0));
/// assert_eq!(y.dtype(), DType::F32);
/// ```
pub const CPU_POLICIES: &[(&str, CastPolicy)] =
    &[(names::REFLECTION_PAD, CastPolicy::F32), (names::REPLICATION_PAD, CastPolicy::F32)];

/// What autocast does to `op` (by the name it reports in errors) on `device`'s kind:
/// [`POLICIES`] and [`CPU_POLICIES`] on the CPU, [`POLICIES`] and [`GPU_POLICIES`] on the
/// GPU; `None` for an op it leaves alone.
pub fn policy(device: Device, op: &str) -> Option<CastPolicy> {
    let own = if matches!(device, Device::Gpu(_)) { GPU_POLICIES } else { CPU_POLICIES };
    own.iter().chain(POLICIES).find(|(name, _)| *name == op).map(|p| p.1)
}

/// The dtypes an autocast scope may use.
const HALF: [DType; 2] = [DType::BF16, DType::F16];

thread_local! {
    /// The CPU scope's dtype, when one is active on this thread.
    static CPU: Cell<Option<DType>> = const { Cell::new(None) };
    /// The GPU scope's dtype (every `gpu:n`), when one is active on this thread.
    static GPU: Cell<Option<DType>> = const { Cell::new(None) };
    /// Open guards of each scope (their nesting is checked as they drop).
    static CPU_GUARDS: Cell<u32> = const { Cell::new(0) };
    static GPU_GUARDS: Cell<u32> = const { Cell::new(0) };
    static LIFTED_GUARDS: Cell<u32> = const { Cell::new(0) };
    /// Set while an op that cast its arguments runs the op proper.
    static EXCLUDED: Cell<bool> = const { Cell::new(false) };
    /// How many public ops are running on this thread, counted while an autocast scope is
    /// on: above 0, an op is a part of another and is not cast.
    static OP_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Open while a public op runs under autocast (see [`inside_op`]). Not `Send`: it must drop
/// on the thread whose count it raised.
pub(crate) struct InsideOp(std::marker::PhantomData<*const ()>);

impl Drop for InsideOp {
    fn drop(&mut self) {
        OP_DEPTH.with(|d| d.set(d.get() - 1));
    }
}

/// Marks a public op as running, when an autocast scope is on for either device kind (the
/// ops it calls are then its parts, which autocast leaves alone); `None`, at the cost of
/// two thread-local reads, otherwise. Keep the guard until the op returns.
#[inline]
pub(crate) fn inside_op() -> Option<InsideOp> {
    if CPU.with(Cell::get).is_none() && GPU.with(Cell::get).is_none() {
        return None;
    }
    OP_DEPTH.with(|d| d.set(d.get() + 1));
    Some(InsideOp(std::marker::PhantomData))
}

/// [`inside_op`] for an op that is one op to autocast only where a table lists it (on
/// `device`'s kind): `einsum` on the GPU.
pub(crate) fn inside_listed_op(op: &str, device: Device) -> Option<InsideOp> {
    policy(device, op).and_then(|_| inside_op())
}

/// Restores the autocast state it replaced when dropped (the guard form of [`autocast`]).
///
/// Guards drop innermost first on the thread that made them: the guard is not `Send`, and
/// one dropped while a guard of its device kind made after it is still open panics (it
/// would restore the wrong state, leaving autocast on or off for the rest of the thread).
///
/// ```
/// use nn_core::amp::{autocast_dtype, AutocastGuard};
/// use nn_core::{DType, Device, Tensor};
/// let w = Tensor::randn(&[4, 3]);
/// {
///     let _amp = AutocastGuard::new(Device::Cpu, DType::BF16);
///     assert_eq!(autocast_dtype(Device::Cpu), Some(DType::BF16));
///     assert_eq!(Tensor::randn(&[2, 4]).matmul(&w).dtype(), DType::BF16);
/// }
/// assert_eq!(autocast_dtype(Device::Cpu), None);
/// assert_eq!(Tensor::randn(&[2, 4]).matmul(&w).dtype(), DType::F32);
/// ```
#[must_use = "autocast ends as soon as the guard is dropped"]
pub struct AutocastGuard {
    /// The GPU's scope (else the CPU's).
    gpu: bool,
    prev: Option<DType>,
    /// With the scope enabled: whether autocast was excluded before (a backward pass
    /// excludes it; a scope opened inside, in a hook, casts there, as in PyTorch).
    prev_excluded: Option<bool>,
    nesting: super::nesting::Nesting,
    /// Opened where autocast was excluded: such scopes of both kinds share the one
    /// exclusion they lift, so their nesting is checked across kinds too.
    lifted: Option<super::nesting::Nesting>,
}

impl AutocastGuard {
    /// Turns autocast to `dtype` on for `device`'s kind on this thread until the guard
    /// drops.
    ///
    /// On the GPU, `F16` and `BF16` work on every adapter: matrix products use the
    /// adapter's `f16` arithmetic where it has `SHADER_F16` and otherwise read both types
    /// as packed words and compute in `f32`, as every elementwise kernel does.
    ///
    /// # Panics
    /// When `dtype` is not `BF16` or `F16` (PyTorch warns and disables autocast for an
    /// unsupported dtype, nn refuses), or `device` is the meta device, or a GPU that
    /// cannot be opened (the message names it and why).
    #[track_caller]
    pub fn new(device: Device, dtype: DType) -> Self {
        Self::with_enabled(device, dtype, true)
    }

    /// As [`new`](Self::new), or, with `enabled = false`, turns autocast off for the
    /// guard's life (PyTorch's `autocast(..., enabled=False)` inside an autocast region).
    ///
    /// # Panics
    /// As [`new`](Self::new) (the dtype is checked even when disabled).
    #[track_caller]
    pub fn with_enabled(device: Device, dtype: DType, enabled: bool) -> Self {
        if !HALF.contains(&dtype) {
            panic!("autocast: the dtype must be bf16 or f16, got {dtype}");
        }
        let state = match device {
            Device::Cpu => &CPU,
            Device::Gpu(_) => {
                if let Err(e) = device.check() {
                    panic!("autocast on {device}: {e}");
                }
                &GPU
            }
            Device::Meta => panic!("autocast: the meta device computes nothing; use Device::Cpu or Device::Gpu"),
        };
        let (depth, what) =
            if device == Device::Cpu { (&CPU_GUARDS, "CPU autocast") } else { (&GPU_GUARDS, "GPU autocast") };
        let nesting = super::nesting::Nesting::enter(depth, what);
        let prev = state.with(|c| c.replace(enabled.then_some(dtype)));
        let prev_excluded = enabled.then(|| EXCLUDED.with(|e| e.replace(false)));
        let lifted = (prev_excluded == Some(true))
            .then(|| super::nesting::Nesting::enter(&LIFTED_GUARDS, "autocast (opened in a backward pass)"));
        AutocastGuard { gpu: device != Device::Cpu, prev, prev_excluded, nesting, lifted }
    }
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        // Both scopes are left (and their restores registered) before either panics.
        let lifted = self.lifted.as_ref().and_then(|lifted| lifted.leave(|| {}));
        let (prev, prev_excluded, gpu) = (self.prev, self.prev_excluded, self.gpu);
        let left = self.nesting.leave(move || {
            if let Some(excluded) = prev_excluded {
                EXCLUDED.with(|e| e.set(excluded));
            }
            if gpu {
                GPU.with(|c| c.set(prev));
            } else {
                CPU.with(|c| c.set(prev));
            }
        });
        if let Some(message) = lifted.or(left) {
            panic!("{message}");
        }
    }
}

/// Runs `f` with autocast to `dtype` (`BF16` or `F16`) on `device` (the CPU), like
/// `with torch.autocast("cpu", dtype=...):`. Scopes nest; the innermost wins.
///
/// ```
/// use nn_core::amp::autocast;
/// use nn_core::{no_grad, DType, Device, Tensor};
/// let w = Tensor::randn(&[3, 4]).requires_grad_(true);
/// let x = Tensor::randn(&[2, 4]);
/// let loss = autocast(Device::Cpu, DType::BF16, || {
///     let y = x.matmul(&w.t()); // lower-precision list: bf16
///     assert_eq!(y.dtype(), DType::BF16);
///     let z = no_grad(|| x.matmul(&w.t())); // no_grad inside autocast: still bf16
///     assert_eq!(z.dtype(), DType::BF16);
///     y.sum()
/// });
/// loss.backward();
/// // The parameter stayed f32, and so does its gradient.
/// assert_eq!(w.grad().unwrap().dtype(), DType::F32);
/// ```
///
/// # Panics
/// As [`AutocastGuard::new`].
#[track_caller]
pub fn autocast<R>(device: Device, dtype: DType, f: impl FnOnce() -> R) -> R {
    let _guard = AutocastGuard::new(device, dtype);
    f()
}

/// [`autocast`] with PyTorch's `enabled` argument: `false` turns autocast off inside an
/// autocast region (for a part of the model that must run in `f32`).
///
/// ```
/// use nn_core::amp::{autocast, autocast_enabled};
/// use nn_core::{DType, Device, Tensor};
/// let (a, b) = (Tensor::randn(&[2, 2]), Tensor::randn(&[2, 2]));
/// autocast(Device::Cpu, DType::BF16, || {
///     let y = autocast_enabled(Device::Cpu, DType::BF16, false, || a.matmul(&b));
///     assert_eq!(y.dtype(), DType::F32);
/// });
/// ```
///
/// # Panics
/// As [`AutocastGuard::new`].
#[track_caller]
pub fn autocast_enabled<R>(device: Device, dtype: DType, enabled: bool, f: impl FnOnce() -> R) -> R {
    let _guard = AutocastGuard::with_enabled(device, dtype, enabled);
    f()
}

/// The dtype of the autocast scope active for `device`'s kind on this thread, if any
/// (`torch.get_autocast_dtype` and `torch.is_autocast_enabled` in one).
pub fn autocast_dtype(device: Device) -> Option<DType> {
    match device {
        Device::Cpu => CPU.with(|c| c.get()),
        Device::Gpu(_) => GPU.with(|c| c.get()),
        Device::Meta => None,
    }
}

/// Whether autocast may cast an op's arguments on this thread: a scope is on for either
/// device kind, autocast is not excluded, and no op is running (whose parts are not cast).
/// The op entry's cheap test before it gathers the arguments.
#[inline]
pub(crate) fn autocast_might_apply() -> bool {
    (CPU.with(Cell::get).is_some() || GPU.with(Cell::get).is_some())
        && !EXCLUDED.with(Cell::get)
        && OP_DEPTH.with(Cell::get) == 0
}

/// The autocast dtype for an op on tensors of `device`, unless autocast is off there or
/// excluded (inside an op that cast its arguments).
fn active(device: Device) -> Option<DType> {
    if EXCLUDED.with(|e| e.get()) {
        return None;
    }
    autocast_dtype(device)
}

/// Whether autocast casts a tensor of this dtype: floating, and not `f64`.
fn eligible(dtype: DType) -> bool {
    dtype.is_float() && dtype != DType::F64
}

/// The widest of floating dtypes (`f64` > `f32` > the half types; `bf16` with `f16` is
/// `f32`, as PyTorch promotes them).
fn widest(dtypes: impl Iterator<Item = DType>) -> Option<DType> {
    let rank = |d: DType| match d {
        DType::F64 => 3,
        DType::F32 => 2,
        _ => 1,
    };
    dtypes.filter(|d| d.is_float()).fold(None, |acc: Option<DType>, d| match acc {
        None => Some(d),
        Some(a) if a == d => Some(a),
        Some(a) if rank(a) == 1 && rank(d) == 1 => Some(DType::F32),
        Some(a) => Some(if rank(d) > rank(a) { d } else { a }),
    })
}

/// Under an active autocast scope for the arguments' device, `op`'s arguments cast by its
/// [policy](POLICIES) (absent optional arguments stay absent, ineligible ones as they
/// are); `None` when autocast does not apply: no scope, no policy, excluded, called inside
/// another op, or nothing to cast.
fn cast_args(op: &str, args: &[Option<&Tensor>]) -> Option<Vec<Option<Tensor>>> {
    let device = args.iter().flatten().next()?.device();
    let half = active(device)?;
    if OP_DEPTH.with(Cell::get) > 0 {
        return None;
    }
    let target = match policy(device, op)? {
        CastPolicy::Lower => half,
        CastPolicy::F32 => DType::F32,
        CastPolicy::Promote => widest(args.iter().flatten().map(|t| t.dtype()))?,
    };
    let cast = |t: &Tensor| eligible(t.dtype()) && t.dtype() != target && t.device() == device;
    if !args.iter().flatten().any(|t| cast(t)) {
        return None;
    }
    Some(args.iter().map(|a| a.map(|t| if cast(t) { t.to_dtype(target) } else { t.clone() })).collect())
}

/// The ops' entry: under autocast, `run` on the arguments cast by `op`'s policy, with
/// autocast excluded (so the op's own parts do not cast again); `None`, and `run` not
/// called, when autocast does not apply (also inside another op). Ops reach it through
/// their entry (`autograd::entry`), before their trace frame opens.
pub(crate) fn cast_call<R>(op: &str, args: &[Option<&Tensor>], run: impl FnOnce(&[Option<&Tensor>]) -> R) -> Option<R> {
    let cast = cast_args(op, args)?;
    let refs: Vec<Option<&Tensor>> = cast.iter().map(Option::as_ref).collect();
    Some(excluded(|| run(&refs)))
}

/// Excludes autocast on this thread until dropped (restoring the previous state, also on
/// a panic). Backward passes run under one: a gradient keeps its forward's dtype.
pub(crate) struct Excluded(bool);

impl Excluded {
    /// Excludes autocast until the guard drops.
    pub(crate) fn new() -> Self {
        Excluded(EXCLUDED.with(|e| e.replace(true)))
    }
}

impl Drop for Excluded {
    fn drop(&mut self) {
        EXCLUDED.with(|e| e.set(self.0));
    }
}

/// Runs `f` with autocast excluded on this thread.
fn excluded<R>(f: impl FnOnce() -> R) -> R {
    let _excluded = Excluded::new();
    f()
}
