//! Walking the tree in PyTorch's order, and dotted paths into it.

use std::collections::HashSet;

use super::{Item, Module};
use crate::error::Error;
use crate::tensor::Tensor;

/// Pre-order walk in PyTorch's order: a module's own parameters, then its own buffers,
/// then each child (reported, then walked). Dotted paths are built in one reused buffer.
pub(crate) fn walk<'a>(m: &'a dyn Module, prefix: &mut String, f: &mut dyn FnMut(&str, Item<'a>)) {
    use std::fmt::Write;
    for pass in 0..3 {
        m.visit(&mut |name, item| {
            let this_pass = match item {
                Item::Param(_) => 0,
                Item::Buffer { .. } => 1,
                Item::Module(_) => 2,
            };
            if this_pass != pass {
                return;
            }
            let len = prefix.len();
            if len > 0 {
                prefix.push('.');
            }
            let _ = write!(prefix, "{name}");
            f(prefix, item);
            if let Item::Module(child) = item {
                walk(child, prefix, f);
            }
            prefix.truncate(len);
        });
    }
}

/// The same order as [`walk`], without names.
pub(crate) fn walk_unnamed<'a>(m: &'a dyn Module, f: &mut dyn FnMut(Item<'a>)) {
    for pass in 0..3 {
        m.visit(&mut |_, item| {
            let this_pass = match item {
                Item::Param(_) => 0,
                Item::Buffer { .. } => 1,
                Item::Module(_) => 2,
            };
            if this_pass == pass {
                f(item);
                if let Item::Module(child) = item {
                    walk_unnamed(child, f);
                }
            }
        });
    }
}

pub(crate) fn collect_modules<'a>(m: &'a dyn Module, prefix: &mut String, out: &mut Vec<(String, &'a dyn Module)>) {
    walk(m, prefix, &mut |path, item| {
        if let Item::Module(child) = item {
            out.push((path.to_string(), child));
        }
    });
}

/// Every parameter and buffer tensor, deduplicated by identity.
pub(crate) fn for_each_tensor(m: &dyn Module, f: &mut dyn FnMut(&Tensor)) {
    let mut seen = HashSet::new();
    walk_unnamed(m, &mut |item| {
        let t = match item {
            Item::Param(p) => p.tensor(),
            Item::Buffer { tensor, .. } => tensor,
            Item::Module(_) => return,
        };
        if seen.insert(t.id()) {
            f(t);
        }
    });
}

/// The components of a dotted path with their byte offsets (none for `""`, the root).
pub(crate) fn path_parts(path: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut start = 0;
    path.split('.').filter(move |_| !path.is_empty()).map(move |part| {
        let at = start;
        start += part.len() + 1;
        (at, part)
    })
}

/// The error for the component of `path` at byte `start`, which the module of type
/// `parent_type` (holding `children`) does not have.
pub(crate) fn not_found(path: &str, start: usize, parent_type: &'static str, children: Vec<String>) -> Error {
    let end = path[start..].find('.').map_or(path.len(), |i| start + i);
    Error::SubmoduleNotFound {
        path: path.to_string(),
        missing: path[start..end].to_string(),
        parent: if start == 0 { "<root>".to_string() } else { path[..start - 1].to_string() },
        parent_type,
        children,
    }
}
