//! Each OpInfo entry as nn writes it: the call's arguments read in PyTorch's order and
//! names, passed to nn's form of the op. An argument nn's form has no place for is left
//! unread (the case is then unsupported, naming it) or refused here with the reason.

use nn_core::functional::{self as F, ClassLossConfig, Reduction};
use nn_core::ops::{Conv2dConfig, ConvTranspose1dConfig, ConvTranspose2dConfig, GeluApproximate};
use nn_core::ops::{InterpolateMode, InterpolateSize, PadMode, Pool2dConfig};
use nn_core::Tensor;

use super::call::{float, int, ints, sizes, unsupported, Call, A, R, UNREPRESENTABLE};

/// Runs the entry `op` (PyTorch's `name|variant`) on `c`; its outputs flattened as the
/// fixture lists them.
pub(crate) fn run(op: &str, c: &Call) -> R<Vec<Tensor>> {
    if let Some(y) = unary(op, c)? {
        return Ok(vec![y]);
    }
    if let Some(y) = binary(op, c)? {
        return Ok(vec![y]);
    }
    if let Some(ys) = reduction(op, c)? {
        return Ok(ys);
    }
    if let Some(ys) = shape(op, c)? {
        return Ok(ys);
    }
    if let Some(ys) = nn_functional(op, c)? {
        return Ok(ys);
    }
    unsupported!("no nn form of `{op}` in the runner")
}

fn unary(op: &str, c: &Call) -> R<Option<Tensor>> {
    let f: fn(&Tensor) -> Tensor = match op {
        "abs" => Tensor::abs,
        "neg" => Tensor::neg,
        "exp" => Tensor::exp,
        "log" => Tensor::log,
        "sqrt" => Tensor::sqrt,
        "sin" => Tensor::sin,
        "cos" => Tensor::cos,
        "rsqrt" => Tensor::rsqrt,
        "reciprocal" => Tensor::recip,
        "square" => Tensor::square,
        "sigmoid" => Tensor::sigmoid,
        "tanh" => Tensor::tanh,
        "erf" => Tensor::erf,
        "erfinv" => Tensor::erfinv,
        "logical_not" => Tensor::logical_not,
        "isnan" => Tensor::isnan,
        "isinf" => Tensor::isinf,
        "isfinite" => Tensor::isfinite,
        "nn.functional.relu" => Tensor::relu,
        "nn.functional.silu" => Tensor::silu,
        "contiguous" => Tensor::contiguous,
        "clone" => Tensor::copy,
        "t" => Tensor::t,
        "nn.functional.gelu" => {
            let approximate = match c.str_or(99, "approximate", "none")?.as_str() {
                "none" => GeluApproximate::None,
                "tanh" => GeluApproximate::Tanh,
                other => unsupported!("{UNREPRESENTABLE}gelu approximate={other:?}"),
            };
            return Ok(Some(c.x()?.gelu_with(approximate)));
        }
        "nn.functional.leaky_relu" => {
            let slope = c.float_or(0, "negative_slope", 0.01)?;
            return Ok(Some(c.x()?.leaky_relu(slope)));
        }
        "nn.functional.softplus" => {
            let (beta, threshold) = (c.float_or(0, "beta", 1.0)?, c.float_or(1, "threshold", 20.0)?);
            return Ok(Some(c.x()?.softplus(beta, threshold)));
        }
        _ => return Ok(None),
    };
    if c.bool_or(99, "inplace", false)? {
        unsupported!("inplace=True");
    }
    Ok(Some(f(&c.x()?)))
}

/// `x op other`, `other` a tensor or a Python number (a wrapped number).
fn with_other(
    c: &Call,
    other: &A,
    t: fn(&Tensor, &Tensor) -> Tensor,
    f: fn(&Tensor, f64) -> Tensor,
    i: fn(&Tensor, i64) -> Tensor,
) -> R<Tensor> {
    let x = c.x()?;
    Ok(match other {
        A::T(_) => t(&x, &c.t(other)?),
        A::Int(v) => i(&x, *v),
        A::Float(v) => f(&x, *v),
        other => unsupported!("`other` = {other:?}"),
    })
}

