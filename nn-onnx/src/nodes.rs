//! The node list of the graph under construction: what a conversion rule writes.
//!
//! [`NodeWriter`] names and appends nodes (under the module path of the op being converted)
//! and writes constants. It knows nothing of traces: [`convert`](crate::convert) writes
//! through it, and [`graph`](crate::graph) owns one. This module depends on [`proto`]
//! only.

use nn_core::Tensor;

use crate::onnx_pb as pb;
use crate::proto;
use crate::Error;

/// Appends the graph's nodes, each named after its scope, op type and position.
pub(crate) struct NodeWriter {
    /// The opset the graph is written for (a few ops changed form in opset 18).
    pub(crate) opset: i64,
    /// The nodes written so far, in graph order.
    pub(crate) nodes: Vec<pb::NodeProto>,
    /// Nodes written so far: the suffix that keeps node names unique.
    counter: usize,
    /// Path prefix for the nodes of the op being converted (`/fc1`, or empty at the root).
    scope: String,
}

impl NodeWriter {
    /// An empty node list for `opset`.
    pub(crate) fn new(opset: i64) -> Self {
        NodeWriter { opset, nodes: Vec::new(), counter: 0, scope: String::new() }
    }

    /// Sets the path prefix of the nodes added next.
    pub(crate) fn set_scope(&mut self, scope: &str) {
        self.scope = scope.to_string();
    }

    /// Adds a node `op_type(inputs) -> output` in the current scope; returns the output.
    pub(crate) fn node(&mut self, op_type: &str, inputs: &[&str], attrs: Vec<pb::AttributeProto>) -> String {
        let name = format!("{}/{op_type}_{}", self.scope, self.counter);
        self.counter += 1;
        let out = format!("{name}_output_0");
        self.nodes.push(pb::NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![out.clone()],
            name: Some(name),
            op_type: Some(op_type.to_string()),
            attribute: attrs,
            ..Default::default()
        });
        out
    }

    /// A `Constant` node holding `value`.
    pub(crate) fn constant(&mut self, value: pb::TensorProto) -> String {
        self.node("Constant", &[], vec![proto::attr::tensor("value", value)])
    }

    /// A 1-D `int64` constant (shapes, axes, slice bounds).
    pub(crate) fn const_i64(&mut self, v: &[i64]) -> String {
        self.constant(proto::i64s(v))
    }

    /// A 0-d constant of `dtype`.
    pub(crate) fn const_scalar(&mut self, v: f64, dtype: nn_core::DType) -> Result<String, Error> {
        Ok(self.constant(proto::scalar(v, dtype)?))
    }

    /// A constant with `t`'s values.
    pub(crate) fn const_tensor(&mut self, t: &Tensor) -> Result<String, Error> {
        let mut p = proto::tensor("", t)?;
        p.name = None;
        Ok(self.constant(p))
    }

    /// Whether value `name` is the output of a node (not an input or initializer).
    pub(crate) fn is_node_output(&self, name: &str) -> bool {
        self.nodes.iter().any(|n| n.output.iter().any(|o| o == name))
    }

    /// Renames value `from` to `to` everywhere.
    pub(crate) fn rename(&mut self, from: &str, to: &str) {
        for n in &mut self.nodes {
            for s in n.input.iter_mut().chain(n.output.iter_mut()) {
                if s == from {
                    *s = to.to_string();
                }
            }
        }
    }
}
