//! Forward tracing for export: records the ops one forward pass runs, with their
//! attributes, input and output tensors and the module each ran in.
//!
//! [`trace`] runs a closure (normally one `model.forward(&x)`) with a thread-local recorder
//! switched on and returns what it saw. Each public tensor op opens a *scope* at its entry
//! (`autograd::entry`, after autocast and before its kernel); only the outermost scope
//! becomes a [`TracedOp`], so an op built from other ops (`layer_norm` from means and
//! sums) is recorded once, under its own name, and a composite function that opens no
//! scope of its own (`group_norm`, `bilinear`, `scaled_dot_product_attention`) is
//! recorded as the primitives it calls. The
//! result of a scope is the last tensor created while it was open (every tensor is created
//! through one constructor, which tells the recorder); a scope that creates nothing returned
//! one of its inputs (`reshape` to the same shape, `dropout` in evaluation) and records
//! nothing.
//!
//! Nothing is guessed silently. The recorder also keeps what a scope cannot describe:
//! - an op that builds its result through autograd's `op_result` outside any scope is
//!   recorded as [`OpKind::Untraced`] (an op the tracer has no attributes for);
//! - an in-place update outside any scope ([`OpKind::InPlace`]);
//! - a read of tensor values into Rust (`to_vec`, `item`) outside any scope
//!   ([`OpKind::HostRead`]): Rust code that branches on values is invisible to a graph;
//! - every tensor a scope created besides its result ([`TracedOp::created`]), so a
//!   consumer of such a tensor (the indices of `max_dim`) is detected.
//!
//! An exporter (`nn-onnx`) decides which of these it can express and reports the rest,
//! naming the op and the module ([`TracedOp::module`], matched against
//! [`ModuleBase::trace_key`](crate::ModuleBase::trace_key) of each `named_modules()` entry).
//!
//! When no trace runs, each hook costs one thread-local flag check (and two more for
//! autocast's use of the same scopes: see [`amp`](crate::amp)).
//!
//! ```
//! use nn_core::{trace, Tensor};
//! let x = Tensor::from_vec(vec![1.0, -2.0, 3.0, -4.0], &[2, 2]);
//! let (y, t) = trace::trace(|| x.relu().softmax(-1));
//! let names: Vec<&str> = t.ops.iter().map(|o| o.name).collect();
//! assert_eq!(names, ["relu", "softmax"]);
//! assert_eq!(t.ops[1].attr("dim"), Some(&trace::Attr::Int(1)));
//! assert_eq!(t.ops[1].output.as_ref().unwrap().id(), y.id());
//! assert_eq!(t.ops[1].inputs[0].id(), t.ops[0].output.as_ref().unwrap().id());
//! ```

use std::cell::{Cell, RefCell};
use std::collections::HashSet;

use crate::tensor::{Tensor, TensorId};

/// An attribute value of a traced op (dims are resolved: never negative).
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    /// An integer (a dim, a length, a count).
    Int(i64),
    /// A list of integers (a shape, a permutation, dims, strides).
    Ints(Vec<i64>),
    /// A float (a scale, an epsilon, a fill value).
    Float(f64),
    /// A flag.
    Bool(bool),
    /// A name (a dtype, an approximation).
    Str(&'static str),
}

/// What a [`TracedOp`] records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// A public op with its attributes, inputs and result.
    Traced,
    /// An op that built its result outside any traced scope: its name is autograd's node
    /// name, it has no attributes.
    Untraced,
    /// An in-place update of `inputs[0]` (no result); `inputs[1..]` are the tensors its new
    /// values come from (`copy_`'s source, `add_`'s other operand).
    InPlace,
    /// A read of `inputs[0]`'s values into Rust (no result).
    HostRead,
}

/// Identifies a module during a trace: see
/// [`ModuleBase::trace_key`](crate::ModuleBase::trace_key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ModuleKey(usize);

impl ModuleKey {
    /// The key of the value at this address (a module's base).
    pub(crate) fn of<T>(value: &T) -> ModuleKey {
        ModuleKey(value as *const T as usize)
    }
}

