//! The expansion proper: the `Module`, `Display` and `HasBase` impls of a valid struct.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::{DeriveInput, LitStr};

use crate::ast::{Field, Input};
use crate::attr::Kind;
use crate::bounds::static_where;
use crate::spans::{field_call, stretch};
use crate::{fallback, paths, unregistered};

/// The derive's output for `input`: its impls, or its errors next to a stub impl.
pub fn derive(input: &DeriveInput) -> TokenStream {
    match try_expand(input) {
        Ok(expanded) => expanded,
        Err(error) => fallback::expand(input, error),
    }
}

/// Parses and validates `input`, then writes its impls.
fn try_expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let input = Input::from_syn(input)?;
    input.validate()?;
    Ok(expand(&input))
}

/// The statements the registered fields contribute, by the method they go in, and the
/// checks on the unregistered ones.
#[derive(Default)]
struct FieldStatements<'f, 'a> {
    /// `visit`: each parameter, buffer and sub-module, in field order.
    visits: Vec<TokenStream>,
    /// `visit_modules_mut`: each sub-module.
    visits_mut: Vec<TokenStream>,
    /// `__set_child`: one arm per sub-module, matched by registered name.
    sets: Vec<TokenStream>,
    /// One plain-data check per unannotated field.
    checks: Vec<TokenStream>,
    /// `deep_copy_into`: `member: copy` for every field, in declaration order.
    copies: Vec<TokenStream>,
    /// The `#[base]` field (validation allows one at most).
    base: Option<&'f Field<'a>>,
}

