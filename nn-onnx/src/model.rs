//! Building the ONNX model for [`export_with`](crate::export_with): the config checked
//! against the example input, the two traced forwards, the graph with its inputs and
//! outputs declared, and the model put back as it was.
//!
//! This module depends on [`graph`] (which converts the traces) and [`proto`]; nothing in
//! the crate but the public functions of `lib.rs` depends on it.

use std::collections::HashMap;

use nn_core::{Forward, Module, Tensor};

use crate::onnx_pb as pb;
use crate::proto::{self, DimSpec};
use crate::{graph, DynamicAxes, DynamicAxis, Error, ExportConfig, ExportInput, ExportOutput, MAX_OPSET, MIN_OPSET};

/// The ONNX model of `model`'s forward on `example`, written as `config` asks.
pub(crate) fn build<M>(model: &M, example: &M::Input, config: &ExportConfig) -> Result<pb::ModelProto, Error>
where
    M: Forward + Module,
    M::Input: ExportInput,
    M::Output: ExportOutput,
{
    if !(MIN_OPSET..=MAX_OPSET).contains(&config.opset) {
        return Err(Error::Config(format!(
            "opset {} is not supported (nn-onnx writes opsets {MIN_OPSET} to {MAX_OPSET})",
            config.opset
        )));
    }
    let inputs = example.tensors();
    let input_names = io_names(&config.input_names, inputs.len(), "input")?;
    let axes = checked_axes(&config.dynamic_axes, &inputs, &input_names)?;
    let info = model_info(model)?;
    // Whatever the two forwards write into the model (a batch norm in training mode moving
    // its running statistics before the export refuses it) is put back when this drops:
    // export, failed or not, leaves the model as it found it.
    let _restore = Restore::new(model);
    for t in &inputs {
        if t.device() != nn_core::Device::Cpu {
            return Err(Error::Model(format!(
                "the example input of shape {:?} is on {}; exporting traces on the CPU",
                t.shape(),
                t.device()
            )));
        }
    }

    // The second trace: every dynamic axis grown by one (repeating its first slice).
    let mut grown = inputs.clone();
    for d in &axes {
        let t = &grown[d.input];
        grown[d.input] = Tensor::cat(&[t, &t.narrow(d.axis, 0, 1)], d.axis);
    }
    let example_grown = example.with_tensors(grown.clone());
    let (out, trace) = nn_core::trace::trace(|| model.forward(example));
    let (out_grown, trace_grown) = nn_core::trace::trace(|| model.forward(&example_grown));
    let (out, out_grown) = (out.tensors(), out_grown.tensors());
    if out.iter().any(|t| trace.made_elsewhere(t)) || out_grown.iter().any(|t| trace_grown.made_elsewhere(t)) {
        return Err(Error::Model(
            "the forward returns a tensor computed on another thread, where the tracer cannot see the ops; run \
             that computation on the forward's own thread"
                .to_string(),
        ));
    }
    let output_names = io_names(&config.output_names, out.len(), "output")?;

    let mut g = graph::Builder::new(&info, config.opset);
    for (t, n) in inputs.iter().zip(&input_names) {
        g.add_input(t, n);
    }
    g.add_trace(&trace, &trace_grown)?;

    let mut outputs = Vec::new();
    for (k, ((t, t_grown), name)) in out.iter().zip(&out_grown).zip(&output_names).enumerate() {
        let value = g.output_value(t, t_grown)?;
        let taken = out[..k].iter().any(|p| g.resolve(p).id() == g.resolve(t).id());
        if g.writer.is_node_output(&value) && !taken && !input_names.contains(&value) {
            g.writer.rename(&value, name);
        } else {
            g.writer.set_scope("");
            let id = g.writer.node("Identity", &[&value], vec![]);
            g.writer.rename(&id, name);
        }
        let dims = t
            .shape()
            .iter()
            .zip(t_grown.shape())
            .enumerate()
            .map(|(i, (&dim, &dim_grown))| {
                if dim == dim_grown {
                    return DimSpec::Fixed(dim);
                }
                // Name it after the input axis that moves the same way, if there is one.
                let same = axes
                    .iter()
                    .find(|d| inputs[d.input].shape()[d.axis] == dim && grown[d.input].shape()[d.axis] == dim_grown);
                DimSpec::Named(same.map_or_else(|| format!("{name}_dim{i}"), |d| d.name.clone()))
            })
            .collect::<Vec<_>>();
        outputs.push(proto::value_info(name, t.dtype(), &dims)?);
    }
    let graph_inputs = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let dims: Vec<DimSpec> = (0..t.rank())
                .map(|ax| match axes.iter().find(|d| d.input == i && d.axis == ax) {
                    Some(d) => DimSpec::Named(d.name.clone()),
                    None => DimSpec::Fixed(t.shape()[ax]),
                })
                .collect();
            proto::value_info(&input_names[i], t.dtype(), &dims)
        })
        .collect::<Result<Vec<_>, _>>()?;

    let graph = pb::GraphProto {
        name: Some(model.type_name().to_string()),
        node: std::mem::take(&mut g.writer.nodes),
        initializer: std::mem::take(&mut g.initializers),
        input: graph_inputs,
        output: outputs,
        ..Default::default()
    };
    Ok(pb::ModelProto {
        ir_version: Some(ir_version(config.opset)),
        opset_import: vec![pb::OperatorSetIdProto { domain: Some(String::new()), version: Some(config.opset) }],
        producer_name: Some("nn-onnx".into()),
        producer_version: Some(env!("CARGO_PKG_VERSION").into()),
        graph: Some(graph),
        ..Default::default()
    })
}

