//! # nn-onnx
//!
//! Exports an nn model to [ONNX](https://onnx.ai) for deployment (onnxruntime, TensorRT,
//! tract, browsers): PyTorch's `torch.onnx.export`, from a traced forward pass.
//!
//! ```
//! use nn_core::prelude::*;
//! use nn_layers::{Linear, ReLU, Sequential};
//!
//! let mut net = Sequential::new().add(Linear::new(4, 8)).add(ReLU::new()).add(Linear::new(8, 3));
//! net.eval();
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("mlp.onnx");
//! nn_onnx::export(&net, &Tensor::zeros(&[1, 4]), &path)?;
//!
//! // Opset 17, a dynamic batch dim, and the weights under their state-dict keys:
//! let summary = nn_onnx::inspect(&std::fs::read(&path)?)?;
//! assert_eq!(summary.opset, 17);
//! assert_eq!(summary.inputs, [("input".to_string(), vec!["batch".to_string(), "4".to_string()])]);
//! assert_eq!(summary.initializers, ["0.weight", "0.bias", "2.weight", "2.bias"]);
//! assert_eq!(summary.op_types, ["Gemm", "Relu", "Gemm"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## How it works
//!
//! [`export`] runs the model's forward on the example input with nn-core's tracer on
//! ([`nn_core::trace`]): every tensor op records its name, attributes, operand and result
//! tensors, and the module it ran in. User-written forward code is traced like built-in
//! layers, since the tracer sits in the tensor ops themselves (matmul, reshape, permute,
//! narrow, cat, broadcasting arithmetic, softmax, ...). Layers export as what their forward
//! runs: `Linear` as `Gemm`, `Conv2d` as `Conv`, `LayerNorm` as `LayerNormalization`,
//! `BatchNorm` (in eval mode) as `BatchNormalization`, `MultiheadAttention` as its matmuls
//! and softmax, `Dropout` in eval mode as nothing.
//!
//! The forward is traced twice: once on the example input and once with every dynamic
//! axis grown by one. The two traces must run the same ops; attributes that differ are
//! shapes that follow the dynamic axes (a `reshape` to `[batch, 784]`), written as `0`
//! (copy the input's dim) or `-1` (infer) so the graph accepts any batch size. Tensors the
//! forward builds from constants (a causal mask) are folded into the graph, and must be
//! equal in both traces.
//!
//! **Why not the meta device.** Tracing on [`Device::Meta`](nn_core::Device::Meta) would
//! need no compute, but the parameters of the model to export hold values (they become the
//! initializers), and an nn op never mixes devices; moving the model to Meta would need a
//! `&mut` model and lose its weights. So the traces run on the model's own device: two
//! forward passes on the example input (batch 1 is enough), which also give the values of
//! the constants the forward builds.
//!
//! ## Nothing fails silently
//!
//! Anything the graph cannot express is an [`Error::Unsupported`] naming the op and the
//! module path (`cannot export \`max_pool2d_with_indices\` in module \`features.2\`
//! (MaxPool2d): ...`), and no file is written: dropout or batch norm in training mode,
//! in-place updates, values read into Rust (`to_vec`, `item`) from tensors that depend on
//! the input, custom autograd ops, constants that depend on the batch size, control flow
//! that changes with it. Files are written atomically ([`nn_core::io::atomic_write`]).
//! The model is left as it was, the export failed or not: what its forwards write (a
//! batch norm in training mode updates its running statistics before the export refuses
//! it) is put back.
//!
//! Limits: the recorder is per thread, so the forward must run its tensor ops on the
//! calling thread (nn's kernels may use several threads inside one op; a forward that
//! spawns threads of its own is refused: a tensor made on another thread while the
//! forward runs is an error naming the op that uses it, never a constant). Control flow is checked between the two
//! traces only: a branch on the batch size that takes the same side for both sizes
//! traced (batch 2 and 3 for an example of batch 2) is not seen; export with an example
//! of batch 1 to be safe. Initializers are the parameters and buffers the graph uses
//! (`num_batches_tracked` is not one).
//!
//! ## Several inputs, names, opset, dynamic axes
//!
//! [`export_with`] takes [`ExportConfig`]; models with several inputs take a tuple
//! (`(Tensor, Tensor)` for `Bilinear`), or `AttentionInput` / `EncoderInput` for the
//! attention layers: see [`ExportInput`].

// Modules, each depending only on those listed after it: `model` (checks the config, runs
// the two traced forwards, declares the graph's inputs and outputs) -> `graph` (pairs the
// traces' ops, folds constants, refuses what cannot be exported) -> `convert` (the ONNX
// nodes of one op) -> `op` (one op in both traces) and `nodes` (the node list) -> `proto`
// (protobuf messages) -> `onnx_pb` (generated).
mod convert;
mod graph;
mod model;
mod nodes;
#[allow(missing_docs, clippy::all, clippy::pedantic, rustdoc::all)]
mod onnx_pb;
mod op;
mod proto;