/// One recorded op.
#[derive(Clone, Debug)]
pub struct TracedOp {
    /// The op's name: the `Tensor` method (`"matmul"`, `"reshape"`, `"conv2d"`), or
    /// autograd's node name for [`OpKind::Untraced`].
    pub name: &'static str,
    /// What this record is.
    pub kind: OpKind,
    /// Attributes by name.
    pub attrs: Vec<(&'static str, Attr)>,
    /// Tensor operands in the op's argument order (optional operands that were absent are
    /// left out: see the op's attributes, e.g. `has_bias`).
    pub inputs: Vec<Tensor>,
    /// The result (`None` for in-place updates and host reads).
    pub output: Option<Tensor>,
    /// Every other tensor created while the op ran (intermediates, a second result).
    pub created: Vec<TensorId>,
    /// The innermost module whose `forward` was running, if any.
    pub module: Option<ModuleKey>,
}

impl TracedOp {
    /// The attribute `name`, if recorded.
    pub fn attr(&self, name: &str) -> Option<&Attr> {
        self.attrs.iter().find(|(n, _)| *n == name).map(|(_, a)| a)
    }
}

/// Everything one [`trace`] recorded, in execution order.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The ops, in the order they ran.
    pub ops: Vec<TracedOp>,
    /// Every tensor created while the trace ran has an id at least this.
    started_at: Option<TensorId>,
    /// The tensors created on the tracing thread while it ran.
    created_here: HashSet<TensorId>,
}

impl Trace {
    /// Whether `t` was created while the trace ran, but on another thread: the recorder is
    /// per thread, so the ops that made it were not recorded and a graph cannot rebuild
    /// it. A consumer must refuse such a tensor rather than take it for a constant.
    pub fn made_elsewhere(&self, t: &Tensor) -> bool {
        self.started_at.is_some_and(|s| t.id() >= s) && !self.created_here.contains(&t.id())
    }
}

/// Runs `f` with recording on (on this thread) and returns its result and the trace.
///
/// Gradient recording is off while `f` runs (`no_grad`): an exported graph is inference.
///
/// # Panics
/// When called while a trace is already running on this thread; a panic in `f` is
/// propagated after recording is switched off.
pub fn trace<R>(f: impl FnOnce() -> R) -> (R, Trace) {
    if ACTIVE.with(Cell::get) {
        panic!("trace: a trace is already running on this thread");
    }
    struct Off;
    impl Drop for Off {
        fn drop(&mut self) {
            ACTIVE.with(|a| a.set(false));
            REC.with(|r| *r.borrow_mut() = Recorder::default());
        }
    }
    REC.with(|r| *r.borrow_mut() = Recorder::default());
    let started_at = Some(TensorId::upcoming());
    ACTIVE.with(|a| a.set(true));
    let off = Off;
    let out = crate::no_grad(f);
    let (ops, created_here) = REC.with(|r| {
        let mut r = r.borrow_mut();
        (std::mem::take(&mut r.ops), std::mem::take(&mut r.created_here))
    });
    drop(off);
    (out, Trace { ops, started_at, created_here })
}

/// Whether a trace is recording on this thread.
pub fn is_tracing() -> bool {
    ACTIVE.with(Cell::get)
}

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static REC: RefCell<Recorder> = RefCell::new(Recorder::default());
}

#[derive(Default)]
struct Recorder {
    frames: Vec<Frame>,
    modules: Vec<ModuleKey>,
    ops: Vec<TracedOp>,
    /// Tensors created since the outermost frame opened, in order.
    created: Vec<Tensor>,
    /// Every tensor created on this thread since the trace began.
    created_here: HashSet<TensorId>,
}

impl Recorder {
    /// Records an op that ran outside any traced op's scope (an untraced op, an in-place
    /// update, a host read); inside a scope it is part of that op and not recorded.
    fn record_outside(&mut self, name: &'static str, kind: OpKind, inputs: Vec<Tensor>, output: Option<&Tensor>) {
        if self.frames.is_empty() {
            let module = self.modules.last().copied();
            let output = output.cloned();
            self.ops.push(TracedOp { name, kind, attrs: Vec::new(), inputs, output, created: Vec::new(), module });
        }
    }
}

