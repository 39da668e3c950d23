//! The error context: every error the derive finds, reported together (serde's `Ctxt`).

use std::fmt::Display;

use proc_macro2::Span;
use quote::ToTokens;

/// Collects errors so that a user with three mistakes sees three errors in one build.
///
/// A drop guard makes sure no collected error is lost: [`check`](Self::check) consumes the
/// context and hands its errors back, and a context dropped without it panics, which turns
/// a forgotten `check()` in the derive into a failing test rather than a silently accepted
/// input.
pub struct Ctxt {
    /// The errors so far; `Some` until `check` takes them, which disarms the drop guard.
    errors: Option<Vec<syn::Error>>,
}

impl Ctxt {
    /// An empty context, armed: it must end in [`check`](Self::check).
    pub fn new() -> Self {
        Ctxt { errors: Some(Vec::new()) }
    }

    /// An error at `span`.
    pub fn error(&mut self, span: Span, msg: impl Display) {
        self.push(syn::Error::new(span, msg));
    }

    /// An error underlining all of `tokens` (from their first token to their last).
    pub fn error_spanned(&mut self, tokens: impl ToTokens, msg: impl Display) {
        self.push(syn::Error::new_spanned(tokens, msg));
    }

    /// An error that syn already built (a failed parse).
    pub fn push(&mut self, error: syn::Error) {
        self.errors.get_or_insert_with(Vec::new).push(error);
    }

    /// All errors combined into one, in the order they were found, or `Ok` when there were
    /// none. Consumes the context and disarms its drop guard.
    pub fn check(mut self) -> Result<(), syn::Error> {
        let mut errors = self.errors.take().unwrap_or_default().into_iter();
        match errors.next() {
            None => Ok(()),
            Some(mut combined) => {
                combined.extend(errors);
                Err(combined)
            }
        }
    }
}

impl Drop for Ctxt {
    /// Panics if the errors were never taken by `check`, unless the thread is already
    /// panicking (a second panic would abort and hide the first).
    fn drop(&mut self) {
        if self.errors.is_some() && !std::thread::panicking() {
            panic!("nn-derive: a `Ctxt` was dropped without `check()`, so its errors were dropped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "dropped without `check()`, so its errors were dropped")]
    fn a_context_dropped_unchecked_panics() {
        let mut cx = Ctxt::new();
        cx.error(Span::call_site(), "lost");
        drop(cx);
    }

    #[test]
    #[should_panic(expected = "dropped without `check()`")]
    fn an_empty_context_must_be_checked_too() {
        drop(Ctxt::new());
    }

    #[test]
    fn check_returns_every_error_combined_in_order() {
        let mut cx = Ctxt::new();
        cx.error(Span::call_site(), "first");
        cx.error_spanned(quote::quote!(a b), "second");
        cx.push(syn::Error::new(Span::call_site(), "third"));
        let combined = cx.check().expect_err("three errors");
        let messages: Vec<String> = combined.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages, ["first", "second", "third"]);
    }

    #[test]
    fn check_without_errors_is_ok() {
        assert!(Ctxt::new().check().is_ok());
    }
}
