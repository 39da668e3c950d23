//! `#[derive(ModuleIo)]`: a module input or output struct whose every field is a hook slot
//! (or several, or none), so that a tensor field added later is never hidden from hooks.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DataStruct, DeriveInput, Fields};

use crate::paths::krate;

/// The `ModuleIo` impl of `input`, or the errors that explain why there is none.
pub fn derive(input: &DeriveInput) -> TokenStream {
    match expand(input) {
        Ok(t) => t,
        Err(e) => e.to_compile_error(),
    }
}

/// The impl, or the collected errors (a missing or doubled `#[io(primary)]`, an unknown option).
fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let name = &input.ident;
    let Data::Struct(DataStruct { fields: Fields::Named(fields), .. }) = &input.data else {
        return Err(syn::Error::new(
            name.span(),
            "`#[derive(ModuleIo)]` works on a struct with named fields, one of them `#[io(primary)] x: Tensor`; for \
             anything else implement `ModuleIo` by hand",
        ));
    };
    let mut primary = None;
    let mut errors: Option<syn::Error> = None;
    let mut push = |e: syn::Error| match &mut errors {
        Some(all) => all.combine(e),
        None => errors = Some(e),
    };
    for f in &fields.named {
        for attr in f.attrs.iter().filter(|a| a.path().is_ident("io")) {
            let parsed = attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("primary") {
                    Ok(())
                } else {
                    Err(meta.error("unknown `io` option: the one option is `#[io(primary)]`"))
                }
            });
            match parsed {
                Err(e) => push(e),
                Ok(()) if primary.is_some() => push(syn::Error::new(
                    f.span(),
                    "a second `#[io(primary)]` field: one field is the primary tensor (what the one-tensor hooks \
                     see); remove the attribute from all but one",
                )),
                Ok(()) => primary = Some(f),
            }
        }
    }
    if let Some(e) = errors {
        return Err(e);
    }
    let Some(primary) = primary else {
        return Err(syn::Error::new(
            name.span(),
            "`#[derive(ModuleIo)]` needs one field marked `#[io(primary)]`: the tensor the one-tensor hooks see (the \
             first positional argument in PyTorch), e.g. `#[io(primary)] input: Tensor`",
        ));
    };
    let krate = krate();
    let p = primary.ident.as_ref().expect("named");
    let pty = &primary.ty;
    let others: Vec<_> = fields.named.iter().filter(|f| f.ident.as_ref() != Some(p)).collect();
    // Spanned at each field's type, so a type without `IoTensors` is reported there (once:
    // both calls name the trait the same way, and rustc merges the two errors).
    let pushes = others.iter().map(|f| {
        let (id, ty) = (&f.ident, &f.ty);
        quote_spanned!(ty.span()=> <#ty as #krate::module::IoTensors>::push_tensors(&self.#id, &mut out);)
    });
    let takes = others.iter().map(|f| {
        let (id, ty) = (&f.ident, &f.ty);
        quote_spanned!(ty.span()=> copy.#id = <#ty as #krate::module::IoTensors>::take_tensors(&self.#id, &mut slots);)
    });
    let primary_is_tensor = quote_spanned!(pty.span()=> let primary: &#krate::Tensor = &self.#p;);
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let type_name = name.to_string();
    Ok(quote! {
        impl #impl_generics #krate::module::ModuleIo for #name #ty_generics #where_clause {
            fn primary(&self) -> &#krate::Tensor {
                #primary_is_tensor
                primary
            }
            fn with_primary(&self, primary: #krate::Tensor) -> Self {
                let mut copy = ::core::clone::Clone::clone(self);
                copy.#p = primary;
                copy
            }
            fn tensors(&self) -> ::std::vec::Vec<::core::option::Option<#krate::Tensor>> {
                let mut out = ::std::vec![::core::option::Option::Some(::core::clone::Clone::clone(&self.#p))];
                #(#pushes)*
                out
            }
            fn with_tensors(&self, slots: ::std::vec::Vec<::core::option::Option<#krate::Tensor>>) -> Self {
                let expected = #krate::module::ModuleIo::tensors(self).len();
                let mut slots = #krate::module::IoSlots::new(#type_name, slots, expected);
                let mut copy = ::core::clone::Clone::clone(self);
                copy.#p = slots.take_tensor();
                #(#takes)*
                copy
            }
        }
    })
}
