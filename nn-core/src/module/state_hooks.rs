//! State-dict customisation: what PyTorch modules do with `register_state_dict_post_hook`,
//! `register_load_state_dict_pre_hook`, `register_load_state_dict_post_hook`,
//! `get_extra_state`/`set_extra_state` and the class attribute `_version`.
//!
//! - **Extra state.** A module with non-tensor state (a vocabulary size, a table of
//!   quantisation scales, a counter) implements [`ExtraState`] and says so with
//!   `#[module(extra_state)]`. [`state_dict`](super::Module::state_dict) records it under
//!   PyTorch's key, `<prefix>._extra_state`, as JSON beside the tensors
//!   ([`StateDict::extra_state`]); a file keeps it in its metadata. Loading takes it back:
//!   the value is parsed (an [`ExtraState::State`] that does not deserialise is an error
//!   naming the module, nothing changed) before anything is assigned, and a missing or
//!   unexpected `_extra_state` is a missing or unexpected key as any other.
//! - **Versions.** `#[module(version = 2)]` records the module's layout version in every
//!   state dict it writes ([`StateDict::version`]), as PyTorch records `_version` in the
//!   state dict's `_metadata`; a load pre-hook reads the version the file was written with
//!   (`None` for a file written before the module had one) and migrates old keys. A
//!   migration every instance of a type needs (PyTorch's `_load_from_state_dict` override)
//!   is the type's [`MigrateState`], with `#[module(migrate)]`: it runs before the
//!   instance's load pre-hooks, and copies keep it (instance hooks are not copied).
//! - **Hooks** (on a module's [`ModuleBase`](super::ModuleBase), through
//!   [`Hooks`](super::Hooks)): a state-dict post-hook edits what `state_dict` returns; a
//!   load pre-hook edits (a copy of) what `load_state_dict` was given, before anything is
//!   matched; a load post-hook sees the [`IncompatibleKeys`] and may take keys out of it
//!   before strictness is judged. They run in PyTorch's order: load pre-hooks parent first
//!   (pre-order), post-hooks children first (post-order), each module's in registration
//!   order, once per path the module is reached by. Prefixes are PyTorch's: `""` for the
//!   root, `"encoder.0."` below it.
//!
//! Where nn differs from PyTorch, it is so that a load stays all or nothing: load
//! post-hooks run once every key has been matched and every value checked, *before* the
//! values are assigned (PyTorch runs them after assigning, so a strict failure they could
//! not prevent leaves the model half-loaded), and they see the whole load's keys (PyTorch's
//! see the keys found so far). A load pre-hook that makes a key the model does not have (a
//! migration renaming `w` to a misspelt `weigth`) is refused naming the module, strict or
//! not: the value would be dropped silently as unexpected.
//!
//! A hook that returns an error stops the save or load with [`Error::StateDictHook`] naming
//! the module's path, type and the hook's kind; one that panics panics with a message
//! naming them. Either way the module is as it was.
//!
//! ```
//! use nn_core::prelude::*;
//! use nn_core::{ExtraState, StateDict};
//!
//! /// A layer whose checkpoint layout changed: version 1 called its weight `w`.
//! #[derive(Module)]
//! #[module(version = 2, extra_state)]
//! struct Scale {
//!     #[param]
//!     weight: Parameter,
//!     calls: u64,
//!     #[base]
//!     base: ModuleBase,
//! }
//! impl Compute for Scale {
//!     type Input = Tensor;
//!     type Output = Tensor;
//!     fn compute(&self, x: &Tensor) -> Tensor { x * self.weight.tensor() }
//! }
//! impl ExtraState for Scale {
//!     type State = u64;
//!     fn extra_state(&self) -> u64 { self.calls }
//!     fn set_extra_state(&mut self, calls: u64) { self.calls = calls }
//! }
//!
//! let mut m = Scale { weight: Parameter::new(Tensor::zeros(&[2])), calls: 0, base: ModuleBase::new() };
//! // Migrate version-1 files: `w` became `weight`.
//! m.register_load_state_dict_pre_hook(|sd, prefix, version| {
//!     if version.unwrap_or(1) < 2 {
//!         if let Some(w) = sd.remove(&format!("{prefix}w")) {
//!             sd.insert(format!("{prefix}weight"), w);
//!         }
//!     }
//!     Ok(())
//! })
//! .unwrap();
//!
//! // A version-1 file: `w`, no recorded version, no extra state.
//! let old: StateDict = [("w".to_string(), Tensor::ones(&[2]))].into_iter().collect();
//! let report = m.load_state_dict(&old, false).unwrap();
//! assert_eq!(report.missing_keys, ["_extra_state"]);
//! assert_eq!(m.weight.tensor().to_vec(), [1.0, 1.0]);
//!
//! m.calls = 7;
//! let sd = m.state_dict();
//! assert_eq!(sd.version(""), Some(2));
//! assert_eq!(sd.extra_state("_extra_state"), Some(&serde_json::json!(7)));
//! let dir = tempfile::tempdir().unwrap();
//! m.save(dir.path().join("m.safetensors")).unwrap();
//! m.calls = 0;
//! m.load(dir.path().join("m.safetensors")).unwrap(); // strict: the extra state is there
//! assert_eq!(m.calls, 7);
//! ```

