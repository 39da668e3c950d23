//! Parametrizations: a parameter whose value is computed from other tensors (PyTorch's
//! `torch.nn.utils.parametrize`).
//!
//! [`register_parametrization`]`(&mut module, "weight", p)` makes `module.weight` the output
//! of `p` applied to *originals*: the tensors `p.right_inverse(weight)` returns (the weight
//! itself for a parametrization without one). The originals are the parameters the
//! optimizer trains and the state dict saves, under PyTorch's keys:
//! `parametrizations.weight.original` for one original, `original0`, `original1`, ... for
//! several (weight norm's magnitude and direction), and the parametrization's own buffers
//! under `parametrizations.weight.0.<name>` (spectral norm's `_u`, `_v`).
//!
//! - **Reading.** Layers read parameters with [`Parameter::value`], which recomputes the
//!   parametrized value from the originals on every read (a graph back to them, so
//!   gradients reach them), or once per [`cached`] scope. Reading a parametrized parameter
//!   any other way (`&*weight`, `weight.tensor()`, `weight.shape()`) panics naming it:
//!   a layer that reads its weight directly would otherwise skip the parametrization.
//! - **Chaining.** Registering a second parametrization on the same tensor applies it to
//!   the first one's output (`parametrizations.weight.0`, `.1`, ...), the originals unchanged.
//! - **Assigning.** [`assign`] sets the originals from a value through every
//!   parametrization's `right_inverse`, last first (PyTorch's `module.weight = value`).
//! - **Removing.** [`remove_parametrizations`] makes the tensor a plain parameter again, with
//!   the parametrized value (`leave_parametrized = true`) or the original's.
//! - **Train and eval.** A parametrization sees the owning module's mode (`module.eval()`
//!   reaches it), as spectral norm's power iteration needs.
//!
//! Errors name the module and the tensor, and leave the module as it was: no such
//! parameter, a parametrization whose output has another shape or dtype than the tensor, a
//! `right_inverse` that returns the wrong number, shapes or dtypes of tensors.
//!
//! ```
//! use nn_core::module::parametrize::{register_parametrization, Parametrization};
//! use nn_core::prelude::*;
//!
//! /// The weight as twice the stored tensor.
//! #[derive(Module)]
//! struct Double;
//! impl Parametrization for Double {
//!     fn forward(&self, x: &[Tensor], _training: bool) -> Tensor {
//!         &x[0] * 2.0
//!     }
//!     fn right_inverse(&self, w: &Tensor) -> Option<Vec<Tensor>> {
//!         Some(vec![w / 2.0])
//!     }
//! }
//!
//! #[derive(Module)]
//! struct Scale {
//!     #[param] w: Parameter,
//!     #[base] base: ModuleBase,
//! }
//! impl Compute for Scale {
//!     type Input = Tensor;
//!     type Output = Tensor;
//!     fn compute(&self, x: &Tensor) -> Tensor {
//!         x * &*self.w.value() // `value()`: the parametrized weight
//!     }
//! }
//!
//! let mut m = Scale { w: Parameter::new(Tensor::full(&[2], 3.0)), base: ModuleBase::new() };
//! register_parametrization(&mut m, "w", Double).unwrap();
//! assert_eq!(m.state_dict().keys().collect::<Vec<_>>(), ["parametrizations.w.original"]);
//! assert_eq!(m.state_dict().get("parametrizations.w.original").unwrap().to_vec(), [1.5, 1.5]);
//! assert_eq!(m.forward(&Tensor::ones(&[2])).to_vec(), [3.0, 3.0]); // the same weight as before
//! ```

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use super::Parameter;
use crate::autograd::no_grad;
use crate::error::{Error, Result};
use crate::module::{CopySlot, DeepCopier, HoldsState, Item, Module, Name};
use crate::tensor::Tensor;