fn binary(op: &str, c: &Call) -> R<Option<Tensor>> {
    type Ops = (fn(&Tensor, &Tensor) -> Tensor, fn(&Tensor, f64) -> Tensor, fn(&Tensor, i64) -> Tensor);
    let ops: Ops = match op {
        "add" => (|a, b| a + b, |a, b| a + b, |a, b| a + b),
        "sub" => (|a, b| a - b, |a, b| a - b, |a, b| a - b),
        "mul" => (|a, b| a * b, |a, b| a * b, |a, b| a * b),
        "div|no_rounding_mode" => (|a, b| a / b, |a, b| a / b, |a, b| a / b),
        "pow" => (Tensor::pow, Tensor::powf, |a, b| a.powf(b as f64)),
        "maximum" | "max|binary" => (Tensor::maximum, |_, _| unreachable!(), |_, _| unreachable!()),
        "minimum" | "min|binary" => (Tensor::minimum, |_, _| unreachable!(), |_, _| unreachable!()),
        "eq" => (Tensor::eq, |a, b| a.eq_scalar(b), |a, b| a.eq_scalar(b)),
        "ne" => (Tensor::ne, |a, b| a.ne_scalar(b), |a, b| a.ne_scalar(b)),
        "lt" => (Tensor::lt, |a, b| a.lt_scalar(b), |a, b| a.lt_scalar(b)),
        "le" => (Tensor::le, |a, b| a.le_scalar(b), |a, b| a.le_scalar(b)),
        "gt" => (Tensor::gt, |a, b| a.gt_scalar(b), |a, b| a.gt_scalar(b)),
        "ge" => (Tensor::ge, |a, b| a.ge_scalar(b), |a, b| a.ge_scalar(b)),
        "where" => {
            let (cond, other) = (c.tensor_arg(0, "condition")?, c.tensor_arg(1, "other")?);
            return Ok(Some(Tensor::where_cond(&cond, &c.x()?, &other)));
        }
        "masked_fill" => {
            let mask = c.tensor_arg(0, "mask")?;
            let value = match c.get(1, "value") {
                Some(v @ A::T(_)) => return Ok(Some(c.x()?.masked_fill_tensor(&mask, &c.t(v)?))),
                Some(v) => float(v)?,
                None => unsupported!("no `value`"),
            };
            return Ok(Some(c.x()?.masked_fill(&mask, value)));
        }
        "clamp" | "clamp_min" | "clamp_max" => return clamp(op, c).map(Some),
        _ => return Ok(None),
    };
    let Some(other) = c.get(0, "other") else { unsupported!("no `other`") };
    if matches!(op, "maximum" | "max|binary" | "minimum" | "min|binary") && !matches!(other, A::T(_)) {
        unsupported!("a number as `other`");
    }
    let alpha = c.opt(99, "alpha").map(float).transpose()?;
    let other = other.clone();
    match alpha {
        Some(a) if op == "add" || op == "sub" => {
            let b = match &other {
                A::T(_) => &c.t(&other)? * a,
                v => Tensor::full_dtype(&[], float(v)? * a, c.x()?.dtype()),
            };
            Ok(Some(if op == "add" { &c.x()? + &b } else { &c.x()? - &b }))
        }
        Some(_) => unsupported!("alpha"),
        None => with_other(c, &other, ops.0, ops.1, ops.2).map(Some),
    }
}

fn clamp(op: &str, c: &Call) -> R<Tensor> {
    let x = c.x()?;
    let (lo, hi) = match op {
        "clamp" => (c.get(0, "min").cloned(), c.get(1, "max").cloned()),
        "clamp_min" => (c.get(0, "min").cloned(), None),
        _ => (None, c.get(0, "max").cloned()),
    };
    let is_t = |a: &Option<A>| matches!(a, Some(A::T(_)));
    if is_t(&lo) || is_t(&hi) {
        let lo = lo.filter(|a| !matches!(a, A::None)).map(|a| c.t(&a)).transpose()?;
        let hi = hi.filter(|a| !matches!(a, A::None)).map(|a| c.t(&a)).transpose()?;
        return Ok(x.clamp_tensor(lo.as_ref(), hi.as_ref()));
    }
    let bound = |a: Option<A>, d: f64| {
        a.filter(|a| !matches!(a, A::None)).map(|a| float(&a)).transpose().map(|v| v.unwrap_or(d))
    };
    Ok(x.clamp(bound(lo, f64::NEG_INFINITY)?, bound(hi, f64::INFINITY)?))
}

