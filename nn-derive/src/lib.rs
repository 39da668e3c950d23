//! `#[derive(Module)]` for the `nn` framework (see `nn_core::Module`).
//!
//! The macro runs in three stages, as thiserror's does: `let input = Input::from_syn(input)?;
//! input.validate()?;` then expand.
//!
//! - **Parse** (`ast.rs`, with `attr.rs`): a small typed tree that borrows from syn and keeps
//!   the original fields for spans. Attribute names are spelled once, in `symbol.rs`.
//! - **Validate** (`validate.rs`): the rules that span fields.
//! - **Expand** (`expand.rs`): the impls. Unannotated fields get the plain-data check of
//!   `unregistered.rs`; generated code names `nn_core` through `paths.rs`, bounds `Self:
//!   'static` with `bounds.rs`, and is spanned at the user's fields with `spans.rs`.
//!
//! Every error is collected in a `Ctxt` (`ctxt.rs`, serde's), so a user with three mistakes
//! sees three errors in one build; a `Ctxt` dropped unchecked panics, so none is lost. On
//! invalid input the derive still emits a stub impl next to the errors (`fallback.rs`,
//! thiserror's), so a user's other code does not light up with secondary errors. `types.rs`
//! reads field types for hints, and prints them as the user wrote them. Errors about a field
//! underline its whole `name: Type`, and say what to write instead.

#![warn(clippy::missing_docs_in_private_items)]

mod ast;
mod attr;
mod bounds;
mod ctxt;
mod expand;
mod fallback;
mod module_io;
mod paths;
mod spans;
mod symbol;
mod types;
mod unregistered;
mod validate;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Derives `nn_core::Module` (and `Display`) from field annotations:
/// `#[module]` (a sub-module, or `Option` of one), `#[param]` (`Parameter` or
/// `Option<Parameter>`), `#[buffer]` / `#[buffer(persistent = false)]` (`Tensor` or
/// `Option<Tensor>`), `#[base]` (`ModuleBase`). Each but `#[base]` takes `rename = "name"`,
/// the registered name where it differs from the field's (a key such as `self`). Unannotated
/// fields must be plain data: a field that holds modules or tensors is a compile error.
///
/// On the struct, `#[module(...)]` takes, alone or together (`#[module(name = "X", extra_repr)]`):
/// - `name = "TypeName"`: the name `Module::type_name` returns and the printout shows, where
///   it differs from the struct's: `#[module(name = "GPT2LMHeadModel")] struct
///   Gpt2LMHeadModel` prints `GPT2LMHeadModel(...)`, as transformers does. ASCII letters,
///   digits and `_`, not starting with a digit.
/// - `extra_repr`: the module's line in the printout is `ExtraRepr::extra_repr`
///   (PyTorch's `extra_repr` override); the struct implements `ExtraRepr`.
/// - `extra_state`: the module's `ExtraState` is saved with its tensors under
///   `<prefix>._extra_state` and taken back at load (PyTorch's `get_extra_state` /
///   `set_extra_state`); the struct implements `ExtraState`.
/// - `migrate`: every load runs the type's `MigrateState::migrate` on the state dict before
///   the module's load pre-hooks (PyTorch's `_load_from_state_dict` override, for older
///   layouts); the struct implements `MigrateState`.
/// - `version = N`: the module's state-dict layout version, recorded in every state dict it
///   writes and handed to its load pre-hooks, which migrate older layouts (PyTorch's
///   `_version`); an unsuffixed integer from 1.
#[proc_macro_derive(Module, attributes(module, param, buffer, base))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive(&input).into()
}

/// Derives `nn_core::module::ModuleIo` for a module's input or output struct: one field
/// marked `#[io(primary)]` (a `Tensor`: slot 0, what the one-tensor hooks see), then every
/// other field in declaration order as hook slots through `nn_core::module::IoTensors`
/// (a `Tensor` one slot, an `Option<Tensor>` one slot that may be `None`, a `bool` or
/// `usize` none). A field whose type does not implement `IoTensors` is a compile error at
/// that field, so no tensor of an input is hidden from hooks.
#[proc_macro_derive(ModuleIo, attributes(io))]
pub fn derive_module_io(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    module_io::derive(&input).into()
}