/// A parametrization: how a tensor is computed from its originals. A module (it may hold
/// buffers of its own, as spectral norm's `_u`/`_v`), usually `#[derive(Module)]` on a
/// struct without a `#[base]` (it is not run with `forward`). Unwind-safe, as modules are,
/// so that a module holding it can be used across `catch_unwind`.
pub trait Parametrization: Module + Send + Sync + std::panic::RefUnwindSafe + std::panic::UnwindSafe {
    /// The tensor from the originals: as many as [`right_inverse`](Self::right_inverse)
    /// returns for the first parametrization of a tensor, one (the previous output) for a
    /// chained one. `training` is the owning module's mode.
    fn forward(&self, originals: &[Tensor], training: bool) -> Tensor;

    /// The originals that [`forward`](Self::forward) maps to `value` (PyTorch's
    /// `right_inverse`), computed without a graph. `None`: the parametrization has none,
    /// so at registration the original is the tensor itself, and [`assign`] is refused.
    fn right_inverse(&self, value: &Tensor) -> Option<Vec<Tensor>> {
        let _ = value;
        None
    }
}

/// A boxed [`Parametrization`] that can be copied and reached as a module (implemented for
/// every parametrization).
pub trait DynParametrization: Parametrization {
    /// An independent copy, sharing `copier`'s record of ties.
    fn copy_boxed(&self, copier: &mut DeepCopier) -> Box<dyn DynParametrization>;
    /// The parametrization as a module.
    fn as_module(&self) -> &dyn Module;
    /// The parametrization as a mutable module.
    fn as_module_mut(&mut self) -> &mut dyn Module;
}

impl<T: Parametrization> DynParametrization for T {
    fn copy_boxed(&self, copier: &mut DeepCopier) -> Box<dyn DynParametrization> {
        Box::new(copier.module(self))
    }
    fn as_module(&self) -> &dyn Module {
        self
    }
    fn as_module_mut(&mut self) -> &mut dyn Module {
        self
    }
}

/// Where a parameter's parametrizations live, shared by the parameter's clones. Append-only:
/// a removal marks its group removed, and a later registration adds the next group, so
/// that every reference a traversal handed out stays valid.
#[derive(Default)]
pub(crate) struct Link {
    first: OnceLock<Box<Group>>,
}

impl Link {
    /// The parametrizations in force, if any.
    pub(crate) fn current(&self) -> Option<&Group> {
        let mut g = self.first.get()?;
        loop {
            if !g.removed.load(Ordering::Acquire) {
                return Some(g);
            }
            g = g.next.get()?;
        }
    }

    /// Puts `group` in force (after any removed ones).
    fn attach(&self, group: Group) {
        let mut slot = &self.first;
        loop {
            match slot.get() {
                None => {
                    let _ = slot.set(Box::new(group));
                    return;
                }
                Some(g) => slot = &g.next,
            }
        }
    }
}

/// The `parametrizations` entry of a module for one tensor: a module holding the tensor's
/// [`ParametrizationList`] under the tensor's name (PyTorch's `module.parametrizations`, a
/// `ModuleDict`, seen one tensor at a time).
pub(crate) struct Group {
    pub(crate) list: ParametrizationList,
    removed: AtomicBool,
    next: OnceLock<Box<Group>>,
}

impl Group {
    /// Panics: the parameter was read directly.
    #[track_caller]
    pub(crate) fn refuse_direct_read(&self) -> ! {
        let l = &self.list;
        panic!(
            "`{}` of `{}` is parametrized ({}): read it with `Parameter::value()`; reading it directly (`&*p`, \
             `p.tensor()`, `p.shape()`) would skip the parametrization",
            l.tensor,
            l.owner,
            l.describe()
        )
    }

    fn deep_copy(&self, c: &mut DeepCopier) -> Group {
        Group { list: self.list.copy(c), removed: AtomicBool::new(false), next: OnceLock::new() }
    }
}

