//! One rule per traced op: the ONNX nodes that compute it (opset 17 forms; the few ops
//! whose form changed in opset 18 follow the requested opset).
//!
//! The rules are grouped by op family, one function each ([`convert`] tries them in turn).
//! This module depends on [`op`](crate::op) (the op to convert) and [`nodes`](crate::nodes)
//! (where its nodes go), never on [`graph`](crate::graph): the graph builder calls in.

use nn_core::names;
use nn_core::trace::{Attr, OpKind, TracedOp};
use nn_core::DType;

use crate::nodes::NodeWriter;
use crate::op::AlignedOp;
use crate::proto::attr;

/// What converting an op gives.
pub(crate) enum Converted {
    /// The op's result is this ONNX value.
    Value(String),
    /// The op returns its first input unchanged (`contiguous`, `detach`, dropout in eval).
    Alias,
}

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

/// A conversion failure: the reason the op cannot be exported.
type Result<T> = std::result::Result<T, String>;

/// The rules of one op family: `Ok(None)` for an op outside the family. `inputs` are the
/// ONNX values of the op's inputs.
type Family = fn(&mut NodeWriter, &AlignedOp<'_>, &[String]) -> Result<Option<Converted>>;

/// The traced op families, in the order [`convert`] tries them (each op name belongs to
/// one).
const FAMILIES: [Family; 8] = [
    elementwise_unary,
    elementwise_binary,
    matrix_products,
    reductions,
    shape_ops,
    indexing,
    convolutions_and_pools,
    normalizations,
];

/// The reason for a failure that is an [`Error`](crate::Error) (a dtype without an ONNX
/// type).
fn to_reason(err: crate::Error) -> String {
    err.to_string()
}

/// Converts `op`, whose inputs are the ONNX values `inputs`.
pub(crate) fn convert(g: &mut NodeWriter, op: &AlignedOp<'_>, inputs: &[String]) -> Result<Converted> {
    if op.example.kind == OpKind::Untraced {
        return untraced(g, op, inputs);
    }
    for family in FAMILIES {
        if let Some(converted) = family(g, op, inputs)? {
            return Ok(converted);
        }
    }
    Err(format!(
        "`{}` has no ONNX conversion (supported: elementwise math, activations, matmul/linear, \
         reshape/permute/narrow/expand/cat, reductions, softmax, conv, pools, norms, embedding, gather)",
        op.example.name
    ))
}

/// Ops recorded by autograd's node name, outside any traced op: layout changes, copies and
/// casts.
fn untraced(g: &mut NodeWriter, op: &AlignedOp<'_>, inputs: &[String]) -> Result<Converted> {
    let input_name = |i: usize| inputs[i].as_str();
    match op.example.name {
        names::CONTIGUOUS | names::TO_DEVICE => Ok(Converted::Alias),
        // A copy is a value of its own: a later write into it must not reach its source.
        names::CLONE => Ok(Converted::Value(g.node("Identity", &[input_name(0)], vec![]))),
        names::TO_DTYPE => {
            let to = crate::proto::elem_type(op.output().dtype()).map_err(to_reason)?;
            Ok(Converted::Value(g.node("Cast", &[input_name(0)], vec![attr::int("to", to as i64)])))
        }
        name => Err(format!(
            "`{name}` computes its result without a tracing rule (a custom autograd op, or an op the tracer \
             does not describe); only ops on constants can be folded into the graph"
        )),
    }
}

/// A node of `op_type` on the one value `input`.
fn unary_node(g: &mut NodeWriter, op_type: &str, input: &str) -> Converted {
    Converted::Value(g.node(op_type, &[input], vec![]))
}

/// Activations, elementwise math, ops with a scalar operand, and dropout (in eval mode).
fn elementwise_unary(g: &mut NodeWriter, op: &AlignedOp<'_>, inputs: &[String]) -> Result<Option<Converted>> {
    let input_name = |i: usize| inputs[i].as_str();
    let dtype = op.input_dtype();
    Ok(Some(match op.example.name {
        names::DETACH => Converted::Alias,
        names::SNAPSHOT => unary_node(g, "Identity", input_name(0)),
        names::RELU => unary_node(g, "Relu", input_name(0)),
        names::SIGMOID => unary_node(g, "Sigmoid", input_name(0)),
        names::TANH => unary_node(g, "Tanh", input_name(0)),
        names::NEG => unary_node(g, "Neg", input_name(0)),
        names::EXP => unary_node(g, "Exp", input_name(0)),
        names::LOG => unary_node(g, "Log", input_name(0)),
        names::SQRT => unary_node(g, "Sqrt", input_name(0)),
        names::ABS => unary_node(g, "Abs", input_name(0)),
        names::SIN => unary_node(g, "Sin", input_name(0)),
        names::COS => unary_node(g, "Cos", input_name(0)),
        names::RECIPROCAL => unary_node(g, "Reciprocal", input_name(0)),
        names::RSQRT => {
            let r = g.node("Sqrt", &[input_name(0)], vec![]);
            Converted::Value(g.node("Reciprocal", &[&r], vec![]))
        }
        names::SOFTPLUS => {
            softplus(g, input_name(0), dtype, op.float("beta"), op.float("threshold")).map_err(to_reason)?
        }
        names::LOGICAL_NOT => unary_node(g, "Not", input_name(0)),
        names::ISNAN => unary_node(g, "IsNaN", input_name(0)),
        names::ISINF => unary_node(g, "IsInf", input_name(0)),
        names::ISFINITE => {
            let nan = g.node("IsNaN", &[input_name(0)], vec![]);
            let inf = g.node("IsInf", &[input_name(0)], vec![]);
            let bad = g.node("Or", &[&nan, &inf], vec![]);
            Converted::Value(g.node("Not", &[&bad], vec![]))
        }
        names::SQUARE => Converted::Value(g.node("Mul", &[input_name(0), input_name(0)], vec![])),
        names::LEAKY_RELU => Converted::Value(g.node(
            "LeakyRelu",
            &[input_name(0)],
            vec![attr::float("alpha", op.float("negative_slope"))],
        )),
        names::SILU => {
            let sig = g.node("Sigmoid", &[input_name(0)], vec![]);
            Converted::Value(g.node("Mul", &[input_name(0), &sig], vec![]))
        }
        names::GELU => {
            gelu(g, input_name(0), dtype, op.attr("approximate") == Some(&Attr::Str("tanh"))).map_err(to_reason)?
        }
        names::POWF => {
            let c = g.const_scalar(op.float("exponent"), dtype).map_err(to_reason)?;
            Converted::Value(g.node("Pow", &[input_name(0), &c], vec![]))
        }
        names::CLAMP => {
            let lo = g.const_scalar(op.float("min"), dtype).map_err(to_reason)?;
            let hi = g.const_scalar(op.float("max"), dtype).map_err(to_reason)?;
            Converted::Value(g.node("Clip", &[input_name(0), &lo, &hi], vec![]))
        }
        names::AFFINE => {
            let (m, b) = (op.float("a"), op.float("b"));
            let mut y = inputs[0].clone();
            if m != 1.0 {
                let c = g.const_scalar(m, dtype).map_err(to_reason)?;
                y = g.node("Mul", &[&y, &c], vec![]);
            }
            if b != 0.0 {
                let c = g.const_scalar(b, dtype).map_err(to_reason)?;
                y = g.node("Add", &[&y, &c], vec![]);
            }
            if y == inputs[0] {
                Converted::Alias
            } else {
                Converted::Value(y)
            }
        }
        names::DIV_SCALAR => {
            let c = g.const_scalar(op.float("s"), dtype).map_err(to_reason)?;
            Converted::Value(g.node("Div", &[input_name(0), &c], vec![]))
        }
        names::SCALAR_DIV => {
            let c = g.const_scalar(op.float("s"), dtype).map_err(to_reason)?;
            Converted::Value(g.node("Div", &[&c, input_name(0)], vec![]))
        }
        names::DROPOUT => {
            if op.flag("training") && op.float("p") > 0.0 {
                return Err(format!(
                    "dropout with p={} runs in training mode (random masks); call `model.eval()` before exporting",
                    op.float("p")
                ));
            }
            Converted::Alias
        }
        _ => return Ok(None),
    }))
}

/// Broadcasting arithmetic, comparisons and `where`.
fn elementwise_binary(g: &mut NodeWriter, op: &AlignedOp<'_>, inputs: &[String]) -> Result<Option<Converted>> {
    let input_name = |i: usize| inputs[i].as_str();
    let mut binary = |op_type: &str| Converted::Value(g.node(op_type, &[input_name(0), input_name(1)], vec![]));
    Ok(Some(match op.example.name {
        names::ADD => binary("Add"),
        names::SUB => binary("Sub"),
        names::MUL => binary("Mul"),
        names::DIV => binary("Div"),
        names::POW => binary("Pow"),
        names::MAXIMUM => binary("Max"),
        names::MINIMUM => binary("Min"),
        names::EQ => binary("Equal"),
        names::NE => {
            let eq = g.node("Equal", &[input_name(0), input_name(1)], vec![]);
            Converted::Value(g.node("Not", &[&eq], vec![]))
        }
        names::LT => binary("Less"),
        names::LE => binary("LessOrEqual"),
        names::GT => binary("Greater"),
        names::GE => binary("GreaterOrEqual"),
        names::WHERE => Converted::Value(g.node("Where", &[input_name(0), input_name(1), input_name(2)], vec![])),
        _ => return Ok(None),
    }))
}

/// Matrix products: `matmul`, `linear` (`Gemm`, or `MatMul` past 2-D) and `addmm`.
fn matrix_products(g: &mut NodeWriter, op: &AlignedOp<'_>, inputs: &[String]) -> Result<Option<Converted>> {
    let input_name = |i: usize| inputs[i].as_str();
    Ok(Some(match op.example.name {
        names::MATMUL => Converted::Value(g.node("MatMul", &[input_name(0), input_name(1)], vec![])),
        names::LINEAR => {
            let rank = op.input(0).rank();
            let bias = inputs.get(2).map(String::as_str);
            if rank == 2 {
                let mut ins = vec![input_name(0), input_name(1)];
                ins.extend(bias);
                Converted::Value(g.node("Gemm", &ins, vec![attr::int("transB", 1)]))
            } else {
                let wt = g.node("Transpose", &[input_name(1)], vec![attr::ints("perm", &[1, 0])]);
                let y = g.node("MatMul", &[input_name(0), &wt], vec![]);
                match bias {
                    Some(b) => Converted::Value(g.node("Add", &[&y, b], vec![])),
                    None => Converted::Value(y),
                }
            }
        }
        names::ADDMM => Converted::Value(g.node(
            "Gemm",
            &[input_name(1), input_name(2), input_name(0)],
            vec![attr::float("alpha", op.float("alpha")), attr::float("beta", op.float("beta"))],
        )),
        _ => return Ok(None),
    }))
}

/// Reductions: `sum`, `max`/`min` over everything, `logsumexp`, `argmax`/`argmin`.
fn reductions(g: &mut NodeWriter, op: &AlignedOp<'_>, inputs: &[String]) -> Result<Option<Converted>> {
    let input_name = |i: usize| inputs[i].as_str();
    let name = op.example.name;
    Ok(Some(match name {
        names::SUM => {
            let dims = op.ints("dims");
            if dims.is_empty() {
                return Ok(Some(Converted::Alias));
            }
            let axes = g.const_i64(&dims);
            Converted::Value(g.node(
                "ReduceSum",
                &[input_name(0), &axes],
                vec![attr::int("keepdims", op.flag("keepdim") as i64)],
            ))
        }
        names::MAX | names::MIN => {
            let ty = if name == names::MAX { "ReduceMax" } else { "ReduceMin" };
            Converted::Value(g.node(ty, &[input_name(0)], vec![attr::int("keepdims", 0)]))
        }
        names::LOGSUMEXP => {
            let keep = attr::int("keepdims", op.flag("keepdim") as i64);
            let dim = op.int("dim");
            if g.opset >= 18 {
                let axes = g.const_i64(&[dim]);
                Converted::Value(g.node("ReduceLogSumExp", &[input_name(0), &axes], vec![keep]))
            } else {
                Converted::Value(g.node("ReduceLogSumExp", &[input_name(0)], vec![attr::ints("axes", &[dim]), keep]))
            }
        }
        names::ARGMAX | names::ARGMIN => {
            let ty = if name == names::ARGMAX { "ArgMax" } else { "ArgMin" };
            let attrs = vec![attr::int("axis", op.int("dim")), attr::int("keepdims", op.flag("keepdim") as i64)];
            if op.input(0).rank() == 0 {
                return Err("arg-reductions of a 0-d tensor are not exported".into());
            }
            Converted::Value(g.node(ty, &[input_name(0)], attrs))
        }
        _ => return Ok(None),
    }))
}

/// Shape ops: `reshape`, `expand`, `permute`, `narrow`, `cat`.
fn shape_ops(g: &mut NodeWriter, op: &AlignedOp<'_>, inputs: &[String]) -> Result<Option<Converted>> {
    let input_name = |i: usize| inputs[i].as_str();
    Ok(Some(match op.example.name {
        names::RESHAPE => {
            let shape = reshape_target(op)?;
            let c = g.const_i64(&shape);
            Converted::Value(g.node("Reshape", &[input_name(0), &c], vec![]))
        }
        names::EXPAND => {
            let shape = expand_target(op)?;
            let c = g.const_i64(&shape);
            Converted::Value(g.node("Expand", &[input_name(0), &c], vec![]))
        }
        names::PERMUTE => {
            Converted::Value(g.node("Transpose", &[input_name(0)], vec![attr::ints("perm", &op.ints("perm"))]))
        }
        names::NARROW => {
            let (dim, start, len) = (op.int("dim"), op.int("start"), op.int("len"));
            let starts = g.const_i64(&[start]);
            let ends = g.const_i64(&[start + len]);
            let axes = g.const_i64(&[dim]);
            Converted::Value(g.node("Slice", &[input_name(0), &starts, &ends, &axes], vec![]))
        }
        names::CAT => {
            let ins: Vec<&str> = inputs.iter().map(String::as_str).collect();
            Converted::Value(g.node("Concat", &ins, vec![attr::int("axis", op.int("dim"))]))
        }
        _ => return Ok(None),
    }))
}

/// Indexing and masking: `embedding`, `index_select`, `gather`, `tril`/`triu`.
fn indexing(g: &mut NodeWriter, op: &AlignedOp<'_>, inputs: &[String]) -> Result<Option<Converted>> {
    let input_name = |i: usize| inputs[i].as_str();
    let axis = |name: &str| attr::int("axis", op.int(name));
    Ok(Some(match op.example.name {
        names::EMBEDDING => {
            Converted::Value(g.node("Gather", &[input_name(1), input_name(0)], vec![attr::int("axis", 0)]))
        }
        names::INDEX_SELECT => Converted::Value(g.node("Gather", &[input_name(0), input_name(1)], vec![axis("dim")])),
        names::GATHER => Converted::Value(g.node("GatherElements", &[input_name(0), input_name(1)], vec![axis("dim")])),
        names::TRIL | names::TRIU => {
            let k = g.constant(crate::proto::i64_scalar(op.int("diagonal")));
            let upper = attr::int("upper", (op.example.name == names::TRIU) as i64);
            Converted::Value(g.node("Trilu", &[input_name(0), &k], vec![upper]))
        }
        _ => return Ok(None),
    }))
}

/// 2-D convolutions and pools (batched or a single `[C, H, W]` image).
fn convolutions_and_pools(g: &mut NodeWriter, op: &AlignedOp<'_>, inputs: &[String]) -> Result<Option<Converted>> {
    let input_name = |i: usize| inputs[i].as_str();
    let name = op.example.name;
    Ok(Some(match name {
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
            let ins: Vec<&str> = inputs.iter().map(String::as_str).collect();
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
            let ty = if name == names::MAX_POOL2D {
                attrs.push(attr::ints("dilations", &op.ints("dilation")));
                "MaxPool"
            } else {
                attrs.push(attr::int("count_include_pad", op.flag("count_include_pad") as i64));
                "AveragePool"
            };
            batched(g, op.input(0).rank(), &[input_name(0)], |g, ins| g.node(ty, ins, attrs))
        }
        names::ADAPTIVE_AVG_POOL2D => {
            let out = op.ints("output_size");
            let (shape, shape_grown) = (op.input(0).shape(), op.input_grown(0).shape());
            let r = shape.len();
            let (h, w) = (shape[r - 2] as i64, shape[r - 1] as i64);
            if shape_grown[r - 2..] != shape[r - 2..] {
                return Err("adaptive_avg_pool2d over spatial dims that are dynamic axes cannot be exported".into());
            }
            if out == [1, 1] {
                batched(g, r, &[input_name(0)], |g, ins| g.node("GlobalAveragePool", ins, vec![]))
            } else if h % out[0] == 0 && w % out[1] == 0 {
                let k = [h / out[0], w / out[1]];
                let attrs = vec![attr::ints("kernel_shape", &k), attr::ints("strides", &k)];
                batched(g, r, &[input_name(0)], |g, ins| g.node("AveragePool", ins, attrs))
            } else {
                return Err(format!(
                    "adaptive_avg_pool2d from {h}x{w} to {}x{} uses windows of unequal sizes, which ONNX's pools \
                     cannot express; pick an output size that divides the input",
                    out[0], out[1]
                ));
            }
        }
        _ => return Ok(None),
    }))
}

