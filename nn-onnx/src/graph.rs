//! From two traces of one forward (at two sizes of the dynamic axes) to an ONNX graph.
//!
//! Every op of the first trace is paired with the op at the same position in the second;
//! the two must agree on names and on every attribute except shapes that follow the
//! dynamic axes (a `reshape` to `[batch, 784]`), which become `0` (copy the input's dim)
//! or `-1` (infer) in the graph. Tensors the forward builds itself (an attention mask) are
//! compared value by value between the two traces: one that changes with the dynamic axes
//! cannot be a constant of the graph, and is an error.

use std::collections::{HashMap, HashSet};

use nn_core::trace::{Attr, ModuleKey, OpKind, Trace, TracedOp};
use nn_core::{Tensor, TensorId};

use crate::onnx_pb as pb;
use crate::proto;
use crate::Error;

/// Where values come from, for the parameters and module paths of one model.
pub(crate) struct ModelInfo {
    /// Parameter and buffer ids to their dotted names (state-dict keys).
    pub(crate) params: HashMap<TensorId, String>,
    /// Module keys to `(path, type name)`.
    pub(crate) modules: HashMap<ModuleKey, (String, &'static str)>,
}

impl ModelInfo {
    /// "module `fc1` (Linear)", for error messages.
    pub(crate) fn describe(&self, key: Option<ModuleKey>) -> String {
        match key.and_then(|k| self.modules.get(&k)) {
            Some((p, ty)) if p.is_empty() => format!("the top-level module ({ty})"),
            Some((p, ty)) => format!("module `{p}` ({ty})"),
            None => "code outside any module's forward".to_string(),
        }
    }

    /// The path used in node names: `/fc1` or `` for the root.
    fn path(&self, key: Option<ModuleKey>) -> String {
        match key.and_then(|k| self.modules.get(&k)) {
            Some((p, _)) if !p.is_empty() => format!("/{p}"),
            _ => String::new(),
        }
    }
}

/// How a value of the trace is known to the graph.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Depends on a graph input.
    Dynamic,
    /// A parameter or buffer, or computed from them (and constants) only.
    Param,
    /// Built by the forward from constants only; its value is known.
    Const,
}

/// The graph under construction.
pub(crate) struct Builder<'a> {
    info: &'a ModelInfo,
    pub(crate) opset: i64,
    pub(crate) nodes: Vec<pb::NodeProto>,
    pub(crate) initializers: Vec<pb::TensorProto>,
    /// ONNX value name of each trace tensor that has one.
    names: HashMap<TensorId, String>,
    origin: HashMap<TensorId, Origin>,
    /// Constants not yet written as `Constant` nodes (emitted when first consumed).
    pending_const: HashMap<TensorId, Tensor>,
    /// Tensors a traced op created besides its result: op index.
    internal: HashMap<TensorId, usize>,
    consumed: HashSet<TensorId>,
    /// The tensors an op read the values of (views read none), to find an in-place update
    /// through an alias of one; `read` holds their ids.
    used: Vec<Tensor>,
    read: HashSet<TensorId>,
    /// Results of layout-only ops (`contiguous`, `detach`): the tensor they alias.
    aliases: HashMap<TensorId, Tensor>,
    counter: usize,
    /// Path prefix for the nodes of the op being converted.
    scope: String,
}

/// The pair of ops being converted: the first trace's, and its twin in the second.
pub(crate) struct OpPair<'t> {
    pub(crate) a: &'t TracedOp,
    pub(crate) b: &'t TracedOp,
}

