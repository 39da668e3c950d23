//! Attribute parsing: `#[module]`, `#[param]`, `#[buffer(...)]`, `#[base]` on fields, `#[module(...)]` on the struct.

use proc_macro2::Span;
use syn::meta::ParseNestedMeta;
use syn::{Attribute, LitBool, LitStr, Meta};

use crate::ctxt::Ctxt;
use crate::symbol::{
    BASE, BUFFER, BUILTIN, EXTRA_REPR, EXTRA_STATE, FIELD_KINDS, MIGRATE, MODULE, NAME, PARAM, PERSISTENT, RENAME,
    VERSION,
};

/// How a field is registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `#[module]`: a sub-module, or an `Option` of one.
    Module,
    /// `#[param]`: a `Parameter`, or an `Option` of one.
    Param,
    /// `#[buffer]`: a `Tensor`, or an `Option` of one; `persistent` says whether it is
    /// saved in the `state_dict`.
    Buffer {
        /// `false` with `#[buffer(persistent = false)]`.
        persistent: bool,
    },
    /// `#[base]`: the `ModuleBase`.
    Base,
}

impl Kind {
    /// The kind an attribute of this name declares, or `None` for an attribute not ours.
    /// A buffer starts persistent; its options may say otherwise.
    fn from_attr_name(name: &str) -> Option<Kind> {
        match name {
            MODULE => Some(Kind::Module),
            PARAM => Some(Kind::Param),
            BUFFER => Some(Kind::Buffer { persistent: true }),
            BASE => Some(Kind::Base),
            _ => None,
        }
    }

    /// The attribute that declares this kind, as written between `#[` and `]`.
    pub fn attr_name(self) -> &'static str {
        match self {
            Kind::Module => MODULE,
            Kind::Param => PARAM,
            Kind::Buffer { .. } => BUFFER,
            Kind::Base => BASE,
        }
    }

    /// The options this kind accepts in parentheses.
    fn options(self) -> &'static [&'static str] {
        match self {
            Kind::Buffer { .. } => &[RENAME, PERSISTENT],
            Kind::Base => &[],
            Kind::Module | Kind::Param => &[RENAME],
        }
    }
}

/// What the attributes of one field say.
pub struct FieldAttrs {
    /// How the field is registered; `None` for an unannotated field.
    pub kind: Option<Kind>,
    /// The `rename = "..."` literal, if given.
    pub rename: Option<LitStr>,
    /// An unknown attribute is close to one of ours (`#[parm]`).
    pub misspelled: bool,
}

/// Struct-level `#[module(...)]` options.
pub struct ContainerAttrs {
    /// Where `extra_repr` was written, if it was.
    pub extra_repr: Option<Span>,
    /// The `name = "..."` literal, if given: the name the module prints instead of the
    /// struct's.
    pub name: Option<LitStr>,
    /// Where `extra_state` was written, if it was.
    pub extra_state: Option<Span>,
    /// The `version = N` literal, if given.
    pub version: Option<syn::LitInt>,
    /// Where `migrate` was written, if it was.
    pub migrate: Option<Span>,
}

/// The most edits an unknown option may be from a known one to be suggested in its place.
const SUGGESTION_MAX_EDITS: usize = 3;

/// The most edits an unknown attribute (lowercased) may be from one of ours to be taken for
/// a misspelling of it.
const MISSPELLING_MAX_EDITS: usize = 2;

/// Edit distance, for "did you mean" hints.
fn distance(a: &str, b: &str) -> usize {
    strsim::levenshtein(a, b)
}

/// The closest of `options` to `got`, for "did you mean" hints.
fn closest<'a>(got: &str, options: &[&'a str]) -> Option<&'a str> {
    options.iter().copied().filter(|o| distance(got, o) <= SUGGESTION_MAX_EDITS).min_by_key(|o| distance(got, o))
}

/// `options` as a list of code spans: `` `rename`, `persistent` ``.
fn options_list(options: &[&str]) -> String {
    options.iter().map(|o| format!("`{o}`")).collect::<Vec<_>>().join(", ")
}

/// Whether an attribute that is not ours looks like a misspelling of one of ours
/// (`#[parm]`, `#[Param]`), which rustc reports on its own as an unknown attribute.
fn looks_misspelled(name: &str) -> bool {
    let lower = name.to_lowercase();
    !BUILTIN.contains(&name) && FIELD_KINDS.iter().any(|ours| distance(&lower, ours) <= MISSPELLING_MAX_EDITS)
}

