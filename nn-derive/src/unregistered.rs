//! The compile-time check that an unannotated field holds no module state.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned, ToTokens};

use crate::ast::Field;
use crate::spans::stretch;
use crate::types::{code, last_segment, replace_self, shape_of, tuple_elements, TypeShape};

/// What an unannotated field's error says: what the type holds, and what to write.
fn hint(f: &Field<'_>) -> (&'static str, String) {
    let decl = f.decl_prefix();
    let ty = code(f.ty);
    let any = "a registered field is a `Module`, a `Parameter` or a `Tensor` (or an `Option` of one); a list of \
               layers is a `ModuleList`, a map of layers a `ModuleDict`";
    if !matches!(shape_of(f.ty), TypeShape::Tuple) && !tuple_elements(f.ty).is_empty() {
        return (
            "module state in a tuple",
            "tuples are not traversed: keep named layers in a `#[module] ModuleDict<...>` (the names as keys), a list \
             in a `#[module] ModuleList<...>`, or give each layer its own `#[module]` field"
                .to_string(),
        );
    }
    match shape_of(f.ty) {
        TypeShape::List(elem) => match elem.strip_prefix("Option<").and_then(|e| e.strip_suffix('>')) {
            Some(inner) => {
                ("modules", format!("write `#[module] {decl}ModuleList<{inner}>` (a `ModuleList` has no empty slots)"))
            }
            None => ("modules", format!("write `#[module] {decl}ModuleList<{elem}>`")),
        },
        TypeShape::Dict(elem) => ("modules", format!("write `#[module] {decl}ModuleDict<{elem}>`")),
        TypeShape::TensorList => (
            "tensors",
            "give each tensor its own field (`#[param] name: Parameter` or `#[buffer] name: Tensor`), or stack \
             them into one tensor"
                .to_string(),
        ),
        TypeShape::Tensor => (
            "a tensor",
            format!(
                "write `#[buffer] {decl}Tensor` for state saved with the model, or `#[param] {decl}Parameter` if \
                 it is trained"
            ),
        ),
        TypeShape::Param => ("a parameter", format!("write `#[param] {decl}{ty}`")),
        TypeShape::Option(inner) => match *inner {
            TypeShape::Tensor => ("a tensor", format!("write `#[buffer] {decl}{ty}` (registered when `Some`)")),
            TypeShape::Param => ("a parameter", format!("write `#[param] {decl}{ty}` (registered when `Some`)")),
            TypeShape::Other => ("a module", format!("write `#[module] {decl}{ty}` (registered when `Some`)")),
            _ => ("module state", any.to_string()),
        },
        TypeShape::Tuple => (
            "modules",
            format!("give each element its own `#[module]` field, or chain layers in `#[module] {decl}Sequential`"),
        ),
        TypeShape::Shared => (
            "module state",
            "a module owns its state: store the sub-module, `Parameter` or `Tensor` itself, annotated".to_string(),
        ),
        TypeShape::Other => {
            let what = match last_segment(f.ty).as_str() {
                "ModuleList" | "ModuleDict" | "Sequential" => "modules",
                _ => "a module",
            };
            (what, format!("write `#[module] {decl}{ty}`"))
        }
    }
}

/// The compile-time check that an unannotated field is plain data. The probe (see
/// `nn_core::__private`) yields `Plain` or `Stateful<T>`; only `Plain` implements the
/// trait defined here, whose `on_unimplemented` text, written for this field, is the
/// error the user reads, underlined at `name: Type`.
pub fn check(f: &Field<'_>, private: &TokenStream, self_ty: &TokenStream) -> TokenStream {
    let (first, last) = f.span_range();
    let ty = replace_self(f.ty.to_token_stream(), self_ty);
    let (what, note) = hint(f);
    let escape_braces = |s: String| s.replace('{', "{{").replace('}', "}}");
    let message = escape_braces(format!("field of type `{}` holds {what} but is not registered", code(f.ty)));
    let note = escape_braces(note);
    let label = "invisible to `parameters()`, `state_dict()` and `to_device()`";
    let call = stretch(quote!(PlainData::__nn_check), first, last);
    // A tuple holds state when any element does (which no trait bound says): each element
    // is probed; any other type is probed whole.
    let elements = tuple_elements(f.ty);
    let probed: Vec<TokenStream> = if elements.is_empty() {
        vec![ty]
    } else {
        elements.iter().map(|e| replace_self(e.to_token_stream(), self_ty)).collect()
    };
    let calls = probed.iter().map(|t| {
        let arg = stretch(quote!(&(&#private::Probe::<#t>::new()).__nn_probe()), first, last);
        quote_spanned!(first=> #call(#arg);)
    });
    quote_spanned! {first=>
        {
            #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
            trait PlainData {
                fn __nn_check(&self) {}
            }
            #[diagnostic::do_not_recommend]
            impl PlainData for #private::Plain {}
            #(#calls)*
        }
    }
}