impl HoldsState for Group {}
impl Module for Group {
    fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        f(Name::Key(&self.list.tensor), Item::Module(&self.list));
    }
    fn visit_modules_mut<'a>(&'a mut self, f: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {
        let name = self.list.tensor.clone();
        f(Name::Key(&name), &mut self.list);
    }
    fn type_name(&self) -> &'static str {
        "ModuleDict"
    }
    fn deep_copy_into(&self, copier: &mut DeepCopier, slot: CopySlot<'_>) {
        slot.put(self.deep_copy(copier));
    }
    crate::module_accessors!();
}

/// The parametrizations of one tensor and their originals (PyTorch's
/// `ParametrizationList`): `original` or `original0`, `original1`, ..., then the
/// parametrizations as `0`, `1`, ... in the order they apply.
pub struct ParametrizationList {
    names: Vec<String>,
    originals: Vec<Parameter>,
    first: Box<dyn DynParametrization>,
    rest: OnceLock<Box<Step>>,
    training: AtomicBool,
    tensor: String,
    owner: &'static str,
    /// The value computed in the current [`cached`] scope, with the scope's number.
    cache: Mutex<Option<(u64, Tensor)>>,
}

/// A chained parametrization, applied after the ones before it.
struct Step {
    p: Box<dyn DynParametrization>,
    next: OnceLock<Box<Step>>,
}

impl ParametrizationList {
    /// An independent copy: the originals through `c` (ties kept), each parametrization
    /// copied, the mode kept, no cached value.
    fn copy(&self, c: &mut DeepCopier) -> ParametrizationList {
        let originals = self.originals.iter().map(|p| c.parameter(p)).collect();
        let mut steps = Vec::new();
        self.for_each_step(|s| steps.push(s.copy_boxed(c)));
        let mut steps = steps.into_iter();
        let first = steps.next().expect("a list has a first parametrization");
        let list = ParametrizationList {
            names: self.names.clone(),
            originals,
            first,
            rest: OnceLock::new(),
            training: AtomicBool::new(self.training.load(Ordering::Relaxed)),
            tensor: self.tensor.clone(),
            owner: self.owner,
            cache: Mutex::default(),
        };
        for s in steps {
            list.push(s);
        }
        list
    }

    /// The originals, in order.
    pub fn originals(&self) -> &[Parameter] {
        &self.originals
    }

    /// How many parametrizations apply, in a chain.
    pub fn len(&self) -> usize {
        let mut n = 0;
        self.for_each_step(|_| n += 1);
        n
    }

    /// Always false: a list holds at least one parametrization.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn for_each_step<'a>(&'a self, mut f: impl FnMut(&'a dyn DynParametrization)) {
        f(&*self.first);
        let mut s = self.rest.get();
        while let Some(step) = s {
            f(&*step.p);
            s = step.next.get();
        }
    }

    fn push(&self, p: Box<dyn DynParametrization>) {
        let mut slot = &self.rest;
        loop {
            match slot.get() {
                None => {
                    let _ = slot.set(Box::new(Step { p, next: OnceLock::new() }));
                    return;
                }
                Some(s) => slot = &s.next,
            }
        }
    }

    /// The parametrizations' type names, in order (`WeightNorm`, `SpectralNorm -> Double`).
    pub(crate) fn describe(&self) -> String {
        let mut names = Vec::new();
        self.for_each_step(|p| names.push(p.as_module().type_name()));
        names.join(" -> ")
    }

    /// The parametrized value (see [`Parameter::value`]).
    pub(crate) fn value(&self) -> Tensor {
        let Some(scope) = CACHE_SCOPE.with(Cell::get) else { return self.compute() };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, t)) = &*cache {
            if *s == scope {
                return t.clone();
            }
        }
        let v = self.compute();
        *cache = Some((scope, v.clone()));
        v
    }

    fn compute(&self) -> Tensor {
        let training = self.training.load(Ordering::Relaxed);
        let originals: Vec<Tensor> = self.originals.iter().map(|p| p.tensor().clone()).collect();
        let mut x = self.first.forward(&originals, training);
        let mut s = self.rest.get();
        while let Some(step) = s {
            x = step.p.forward(std::slice::from_ref(&x), training);
            s = step.next.get();
        }
        x
    }

    /// Sets the mode the parametrizations see.
    pub(crate) fn set_training(&self, training: bool) {
        self.training.store(training, Ordering::Relaxed);
    }
}

