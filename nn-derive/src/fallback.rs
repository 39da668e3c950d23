//! The stub impl emitted next to compile errors (thiserror's fallback).

use proc_macro2::TokenStream;
use quote::quote;
use syn::DeriveInput;

use crate::bounds::static_where;
use crate::paths;

/// `error` as `compile_error!`s, followed by a stub impl of `Module` and `Display` so the
/// rest of the user's code still type-checks against them and shows no secondary errors.
pub fn expand(input: &DeriveInput, error: syn::Error) -> TokenStream {
    let error = error.to_compile_error();
    let stub = stub(input);
    quote!(#error #stub)
}

/// Impls of `HoldsState`, `Module`, `Display` and `HasBase` whose bodies are never run.
fn stub(input: &DeriveInput) -> TokenStream {
    let private = paths::private();
    let ident = &input.ident;
    let (impl_g, ty_g, where_c) = input.generics.split_for_impl();
    let static_where = static_where(&input.generics);
    let failed = quote!(::core::unreachable!("`#[derive(Module)]` failed to compile"));
    quote! {
        const _: () = {
            impl #impl_g #private::HoldsState for #ident #ty_g #where_c {}
            impl #impl_g #private::Module for #ident #ty_g #static_where {
                fn visit<'__a>(&'__a self, _: &mut dyn FnMut(#private::Name<'__a>, #private::Item<'__a>)) { #failed }
                fn visit_modules_mut<'__a>(&'__a mut self, _: &mut dyn FnMut(#private::Name<'_>, &'__a mut dyn #private::Module)) { #failed }
                fn type_name(&self) -> &'static str { #failed }
                fn as_any(&self) -> &dyn ::core::any::Any { self }
                fn as_any_mut(&mut self) -> &mut dyn ::core::any::Any { self }
                fn as_dyn(&self) -> &dyn #private::Module { self }
                fn as_dyn_mut(&mut self) -> &mut dyn #private::Module { self }
            }
            impl #impl_g ::core::fmt::Display for #ident #ty_g #static_where {
                fn fmt(&self, _: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result { #failed }
            }
            impl #impl_g #private::HasBase for #ident #ty_g #static_where {
                fn module_base(&self) -> &#private::ModuleBase { #failed }
            }
        };
    }
}
