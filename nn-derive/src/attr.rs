//! Attribute parsing: `#[module]`, `#[param]`, `#[buffer(...)]`, `#[base]` on fields and
//! `#[module(extra_repr)]` on the struct. Errors are collected in a [`Ctxt`], never
//! panicked.

use proc_macro2::Span;
use syn::spanned::Spanned;
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
    pub kind: Option<(Kind, Span)>,
    pub rename: Option<LitStr>,
}

const KINDS: [&str; 4] = ["module", "param", "buffer", "base"];

/// The closest of `options` to `got`, for "did you mean" hints.
fn closest<'a>(got: &str, options: &[&'a str]) -> Option<&'a str> {
    fn dist(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut cur = vec![i + 1; b.len() + 1];
            for (j, &cb) in b.iter().enumerate() {
                cur[j + 1] = (prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
            }
            prev = cur;
        }
        prev[b.len()]
    }
    options.iter().copied().filter(|o| dist(got, o) <= 3).min_by_key(|o| dist(got, o))
}

fn options_list(options: &[&str]) -> String {
    options.iter().map(|o| format!("`{o}`")).collect::<Vec<_>>().join(", ")
}

pub fn field_attrs(cx: &mut Ctxt, attrs: &[Attribute]) -> FieldAttrs {
    let mut out = FieldAttrs { kind: None, rename: None };
    for attr in attrs {
        let Some(ident) = attr.path().get_ident() else { continue };
        let name = ident.to_string();
        if !KINDS.contains(&name.as_str()) {
            continue;
        }
        let mut kind = match name.as_str() {
            "module" => Kind::Module,
            "param" => Kind::Param,
            "buffer" => Kind::Buffer { persistent: true },
            _ => Kind::Base,
        };
        match &out.kind {
            Some((k, _)) if k.attr_name() == name => {
                cx.error(attr.span(), format!("duplicate `#[{name}]` attribute"));
                continue;
            }
            Some((k, _)) => {
                cx.error(
                    attr.span(),
                    format!(
                        "a field is registered once: it cannot be both `#[{}]` and `#[{name}]`; keep the one that matches its type",
                        k.attr_name()
                    ),
                );
                continue;
            }
            None => {}
        }
        let allowed: &[&str] = match kind {
            Kind::Buffer { .. } => &["rename", "persistent"],
            Kind::Base => &[],
            _ => &["rename"],
        };
        match &attr.meta {
            syn::Meta::Path(_) => {}
            syn::Meta::NameValue(nv) => {
                cx.error(
                    nv.span(),
                    format!("expected `#[{name}]` or `#[{name}(option = ...)]`, not `#[{name} = ...]`"),
                );
            }
            syn::Meta::List(_) => {
                let mut seen: Vec<String> = Vec::new();
                let res = attr.parse_nested_meta(|meta| {
                    let opt = meta.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
                    if !allowed.contains(&opt.as_str()) {
                        let hint = match closest(&opt, allowed) {
                            Some(c) => format!("; did you mean `{c}`?"),
                            None if allowed.is_empty() => format!("; `#[{name}]` takes no options"),
                            None => format!("; expected one of {}", options_list(allowed)),
                        };
                        return Err(meta.error(format!("unknown `#[{name}]` option `{opt}`{hint}")));
                    }
                    if seen.contains(&opt) {
                        return Err(meta.error(format!("duplicate option `{opt}` in `#[{name}]`")));
                    }
                    seen.push(opt.clone());
                    match opt.as_str() {
                        "rename" => {
                            let lit: LitStr = meta.value()?.parse().map_err(|e| {
                                syn::Error::new(e.span(), "expected a string: `rename = \"name\"`")
                            })?;
                            let v = lit.value();
                            if v.is_empty() || v.contains('.') {
                                return Err(syn::Error::new(
                                    lit.span(),
                                    "a registered name must be non-empty and contain no `.` (dots separate path components)",
                                ));
                            }
                            out.rename = Some(lit);
                        }
                        "persistent" => {
                            let lit: LitBool = meta.value()?.parse().map_err(|e| {
                                syn::Error::new(e.span(), "expected `persistent = true` or `persistent = false`")
                            })?;
                            kind = Kind::Buffer { persistent: lit.value };
                        }
                        _ => unreachable!("checked against `allowed`"),
                    }
                    Ok(())
                });
                if let Err(e) = res {
                    cx.push(e);
                }
            }
        }
        out.kind = Some((kind, attr.span()));
    }
    out
}

/// Struct-level `#[module(...)]` options.
pub struct ContainerAttrs {
    pub extra_repr: bool,
}

pub fn container_attrs(cx: &mut Ctxt, attrs: &[Attribute]) -> ContainerAttrs {
    let mut out = ContainerAttrs { extra_repr: false };
    for attr in attrs {
        let Some(ident) = attr.path().get_ident() else { continue };
        let name = ident.to_string();
        if name == "module" {
            let res = attr.parse_nested_meta(|meta| {
                let opt = meta.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
                match opt.as_str() {
                    "extra_repr" if !out.extra_repr => {
                        out.extra_repr = true;
                        Ok(())
                    }
                    "extra_repr" => Err(meta.error("duplicate option `extra_repr`")),
                    _ => {
                        let hint =
                            closest(&opt, &["extra_repr"]).map(|c| format!("; did you mean `{c}`?")).unwrap_or_else(
                                || "; the only struct option is `extra_repr` (print `ExtraRepr::extra_repr`)".into(),
                            );
                        Err(meta.error(format!("unknown `#[module]` struct option `{opt}`{hint}")))
                    }
                }
            });
            if let Err(e) = res {
                cx.push(e);
            }
        } else if KINDS.contains(&name.as_str()) {
            cx.error(attr.span(), format!("`#[{name}]` belongs on a field, not on the struct"));
        }
    }
    out
}
