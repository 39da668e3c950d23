//! The where clause of the generated impls that need `Self: 'static`.

use quote::{quote, ToTokens};
use syn::{Generics, WhereClause};

/// The struct's where clause plus `T: 'static` for every type parameter and `'a: 'static`
/// for every lifetime: `Module: Any` needs `Self: 'static`.
pub fn static_where(generics: &Generics) -> WhereClause {
    let mut extended = generics.clone();
    let where_clause = extended.make_where_clause();
    let bounded = generics.type_params().map(|tp| tp.ident.to_token_stream());
    let bounded = bounded.chain(generics.lifetimes().map(|lp| lp.lifetime.to_token_stream()));
    for param in bounded {
        // Always parses; a failure would only drop the bound, never panic.
        if let Ok(predicate) = syn::parse2(quote!(#param: 'static)) {
            where_clause.predicates.push(predicate);
        }
    }
    where_clause.clone()
}
