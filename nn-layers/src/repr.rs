//! Printing values the way Python's `repr` does, so layer printouts match PyTorch's.

/// Python's `repr(float)`: shortest round-trip digits, `1.0` for integral values,
/// exponent form with a two-digit exponent outside `[1e-4, 1e16)` (`1e-05`).
pub(crate) fn py_float(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let a = v.abs();
    if v != 0.0 && !(1e-4..1e16).contains(&a) {
        let s = format!("{v:e}");
        let (mant, exp) = s.split_once('e').expect("exponent form");
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        return format!("{mant}e{sign}{digits:0>2}");
    }
    let s = format!("{v}");
    if s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

/// Python's `repr(bool)`.
pub(crate) fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// A tuple as Python prints it: `(3,)`, `(2, 2)`.
pub(crate) fn py_tuple(v: &[usize]) -> String {
    match v {
        [one] => format!("({one},)"),
        _ => format!("({})", v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_python() {
        assert_eq!(py_float(1e-5), "1e-05");
        assert_eq!(py_float(0.1), "0.1");
        assert_eq!(py_float(1.0), "1.0");
        assert_eq!(py_float(0.0001), "0.0001");
        assert_eq!(py_float(1e20), "1e+20");
        assert_eq!(py_tuple(&[3]), "(3,)");
        assert_eq!(py_tuple(&[2, 2]), "(2, 2)");
    }
}