/// Reads the attributes of one field, reporting every mistake to `cx`.
pub fn field_attrs(cx: &mut Ctxt, attrs: &[Attribute]) -> FieldAttrs {
    let mut out = FieldAttrs { kind: None, rename: None, misspelled: false };
    for attr in attrs {
        let Some(ident) = attr.path().get_ident() else { continue };
        let name = ident.to_string();
        let Some(kind) = Kind::from_attr_name(&name) else {
            out.misspelled |= looks_misspelled(&name);
            continue;
        };
        match out.kind {
            Some(earlier) if earlier.attr_name() == name => {
                cx.error_spanned(attr, format!("duplicate `#[{name}]` attribute; remove one"));
                continue;
            }
            Some(earlier) => {
                cx.error_spanned(
                    attr,
                    format!(
                        "a field is registered once: it cannot be both `#[{}]` and `#[{name}]`; keep the one that \
                         matches its type",
                        earlier.attr_name()
                    ),
                );
                continue;
            }
            None => {}
        }
        let kind = match &attr.meta {
            Meta::Path(_) => kind,
            Meta::NameValue(_) => {
                let example = match kind {
                    Kind::Buffer { .. } => "`#[buffer]` or `#[buffer(rename = \"name\", persistent = false)]`",
                    Kind::Base => "`#[base]`",
                    Kind::Module => "`#[module]` or `#[module(rename = \"name\")]`",
                    Kind::Param => "`#[param]` or `#[param(rename = \"name\")]`",
                };
                cx.error_spanned(attr, format!("expected {example}, not `#[{name} = ...]`"));
                kind
            }
            Meta::List(_) => field_options(cx, attr, kind, &mut out.rename),
        };
        out.kind = Some(kind);
    }
    out
}

/// Reads the options in `#[name(...)]` of a field attribute declaring `kind`: sets `rename`,
/// and returns `kind` with the buffer's `persistent` as written. Stops at the first
/// malformed option, reporting it to `cx`.
fn field_options(cx: &mut Ctxt, attr: &Attribute, mut kind: Kind, rename: &mut Option<LitStr>) -> Kind {
    let name = kind.attr_name();
    let mut seen: Vec<String> = Vec::new();
    let parsed = attr.parse_nested_meta(|meta| {
        let option = meta.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
        if !kind.options().contains(&option.as_str()) {
            return Err(unknown_option(&meta, name, &option, kind));
        }
        if seen.contains(&option) {
            return Err(meta.error(format!("duplicate option `{option}` in `#[{name}]`; remove one")));
        }
        seen.push(option.clone());
        if option == RENAME {
            *rename = Some(rename_value(&meta)?);
        } else {
            kind = Kind::Buffer { persistent: persistent_value(&meta)? };
        }
        Ok(())
    });
    if let Err(e) = parsed {
        cx.push(e);
    }
    kind
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

/// `persistent = true` or `persistent = false`.
fn persistent_value(meta: &ParseNestedMeta<'_>) -> syn::Result<bool> {
    let expected = "expected `persistent = true` or `persistent = false`";
    if !meta.input.peek(syn::Token![=]) {
        return Err(meta.error(expected));
    }
    let lit: LitBool = meta.value()?.parse().map_err(|e| syn::Error::new(e.span(), expected))?;
    Ok(lit.value)
}

/// The error for an option that `#[name(...)]` does not take, with the closest known one
/// or the list of those it does take.
fn unknown_option(meta: &ParseNestedMeta<'_>, name: &str, option: &str, kind: Kind) -> syn::Error {
    let allowed = kind.options();
    let hint = match closest(option, allowed) {
        Some(c) => format!("; did you mean `{c}`?"),
        None if allowed.is_empty() => format!("; `#[{name}]` takes no options"),
        None if option == PERSISTENT => "; only `#[buffer]` takes `persistent`".to_string(),
        None => format!("; expected {}", options_list(allowed)),
    };
    meta.error(format!("unknown `#[{name}]` option `{option}`{hint}"))
}

/// `name = "TypeName"`: a non-empty string of ASCII letters, digits and `_` that does not
/// start with a digit, as a type name in Rust or Python.
fn name_value(meta: &ParseNestedMeta<'_>) -> syn::Result<LitStr> {
    if !meta.input.peek(syn::Token![=]) {
        return Err(meta.error("expected `name = \"TypeName\"`"));
    }
    let lit: LitStr =
        meta.value()?.parse().map_err(|e| syn::Error::new(e.span(), "expected a string: `name = \"TypeName\"`"))?;
    let v = lit.value();
    if v.is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            "a module's printed name cannot be empty; write `name = \"TypeName\"`, or remove `name` to print the \
             struct's own name",
        ));
    }
    if let Some(bad) = v.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_')) {
        let suggestion: String = v.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let bad = if bad.is_whitespace() { "whitespace".to_string() } else { format!("`{bad}`") };
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "a module's printed name is a type name of ASCII letters, digits and `_`, and cannot contain \
                 {bad}; write `name = \"{suggestion}\"`"
            ),
        ));
    }
    if v.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(syn::Error::new(
            lit.span(),
            "a module's printed name is a type name and cannot start with a digit; start it with a letter or `_`",
        ));
    }
    Ok(lit)
}

