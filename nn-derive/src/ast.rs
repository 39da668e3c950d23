//! The parsed input: a struct and its fields, borrowing from syn for spans.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, LitStr, Member, Type};

use crate::attr::{self, Kind};
use crate::ctxt::Ctxt;

/// The struct the derive is on.
pub struct Input<'a> {
    /// The input as syn parsed it: its name and generics.
    pub original: &'a DeriveInput,
    /// `#[module(extra_repr)]`, spanned at `extra_repr`.
    pub extra_repr: Option<Span>,
    /// `#[module(name = "...")]`: the name the module prints instead of the struct's.
    pub name: Option<LitStr>,
    /// `#[module(extra_state)]`, spanned at `extra_state`.
    pub extra_state: Option<Span>,
    /// `#[module(version = N)]`.
    pub version: Option<syn::LitInt>,
    /// `#[module(migrate)]`, spanned at `migrate`.
    pub migrate: Option<Span>,
    /// Every field, annotated or not, in declaration order.
    pub fields: Vec<Field<'a>>,
}

/// One field of the struct.
pub struct Field<'a> {
    /// The field as syn parsed it, for spans.
    pub original: &'a syn::Field,
    /// `self.<member>`.
    pub member: Member,
    /// The registered name (field name, index, or `rename`).
    pub name: String,
    /// The `rename = "..."` literal, for errors about the name.
    pub rename: Option<LitStr>,
    /// How the field is registered; `None` for an unannotated field.
    pub kind: Option<Kind>,
    /// An attribute that looks like a misspelled `#[param]` & co. is on the field: rustc
    /// already reports it, so the field is not also reported as unregistered.
    pub misspelled: bool,
    /// The field's type, as written.
    pub ty: &'a Type,
}

impl Field<'_> {
    /// `name: Type` (or `Type` in a tuple struct): what errors about the field underline.
    pub fn decl(&self) -> TokenStream {
        let mut tokens = TokenStream::new();
        if let Some(ident) = &self.original.ident {
            ident.to_tokens(&mut tokens);
            if let Some(colon) = &self.original.colon_token {
                colon.to_tokens(&mut tokens);
            }
        }
        self.ty.to_tokens(&mut tokens);
        tokens
    }

    /// The spans of the first and last tokens of [`decl`](Self::decl). On stable Rust a
    /// proc macro cannot join spans, but rustc spans an expression from its first token to
    /// its last, so generated code whose first token carries `first` and last token `last`
    /// is reported across the whole `name: Type`.
    pub fn span_range(&self) -> (Span, Span) {
        let first = match &self.original.ident {
            Some(i) => i.span(),
            None => self.ty.span(),
        };
        let last = self.ty.to_token_stream().into_iter().last().map_or(first, |tt| tt.span());
        (first, last)
    }

    /// `name: ` for a named field, nothing for a positional one: the start of a
    /// suggested declaration.
    pub fn decl_prefix(&self) -> String {
        match &self.original.ident {
            Some(i) => format!("{}: ", i.unraw()),
            None => String::new(),
        }
    }

    /// How the field is named in messages: ``field `name` `` or `field 0`.
    pub fn label(&self) -> String {
        match (&self.original.ident, &self.member) {
            (Some(i), _) => format!("field `{}`", i.unraw()),
            (None, Member::Unnamed(index)) => format!("field {}", index.index),
            (None, Member::Named(i)) => format!("field `{i}`"),
        }
    }
}

impl<'a> Input<'a> {
    /// Parses the struct and the attributes of it and its fields, reporting every attribute
    /// error at once.
    pub fn from_syn(input: &'a DeriveInput) -> Result<Self, syn::Error> {
        let mut cx = Ctxt::new();
        let container = attr::container_attrs(&mut cx, &input.attrs);
        // Only a struct has fields to register; an enum or a union is an error, reported
        // together with any struct-level attribute errors.
        let syn_fields: Vec<&syn::Field> = match &input.data {
            Data::Struct(s) => match &s.fields {
                Fields::Named(n) => n.named.iter().collect(),
                Fields::Unnamed(u) => u.unnamed.iter().collect(),
                Fields::Unit => Vec::new(),
            },
            Data::Enum(e) => {
                let (kw, name) = (e.enum_token, &input.ident);
                cx.error_spanned(
                    quote::quote!(#kw #name),
                    "`#[derive(Module)]` is for structs: an enum's variants have no fixed set of \
                     registered state; use a struct with `#[module] Option<_>` fields, or a \
                     `#[module] Box<dyn Layer>` field",
                );
                Vec::new()
            }
            Data::Union(u) => {
                let (kw, name) = (u.union_token, &input.ident);
                cx.error_spanned(
                    quote::quote!(#kw #name),
                    "`#[derive(Module)]` is for structs, not unions: use a struct with annotated fields",
                );
                Vec::new()
            }
        };
        let mut fields = Vec::new();
        for (index, field) in syn_fields.into_iter().enumerate() {
            let attrs = attr::field_attrs(&mut cx, &field.attrs);
            let (member, default_name) = match &field.ident {
                Some(ident) => (Member::Named(ident.clone()), ident.unraw().to_string()),
                None => (Member::Unnamed(index.into()), index.to_string()),
            };
            fields.push(Field {
                original: field,
                member,
                name: attrs.rename.as_ref().map_or(default_name, LitStr::value),
                rename: attrs.rename,
                kind: attrs.kind,
                misspelled: attrs.misspelled,
                ty: &field.ty,
            });
        }
        cx.check()?;
        Ok(Input {
            original: input,
            extra_repr: container.extra_repr,
            name: container.name,
            extra_state: container.extra_state,
            version: container.version,
            migrate: container.migrate,
            fields,
        })
    }
}
