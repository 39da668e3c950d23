//! PyTorch-style printout of a module tree.

use std::fmt;

use super::{Item, Module};

/// Writes `module` as PyTorch's `repr` does:
///
/// ```text
/// Mlp(
///   (fc1): Linear(in_features=784, out_features=256, bias=True)
///   (act): ReLU()
/// )
/// ```
pub fn fmt_module(module: &dyn Module, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.write_str(&repr(module))
}

fn repr(module: &dyn Module) -> String {
    if module.type_name() == "ModuleList" {
        return list_repr(module);
    }
    let extra = module.extra_repr();
    let extra_lines: Vec<&str> = if extra.is_empty() { vec![] } else { extra.split('\n').collect() };
    let mut child_lines = Vec::new();
    module.visit(&mut |name, item| {
        if let Item::Module(m) = item {
            child_lines.push(format!("({name}): {}", indent(&repr(m), 2)));
        }
    });
    let mut out = format!("{}(", module.type_name());
    if extra_lines.len() == 1 && child_lines.is_empty() {
        out.push_str(extra_lines[0]);
    } else if !extra_lines.is_empty() || !child_lines.is_empty() {
        let lines: Vec<&str> = extra_lines.iter().copied().chain(child_lines.iter().map(String::as_str)).collect();
        out.push_str("\n  ");
        out.push_str(&lines.join("\n  "));
        out.push('\n');
    }
    out.push(')');
    out
}

/// PyTorch's `ModuleList.__repr__`: runs of identical children print once, as
/// `(0-3): 4 x Block(...)`.
fn list_repr(module: &dyn Module) -> String {
    let mut reprs = Vec::new();
    module.visit(&mut |_, item| {
        if let Item::Module(m) = item {
            reprs.push(repr(m));
        }
    });
    if reprs.is_empty() {
        return "ModuleList()".into();
    }
    let mut runs: Vec<(usize, usize, &str)> = Vec::new();
    for (i, r) in reprs.iter().enumerate() {
        match runs.last_mut() {
            Some(last) if last.2 == r => last.1 = i,
            _ => runs.push((i, i, r)),
        }
    }
    let lines: Vec<String> = runs
        .iter()
        .map(|&(a, b, r)| {
            let line = if a == b { format!("({a}): {r}") } else { format!("({a}-{b}): {} x {r}", b - a + 1) };
            indent(&line, 2)
        })
        .collect();
    format!("ModuleList(\n  {}\n)", lines.join("\n  "))
}

/// Indents every line after the first by `n` spaces (PyTorch's `_addindent`).
fn indent(s: &str, n: usize) -> String {
    let mut lines = s.split('\n');
    let first = lines.next().unwrap_or("");
    let pad = " ".repeat(n);
    std::iter::once(first.to_string()).chain(lines.map(|l| format!("{pad}{l}"))).collect::<Vec<_>>().join("\n")
}