impl<'f, 'a> FieldStatements<'f, 'a> {
    /// Sorts every field of `input` into the statements it contributes.
    fn of(input: &'f Input<'a>, private: &TokenStream, self_ty: &TokenStream) -> Self {
        let mut out = FieldStatements::default();
        for f in &input.fields {
            let name = &f.name;
            out.copies.push(copy_field(f, input, private));
            match f.kind {
                Some(Kind::Param) => {
                    let rest = quote!(#private::Name::Field(#name), __f);
                    let call = field_call(f, quote!(#private::ParamField::__nn_visit), false, rest);
                    out.visits.push(quote!(#call;));
                }
                Some(Kind::Buffer { persistent }) => {
                    let rest = quote!(#private::Name::Field(#name), #persistent, __f);
                    let call = field_call(f, quote!(#private::BufferField::__nn_visit), false, rest);
                    out.visits.push(quote!(#call;));
                }
                Some(Kind::Module) => {
                    let rest = quote!(#private::Name::Field(#name), __f);
                    let call = field_call(f, quote!(#private::ModuleField::__nn_visit), false, rest.clone());
                    out.visits.push(quote!(#call;));
                    let call = field_call(f, quote!(#private::ModuleField::__nn_visit_mut), true, rest);
                    out.visits_mut.push(quote!(#call;));
                    let call = field_call(f, quote!(#private::ModuleField::__nn_set), true, quote!(__slot));
                    out.sets.push(quote!(if __name == #name { return #call; }));
                }
                Some(Kind::Base) => out.base = Some(f),
                None if f.misspelled => {}
                None => out.checks.push(unregistered::check(f, private, self_ty)),
            }
        }
        out
    }
}

/// `member: <the field of a deep copy>`: registered state through the `*Field` traits (a
/// parameter or buffer copied once per tree, a sub-module copied whole), the base without its
/// hooks, plain data cloned (or, when its type is not `Clone`, a panic naming the field).
fn copy_field(f: &Field<'_>, input: &Input<'_>, private: &TokenStream) -> TokenStream {
    let member = &f.member;
    let c = quote!(__c);
    let value = match f.kind {
        Some(Kind::Param) => field_call(f, quote!(#private::ParamField::__nn_copy), false, c),
        Some(Kind::Buffer { .. }) => field_call(f, quote!(#private::BufferField::__nn_copy), false, c),
        Some(Kind::Module) => field_call(f, quote!(#private::ModuleField::__nn_copy), false, c),
        Some(Kind::Base) => field_call(f, quote!(#private::BaseField::__nn_copy), false, TokenStream::new()),
        None => {
            let label = f.original.ident.as_ref().map_or_else(|| f.name.clone(), |i| i.unraw().to_string());
            let module = input.original.ident.to_string();
            quote!((&#private::CopyProbe(&self.#member)).__nn_copy_plain(#label, #module))
        }
    };
    quote!(#member: #value)
}

/// `Module::base` and `Module::base_mut`, reaching the `#[base]` field.
fn base_methods(base: &Field<'_>, private: &TokenStream) -> TokenStream {
    let get = field_call(base, quote!(#private::BaseField::__nn_base), false, TokenStream::new());
    let get_mut = field_call(base, quote!(#private::BaseField::__nn_base_mut), true, TokenStream::new());
    quote! {
        fn base(&self) -> ::core::option::Option<&#private::ModuleBase> {
            ::core::option::Option::Some(#get)
        }
        fn base_mut(&mut self) -> ::core::option::Option<&mut #private::ModuleBase> {
            ::core::option::Option::Some(#get_mut)
        }
    }
}

/// What a struct with a `#[base]` field needs besides its `Module` impl. It holds hooks,
/// so it must run: `HasBase` (which `Compute` requires), and the assertion that it
/// implements `Compute`, spanned at the field.
fn base_items(base: &Field<'_>, input: &Input<'_>, private: &TokenStream, self_ty: &TokenStream) -> TokenStream {
    let original = input.original;
    let ident = &original.ident;
    let (impl_g, ty_g, _) = original.generics.split_for_impl();
    let static_where = static_where(&original.generics);
    let get = field_call(base, quote!(#private::BaseField::__nn_base), false, TokenStream::new());
    let (first, last) = base.span_range();
    let assert = stretch(quote!(__nn_assert_runs::<#self_ty>), first, last);
    quote! {
        #[automatically_derived]
        impl #impl_g #private::HasBase for #ident #ty_g #static_where {
            fn module_base(&self) -> &#private::ModuleBase {
                #get
            }
        }

        /// A struct with a `#[base]` field implements `Compute` (checked, never run).
        #[allow(dead_code, clippy::all)]
        fn __nn_check_base_runs #impl_g () #static_where {
            fn __nn_assert_runs<T: #private::BaseNeedsCompute + ?::core::marker::Sized>() {}
            #assert();
        }
    }
}

/// `Module::extra_repr` for `#[module(extra_repr)]` written at `span`, where a missing
/// `ExtraRepr` impl is reported.
fn extra_repr_method(span: Span, private: &TokenStream) -> TokenStream {
    let call = stretch(quote!(#private::ExtraReprField::__nn_extra_repr), span, span);
    let this = quote_spanned!(span=> self);
    quote! {
        fn extra_repr(&self) -> ::std::string::String {
            #call(#this)
        }
    }
}

/// The `Module` methods of `#[module(extra_state)]` written at `span`, where a missing
/// `ExtraState` impl is reported.
fn extra_state_methods(span: Span, private: &TokenStream) -> TokenStream {
    let get = stretch(quote!(#private::ExtraStateField::__nn_extra_state_json), span, span);
    let check = stretch(quote!(#private::ExtraStateField::__nn_check_extra_state_json), span, span);
    let set = stretch(quote!(#private::ExtraStateField::__nn_set_extra_state_json), span, span);
    let this = quote_spanned!(span=> self);
    quote! {
        fn has_extra_state(&self) -> bool {
            true
        }
        fn extra_state_json(&self) -> ::core::result::Result<#private::JsonValue, #private::JsonError> {
            #get(#this)
        }
        fn check_extra_state_json(&self, __state: &#private::JsonValue) -> ::core::result::Result<(), #private::JsonError> {
            #check(#this, __state)
        }
        fn set_extra_state_json(&mut self, __state: &#private::JsonValue) {
            #set(#this, __state)
        }
    }
}

/// `Module::state_dict_version` for `#[module(version = N)]`.
fn version_method(version: &syn::LitInt) -> TokenStream {
    quote! {
        fn state_dict_version(&self) -> ::core::option::Option<u32> {
            ::core::option::Option::Some(#version)
        }
    }
}

/// `Module::state_dict_migration` for `#[module(migrate)]`, spanned at `migrate` (where a
/// missing `MigrateState` impl is reported).
fn migrate_method(span: Span, private: &TokenStream) -> TokenStream {
    let tr = stretch(quote!(#private::MigrateState), span, span);
    let this = quote_spanned!(span=> self);
    quote! {
        fn state_dict_migration(&self) -> ::core::option::Option<&dyn #private::MigrateState> {
            ::core::option::Option::Some(#this as &dyn #tr)
        }
    }
}

/// The check that the struct is not `Clone`, spanned at its name: a clone of a module holds
/// the original's parameter handles, so the "copy" would train the original. This impl
/// conflicts with nn-core's blanket impl for `Clone` types exactly when the struct is one
/// (generic structs included); the trait's name is what the error shows.
fn not_clone_check(input: &Input<'_>, private: &TokenStream) -> TokenStream {
    let original = input.original;
    let ident = &original.ident;
    let (impl_g, ty_g, where_c) = original.generics.split_for_impl();
    let trait_path =
        quote_spanned!(ident.span()=> #private::ModuleIsNotClone_ItsCloneWouldShareParameters_CallDeepCopy);
    quote_spanned! {ident.span()=>
        #[automatically_derived]
        impl #impl_g #trait_path for #ident #ty_g #where_c {}
    }
}

/// The impls for a parsed and validated struct.
fn expand(input: &Input<'_>) -> TokenStream {
    let private = paths::private();
    let original = input.original;
    let ident = &original.ident;
    let type_name = input.name.as_ref().map_or_else(|| ident.to_string(), LitStr::value);
    let (impl_g, ty_g, where_c) = original.generics.split_for_impl();
    let self_ty = quote!(#ident #ty_g);
    let static_where = static_where(&original.generics);

    let FieldStatements { visits, visits_mut, sets, checks, copies, base } =
        FieldStatements::of(input, &private, &self_ty);
    let not_clone = not_clone_check(input, &private);
    let base_methods = base.map(|f| base_methods(f, &private));
    let base_items = base.map(|f| base_items(f, input, &private, &self_ty));
    let extra_repr = input.extra_repr.map(|span| extra_repr_method(span, &private));
    let extra_state = input.extra_state.map(|span| extra_state_methods(span, &private));
    let version = input.version.as_ref().map(version_method);
    let migrate = input.migrate.map(|span| migrate_method(span, &private));
    let ignore_visitor = visits.is_empty().then(|| quote!(let _ = __f;));
    let ignore_visitor_mut = visits_mut.is_empty().then(|| quote!(let _ = __f;));
    let ignore_slot = sets.is_empty().then(|| quote!(let _ = (__name, __slot);));
    quote! {
        #[allow(non_local_definitions)]
        const _: () = {
            #[automatically_derived]
            impl #impl_g #private::HoldsState for #ident #ty_g #where_c {}

            #[automatically_derived]
            impl #impl_g #private::Module for #ident #ty_g #static_where {
                fn visit<'__a>(&'__a self, __f: &mut dyn FnMut(#private::Name<'__a>, #private::Item<'__a>)) {
                    #ignore_visitor
                    #(#visits)*
                }
                fn visit_modules_mut<'__a>(&'__a mut self, __f: &mut dyn FnMut(#private::Name<'_>, &'__a mut dyn #private::Module)) {
                    #ignore_visitor_mut
                    #(#visits_mut)*
                }
                fn __set_child(&mut self, __name: &str, __slot: &mut dyn ::core::any::Any) -> #private::SetChild {
                    #ignore_slot
                    #(#sets)*
                    #private::SetChild::NoSuchChild
                }
                fn type_name(&self) -> &'static str {
                    #type_name
                }
                fn deep_copy_into(&self, __c: &mut #private::DeepCopier, __slot: #private::CopySlot<'_>) {
                    #[allow(unused_imports)]
                    use #private::{CopyByClone as _, CopyRefused as _};
                    let _ = &__c;
                    __slot.put(Self { #(#copies),* });
                }
                #extra_repr
                #extra_state
                #version
                #migrate
                #base_methods
                fn as_any(&self) -> &dyn ::core::any::Any {
                    self
                }
                fn as_any_mut(&mut self) -> &mut dyn ::core::any::Any {
                    self
                }
                fn as_dyn(&self) -> &dyn #private::Module {
                    self
                }
                fn as_dyn_mut(&mut self) -> &mut dyn #private::Module {
                    self
                }
            }

            #[automatically_derived]
            impl #impl_g ::core::fmt::Display for #ident #ty_g #static_where {
                fn fmt(&self, __f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    #private::fmt_module(self, __f)
                }
            }

            #base_items

            #not_clone

            /// Unannotated fields must be plain data (checked at compile time, never run).
            #[allow(dead_code, clippy::all)]
            fn __nn_check_unregistered_fields #impl_g () #where_c {
                #[allow(unused_imports)]
                use #private::{ProbePlain as _, ProbeState as _};
                #(#checks)*
            }
        };
    }
}