use std::borrow::Cow;
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::hooks::panic_text;
use super::{walk, IncompatibleKeys, Item, Module};
use crate::error::{Error, Result};
use crate::state_dict::StateDict;

pub use super::hooks::{HookResult, LoadStateDictPostHook, LoadStateDictPreHook, StateDictPostHook};

/// A module's non-tensor state, saved with its tensors (PyTorch's `get_extra_state` and
/// `set_extra_state`). Select it with `#[module(extra_state)]` on the struct; the state is
/// kept as JSON under `<prefix>._extra_state`. See the [module docs](self).
pub trait ExtraState {
    /// The state as saved: anything serde reads and writes as JSON (a number, a struct, a
    /// table). A value that does not deserialise as `State` is refused at load, naming the
    /// module; a `Deserialize` impl that checks its value refuses the same way.
    type State: serde::Serialize + serde::de::DeserializeOwned;

    /// The state to save.
    fn extra_state(&self) -> Self::State;

    /// Takes a loaded state. Called only once every value of the load has been checked, so
    /// it cannot fail.
    fn set_extra_state(&mut self, state: Self::State);
}

/// The last component of an extra state's key (PyTorch's `_EXTRA_STATE_KEY_SUFFIX`).
pub const EXTRA_STATE_KEY: &str = "_extra_state";

/// The key of the extra state of the module at `path`.
pub(crate) fn extra_key(path: &str) -> String {
    if path.is_empty() {
        EXTRA_STATE_KEY.to_string()
    } else {
        format!("{path}.{EXTRA_STATE_KEY}")
    }
}

/// PyTorch's prefix of the module at `path`: `""`, or the path and a dot.
fn prefix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{path}.")
    }
}

/// Every module under `root` with its path, children before their parent (PyTorch's
/// order for post-hooks), once per path it is reached by.
fn post_order(root: &dyn Module) -> Vec<(String, &dyn Module)> {
    fn go<'a>(m: &'a dyn Module, path: String, out: &mut Vec<(String, &'a dyn Module)>) {
        m.visit(&mut |name, item| {
            if let Item::Module(child) = item {
                let p = if path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
                go(child, p, out);
            }
        });
        out.push((path, m));
    }
    let mut out = Vec::new();
    go(root, String::new(), &mut out);
    out
}

/// The state-dict hooks of `m`: its base's, then those of the module it shows as itself
/// ([`transparent_inner`](super::Module::transparent_inner)), which is not otherwise
/// reached.
/// The type-level migration of `m`, or of the module it shows as itself.
fn migration_of(m: &dyn Module) -> Option<&dyn MigrateState> {
    let mut cur = Some(m);
    while let Some(m) = cur {
        if let Some(mg) = m.state_dict_migration() {
            return Some(mg);
        }
        cur = m.transparent_inner();
    }
    None
}

/// A module type's migration of older state-dict layouts, written once for the type
/// (PyTorch overrides `_load_from_state_dict` for this): `#[module(migrate)]` on the struct
/// makes every load run [`migrate`](Self::migrate) before the module's load pre-hooks, with
/// the version the state dict records for the module (`None` for a file written before
/// the type had one, or by a PyTorch without `_metadata`).
#[diagnostic::on_unimplemented(
    message = "`#[module(migrate)]` needs `{Self}` to implement `MigrateState`",
    label = "`{Self}` does not implement `MigrateState`",
    note = "write `impl MigrateState for {Self} {{ fn migrate(&self, sd: &mut StateDict, prefix: &str, version: \
            Option<u32>) -> HookResult {{ ... }} }}`, or remove `migrate`"
)]
pub trait MigrateState {
    /// Rewrites the entries under `prefix` (`""`, `"encoder.0."`) of an older layout
    /// (`version` below the type's) into the current one. `Err` stops the load, naming the
    /// module.
    fn migrate(&self, state_dict: &mut StateDict, prefix: &str, version: Option<u32>) -> HookResult;
}

