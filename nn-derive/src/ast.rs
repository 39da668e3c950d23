//! The parsed input: a struct and its fields, borrowing from syn for spans.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, Member, Type};

use crate::attr::{self, Ctxt, Kind};

pub struct Input<'a> {
    pub original: &'a DeriveInput,
    pub extra_repr: bool,
    pub fields: Vec<Field<'a>>,
}

pub struct Field<'a> {
    pub original: &'a syn::Field,
    /// `self.<member>`.
    pub member: Member,
    /// The registered name (field name, index, or `rename`).
    pub name: String,
    pub kind: Option<Kind>,
    pub ty: &'a Type,
}

impl Field<'_> {
    /// Where errors about this field point: its name, or its type in a tuple struct.
    pub fn span(&self) -> Span {
        match &self.original.ident {
            Some(i) => i.span(),
            None => self.ty.span(),
        }
    }
}

impl<'a> Input<'a> {
    pub fn from_syn(input: &'a DeriveInput) -> Result<Self, syn::Error> {
        let mut cx = Ctxt::default();
        let container = attr::container_attrs(&mut cx, &input.attrs);
        let fields = match &input.data {
            Data::Struct(s) => &s.fields,
            Data::Enum(e) => {
                cx.error(
                    e.enum_token.span,
                    "`#[derive(Module)]` is for structs: an enum's variants have no fixed set of registered \
                     state; use a struct with `#[module] Option<_>` fields, or a `#[module] Box<dyn Layer>`",
                );
                return Err(cx.check().unwrap_err());
            }
            Data::Union(u) => {
                cx.error(u.union_token.span, "`#[derive(Module)]` is for structs; unions are not supported");
                return Err(cx.check().unwrap_err());
            }
        };
        let list: Vec<&syn::Field> = match fields {
            Fields::Named(n) => n.named.iter().collect(),
            Fields::Unnamed(u) => u.unnamed.iter().collect(),
            Fields::Unit => Vec::new(),
        };
        let mut out = Vec::new();
        for (i, f) in list.into_iter().enumerate() {
            let attrs = attr::field_attrs(&mut cx, &f.attrs);
            let (member, default_name) = match &f.ident {
                Some(id) => (Member::Named(id.clone()), id.to_string().trim_start_matches("r#").to_string()),
                None => (Member::Unnamed(i.into()), i.to_string()),
            };
            out.push(Field {
                original: f,
                member,
                name: attrs.rename.map(|l| l.value()).unwrap_or(default_name),
                kind: attrs.kind.map(|(k, _)| k),
                ty: &f.ty,
            });
        }
        cx.check()?;
        Ok(Input { original: input, extra_repr: container.extra_repr, fields: out })
    }
}