impl HoldsState for ParametrizationList {}
impl Module for ParametrizationList {
    fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        for (name, p) in self.names.iter().zip(&self.originals) {
            f(Name::Key(name), Item::Param(p));
        }
        let mut i = 0;
        self.for_each_step(|p| {
            f(Name::Index(i), Item::Module(p.as_module()));
            i += 1;
        });
    }
    fn visit_modules_mut<'a>(&'a mut self, f: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {
        f(Name::Index(0), self.first.as_module_mut());
        let mut i = 1;
        let mut s = self.rest.get_mut();
        while let Some(step) = s {
            f(Name::Index(i), step.p.as_module_mut());
            i += 1;
            s = step.next.get_mut();
        }
    }
    fn type_name(&self) -> &'static str {
        "ParametrizationList"
    }
    fn deep_copy_into(&self, copier: &mut DeepCopier, slot: CopySlot<'_>) {
        slot.put(self.copy(copier));
    }
    crate::module_accessors!();
}

static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static CACHE_SCOPE: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Runs `f` with parametrized values computed once per tensor (PyTorch's
/// `parametrize.cached()`): the first read of each parametrized parameter inside `f`
/// computes it, later reads reuse that tensor (and its graph). Nested scopes share the
/// outermost one. The scope is the calling thread's.
///
/// Use it around a forward that reads a parametrized weight many times (a recurrent layer
/// unrolled over time); outside it, every read recomputes.
pub fn cached<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(Option<u64>);
    impl Drop for Reset {
        fn drop(&mut self) {
            CACHE_SCOPE.with(|c| c.set(self.0));
        }
    }
    let before = CACHE_SCOPE.with(Cell::get);
    let _reset = Reset(before);
    if before.is_none() {
        CACHE_SCOPE.with(|c| c.set(Some(NEXT_SCOPE.fetch_add(1, Ordering::Relaxed))));
    }
    f()
}

/// What `module`'s direct entry `name` is.
enum Entry<'a> {
    Plain(&'a Parameter),
    Parametrized(&'a Group),
}

fn find<'a>(module: &'a dyn Module, name: &str) -> Result<Entry<'a>> {
    let mut found = None;
    let mut buffer = false;
    let mut params = Vec::new();
    module.visit(&mut |n, item| match item {
        Item::Param(p) => {
            if n.matches(name) {
                found = Some(Entry::Plain(p));
            }
            params.push(n.to_string());
        }
        Item::Module(m) if n.matches("parametrizations") => {
            if let Some(g) = m.as_any().downcast_ref::<Group>() {
                if g.list.tensor == name {
                    found = Some(Entry::Parametrized(g));
                }
                params.push(g.list.tensor.clone());
            }
        }
        Item::Buffer { .. } if n.matches(name) => buffer = true,
        _ => {}
    });
    found.ok_or_else(|| {
        let reason = if buffer {
            format!("`{name}` is a buffer; only parameters can be parametrized here")
        } else {
            format!("there is no parameter `{name}`; its parameters are: [{}]", params.join(", "))
        };
        error(module, name, reason)
    })
}

fn error(module: &dyn Module, name: &str, reason: String) -> Error {
    Error::Parametrization { module: module.type_name().to_string(), tensor: name.to_string(), reason }
}