fn hooks_of(m: &dyn Module) -> super::hooks::StateHooks {
    let mut all = super::hooks::StateHooks::default();
    let mut cur = Some(m);
    while let Some(m) = cur {
        if let Some(base) = m.base() {
            let h = base.state_hooks();
            all.post.extend(h.post);
            all.load_pre.extend(h.load_pre);
            all.load_post.extend(h.load_post);
        }
        cur = m.transparent_inner();
    }
    all
}

/// The text of a panic's payload.
/// Runs one hook (or extra-state call) of the module at `path`: its error becomes
/// [`Error::StateDictHook`], its panic a panic naming the module and the hook's kind.
fn run<T>(
    kind: &'static str,
    path: &str,
    m: &dyn Module,
    f: impl FnOnce() -> std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>,
) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(Error::StateDictHook { kind, path: path.to_string(), module: m.type_name(), source }),
        Err(payload) => panic!(
            "{kind} of `{}` ({}) panicked: {}",
            if path.is_empty() { "<root>" } else { path },
            m.type_name(),
            panic_text(&*payload)
        ),
    }
}

/// Adds the tree's versions and extra states to `sd` (pre-order), then runs its state-dict
/// post-hooks (post-order): the end of [`try_state_dict`](super::Module::try_state_dict).
pub(crate) fn finish_state_dict(root: &dyn Module, sd: &mut StateDict) -> Result<()> {
    for (path, m) in root.named_modules() {
        if let Some(v) = m.state_dict_version() {
            sd.set_version(&path, v);
        }
        if m.has_extra_state() {
            let state = run("get_extra_state", &path, m, || {
                let state = m.extra_state_json()?;
                // JSON has no NaN or infinity (serde writes them as `null`): a state that
                // would not load back is refused now, not at the load.
                m.check_extra_state_json(&state).map_err(|e| {
                    format!("the state does not read back from its JSON form {state} ({e}); NaN and infinities are not JSON")
                })?;
                Ok(state)
            })?;
            sd.insert_extra_state(extra_key(&path), state);
        }
    }
    for (path, m) in post_order(root) {
        for hook in hooks_of(m).post {
            run("state_dict post-hook", &path, m, || hook(sd, &prefix(&path)))?;
        }
    }
    Ok(())
}

/// Every key a load into `root` can use: its parameters' and persistent buffers' names,
/// and the extra-state keys of the modules that keep one.
fn expected_keys(root: &dyn Module) -> HashSet<String> {
    let mut keys = HashSet::new();
    walk(root, &mut String::new(), &mut |path, item| match item {
        Item::Param(_) | Item::Buffer { persistent: true, .. } => {
            keys.insert(path.to_string());
        }
        Item::Module(m) if m.has_extra_state() => {
            keys.insert(extra_key(path));
        }
        _ => {}
    });
    if root.has_extra_state() {
        keys.insert(extra_key(""));
    }
    keys
}

/// Every key of `sd`, tensors and extra states.
fn all_keys(sd: &StateDict) -> HashSet<String> {
    sd.keys().chain(sd.extra_states().map(|(k, _)| k)).map(str::to_string).collect()
}