/// Normalisations along axes: `softmax`, `log_softmax`, `batch_norm` (eval mode),
/// `layer_norm`.
fn normalizations(g: &mut NodeWriter, op: &AlignedOp<'_>, inputs: &[String]) -> Result<Option<Converted>> {
    let input_name = |i: usize| inputs[i].as_str();
    let dtype = op.input_dtype();
    Ok(Some(match op.example.name {
        names::SOFTMAX => Converted::Value(g.node("Softmax", &[input_name(0)], vec![attr::int("axis", op.int("dim"))])),
        names::LOG_SOFTMAX => {
            Converted::Value(g.node("LogSoftmax", &[input_name(0)], vec![attr::int("axis", op.int("dim"))]))
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
            let mut optional = |g: &mut NodeWriter, present: bool, fill: f64| -> Result<String> {
                if present {
                    next += 1;
                    Ok(inputs[next - 1].clone())
                } else {
                    let t = nn_core::Tensor::full_on(&[c], fill, dtype, nn_core::Device::Cpu);
                    g.const_tensor(&t).map_err(to_reason)
                }
            };
            let scale = optional(g, op.flag("has_weight"), 1.0)?;
            let bias = optional(g, op.flag("has_bias"), 0.0)?;
            let attrs = vec![attr::float("epsilon", op.float("eps"))];
            let ins = [input_name(0), &scale, &bias, input_name(1), input_name(2)];
            Converted::Value(g.node("BatchNormalization", &ins, attrs))
        }
        names::LAYER_NORM => {
            let shape = op.ints("normalized_shape");
            let axis = op.input(0).rank() as i64 - shape.len() as i64;
            let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
            let scale = if op.flag("has_weight") {
                inputs[1].clone()
            } else {
                let t = nn_core::Tensor::full_on(&dims, 1.0, dtype, nn_core::Device::Cpu);
                g.const_tensor(&t).map_err(to_reason)?
            };
            let mut ins = vec![input_name(0), scale.as_str()];
            if op.flag("has_bias") {
                ins.push(inputs.last().expect("bias").as_str());
            }
            let attrs = vec![attr::int("axis", axis), attr::float("epsilon", op.float("eps"))];
            Converted::Value(g.node("LayerNormalization", &ins, attrs))
        }
        _ => return Ok(None),
    }))
}