/// `version = N`: the state-dict layout's version, a `u32` of at least 1 (PyTorch's
/// `_version` starts at 1).
fn version_value(meta: &ParseNestedMeta<'_>) -> syn::Result<syn::LitInt> {
    if !meta.input.peek(syn::Token![=]) {
        return Err(meta.error("expected `version = N`, the state-dict layout's version (1, 2, ...)"));
    }
    let lit: syn::LitInt =
        meta.value()?.parse().map_err(|e| syn::Error::new(e.span(), "expected an integer: `version = 2`"))?;
    match lit.base10_parse::<u32>() {
        Ok(v) if v >= 1 && lit.suffix().is_empty() => Ok(lit),
        _ => Err(syn::Error::new(
            lit.span(),
            "a state-dict version is an unsuffixed integer from 1 to 4294967295 (PyTorch's `_version` starts at 1)",
        )),
    }
}

/// The error for an option that the struct's `#[module(...)]` does not take, with the
/// closest known one or the list of those it does take.
fn unknown_struct_option(meta: &ParseNestedMeta<'_>, option: &str) -> syn::Error {
    let hint = closest(option, &[NAME, EXTRA_REPR, EXTRA_STATE, VERSION, MIGRATE]).map_or_else(
        || {
            "; the struct options are `name = \"TypeName\"` (the name the module prints), `extra_repr` (print \
             `ExtraRepr::extra_repr` in the module's line), `extra_state` (save `ExtraState` with the tensors), \
             `version = N` (the state-dict layout's version) and `migrate` (run `MigrateState` at every load)"
                .to_string()
        },
        |c| format!("; did you mean `{c}`?"),
    );
    meta.error(format!("unknown `#[module]` struct option `{option}`{hint}"))
}

