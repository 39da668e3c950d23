//! `load_state_dict`: validate every entry, then assign (never a half-loaded model).

use crate::autograd::no_grad;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Mismatch, Result, StateDictError};
use crate::state_dict::StateDict;
use crate::tensor::Tensor;

use super::{state_hooks, walk, Item, Module};

/// Keys that did not line up in a non-strict `load_state_dict` (PyTorch's
/// `_IncompatibleKeys`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IncompatibleKeys {
    /// Module entries the state dict did not provide (left unchanged).
    pub missing_keys: Vec<String>,
    /// State-dict entries the module has no place for (ignored).
    pub unexpected_keys: Vec<String>,
}

impl IncompatibleKeys {
    /// True when every key matched.
    pub fn is_empty(&self) -> bool {
        self.missing_keys.is_empty() && self.unexpected_keys.is_empty()
    }
}

/// How [`ModuleExt::load_state_dict_with`](super::ModuleExt::load_state_dict_with) loads:
/// PyTorch's `load_state_dict(strict=..., assign=...)` keywords.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadStateDictConfig {
    /// Every key must match (the default); otherwise the offending keys are returned.
    pub strict: bool,
    /// Take the state dict's tensors instead of copying into the module's (PyTorch's
    /// `assign=True`, for a model built on the meta device): each entry then has the
    /// state dict's dtype, device and values, and keeps its own `requires_grad`. Shapes
    /// must still match, and a float entry still takes only floats. No values are copied:
    /// the entry shares the state dict tensor's buffer copy-on-write, so the first
    /// in-place write to either side (an optimizer step) copies it. Unlike PyTorch, where
    /// the module then holds the state dict's tensor itself, the model and the state dict
    /// (or another model whose `state_dict()` it was) never change each other's values.
    /// Default `false`.
    pub assign: bool,
}

impl Default for LoadStateDictConfig {
    fn default() -> Self {
        LoadStateDictConfig { strict: true, assign: false }
    }
}

/// PyTorch's form, `missing_keys=["a"], unexpected_keys=[]`, naming at most
/// [`MAX_LISTED_KEYS`](crate::error::MAX_LISTED_KEYS) keys of each kind.
impl std::fmt::Display for IncompatibleKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (name, keys)) in
            [("missing_keys", &self.missing_keys), ("unexpected_keys", &self.unexpected_keys)].into_iter().enumerate()
        {
            write!(f, "{}{name}=[", if i == 0 { "" } else { ", " })?;
            let mut first = true;
            crate::error::write_bounded(f, keys, |f, k| {
                write!(f, "{}{k:?}", if std::mem::take(&mut first) { "" } else { ", " })
            })?;
            f.write_str("]")?;
        }
        Ok(())
    }
}

/// What a dtype holds: a loaded value converts to the entry's dtype only within one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ValueKind {
    /// F32, F64, F16, BF16.
    Float,
    /// I64.
    Integer,
    /// Bool.
    Bool,
}

fn kind(d: DType) -> ValueKind {
    match d {
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => ValueKind::Float,
        DType::I64 => ValueKind::Integer,
        DType::Bool => ValueKind::Bool,
    }
}

/// Above this many unexpected keys, missing keys get no "did you mean" guess.
const SUGGEST_LIMIT: usize = 1000;

/// The closest candidate to `key`, if it is close enough to be a plausible typo or a
/// prefix mismatch (`module.fc.weight` vs `fc.weight`).
pub(crate) fn suggest<'a>(key: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    candidates
        .into_iter()
        .map(|c| {
            let suffix = c.ends_with(&format!(".{key}")) || key.ends_with(&format!(".{c}"));
            (if suffix { 0 } else { strsim::levenshtein(key, c) }, c)
        })
        .filter(|&(d, _)| d <= (key.len() / 4).max(2))
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c.to_string())
}