/// Runs the tree's load pre-hooks (pre-order) on a copy of `sd`, or lends `sd` itself when
/// the tree has none. A key a hook makes that the model does not have is an error naming
/// the hook's module.
pub(crate) fn run_load_pre_hooks<'s>(root: &dyn Module, sd: &'s StateDict) -> Result<Cow<'s, StateDict>> {
    let hooked: Vec<_> = root
        .named_modules()
        .into_iter()
        .filter_map(|(path, m)| {
            let hooks = hooks_of(m).load_pre;
            let migration = migration_of(m);
            (!hooks.is_empty() || migration.is_some()).then_some((path, m, migration, hooks))
        })
        .collect();
    if hooked.is_empty() {
        return Ok(Cow::Borrowed(sd));
    }
    let expected = expected_keys(root);
    let mut work = sd.clone();
    for (path, m, migration, hooks) in hooked {
        let version = work.version(&path);
        // The type's migration first, then the instance's hooks (PyTorch: the class's
        // `_load_from_state_dict` sees the state dict after the pre-hooks; here a hook
        // sees it migrated, so that hooks are written against the current layout).
        let steps = migration
            .map(|mg| {
                (
                    "state-dict migration",
                    Box::new(move |sd: &mut StateDict, p: &str, v: Option<u32>| mg.migrate(sd, p, v))
                        as Box<dyn Fn(&mut StateDict, &str, Option<u32>) -> HookResult + '_>,
                )
            })
            .into_iter()
            .chain(hooks.into_iter().map(|h| {
                (
                    "load_state_dict pre-hook",
                    Box::new(move |sd: &mut StateDict, p: &str, v: Option<u32>| h(sd, p, v))
                        as Box<dyn Fn(&mut StateDict, &str, Option<u32>) -> HookResult + '_>,
                )
            }));
        for (kind, hook) in steps {
            let before = all_keys(&work);
            run(kind, &path, m, || hook(&mut work, &prefix(&path), version))?;
            let mut made: Vec<String> =
                all_keys(&work).into_iter().filter(|k| !before.contains(k) && !expected.contains(k)).collect();
            if !made.is_empty() {
                made.sort();
                let listed =
                    made.iter().take(crate::error::MAX_LISTED_KEYS).map(|k| format!("`{k}`")).collect::<Vec<_>>();
                let more = made.len().saturating_sub(listed.len());
                let more = if more > 0 { format!(" and {more} more") } else { String::new() };
                return Err(Error::StateDictHook {
                    kind,
                    path: path.clone(),
                    module: m.type_name(),
                    source: format!(
                        "it made the key(s) {}{more}, which the model does not have: their values would be dropped as \
                         unexpected",
                        listed.join(", ")
                    )
                    .into(),
                });
            }
        }
    }
    Ok(Cow::Owned(work))
}

/// The extra states a load would set, and its missing and unexpected extra-state keys.
pub(crate) struct ExtraPlan {
    /// `(module path, state)`, each state checked by the module.
    pub(crate) set: Vec<(String, serde_json::Value)>,
    pub(crate) missing: Vec<String>,
    pub(crate) unexpected: Vec<String>,
}

/// Matches `sd`'s extra states with the modules of `root` that keep one, each value
/// checked by its module (touching nothing).
pub(crate) fn plan_extra(root: &dyn Module, sd: &StateDict) -> Result<ExtraPlan> {
    let mut plan = ExtraPlan { set: Vec::new(), missing: Vec::new(), unexpected: Vec::new() };
    let mut claimed = HashSet::new();
    for (path, m) in root.named_modules() {
        if !m.has_extra_state() {
            continue;
        }
        let key = extra_key(&path);
        match sd.extra_state(&key) {
            None => plan.missing.push(key.clone()),
            Some(_) if m.handle_count() > 1 => {
                return Err(Error::StateDictHook {
                    kind: "set_extra_state",
                    path: path.clone(),
                    module: m.type_name(),
                    source: format!(
                        "the module is one of {} handles on it (an `Arc` with clones alive: a checkpointed forward \
                         whose backward has not run holds one), so its extra state cannot be set; run backward or \
                         drop the other handles first",
                        m.handle_count()
                    )
                    .into(),
                });
            }
            Some(v) => {
                run("set_extra_state", &path, m, || m.check_extra_state_json(v).map_err(Into::into))?;
                plan.set.push((path, v.clone()));
            }
        }
        claimed.insert(key);
    }
    plan.unexpected = sd.extra_states().map(|(k, _)| k).filter(|k| !claimed.contains(*k)).map(str::to_string).collect();
    Ok(plan)
}

/// Runs the tree's load post-hooks (post-order) on `keys`.
pub(crate) fn run_load_post_hooks(root: &dyn Module, keys: &mut IncompatibleKeys) -> Result<()> {
    for (path, m) in post_order(root) {
        for hook in hooks_of(m).load_post {
            run("load_state_dict post-hook", &path, m, || hook(keys))?;
        }
    }
    Ok(())
}

/// Whether any module of the tree has a load post-hook (the load then judges strictness
/// after them).
pub(crate) fn has_load_post_hooks(root: &dyn Module) -> bool {
    root.named_modules().iter().any(|(_, m)| !hooks_of(*m).load_post.is_empty())
}

#[cfg(test)]
#[path = "state_hooks_tests.rs"]
mod tests;
