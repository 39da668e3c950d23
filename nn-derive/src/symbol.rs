//! The names of the derive's attributes and their options, spelled in this one place.

/// `#[module]` on a field (a sub-module), and `#[module(...)]` on the struct.
pub const MODULE: &str = "module";
/// `#[param]` on a field: a trained `Parameter`.
pub const PARAM: &str = "param";
/// `#[buffer]` on a field: a `Tensor` that is not trained.
pub const BUFFER: &str = "buffer";
/// `#[base]` on a field: the `ModuleBase` that holds hooks.
pub const BASE: &str = "base";

/// The field attributes, in the order `#[proc_macro_derive(Module, attributes(...))]` in
/// `lib.rs` declares them (a test keeps the two in step).
pub const FIELD_KINDS: [&str; 4] = [MODULE, PARAM, BUFFER, BASE];

/// `rename = "name"` in `#[module(...)]`, `#[param(...)]` and `#[buffer(...)]`.
pub const RENAME: &str = "rename";
/// `persistent = false` in `#[buffer(...)]`.
pub const PERSISTENT: &str = "persistent";
/// `extra_repr` in the struct's `#[module(...)]`.
pub const EXTRA_REPR: &str = "extra_repr";
/// `name = "TypeName"` in the struct's `#[module(...)]`: the name the module prints.
pub const NAME: &str = "name";
/// `extra_state` in the struct's `#[module(...)]`: the module saves `ExtraState`.
pub const EXTRA_STATE: &str = "extra_state";
/// `version = N` in the struct's `#[module(...)]`: the state-dict layout's version.
pub const VERSION: &str = "version";
/// `migrate` in the struct's `#[module(...)]`: the type migrates older layouts (`MigrateState`).
pub const MIGRATE: &str = "migrate";

/// Built-in attributes, which are never a misspelling of ours however close they are.
pub const BUILTIN: [&str; 10] =
    ["doc", "cfg", "cfg_attr", "allow", "warn", "deny", "expect", "forbid", "deprecated", "must_use"];

#[cfg(test)]
mod tests {
    use super::*;

    /// The idents listed in `attributes(...)` of `#[proc_macro_derive(Module, ...)]` in
    /// `lib.rs` (the `ModuleIo` derive's `io` is its own).
    fn declared_helper_attributes() -> Vec<String> {
        let lib: syn::File = syn::parse_str(include_str!("lib.rs")).expect("lib.rs parses");
        let mut declared = Vec::new();
        for item in &lib.items {
            let syn::Item::Fn(function) = item else { continue };
            for attr in function.attrs.iter().filter(|a| a.path().is_ident("proc_macro_derive")) {
                let mut module = false;
                attr.parse_nested_meta(|meta| {
                    if meta.path.is_ident("Module") {
                        module = true;
                    } else if meta.path.is_ident("attributes") {
                        meta.parse_nested_meta(|helper| {
                            if module {
                                declared.push(helper.path.get_ident().expect("a plain name").to_string());
                            }
                            Ok(())
                        })?;
                    }
                    Ok(())
                })
                .expect("`#[proc_macro_derive(Module, attributes(...))]` parses");
            }
        }
        declared
    }

    #[test]
    fn the_derive_declares_exactly_the_field_kinds() {
        assert_eq!(declared_helper_attributes(), FIELD_KINDS);
    }
}