/// An unexpected key that differs from `key` in one dotted component only, where its own
/// component is a Rust keyword (`attention.self.query.weight` for
/// `attention.self_attn.query.weight`): a field that could not take the checkpoint's name.
fn keyword_twin(key: &str, unexpected: &[String]) -> Option<String> {
    let parts: Vec<&str> = key.split('.').collect();
    unexpected
        .iter()
        .find(|u| {
            let theirs: Vec<&str> = u.split('.').collect();
            theirs.len() == parts.len() && {
                let mut diff = parts.iter().zip(&theirs).filter(|(a, b)| a != b);
                matches!((diff.next(), diff.next()), (Some((_, b)), None) if crate::error::is_rust_keyword(b))
            }
        })
        .cloned()
}

/// What a load would assign, and the keys it would report (in `keys`, with guesses).
struct Plan {
    /// `(target, source)` pairs, validated.
    assign: Vec<(Tensor, Tensor)>,
    /// The missing and unexpected keys; nothing else in it is set.
    keys: StateDictError,
}

/// Every check of `load_state_dict`, touching nothing.
///
/// Entries that are one tensor in the module (a tied parameter: one `Parameter` held by two
/// modules) are one target under several names. The state dict may hold any one of those
/// names (as Hugging Face writes a tied head: once, under its first name), or several with
/// equal values; several with different values is an error naming them. A tied entry is
/// missing only when the state dict holds none of its names, and is assigned once.
fn plan(m: &dyn Module, sd: &StateDict, take: bool) -> Result<Plan> {
    // 0. Entries for a lazy module that has not run: it has no parameters to take them.
    for (path, lazy) in m.named_modules().into_iter().filter(|(_, l)| l.is_uninitialized()) {
        let prefix = format!("{path}.");
        if sd.keys().any(|k| path.is_empty() || k.starts_with(&prefix)) {
            return Err(Error::Uninitialized { module: lazy.type_name() });
        }
    }
    // 1. The module's entries, by name, grouped by identity (first name first).
    let mut targets: Vec<(Vec<String>, Tensor)> = Vec::new();
    let mut by_id: std::collections::HashMap<crate::tensor::TensorId, usize> = std::collections::HashMap::new();
    walk(m, &mut String::new(), &mut |path, item| {
        let t = match item {
            Item::Param(p) => p.tensor(),
            Item::Buffer { tensor, persistent: true } => tensor,
            _ => return,
        };
        match by_id.get(&t.id()) {
            Some(&i) => targets[i].0.push(path.to_string()),
            None => {
                by_id.insert(t.id(), targets.len());
                targets.push((vec![path.to_string()], t.clone()));
            }
        }
    });
    let expected: std::collections::HashSet<&str> =
        targets.iter().flat_map(|(k, _)| k.iter().map(String::as_str)).collect();

    // 2. Validate everything.
    let mut err = StateDictError { module: m.type_name().to_string(), ..Default::default() };
    let unexpected: Vec<String> = sd.keys().filter(|k| !expected.contains(k)).map(str::to_string).collect();
    // Guesses cost a string comparison per (missing, unexpected) pair: a file with a
    // million stray entries gets none.
    let guesses = unexpected.len() <= SUGGEST_LIMIT;
    let mut assign: Vec<(Tensor, Tensor)> = Vec::new();
    for (keys, target) in &targets {
        let present: Vec<(&String, &Tensor)> = keys.iter().filter_map(|k| sd.get(k).map(|t| (k, t))).collect();
        if present.is_empty() {
            for key in keys {
                let guess = if guesses {
                    keyword_twin(key, &unexpected).or_else(|| suggest(key, unexpected.iter().map(String::as_str)))
                } else {
                    None
                };
                err.missing_keys.push((key.clone(), guess));
            }
            continue;
        }
        let mut fits = true;
        for &(key, src) in &present {
            let mismatch = |reason| Mismatch {
                key: key.clone(),
                expected: (target.shape().to_vec(), target.dtype()),
                got: (src.shape().to_vec(), src.dtype()),
                reason,
            };
            if src.shape() != target.shape() {
                err.mismatched.push(mismatch("size mismatch"));
            } else if kind(src.dtype()) != kind(target.dtype()) {
                err.mismatched.push(mismatch("dtype mismatch"));
            } else if src.device() == Device::Meta && target.device() != Device::Meta {
                err.mismatched.push(mismatch("no values (meta tensor)"));
            } else if !take && overflows(src, target.dtype()) {
                err.mismatched.push(mismatch("finite values overflow the module's dtype (they would load as inf)"));
            } else if take && target.shares_storage_with_views() {
                err.mismatched.push(mismatch(
                    "the entry shares its storage with its views (a sharded parameter) and cannot take another \
                     tensor; load without `assign`",
                ));
            } else {
                continue;
            }
            fits = false;
        }
        if !fits {
            continue;
        }
        let (_, first) = present[0];
        if present[1..].iter().any(|&(_, other)| !same_values(first, other, target.dtype())) {
            err.tied_conflicts.push(present.iter().map(|(k, _)| (*k).clone()).collect());
            continue;
        }
        assign.push((target.clone(), first.clone()));
    }
    err.unexpected_keys = unexpected;
    if !err.mismatched.is_empty() || !err.tied_conflicts.is_empty() {
        return Err(Error::StateDict(Box::new(err)));
    }
    Ok(Plan { assign, keys: err })
}

