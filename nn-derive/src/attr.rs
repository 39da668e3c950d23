//! Attribute parsing: `#[module]`, `#[param]`, `#[buffer(...)]`, `#[base]` on fields and
//! `#[module(extra_repr)]` on the struct. Errors are collected in a [`Ctxt`], never
//! panicked.

use proc_macro2::Span;
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::{Attribute, LitBool, LitStr};

/// Collects errors so that a user with three mistakes sees three errors in one build.
#[derive(Default)]
pub struct Ctxt {
    errors: Vec<syn::Error>,
}

impl Ctxt {
    pub fn error(&mut self, span: Span, msg: impl std::fmt::Display) {
        self.errors.push(syn::Error::new(span, msg));
    }

    /// An error underlining all of `tokens` (from their first token to their last).
    pub fn error_spanned(&mut self, tokens: impl ToTokens, msg: impl std::fmt::Display) {
        self.errors.push(syn::Error::new_spanned(tokens, msg));
    }

    pub fn push(&mut self, e: syn::Error) {
        self.errors.push(e);
    }

    /// All errors as one, or `Ok` when there were none.
    pub fn check(self) -> Result<(), syn::Error> {
        let mut it = self.errors.into_iter();
        match it.next() {
            None => Ok(()),
            Some(mut first) => {
                for e in it {
                    first.combine(e);
                }
                Err(first)
            }
        }
    }
}

/// How a field is registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Module,
    Param,
    Buffer { persistent: bool },
    Base,
}

impl Kind {
    pub fn attr_name(self) -> &'static str {
        match self {
            Kind::Module => "module",
            Kind::Param => "param",
            Kind::Buffer { .. } => "buffer",
            Kind::Base => "base",
        }
    }
}

/// What the attributes of one field say.
pub struct FieldAttrs {
    pub kind: Option<Kind>,
    pub rename: Option<LitStr>,
    /// An unknown attribute is close to one of ours (`#[parm]`).
    pub misspelled: bool,
}

const KINDS: [&str; 4] = ["module", "param", "buffer", "base"];

/// Built-in attributes that are never a misspelling of ours.
const BUILTIN: [&str; 10] =
    ["doc", "cfg", "cfg_attr", "allow", "warn", "deny", "expect", "forbid", "deprecated", "must_use"];

/// Edit distance, for "did you mean" hints.
fn distance(a: &str, b: &str) -> usize {
    strsim::levenshtein(a, b)
}

/// The closest of `options` to `got`, for "did you mean" hints.
fn closest<'a>(got: &str, options: &[&'a str]) -> Option<&'a str> {
    options.iter().copied().filter(|o| distance(got, o) <= 3).min_by_key(|o| distance(got, o))
}

fn options_list(options: &[&str]) -> String {
    options.iter().map(|o| format!("`{o}`")).collect::<Vec<_>>().join(", ")
}

pub fn field_attrs(cx: &mut Ctxt, attrs: &[Attribute]) -> FieldAttrs {
    let mut out = FieldAttrs { kind: None, rename: None, misspelled: false };
    for attr in attrs {
        let Some(ident) = attr.path().get_ident() else { continue };
        let name = ident.to_string();
        if !KINDS.contains(&name.as_str()) {
            let lower = name.to_lowercase();
            out.misspelled |= !BUILTIN.contains(&name.as_str()) && KINDS.iter().any(|k| distance(&lower, k) <= 2);
            continue;
        }
        let mut kind = match name.as_str() {
            "module" => Kind::Module,
            "param" => Kind::Param,
            "buffer" => Kind::Buffer { persistent: true },
            _ => Kind::Base,
        };
        match out.kind {
            Some(k) if k.attr_name() == name => {
                cx.error_spanned(attr, format!("duplicate `#[{name}]` attribute; remove one"));
                continue;
            }
            Some(k) => {
                cx.error_spanned(
                    attr,
                    format!(
                        "a field is registered once: it cannot be both `#[{}]` and `#[{name}]`; keep the one that \
                         matches its type",
                        k.attr_name()
                    ),
                );
                continue;
            }
            None => {}
        }
        match &attr.meta {
            syn::Meta::Path(_) => {}
            syn::Meta::NameValue(_) => {
                let example = match kind {
                    Kind::Buffer { .. } => "`#[buffer]` or `#[buffer(rename = \"name\", persistent = false)]`",
                    Kind::Base => "`#[base]`",
                    Kind::Module => "`#[module]` or `#[module(rename = \"name\")]`",
                    Kind::Param => "`#[param]` or `#[param(rename = \"name\")]`",
                };
                cx.error_spanned(attr, format!("expected {example}, not `#[{name} = ...]`"));
            }
            syn::Meta::List(_) => {
                let mut seen: Vec<String> = Vec::new();
                let res = attr.parse_nested_meta(|meta| {
                    let opt = meta.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
                    let known = matches!(
                        (opt.as_str(), kind),
                        ("rename", Kind::Module | Kind::Param | Kind::Buffer { .. })
                            | ("persistent", Kind::Buffer { .. })
                    );
                    if !known {
                        return Err(unknown_option(&meta, &name, &opt, kind));
                    }
                    if seen.contains(&opt) {
                        return Err(meta.error(format!("duplicate option `{opt}` in `#[{name}]`; remove one")));
                    }
                    seen.push(opt.clone());
                    if opt == "rename" {
                        out.rename = Some(rename_value(&meta)?);
                    } else {
                        if !meta.input.peek(syn::Token![=]) {
                            return Err(meta.error("expected `persistent = true` or `persistent = false`"));
                        }
                        let lit: LitBool = meta.value()?.parse().map_err(|e| {
                            syn::Error::new(e.span(), "expected `persistent = true` or `persistent = false`")
                        })?;
                        kind = Kind::Buffer { persistent: lit.value };
                    }
                    Ok(())
                });
                if let Err(e) = res {
                    cx.push(e);
                }
            }
        }
        out.kind = Some(kind);
    }
    out
}

