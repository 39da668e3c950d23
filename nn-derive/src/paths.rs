//! How the generated code names `nn_core`: `::nn_core`, or `::nn` where only the facade is a dependency.

use proc_macro2::TokenStream;
use quote::quote;

/// The path to `nn_core` as the user's crate sees it: `::nn_core`, or `::nn` (the
/// facade) when only that is a dependency.
pub fn krate() -> TokenStream {
    use proc_macro_crate::{crate_name, FoundCrate};
    let found = crate_name("nn-core").or_else(|_| {
        crate_name("nn").map(|f| match f {
            FoundCrate::Itself => FoundCrate::Name("nn".into()),
            other => other,
        })
    });
    match found {
        Ok(FoundCrate::Name(n)) => match syn::parse_str::<syn::Ident>(&n) {
            Ok(id) => quote!(::#id),
            Err(_) => quote!(::nn_core),
        },
        // Inside nn-core itself (its tests), which declares `extern crate self as nn_core`.
        _ => quote!(::nn_core),
    }
}

/// `nn_core::__private`, the helpers the generated code calls.
pub fn private() -> TokenStream {
    let krate = krate();
    quote!(#krate::__private)
}