/// Whether converting `src` to the module entry's `dtype` turns a finite value infinite
/// (an f32 70000 loaded into an f16 model, an f64 1e300 into f32): PyTorch's `copy_` does
/// so silently, and the model then computes with `inf`.
fn overflows(src: &Tensor, dtype: DType) -> bool {
    let narrower = matches!(
        (src.dtype(), dtype),
        (DType::F64, DType::F32 | DType::F16 | DType::BF16)
            | (DType::F32 | DType::BF16, DType::F16)
            | (DType::F32, DType::BF16)
    );
    if !narrower || src.device() == Device::Meta {
        return false;
    }
    no_grad(|| {
        let src = src.detached_for_keeping();
        // An infinite value converts to the same infinity and NaN to NaN, so a conversion
        // that is infinite where the value is not overflowed.
        src.to_dtype(dtype).isinf().ne(&src.isinf()).any().item_bool()
    })
}

/// Whether two state-dict values of one shape load as the same value into an entry of
/// `dtype` (bit for bit after the conversion, NaN equal to NaN).
fn same_values(a: &Tensor, b: &Tensor, dtype: DType) -> bool {
    if a.device() == Device::Meta || b.device() == Device::Meta {
        return a.device() == b.device();
    }
    no_grad(|| {
        let on_cpu = |t: &Tensor| t.detached_for_keeping().to_dtype(dtype).to_device(Device::Cpu);
        let (a, b) = (on_cpu(a), on_cpu(b));
        let equal = a.eq(&b);
        let equal = if dtype.is_float() {
            // NaN != NaN: where `a` is NaN, equal when `b` is NaN too.
            Tensor::where_cond(&a.isnan(), &b.isnan(), &equal)
        } else {
            equal
        };
        equal.all().item_bool()
    })
}

/// A load checked and converted, not yet assigned: [`prepare`] does everything that can
/// fail, [`Prepared::commit`] what cannot. `Checkpoint::restore` prepares the model's load,
/// loads the optimizer's state (which may still fail), then commits: one plan, one
/// conversion of each tensor.
pub(crate) struct Prepared {
    converted: Vec<(Tensor, Tensor)>,
    /// Whether the entries take the converted tensors (`assign`) or copy them.
    assign: bool,
    /// `(module path, state)`: the extra states to set, each checked by its module.
    extra: Vec<(String, serde_json::Value)>,
    keys: IncompatibleKeys,
}