/// The input, converted to the `dtype=` argument where there is one (PyTorch casts the
/// input before the op, as `x.to_dtype(d)` does).
fn cast_input(c: &Call) -> R<Tensor> {
    let x = c.x()?;
    Ok(match c.opt(99, "dtype") {
        None => x,
        Some(A::DType(d)) => match d.as_str() {
            "float64" => x.to_dtype(nn_core::DType::F64),
            "float32" => x.to_dtype(nn_core::DType::F32),
            "int64" => x.to_dtype(nn_core::DType::I64),
            other => unsupported!("dtype={other}"),
        },
        Some(other) => unsupported!("dtype={}", other.describe()),
    })
}

/// `dim` as PyTorch passes it to a reduction: absent (every dim), one, or several.
fn dims(c: &Call, i: usize) -> R<Option<Vec<i64>>> {
    c.opt_ints(i, "dim")
}

fn reduction(op: &str, c: &Call) -> R<Option<Vec<Tensor>>> {
    let keep = |i| c.bool_or(i, "keepdim", false);
    let y = match op {
        "sum" | "mean" => {
            let (x, d, k) = (cast_input(c)?, dims(c, 0)?, keep(1)?);
            match (op, d) {
                ("sum", None) => x.sum(),
                (_, None) => x.mean(),
                ("sum", Some(d)) => x.sum_dims(&d, k),
                (_, Some(d)) => x.mean_dims(&d, k),
            }
        }
        "max|reduction_no_dim" => c.x()?.max(),
        "min|reduction_no_dim" => c.x()?.min(),
        "max|reduction_with_dim" | "min|reduction_with_dim" => {
            let (x, d, k) =
                (c.x()?, int(c.get(0, "dim").ok_or_else(|| super::call::Unsupported("no dim".into()))?)?, keep(1)?);
            let (v, i) = if op.starts_with("max") { x.max_dim(d, k) } else { x.min_dim(d, k) };
            return Ok(Some(vec![v, i]));
        }
        "argmax" | "argmin" => {
            let Some(d) = c.opt_int(0, "dim")? else {
                if keep(1)? {
                    unsupported!("argmax/argmin without `dim` with keepdim=True");
                }
                return Ok(Some(vec![if op == "argmax" { c.x()?.argmax_flat() } else { c.x()?.argmin_flat() }]));
            };
            let (x, k) = (c.x()?, keep(1)?);
            if op == "argmax" {
                x.argmax(d, k)
            } else {
                x.argmin(d, k)
            }
        }
        "logsumexp" => {
            let (d, k) = (c.opt_ints(0, "dim")?.unwrap_or_default(), keep(1)?);
            c.x()?.logsumexp_dims(&d, k)
        }
        "amax" | "amin" => {
            let (x, d, k) = (c.x()?, dims(c, 0)?.unwrap_or_default(), keep(1)?);
            if op == "amax" {
                x.amax(&d, k)
            } else {
                x.amin(&d, k)
            }
        }
        "var" | "std" | "var|unbiased" | "std|unbiased" => {
            let x = c.x()?;
            // PyTorch's legacy `unbiased` (positional in `var(x, True)`) is a correction of 1 or 0.
            let unbiased = match c.args_len() {
                1 if matches!(c.get(0, "unbiased"), Some(A::Bool(_))) => Some(c.bool_or(0, "unbiased", true)?),
                _ => c.opt(99, "unbiased").map(|a| matches!(a, A::Bool(true))),
            };
            let d = match unbiased.is_some() && c.args_len() == 1 {
                true => (0..x.rank() as i64).collect(),
                false => dims(c, 0)?.unwrap_or_else(|| (0..x.rank() as i64).collect()),
            };
            let correction = match (c.opt(99, "correction"), unbiased) {
                (None, None) => 1.0,
                (None, Some(u)) => f64::from(u8::from(u)),
                (Some(a), _) => float(a)?,
            };
            match (op.starts_with("var"), correction) {
                (true, c) if c >= 0.0 && c.fract() == 0.0 => x.var_dims(&d, c as usize, keep(99)?),
                (false, c) if c >= 0.0 && c.fract() == 0.0 => x.std_dims(&d, c as usize, keep(99)?),
                (true, c) => x.var_correction(&d, c, keep(99)?),
                (false, c) => x.std_correction(&d, c, keep(99)?),
            }
        }
        "all" | "any" => {
            let x = c.x()?;
            match dims(c, 0)? {
                None => {
                    if op == "all" {
                        x.all()
                    } else {
                        x.any()
                    }
                }
                Some(d) if d.len() == 1 => {
                    if op == "all" {
                        x.all_dim(d[0], keep(1)?)
                    } else {
                        x.any_dim(d[0], keep(1)?)
                    }
                }
                Some(d) => {
                    if op == "all" {
                        x.all_dims(&d, keep(1)?)
                    } else {
                        x.any_dims(&d, keep(1)?)
                    }
                }
            }
        }
        "cumsum" | "cumprod" | "softmax" | "log_softmax" => {
            let (x, d) = (cast_input(c)?, c.int_or(0, "dim", i64::MIN)?);
            match op {
                "cumsum" => x.cumsum(d),
                "cumprod" => x.cumprod(d),
                "softmax" => x.softmax(d),
                _ => x.log_softmax(d),
            }
        }
        "sort" | "argsort" => {
            let (x, d, desc) = (c.x()?, c.int_or(0, "dim", -1)?, c.bool_or(1, "descending", false)?);
            // nn's sort is stable: a stable order is one of the orders an unstable sort may give.
            let _stable = c.bool_or(99, "stable", false)?;
            let (v, i) = x.sort(d, desc);
            return Ok(Some(if op == "sort" { vec![v, i] } else { vec![i] }));
        }
        "topk" => {
            let k = usize::try_from(c.int_or(0, "k", 0)?).map_err(|_| super::call::Unsupported("negative k".into()))?;
            let (d, largest, sorted) =
                (c.int_or(1, "dim", -1)?, c.bool_or(2, "largest", true)?, c.bool_or(3, "sorted", true)?);
            let (v, i) = c.x()?.topk(k, d, largest, sorted);
            return Ok(Some(vec![v, i]));
        }
        _ => return Ok(None),
    };
    Ok(Some(vec![y]))
}

