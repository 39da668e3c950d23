//! How a module call runs its hooks: the global hooks and the module's own around
//! `compute`, over every tensor slot of the input and output ([`ModuleIo::tensors`]).
//!
//! Backward hooks are wired through the autograd graph as PyTorch's `BackwardHook` does,
//! with nodes of single-output ops:
//!
//! - **Output side.** Every output slot that requires grad passes through an identity node
//!   that records the gradient arriving there and hands a zero to one *gather* node, whose
//!   inputs are all those outputs. The engine runs the gather node after every reachable
//!   identity node, so it sees every `grad_output` at once (`None` where none arrived):
//!   it runs the full backward pre-hooks, then returns the (replaced) gradients to the
//!   outputs. With no input that requires grad, the full backward hooks fire there too,
//!   with every `grad_input` `None`.
//! - **Input side.** Symmetrically, every input slot that requires grad passes through an
//!   identity node, before `compute`, that records its `grad_input`; their common gather
//!   node runs after all of them and fires the full backward hooks with every
//!   `grad_input` and the `grad_output` the output side recorded, then returns the
//!   (replaced) gradients to the inputs.
//!
//! Each call of a module gets its own nodes, so a module used twice fires twice.

use std::sync::{Arc, Mutex};

use super::hooks::{named, BackwardHookTensors, BackwardPreHookTensors, FwdEntry};
use super::running::{like_of, zeros, HookCall, Like};
use super::{global_hooks, Module, ModuleBase, ModuleIo};
use crate::autograd::{custom_op, is_grad_enabled};
use crate::tensor::Tensor;

/// The name PyTorch gives the hook nodes (`grad_fn` names show it).
const NODE: &str = "BackwardHookFunctionBackward";

