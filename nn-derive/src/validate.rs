//! Cross-field rules: unique registered names, at most one `#[base]`, and `#[module]` on
//! plain collections (which the type system would reject with a less helpful message).

use std::collections::HashSet;

use crate::ast::Input;
use crate::attr::{Ctxt, Kind};
use crate::expand::{last_segment, shape_of, TypeShape};

impl Input<'_> {
    pub fn validate(&self) -> Result<(), syn::Error> {
        let mut cx = Ctxt::default();
        let mut names: HashSet<&str> = HashSet::new();
        let mut base: Option<String> = None;
        for f in &self.fields {
            let Some(kind) = f.kind else { continue };
            let field_label = match &f.original.ident {
                Some(i) => i.to_string(),
                None => f.name.clone(),
            };
            if kind == Kind::Base {
                if let Some(prev) = &base {
                    cx.error(f.span(), format!("only one `#[base]` field is allowed; `{prev}` is already the base"));
                }
                base = Some(field_label);
                continue;
            }
            if !names.insert(&f.name) {
                cx.error(
                    f.span(),
                    format!("registered name `{}` is used twice; pick another with `rename = \"...\"`", f.name),
                );
            }
            if kind == Kind::Module {
                let hint = match shape_of(f.ty) {
                    TypeShape::List(elem) => Some(format!(
                        "use `ModuleList<{elem}>`, which registers each element as `name.0`, `name.1`, ..."
                    )),
                    TypeShape::Dict(elem) => {
                        Some(format!("use `ModuleDict<{elem}>`, which registers each entry under its key"))
                    }
                    TypeShape::Tuple => Some("use a `Sequential`, or one annotated field per layer".to_string()),
                    _ => None,
                };
                if let Some(hint) = hint {
                    cx.error(
                        f.span(),
                        format!(
                            "`#[module]` needs a `Module`, and a plain `{}` of layers is not one: {hint}",
                            last_segment(f.ty)
                        ),
                    );
                }
            }
        }
        cx.check()
    }
}