fn shape(op: &str, c: &Call) -> R<Option<Vec<Tensor>>> {
    let y = match op {
        "reshape" | "view" => {
            let s = c.varargs_ints(0, "shape")?;
            if op == "view" {
                c.x()?.view(s.as_slice())
            } else {
                c.x()?.reshape(s.as_slice())
            }
        }
        "permute" => {
            let x = c.x()?;
            let p: Vec<usize> = c
                .varargs_ints(0, "dims")?
                .iter()
                .map(|&d| if d < 0 { (d + x.rank() as i64) as usize } else { d as usize })
                .collect();
            x.permute(&p)
        }
        "transpose" => {
            c.x()?.transpose(int(c.get(0, "dim0").unwrap_or(&A::None))?, int(c.get(1, "dim1").unwrap_or(&A::None))?)
        }
        "squeeze" => match c.opt(0, "dim") {
            None => c.x()?.squeeze(),
            Some(A::Int(d)) => c.x()?.squeeze_dim(*d),
            Some(other) => unsupported!("squeeze over {other:?}"),
        },
        "unsqueeze" => c.x()?.unsqueeze(c.int_or(0, "dim", 0)?),
        "flatten" => c.x()?.flatten(c.int_or(0, "start_dim", 0)?, c.int_or(1, "end_dim", -1)?),
        "narrow" => {
            let d = c.int_or(0, "dim", 0)?;
            let start = match c.get(1, "start") {
                Some(A::Int(s)) => *s,
                // A 0-d integer tensor start: PyTorch reads its value (`start.item()`).
                Some(a @ A::T(_)) => {
                    let t = c.t(a)?;
                    if t.rank() != 0 || t.dtype() != nn_core::DType::I64 {
                        unsupported!("narrow start of shape {:?} and dtype {}", t.shape(), t.dtype());
                    }
                    t.to_vec_i64()[0]
                }
                Some(other) => unsupported!("narrow start {}", other.describe()),
                None => unsupported!("no start"),
            };
            let len = sizes(&[c.int_or(2, "length", 0)?])?[0];
            c.x()?.narrow(d, start, len)
        }
        "cat" | "stack" => {
            let xs = c.xs()?;
            let refs: Vec<&Tensor> = xs.iter().collect();
            let d = c.int_or(0, "dim", 0)?;
            if op == "cat" {
                Tensor::cat(&refs, d)
            } else {
                Tensor::stack(&refs, d)
            }
        }
        "flip" => c.x()?.flip(&c.varargs_ints(0, "dims")?),
        "roll" => {
            let shifts = ints(c.get(0, "shifts").unwrap_or(&A::None))?;
            // No `dims`: nn's `roll` with an empty list rolls the flattened tensor, as PyTorch.
            c.x()?.roll(&shifts, &c.opt_ints(1, "dims")?.unwrap_or_default())
        }
        "expand" => c.x()?.expand(c.varargs_ints(0, "size")?.as_slice()),
        "expand_as" => c.x()?.expand_as(&c.tensor_arg(0, "other")?),
        "repeat" => c.x()?.repeat(&sizes(&c.varargs_ints(0, "repeats")?)?),
        "repeat_interleave" => {
            // Without `dim` PyTorch repeats the flattened tensor.
            let (x, d) = match c.opt_int(1, "dim")? {
                Some(d) => (c.x()?, d),
                None => (c.x()?.flatten(0, -1), 0),
            };
            if c.opt(99, "output_size").is_some() {
                unsupported!("output_size=");
            }
            match c.get(0, "repeats") {
                Some(A::Int(r)) => x.repeat_interleave(sizes(&[*r])?[0], d),
                Some(a @ A::T(_)) => x.repeat_interleave_tensor(&c.t(a)?, d),
                other => unsupported!("repeats {other:?}"),
            }
        }
        "tril" => c.x()?.tril(c.int_or(0, "diagonal", 0)?),
        "triu" => c.x()?.triu(c.int_or(0, "diagonal", 0)?),
        "chunk" => {
            let n = sizes(&[c.int_or(0, "chunks", 0)?])?[0];
            return Ok(Some(c.x()?.chunk(n, c.int_or(1, "dim", 0)?)));
        }
        "split" => match c.get(0, "split_size_or_sections") {
            Some(A::Int(n)) => return Ok(Some(c.x()?.split(sizes(&[*n])?[0], c.int_or(1, "dim", 0)?))),
            other => unsupported!("split by {other:?}"),
        },
        "index_select" => c.x()?.index_select(c.int_or(0, "dim", 0)?, &c.tensor_arg(1, "index")?),
        "gather" => c.x()?.gather(c.int_or(0, "dim", 0)?, &c.tensor_arg(1, "index")?),
        "scatter_add" => {
            c.x()?.scatter_add(c.int_or(0, "dim", 0)?, &c.tensor_arg(1, "index")?, &c.tensor_arg(2, "src")?)
        }
        "index_add" => {
            let (d, i, s) = (c.int_or(0, "dim", 0)?, c.tensor_arg(1, "index")?, c.tensor_arg(2, "source")?);
            match c.float_or(99, "alpha", 1.0)? {
                1.0 => c.x()?.index_add(d, &i, &s),
                a => c.x()?.index_add(d, &i, &(&s * a)),
            }
        }
        "mm" | "bmm" | "matmul" => c.x()?.matmul(&c.tensor_arg(0, "mat2")?),
        "outer" => c.x()?.outer(&c.tensor_arg(0, "vec2")?),
        "addmm" => {
            let (m1, m2) = (c.tensor_arg(0, "mat1")?, c.tensor_arg(1, "mat2")?);
            c.x()?.addmm_with(&m1, &m2, c.float_or(99, "beta", 1.0)?, c.float_or(99, "alpha", 1.0)?)
        }
        "einsum" => {
            let Some(A::Str(eq)) = c.get(0, "equation") else { unsupported!("einsum without an equation") };
            let xs = c.xs()?;
            F::einsum(eq, &xs.iter().collect::<Vec<_>>())
        }
        _ => return Ok(None),
    };
    Ok(Some(vec![y]))
}