/// Whether `a` has `b`'s shape and dtype; the difference in words otherwise.
fn same_kind(what: &str, a: &Tensor, b: &Tensor) -> std::result::Result<(), String> {
    if a.shape() != b.shape() || a.dtype() != b.dtype() {
        return Err(format!("{what} is {:?} {}, the tensor is {:?} {}", a.shape(), a.dtype(), b.shape(), b.dtype()));
    }
    Ok(())
}

/// Registers `p` on `module`'s parameter `name` (PyTorch's `register_parametrization`): from
/// now on the parameter's [`value`](Parameter::value) is `p` applied to its originals (see
/// the [module docs](self)). On a parameter that is parametrized already, `p` applies to
/// the previous output.
///
/// The checks PyTorch makes, before anything changes: `p`'s output (on the originals, in
/// the module's mode) has the tensor's shape and dtype; `right_inverse`'s tensors have the
/// tensor's dtype. Train/eval follows the module from now on.
///
/// # Errors
/// [`Error::Parametrization`], naming the module and the tensor: no such parameter (a
/// buffer, or a name the module lacks: the message lists its parameters), or a failed
/// check. The module is unchanged then.
pub fn register_parametrization<M: Module + ?Sized>(
    module: &mut M,
    name: &str,
    p: impl Parametrization + 'static,
) -> Result<()> {
    let module: &dyn Module = module.as_dyn();
    let training = module.is_training();
    let fail = |reason: String| error(module, name, reason);
    match find(module, name)? {
        Entry::Parametrized(g) => {
            let y = no_grad(|| g.list.value());
            let x = no_grad(|| p.forward(std::slice::from_ref(&y), training));
            same_kind("the parametrization's output", &x, &y).map_err(fail)?;
            if let Some(z) = no_grad(|| p.right_inverse(&x)) {
                match z.as_slice() {
                    [z] => same_kind("`right_inverse`'s output", z, &y).map_err(fail)?,
                    _ => return Err(fail(format!("a chained `right_inverse` returns one tensor, not {}", z.len()))),
                }
            }
            g.list.push(Box::new(p));
            Ok(())
        }
        Entry::Plain(param) => {
            if !reported_through_report(module, param) {
                return Err(fail(format!(
                    "`{}` reports `{name}` to its visit as a plain `Item::Param`, so a parametrization would not show \
                     in its parameters or state dict; a hand-written `Module::visit` reports parameters with \
                     `nn_core::module::parametrize::report(p, name, f)`",
                    module.type_name()
                )));
            }
            let original = param.raw();
            let new = no_grad(|| p.right_inverse(original)).unwrap_or_else(|| vec![original.clone()]);
            if new.is_empty() {
                return Err(fail("`right_inverse` returned no tensor".into()));
            }
            for t in &new {
                if t.dtype() != original.dtype() {
                    return Err(fail(format!(
                        "`right_inverse` returned a {} tensor for a {} one",
                        t.dtype(),
                        original.dtype()
                    )));
                }
            }
            if let [t] = new.as_slice() {
                if t.shape() != original.shape() {
                    return Err(fail(format!(
                        "`right_inverse` returned one tensor of shape {:?} for a tensor of shape {:?}",
                        t.shape(),
                        original.shape()
                    )));
                }
            }
            let z = no_grad(|| p.forward(&new, training));
            same_kind("the parametrization's output", &z, original).map_err(fail)?;
            // Checks done: from here nothing fails.
            let requires_grad = original.requires_grad();
            let (names, originals) = if let [t] = new.as_slice() {
                no_grad(|| {
                    if t.id() != original.id() {
                        original.set_data(t);
                    }
                });
                (vec!["original".to_string()], vec![Parameter::sharing(original.clone())])
            } else {
                let names = (0..new.len()).map(|i| format!("original{i}")).collect();
                (names, new.iter().map(|t| Parameter::with_requires_grad(t.clone(), requires_grad)).collect())
            };
            let list = ParametrizationList {
                names,
                originals,
                first: Box::new(p),
                rest: OnceLock::new(),
                training: AtomicBool::new(training),
                tensor: name.to_string(),
                owner: module.type_name(),
                cache: Mutex::default(),
            };
            param.link().attach(Group { list, removed: AtomicBool::new(false), next: OnceLock::new() });
            Ok(())
        }
    }
}

