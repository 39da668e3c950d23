//! Type analysis: the shape of a field's type, and types printed as the user wrote them.

use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
use quote::ToTokens;
use syn::{GenericArgument, PathArguments, Type};

/// The syntactic shape of a field type, used to pick the most helpful error hint.
pub enum TypeShape {
    /// `Vec<E>`, `[E; N]`, ... of non-tensors; `E` as written.
    List(String),
    /// A list of `Tensor`s or `Parameter`s.
    TensorList,
    /// `HashMap<K, V>`, `BTreeMap<K, V>`; `V` as written.
    Dict(String),
    /// `Tensor`.
    Tensor,
    /// `Parameter`.
    Param,
    /// `Option<T>`.
    Option(Box<TypeShape>),
    /// `Arc`, `Rc`, `Mutex`, `RefCell`, ...
    Shared,
    /// A tuple of one or more types.
    Tuple,
    /// Anything else: a module, plain data, `()`.
    Other,
}

/// The last path segment's identifier (`Vec` for `std::vec::Vec<Linear>`).
pub fn last_segment(ty: &Type) -> String {
    match ty {
        Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default(),
        Type::Paren(p) => last_segment(&p.elem),
        Type::Group(g) => last_segment(&g.elem),
        _ => String::new(),
    }
}

/// The type arguments of the last path segment (`String` and `Linear` for
/// `HashMap<String, Linear>`); none for a type that is not a path.
fn generic_args(ty: &Type) -> Vec<&Type> {
    let Type::Path(p) = ty else { return vec![] };
    let Some(seg) = p.path.segments.last() else { return vec![] };
    let PathArguments::AngleBracketed(a) = &seg.arguments else { return vec![] };
    a.args.iter().filter_map(|g| if let GenericArgument::Type(t) = g { Some(t) } else { None }).collect()
}

/// The element types of the tuples `ty` holds, directly or in the containers the derive
/// knows (lists, maps' values, `Option`, `Box`, shared and locked cells), deduplicated:
/// `String` and `Linear` for `Vec<(String, Linear)>`. A tuple holds state when any element
/// does, which a trait cannot say; the derive checks each element.
pub fn tuple_elements(ty: &Type) -> Vec<&Type> {
    fn walk<'a>(ty: &'a Type, in_tuple: bool, out: &mut Vec<&'a Type>) {
        match ty {
            Type::Tuple(t) => t.elems.iter().for_each(|e| walk(e, true, out)),
            Type::Array(a) => walk(&a.elem, in_tuple, out),
            Type::Slice(s) => walk(&s.elem, in_tuple, out),
            Type::Reference(r) => walk(&r.elem, in_tuple, out),
            Type::Paren(p) => walk(&p.elem, in_tuple, out),
            Type::Group(g) => walk(&g.elem, in_tuple, out),
            Type::Path(_) => {
                let args = generic_args(ty);
                let inner: Vec<&Type> = match last_segment(ty).as_str() {
                    "Vec" | "VecDeque" | "LinkedList" | "SmallVec" | "Option" | "Box" | "Arc" | "Rc" | "Weak"
                    | "Mutex" | "RwLock" | "RefCell" | "Cell" | "OnceCell" | "OnceLock" | "LazyLock" | "Pin" => {
                        args.into_iter().take(1).collect()
                    }
                    "HashMap" | "BTreeMap" | "IndexMap" => args.into_iter().skip(1).take(1).collect(),
                    _ => Vec::new(),
                };
                if in_tuple && inner.is_empty() {
                    if !out.iter().any(|t| code(t) == code(ty)) {
                        out.push(ty);
                    }
                } else {
                    inner.into_iter().for_each(|t| walk(t, in_tuple, out));
                }
            }
            _ if in_tuple => out.push(ty),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(ty, false, &mut out);
    out
}

/// The shape of `ty`, seen through references, parentheses and invisible groups.
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
                "Arc" | "Rc" | "Weak" | "Mutex" | "RwLock" | "RefCell" | "Cell" | "OnceCell" | "OnceLock"
                | "LazyLock" | "Pin" => TypeShape::Shared,
                _ => TypeShape::Other,
            }
        }
        _ => TypeShape::Other,
    }
}

/// Tokens printed as a user would write them: `Vec<Linear>`, `[Linear; 3]`,
/// `HashMap<String, Linear>`, `Box<dyn Layer + Send>`, `fn(f32) -> f32`.
pub fn code(tokens: impl ToTokens) -> String {
    /// Appends `tokens` to `out`, spaced as rustfmt would space a type.
    fn write(out: &mut String, tokens: TokenStream) {
        // Whether the previous token was a word (identifier, literal, closing `>`), which
        // needs a space before a following word.
        let mut after_word = false;
        // Whether the previous token was punctuation joined to this one (`->`, `::`).
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

/// `tokens` with `Self` replaced by `self_ty`: the checks live in a free function, where
/// a field type such as `PhantomData<Self>` must name the struct.
pub fn replace_self(tokens: TokenStream, self_ty: &TokenStream) -> TokenStream {
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

#[cfg(test)]
mod tests {
    use quote::quote;

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
    fn tuple_elements_are_found_through_known_containers() {
        let names = |s: &str| tuple_elements(&ty(s)).into_iter().map(code).collect::<Vec<_>>();
        assert_eq!(names("Vec<(String, Linear)>"), ["String", "Linear"]);
        assert_eq!(names("(Linear, Linear)"), ["Linear"]);
        assert_eq!(names("Option<(usize, Vec<Tensor>)>"), ["usize", "Tensor"]);
        assert_eq!(names("HashMap<(u8, u8), Linear>"), Vec::<String>::new(), "keys are not state");
        assert_eq!(names("BTreeMap<String, (Linear, f32)>"), ["Linear", "f32"]);
        assert_eq!(names("(usize, (String, Box<Linear>))"), ["usize", "String", "Linear"]);
        assert!(names("Vec<Linear>").is_empty() && names("Foo<(u8, Linear)>").is_empty());
    }

    #[test]
    fn self_is_replaced_in_nested_groups() {
        let self_ty = quote!(Net<T>);
        let out = replace_self(quote!(PhantomData<(Self, [Self; 2])>), &self_ty);
        assert_eq!(code(out), "PhantomData<(Net<T>, [Net<T>; 2])>");
    }
}