/// `rename = "name"`: a string that is a valid path component.
fn rename_value(meta: &ParseNestedMeta<'_>) -> syn::Result<LitStr> {
    if !meta.input.peek(syn::Token![=]) {
        return Err(meta.error("expected `rename = \"name\"`"));
    }
    let lit: LitStr =
        meta.value()?.parse().map_err(|e| syn::Error::new(e.span(), "expected a string: `rename = \"name\"`"))?;
    let v = lit.value();
    if v.is_empty() {
        return Err(syn::Error::new(lit.span(), "a registered name cannot be empty; write `rename = \"name\"`"));
    }
    if v.contains('.') {
        let suggestion = v.replace('.', "_");
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "a registered name cannot contain `.` (dots separate the parts of a path such as `encoder.fc.weight`); \
                 write a single part such as `rename = \"{suggestion}\"`, or nest a sub-module"
            ),
        ));
    }
    Ok(lit)
}

fn unknown_option(meta: &ParseNestedMeta<'_>, name: &str, opt: &str, kind: Kind) -> syn::Error {
    let allowed: &[&str] = match kind {
        Kind::Buffer { .. } => &["rename", "persistent"],
        Kind::Base => &[],
        Kind::Module | Kind::Param => &["rename"],
    };
    let hint = match closest(opt, allowed) {
        Some(c) => format!("; did you mean `{c}`?"),
        None if allowed.is_empty() => format!("; `#[{name}]` takes no options"),
        None if opt == "persistent" => "; only `#[buffer]` takes `persistent`".to_string(),
        None => format!("; expected {}", options_list(allowed)),
    };
    meta.error(format!("unknown `#[{name}]` option `{opt}`{hint}"))
}

/// Struct-level `#[module(...)]` options.
pub struct ContainerAttrs {
    /// Where `extra_repr` was written, if it was.
    pub extra_repr: Option<Span>,
}

pub fn container_attrs(cx: &mut Ctxt, attrs: &[Attribute]) -> ContainerAttrs {
    let mut out = ContainerAttrs { extra_repr: None };
    for attr in attrs {
        let Some(ident) = attr.path().get_ident() else { continue };
        let name = ident.to_string();
        if name == "module" {
            if !matches!(attr.meta, syn::Meta::List(_)) {
                cx.error_spanned(
                    attr,
                    "on the struct, `#[module]` takes options: `#[module(extra_repr)]`; sub-modules are \
                     marked with `#[module]` on their fields",
                );
                continue;
            }
            let res = attr.parse_nested_meta(|meta| {
                let opt = meta.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
                match opt.as_str() {
                    "extra_repr" if out.extra_repr.is_none() => {
                        out.extra_repr = Some(meta.path.get_ident().map_or_else(Span::call_site, |i| i.span()));
                        Ok(())
                    }
                    "extra_repr" => Err(meta.error("duplicate option `extra_repr`; remove one")),
                    _ => {
                        let hint = closest(&opt, &["extra_repr"]).map_or_else(
                            || {
                                "; the only struct option is `extra_repr` (print `ExtraRepr::extra_repr` in the \
                                 module's line)"
                                    .to_string()
                            },
                            |c| format!("; did you mean `{c}`?"),
                        );
                        Err(meta.error(format!("unknown `#[module]` struct option `{opt}`{hint}")))
                    }
                }
            });
            if let Err(e) = res {
                cx.push(e);
            }
        } else if KINDS.contains(&name.as_str()) {
            cx.error_spanned(attr, format!("`#[{name}]` belongs on a field, not on the struct"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn did_you_mean() {
        assert_eq!(closest("persistant", &["rename", "persistent"]), Some("persistent"));
        assert_eq!(closest("renam", &["rename", "persistent"]), Some("rename"));
        assert_eq!(closest("bogus", &["extra_repr"]), None);
        assert_eq!(distance("parm", "param"), 1);
    }

    #[test]
    fn misspelled_kinds_are_noticed_but_builtins_are_not() {
        let field: syn::Field = syn::parse_quote! {
            /// Docs.
            #[allow(dead_code)]
            #[Param]
            x: u8
        };
        let mut cx = Ctxt::default();
        let attrs = field_attrs(&mut cx, &field.attrs);
        assert!(attrs.misspelled && attrs.kind.is_none());
        assert!(cx.check().is_ok());

        let field: syn::Field = syn::parse_quote!(#[doc = "x"] #[serde(skip)] x: u8);
        let mut cx = Ctxt::default();
        assert!(!field_attrs(&mut cx, &field.attrs).misspelled);
    }

    #[test]
    fn every_attribute_error_is_collected() {
        let field: syn::Field = syn::parse_quote! {
            #[param(renam = "a")]
            #[param]
            #[buffer(persistent = "no")]
            x: u8
        };
        let mut cx = Ctxt::default();
        field_attrs(&mut cx, &field.attrs);
        let err = cx.check().expect_err("three errors");
        let messages: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert!(messages[0].contains("did you mean `rename`"));
        assert!(messages[1].contains("duplicate `#[param]`"));
        assert!(messages[2].contains("cannot be both `#[param]` and `#[buffer]`"));
    }
}