/// An `int or tuple` argument as a pair.
fn pair(c: &Call, i: usize, name: &str, default: (usize, usize)) -> R<(usize, usize)> {
    Ok(match c.opt_ints(i, name)? {
        None => default,
        Some(v) => match sizes(&v)?.as_slice() {
            [] => default,
            [a] => (*a, *a),
            [a, b] => (*a, *b),
            other => unsupported!("`{name}` of {} values", other.len()),
        },
    })
}

fn one(c: &Call, i: usize, name: &str, default: usize) -> R<usize> {
    Ok(match c.opt_ints(i, name)? {
        None => default,
        Some(v) => match sizes(&v)?.as_slice() {
            [a] => *a,
            other => unsupported!("`{name}` of {} values", other.len()),
        },
    })
}

fn reduction_arg(c: &Call, i: usize) -> R<Reduction> {
    Ok(match c.str_or(i, "reduction", "mean")?.as_str() {
        "mean" => Reduction::Mean,
        "sum" => Reduction::Sum,
        "none" => Reduction::None,
        other => unsupported!("{UNREPRESENTABLE}reduction={other:?}"),
    })
}

fn padding_numbers(c: &Call, i: usize) -> R<()> {
    if matches!(c.get(i, "padding"), Some(A::Str(_))) {
        unsupported!("padding given as a string (\"same\"/\"valid\")");
    }
    Ok(())
}