use std::path::Path;

use nn_core::{Forward, Module, Tensor};
use prost::Message;

use crate::onnx_pb as pb;

/// Errors of [`export`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An op, or an op in a mode, that the ONNX graph cannot express.
    #[error("cannot export `{op}` in {module}: {reason}")]
    Unsupported {
        /// The op (`Tensor` method name).
        op: String,
        /// The module it ran in (`module \`fc1\` (Linear)`).
        module: String,
        /// Why, and what to do instead.
        reason: String,
    },
    /// An [`ExportConfig`] that does not fit the model or the example input.
    #[error("invalid export config: {0}")]
    Config(String),
    /// A model or input that cannot be exported as a whole.
    #[error("cannot export: {0}")]
    Model(String),
    /// Writing the file failed (the previous file, if any, is untouched).
    #[error("writing the ONNX file failed: {0}")]
    Write(#[from] nn_core::Error),
    /// A file given to [`inspect`] is not an ONNX model.
    #[error("not an ONNX model: {0}")]
    Decode(#[from] prost::DecodeError),
}

/// The lowest opset written: `LayerNormalization` needs 17.
pub const MIN_OPSET: i64 = 17;
/// The highest opset written.
pub const MAX_OPSET: i64 = 21;

/// One dynamic axis of one input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamicAxis {
    /// The input (position in [`ExportInput::tensors`]).
    pub input: usize,
    /// The axis of that input.
    pub axis: usize,
    /// The symbolic name in the file (`"batch"`, `"seq"`); axes that share a name must
    /// have the same size.
    pub name: String,
}

/// Which input axes the exported graph leaves open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DynamicAxes {
    /// Axis 0 of every input, named `"batch"` (the default).
    #[default]
    Batch,
    /// None: every shape is fixed to the example's.
    Static,
    /// Exactly these.
    Custom(Vec<DynamicAxis>),
}

/// The configuration of [`export_with`]: opset, names, dynamic axes.
#[derive(Clone, Debug)]
pub struct ExportConfig {
    /// ONNX opset version, [`MIN_OPSET`]`..=`[`MAX_OPSET`] (default 17).
    pub opset: i64,
    /// Graph input names, one per input tensor (default `input`, or `input_0`, `input_1`,
    /// ... for several).
    pub input_names: Vec<String>,
    /// Graph output names, one per output tensor (default `output`, or `output_0`, ...).
    pub output_names: Vec<String>,
    /// Dynamic input axes (default: the batch axis 0 of every input).
    pub dynamic_axes: DynamicAxes,
}

impl Default for ExportConfig {
    fn default() -> Self {
        ExportConfig {
            opset: MIN_OPSET,
            input_names: Vec::new(),
            output_names: Vec::new(),
            dynamic_axes: DynamicAxes::Batch,
        }
    }
}

/// A model input made of tensors: what the exported graph takes as inputs.
pub trait ExportInput: Clone {
    /// The input tensors, in graph-input order.
    fn tensors(&self) -> Vec<Tensor>;
    /// The same input with its tensors replaced (same count and order as `tensors`).
    fn with_tensors(&self, tensors: Vec<Tensor>) -> Self;
}

/// A model output made of tensors: what the exported graph returns.
pub trait ExportOutput {
    /// The output tensors, in graph-output order.
    fn tensors(&self) -> Vec<Tensor>;
}

impl ExportInput for Tensor {
    fn tensors(&self) -> Vec<Tensor> {
        vec![self.clone()]
    }
    fn with_tensors(&self, mut tensors: Vec<Tensor>) -> Self {
        tensors.remove(0)
    }
}

impl ExportInput for (Tensor, Tensor) {
    fn tensors(&self) -> Vec<Tensor> {
        vec![self.0.clone(), self.1.clone()]
    }
    fn with_tensors(&self, t: Vec<Tensor>) -> Self {
        (t[0].clone(), t[1].clone())
    }
}

impl ExportInput for (Tensor, Tensor, Tensor) {
    fn tensors(&self) -> Vec<Tensor> {
        vec![self.0.clone(), self.1.clone(), self.2.clone()]
    }
    fn with_tensors(&self, t: Vec<Tensor>) -> Self {
        (t[0].clone(), t[1].clone(), t[2].clone())
    }
}

/// Query, key, value, then the masks that are present, in that order.
impl ExportInput for nn_layers::AttentionInput {
    fn tensors(&self) -> Vec<Tensor> {
        let mut v = vec![self.query.clone(), self.key.clone(), self.value.clone()];
        v.extend(self.key_padding_mask.clone());
        v.extend(self.attn_mask.clone());
        v
    }
    fn with_tensors(&self, t: Vec<Tensor>) -> Self {
        let mut it = t.into_iter();
        let mut next = || it.next().expect("one tensor per input");
        let mut out = self.clone();
        out.query = next();
        out.key = next();
        out.value = next();
        if out.key_padding_mask.is_some() {
            out.key_padding_mask = Some(next());
        }
        if out.attn_mask.is_some() {
            out.attn_mask = Some(next());
        }
        out
    }
}