/// Sets `module`'s parametrized tensor `name` to `value` through the parametrizations'
/// `right_inverse`, last first, without a graph (PyTorch's `module.weight = value` on a
/// parametrized tensor): the originals take the values that map to `value`.
///
/// # Errors
/// [`Error::Parametrization`]: `name` is not parametrized, a parametrization has no
/// `right_inverse`, or one returns tensors that do not fit the originals (number, shape,
/// dtype). Nothing is written then.
pub fn assign<M: Module + ?Sized>(module: &mut M, name: &str, value: &Tensor) -> Result<()> {
    let module: &dyn Module = module.as_dyn();
    let fail = |reason: String| error(module, name, reason);
    let Entry::Parametrized(g) = find(module, name)? else {
        return Err(fail("it is not parametrized: assign to the parameter itself".into()));
    };
    let mut steps = Vec::new();
    g.list.for_each_step(|p| steps.push(p));
    let mut values = vec![value.clone()];
    for p in steps.iter().rev() {
        let [v] = values.as_slice() else {
            return Err(fail("a chained `right_inverse` returns one tensor".into()));
        };
        values = no_grad(|| p.right_inverse(v)).ok_or_else(|| {
            fail(format!("`{}` has no `right_inverse`, so a value cannot be assigned", p.as_module().type_name()))
        })?;
    }
    let originals = g.list.originals();
    if values.len() != originals.len() {
        return Err(fail(format!(
            "`right_inverse` returned {} tensor(s) for {} original(s)",
            values.len(),
            originals.len()
        )));
    }
    for (v, o) in values.iter().zip(originals) {
        same_kind("`right_inverse`'s output", v, o.tensor()).map_err(fail)?;
    }
    no_grad(|| {
        for (v, o) in values.iter().zip(originals) {
            o.tensor().set_data(v);
        }
    });
    Ok(())
}

/// Makes `module`'s tensor `name` a plain parameter again (PyTorch's
/// `remove_parametrizations`): with its parametrized value (`leave_parametrized`) or with
/// the single original's values. The parameter's handle is the one the module held; with one
/// original it is that original's tensor, so an optimizer over the originals keeps
/// training it.
///
/// # Errors
/// [`Error::Parametrization`]: `name` is not parametrized, or `leave_parametrized` is false
/// for a tensor parametrized by several originals (which of them would it be?). The module
/// is unchanged then.
pub fn remove_parametrizations<M: Module + ?Sized>(module: &mut M, name: &str, leave_parametrized: bool) -> Result<()> {
    let module: &dyn Module = module.as_dyn();
    let fail = |reason: String| error(module, name, reason);
    let mut placeholder = None;
    module.visit(&mut |n, item| {
        if let Item::Module(m) = item {
            if let (true, Some(g)) = (n.matches("parametrizations"), m.as_any().downcast_ref::<Group>()) {
                if g.list.tensor == name {
                    placeholder = Some(g);
                }
            }
        }
    });
    let Some(g) = placeholder else {
        find(module, name)?;
        return Err(fail("it is not parametrized".into()));
    };
    let originals = g.list.originals();
    if !leave_parametrized && originals.len() != 1 {
        return Err(fail(format!(
            "it is parametrized by {} originals, so it cannot be left unparametrized (`leave_parametrized = false`)",
            originals.len()
        )));
    }
    // The parameter the module holds is found by its group.
    let mut field = None;
    visit_raw(module, &mut |p| {
        if p.link().current().is_some_and(|c| std::ptr::eq(c, g)) {
            field = Some(p.clone());
        }
    });
    let field = field.expect("a group in force belongs to a parameter the module holds");
    if leave_parametrized {
        let v = no_grad(|| g.list.value());
        no_grad(|| field.raw().set_data(&v));
    }
    g.removed.store(true, Ordering::Release);
    Ok(())
}

