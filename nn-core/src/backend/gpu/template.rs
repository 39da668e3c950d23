//! The template step that turns the `.wgsl` files under `gpu/wgsl/` into kernel sources.
//!
//! # Syntax
//! - **Kernels.** A file holds one kernel family. A line `//# name` opens the kernel (or
//!   shared snippet) `name`, which runs to the next such line or the end of the file; the
//!   marker lines belong to no kernel, and the text before the first one is the file's
//!   own comment (it may mention placeholders: it is never filled).
//! - **Placeholders.** `{{NAME}}`, `NAME` made of ASCII letters, digits and `_`, is
//!   replaced by the value supplied for `NAME`: a type (`{{T}}` is `f32` or `f64`), a
//!   constant, a WGSL expression or declarations built on the Rust side, or a shared
//!   snippet (`{{PRELUDE}}` is the `prelude` kernel of `prelude.wgsl`). Values are
//!   inserted as they are, never scanned for placeholders themselves: a snippet with
//!   placeholders of its own is filled first. `{{` is never WGSL, so any other `{{` is an
//!   error.
//!
//! Filling is strict both ways: a placeholder without a value, a value without a
//! placeholder, a name supplied twice or a malformed `{{` panics naming the file, the
//! kernel and the name. These are bugs in this backend (templates and their callers ship
//! together), never a user's error.
//!
//! Everything that changes the text (a dtype, an expression) is a placeholder, so two
//! kernels compile to two pipelines exactly when their sources differ (the pipeline cache
//! in [`super::context`] is keyed by source).

use std::sync::OnceLock;

/// A `.wgsl` file of kernels, included into the binary.
pub(crate) struct Family {
    file: &'static str,
    text: &'static str,
    kernels: OnceLock<Vec<(&'static str, &'static str)>>,
}

impl Family {
    /// The file `file` (its name, for panics) holding `text`.
    pub(crate) const fn new(file: &'static str, text: &'static str) -> Family {
        Family { file, text, kernels: OnceLock::new() }
    }

    /// The text of the kernel or snippet `name`, unfilled.
    ///
    /// # Panics
    /// When the file has no kernel `name`, or names one twice.
    pub(crate) fn kernel(&self, name: &str) -> &'static str {
        let kernels = self.kernels.get_or_init(|| split(self.file, self.text));
        kernels
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("gpu template `{}` has no kernel `{name}` (no line `//# {name}`)", self.file))
            .1
    }

    /// The kernel `name` with its placeholders filled from `values` (see [`substitute`]).
    pub(crate) fn render(&self, name: &str, values: &[(&str, &str)]) -> String {
        substitute((self.file, name), self.kernel(name), values)
    }
}

/// The kernels of a file: `(name, text)` per `//# name` line.
fn split(file: &str, text: &'static str) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    let mut open: Option<(&'static str, usize)> = None;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        if let Some(name) = line.strip_prefix("//#") {
            if let Some((n, start)) = open {
                out.push((n, &text[start..pos]));
            }
            let name = name.trim();
            assert!(
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                "gpu template `{file}`: `//#` must be followed by a kernel name, found `{}`",
                line.trim_end()
            );
            assert!(out.iter().all(|(n, _)| *n != name), "gpu template `{file}`: kernel `{name}` is defined twice");
            open = Some((name, pos + line.len()));
        }
        pos += line.len();
    }
    if let Some((n, start)) = open {
        out.push((n, &text[start..]));
    }
    out
}

