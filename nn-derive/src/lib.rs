//! `#[derive(Module)]` for the `nn` framework (see `nn_core::Module`).
//!
//! The macro runs in three stages: `ast.rs` (with `attr.rs`) parses the input into a small
//! typed tree that keeps the original fields for spans, collecting every attribute error
//! (serde's `Ctxt` approach); `validate.rs` applies cross-field rules; `expand.rs` writes
//! the impls. On invalid input it still emits a stub impl next to the errors, so a user's
//! other code does not light up with secondary errors. Errors about a field underline its
//! whole `name: Type`, and say what to write instead.

mod ast;
mod attr;
mod expand;
mod validate;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Derives `nn_core::Module` (and `Display`) from field annotations:
/// `#[module]` (a sub-module, or `Option` of one), `#[param]` (`Parameter` or
/// `Option<Parameter>`), `#[buffer]` / `#[buffer(persistent = false)]` (`Tensor` or
/// `Option<Tensor>`), `#[base]` (`ModuleBase`). Each takes `rename = "name"`. Unannotated
/// fields must be plain data: a field that holds modules or tensors is a compile error.
#[proc_macro_derive(Module, attributes(module, param, buffer, base))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive(&input).into()
}