/// Every check of `load_state_dict(sd, strict)` and the conversions of the values it would
/// assign (dtype, device), touching nothing in the module: the load pre-hooks edit a copy
/// of `sd`, extra states are matched and checked, the load post-hooks see the keys, and
/// strictness is judged on the keys they leave.
pub(crate) fn prepare(m: &dyn Module, sd: &StateDict, config: LoadStateDictConfig) -> Result<Prepared> {
    let LoadStateDictConfig { strict, assign } = config;
    let sd = state_hooks::run_load_pre_hooks(m, sd)?;
    let sd: &StateDict = &sd;
    let extra = state_hooks::plan_extra(m, sd)?;
    let mut plan = plan(m, sd, assign)?;
    plan.keys.missing_keys.extend(extra.missing.into_iter().map(|k| (k, None)));
    plan.keys.unexpected_keys.extend(extra.unexpected);
    let mut keys = IncompatibleKeys {
        missing_keys: plan.keys.missing_keys.iter().map(|(k, _)| k.clone()).collect(),
        unexpected_keys: plan.keys.unexpected_keys.clone(),
    };
    if state_hooks::has_load_post_hooks(m) {
        state_hooks::run_load_post_hooks(m, &mut keys)?;
        // The report is what the hooks left: keys they took out are no longer offending,
        // keys they added are (without a guess).
        let guesses: std::collections::HashMap<String, Option<String>> = plan.keys.missing_keys.drain(..).collect();
        plan.keys.missing_keys =
            keys.missing_keys.iter().map(|k| (k.clone(), guesses.get(k).cloned().flatten())).collect();
        plan.keys.unexpected_keys = keys.unexpected_keys.clone();
    }
    if strict && !keys.is_empty() {
        return Err(Error::StateDict(Box::new(plan.keys)));
    }
    // 3. Conversions happen before any assignment, so a failure cannot leave a partial load.
    if assign {
        // The state dict's own buffers, shared copy-on-write (`set_data`): nothing is copied
        // now, and a later in-place write to either side copies first.
        return Ok(Prepared { converted: plan.assign, assign, extra: extra.set, keys });
    }
    let converted: Vec<(Tensor, Tensor)> = no_grad(|| {
        plan.assign
            .into_iter()
            .map(|(target, src)| {
                let device = if target.device() == Device::Meta { src.device() } else { target.device() };
                let value = src.detached_for_keeping().to_dtype(target.dtype()).to_device(device);
                (target, value)
            })
            .collect()
    });
    Ok(Prepared { converted, assign, extra: extra.set, keys })
}

pub(crate) fn load_state_dict(
    m: &mut dyn Module,
    sd: &StateDict,
    config: LoadStateDictConfig,
) -> Result<IncompatibleKeys> {
    Ok(prepare(&*m, sd, config)?.commit(m))
}

impl Prepared {
    /// Sets the prepared extra states and assigns the prepared values into `m`, the module
    /// they were prepared for (nothing here can fail).
    pub(crate) fn commit(self, m: &mut dyn Module) -> IncompatibleKeys {
        for (path, state) in &self.extra {
            m.get_submodule_mut(path)
                .expect("internal: the module of a prepared extra state is where the plan found it")
                .set_extra_state_json(state);
        }
        for (target, value) in self.converted {
            if self.assign {
                target.set_data(&value);
            } else {
                assign(&target, &value);
            }
        }
        self.keys
    }
}

/// One entry's new value, in place where it can be.
fn assign(target: &Tensor, value: &Tensor) {
    let broadcast = target.strides().iter().zip(target.shape()).any(|(&s, &n)| s == 0 && n > 1);
    if target.device() == Device::Meta || broadcast {
        // No storage to copy into (meta: the entry takes the value, PyTorch's
        // `assign=True`), or storage `copy_` refuses to write (an expanded entry, whose
        // elements share memory): the entry takes its own.
        target.set_data(value);
    } else {
        // In place, as PyTorch's `param.copy_(input)`: the entry's views and detached
        // handles (an earlier `state_dict()`'s) see the loaded values.
        no_grad(|| target.copy_(value));
    }
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