/// The dynamic axes `dynamic_axes` names for `inputs`, each checked: the input and axis
/// exist, the example's axis is non-empty, and no axis is listed twice.
fn checked_axes(
    dynamic_axes: &DynamicAxes,
    inputs: &[Tensor],
    input_names: &[String],
) -> Result<Vec<DynamicAxis>, Error> {
    let axes: Vec<DynamicAxis> = match dynamic_axes {
        DynamicAxes::Batch => (0..inputs.len())
            .filter(|&i| inputs[i].rank() > 0)
            .map(|i| DynamicAxis { input: i, axis: 0, name: "batch".into() })
            .collect(),
        DynamicAxes::Static => Vec::new(),
        DynamicAxes::Custom(v) => v.clone(),
    };
    for d in &axes {
        let Some(t) = inputs.get(d.input) else {
            return Err(Error::Config(format!(
                "dynamic axis `{}` names input {}, but the model takes {} input tensor(s)",
                d.name,
                d.input,
                inputs.len()
            )));
        };
        if d.axis >= t.rank() || t.shape()[d.axis] == 0 {
            return Err(Error::Config(format!(
                "dynamic axis `{}` is axis {} of input {} (`{}`), whose example has shape {:?}: the axis must \
                 exist and be non-empty",
                d.name,
                d.axis,
                d.input,
                input_names[d.input],
                t.shape()
            )));
        }
        if axes.iter().filter(|o| o.input == d.input && o.axis == d.axis).count() > 1 {
            return Err(Error::Config(format!("axis {} of input {} is listed twice", d.axis, d.input)));
        }
    }
    Ok(axes)
}

/// The IR version that goes with an opset (ONNX's versioning table).
fn ir_version(opset: i64) -> i64 {
    match opset {
        ..=18 => 8,
        19 | 20 => 9,
        _ => 10,
    }
}

/// The graph input or output names: `given`, checked (one per tensor, non-empty, distinct),
/// or `stem` / `stem_0`, `stem_1`, ... for `n` tensors.
fn io_names(given: &[String], n: usize, stem: &str) -> Result<Vec<String>, Error> {
    if given.is_empty() {
        return Ok(if n == 1 { vec![stem.to_string()] } else { (0..n).map(|i| format!("{stem}_{i}")).collect() });
    }
    if given.len() != n {
        return Err(Error::Config(format!("{} {stem} names given for {n} {stem} tensor(s): {given:?}", given.len())));
    }
    for (i, a) in given.iter().enumerate() {
        if a.is_empty() || given[..i].contains(a) {
            return Err(Error::Config(format!("{stem} name `{a}` is empty or repeated")));
        }
    }
    Ok(given.to_vec())
}

/// The parameter names and module paths of `model`, refusing a model with uninitialized
/// lazy modules or weights on the meta device.
fn model_info<M: Module>(model: &M) -> Result<graph::ModelInfo, Error> {
    if let Some((path, m)) = model.first_uninitialized() {
        let at = if path.is_empty() { String::new() } else { format!(" `{path}`") };
        return Err(Error::Model(format!(
            "the lazy module{at} ({}) has no parameters until its first forward: run one forward pass first, so \
             that its weights are exported as named initializers",
            m.type_name()
        )));
    }
    let mut params = HashMap::new();
    let named = model.named_parameters().into_iter().map(|(n, p)| (n, (*p).clone()));
    for (name, t) in named.chain(model.named_buffers()) {
        if t.device() == nn_core::Device::Meta {
            return Err(Error::Model(format!(
                "`{name}` is on the meta device: it has no values to write; materialise or load the weights first"
            )));
        }
        params.entry(t.id()).or_insert(name);
    }
    let modules = model
        .named_modules()
        .into_iter()
        .filter_map(|(path, m)| m.base().map(|b| (b.trace_key(), (path, m.type_name()))))
        .collect();
    Ok(graph::ModelInfo { params, modules })
}

/// The parameters and buffers of a model as they were before the export's forwards: each
/// handle, its version and a snapshot of its values (copy-on-write: it costs a copy only
/// of what a forward writes).
struct Restore(Vec<(Tensor, u64, Tensor)>);

impl Restore {
    fn new<M: Module>(model: &M) -> Self {
        let params = model.parameters().into_iter().map(|p| (*p).clone());
        let buffers = model.named_buffers().into_iter().map(|(_, b)| b);
        Restore(params.chain(buffers).map(|t| (t.version(), t.snapshot(), t)).map(|(v, s, t)| (t, v, s)).collect())
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        for (t, version, was) in &self.0 {
            // A tensor whose buffer was replaced (another shape, dtype or device) is left
            // alone: copying into it could panic while a forward's panic unwinds.
            let same = t.shape() == was.shape() && t.dtype() == was.dtype() && t.device() == was.device();
            if t.version() != *version && same {
                nn_core::no_grad(|| t.copy_(was));
            }
        }
    }
}