/// Runs a 2-D spatial op on a 3-D `[C, H, W]` input by adding and removing the batch dim.
fn batched(
    g: &mut NodeWriter,
    rank: usize,
    ins: &[&str],
    f: impl FnOnce(&mut NodeWriter, &[&str]) -> String,
) -> Converted {
    if rank != 3 {
        return Converted::Value(f(g, ins));
    }
    let zero = g.const_i64(&[0]);
    let x = g.node("Unsqueeze", &[ins[0], &zero], vec![]);
    let mut all = vec![x.as_str()];
    all.extend_from_slice(&ins[1..]);
    let y = f(g, &all);
    let zero = g.const_i64(&[0]);
    Converted::Value(g.node("Squeeze", &[&y, &zero], vec![]))
}

/// GELU from elementary ops: `0.5 x (1 + erf(x / sqrt 2))`, or the tanh form.
fn gelu(g: &mut NodeWriter, x: &str, dtype: DType, tanh: bool) -> std::result::Result<Converted, crate::Error> {
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
    Ok(Converted::Value(g.node("Mul", &[&t, &half], vec![])))
}

/// PyTorch's softplus: ONNX's `Softplus` (`ln(1 + e^x)`) of `beta x` over `beta`, and `x`
/// itself where `beta x > threshold` (ONNX's operator has neither parameter).
fn softplus(
    g: &mut NodeWriter,
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
    Ok(Converted::Value(g.node("Where", &[&above, x, &sp], vec![])))
}

