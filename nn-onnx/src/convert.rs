//! One rule per traced op: the ONNX nodes that compute it (opset 17 forms; the few ops
//! whose form changed in opset 18 follow the requested opset).

use nn_core::names;
use nn_core::trace::{Attr, OpKind, TracedOp};
use nn_core::DType;

use crate::graph::{Builder, Converted, OpPair};
use crate::proto::attr;

/// Ops with a conversion rule (untraced ops by their autograd node name).
pub(crate) fn is_supported(op: &TracedOp) -> bool {
    match op.kind {
        OpKind::Untraced => matches!(op.name, "contiguous" | "clone" | "to_dtype" | "to_device"),
        OpKind::Traced => !matches!(
            op.name,
            "max_dim" | "min_dim" | "max_pool2d_with_indices" | "index_add" | "scatter_add" | "any" | "all"
        ),
        OpKind::InPlace | OpKind::HostRead => false,
    }
}

type Result<T> = std::result::Result<T, String>;

/// Converts `op`, whose inputs are the ONNX values `x`.
pub(crate) fn convert(g: &mut Builder<'_>, op: &OpPair<'_>, x: &[String]) -> Result<Converted> {
    let a = op.a;
    let s = |i: usize| x[i].as_str();
    let dtype = a.inputs.first().map(|t| t.dtype()).unwrap_or(DType::F32);
    let e = |err: crate::Error| err.to_string();
    if a.kind == OpKind::Untraced {
        return match a.name {
            names::CONTIGUOUS | names::TO_DEVICE => Ok(Converted::Alias),
            // A copy is a value of its own: a later write into it must not reach its source.
            names::CLONE => Ok(v(g.node("Identity", &[s(0)], vec![]))),
            names::TO_DTYPE => {
                let to = crate::proto::elem_type(op.output().dtype()).map_err(e)?;
                Ok(v(g.node("Cast", &[s(0)], vec![attr::int("to", to as i64)])))
            }
            name => Err(format!(
                "`{name}` computes its result without a tracing rule (a custom autograd op, or an op the tracer \
                 does not describe); only ops on constants can be folded into the graph"
            )),
        };
    }
    let unary = |g: &mut Builder<'_>, ty: &str| v(g.node(ty, &[s(0)], vec![]));
    let binary = |g: &mut Builder<'_>, ty: &str| v(g.node(ty, &[s(0), s(1)], vec![]));
    Ok(match a.name {
        names::DETACH => Converted::Alias,
        names::SNAPSHOT => v(g.node("Identity", &[s(0)], vec![])),
        names::RELU => unary(g, "Relu"),
        names::SIGMOID => unary(g, "Sigmoid"),
        names::TANH => unary(g, "Tanh"),
        names::NEG => unary(g, "Neg"),
        names::EXP => unary(g, "Exp"),
        names::LOG => unary(g, "Log"),
        names::SQRT => unary(g, "Sqrt"),
        names::ABS => unary(g, "Abs"),
        names::SIN => unary(g, "Sin"),
        names::COS => unary(g, "Cos"),
        names::RECIPROCAL => unary(g, "Reciprocal"),
        names::RSQRT => {
            let r = g.node("Sqrt", &[s(0)], vec![]);
            v(g.node("Reciprocal", &[&r], vec![]))
        }
        names::SOFTPLUS => softplus(g, s(0), dtype, op.float("beta"), op.float("threshold")).map_err(e)?,
        names::LOGICAL_NOT => unary(g, "Not"),
        names::ISNAN => unary(g, "IsNaN"),
        names::ISINF => unary(g, "IsInf"),
        names::ISFINITE => {
            let nan = g.node("IsNaN", &[s(0)], vec![]);
            let inf = g.node("IsInf", &[s(0)], vec![]);
            let bad = g.node("Or", &[&nan, &inf], vec![]);
            v(g.node("Not", &[&bad], vec![]))
        }
        names::SQUARE => v(g.node("Mul", &[s(0), s(0)], vec![])),
        names::LEAKY_RELU => v(g.node("LeakyRelu", &[s(0)], vec![attr::float("alpha", op.float("negative_slope"))])),
        names::SILU => {
            let sig = g.node("Sigmoid", &[s(0)], vec![]);
            v(g.node("Mul", &[s(0), &sig], vec![]))
        }
        names::GELU => gelu(g, s(0), dtype, op.attr("approximate") == Some(&Attr::Str("tanh"))).map_err(e)?,
        names::POWF => {
            let c = g.const_scalar(op.float("exponent"), dtype).map_err(e)?;
            v(g.node("Pow", &[s(0), &c], vec![]))
        }
        names::CLAMP => {
            let lo = g.const_scalar(op.float("min"), dtype).map_err(e)?;
            let hi = g.const_scalar(op.float("max"), dtype).map_err(e)?;
            v(g.node("Clip", &[s(0), &lo, &hi], vec![]))
        }
        names::AFFINE => {
            let (m, b) = (op.float("a"), op.float("b"));
            let mut y = x[0].clone();
            if m != 1.0 {
                let c = g.const_scalar(m, dtype).map_err(e)?;
                y = g.node("Mul", &[&y, &c], vec![]);
            }
            if b != 0.0 {
                let c = g.const_scalar(b, dtype).map_err(e)?;
                y = g.node("Add", &[&y, &c], vec![]);
            }
            if y == x[0] {
                Converted::Alias
            } else {
                v(y)
            }
        }
        names::DIV_SCALAR => {
            let c = g.const_scalar(op.float("s"), dtype).map_err(e)?;
            v(g.node("Div", &[s(0), &c], vec![]))
        }
        names::SCALAR_DIV => {
            let c = g.const_scalar(op.float("s"), dtype).map_err(e)?;
            v(g.node("Div", &[&c, s(0)], vec![]))
        }
        names::ADD => binary(g, "Add"),
        names::SUB => binary(g, "Sub"),
        names::MUL => binary(g, "Mul"),
        names::DIV => binary(g, "Div"),
        names::POW => binary(g, "Pow"),
        names::MAXIMUM => binary(g, "Max"),
        names::MINIMUM => binary(g, "Min"),
        names::EQ => binary(g, "Equal"),
        names::NE => {
            let eq = g.node("Equal", &[s(0), s(1)], vec![]);
            v(g.node("Not", &[&eq], vec![]))
        }
        names::LT => binary(g, "Less"),
        names::LE => binary(g, "LessOrEqual"),
        names::GT => binary(g, "Greater"),
        names::GE => binary(g, "GreaterOrEqual"),
        names::WHERE => v(g.node("Where", &[s(0), s(1), s(2)], vec![])),
        names::MATMUL => binary(g, "MatMul"),
        names::SOFTMAX => v(g.node("Softmax", &[s(0)], vec![attr::int("axis", op.int("dim"))])),
        names::LOG_SOFTMAX => v(g.node("LogSoftmax", &[s(0)], vec![attr::int("axis", op.int("dim"))])),
        names::DROPOUT => {
            if op.flag("training") && op.float("p") > 0.0 {
                return Err(format!(
                    "dropout with p={} runs in training mode (random masks); call `model.eval()` before exporting",
                    op.float("p")
                ));
            }
            Converted::Alias
        }
        names::LINEAR => {
            let rank = op.input(0).rank();
            let bias = x.get(2).map(String::as_str);
            if rank == 2 {
                let mut ins = vec![s(0), s(1)];
                ins.extend(bias);
                v(g.node("Gemm", &ins, vec![attr::int("transB", 1)]))
            } else {
                let wt = g.node("Transpose", &[s(1)], vec![attr::ints("perm", &[1, 0])]);
                let y = g.node("MatMul", &[s(0), &wt], vec![]);
                match bias {
                    Some(b) => v(g.node("Add", &[&y, b], vec![])),
                    None => v(y),
                }
            }
        }
        names::ADDMM => v(g.node(
            "Gemm",
            &[s(1), s(2), s(0)],
            vec![attr::float("alpha", op.float("alpha")), attr::float("beta", op.float("beta"))],
        )),
        names::SUM => {
            let dims = op.ints("dims");
            if dims.is_empty() {
                return Ok(Converted::Alias);
            }
            let axes = g.const_i64(&dims);
            v(g.node("ReduceSum", &[s(0), &axes], vec![attr::int("keepdims", op.flag("keepdim") as i64)]))
        }
        names::MAX | names::MIN => {
            let ty = if a.name == names::MAX { "ReduceMax" } else { "ReduceMin" };
            v(g.node(ty, &[s(0)], vec![attr::int("keepdims", 0)]))
        }
        names::LOGSUMEXP => {
            let keep = attr::int("keepdims", op.flag("keepdim") as i64);
            let dim = op.int("dim");
            if g.opset >= 18 {
                let axes = g.const_i64(&[dim]);
                v(g.node("ReduceLogSumExp", &[s(0), &axes], vec![keep]))
            } else {
                v(g.node("ReduceLogSumExp", &[s(0)], vec![attr::ints("axes", &[dim]), keep]))
            }
        }
        names::ARGMAX | names::ARGMIN => {
            let ty = if a.name == names::ARGMAX { "ArgMax" } else { "ArgMin" };
            let attrs = vec![attr::int("axis", op.int("dim")), attr::int("keepdims", op.flag("keepdim") as i64)];
            if op.input(0).rank() == 0 {
                return Err("arg-reductions of a 0-d tensor are not exported".into());
            }
            v(g.node(ty, &[s(0)], attrs))
        }
        names::RESHAPE => {
            let shape = reshape_target(op)?;
            let c = g.const_i64(&shape);
            v(g.node("Reshape", &[s(0), &c], vec![]))
        }
        names::EXPAND => {
            let shape = expand_target(op)?;
            let c = g.const_i64(&shape);
            v(g.node("Expand", &[s(0), &c], vec![]))
        }
        names::PERMUTE => v(g.node("Transpose", &[s(0)], vec![attr::ints("perm", &op.ints("perm"))])),
        names::NARROW => {
            let (dim, start, len) = (op.int("dim"), op.int("start"), op.int("len"));
            let starts = g.const_i64(&[start]);
            let ends = g.const_i64(&[start + len]);
            let axes = g.const_i64(&[dim]);
            v(g.node("Slice", &[s(0), &starts, &ends, &axes], vec![]))
        }
        names::CAT => {
            let ins: Vec<&str> = x.iter().map(String::as_str).collect();
            v(g.node("Concat", &ins, vec![attr::int("axis", op.int("dim"))]))
        }
        names::EMBEDDING => v(g.node("Gather", &[s(1), s(0)], vec![attr::int("axis", 0)])),
        names::INDEX_SELECT => v(g.node("Gather", &[s(0), s(1)], vec![attr::int("axis", op.int("dim"))])),
        names::GATHER => v(g.node("GatherElements", &[s(0), s(1)], vec![attr::int("axis", op.int("dim"))])),
        names::TRIL | names::TRIU => {
            let k = g.constant(crate::proto::i64_scalar(op.int("diagonal")));
            v(g.node("Trilu", &[s(0), &k], vec![attr::int("upper", (a.name == names::TRIU) as i64)]))
        }
        names::CONV2D => {
            let w = op.input(1).shape().to_vec();
            let (pad, stride, dil) = (op.ints("padding"), op.ints("stride"), op.ints("dilation"));
            let attrs = vec![
                attr::ints("kernel_shape", &[w[2] as i64, w[3] as i64]),
                attr::ints("strides", &stride),
                attr::ints("pads", &[pad[0], pad[1], pad[0], pad[1]]),
                attr::ints("dilations", &dil),
                attr::int("group", op.int("groups")),
            ];
            let ins: Vec<&str> = x.iter().map(String::as_str).collect();
            batched(g, op.input(0).rank(), &ins, |g, ins| g.node("Conv", ins, attrs))
        }
        names::MAX_POOL2D | names::AVG_POOL2D => {
            let (k, st, pad) = (op.ints("kernel"), op.ints("stride"), op.ints("padding"));
            let mut attrs = vec![
                attr::ints("kernel_shape", &k),
                attr::ints("strides", &st),
                attr::ints("pads", &[pad[0], pad[1], pad[0], pad[1]]),
                attr::int("ceil_mode", op.flag("ceil_mode") as i64),
            ];
            let ty = if a.name == names::MAX_POOL2D {
                attrs.push(attr::ints("dilations", &op.ints("dilation")));
                "MaxPool"
            } else {
                attrs.push(attr::int("count_include_pad", op.flag("count_include_pad") as i64));
                "AveragePool"
            };
            batched(g, op.input(0).rank(), &[s(0)], |g, ins| g.node(ty, ins, attrs))
        }
        names::ADAPTIVE_AVG_POOL2D => {
            let out = op.ints("output_size");
            let (shape, shape_b) = (op.input(0).shape(), op.input_b(0).shape());
            let r = shape.len();
            let (h, w) = (shape[r - 2] as i64, shape[r - 1] as i64);
            if shape_b[r - 2..] != shape[r - 2..] {
                return Err("adaptive_avg_pool2d over spatial dims that are dynamic axes cannot be exported".into());
            }
            if out == [1, 1] {
                batched(g, r, &[s(0)], |g, ins| g.node("GlobalAveragePool", ins, vec![]))
            } else if h % out[0] == 0 && w % out[1] == 0 {
                let k = [h / out[0], w / out[1]];
                let attrs = vec![attr::ints("kernel_shape", &k), attr::ints("strides", &k)];
                batched(g, r, &[s(0)], |g, ins| g.node("AveragePool", ins, attrs))
            } else {
                return Err(format!(
                    "adaptive_avg_pool2d from {h}x{w} to {}x{} uses windows of unequal sizes, which ONNX's pools \
                     cannot express; pick an output size that divides the input",
                    out[0], out[1]
                ));
            }
        }
        names::BATCH_NORM => {
            if op.flag("training") {
                return Err("batch_norm runs in training mode (batch statistics, running-stat updates); call \
                            `model.eval()` before exporting"
                    .into());
            }
            if !op.flag("has_running_stats") {
                return Err("batch_norm without running statistics (track_running_stats=false) normalises with \
                            the statistics of each batch, which is not exported"
                    .into());
            }
            let c = op.input(0).shape()[1];
            let mut next = 3;
            let mut optional = |g: &mut Builder<'_>, present: bool, fill: f64| -> Result<String> {
                if present {
                    next += 1;
                    Ok(x[next - 1].clone())
                } else {
                    let t = nn_core::Tensor::full_on(&[c], fill, dtype, nn_core::Device::Cpu);
                    g.const_tensor(&t).map_err(e)
                }
            };
            let scale = optional(g, op.flag("has_weight"), 1.0)?;
            let bias = optional(g, op.flag("has_bias"), 0.0)?;
            let attrs = vec![attr::float("epsilon", op.float("eps"))];
            v(g.node("BatchNormalization", &[s(0), &scale, &bias, s(1), s(2)], attrs))
        }
        names::LAYER_NORM => {
            let shape = op.ints("normalized_shape");
            let axis = op.input(0).rank() as i64 - shape.len() as i64;
            let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
            let scale = if op.flag("has_weight") {
                x[1].clone()
            } else {
                let t = nn_core::Tensor::full_on(&dims, 1.0, dtype, nn_core::Device::Cpu);
                g.const_tensor(&t).map_err(e)?
            };
            let mut ins = vec![s(0), scale.as_str()];
            if op.flag("has_bias") {
                ins.push(x.last().expect("bias").as_str());
            }
            let attrs = vec![attr::int("axis", axis), attr::float("epsilon", op.float("eps"))];
            v(g.node("LayerNormalization", &ins, attrs))
        }
        name => {
            return Err(format!(
                "`{name}` has no ONNX conversion (supported: elementwise math, activations, matmul/linear, \
                 reshape/permute/narrow/expand/cat, reductions, softmax, conv, pools, norms, embedding, gather)"
            ))
        }
    })
}