/// `template` with each `{{NAME}}` replaced by the value of `NAME` in `values`.
/// `(file, kernel)` name the template in panic messages.
///
/// # Panics
/// When a placeholder has no value, a value has no placeholder, a name is supplied twice,
/// or a `{{` does not open a well-formed placeholder.
pub(crate) fn substitute((file, kernel): (&str, &str), template: &str, values: &[(&str, &str)]) -> String {
    let whose = || format!("gpu template `{file}`, kernel `{kernel}`");
    for (i, (name, _)) in values.iter().enumerate() {
        assert!(values[..i].iter().all(|(n, _)| n != name), "{}: value `{name}` is supplied twice", whose());
    }
    let mut used = vec![false; values.len()];
    let mut out = String::with_capacity(template.len() + values.iter().map(|(_, v)| v.len()).sum::<usize>());
    let mut rest = template;
    while let Some(at) = rest.find("{{") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end =
            after.find("}}").filter(|&e| e > 0 && after[..e].bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        let Some(end) = end else {
            let snippet: String = rest[at..].chars().take(24).collect();
            panic!("{}: `{{{{` opens no placeholder `{{{{NAME}}}}` at `{snippet}`", whose());
        };
        let name = &after[..end];
        let Some(k) = values.iter().position(|(n, _)| *n == name) else {
            panic!("{}: placeholder `{{{{{name}}}}}` has no value", whose());
        };
        used[k] = true;
        out.push_str(values[k].1);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    if let Some(k) = used.iter().position(|u| !u) {
        panic!("{}: value `{}` is supplied but the template has no `{{{{{}}}}}`", whose(), values[k].0, values[k].0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const WHO: (&str, &str) = ("test.wgsl", "k");

    #[test]
    fn fills_every_placeholder_and_keeps_the_rest() {
        let t = "var<workgroup> S: array<{{T}}, 256>;\n{{PRELUDE}}fn f() -> {{T}} { return {{T}}(0.0); }\n";
        let out = substitute(WHO, t, &[("T", "f64"), ("PRELUDE", "// prelude\n")]);
        assert_eq!(out, "var<workgroup> S: array<f64, 256>;\n// prelude\nfn f() -> f64 { return f64(0.0); }\n");
    }

    #[test]
    fn values_are_not_rescanned() {
        assert_eq!(substitute(WHO, "a {{X}} b", &[("X", "{{Y}}")]), "a {{Y}} b");
    }

    #[test]
    fn a_template_without_placeholders_is_returned_as_is() {
        assert_eq!(substitute(WHO, "fn f() { if (true) { } }", &[]), "fn f() { if (true) { } }");
    }

    #[test]
    #[should_panic(expected = "gpu template `test.wgsl`, kernel `k`: placeholder `{{BODY}}` has no value")]
    fn an_unfilled_placeholder_panics_with_its_name() {
        substitute(WHO, "Y[i] = {{BODY}};", &[]);
    }

    #[test]
    #[should_panic(
        expected = "gpu template `test.wgsl`, kernel `k`: value `T` is supplied but the template has no `{{T}}`"
    )]
    fn a_value_without_a_placeholder_panics_with_its_name() {
        substitute(WHO, "Y[i] = {{BODY}};", &[("BODY", "x"), ("T", "f32")]);
    }

    #[test]
    #[should_panic(expected = "value `T` is supplied twice")]
    fn a_name_supplied_twice_panics() {
        substitute(WHO, "{{T}}", &[("T", "f32"), ("T", "f64")]);
    }

    #[test]
    #[should_panic(expected = "`{{` opens no placeholder `{{NAME}}` at `{{ T }}`")]
    fn a_malformed_placeholder_panics() {
        substitute(WHO, "a {{ T }}", &[("T", "f32")]);
    }

    #[test]
    #[should_panic(expected = "opens no placeholder")]
    fn an_unclosed_placeholder_panics() {
        substitute(WHO, "a {{T", &[("T", "f32")]);
    }

    const FILE: &str =
        "// The family's comment: {{T}} is the type.\n//# first\nfn a() -> {{T}} {}\n//# second\nfn b() {}\n";

    #[test]
    fn a_family_splits_at_its_kernel_markers() {
        let f = Family::new("two.wgsl", FILE);
        assert_eq!(f.kernel("first"), "fn a() -> {{T}} {}\n");
        assert_eq!(f.kernel("second"), "fn b() {}\n");
        assert_eq!(f.render("first", &[("T", "f32")]), "fn a() -> f32 {}\n");
        assert_eq!(f.render("second", &[]), "fn b() {}\n");
    }

    #[test]
    #[should_panic(expected = "gpu template `two.wgsl` has no kernel `third` (no line `//# third`)")]
    fn a_missing_kernel_panics_with_its_name() {
        Family::new("two.wgsl", FILE).kernel("third");
    }

    #[test]
    #[should_panic(expected = "gpu template `dup.wgsl`: kernel `a` is defined twice")]
    fn a_kernel_defined_twice_panics() {
        Family::new("dup.wgsl", "//# a\n//# a\n").kernel("a");
    }

    /// Every file parses, and every placeholder in it is well formed (the callers' own
    /// tests run the kernels with their values).
    #[test]
    fn every_family_file_parses() {
        for f in super::super::kernels::FAMILIES {
            let kernels = f.kernels.get_or_init(|| split(f.file, f.text));
            assert!(!kernels.is_empty(), "{} has no kernel", f.file);
            for (name, text) in kernels {
                let names: Vec<&str> = text.split("{{").skip(1).map(|t| t.split("}}").next().unwrap_or(t)).collect();
                let mut values: Vec<(&str, &str)> = Vec::new();
                for n in names {
                    if values.iter().all(|(m, _)| *m != n) {
                        values.push((n, ""));
                    }
                }
                substitute((f.file, name), text, &values);
            }
        }
    }
}
