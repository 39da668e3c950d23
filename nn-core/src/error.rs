//! The crate's error type: everything that can fail because of the outside world.
//!
//! Programming errors inside tensor operations (two shapes that cannot be multiplied, a
//! dimension out of range) panic with a message naming the op and the operands, like
//! PyTorch raises. Operations on files, user-provided data and state dicts return
//! [`Result<_, Error>`](Error) instead, because a caller can reasonably recover from them.

use std::path::PathBuf;

use crate::dtype::DType;

/// Errors returned by fallible operations of `nn-core`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The number of values does not match the requested shape.
    #[error("{op}: shape {shape:?} needs {expected} elements, got {got}")]
    ElementCount {
        /// The constructor that was called.
        op: &'static str,
        /// The requested shape.
        shape: Vec<usize>,
        /// `shape.iter().product()`.
        expected: usize,
        /// The number of values supplied.
        got: usize,
    },
    /// A shape whose dimensions multiply past [`crate::shape::MAX_NUMEL`] (zero dimensions
    /// counted as 1): no tensor can have it.
    #[error("{op}: shape {shape:?} is unrepresentable: its dimensions multiply past isize::MAX (zero dimensions counted as 1)")]
    ShapeOverflow {
        /// The constructor, loader or operation that was given the shape.
        op: &'static str,
        /// The shape.
        shape: Vec<usize>,
    },
    /// A tensor buffer the allocator could not provide.
    #[error("{op}: cannot allocate {bytes} bytes for a tensor of shape {shape:?}")]
    Allocation {
        /// The constructor or operation.
        op: &'static str,
        /// The tensor's shape.
        shape: Vec<usize>,
        /// The bytes asked for.
        bytes: u128,
    },
    /// A value-dependent operation was asked of a tensor that has no values.
    #[error("{op}: tensor on the meta device has no values (shape {shape:?}); materialise it first with `to_device(Device::Cpu)`")]
    MetaHasNoValues {
        /// The operation that needed values.
        op: &'static str,
        /// The tensor's shape.
        shape: Vec<usize>,
    },
    /// A dtype that the operation does not support.
    #[error("{op}: unsupported dtype {dtype}")]
    UnsupportedDType {
        /// The operation.
        op: &'static str,
        /// The dtype it was given.
        dtype: DType,
    },
    /// `get_submodule` met a path component that does not exist.
    #[error("{parent_type} at `{parent}` has no submodule `{missing}` (looking up `{path}`); its children are: [{}]", children.join(", "))]
    SubmoduleNotFound {
        /// The full path asked for.
        path: String,
        /// The first component not found.
        missing: String,
        /// The path of the module searched (`<root>` for the top).
        parent: String,
        /// The type of the module searched.
        parent_type: &'static str,
        /// The names of its children.
        children: Vec<String>,
    },
    /// `get_parameter` / `get_buffer` found the module but no such entry in it.
    #[error(
        "{module_type} at `{}` has no {kind} `{}` (looking up `{path}`); its {kind}s are: [{}]",
        path.rsplit_once('.').map_or("<root>", |(m, _)| m),
        path.rsplit_once('.').map_or(path.as_str(), |(_, n)| n),
        names.join(", ")
    )]
    EntryNotFound {
        /// `"parameter"` or `"buffer"`.
        kind: &'static str,
        /// The full path asked for: the module's path, a dot, the entry's name.
        path: String,
        /// The type of the module searched.
        module_type: &'static str,
        /// The names of its direct entries of that kind.
        names: Vec<String>,
    },
    /// `load_state_dict` found missing, unexpected or mismatched entries; the model is
    /// unchanged.
    #[error("{0}")]
    StateDict(Box<StateDictError>),
    /// A file that is not valid safetensors (truncated, corrupt or hostile).
    #[error("`{}` is not a valid safetensors file: {reason}", path.display())]
    InvalidFile {
        /// The file (`<memory>` for bytes).
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A file that is not a PyTorch state dict this reader accepts
    /// ([`StateDict::load_pytorch`](crate::StateDict::load_pytorch)): corrupt, truncated,
    /// hostile (a pickle asking for a global or opcode outside the tensor-rebuild set) or of
    /// a format not read (legacy, TorchScript, big-endian).
    #[error("`{}` is not a PyTorch state dict nn can read: {reason}", path.display())]
    InvalidPyTorchFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it, naming the archive entry.
        reason: String,
    },
    /// A safetensors entry with an element type that has no counterpart here.
    #[error("`{}`: tensor `{key}` has dtype {dtype}, which nn cannot represent (supported: F32, F64, F16, BF16, I64, BOOL, and integers that widen to I64)", path.display())]
    UnsupportedFileDType {
        /// The file.
        path: PathBuf,
        /// The entry.
        key: String,
        /// The file's dtype name.
        dtype: String,
    },
    /// An error about one entry of a state dict.
    #[error("state dict entry `{key}`: {source}")]
    Entry {
        /// The entry.
        key: String,
        /// What went wrong.
        #[source]
        source: Box<Error>,
    },
    /// Hooks were registered on a module that does not run (a container such as
    /// `ModuleList`), where they could never fire.
    #[error("`{module}`{} has no forward of its own, so a hook on it would never fire: register hooks on the modules it holds", at_path(path))]
    NoHooks {
        /// The module's type name.
        module: &'static str,
        /// Its path, when registration went through one.
        path: Option<String>,
    },
    /// State-dict hooks were registered on a module that has no [`ModuleBase`] to hold
    /// them (a `#[derive(Module)]` struct without a `#[base]` field).
    ///
    /// [`ModuleBase`]: crate::ModuleBase
    #[error(
        "`{module}`{} has no `ModuleBase` to hold state-dict hooks: give it a `#[base] base: ModuleBase` field",
        at_path(path)
    )]
    NoHookStore {
        /// The module's type name.
        module: &'static str,
        /// Its path, when registration went through one.
        path: Option<String>,
    },
    /// A typed look-up (`get_submodule_as::<T>`) found a module of another type.
    #[error("the module at `{path}` is a `{found}`, not a `{expected}`")]
    WrongModuleType {
        /// The path looked up.
        path: String,
        /// The type asked for.
        expected: &'static str,
        /// The module's type name.
        found: &'static str,
    },
    /// `set_submodule` was given a module that does not fit the slot.
    #[error("cannot set `{path}`: {reason}")]
    SetSubmodule {
        /// The path of the slot.
        path: String,
        /// Why (the slot's type and the given one).
        reason: String,
    },
    /// A lazy module was asked for its state, or to move, before its first forward pass.
    #[error("`{module}` has uninitialized parameters: run a forward pass first, which infers their shapes")]
    Uninitialized {
        /// The module's type name.
        module: &'static str,
    },
    /// An optimizer state that does not fit the optimizer.
    #[error("optimizer state: {0}")]
    OptimizerState(String),
    /// A learning-rate scheduler state that does not fit the optimizer; nothing changed.
    #[error("scheduler state: `{key}` {reason}")]
    SchedulerState {
        /// The offending field (`base_lrs`, `base_lrs[2]`, `last_epoch`).
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Invalid settings for a [`GradScaler`](crate::amp::GradScaler), at construction or
    /// as a new scale given to `update_with`; nothing was built or changed.
    #[error("GradScaler: `{key}` {reason}")]
    GradScalerConfig {
        /// The offending setting (`init_scale`, `growth_factor`, `backoff_factor`,
        /// `growth_interval`, `new_scale`).
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A [`GradScalerState`](crate::amp::GradScalerState) that no scaler can hold; the
    /// scaler it was given to is unchanged.
    #[error("grad scaler state: `{key}` {reason}")]
    GradScalerState {
        /// The offending field, by PyTorch's key name (`scale`, `growth_factor`,
        /// `backoff_factor`, `growth_interval`, `_growth_tracker`).
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Two entries of an optimizer's parameter groups collide: the same parameter twice,
    /// or two parameters under one name (whose state would share one `state_dict()` key).
    /// Nothing was built.
    #[error("{}", group_conflict_message(.key, .first_key, *.first_group, *.second_group, *.same_parameter))]
    ParamGroupConflict {
        /// The name of the entry met second.
        key: String,
        /// The name of the entry met first (equal to `key` for a name clash).
        first_key: String,
        /// The group of the entry met first.
        first_group: usize,
        /// The group of the entry met second (equal to `first_group` within one group).
        second_group: usize,
        /// True when both entries are the same parameter (by [`crate::Tensor::id`]);
        /// false when two different parameters share the name `key`.
        same_parameter: bool,
    },
    /// Invalid optimizer hyper-parameters (a negative learning rate, betas outside
    /// `[0, 1)`, ...), the cases where PyTorch raises.
    #[error("{optimizer}: {reason}")]
    OptimizerConfig {
        /// The optimizer (`Sgd`, `Adam`, `AdamW`).
        optimizer: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A checkpoint whose metadata is missing or malformed.
    #[error("checkpoint `{}`: {reason}", path.display())]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A path that names something other than a regular file (a FIFO, a device, a
    /// socket, a directory): loaders read regular files only.
    #[error("`{}` is not a regular file ({kind}): only regular files are loaded", path.display())]
    NotARegularFile {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// A parametrization that cannot be registered, assigned through or removed
    /// ([`crate::module::parametrize`]): no such parameter, an output of another shape or
    /// dtype than the original, a `right_inverse` that returns the wrong tensors.
    #[error("parametrization of `{tensor}` on `{module}`: {reason}")]
    Parametrization {
        /// The type of the module that holds the tensor.
        module: String,
        /// The parametrized tensor's name on it (`weight`).
        tensor: String,
        /// What is wrong, and what to do instead.
        reason: String,
    },
    /// A device that tensors cannot be placed on: a GPU without the `gpu` feature, or an
    /// adapter that does not exist or failed to open.
    #[error("device {device} is not available: {reason}")]
    DeviceUnavailable {
        /// The device asked for.
        device: crate::Device,
        /// Why it cannot be used (and, when it applies, what to do instead).
        reason: String,
    },
    /// An `NN_KERNELS` override the CPU kernels cannot follow: an op without kernel
    /// variants, a variant it does not have, or a vector copy this CPU cannot run (the
    /// message names the CPU's features). See [`crate::cpu`].
    #[error("{reason}")]
    KernelOverride {
        /// What is wrong, naming the entry.
        reason: String,
    },
    /// A fill value the dtype cannot hold (PyTorch raises "value cannot be converted to
    /// type ... without overflow"): a finite value past a float type's range (it would
    /// be infinite), or a NaN, infinite or out-of-range value for i64 (it would saturate).
    #[error("{op}: value {value} cannot be converted to {dtype} without overflow")]
    FillValue {
        /// The operation (`masked_fill`, `pad`, `Tensor::full_on`).
        op: &'static str,
        /// The value asked for.
        value: f64,
        /// The tensor's dtype.
        dtype: DType,
    },
    /// A module conversion (`to_device`, `to_empty`, `to_dtype`) refused before anything
    /// changed: a tensor on the meta device has no values to move, or a sub-module cannot
    /// follow (see [`Module::check_conversion`](crate::Module::check_conversion)).
    #[error("{conversion}: {reason}")]
    ConversionRefused {
        /// The conversion asked for (`to_device(cpu)`, `to_dtype(f64)`).
        conversion: String,
        /// What refused it, and what to do instead.
        reason: String,
    },
    /// A rename of state-dict keys ([`StateDict::strip_prefix`](crate::StateDict::strip_prefix),
    /// [`add_prefix`](crate::StateDict::add_prefix)) would give two entries one key: one
    /// would be lost.
    #[error("{op}: `{first}` and `{second}` would both be named `{key}`, and one of them would be lost")]
    KeyCollision {
        /// The rename (`strip_prefix("_orig_mod.")`).
        op: String,
        /// The key both would have.
        key: String,
        /// The first entry's key before the rename.
        first: String,
        /// The second entry's key before the rename.
        second: String,
    },
    /// A state-dict hook returned an error, or a module's extra state could not be saved
    /// or was refused at load ([`state_hooks`](crate::module::state_hooks)): nothing was
    /// changed.
    #[error("{kind} of `{}` ({module}): {source}", if path.is_empty() { "<root>" } else { path })]
    StateDictHook {
        /// `"state_dict post-hook"`, `"load_state_dict pre-hook"`, `"load_state_dict
        /// post-hook"`, `"get_extra_state"` or `"set_extra_state"`.
        kind: &'static str,
        /// The module's dotted path (`""` for the root).
        path: String,
        /// The module's type name.
        module: &'static str,
        /// What the hook (or the extra state's serde) reported.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An I/O error, with the path it happened on.
    #[error("i/o error on `{}`: {source}", path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// A tensor whose shape or dtype does not fit the module entry it was loaded into.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// The state-dict key.
    pub key: String,
    /// What the module holds under that key: shape and dtype.
    pub expected: (Vec<usize>, DType),
    /// What the state dict holds.
    pub got: (Vec<usize>, DType),
    /// Why the pair is rejected.
    pub reason: &'static str,
}

/// Every problem found by one `load_state_dict` call, all reported together.
///
/// The fields hold every offending key. The message lists up to [`MAX_LISTED_KEYS`] of
/// each kind by name and counts the rest (`... and 999,900 more`): a hostile file with a
/// million entries must not produce a ten-megabyte error string.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StateDictError {
    /// Keys the module has and the state dict lacks (each with a "did you mean" guess
    /// among the unexpected keys, when one is close).
    pub missing_keys: Vec<(String, Option<String>)>,
    /// Keys the state dict has and the module lacks.
    pub unexpected_keys: Vec<String>,
    /// Keys present in both with incompatible shapes or dtypes.
    pub mismatched: Vec<Mismatch>,
    /// Names of one tied entry (one tensor in the module, held under several names) that
    /// the state dict holds with different values: which one to load is ambiguous.
    pub tied_conflicts: Vec<Vec<String>>,
    /// The module's type name, for the message.
    pub module: String,
}

/// Whether `word` is a Rust keyword (strict or reserved), so that no field can be named
/// it without `r#`: such checkpoint names need `rename`.
pub(crate) fn is_rust_keyword(word: &str) -> bool {
    const KEYWORDS: &[&str] = &[
        "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern", "false", "fn",
        "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "self",
        "Self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where", "while", "abstract",
        "become", "box", "do", "final", "gen", "macro", "override", "priv", "try", "typeof", "unsized", "virtual",
        "yield",
    ];
    KEYWORDS.contains(&word)
}

/// For a missing key and the state dict's key that differs from it in one dotted
/// component, a Rust keyword: the attribute that makes the field load under that name.
fn rename_hint(missing: &str, guess: &str) -> Option<String> {
    let (ours, theirs): (Vec<&str>, Vec<&str>) = (missing.split('.').collect(), guess.split('.').collect());
    if ours.len() != theirs.len() {
        return None;
    }
    let mut diff = ours.iter().zip(&theirs).enumerate().filter(|(_, (a, b))| a != b);
    let (Some((at, (field, word))), None) = (diff.next(), diff.next()) else { return None };
    if !is_rust_keyword(word) {
        return None;
    }
    let attr = if at + 1 == ours.len() { "param" } else { "module" };
    Some(format!(
        "`{word}` is a Rust keyword: keep the field `{field}` and write `#[{attr}(rename = \"{word}\")]` on it (for a \
         buffer, `#[buffer(rename = \"{word}\")]`)"
    ))
}

/// How many keys of each kind an error message names before it only counts the rest.
pub const MAX_LISTED_KEYS: usize = 100;

/// `1234567` as `1,234,567`.
pub(crate) fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Writes the first [`MAX_LISTED_KEYS`] items with `item`, then `... and N more`.
pub(crate) fn write_bounded<T>(
    f: &mut std::fmt::Formatter<'_>,
    items: &[T],
    mut item: impl FnMut(&mut std::fmt::Formatter<'_>, &T) -> std::fmt::Result,
) -> std::fmt::Result {
    for it in items.iter().take(MAX_LISTED_KEYS) {
        item(f, it)?;
    }
    if items.len() > MAX_LISTED_KEYS {
        write!(f, " ... and {} more", thousands(items.len() - MAX_LISTED_KEYS))?;
    }
    Ok(())
}

/// A prefix every key of `longer` starts with and which, taken off them, gives every key
/// of `shorter` (a state dict saved from a wrapped model: `_orig_mod.`, `module.`); the
/// shortest such, ending at a `.`.
fn shared_extra_prefix<'a>(longer: &[&'a str], shorter: &[&str]) -> Option<&'a str> {
    let first = *longer.first()?;
    if shorter.is_empty() {
        return None;
    }
    first.match_indices('.').map(|(i, _)| &first[..=i]).find(|p| {
        longer.iter().all(|k| k.starts_with(p)) && {
            let stripped: std::collections::HashSet<&str> = longer.iter().map(|k| &k[p.len()..]).collect();
            shorter.iter().all(|k| stripped.contains(k))
        }
    })
}

/// [`write_bounded`] for a list on one line: the items after `head`, separated by commas.
fn write_key_list<T>(
    f: &mut std::fmt::Formatter<'_>,
    head: &str,
    items: &[T],
    mut item: impl FnMut(&mut std::fmt::Formatter<'_>, &T) -> std::fmt::Result,
) -> std::fmt::Result {
    if items.is_empty() {
        return Ok(());
    }
    f.write_str(head)?;
    let mut first = true;
    write_bounded(f, items, |f, it| {
        f.write_str(if std::mem::take(&mut first) { " " } else { ", " })?;
        item(f, it)
    })
}

impl std::fmt::Display for StateDictError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "error(s) in loading state dict for {}:", self.module)?;
        let missing: Vec<&str> = self.missing_keys.iter().map(|(k, _)| k.as_str()).collect();
        let unexpected: Vec<&str> = self.unexpected_keys.iter().map(String::as_str).collect();
        // One line for a prefix on every key of one side: the lists would only repeat it.
        let summary = if let Some(p) = shared_extra_prefix(&unexpected, &missing) {
            Some(format!(
                "every key of the state dict starts with `{p}`, and without it the module has each of them (a \
                 state dict of a wrapped model: `torch.compile` saves `_orig_mod.`, DDP `module.`): load \
                 `state_dict.strip_prefix(\"{p}\")?`"
            ))
        } else {
            shared_extra_prefix(&missing, &unexpected).map(|p| {
                format!(
                    "every key of the module starts with `{p}`, and the state dict has each of them without it: \
                     load `state_dict.add_prefix(\"{p}\")`"
                )
            })
        };
        if let Some(summary) = summary {
            write!(f, "\n  {summary}")?;
            write!(f, "\n  missing key(s): {}", thousands(missing.len()))?;
            write!(f, "\n  unexpected key(s): {}", thousands(unexpected.len()))?;
        } else {
            write_key_list(f, "\n  missing key(s):", &self.missing_keys, |f, (k, guess)| {
                write!(f, "\"{k}\"")?;
                if let Some(g) = guess {
                    write!(f, " (did you mean \"{g}\"?")?;
                    if let Some(hint) = rename_hint(k, g) {
                        write!(f, " {hint}")?;
                    }
                    f.write_str(")")?;
                }
                Ok(())
            })?;
            write_key_list(f, "\n  unexpected key(s):", &self.unexpected_keys, |f, k| write!(f, "\"{k}\""))?;
        }
        write_bounded(f, &self.tied_conflicts, |f, names| {
            let names: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
            write!(
                f,
                "\n  tied entries with different values: {} are one tensor in the module (tied), but the state dict \
                 holds different values under them",
                names.join(" and ")
            )
        })?;
        write_bounded(f, &self.mismatched, |f, m| {
            write!(
                f,
                "\n  {}: \"{}\" is {:?} {} in the state dict but {:?} {} in the module",
                m.reason, m.key, m.got.0, m.got.1, m.expected.0, m.expected.1
            )
        })
    }
}