fn v(name: String) -> Converted {
    Converted::Value(name)
}

/// Runs a 2-D spatial op on a 3-D `[C, H, W]` input by adding and removing the batch dim.
fn batched(
    g: &mut Builder<'_>,
    rank: usize,
    ins: &[&str],
    f: impl FnOnce(&mut Builder<'_>, &[&str]) -> String,
) -> Converted {
    if rank != 3 {
        return v(f(g, ins));
    }
    let zero = g.const_i64(&[0]);
    let x = g.node("Unsqueeze", &[ins[0], &zero], vec![]);
    let mut all = vec![x.as_str()];
    all.extend_from_slice(&ins[1..]);
    let y = f(g, &all);
    let zero = g.const_i64(&[0]);
    v(g.node("Squeeze", &[&y, &zero], vec![]))
}

/// GELU from elementary ops: `0.5 x (1 + erf(x / sqrt 2))`, or the tanh form.
fn gelu(g: &mut Builder<'_>, x: &str, dtype: DType, tanh: bool) -> std::result::Result<Converted, crate::Error> {
    let inner = if tanh {
        // tanh(sqrt(2 / pi) * (x + 0.044715 x^3))
        let x3 = g.node("Mul", &[x, x], vec![]);
        let x3 = g.node("Mul", &[&x3, x], vec![]);
        let c = g.const_scalar(0.044715, dtype)?;
        let t = g.node("Mul", &[&x3, &c], vec![]);
        let t = g.node("Add", &[x, &t], vec![]);
        let k = g.const_scalar((2.0 / std::f64::consts::PI).sqrt(), dtype)?;
        let t = g.node("Mul", &[&t, &k], vec![]);
        g.node("Tanh", &[&t], vec![])
    } else {
        let r = g.const_scalar(std::f64::consts::SQRT_2, dtype)?;
        let t = g.node("Div", &[x, &r], vec![]);
        g.node("Erf", &[&t], vec![])
    };
    let one = g.const_scalar(1.0, dtype)?;
    let t = g.node("Add", &[&inner, &one], vec![]);
    let t = g.node("Mul", &[x, &t], vec![]);
    let half = g.const_scalar(0.5, dtype)?;
    Ok(v(g.node("Mul", &[&t, &half], vec![])))
}

/// PyTorch's softplus: ONNX's `Softplus` (`ln(1 + e^x)`) of `beta x` over `beta`, and `x`
/// itself where `beta x > threshold` (ONNX's operator has neither parameter).
fn softplus(
    g: &mut Builder<'_>,
    x: &str,
    dtype: DType,
    beta: f64,
    threshold: f64,
) -> std::result::Result<Converted, crate::Error> {
    let b = g.const_scalar(beta, dtype)?;
    let bx = g.node("Mul", &[x, &b], vec![]);
    let sp = g.node("Softplus", &[&bx], vec![]);
    let sp = g.node("Div", &[&sp, &b], vec![]);
    let t = g.const_scalar(threshold, dtype)?;
    let above = g.node("Greater", &[&bx, &t], vec![]);
    Ok(v(g.node("Where", &[&above, x, &sp], vec![])))
}

/// A reshape target for ONNX: dims that follow the dynamic axes become `0` (the input's
/// dim at the same position) or `-1` (inferred; at most one).
fn reshape_target(op: &OpPair<'_>) -> Result<Vec<i64>> {
    let (ta, tb) = (op.ints("shape"), op.ints_b("shape"));
    let (ia, ib) = (op.input(0).shape(), op.input_b(0).shape());
    let mut out = ta.clone();
    let mut inferred = false;
    for i in 0..ta.len() {
        if ta[i] == tb[i] {
            continue;
        }
        if ia.get(i) == Some(&(ta[i] as usize)) && ib.get(i) == Some(&(tb[i] as usize)) {
            out[i] = 0;
        } else if !inferred {
            out[i] = -1;
            inferred = true;
        } else {
            return Err(format!(
                "reshape to {ta:?} has several dims that change with the dynamic axes ({ta:?} vs {tb:?}); ONNX can \
                 infer only one: reshape in two steps, or export with fewer dynamic axes"
            ));
        }
    }
    Ok(out)
}

/// An expand target for ONNX: dims that follow the dynamic axes become `1` where the input
/// already has them (ONNX's Expand broadcasts both ways).
fn expand_target(op: &OpPair<'_>) -> Result<Vec<i64>> {
    let (ta, tb) = (op.ints("shape"), op.ints_b("shape"));
    let (ia, ib) = (op.input(0).shape(), op.input_b(0).shape());
    let mut out = ta.clone();
    for i in 0..ta.len() {
        if ta[i] == tb[i] {
            continue;
        }
        let j = i as isize - (ta.len() as isize - ia.len() as isize);
        let same = j >= 0 && ia[j as usize] as i64 == ta[i] && ib[j as usize] as i64 == tb[i];
        if !same {
            return Err(format!(
                "expand to {ta:?} creates a dim that follows the dynamic axes from a dim of size 1, which a \
                 constant shape cannot say; rely on broadcasting in the op that consumes it, or export with fixed \
                 axes"
            ));
        }
        out[i] = 1;
    }
    Ok(out)
}
