//! One traced op as both traces recorded it: the op [`convert`](crate::convert) turns into
//! ONNX nodes.
//!
//! The export traces the forward twice (on the example input, and with every dynamic axis
//! grown by one); ops at the same position in the two traces are the same op. Attributes
//! are read from the example's record; the grown record is read only where a value follows
//! the dynamic axes (a reshape target, an input shape). This module depends on nn-core
//! only, so that [`graph`](crate::graph) and [`convert`](crate::convert) can both use it.

use nn_core::trace::{Attr, TracedOp};
use nn_core::{DType, Tensor};

/// One op of the forward: its record in the example's trace, and the record at the same
/// position in the trace with the dynamic axes grown.
pub(crate) struct AlignedOp<'t> {
    /// The record from the trace of the example input.
    pub(crate) example: &'t TracedOp,
    /// The record from the trace with every dynamic axis grown by one.
    pub(crate) grown: &'t TracedOp,
}

impl AlignedOp<'_> {
    /// The attribute `name` of the example's record.
    pub(crate) fn attr(&self, name: &str) -> Option<&Attr> {
        self.example.attr(name)
    }

    /// The int attribute `name` (a missing or other attribute is a bug in the tracer's
    /// record of the op).
    pub(crate) fn int(&self, name: &str) -> i64 {
        match self.example.attr(name) {
            Some(Attr::Int(v)) => *v,
            other => unreachable!("op `{}`: attribute `{name}` is {other:?}, not an int", self.example.name),
        }
    }

    /// The int-list attribute `name` of the example's record.
    pub(crate) fn ints(&self, name: &str) -> Vec<i64> {
        ints(self.example, name)
    }

    /// The int-list attribute `name` of the grown record (a shape that follows the dynamic
    /// axes).
    pub(crate) fn ints_grown(&self, name: &str) -> Vec<i64> {
        ints(self.grown, name)
    }

    /// The float attribute `name`.
    pub(crate) fn float(&self, name: &str) -> f64 {
        match self.example.attr(name) {
            Some(Attr::Float(v)) => *v,
            other => unreachable!("op `{}`: attribute `{name}` is {other:?}, not a float", self.example.name),
        }
    }

    /// The bool attribute `name`.
    pub(crate) fn flag(&self, name: &str) -> bool {
        match self.example.attr(name) {
            Some(Attr::Bool(v)) => *v,
            other => unreachable!("op `{}`: attribute `{name}` is {other:?}, not a flag", self.example.name),
        }
    }

    /// Operand `i` in the example's trace.
    pub(crate) fn input(&self, i: usize) -> &Tensor {
        &self.example.inputs[i]
    }

    /// Operand `i` in the grown trace.
    pub(crate) fn input_grown(&self, i: usize) -> &Tensor {
        &self.grown.inputs[i]
    }

    /// The dtype of the first operand (`F32` for an op without operands): the dtype of
    /// the constants a rule adds next to it.
    pub(crate) fn input_dtype(&self) -> DType {
        self.example.inputs.first().map(|t| t.dtype()).unwrap_or(DType::F32)
    }

    /// The result in the example's trace.
    pub(crate) fn output(&self) -> &Tensor {
        self.example.output.as_ref().expect("traced ops have a result")
    }
}

/// The int-list attribute `name` of `op`.
fn ints(op: &TracedOp, name: &str) -> Vec<i64> {
    match op.attr(name) {
        Some(Attr::Ints(v)) => v.clone(),
        other => unreachable!("op `{}`: attribute `{name}` is {other:?}, not ints", op.name),
    }
}