/// Reads the struct's own attributes, reporting every mistake to `cx`.
pub fn container_attrs(cx: &mut Ctxt, attrs: &[Attribute]) -> ContainerAttrs {
    let mut out = ContainerAttrs { extra_repr: None, name: None, extra_state: None, version: None, migrate: None };
    for attr in attrs {
        let Some(ident) = attr.path().get_ident() else { continue };
        let name = ident.to_string();
        if name == MODULE {
            if !matches!(attr.meta, Meta::List(_)) {
                cx.error_spanned(
                    attr,
                    "on the struct, `#[module]` takes options: `#[module(name = \"TypeName\")]`, \
                     `#[module(extra_repr)]`, `#[module(extra_state)]`, `#[module(version = N)]` or `#[module(migrate)]`; \
                     sub-modules are \
                     marked with `#[module]` on their fields",
                );
                continue;
            }
            let parsed = attr.parse_nested_meta(|meta| {
                let option = meta.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
                match option.as_str() {
                    EXTRA_REPR if out.extra_repr.is_none() => {
                        out.extra_repr = Some(meta.path.get_ident().map_or_else(Span::call_site, |i| i.span()));
                        Ok(())
                    }
                    NAME if out.name.is_none() => {
                        out.name = Some(name_value(&meta)?);
                        Ok(())
                    }
                    EXTRA_STATE if out.extra_state.is_none() => {
                        out.extra_state = Some(meta.path.get_ident().map_or_else(Span::call_site, |i| i.span()));
                        Ok(())
                    }
                    VERSION if out.version.is_none() => {
                        out.version = Some(version_value(&meta)?);
                        Ok(())
                    }
                    MIGRATE if out.migrate.is_none() => {
                        out.migrate = Some(meta.path.get_ident().map_or_else(Span::call_site, |i| i.span()));
                        Ok(())
                    }
                    EXTRA_REPR | NAME | EXTRA_STATE | VERSION | MIGRATE => {
                        Err(meta.error(format!("duplicate option `{option}`; remove one")))
                    }
                    _ => Err(unknown_struct_option(&meta, &option)),
                }
            });
            if let Err(e) = parsed {
                cx.push(e);
            }
        } else if FIELD_KINDS.contains(&name.as_str()) {
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
        let mut cx = Ctxt::new();
        let attrs = field_attrs(&mut cx, &field.attrs);
        assert!(attrs.misspelled && attrs.kind.is_none());
        assert!(cx.check().is_ok());

        let field: syn::Field = syn::parse_quote!(#[doc = "x"] #[serde(skip)] x: u8);
        let mut cx = Ctxt::new();
        assert!(!field_attrs(&mut cx, &field.attrs).misspelled);
        assert!(cx.check().is_ok());
    }

    #[test]
    fn every_attribute_error_is_collected() {
        let field: syn::Field = syn::parse_quote! {
            #[param(renam = "a")]
            #[param]
            #[buffer(persistent = "no")]
            x: u8
        };
        let mut cx = Ctxt::new();
        field_attrs(&mut cx, &field.attrs);
        let err = cx.check().expect_err("three errors");
        let messages: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert!(messages[0].contains("did you mean `rename`"));
        assert!(messages[1].contains("duplicate `#[param]`"));
        assert!(messages[2].contains("cannot be both `#[param]` and `#[buffer]`"));
    }

    #[test]
    fn buffer_options_set_the_name_and_persistence() {
        let field: syn::Field = syn::parse_quote!(#[buffer(rename = "stats", persistent = false)] x: Tensor);
        let mut cx = Ctxt::new();
        let attrs = field_attrs(&mut cx, &field.attrs);
        assert!(cx.check().is_ok());
        assert_eq!(attrs.kind, Some(Kind::Buffer { persistent: false }));
        assert_eq!(attrs.rename.map(|lit| lit.value()).as_deref(), Some("stats"));
    }

    #[test]
    fn struct_options_set_the_name_and_extra_repr_together() {
        let input: syn::DeriveInput = syn::parse_quote!(
            #[module(name = "GPT2LMHeadModel", extra_repr)]
            struct Gpt2;
        );
        let mut cx = Ctxt::new();
        let attrs = container_attrs(&mut cx, &input.attrs);
        assert!(cx.check().is_ok());
        assert_eq!(attrs.name.map(|lit| lit.value()).as_deref(), Some("GPT2LMHeadModel"));
        assert!(attrs.extra_repr.is_some());
    }

    #[test]
    fn bad_names_are_each_reported() {
        let input: syn::DeriveInput = syn::parse_quote! {
            #[module(name = 3)]
            #[module(name = "")]
            #[module(name = "GPT 2")]
            #[module(name = "2Layer")]
            #[module(name = "_Ok2", extra_repr, name = "Again")]
            #[module]
            struct Gpt2;
        };
        let mut cx = Ctxt::new();
        container_attrs(&mut cx, &input.attrs);
        let err = cx.check().expect_err("six errors");
        let messages: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 6, "{messages:?}");
        assert!(messages[0].starts_with("expected a string"));
        assert!(messages[1].contains("cannot be empty"));
        assert!(messages[2].contains("cannot contain whitespace; write `name = \"GPT_2\"`"));
        assert!(messages[3].contains("cannot start with a digit"));
        assert_eq!(messages[4], "duplicate option `name`; remove one");
        assert!(messages[5].contains("takes options: `#[module(name = \"TypeName\")]`, `#[module(extra_repr)]`"));
    }

    #[test]
    fn unknown_struct_options_list_or_suggest_the_known_ones() {
        let input: syn::DeriveInput = syn::parse_quote!(
            #[module(bogus)]
            #[module(rename = "X")]
            struct S;
        );
        let mut cx = Ctxt::new();
        container_attrs(&mut cx, &input.attrs);
        let messages: Vec<String> = cx.check().expect_err("two errors").into_iter().map(|e| e.to_string()).collect();
        assert!(messages[0].contains("the struct options are `name = \"TypeName\"`"), "{messages:?}");
        assert!(
            messages[0].contains("`extra_repr` (print")
                && messages[0].contains(", `version = N`")
                && messages[0].contains("and `migrate`"),
            "{messages:?}"
        );
        assert!(messages[1].ends_with("did you mean `name`?"), "{messages:?}");
    }
}