/// A hook of a kind, with the kind's name for messages (`"global forward hook"`).
type Named<H> = (&'static str, H);

/// What one call's backward nodes share.
#[derive(Default)]
struct Shared {
    /// Gradients recorded by the input slots' identity nodes.
    grad_in: Vec<Option<Tensor>>,
    /// Gradients recorded by the output slots' identity nodes.
    grad_out_seen: Vec<Option<Tensor>>,
    /// `grad_output` after the pre-hooks, for the input side's full backward hooks.
    grad_out: Option<Vec<Option<Tensor>>>,
}

fn lock(s: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `module`'s computation `f` on `input` with the global hooks and `base`'s hooks
/// around it: what [`Forward::forward`](super::Forward::forward) does for every module.
pub(crate) fn call<I: ModuleIo, O: ModuleIo>(
    base: &ModuleBase,
    module: &dyn Module,
    input: &I,
    f: impl FnOnce(&I) -> O,
) -> O {
    let global = global_hooks::snapshot();
    let own = base.hook_snapshot();
    if global.is_none() && own.is_none() {
        return f(input);
    }
    let (g, own) = (global.unwrap_or_default(), own.unwrap_or_default());
    let type_name = module.type_name();
    let pre = tagged("global forward pre-hook", g.pre).chain(tagged("forward pre-hook", own.pre));
    let fwd: Vec<Named<FwdEntry>> =
        tagged("global forward hook", g.fwd).chain(tagged("forward hook", own.fwd)).collect();
    let bwd: Vec<Named<BackwardHookTensors>> =
        tagged("global full backward hook", g.bwd).chain(tagged("full backward hook", own.bwd)).collect();
    let bwd_pre: Vec<Named<BackwardPreHookTensors>> = tagged("global full backward pre-hook", g.bwd_pre)
        .chain(tagged("full backward pre-hook", own.bwd_pre))
        .collect();

    let mut x = input.clone();
    let call = HookCall::forward(module, false);
    for (kind, h) in pre {
        let slots = x.tensors();
        if let Some(new) = named(kind, type_name, || h(&call, &slots)) {
            x = named(kind, type_name, || replace(&x, "input", &slots, new));
        }
    }
    let grad = is_grad_enabled();
    let with_bwd = grad && !bwd.is_empty();
    let with_out_side = grad && (with_bwd || !bwd_pre.is_empty());
    let path = if with_out_side { call.path().map(str::to_string) } else { None };
    let shared: Arc<Mutex<Shared>> = Arc::default();
    let bwd = Arc::new(bwd);
    let in_slots = x.tensors();
    let inputs_wired = with_bwd && in_slots.iter().flatten().any(Tensor::requires_grad);
    // The output slots' shapes, known once the forward has run; the input side's nodes
    // are made first and read it in backward.
    let outputs_like: Arc<Mutex<Vec<Option<Like>>>> = Arc::default();
    if inputs_wired {
        let side = InputSide {
            type_name,
            path: path.clone(),
            bwd: bwd.clone(),
            shared: shared.clone(),
            inputs_like: like_of(&in_slots),
            input_needs: in_slots.iter().map(|t| t.as_ref().is_some_and(Tensor::requires_grad)).collect(),
            outputs_like: outputs_like.clone(),
        };
        x = x.with_tensors(side.wire(in_slots));
    }
    let mut y = run_forward(module, &x, f, &fwd);
    if with_out_side {
        let out_slots = y.tensors();
        *outputs_like.lock().unwrap_or_else(|e| e.into_inner()) = like_of(&out_slots);
        if out_slots.iter().flatten().any(Tensor::requires_grad) {
            let side = OutputSide {
                type_name,
                path,
                bwd: with_bwd.then_some(bwd),
                bwd_pre,
                shared,
                inputs_wired,
                input_count: x.tensors().len(),
                outputs_like: like_of(&out_slots),
            };
            y = y.with_tensors(side.wire(out_slots));
        }
    }
    y
}

/// `hooks`, each with its kind's name.
fn tagged<H>(kind: &'static str, hooks: Vec<H>) -> impl Iterator<Item = Named<H>> {
    hooks.into_iter().map(move |h| (kind, h))
}

/// `io` with `new` (what a hook returned for `slots`) put back, or a panic naming what
/// is wrong (the caller names the hook and module around it).
fn replace<T: ModuleIo>(io: &T, what: &str, slots: &[Option<Tensor>], new: Vec<Option<Tensor>>) -> T {
    assert!(
        new.len() == slots.len(),
        "returned {} {what} slots, the {what} has {}: return every slot, each kept or replaced",
        new.len(),
        slots.len()
    );
    io.with_tensors(new)
}

/// Checks replacement gradients `new` against the slots' shapes (`like`); `None` in
/// `like` is a slot with no tensor, where only `None` may be returned.
fn check_grads(what: &str, new: &[Option<Tensor>], like: &[Option<Like>]) {
    assert!(
        new.len() == like.len(),
        "returned {} {what} slots, the module has {}: return every slot, each kept or replaced",
        new.len(),
        like.len()
    );
    for (i, (g, l)) in new.iter().zip(like).enumerate() {
        match (g, l) {
            (Some(g), Some(l)) => assert!(
                g.shape() == l.0.as_slice(),
                "returned {what} slot {i} of shape {:?}, the tensor there has shape {:?}",
                g.shape(),
                l.0
            ),
            (Some(_), None) => {
                panic!("returned a tensor for {what} slot {i}, which holds no tensor: return None there")
            }
            (None, _) => {}
        }
    }
}

/// The zero a recording node hands its gather node (the gather node then runs: the
/// engine runs a node only when a gradient reached it).
fn token_grad(token: &Like) -> Vec<Option<Tensor>> {
    vec![None, Some(zeros(token))]
}

/// A scalar zero on the device of the first slot that requires grad, as a gather node's
/// value.
fn token_like(slots: &[Option<Tensor>]) -> Like {
    let t = slots.iter().flatten().find(|t| t.requires_grad()).expect("checked: a slot requires grad");
    (Vec::new(), crate::DType::F32, t.device())
}

/// `slots` with each of `needed` passed through a recording node (its gradient goes to
/// `record(slot, gradient)`), all of them feeding one gather node, whose backward is
/// `fire(needed)`: the gradients of the `needed` slots' tensors.
fn wire_slots(
    mut slots: Vec<Option<Tensor>>,
    needed: Vec<usize>,
    record: impl Fn(usize, &Tensor) + Clone + Send + Sync + 'static,
    fire: impl Fn(&[usize]) -> Vec<Option<Tensor>> + Send + Sync + 'static,
) -> Vec<Option<Tensor>> {
    let token = token_like(&slots);
    let tensors: Vec<Tensor> = needed.iter().map(|&i| slots[i].clone().expect("needs grad")).collect();
    let refs: Vec<&Tensor> = tensors.iter().collect();
    let order = needed.clone();
    let gather = custom_op(NODE, &refs, &zeros(&token), move |_| fire(&order));
    for (&i, t) in needed.iter().zip(&tensors) {
        let (record, token) = (record.clone(), token.clone());
        slots[i] = Some(custom_op(NODE, &[t, &gather], t, move |g| {
            record(i, g);
            token_grad(&token)
        }));
    }
    slots
}

/// The input side of one call's backward hooks.
struct InputSide {
    type_name: &'static str,
    path: Option<String>,
    bwd: Arc<Vec<Named<BackwardHookTensors>>>,
    shared: Arc<Mutex<Shared>>,
    inputs_like: Vec<Option<Like>>,
    input_needs: Vec<bool>,
    outputs_like: Arc<Mutex<Vec<Option<Like>>>>,
}

impl InputSide {
    /// The input slots, those that require grad passed through recording nodes.
    fn wire(self, slots: Vec<Option<Tensor>>) -> Vec<Option<Tensor>> {
        let needed: Vec<usize> = (0..slots.len()).filter(|&i| self.input_needs[i]).collect();
        let shared = Arc::clone(&self.shared);
        lock(&shared).grad_in = vec![None; slots.len()];
        let record = move |i: usize, g: &Tensor| lock(&shared).grad_in[i] = Some(g.clone());
        wire_slots(slots, needed, record, move |order| self.fire(order))
    }

    /// The full backward hooks on every `grad_input` and the recorded `grad_output`; the
    /// gradients of the `needed` inputs.
    fn fire(&self, needed: &[usize]) -> Vec<Option<Tensor>> {
        let (recorded, grad_out) = {
            let mut s = lock(&self.shared);
            (std::mem::replace(&mut s.grad_in, vec![None; self.inputs_like.len()]), s.grad_out.take())
        };
        let outputs_like = self.outputs_like.lock().unwrap_or_else(|e| e.into_inner()).clone();
        // No gradient went through the output side's nodes (the module handed an input on
        // unchanged through a path of its own): every grad_output slot is None.
        let go = grad_out.unwrap_or_else(|| vec![None; outputs_like.len()]);
        // PyTorch's materialized zeros where a tensor input got no gradient; None where
        // the slot holds no tensor.
        let mut gi: Vec<Option<Tensor>> =
            recorded.into_iter().zip(&self.inputs_like).map(|(g, l)| g.or_else(|| l.as_ref().map(zeros))).collect();
        let call = HookCall::backward(self.type_name, self.path.clone(), &outputs_like);
        for (kind, h) in self.bwd.iter() {
            if let Some(new) = named(kind, self.type_name, || h(&call, &gi, &go)) {
                named(kind, self.type_name, || {
                    check_grads("grad_input", &new, &self.inputs_like);
                    for (i, (n, old)) in new.iter().zip(&gi).enumerate() {
                        let same = matches!((n, old), (Some(n), Some(o)) if n.id() == o.id());
                        assert!(
                            self.input_needs[i] || n.is_none() || same,
                            "returned a new grad_input for slot {i}, whose input does not require grad: there is \
                             nowhere for it to go; return the tensor it was given, or None"
                        );
                    }
                });
                gi = new;
            }
        }
        needed.iter().map(|&i| gi[i].clone()).collect()
    }
}

/// The output side of one call's backward hooks.
struct OutputSide {
    type_name: &'static str,
    path: Option<String>,
    /// The full backward hooks, when any (they fire here when no input requires grad).
    bwd: Option<Arc<Vec<Named<BackwardHookTensors>>>>,
    bwd_pre: Vec<Named<BackwardPreHookTensors>>,
    shared: Arc<Mutex<Shared>>,
    inputs_wired: bool,
    input_count: usize,
    outputs_like: Vec<Option<Like>>,
}

impl OutputSide {
    /// The output slots, those that require grad passed through recording nodes.
    fn wire(self, slots: Vec<Option<Tensor>>) -> Vec<Option<Tensor>> {
        let needs: Vec<bool> = slots.iter().map(|t| t.as_ref().is_some_and(Tensor::requires_grad)).collect();
        let needed: Vec<usize> = (0..slots.len()).filter(|&i| needs[i]).collect();
        let shared = Arc::clone(&self.shared);
        lock(&shared).grad_out_seen = vec![None; slots.len()];
        let record = move |i: usize, g: &Tensor| lock(&shared).grad_out_seen[i] = Some(g.clone());
        wire_slots(slots, needed, record, move |order| self.fire(order, &needs))
    }

    /// The full backward pre-hooks on every `grad_output`, then the full backward hooks
    /// when no input requires grad; the gradients of the `needed` outputs.
    fn fire(&self, needed: &[usize], needs: &[bool]) -> Vec<Option<Tensor>> {
        let n = self.outputs_like.len();
        let mut go = std::mem::replace(&mut lock(&self.shared).grad_out_seen, vec![None; n]);
        let call = HookCall::backward(self.type_name, self.path.clone(), &self.outputs_like);
        for (kind, h) in &self.bwd_pre {
            if let Some(new) = named(kind, self.type_name, || h(&call, &go)) {
                named(kind, self.type_name, || {
                    check_grads("grad_output", &new, &self.outputs_like);
                    for (i, g) in new.iter().enumerate() {
                        assert!(
                            needs[i] || g.is_none(),
                            "returned a tensor for grad_output slot {i}, whose output does not require grad: return None there"
                        );
                    }
                });
                go = new;
            }
        }
        if let Some(bwd) = &self.bwd {
            if self.inputs_wired {
                lock(&self.shared).grad_out = Some(go.clone());
            } else {
                let gi = vec![None; self.input_count];
                for (kind, h) in bwd.iter() {
                    let new = named(kind, self.type_name, || h(&call, &gi, &go));
                    if new.is_some_and(|v| v.iter().any(Option::is_some)) {
                        panic!(
                            "{kind} of `{}`: a hook of a module whose inputs do not require grad returned a replacement \
                             gradient, which would be dropped; return None there (PyTorch: \"Backward hook for Modules \
                             where no input requires gradient should always return None or None for all gradients.\")",
                            self.type_name
                        );
                    }
                }
            }
        }
        needed.iter().map(|&i| go[i].clone()).collect()
    }
}

/// `f` on `x`, then the forward hooks (global first) on its output. With hooks that are
/// always called, a panic of `f` or of a hook before them still runs them (with no
/// output), then goes on.
fn run_forward<I: ModuleIo, O: ModuleIo>(
    module: &dyn Module,
    x: &I,
    f: impl FnOnce(&I) -> O,
    hooks: &[Named<FwdEntry>],
) -> O {
    use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
    let type_name = module.type_name();
    let mut ran = vec![false; hooks.len()];
    let run = |ran: &mut [bool]| -> O {
        let mut y = f(x);
        if hooks.is_empty() {
            return y;
        }
        let xs = x.tensors();
        let call = HookCall::forward(module, false);
        for (i, (kind, h)) in hooks.iter().enumerate() {
            ran[i] = true;
            let ys = y.tensors();
            if let Some(new) = named(kind, type_name, || (h.hook)(&call, &xs, &ys)) {
                y = named(kind, type_name, || replace(&y, "output", &ys, new));
            }
        }
        y
    };
    if !hooks.iter().any(|(_, h)| h.always) {
        return run(&mut ran);
    }
    match catch_unwind(AssertUnwindSafe(|| run(&mut ran))) {
        Ok(y) => y,
        Err(panic) => {
            let xs = x.tensors();
            let call = HookCall::forward(module, true);
            for ((_, h), ran) in hooks.iter().zip(&ran) {
                if h.always && !ran && catch_unwind(AssertUnwindSafe(|| (h.hook)(&call, &xs, &[]))).is_err() {
                    eprintln!(
                        "warning: a forward hook with always_call of `{type_name}` panicked while the forward's own panic \
                         was being handled; that first panic goes on"
                    );
                }
            }
            resume_unwind(panic)
        }
    }
}