/// The source, then the masks that are present.
impl ExportInput for nn_layers::EncoderInput {
    fn tensors(&self) -> Vec<Tensor> {
        let mut v = vec![self.src.clone()];
        v.extend(self.src_mask.clone());
        v.extend(self.src_key_padding_mask.clone());
        v
    }
    fn with_tensors(&self, t: Vec<Tensor>) -> Self {
        let mut it = t.into_iter();
        let mut out = self.clone();
        out.src = it.next().expect("one tensor per input");
        if out.src_mask.is_some() {
            out.src_mask = it.next();
        }
        if out.src_key_padding_mask.is_some() {
            out.src_key_padding_mask = it.next();
        }
        out
    }
}

impl ExportOutput for Tensor {
    fn tensors(&self) -> Vec<Tensor> {
        vec![self.clone()]
    }
}

impl ExportOutput for (Tensor, Tensor) {
    fn tensors(&self) -> Vec<Tensor> {
        vec![self.0.clone(), self.1.clone()]
    }
}

/// The output, then the attention weights when returned.
impl ExportOutput for (Tensor, Option<Tensor>) {
    fn tensors(&self) -> Vec<Tensor> {
        let mut v = vec![self.0.clone()];
        v.extend(self.1.clone());
        v
    }
}

/// Exports `model` with default [`ExportConfig`] (opset 17, dynamic batch axis 0) to an
/// ONNX file at `path`, written atomically. On any error no file is written.
///
/// # Panics
/// When the model's forward panics on `example` (a shape the model rejects).
pub fn export<M>(model: &M, example: &M::Input, path: impl AsRef<Path>) -> Result<(), Error>
where
    M: Forward + Module,
    M::Input: ExportInput,
    M::Output: ExportOutput,
{
    export_with(model, example, path, &ExportConfig::default())
}

/// [`export`] with a configuration.
///
/// # Panics
/// When the model's forward panics on `example` (a shape the model rejects).
pub fn export_with<M>(model: &M, example: &M::Input, path: impl AsRef<Path>, config: &ExportConfig) -> Result<(), Error>
where
    M: Forward + Module,
    M::Input: ExportInput,
    M::Output: ExportOutput,
{
    let bytes = to_bytes(model, example, config)?;
    nn_core::io::atomic_write(path, |f| std::io::Write::write_all(f, &bytes))?;
    Ok(())
}

/// The ONNX file [`export_with`] would write, as bytes.
///
/// # Panics
/// When the model's forward panics on `example` (a shape the model rejects).
pub fn to_bytes<M>(model: &M, example: &M::Input, config: &ExportConfig) -> Result<Vec<u8>, Error>
where
    M: Forward + Module,
    M::Input: ExportInput,
    M::Output: ExportOutput,
{
    Ok(crate::model::build(model, example, config)?.encode_to_vec())
}

/// A summary of an ONNX file, for checks: what [`export`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// The default-domain opset.
    pub opset: i64,
    /// Graph inputs: name and dims (a number, or a symbolic name such as `batch`).
    pub inputs: Vec<(String, Vec<String>)>,
    /// Graph outputs, as `inputs`.
    pub outputs: Vec<(String, Vec<String>)>,
    /// Initializer names, in file order.
    pub initializers: Vec<String>,
    /// Node op types in graph order, `Constant` nodes left out.
    pub op_types: Vec<String>,
}

/// Reads the summary of an ONNX file's bytes.
pub fn inspect(bytes: &[u8]) -> Result<Summary, Error> {
    let m = pb::ModelProto::decode(bytes)?;
    let g = m.graph.unwrap_or_default();
    let dims = |v: &pb::ValueInfoProto| -> (String, Vec<String>) {
        use pb::tensor_shape_proto::dimension::Value;
        let shape = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(pb::type_proto::Value::TensorType(t)) => t.shape.clone().unwrap_or_default().dim,
            _ => Vec::new(),
        };
        let d = shape
            .iter()
            .map(|d| match &d.value {
                Some(Value::DimValue(n)) => n.to_string(),
                Some(Value::DimParam(s)) => s.clone(),
                None => "?".into(),
            })
            .collect();
        (v.name.clone().unwrap_or_default(), d)
    };
    Ok(Summary {
        opset: m
            .opset_import
            .iter()
            .find(|o| o.domain.as_deref().unwrap_or("").is_empty())
            .and_then(|o| o.version)
            .unwrap_or(0),
        inputs: g.input.iter().map(dims).collect(),
        outputs: g.output.iter().map(dims).collect(),
        initializers: g.initializer.iter().map(|t| t.name.clone().unwrap_or_default()).collect(),
        op_types: g.node.iter().filter_map(|n| n.op_type.clone()).filter(|t| t != "Constant").collect(),
    })
}
