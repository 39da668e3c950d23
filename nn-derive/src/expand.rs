//! Code generation. Every statement about a field is spanned at that field, so a failed
//! trait bound underlines the user's field rather than the derive.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::{DeriveInput, GenericArgument, PathArguments, Type};

use crate::ast::Input;
use crate::attr::Kind;

pub fn derive(input: &DeriveInput) -> TokenStream {
    match Input::from_syn(input).and_then(|i| i.validate().map(|()| i)) {
        Ok(parsed) => expand(&parsed),
        Err(e) => {
            let stub = fallback(input);
            let err = e.to_compile_error();
            quote!(#err #stub)
        }
    }
}

/// The path to `nn_core` as the user's crate sees it: `::nn_core`, or `::nn` (the
/// facade) when only that is a dependency.
fn krate() -> TokenStream {
    use proc_macro_crate::{crate_name, FoundCrate};
    let found = crate_name("nn-core").or_else(|_| {
        crate_name("nn").map(|f| match f {
            FoundCrate::Itself => FoundCrate::Name("nn".into()),
            other => other,
        })
    });
    match found {
        Ok(FoundCrate::Name(n)) => {
            let id = format_ident!("{}", n);
            quote!(::#id)
        }
        // Inside nn-core itself (its tests), which declares `extern crate self as nn_core`.
        _ => quote!(::nn_core),
    }
}

/// A stub impl emitted next to compile errors so the rest of the user's code still
/// type-checks against `Module`.
fn fallback(input: &DeriveInput) -> TokenStream {
    let krate = krate();
    let ident = &input.ident;
    let (impl_g, ty_g, where_c) = input.generics.split_for_impl();
    if !matches!(input.data, syn::Data::Struct(_)) {
        return TokenStream::new();
    }
    quote! {
        const _: () = {
            impl #impl_g #krate::__private::HoldsState for #ident #ty_g #where_c {}
            impl #impl_g #krate::__private::Module for #ident #ty_g #where_c {
                fn visit<'__a>(&'__a self, _: &mut dyn FnMut(#krate::__private::Name<'__a>, #krate::__private::Item<'__a>)) {
                    unimplemented!("`#[derive(Module)]` failed to compile")
                }
                fn visit_modules_mut(&mut self, _: &mut dyn FnMut(#krate::__private::Name<'_>, &mut dyn #krate::__private::Module)) {
                    unimplemented!("`#[derive(Module)]` failed to compile")
                }
                fn type_name(&self) -> &'static str { stringify!(#ident) }
                fn as_any(&self) -> &dyn ::core::any::Any { self }
                fn as_any_mut(&mut self) -> &mut dyn ::core::any::Any { self }
                fn as_dyn(&self) -> &dyn #krate::__private::Module { self }
                fn as_dyn_mut(&mut self) -> &mut dyn #krate::__private::Module { self }
            }
        };
    }
}

/// The syntactic shape of a field type, used to pick the most helpful error hint.
pub enum TypeShape {
    List(String),
    TensorList,
    Dict(String),
    Tensor,
    Param,
    Option,
    Tuple,
    Other,
}

/// The last path segment's identifier (`Vec` for `std::vec::Vec<Linear>`), or the type.
pub fn last_segment(ty: &Type) -> String {
    match ty {
        Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default(),
        Type::Array(_) => "array".into(),
        Type::Slice(_) => "slice".into(),
        Type::Tuple(_) => "tuple".into(),
        other => pretty(other),
    }
}

fn pretty(t: &impl ToTokens) -> String {
    let s = t.to_token_stream().to_string();
    s.replace(" < ", "<")
        .replace("< ", "<")
        .replace(" <", "<")
        .replace(" >", ">")
        .replace(" ,", ",")
        .replace(" :: ", "::")
}

fn generic_args(ty: &Type) -> Vec<&Type> {
    let Type::Path(p) = ty else { return vec![] };
    let Some(seg) = p.path.segments.last() else { return vec![] };
    let PathArguments::AngleBracketed(a) = &seg.arguments else { return vec![] };
    a.args.iter().filter_map(|g| if let GenericArgument::Type(t) = g { Some(t) } else { None }).collect()
}

pub fn shape_of(ty: &Type) -> TypeShape {
    let is_tensorish = |t: &Type| matches!(last_segment(t).as_str(), "Tensor" | "Parameter");
    match ty {
        Type::Array(a) => {
            if is_tensorish(&a.elem) {
                TypeShape::TensorList
            } else {
                TypeShape::List(pretty(&a.elem))
            }
        }
        Type::Slice(s) => TypeShape::List(pretty(&s.elem)),
        Type::Tuple(t) if !t.elems.is_empty() => TypeShape::Tuple,
        Type::Reference(r) => shape_of(&r.elem),
        Type::Path(_) => {
            let args = generic_args(ty);
            match last_segment(ty).as_str() {
                "Vec" | "VecDeque" | "LinkedList" | "SmallVec" => match args.first() {
                    Some(e) if is_tensorish(e) => TypeShape::TensorList,
                    Some(e) => TypeShape::List(pretty(e)),
                    None => TypeShape::List("_".into()),
                },
                "HashMap" | "BTreeMap" | "IndexMap" => {
                    TypeShape::Dict(args.get(1).map(pretty).unwrap_or_else(|| "_".into()))
                }
                "Tensor" => TypeShape::Tensor,
                "Parameter" => TypeShape::Param,
                "Option" => TypeShape::Option,
                _ => TypeShape::Other,
            }
        }
        _ => TypeShape::Other,
    }
}

fn expand(input: &Input<'_>) -> TokenStream {
    let krate = krate();
    let p = quote!(#krate::__private);
    let orig = input.original;
    let ident = &orig.ident;
    let type_name = ident.to_string();
    let (impl_g, ty_g, where_c) = orig.generics.split_for_impl();

    let mut visits = Vec::new();
    let mut visits_mut = Vec::new();
    let mut checks = Vec::new();
    let mut base = None;
    for f in &input.fields {
        let span: Span = f.span();
        let member = &f.member;
        let name = &f.name;
        let ty = f.ty;
        match f.kind {
            Some(Kind::Param) => visits.push(quote_spanned! {span=>
                #p::ParamField::__nn_visit(&self.#member, #p::Name::Field(#name), __f);
            }),
            Some(Kind::Buffer { persistent }) => visits.push(quote_spanned! {span=>
                #p::BufferField::__nn_visit(&self.#member, #p::Name::Field(#name), #persistent, __f);
            }),
            Some(Kind::Module) => {
                visits.push(quote_spanned! {span=>
                    #p::ModuleField::__nn_visit(&self.#member, #p::Name::Field(#name), __f);
                });
                visits_mut.push(quote_spanned! {span=>
                    #p::ModuleField::__nn_visit_mut(&mut self.#member, #p::Name::Field(#name), __f);
                });
            }
            Some(Kind::Base) => base = Some((member.clone(), span)),
            None => {
                let check = match shape_of(ty) {
                    TypeShape::List(_) => "check_list",
                    TypeShape::TensorList => "check_tensor_list",
                    TypeShape::Dict(_) => "check_dict",
                    TypeShape::Tensor => "check_tensor",
                    TypeShape::Param => "check_param",
                    TypeShape::Option => "check_option",
                    TypeShape::Tuple => "check_tuple",
                    TypeShape::Other => "check_module",
                };
                let check = format_ident!("{}", check, span = span);
                checks.push(quote_spanned! {span=>
                    #p::#check::<#ty, _>((&#p::Probe::<#ty>::new()).__nn_probe());
                });
            }
        }
    }

    let base_fns = base.map(|(member, span)| {
        quote_spanned! {span=>
            fn base(&self) -> ::core::option::Option<&#p::ModuleBase> {
                ::core::option::Option::Some(#p::BaseField::__nn_base(&self.#member))
            }
            fn base_mut(&mut self) -> ::core::option::Option<&mut #p::ModuleBase> {
                ::core::option::Option::Some(#p::BaseField::__nn_base_mut(&mut self.#member))
            }
        }
    });
    let extra_repr = input.extra_repr.then(|| {
        quote! {
            fn extra_repr(&self) -> ::std::string::String {
                <Self as #p::ExtraRepr>::extra_repr(self)
            }
        }
    });

    // `as_any` needs `Self: 'static`: require it of every type parameter.
    let mut static_generics = orig.generics.clone();
    {
        let wc = static_generics.make_where_clause();
        for tp in orig.generics.type_params() {
            let id = &tp.ident;
            wc.predicates.push(syn::parse_quote!(#id: 'static));
        }
    }
    let (_, _, static_where) = static_generics.split_for_impl();

    let unused_f = visits.is_empty().then(|| quote!(let _ = __f;));
    let unused_fm = visits_mut.is_empty().then(|| quote!(let _ = __f;));
    quote! {
        #[allow(non_local_definitions)]
        const _: () = {
            #[automatically_derived]
            impl #impl_g #p::HoldsState for #ident #ty_g #where_c {}

            #[automatically_derived]
            impl #impl_g #p::Module for #ident #ty_g #static_where {
                fn visit<'__a>(&'__a self, __f: &mut dyn FnMut(#p::Name<'__a>, #p::Item<'__a>)) {
                    #unused_f
                    #(#visits)*
                }
                fn visit_modules_mut(&mut self, __f: &mut dyn FnMut(#p::Name<'_>, &mut dyn #p::Module)) {
                    #unused_fm
                    #(#visits_mut)*
                }
                fn type_name(&self) -> &'static str {
                    #type_name
                }
                #extra_repr
                #base_fns
                fn as_any(&self) -> &dyn ::core::any::Any {
                    self
                }
                fn as_any_mut(&mut self) -> &mut dyn ::core::any::Any {
                    self
                }
                fn as_dyn(&self) -> &dyn #p::Module {
                    self
                }
                fn as_dyn_mut(&mut self) -> &mut dyn #p::Module {
                    self
                }
            }

            #[automatically_derived]
            impl #impl_g ::core::fmt::Display for #ident #ty_g #static_where {
                fn fmt(&self, __f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    #p::fmt_module(self, __f)
                }
            }

            /// Unannotated fields must be plain data (checked at compile time, never run).
            #[allow(dead_code, clippy::all)]
            fn __nn_check_unregistered_fields #impl_g () #where_c {
                #[allow(unused_imports)]
                use #p::{ProbePlain as _, ProbeState as _};
                #(#checks)*
            }
        };
    }
}
