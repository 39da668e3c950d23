//! Cross-field rules: unique registered names, one `#[base]` at most, no `#[module]` on a plain collection.

use std::collections::HashMap;

use crate::ast::{Field, Input};
use crate::attr::Kind;
use crate::ctxt::Ctxt;
use crate::types::{code, shape_of, TypeShape};

impl Input<'_> {
    /// Checks the rules that span fields, reporting every violation at once. `#[module]` on
    /// a `Vec`, a map or a tuple is caught here because the type system would reject it
    /// with a less helpful message.
    pub fn validate(&self) -> Result<(), syn::Error> {
        let mut cx = Ctxt::new();
        let mut names: HashMap<&str, &Field<'_>> = HashMap::new();
        let mut base: Option<&Field<'_>> = None;
        for f in &self.fields {
            let Some(kind) = f.kind else { continue };
            if kind == Kind::Base {
                match base {
                    Some(prev) => cx.error_spanned(
                        f.decl(),
                        format!("only one `#[base]` field is allowed; {} is already the base", prev.label()),
                    ),
                    None => base = Some(f),
                }
                continue;
            }
            if let Some(prev) = names.get(f.name.as_str()) {
                let msg = format!(
                    "registered name `{}` is already used by {}; give this field another name with \
                     `rename = \"...\"`",
                    f.name,
                    prev.label()
                );
                match &f.rename {
                    Some(lit) => cx.error(lit.span(), msg),
                    None => cx.error_spanned(f.decl(), msg),
                }
            } else {
                names.insert(&f.name, f);
            }
            if kind == Kind::Module {
                let decl = f.decl_prefix();
                let hint = match shape_of(f.ty) {
                    TypeShape::List(elem) => Some(format!(
                        "write `#[module] {decl}ModuleList<{elem}>`, which registers each element as `{}.0`, `{}.1`, ...",
                        f.name, f.name
                    )),
                    TypeShape::Dict(elem) => Some(format!(
                        "write `#[module] {decl}ModuleDict<{elem}>`, which registers each entry under its key"
                    )),
                    TypeShape::Tuple => Some(
                        "give each layer its own `#[module]` field, or chain them in a `Sequential`".to_string(),
                    ),
                    _ => None,
                };
                if let Some(hint) = hint {
                    cx.error_spanned(
                        f.decl(),
                        format!("`#[module]` needs a `Module`, and `{}` is not one: {hint}", code(f.ty)),
                    );
                }
            }
        }
        cx.check()
    }
}