/// A reshape target for ONNX: dims that follow the dynamic axes become `0` (the input's
/// dim at the same position) or `-1` (inferred; at most one).
fn reshape_target(op: &AlignedOp<'_>) -> Result<Vec<i64>> {
    let (target, target_grown) = (op.ints("shape"), op.ints_grown("shape"));
    let (input, input_grown) = (op.input(0).shape(), op.input_grown(0).shape());
    let mut out = target.clone();
    let mut inferred = false;
    for i in 0..target.len() {
        if target[i] == target_grown[i] {
            continue;
        }
        if input.get(i) == Some(&(target[i] as usize)) && input_grown.get(i) == Some(&(target_grown[i] as usize)) {
            out[i] = 0;
        } else if !inferred {
            out[i] = -1;
            inferred = true;
        } else {
            return Err(format!(
                "reshape to {target:?} has several dims that change with the dynamic axes ({target:?} vs \
                 {target_grown:?}); ONNX can infer only one: reshape in two steps, or export with fewer dynamic axes"
            ));
        }
    }
    Ok(out)
}

/// An expand target for ONNX: dims that follow the dynamic axes become `1` where the input
/// already has them (ONNX's Expand broadcasts both ways).
fn expand_target(op: &AlignedOp<'_>) -> Result<Vec<i64>> {
    let (target, target_grown) = (op.ints("shape"), op.ints_grown("shape"));
    let (input, input_grown) = (op.input(0).shape(), op.input_grown(0).shape());
    let mut out = target.clone();
    for i in 0..target.len() {
        if target[i] == target_grown[i] {
            continue;
        }
        let j = i as isize - (target.len() as isize - input.len() as isize);
        let same = j >= 0 && input[j as usize] as i64 == target[i] && input_grown[j as usize] as i64 == target_grown[i];
        if !same {
            return Err(format!(
                "expand to {target:?} creates a dim that follows the dynamic axes from a dim of size 1, which a \
                 constant shape cannot say; rely on broadcasting in the op that consumes it, or export with fixed \
                 axes"
            ));
        }
        out[i] = 1;
    }
    Ok(out)
}
