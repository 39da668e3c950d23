//! Parameter updates (an optimizer's step) as backend operations: the [`UpdateRule`] table,
//! where each optimizer writes its elementwise update once per form (a generic CPU loop and
//! WGSL statements for the GPU), and [`UpdateState`], its per-parameter state buffers, kept
//! on the parameter's device in its dtype.
//!
//! An optimizer (`crate::optim`) decides *which* parameters step and with which
//! hyper-parameters; [`Storage::update`] runs the rule where the parameter lives: on the
//! CPU in parts over the thread team (each part in the widest vector copy the CPU runs),
//! on a GPU as one kernel over the parameter, its gradient and its state.

use std::ops::Range;

use super::{cpu, CpuStorage, Storage};
use crate::device::Device;
use crate::dtype::{DType, FloatElement};
use crate::shape::Layout;

/// An optimizer's elementwise update of a parameter from its gradient and state buffers.
pub(crate) trait UpdateRule: Sync {
    /// The optimizer's name, in messages.
    const NAME: &'static str;

    /// The update of `p` (a contiguous run of the parameter) with its gradient `g` and its
    /// state buffers `state` (the same run of each), in `T`; `fresh` is true on the step
    /// that created the state (zeros). Inlined into the CPU backend's vector copies: write
    /// it as plain loops over slices of one length.
    fn cpu<T: FloatElement>(&self, p: &mut [T], g: &[T], state: &mut [&mut [T]], fresh: bool);

    /// The update as WGSL statements, for parameters on a GPU: they read and assign `p`
    /// (the parameter), read `g` (its gradient) and update the state `b0`, `b1`, `b2`, with
    /// the scalars `k[0]`, `k[1]`, ... in the parameter's dtype. `k[0]` is 1 on the step
    /// that created the state; the returned scalars are `k[1..]`.
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    fn wgsl(&self) -> (&'static str, Vec<f64>);
}

/// An optimizer's state buffers for one parameter: as many as its rule keeps, each as long
/// as the parameter, in its dtype, on its device once [`conform`](UpdateState::conform)ed.
#[derive(Clone, Debug)]
pub(crate) struct UpdateState {
    bufs: Vec<Storage>,
}

impl UpdateState {
    /// `count` buffers of `n` zeros of `dtype` on `device`.
    pub(crate) fn zeros(count: usize, n: usize, dtype: DType, device: Device) -> UpdateState {
        UpdateState { bufs: (0..count).map(|_| Storage::full(device, dtype, n, 0.0)).collect() }
    }

    /// Buffers from host values (a loaded state dict's), in `dtype`: `f64` keeps them,
    /// any other dtype holds them in `f32` (the buffers of an `f32` parameter).
    pub(crate) fn from_host(values: Vec<Vec<f64>>, dtype: DType) -> UpdateState {
        let bufs = values
            .into_iter()
            .map(|v| match dtype {
                DType::F64 => Storage::from_vec(v),
                _ => Storage::from_vec(v.into_iter().map(|x| x as f32).collect::<Vec<f32>>()),
            })
            .collect();
        UpdateState { bufs }
    }

    /// The buffers, in the rule's order.
    pub(crate) fn buffers(&self) -> &[Storage] {
        &self.bufs
    }

    /// Pads to `count` buffers with zeros like the first (Adam's unused `max_exp_avg_sq`
    /// slot when a state without it is loaded).
    pub(crate) fn pad_to(&mut self, count: usize, n: usize) {
        let Some(first) = self.bufs.first() else { return };
        let (dtype, device) = (first.dtype(), first.device());
        while self.bufs.len() < count {
            self.bufs.push(Storage::full(device, dtype, n, 0.0));
        }
    }

    /// The buffers moved and cast to where their parameter now is (`n` elements of `dtype`
    /// on `device`), values kept: a module moved with `to_device` or cast with `to_dtype`
    /// after some steps continues with its moments (f64 to f32 rounds them), never with
    /// zeroed moments under an advanced step count (whose bias correction would make the
    /// next Adam update about 3x the learning rate). Buffers already there stay as they are.
    pub(crate) fn conform(self, n: usize, dtype: DType, device: Device) -> UpdateState {
        let whole = Layout::contiguous(&[n]);
        let bufs = self
            .bufs
            .into_iter()
            .map(|s| {
                if s.dtype() == dtype && s.device() == device {
                    return s;
                }
                // Cast on the host: the device may not compute in one of the two dtypes
                // (f64 on most GPUs).
                let host = s.to_device(&whole, Device::Cpu).convert(&whole, dtype);
                host.to_device(&whole, device)
            })
            .collect();
        UpdateState { bufs }
    }
}

impl Storage {
    /// `rule`'s update of the elements `range` of this (a contiguous parameter's) buffer,
    /// from `grad` (its contiguous gradient, as long as `range`) and `state` (conformed to
    /// the parameter), in place. `fresh`: the state was just created.
    ///
    /// # Panics
    /// When the gradient or the state is on another device or of another dtype, or the
    /// dtype is not `f32` or `f64`.
    #[track_caller]
    pub(crate) fn update<R: UpdateRule>(
        &mut self,
        range: Range<usize>,
        grad: &Storage,
        state: &mut UpdateState,
        fresh: bool,
        rule: &R,
    ) {
        let name = R::NAME;
        if !matches!(self.dtype(), DType::F32 | DType::F64) {
            panic!("{name}: parameters must be f32 or f64, got {}", self.dtype());
        }
        if grad.dtype() != self.dtype() {
            panic!("{name}: parameter is {} but its gradient is {}", self.dtype(), grad.dtype());
        }
        if grad.device() != self.device() {
            panic!("{name}: a parameter on {} has a gradient on {}", self.device(), grad.device());
        }
        match self {
            Storage::Cpu(p) => {
                let Storage::Cpu(g) = grad else { unreachable!("checked: on the CPU") };
                let mut bufs: Vec<&mut CpuStorage> = state
                    .bufs
                    .iter_mut()
                    .map(|b| match b {
                        Storage::Cpu(b) => b,
                        other => unreachable!("state conformed to the CPU is on {}", other.device()),
                    })
                    .collect();
                cpu::update::apply(p, range, g, &mut bufs, fresh, rule);
            }
            Storage::Meta { .. } => panic!("{name}: a meta parameter has no values to update"),
            #[cfg(feature = "gpu")]
            Storage::Gpu(p) => {
                let Storage::Gpu(g) = grad else { unreachable!("checked: on the same GPU") };
                let bufs: Vec<&super::GpuStorage> = state
                    .bufs
                    .iter()
                    .map(|b| match b {
                        Storage::Gpu(b) => b,
                        other => unreachable!("state conformed to a GPU is on {}", other.device()),
                    })
                    .collect();
                let (body, scalars) = rule.wgsl();
                let mut k = vec![if fresh { 1.0 } else { 0.0 }];
                k.extend(scalars);
                super::gpu::kernels::optimizer_step(p, range.start, range.len(), g, &bufs, body, &k);
            }
        }
    }
}
