//! Span helpers: generated code that rustc reports across a field's whole `name: Type`.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned};

use crate::ast::Field;

/// Gives every token of `tokens` the span `first`, except the last top-level one, which
/// gets `last` (see [`Field::span_range`]).
pub fn stretch(tokens: TokenStream, first: Span, last: Span) -> TokenStream {
    /// `tokens` with every token, nested ones included, spanned at `span`.
    fn respan(tokens: TokenStream, span: Span) -> TokenStream {
        tokens
            .into_iter()
            .map(|tt| match tt {
                TokenTree::Group(g) => {
                    let mut out = Group::new(g.delimiter(), respan(g.stream(), span));
                    out.set_span(span);
                    TokenTree::Group(out)
                }
                mut other => {
                    other.set_span(span);
                    other
                }
            })
            .collect()
    }
    let mut list: Vec<TokenTree> = respan(tokens, first).into_iter().collect();
    if let Some(tt) = list.last_mut() {
        tt.set_span(last);
    }
    list.into_iter().collect()
}

/// `path(&self.member, rest...)`, where both the callee and the first argument span the
/// field's `name: Type`: a failed bound on that argument is reported there, and rustc
/// leaves out its "required by a bound introduced by this call" label because the
/// callee has the same span.
pub fn field_call(f: &Field<'_>, path: TokenStream, mutable: bool, rest: TokenStream) -> TokenStream {
    let (first, last) = f.span_range();
    let path = stretch(path, first, last);
    let member = &f.member;
    let mut_token = mutable.then(|| quote!(mut));
    let arg = stretch(quote!(& #mut_token self . #member), first, last);
    quote_spanned! {first=> #path(#arg, #rest)}
}