struct Frame {
    name: &'static str,
    attrs: Vec<(&'static str, Attr)>,
    inputs: Vec<Tensor>,
}

fn with_rec<R>(f: impl FnOnce(&mut Recorder) -> R) -> Option<R> {
    REC.try_with(|r| r.try_borrow_mut().ok().map(|mut r| f(&mut r))).ok().flatten()
}

/// Open while a public op runs: records the op when the outermost one closes (while a
/// trace records), and marks it as running for autocast (while a scope is on), whose
/// guard drops after this one's `drop`.
pub(crate) struct OpScope {
    traced: bool,
    _autocast: Option<super::autocast::InsideOp>,
}

impl Drop for OpScope {
    fn drop(&mut self) {
        if !self.traced {
            return;
        }
        with_rec(|r| {
            let Some(frame) = r.frames.pop() else { return };
            if !r.frames.is_empty() {
                return;
            }
            let mut created = std::mem::take(&mut r.created);
            let Some(output) = created.pop() else { return };
            if frame.inputs.iter().any(|t| t.id() == output.id()) {
                return;
            }
            let module = r.modules.last().copied();
            r.ops.push(TracedOp {
                name: frame.name,
                kind: OpKind::Traced,
                attrs: frame.attrs,
                inputs: frame.inputs,
                output: Some(output),
                created: created.iter().map(Tensor::id).collect(),
                module,
            });
        });
    }
}

/// Opens the scope of op `name` with its `inputs` and optional operands (a bias, recorded
/// after `inputs` when present). Ops call it through their entry (`autograd::entry`), which
/// keeps the guard until the op returns.
#[inline]
pub(crate) fn op_with(
    name: &'static str,
    inputs: &[&Tensor],
    optional: &[Option<&Tensor>],
    attrs: impl FnOnce() -> Vec<(&'static str, Attr)>,
) -> Option<OpScope> {
    let inside = super::autocast::inside_op();
    if !ACTIVE.with(Cell::get) {
        return inside.map(|a| OpScope { traced: false, _autocast: Some(a) });
    }
    let outer = with_rec(|r| r.frames.is_empty()).unwrap_or(false);
    // Attributes and operands of nested scopes are never used: skip building them.
    let attrs = if outer { attrs() } else { Vec::new() };
    let inputs = if outer {
        inputs.iter().copied().chain(optional.iter().flatten().copied()).cloned().collect()
    } else {
        Vec::new()
    };
    let traced = with_rec(|r| {
        if r.frames.is_empty() {
            r.created.clear();
        }
        r.frames.push(Frame { name, attrs, inputs });
    })
    .is_some();
    Some(OpScope { traced, _autocast: inside })
}

/// Called for every tensor created: the last one created in a scope is its result.
#[inline]
pub(crate) fn on_create(t: &Tensor) {
    if ACTIVE.with(Cell::get) {
        with_rec(|r| {
            r.created_here.insert(t.id());
            if !r.frames.is_empty() {
                r.created.push(t.clone());
            }
        });
    }
}

/// Called by autograd's `op_result`: an op outside any scope is recorded as untraced.
#[inline]
pub(crate) fn on_op_result(name: &'static str, inputs: &[&Tensor], out: &Tensor) {
    if ACTIVE.with(Cell::get) {
        with_rec(|r| {
            r.record_outside(name, OpKind::Untraced, inputs.iter().map(|t| (*t).clone()).collect(), Some(out))
        });
    }
}

/// Records an in-place update (`add_`, `copy_`, ...) or a host read (`to_vec`) of `t`
/// made outside any scope.
#[inline]
pub(crate) fn on_access(kind: OpKind, name: &'static str, t: &Tensor) {
    on_access_from(kind, name, t, &[]);
}

/// [`on_access`] of an in-place update whose new values come from `sources` (`copy_`'s
/// source, `add_`'s other operand): recorded after `t` as the op's inputs, so that an
/// exporter can tell a constant fill from a value computed from the input.
#[inline]
pub(crate) fn on_access_from(kind: OpKind, name: &'static str, t: &Tensor, sources: &[&Tensor]) {
    if ACTIVE.with(Cell::get) {
        let inputs = std::iter::once(t).chain(sources.iter().copied()).cloned().collect();
        with_rec(|r| r.record_outside(name, kind, inputs, None));
    }
}

/// Open while a module's forward runs.
pub(crate) struct ModuleScope(());

impl Drop for ModuleScope {
    fn drop(&mut self) {
        with_rec(|r| r.modules.pop());
    }
}

/// Marks the module with key `key` as running (call in `Forward::forward`).
#[inline]
pub(crate) fn module(key: ModuleKey) -> Option<ModuleScope> {
    if !ACTIVE.with(Cell::get) {
        return None;
    }
    with_rec(|r| r.modules.push(key))?;
    Some(ModuleScope(()))
}

/// `[usize]` as an [`Attr::Ints`].
pub(crate) fn ints(v: &[usize]) -> Attr {
    Attr::Ints(v.iter().map(|&d| d as i64).collect())
}

/// A `usize` as an [`Attr::Int`].
pub(crate) fn int(v: usize) -> Attr {
    Attr::Int(v as i64)
}

/// The dims a reduction over `dims` covers (all of them when `dims` is empty), resolved.
pub(crate) fn reduced_dims<D: crate::shape::Dim>(dims: &[D], rank: usize) -> Attr {
    if dims.is_empty() {
        return Attr::Ints((0..rank as i64).collect());
    }
    Attr::Ints(dims.iter().map(|d| d.resolve(rank.max(1), "sum") as i64).collect())
}

/// The attributes of `conv2d`.
pub(crate) fn conv_attrs(o: &crate::backend::Conv2dConfig) -> Vec<(&'static str, Attr)> {
    vec![
        ("stride", ints(&[o.stride.0, o.stride.1])),
        ("padding", ints(&[o.padding.0, o.padding.1])),
        ("dilation", ints(&[o.dilation.0, o.dilation.1])),
        ("groups", int(o.groups)),
    ]
}

/// The attributes of the 2-D pools.
pub(crate) fn pool_attrs(o: &crate::backend::Pool2dConfig) -> Vec<(&'static str, Attr)> {
    vec![
        ("kernel", ints(&[o.kernel.0, o.kernel.1])),
        ("stride", ints(&[o.stride.0, o.stride.1])),
        ("padding", ints(&[o.padding.0, o.padding.1])),
        ("dilation", ints(&[o.dilation.0, o.dilation.1])),
        ("ceil_mode", Attr::Bool(o.ceil_mode)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;

    #[derive(Module)]
    struct Scale {
        #[param]
        w: Parameter,
        #[base]
        base: ModuleBase,
    }
    impl Compute for Scale {
        type Input = Tensor;
        type Output = Tensor;
        fn compute(&self, x: &Tensor) -> Tensor {
            x * &*self.w
        }
    }

    #[test]
    fn records_ops_inputs_and_module() {
        let m = Scale { w: Parameter::new(Tensor::full(&[3], 2.0)), base: ModuleBase::new() };
        let x = Tensor::ones(&[2, 3]);
        let (y, t) = trace(|| m.forward(&x).reshape(&[6]));
        assert_eq!(t.ops.len(), 2);
        assert_eq!(t.ops[0].name, "mul");
        assert_eq!(t.ops[0].module, Some(m.base.trace_key()));
        assert_eq!(t.ops[0].inputs[1].id(), m.w.id());
        assert_eq!(t.ops[1].name, "reshape");
        assert_eq!(t.ops[1].module, None);
        assert_eq!(t.ops[1].attr("shape"), Some(&Attr::Ints(vec![6])));
        assert_eq!(t.ops[1].output.as_ref().unwrap().id(), y.id());
        assert!(!is_tracing());
    }

    #[test]
    fn nested_ops_are_recorded_once_and_identity_results_not_at_all() {
        let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
        let w = Tensor::ones(&[2]);
        // Batch norm is composed of primitives (layer norm is one fused kernel on the CPU).
        let (_, t) =
            trace(|| x.batch_norm(None, None, Some(&w), None, true, 0.1, 1e-5).reshape(&[2, 2]).dropout(0.5, false));
        let names: Vec<&str> = t.ops.iter().map(|o| o.name).collect();
        assert_eq!(names, ["batch_norm"]);
        assert!(!t.ops[0].created.is_empty(), "the means and sums inside are intermediates");
    }

    #[test]
    fn untraced_inplace_and_host_reads_are_kept() {
        let x = Tensor::from_vec(vec![1.0, 2.0], &[2]);
        let (_, t) = trace(|| {
            let y = crate::autograd::custom_op("my_op", &[&x], &x.exp(), |g| vec![Some(g.clone())]);
            y.add_(1.0);
            y.to_vec()
        });
        let kinds: Vec<(&str, OpKind)> =
            t.ops.iter().filter(|o| o.kind != OpKind::Traced).map(|o| (o.name, o.kind)).collect();
        // `add_` with a scalar computes with `affine` and writes with `copy_`.
        assert_eq!(
            kinds,
            [
                ("my_op", OpKind::Untraced),
                ("add_", OpKind::InPlace),
                ("copy_", OpKind::InPlace),
                ("to_vec", OpKind::HostRead)
            ]
        );
        assert_eq!(t.ops[0].name, "exp");
    }

    #[test]
    fn a_panicking_forward_switches_recording_off() {
        let r = std::panic::catch_unwind(|| trace(|| Tensor::ones(&[2]).reshape(&[3])));
        assert!(r.is_err());
        assert!(!is_tracing());
        let (_, t) = trace(|| Tensor::ones(&[2]).exp());
        assert_eq!(t.ops.len(), 1);
    }
}