impl OpPair<'_> {
    pub(crate) fn attr(&self, name: &str) -> Option<&Attr> {
        self.a.attr(name)
    }

    pub(crate) fn int(&self, name: &str) -> i64 {
        match self.a.attr(name) {
            Some(Attr::Int(v)) => *v,
            other => unreachable!("op `{}`: attribute `{name}` is {other:?}, not an int", self.a.name),
        }
    }

    pub(crate) fn ints(&self, name: &str) -> Vec<i64> {
        match self.a.attr(name) {
            Some(Attr::Ints(v)) => v.clone(),
            other => unreachable!("op `{}`: attribute `{name}` is {other:?}, not ints", self.a.name),
        }
    }

    pub(crate) fn ints_b(&self, name: &str) -> Vec<i64> {
        match self.b.attr(name) {
            Some(Attr::Ints(v)) => v.clone(),
            other => unreachable!("op `{}`: attribute `{name}` is {other:?}, not ints", self.b.name),
        }
    }

    pub(crate) fn float(&self, name: &str) -> f64 {
        match self.a.attr(name) {
            Some(Attr::Float(v)) => *v,
            other => unreachable!("op `{}`: attribute `{name}` is {other:?}, not a float", self.a.name),
        }
    }

    pub(crate) fn flag(&self, name: &str) -> bool {
        match self.a.attr(name) {
            Some(Attr::Bool(v)) => *v,
            other => unreachable!("op `{}`: attribute `{name}` is {other:?}, not a flag", self.a.name),
        }
    }

    pub(crate) fn input(&self, i: usize) -> &Tensor {
        &self.a.inputs[i]
    }

    pub(crate) fn input_b(&self, i: usize) -> &Tensor {
        &self.b.inputs[i]
    }

    pub(crate) fn output(&self) -> &Tensor {
        self.a.output.as_ref().expect("traced ops have a result")
    }
}

/// What converting an op gives.
pub(crate) enum Converted {
    /// The op's result is this ONNX value.
    Value(String),
    /// The op returns its first input unchanged (`contiguous`, `detach`, dropout in eval).
    Alias,
}

impl<'a> Builder<'a> {
    pub(crate) fn new(info: &'a ModelInfo, opset: i64) -> Self {
        Builder {
            info,
            opset,
            nodes: Vec::new(),
            initializers: Vec::new(),
            names: HashMap::new(),
            origin: HashMap::new(),
            pending_const: HashMap::new(),
            internal: HashMap::new(),
            consumed: HashSet::new(),
            used: Vec::new(),
            read: HashSet::new(),
            aliases: HashMap::new(),
            counter: 0,
            scope: String::new(),
        }
    }

