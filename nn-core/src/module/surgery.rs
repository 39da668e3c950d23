//! Typed look-ups and replacing sub-modules (`get_submodule_as`, `set_submodule`).

use std::any::Any;

use super::Module;
use crate::error::{Error, Result};

/// What [`Module::__set_child`] did.
#[doc(hidden)]
#[derive(Debug)]
pub enum SetChild {
    /// The child was replaced.
    Done,
    /// No direct child has that name.
    NoSuchChild,
    /// The slot holds another type (its name).
    WrongType(&'static str),
    /// The module does not support replacing children.
    Unsupported,
}

impl dyn Module {
    /// [`Module::get_submodule_as`] on a trait object.
    ///
    /// # Errors
    /// As `get_submodule_as`.
    pub fn submodule_as<T: Module>(&self, path: &str) -> Result<&T> {
        let m = self.get_submodule(path)?;
        let found = m.type_name();
        m.as_any().downcast_ref::<T>().ok_or_else(|| wrong_type::<T>(path, found))
    }

    /// [`Module::get_submodule_as_mut`] on a trait object.
    ///
    /// # Errors
    /// As `get_submodule_as`.
    pub fn submodule_as_mut<T: Module>(&mut self, path: &str) -> Result<&mut T> {
        let m = self.get_submodule_mut(path)?;
        let found = m.type_name();
        m.as_any_mut().downcast_mut::<T>().ok_or_else(|| wrong_type::<T>(path, found))
    }

    /// [`Module::set_submodule`] on a trait object: `slot` holds `Some(module)`, taken on
    /// success; `given` names its type for errors.
    ///
    /// # Errors
    /// As `set_submodule`.
    pub fn set_submodule_dyn(&mut self, path: &str, slot: &mut dyn Any, given: &'static str) -> Result<()> {
        let (parent, child) = match path.rsplit_once('.') {
            Some((p, c)) => (p, c),
            None => ("", path),
        };
        if child.is_empty() {
            return Err(Error::SetSubmodule { path: path.into(), reason: "the path names no sub-module".into() });
        }
        let parent_module = self.get_submodule_mut(parent)?;
        let parent_type = parent_module.type_name();
        match parent_module.__set_child(child, slot) {
            SetChild::Done => Ok(()),
            SetChild::WrongType(expected) => Err(Error::SetSubmodule {
                path: path.into(),
                reason: format!("the slot holds `{expected}`, got `{given}`{}", box_hint(expected)),
            }),
            SetChild::NoSuchChild => {
                // The look-up error names the children that exist.
                self.get_submodule(path)?;
                Err(Error::SetSubmodule { path: path.into(), reason: format!("`{parent_type}` has no slot `{child}`") })
            }
            SetChild::Unsupported => Err(Error::SetSubmodule {
                path: path.into(),
                reason: format!("`{parent_type}` does not support replacing its sub-modules"),
            }),
        }
    }
}

fn wrong_type<T>(path: &str, found: &'static str) -> Error {
    Error::WrongModuleType { path: path.into(), expected: short_type_name::<T>(), found }
}

/// `T`'s name without module paths: `ModuleList<Linear>` for
/// `nn_layers::containers::ModuleList<nn_layers::linear::Linear>`. Leaked once per type
/// (the set of types a program names is finite).
#[doc(hidden)]
pub fn short_type_name<T: ?Sized>() -> &'static str {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashMap<&'static str, &'static str>>> = OnceLock::new();
    let full = std::any::type_name::<T>();
    let mut names = NAMES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    names.entry(full).or_insert_with(|| {
        let mut out = String::new();
        let mut word = String::new();
        for c in full.chars() {
            if c.is_alphanumeric() || c == '_' || c == ':' {
                word.push(c);
            } else {
                out.push_str(word.rsplit("::").next().unwrap_or(&word));
                word.clear();
                out.push(c);
            }
        }
        out.push_str(word.rsplit("::").next().unwrap_or(&word));
        Box::leak(out.into_boxed_str())
    })
}

fn box_hint(expected: &str) -> &'static str {
    if expected.contains("dyn ") {
        " (box the module first: `Box::new(m) as Box<dyn Layer>`)"
    } else {
        ""
    }
}