fn nn_functional(op: &str, c: &Call) -> R<Option<Vec<Tensor>>> {
    let Some(name) = op.strip_prefix("nn.functional.") else { return Ok(None) };
    let (name, variant) = name.split_once('|').unwrap_or((name, ""));
    let x = || c.x();
    Ok(Some(vec![match name {
        "linear" => F::linear(&x()?, &c.tensor_arg(0, "weight")?, c.opt_tensor(1, "bias")?.as_ref()),
        "bilinear" => F::bilinear(
            &x()?,
            &c.tensor_arg(0, "input2")?,
            &c.tensor_arg(1, "weight")?,
            c.opt_tensor(2, "bias")?.as_ref(),
        ),
        "layer_norm" => {
            let shape = sizes(&c.opt_ints(0, "normalized_shape")?.unwrap_or_default())?;
            let (w, b) = (c.opt_tensor(1, "weight")?, c.opt_tensor(2, "bias")?);
            x()?.layer_norm(&shape, w.as_ref(), b.as_ref(), c.float_or(3, "eps", 1e-5)?)
        }
        "rms_norm" => {
            let shape = sizes(&c.opt_ints(0, "normalized_shape")?.unwrap_or_default())?;
            let w = c.opt_tensor(1, "weight")?;
            let eps = c.opt(2, "eps").map(float).transpose()?;
            x()?.rms_norm(&shape, w.as_ref(), eps)
        }
        "group_norm" => {
            let g = sizes(&[c.int_or(0, "num_groups", 0)?])?[0];
            let (w, b) = (c.opt_tensor(1, "weight")?, c.opt_tensor(2, "bias")?);
            F::group_norm(&x()?, g, w.as_ref(), b.as_ref(), c.float_or(3, "eps", 1e-5)?)
        }
        "batch_norm" => {
            let (m, v) = (c.opt_tensor(0, "running_mean")?, c.opt_tensor(1, "running_var")?);
            let (w, b) = (c.opt_tensor(2, "weight")?, c.opt_tensor(3, "bias")?);
            let training = c.bool_or(4, "training", false)?;
            let (momentum, eps) = (c.float_or(5, "momentum", 0.1)?, c.float_or(6, "eps", 1e-5)?);
            x()?.batch_norm(m.as_ref(), v.as_ref(), w.as_ref(), b.as_ref(), training, momentum, eps)
        }
        "conv1d" | "conv2d" if matches!(c.get(3, "padding"), Some(A::Str(_))) => {
            let (w, b) = (c.tensor_arg(0, "weight")?, c.opt_tensor(1, "bias")?);
            let groups = one(c, 5, "groups", 1)?;
            let Some(A::Str(mode)) = c.get(3, "padding").cloned() else { unreachable!() };
            match (mode.as_str(), name) {
                ("valid", "conv1d") => {
                    x()?.conv1d(&w, b.as_ref(), one(c, 2, "stride", 1)?, 0, one(c, 4, "dilation", 1)?, groups)
                }
                ("valid", _) => {
                    let config = Conv2dConfig {
                        stride: pair(c, 2, "stride", (1, 1))?,
                        padding: (0, 0),
                        dilation: pair(c, 4, "dilation", (1, 1))?,
                        groups,
                    };
                    F::conv2d(&x()?, &w, b.as_ref(), config)
                }
                ("same", _) if pair(c, 2, "stride", (1, 1))? != (1, 1) => {
                    unsupported!("{UNREPRESENTABLE}padding=\"same\" with a stride (PyTorch refuses it too)")
                }
                ("same", "conv1d") => x()?.conv1d_same(&w, b.as_ref(), one(c, 4, "dilation", 1)?, groups),
                ("same", _) => x()?.conv2d_same(&w, b.as_ref(), pair(c, 4, "dilation", (1, 1))?, groups),
                (other, _) => unsupported!("{UNREPRESENTABLE}padding={other:?}"),
            }
        }
        "conv1d" => {
            padding_numbers(c, 3)?;
            let (w, b) = (c.tensor_arg(0, "weight")?, c.opt_tensor(1, "bias")?);
            let (s, p, d) = (one(c, 2, "stride", 1)?, one(c, 3, "padding", 0)?, one(c, 4, "dilation", 1)?);
            x()?.conv1d(&w, b.as_ref(), s, p, d, one(c, 5, "groups", 1)?)
        }
        "conv2d" => {
            padding_numbers(c, 3)?;
            let (w, b) = (c.tensor_arg(0, "weight")?, c.opt_tensor(1, "bias")?);
            let config = Conv2dConfig {
                stride: pair(c, 2, "stride", (1, 1))?,
                padding: pair(c, 3, "padding", (0, 0))?,
                dilation: pair(c, 4, "dilation", (1, 1))?,
                groups: one(c, 5, "groups", 1)?,
            };
            F::conv2d(&x()?, &w, b.as_ref(), config)
        }
        "conv_transpose1d" => {
            let (w, b) = (c.tensor_arg(0, "weight")?, c.opt_tensor(1, "bias")?);
            let config = ConvTranspose1dConfig {
                stride: one(c, 2, "stride", 1)?,
                padding: one(c, 3, "padding", 0)?,
                output_padding: one(c, 4, "output_padding", 0)?,
                groups: one(c, 5, "groups", 1)?,
                dilation: one(c, 6, "dilation", 1)?,
            };
            x()?.conv_transpose1d(&w, b.as_ref(), config)
        }
        "conv_transpose2d" => {
            let (w, b) = (c.tensor_arg(0, "weight")?, c.opt_tensor(1, "bias")?);
            let config = ConvTranspose2dConfig {
                stride: pair(c, 2, "stride", (1, 1))?,
                padding: pair(c, 3, "padding", (0, 0))?,
                output_padding: pair(c, 4, "output_padding", (0, 0))?,
                groups: one(c, 5, "groups", 1)?,
                dilation: pair(c, 6, "dilation", (1, 1))?,
            };
            x()?.conv_transpose2d(&w, b.as_ref(), config)
        }
        "max_pool2d" | "avg_pool2d" => {
            let kernel = pair(c, 0, "kernel_size", (0, 0))?;
            let config = Pool2dConfig {
                kernel,
                stride: pair(c, 1, "stride", kernel)?,
                padding: pair(c, 2, "padding", (0, 0))?,
                dilation: if name == "max_pool2d" { pair(c, 3, "dilation", (1, 1))? } else { (1, 1) },
                ceil_mode: c.bool_or(if name == "max_pool2d" { 4 } else { 3 }, "ceil_mode", false)?,
            };
            if name == "avg_pool2d" {
                // With a divisor the padding's zeros are in the sum either way: count_include_pad
                // changes nothing (PyTorch's kernel reads it only to pick the divisor).
                let include_pad = c.bool_or(4, "count_include_pad", true)?;
                if let Some(d) = c.opt_int(5, "divisor_override")? {
                    let d = usize::try_from(d)
                        .map_err(|_| super::call::Unsupported(format!("{UNREPRESENTABLE}divisor {d}")))?;
                    return Ok(Some(vec![x()?.avg_pool2d_divisor(config, d)]));
                }
                return Ok(Some(vec![F::avg_pool2d(&x()?, config, include_pad)]));
            }
            if c.bool_or(5, "return_indices", false)? {
                let (v, i) = x()?.max_pool2d_with_indices(config);
                return Ok(Some(vec![v, i]));
            }
            F::max_pool2d(&x()?, config)
        }
        "adaptive_avg_pool2d" => {
            let Some(v) = c.opt(0, "output_size") else { unsupported!("no output_size") };
            // PyTorch's `None` in an output size keeps that dim's input size.
            let x = x()?;
            let v = match v {
                A::List(l) => {
                    let spatial = &x.shape()[x.rank().saturating_sub(2)..];
                    let keep = |(i, a): (usize, &A)| match a {
                        A::None => A::Int(spatial.get(i).copied().unwrap_or(0) as i64),
                        a => a.clone(),
                    };
                    A::List(l.iter().enumerate().map(keep).collect())
                }
                v => v.clone(),
            };
            let s = match sizes(&ints(&v)?)?.as_slice() {
                [a] => (*a, *a),
                [a, b] => (*a, *b),
                other => unsupported!("{UNREPRESENTABLE}an output size of {} values (nn takes a pair)", other.len()),
            };
            F::adaptive_avg_pool2d(&x, s)
        }
        "embedding" => {
            for k in ["padding_idx", "max_norm", "scale_grad_by_freq", "sparse"] {
                if c.opt(99, k).is_some_and(|a| !matches!(a, A::Bool(false))) {
                    unsupported!("{k}=");
                }
            }
            // OpInfo's entry takes the weight first: `embedding(weight, idx)`.
            F::embedding(&c.tensor_arg(0, "idx")?, &x()?)
        }
        "cross_entropy" | "nll_loss" => {
            let target = c.tensor_arg(0, "target")?;
            let weight = c.opt_tensor(1, "weight")?;
            let config = ClassLossConfig {
                reduction: reduction_arg(c, 99)?,
                ignore_index: c.int_or(99, "ignore_index", -100)?,
                label_smoothing: c.float_or(99, "label_smoothing", 0.0)?,
            };
            if name == "cross_entropy" {
                F::cross_entropy_weighted(&x()?, &target, weight.as_ref(), config)
            } else {
                F::nll_loss_weighted(&x()?, &target, weight.as_ref(), config)
            }
        }
        "mse_loss" => F::mse_loss(&x()?, &c.tensor_arg(0, "target")?, reduction_arg(c, 99)?),
        "l1_loss" => F::l1_loss(&x()?, &c.tensor_arg(0, "target")?, reduction_arg(c, 99)?),
        "binary_cross_entropy_with_logits" => {
            let (w, pw) = (c.opt_tensor(1, "weight")?, c.opt_tensor(99, "pos_weight")?);
            let t = c.tensor_arg(0, "target")?;
            F::binary_cross_entropy_with_logits_weighted(&x()?, &t, w.as_ref(), pw.as_ref(), reduction_arg(c, 99)?)
        }
        "pad" => {
            let pads = c.opt_ints(0, "pad")?.unwrap_or_default();
            let mode = match c.str_or(1, "mode", "constant")?.as_str() {
                "constant" => PadMode::Constant,
                "reflect" => PadMode::Reflect,
                "replicate" => PadMode::Replicate,
                "circular" => PadMode::Circular,
                other => unsupported!("{UNREPRESENTABLE}pad mode {other:?}"),
            };
            F::pad(&x()?, &pads, mode, c.float_or(2, "value", 0.0)?)
        }
        "interpolate" => {
            let mode = match c.str_or(99, "mode", variant)?.as_str() {
                "nearest" => InterpolateMode::Nearest,
                "linear" => InterpolateMode::Linear,
                "bilinear" => InterpolateMode::Bilinear,
                "bicubic" => InterpolateMode::Bicubic,
                "area" => InterpolateMode::Area,
                "nearest-exact" => InterpolateMode::NearestExact,
                "trilinear" => unsupported!("interpolate mode \"trilinear\""),
                other => unsupported!("{UNREPRESENTABLE}interpolate mode {other:?}"),
            };
            let recompute = c.bool_or(99, "recompute_scale_factor", false)?;
            let size = match (c.opt(0, "size"), c.opt(1, "scale_factor")) {
                // PyTorch's recompute_scale_factor=True: the output size floor(n * s), then
                // the kernels' scale from the sizes, which is nn's `Size`.
                (None, Some(f)) if recompute => {
                    let x = x()?;
                    let f: Vec<f64> = match f {
                        A::List(l) => l.iter().map(float).collect::<R<_>>()?,
                        f => vec![float(f)?; x.rank().saturating_sub(2)],
                    };
                    InterpolateSize::Size(
                        x.shape()[2..].iter().zip(&f).map(|(&n, s)| (n as f64 * s).floor() as usize).collect(),
                    )
                }
                (Some(s), None) => InterpolateSize::Size(sizes(&ints(s)?)?),
                (None, Some(A::List(f))) => InterpolateSize::ScaleFactor(f.iter().map(float).collect::<R<_>>()?),
                (None, Some(f)) => InterpolateSize::ScaleFactor(vec![float(f)?]),
                _ => unsupported!("interpolate with both or neither of size and scale_factor"),
            };
            let align = match c.opt(99, "align_corners") {
                None => None,
                Some(A::Bool(b)) => Some(*b),
                Some(other) => unsupported!("align_corners={other:?}"),
            };
            F::interpolate(&x()?, size, mode, align)
        }
        _ => return Ok(None),
    }]))
}