    /// Declares a graph input.
    pub(crate) fn add_input(&mut self, t: &Tensor, name: &str) {
        self.names.insert(t.id(), name.to_string());
        self.origin.insert(t.id(), Origin::Dynamic);
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

    /// The ONNX value of trace tensor `t` (`b` is its twin in the second trace), writing
    /// the initializer or constant it needs on first use.
    fn value_of(&mut self, t: &Tensor, b: &Tensor, op: &TracedOp) -> Result<String, Error> {
        let id = t.id();
        if let Some(c) = self.pending_const.remove(&id) {
            let name = self.const_tensor(&c)?;
            self.names.insert(id, name);
        }
        if let Some(n) = self.names.get(&id) {
            return Ok(n.clone());
        }
        if let Some(&k) = self.internal.get(&id) {
            return Err(Error::Unsupported {
                op: op.name.to_string(),
                module: self.info.describe(op.module),
                reason: format!(
                    "its input of shape {:?} is a second result or an intermediate of op #{k}, which the graph \
                     cannot name (ops with several results such as `max_dim` or `max_pool2d_with_indices` export \
                     only through their first result)",
                    t.shape()
                ),
            });
        }
        if let Some(key) = self.info.params.get(&id) {
            let key = key.clone();
            self.initializers.push(proto::tensor(&key, t)?);
            self.names.insert(id, key.clone());
            self.origin.insert(id, Origin::Param);
            return Ok(key);
        }
        // A tensor the forward built from nothing traced: it must not change with the
        // dynamic axes.
        if !same_values(t, b) {
            return Err(Error::Unsupported {
                op: op.name.to_string(),
                module: self.info.describe(op.module),
                reason: format!(
                    "an input built inside the forward (shape {:?} for the example, {:?} with the dynamic axes grown) \
                     changes with the dynamic axes or between runs, so it cannot be a constant of the graph; \
                     derive it from the input with tensor ops (e.g. `zeros_like`, `narrow`, `expand`) or export \
                     with fixed axes",
                    t.shape(),
                    b.shape()
                ),
            });
        }
        let name = self.const_tensor(t)?;
        self.names.insert(id, name.clone());
        self.origin.insert(id, Origin::Const);
        Ok(name)
    }

    fn origin_of(&self, t: &Tensor) -> Origin {
        match self.origin.get(&t.id()) {
            Some(o) => *o,
            None if self.info.params.contains_key(&t.id()) => Origin::Param,
            None => Origin::Const,
        }
    }

    fn unsupported(&self, op: &TracedOp, reason: impl Into<String>) -> Error {
        Error::Unsupported { op: op.name.to_string(), module: self.info.describe(op.module), reason: reason.into() }
    }

    /// Converts the ops of two aligned traces.
    pub(crate) fn add_trace(&mut self, a: &Trace, b: &Trace) -> Result<(), Error> {
        for t in [a, b] {
            self.refuse_foreign(t)?;
        }
        let (a, b) = (&self.strip_aliases(a), &self.strip_aliases(b));
        if let Some(i) = (0..a.ops.len().max(b.ops.len()))
            .find(|&i| a.ops.get(i).map(|o| (o.name, o.kind)) != b.ops.get(i).map(|o| (o.name, o.kind)))
        {
            let at = |t: &Trace| match t.ops.get(i) {
                Some(o) => format!("`{}` in {}", o.name, self.info.describe(o.module)),
                None => "the end of the forward".to_string(),
            };
            return Err(Error::Model(format!(
                "the forward runs different ops for the example input and for the input with the dynamic axes \
                 grown by one (op #{i}: {} vs {}): control flow that depends on those sizes cannot be exported; \
                 export with fixed axes (`DynamicAxes::Static`) or make the forward independent of them",
                at(a),
                at(b)
            )));
        }
        for (i, (oa, ob)) in a.ops.iter().zip(&b.ops).enumerate() {
            self.add_op(OpPair { a: oa, b: ob })?;
            if let Some(out) = &oa.output {
                // A second result or an intermediate has its op's origin (the indices of a
                // `max_dim` over the input depend on the input), for what Rust code does
                // with it (an in-place write from it, below).
                let origin = self.origin_of(out);
                for id in &oa.created {
                    if *id != out.id() {
                        self.internal.insert(*id, i);
                        self.origin.entry(*id).or_insert(origin);
                    }
                }
            }
        }
        Ok(())
    }

    /// Drops the ops that return their input's values unchanged and depend on the layout,
    /// not the values (`contiguous`, `detach`) (`contiguous` copies only non-contiguous inputs, so it may run for one
    /// batch size and not the other): their results become aliases of their inputs.
    fn strip_aliases(&mut self, t: &Trace) -> Trace {
        let mut ops = Vec::with_capacity(t.ops.len());
        for op in &t.ops {
            let mut op = op.clone();
            for i in op.inputs.iter_mut() {
                while let Some(src) = self.aliases.get(&i.id()) {
                    *i = src.clone();
                }
            }
            // Not `to_device`: it is recorded only where it copies (to another device), and
            // a copy of a constant must keep its own values. As an alias, a write into its
            // source after the copy reached the exported constant; kept, it folds into a
            // constant of its own values (or, from the input or a parameter, converts to an
            // alias: neither can be written).
            let alias = matches!((op.kind, op.name), (OpKind::Untraced, "contiguous") | (OpKind::Traced, "detach"));
            match (&op.output, alias) {
                (Some(out), true) if op.inputs.len() == 1 => {
                    self.aliases.insert(out.id(), op.inputs[0].clone());
                }
                _ => ops.push(op),
            }
        }
        let mut out = t.clone();
        out.ops = ops;
        out
    }

    /// Refuses an op input made on another thread while the forward ran: the per-thread
    /// recorder did not see the ops that made it, and taking it for a constant would bake
    /// one run's values into the graph.
    fn refuse_foreign(&self, t: &Trace) -> Result<(), Error> {
        for op in &t.ops {
            if let Some(x) = op.inputs.iter().find(|x| t.made_elsewhere(x)) {
                return Err(Error::Unsupported {
                    op: op.name.to_string(),
                    module: self.info.describe(op.module),
                    reason: format!(
                        "its input of shape {:?} was computed on another thread during the forward, where the \
                         tracer cannot see the ops; run that computation on the forward's own thread",
                        x.shape()
                    ),
                });
            }
        }
        Ok(())
    }

    /// `t`, or the tensor it is an alias of.
    pub(crate) fn resolve(&self, t: &Tensor) -> Tensor {
        let mut t = t.clone();
        while let Some(src) = self.aliases.get(&t.id()) {
            t = src.clone();
        }
        t
    }

    fn add_op(&mut self, op: OpPair<'_>) -> Result<(), Error> {
        let a = op.a;
        match a.kind {
            OpKind::HostRead => {
                if self.origin_of(&a.inputs[0]) == Origin::Dynamic {
                    return Err(self.unsupported(
                        a,
                        "the forward reads values of a tensor that depends on the input into Rust (`to_vec`, \
                         `item`); what Rust code computes from them is invisible to an ONNX graph",
                    ));
                }
                return Ok(());
            }
            OpKind::InPlace => {
                let t = &a.inputs[0];
                // Through an alias too: a view of a used tensor writes into it.
                let seen = self.names.contains_key(&t.id())
                    || self.consumed.contains(&t.id())
                    || self.info.params.contains_key(&t.id())
                    || self.used.iter().any(|u| u.is_alias_of(t));
                if seen || self.origin.get(&t.id()) == Some(&Origin::Dynamic) {
                    return Err(self.unsupported(
                        a,
                        "in-place updates of parameters, buffers or values the graph uses cannot be exported \
                         (a graph has no mutable state); use the out-of-place op (`add` for `add_`), and call \
                         `model.eval()` so that layers stop updating running statistics",
                    ));
                }
                // A tensor the forward created, written from a value computed from the input:
                // the graph would hold the traced example's values as a constant in its place.
                // (From parameters and constants only, the values written are the ones the
                // graph must hold: a constant.)
                if a.inputs[1..].iter().any(|src| self.origin_of(&self.resolve(src)) == Origin::Dynamic) {
                    return Err(self.unsupported(
                        a,
                        "the forward writes a value computed from the input into a tensor it created; a graph has \
                         no mutable state, so the tensor would be exported as the example's constant values: build \
                         the value out of place (`cat`, `stack`, `where_`, or the op itself)",
                    ));
                }
                return Ok(());
            }
            OpKind::Traced | OpKind::Untraced => {}
        }
        let out = op.output().clone();
        // Attributes must agree between the traces, except shapes following the dynamic axes.
        for ((name, va), (_, vb)) in a.attrs.iter().zip(&op.b.attrs) {
            let shape_like = matches!((a.name, *name), ("reshape" | "expand", "shape"));
            let same_rank = matches!((va, vb), (Attr::Ints(x), Attr::Ints(y)) if x.len() == y.len());
            if va != vb && !(shape_like && same_rank) {
                return Err(self.unsupported(
                    a,
                    format!(
                        "its attribute `{name}` depends on the dynamic axes ({va:?} for the example input, {vb:?} \
                         with the dynamic axes grown by one); export with fixed axes or compute it from the input"
                    ),
                ));
            }
        }
        let origins: Vec<Origin> = a.inputs.iter().map(|t| self.origin_of(t)).collect();
        let dynamic = origins.contains(&Origin::Dynamic);
        let from_params = origins.contains(&Origin::Param);
        // A view reads no values: a write through it before any op reads them is
        // exported with the written values, as eager execution computes.
        let view = matches!(a.name, "reshape" | "permute" | "narrow" | "expand");
        for t in &a.inputs {
            self.consumed.insert(t.id());
            if !view && self.read.insert(t.id()) {
                self.used.push(t.clone());
            }
        }
        if !dynamic && (!from_params || !crate::convert::is_supported(a)) {
            // Constant folding: the value is known (the forward computed it). Values
            // computed from parameters stay nodes, so the weights keep their names.
            for (ta, tb) in a.inputs.iter().zip(&op.b.inputs) {
                if !self.names.contains_key(&ta.id())
                    && !self.pending_const.contains_key(&ta.id())
                    && !self.info.params.contains_key(&ta.id())
                    && !same_values(ta, tb)
                {
                    return Err(self.unsupported(
                        a,
                        format!(
                            "an input built inside the forward (shape {:?}) changes with the dynamic axes or between \
                             runs, so it cannot be a constant of the graph",
                            ta.shape()
                        ),
                    ));
                }
            }
            self.pending_const.insert(out.id(), out.clone());
            self.origin.insert(out.id(), Origin::Const);
            return Ok(());
        }
        let mut inputs = Vec::with_capacity(a.inputs.len());
        for (ta, tb) in a.inputs.iter().zip(&op.b.inputs) {
            inputs.push(self.value_of(ta, tb, a)?);
        }
        self.scope = self.info.path(a.module);
        let converted = crate::convert::convert(self, &op, &inputs).map_err(|reason| self.unsupported(a, reason))?;
        let name = match converted {
            Converted::Value(v) => v,
            Converted::Alias => inputs[0].clone(),
        };
        self.names.insert(out.id(), name);
        self.origin.insert(out.id(), if dynamic { Origin::Dynamic } else { Origin::Param });
        Ok(())
    }

    /// The ONNX value of a forward's result, writing what it needs.
    pub(crate) fn output_value(&mut self, t: &Tensor, b: &Tensor) -> Result<String, Error> {
        let (t, b) = (&self.resolve(t), &self.resolve(b));
        let fake = TracedOp {
            name: "output",
            kind: OpKind::Traced,
            attrs: Vec::new(),
            inputs: Vec::new(),
            output: None,
            created: Vec::new(),
            module: None,
        };
        self.value_of(t, b, &fake)
    }

    /// Whether value `name` is the output of a node (not an input or initializer).
    pub(crate) fn is_node_output(&self, name: &str) -> bool {
        self.nodes.iter().any(|n| n.output.iter().any(|o| o == name))
    }

    /// Sets the path prefix of the nodes added next.
    pub(crate) fn set_scope(&mut self, scope: &str) {
        self.scope = scope.to_string();
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

/// Whether two tensors have the same shape, dtype and values (bit for bit).
fn same_values(a: &Tensor, b: &Tensor) -> bool {
    if a.id() == b.id() {
        return true;
    }
    if a.shape() != b.shape() || a.dtype() != b.dtype() {
        return false;
    }
    if a.device() != nn_core::Device::Cpu || b.device() != nn_core::Device::Cpu {
        return a.device() == b.device();
    }
    match a.dtype() {
        nn_core::DType::I64 => a.to_vec_of::<i64>() == b.to_vec_of::<i64>(),
        nn_core::DType::Bool => a.to_vec_of::<bool>() == b.to_vec_of::<bool>(),
        _ => {
            let (x, y) = (a.to_vec_of::<f64>(), b.to_vec_of::<f64>());
            x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits())
        }
    }
}
