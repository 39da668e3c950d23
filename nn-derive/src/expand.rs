//! Code generation. Every statement about a field is spanned at that field, so a failed
//! trait bound underlines the user's `name: Type` rather than the derive.

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::{DeriveInput, GenericArgument, Generics, PathArguments, Type, WhereClause};

use crate::ast::{Field, Input};
use crate::attr::Kind;

pub fn derive(input: &DeriveInput) -> TokenStream {
    match Input::from_syn(input).and_then(|i| i.validate().map(|()| i)) {
        Ok(parsed) => expand(&parsed),
        Err(e) => {
            let stub = fallback(input);
            let err = e.to_compile_error();
            quote!(#err #stub)
        }
    }
}

/// The path to `nn_core` as the user's crate sees it: `::nn_core`, or `::nn` (the
/// facade) when only that is a dependency.
fn krate() -> TokenStream {
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

/// The struct's where clause plus `T: 'static` for every type parameter and `'a: 'static`
/// for every lifetime: `Module: Any` needs `Self: 'static`.
fn static_where(generics: &Generics) -> WhereClause {
    let mut g = generics.clone();
    let wc = g.make_where_clause();
    let bounded = generics.type_params().map(|tp| tp.ident.to_token_stream());
    let bounded = bounded.chain(generics.lifetimes().map(|lp| lp.lifetime.to_token_stream()));
    for param in bounded {
        // Always parses; a failure would only drop the bound, never panic.
        if let Ok(pred) = syn::parse2(quote!(#param: 'static)) {
            wc.predicates.push(pred);
        }
    }
    wc.clone()
}

/// A stub impl emitted next to compile errors so the rest of the user's code still
/// type-checks against `Module` and `Display` (thiserror's fallback).
fn fallback(input: &DeriveInput) -> TokenStream {
    let p = private();
    let ident = &input.ident;
    let (impl_g, ty_g, where_c) = input.generics.split_for_impl();
    let static_where = static_where(&input.generics);
    let failed = quote!(::core::unreachable!("`#[derive(Module)]` failed to compile"));
    quote! {
        const _: () = {
            impl #impl_g #p::HoldsState for #ident #ty_g #where_c {}
            impl #impl_g #p::Module for #ident #ty_g #static_where {
                fn visit<'__a>(&'__a self, _: &mut dyn FnMut(#p::Name<'__a>, #p::Item<'__a>)) { #failed }
                fn visit_modules_mut<'__a>(&'__a mut self, _: &mut dyn FnMut(#p::Name<'_>, &'__a mut dyn #p::Module)) { #failed }
                fn type_name(&self) -> &'static str { #failed }
                fn as_any(&self) -> &dyn ::core::any::Any { self }
                fn as_any_mut(&mut self) -> &mut dyn ::core::any::Any { self }
                fn as_dyn(&self) -> &dyn #p::Module { self }
                fn as_dyn_mut(&mut self) -> &mut dyn #p::Module { self }
            }
            impl #impl_g ::core::fmt::Display for #ident #ty_g #static_where {
                fn fmt(&self, _: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result { #failed }
            }
            impl #impl_g #p::HasBase for #ident #ty_g #static_where {
                fn module_base(&self) -> &#p::ModuleBase { #failed }
            }
        };
    }
}

fn private() -> TokenStream {
    let krate = krate();
    quote!(#krate::__private)
}

/// The syntactic shape of a field type, used to pick the most helpful error hint.
pub enum TypeShape {
    /// `Vec<E>`, `[E; N]`, ... of non-tensors; `E` as written.
    List(String),
    /// A list of `Tensor`s or `Parameter`s.
    TensorList,
    /// `HashMap<K, V>`, `BTreeMap<K, V>`; `V` as written.
    Dict(String),
    Tensor,
    Param,
    /// `Option<T>`.
    Option(Box<TypeShape>),
    /// `Arc`, `Rc`, `Mutex`, `RefCell`, ...
    Shared,
    Tuple,
    Other,
}

/// The last path segment's identifier (`Vec` for `std::vec::Vec<Linear>`).
fn last_segment(ty: &Type) -> String {
    match ty {
        Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default(),
        Type::Paren(p) => last_segment(&p.elem),
        Type::Group(g) => last_segment(&g.elem),
        _ => String::new(),
    }
}

fn generic_args(ty: &Type) -> Vec<&Type> {
    let Type::Path(p) = ty else { return vec![] };
    let Some(seg) = p.path.segments.last() else { return vec![] };
    let PathArguments::AngleBracketed(a) = &seg.arguments else { return vec![] };
    a.args.iter().filter_map(|g| if let GenericArgument::Type(t) = g { Some(t) } else { None }).collect()
}

pub fn shape_of(ty: &Type) -> TypeShape {
    let is_tensorish = |t: &Type| matches!(last_segment(t).as_str(), "Tensor" | "Parameter");
    let list = |elem: &Type| if is_tensorish(elem) { TypeShape::TensorList } else { TypeShape::List(code(elem)) };
    match ty {
        Type::Array(a) => list(&a.elem),
        Type::Slice(s) => list(&s.elem),
        Type::Tuple(t) if !t.elems.is_empty() => TypeShape::Tuple,
        Type::Reference(r) => shape_of(&r.elem),
        Type::Paren(p) => shape_of(&p.elem),
        Type::Group(g) => shape_of(&g.elem),
        Type::Path(_) => {
            let args = generic_args(ty);
            match last_segment(ty).as_str() {
                "Vec" | "VecDeque" | "LinkedList" | "SmallVec" => match args.first() {
                    Some(e) => list(e),
                    None => TypeShape::List("_".into()),
                },
                "HashMap" | "BTreeMap" | "IndexMap" => {
                    TypeShape::Dict(args.get(1).map_or_else(|| "_".into(), |t| code(*t)))
                }
                "Tensor" => TypeShape::Tensor,
                "Parameter" => TypeShape::Param,
                "Option" => match args.first() {
                    Some(inner) => TypeShape::Option(Box::new(shape_of(inner))),
                    None => TypeShape::Other,
                },
                "Arc" | "Rc" | "Mutex" | "RwLock" | "RefCell" | "Cell" => TypeShape::Shared,
                _ => TypeShape::Other,
            }
        }
        _ => TypeShape::Other,
    }
}

/// Tokens printed as a user would write them: `Vec<Linear>`, `[Linear; 3]`,
/// `HashMap<String, Linear>`, `Box<dyn Layer + Send>`, `fn(f32) -> f32`.
pub fn code(tokens: impl ToTokens) -> String {
    fn write(out: &mut String, tokens: TokenStream) {
        // Whether the previous token was a word (identifier, literal, closing `>`), which
        // needs a space before a following word.
        let mut after_word = false;
        let mut joint = false;
        for tt in tokens {
            match tt {
                TokenTree::Ident(i) => {
                    if after_word {
                        out.push(' ');
                    }
                    out.push_str(&i.to_string());
                    after_word = true;
                }
                TokenTree::Literal(l) => {
                    if after_word {
                        out.push(' ');
                    }
                    out.push_str(&l.to_string());
                    after_word = true;
                }
                TokenTree::Punct(p) => {
                    let c = p.as_char();
                    let spaced = p.spacing() == proc_macro2::Spacing::Alone;
                    match c {
                        ',' | ';' => {
                            out.push(c);
                            out.push(' ');
                        }
                        '+' | '=' => {
                            out.push(' ');
                            out.push(c);
                            out.push(' ');
                        }
                        '-' if !spaced => out.push_str(" -"),
                        '>' if joint && out.ends_with('-') => out.push_str("> "),
                        ':' if spaced && !joint => out.push_str(": "),
                        _ => out.push(c),
                    }
                    // `Vec<u8> + Send`, `for<'a> fn()`: a word after `>` is spaced.
                    after_word = c == '>' && !out.ends_with(' ');
                    joint = !spaced;
                    continue;
                }
                TokenTree::Group(g) => {
                    let (open, close) = match g.delimiter() {
                        Delimiter::Parenthesis => ("(", ")"),
                        Delimiter::Bracket => ("[", "]"),
                        Delimiter::Brace => ("{ ", " }"),
                        Delimiter::None => ("", ""),
                    };
                    out.push_str(open);
                    let mut inner = String::new();
                    write(&mut inner, g.stream());
                    out.push_str(inner.trim_end());
                    out.push_str(close);
                    after_word = false;
                }
            }
            joint = false;
        }
    }
    let mut out = String::new();
    write(&mut out, tokens.into_token_stream());
    out.trim().to_string()
}

/// Gives every token of `tokens` the span `first`, except the last top-level one, which
/// gets `last` (see `Field::span_range`).
fn stretch(tokens: TokenStream, first: Span, last: Span) -> TokenStream {
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
fn field_call(f: &Field<'_>, path: TokenStream, mutable: bool, rest: TokenStream) -> TokenStream {
    let (first, last) = f.span_range();
    let path = stretch(path, first, last);
    let member = &f.member;
    let mut_token = mutable.then(|| quote!(mut));
    let arg = stretch(quote!(& #mut_token self . #member), first, last);
    quote_spanned! {first=> #path(#arg, #rest)}
}

/// `tokens` with `Self` replaced by `self_ty`: the checks live in a free function, where
/// a field type such as `PhantomData<Self>` must name the struct.
fn replace_self(tokens: TokenStream, self_ty: &TokenStream) -> TokenStream {
    let mut out = TokenStream::new();
    for tt in tokens {
        match tt {
            TokenTree::Ident(i) if i == "Self" => out.extend(self_ty.clone()),
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), replace_self(g.stream(), self_ty));
                group.set_span(g.span());
                out.extend([TokenTree::Group(group)]);
            }
            other => out.extend([other]),
        }
    }
    out
}

/// What an unannotated field's error says: what the type holds, and what to write.
fn unregistered_hint(f: &Field<'_>) -> (&'static str, String) {
    let decl = f.decl_prefix();
    let ty = code(f.ty);
    let any = "a registered field is a `Module`, a `Parameter` or a `Tensor` (or an `Option` of one); a list of \
               layers is a `ModuleList`, a map of layers a `ModuleDict`";
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
fn unregistered_check(f: &Field<'_>, p: &TokenStream, self_ty: &TokenStream) -> TokenStream {
    let (first, last) = f.span_range();
    let ty = replace_self(f.ty.to_token_stream(), self_ty);
    let (what, note) = unregistered_hint(f);
    let escape = |s: String| s.replace('{', "{{").replace('}', "}}");
    let message = escape(format!("field of type `{}` holds {what} but is not registered", code(f.ty)));
    let note = escape(note);
    let label = "invisible to `parameters()`, `state_dict()` and `to_device()`";
    let call = stretch(quote!(PlainData::__nn_check), first, last);
    let arg = stretch(quote!(&(&#p::Probe::<#ty>::new()).__nn_probe()), first, last);
    quote_spanned! {first=>
        {
            #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
            trait PlainData {
                fn __nn_check(&self) {}
            }
            #[diagnostic::do_not_recommend]
            impl PlainData for #p::Plain {}
            #call(#arg);
        }
    }
}

fn expand(input: &Input<'_>) -> TokenStream {
    let p = private();
    let orig = input.original;
    let ident = &orig.ident;
    let type_name = ident.to_string();
    let (impl_g, ty_g, where_c) = orig.generics.split_for_impl();
    let self_ty = quote!(#ident #ty_g);

    let mut visits = Vec::new();
    let mut visits_mut = Vec::new();
    let mut sets = Vec::new();
    let mut checks = Vec::new();
    let mut base = None;
    for f in &input.fields {
        let name = &f.name;
        match f.kind {
            Some(Kind::Param) => {
                let call =
                    field_call(f, quote!(#p::ParamField::__nn_visit), false, quote!(#p::Name::Field(#name), __f));
                visits.push(quote!(#call;));
            }
            Some(Kind::Buffer { persistent }) => {
                let rest = quote!(#p::Name::Field(#name), #persistent, __f);
                let call = field_call(f, quote!(#p::BufferField::__nn_visit), false, rest);
                visits.push(quote!(#call;));
            }
            Some(Kind::Module) => {
                let rest = quote!(#p::Name::Field(#name), __f);
                let call = field_call(f, quote!(#p::ModuleField::__nn_visit), false, rest.clone());
                visits.push(quote!(#call;));
                let call = field_call(f, quote!(#p::ModuleField::__nn_visit_mut), true, rest);
                visits_mut.push(quote!(#call;));
                let call = field_call(f, quote!(#p::ModuleField::__nn_set), true, quote!(__slot));
                sets.push(quote!(if __name == #name { return #call; }));
            }
            Some(Kind::Base) => base = Some(f),
            None if f.misspelled => {}
            None => checks.push(unregistered_check(f, &p, &self_ty)),
        }
    }

    let base_fns = base.map(|f| {
        let get = field_call(f, quote!(#p::BaseField::__nn_base), false, TokenStream::new());
        let get_mut = field_call(f, quote!(#p::BaseField::__nn_base_mut), true, TokenStream::new());
        quote! {
            fn base(&self) -> ::core::option::Option<&#p::ModuleBase> {
                ::core::option::Option::Some(#get)
            }
            fn base_mut(&mut self) -> ::core::option::Option<&mut #p::ModuleBase> {
                ::core::option::Option::Some(#get_mut)
            }
        }
    });
    let static_where = static_where(&orig.generics);
    // A struct with a base holds hooks, so it must run: `HasBase` (which `Compute`
    // requires) and the assertion that it implements `Compute`, spanned at the field.
    let base_impls = base.map(|f| {
        let get = field_call(f, quote!(#p::BaseField::__nn_base), false, TokenStream::new());
        let (first, last) = f.span_range();
        let assert = stretch(quote!(__nn_assert_runs::<#self_ty>), first, last);
        quote! {
            #[automatically_derived]
            impl #impl_g #p::HasBase for #ident #ty_g #static_where {
                fn module_base(&self) -> &#p::ModuleBase {
                    #get
                }
            }

            /// A struct with a `#[base]` field implements `Compute` (checked, never run).
            #[allow(dead_code, clippy::all)]
            fn __nn_check_base_runs #impl_g () #static_where {
                fn __nn_assert_runs<T: #p::BaseNeedsCompute + ?::core::marker::Sized>() {}
                #assert();
            }
        }
    });
    let extra_repr = input.extra_repr.map(|span| {
        // A missing `ExtraRepr` impl is reported at `extra_repr` in `#[module(extra_repr)]`.
        let call = stretch(quote!(#p::ExtraReprField::__nn_extra_repr), span, span);
        let this = quote_spanned!(span=> self);
        quote! {
            fn extra_repr(&self) -> ::std::string::String {
                #call(#this)
            }
        }
    });

    let unused_f = visits.is_empty().then(|| quote!(let _ = __f;));
    let unused_fm = visits_mut.is_empty().then(|| quote!(let _ = __f;));
    let unused_slot = sets.is_empty().then(|| quote!(let _ = (__name, __slot);));
    quote! {
        #[allow(non_local_definitions)]
        const _: () = {
            #[automatically_derived]
            impl #impl_g #p::HoldsState for #ident #ty_g #where_c {}

            #[automatically_derived]
            impl #impl_g #p::Module for #ident #ty_g #static_where {
                fn visit<'__a>(&'__a self, __f: &mut dyn FnMut(#p::Name<'__a>, #p::Item<'__a>)) {
                    #unused_f
                    #(#visits)*
                }
                fn visit_modules_mut<'__a>(&'__a mut self, __f: &mut dyn FnMut(#p::Name<'_>, &'__a mut dyn #p::Module)) {
                    #unused_fm
                    #(#visits_mut)*
                }
                fn __set_child(&mut self, __name: &str, __slot: &mut dyn ::core::any::Any) -> #p::SetChild {
                    #unused_slot
                    #(#sets)*
                    #p::SetChild::NoSuchChild
                }
                fn type_name(&self) -> &'static str {
                    #type_name
                }
                #extra_repr
                #base_fns
                fn as_any(&self) -> &dyn ::core::any::Any {
                    self
                }
                fn as_any_mut(&mut self) -> &mut dyn ::core::any::Any {
                    self
                }
                fn as_dyn(&self) -> &dyn #p::Module {
                    self
                }
                fn as_dyn_mut(&mut self) -> &mut dyn #p::Module {
                    self
                }
            }

            #[automatically_derived]
            impl #impl_g ::core::fmt::Display for #ident #ty_g #static_where {
                fn fmt(&self, __f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    #p::fmt_module(self, __f)
                }
            }

            #base_impls

            /// Unannotated fields must be plain data (checked at compile time, never run).
            #[allow(dead_code, clippy::all)]
            fn __nn_check_unregistered_fields #impl_g () #where_c {
                #[allow(unused_imports)]
                use #p::{ProbePlain as _, ProbeState as _};
                #(#checks)*
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(s: &str) -> Type {
        syn::parse_str(s).expect("a type")
    }

    #[test]
    fn code_prints_types_as_written() {
        for s in [
            "Vec<Linear>",
            "[Linear; 3]",
            "HashMap<String, Linear>",
            "(Linear, Linear)",
            "Box<dyn Layer + Send>",
            "std::vec::Vec<Vec<u8>>",
            "&'a str",
            "fn(f32) -> f32",
            "for<'a> fn(&'a Tensor)",
            "Box<dyn Iterator<Item = u8>>",
            "<T as Trait>::Assoc",
            "[u8; { N }]",
        ] {
            assert_eq!(code(ty(s)), s);
        }
    }

    #[test]
    fn shapes_pick_the_hint() {
        assert!(matches!(shape_of(&ty("Vec<Linear>")), TypeShape::List(e) if e == "Linear"));
        assert!(matches!(shape_of(&ty("[Tensor; 2]")), TypeShape::TensorList));
        assert!(matches!(shape_of(&ty("BTreeMap<String, Linear>")), TypeShape::Dict(e) if e == "Linear"));
        assert!(
            matches!(shape_of(&ty("Option<Tensor>")), TypeShape::Option(inner) if matches!(*inner, TypeShape::Tensor))
        );
        assert!(matches!(shape_of(&ty("Arc<Mutex<Linear>>")), TypeShape::Shared));
        assert!(matches!(shape_of(&ty("()")), TypeShape::Other));
    }

    #[test]
    fn self_is_replaced_in_nested_groups() {
        let self_ty = quote!(Net<T>);
        let out = replace_self(quote!(PhantomData<(Self, [Self; 2])>), &self_ty);
        assert_eq!(code(out), "PhantomData<(Net<T>, [Net<T>; 2])>");
    }
}