/// Calls `f` on every parameter handle `module` holds directly, parametrized or not (the
/// derive's `__nn_visit_raw`).
fn visit_raw(module: &dyn Module, f: &mut dyn FnMut(&Parameter)) {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            RAW_VISIT.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(RAW_VISIT.with(|c| c.replace(true)));
    module.visit(&mut |_, item| {
        if let Item::Param(p) = item {
            f(p);
        }
    });
}

thread_local! {
    /// The parameter a registration probes for (see [`reported_through_report`]), and whether
    /// [`report`] was called with it.
    static PROBE: Cell<(usize, bool)> = const { Cell::new((0, false)) };
}

/// Whether `module`'s visit reports `param` through [`report`] (the derive's fields and
/// nn's containers do): only then does a parametrization show in its traversals.
fn reported_through_report(module: &dyn Module, param: &Parameter) -> bool {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            PROBE.with(|c| c.set((0, false)));
        }
    }
    let _reset = Reset;
    PROBE.with(|c| c.set((param as *const Parameter as usize, false)));
    module.visit(&mut |_, _| {});
    PROBE.with(|c| c.get().1)
}

thread_local! {
    /// While set, [`report`] gives parametrized parameters as themselves (to find the
    /// handle a removal restores).
    static RAW_VISIT: Cell<bool> = const { Cell::new(false) };
}

/// Reports `p` to a [`Module::visit`] callback under `name`, or, when it is parametrized,
/// its parametrizations as the module `parametrizations` (holding `name`'s
/// [`ParametrizationList`]). `#[derive(Module)]` reports `#[param]` fields through it;
/// hand-written [`Module`] impls use it so that their parameters can be parametrized.
pub fn report<'a>(p: &'a Parameter, name: Name<'a>, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
    PROBE.with(|c| {
        let (probed, _) = c.get();
        if probed != 0 && probed == p as *const Parameter as usize {
            c.set((probed, true));
        }
    });
    match p.link().current() {
        Some(g) if !RAW_VISIT.with(Cell::get) => f(Name::Field("parametrizations"), Item::Module(g)),
        _ => f(name, Item::Param(p)),
    }
}

/// Gives `copy` (the copy of `p`, made by [`DeepCopier::parameter`]) copies of `p`'s
/// parametrizations.
pub(crate) fn copy_parametrized(p: &Parameter, copy: &Parameter, c: &mut DeepCopier) {
    if let Some(g) = p.link().current() {
        copy.link().attach(g.deep_copy(c));
    }
}

/// Sets the mode of the parametrizations `module` holds directly (its `set_training`).
pub(crate) fn set_training(module: &dyn Module, training: bool) {
    module.visit(&mut |_, item| {
        if let Item::Module(m) = item {
            if let Some(g) = m.as_any().downcast_ref::<Group>() {
                g.list.set_training(training);
            }
        }
    });
}

/// [`Parameter::value`] of an optional parameter (a layer's bias):
/// `optional_value(&self.bias).as_deref()` is the `Option<&Tensor>` ops take.
pub fn optional_value(p: &Option<Parameter>) -> Option<std::borrow::Cow<'_, Tensor>> {
    p.as_ref().map(Parameter::value)
}

/// The value of `module`'s parameter `name`: its tensor, or, when it is parametrized, the
/// value its parametrizations compute (PyTorch's `getattr(module, name)`).
///
/// # Errors
/// [`Error::Parametrization`] when `module` has no parameter `name` (the message lists
/// its parameters).
pub fn value_of<M: Module + ?Sized>(module: &M, name: &str) -> Result<Tensor> {
    match find(module.as_dyn(), name)? {
        Entry::Plain(p) => Ok(p.raw().clone()),
        Entry::Parametrized(g) => Ok(g.list.value()),
    }
}