fn group_conflict_message(key: &str, first_key: &str, first: usize, second: usize, same: bool) -> String {
    let place = |g: usize, k: &str| format!("group {g} (as `{k}`)");
    if same {
        let (a, b) = (place(first, first_key), place(second, key));
        let r#where = if first == second { format!("twice in {a} and {b}") } else { format!("in {a} and in {b}") };
        format!(
            "optimizer parameter groups: the same parameter (or two handles on one storage) is {where}; a \
             parameter may belong to one group only (as in PyTorch): remove it from all but one"
        )
    } else {
        let r#where = if first == second {
            format!("appears twice in group {first}")
        } else {
            format!("is used in group {first} and in group {second}")
        };
        format!(
            "optimizer parameter groups: the name `{key}` {where}, so their states would share one \
             `state_dict()` key and one would be lost; give each group full dotted names, e.g. \
             `ParamGroup::with_prefix(\"encoder\", model.get_submodule(\"encoder\")?.named_parameters())`"
        )
    }
}

impl Error {
    /// Wraps the error with the state-dict key it concerns.
    pub fn with_key(self, key: &str) -> Error {
        Error::Entry { key: key.to_string(), source: Box::new(self) }
    }
}

/// `Result` with [`Error`] as the error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `" (at `path`)"`, or nothing.
fn at_path(path: &Option<String>) -> String {
    path.as_ref().map(|p| format!(" (at `{}`)", if p.is_empty() { "<root>" } else { p })).unwrap_or_default()
}
