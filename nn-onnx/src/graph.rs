//! From two traces of one forward (at two sizes of the dynamic axes) to an ONNX graph.
//!
//! Every op of the first trace is paired with the op at the same position in the second;
//! the two must agree on names and on every attribute except shapes that follow the
//! dynamic axes (a `reshape` to `[batch, 784]`), which become `0` (copy the input's dim)
//! or `-1` (infer) in the graph. Tensors the forward builds itself (an attention mask) are
//! compared value by value between the two traces: one that changes with the dynamic axes
//! cannot be a constant of the graph, and is an error.
//!
//! Dependencies run one way: this module decides, op by op, whether a value is folded into
//! a constant, refused, or converted, and calls [`convert`] for the nodes of a converted
//! op. `convert` sees only the op ([`AlignedOp`]) and the node list ([`NodeWriter`]), never
//! this module's [`Builder`].

use std::collections::{HashMap, HashSet};

use nn_core::trace::{Attr, ModuleKey, OpKind, Trace, TracedOp};
use nn_core::{Tensor, TensorId};

use crate::convert::{self, Converted};
use crate::nodes::NodeWriter;
use crate::onnx_pb as pb;
use crate::op::AlignedOp;
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
    /// The nodes written so far.
    pub(crate) writer: NodeWriter,
    /// The parameters and buffers the graph uses, under their state-dict keys.
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
}

impl<'a> Builder<'a> {
    /// An empty graph of `info`'s model, written for `opset`.
    pub(crate) fn new(info: &'a ModelInfo, opset: i64) -> Self {
        Builder {
            info,
            writer: NodeWriter::new(opset),
            initializers: Vec::new(),
            names: HashMap::new(),
            origin: HashMap::new(),
            pending_const: HashMap::new(),
            internal: HashMap::new(),
            consumed: HashSet::new(),
            used: Vec::new(),
            read: HashSet::new(),
            aliases: HashMap::new(),
        }
    }

    /// Declares a graph input.
    pub(crate) fn add_input(&mut self, t: &Tensor, name: &str) {
        self.names.insert(t.id(), name.to_string());
        self.origin.insert(t.id(), Origin::Dynamic);
    }

    /// The ONNX value of trace tensor `t` (`grown` is its twin in the trace with the
    /// dynamic axes grown), writing the initializer or constant it needs on first use.
    fn value_of(&mut self, t: &Tensor, grown: &Tensor, op: &TracedOp) -> Result<String, Error> {
        let id = t.id();
        if let Some(c) = self.pending_const.remove(&id) {
            let name = self.writer.const_tensor(&c)?;
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
        if !same_values(t, grown) {
            return Err(Error::Unsupported {
                op: op.name.to_string(),
                module: self.info.describe(op.module),
                reason: format!(
                    "an input built inside the forward (shape {:?} for the example, {:?} with the dynamic axes grown) \
                     changes with the dynamic axes or between runs, so it cannot be a constant of the graph; \
                     derive it from the input with tensor ops (e.g. `zeros_like`, `narrow`, `expand`) or export \
                     with fixed axes",
                    t.shape(),
                    grown.shape()
                ),
            });
        }
        let name = self.writer.const_tensor(t)?;
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

    /// Converts the ops of two aligned traces: of the example input, and with the dynamic
    /// axes grown.
    pub(crate) fn add_trace(&mut self, example: &Trace, grown: &Trace) -> Result<(), Error> {
        for t in [example, grown] {
            self.refuse_foreign(t)?;
        }
        let (example, grown) = (&self.strip_aliases(example), &self.strip_aliases(grown));
        let differs =
            |i: usize| example.ops.get(i).map(|o| (o.name, o.kind)) != grown.ops.get(i).map(|o| (o.name, o.kind));
        if let Some(i) = (0..example.ops.len().max(grown.ops.len())).find(|&i| differs(i)) {
            let at = |t: &Trace| match t.ops.get(i) {
                Some(o) => format!("`{}` in {}", o.name, self.info.describe(o.module)),
                None => "the end of the forward".to_string(),
            };
            return Err(Error::Model(format!(
                "the forward runs different ops for the example input and for the input with the dynamic axes \
                 grown by one (op #{i}: {} vs {}): control flow that depends on those sizes cannot be exported; \
                 export with fixed axes (`DynamicAxes::Static`) or make the forward independent of them",
                at(example),
                at(grown)
            )));
        }
        for (i, (op, op_grown)) in example.ops.iter().zip(&grown.ops).enumerate() {
            self.add_op(AlignedOp { example: op, grown: op_grown })?;
            if let Some(out) = &op.output {
                // A second result or an intermediate has its op's origin (the indices of a
                // `max_dim` over the input depend on the input), for what Rust code does
                // with it (an in-place write from it, below).
                let origin = self.origin_of(out);
                for id in &op.created {
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
    /// not the values (`contiguous`, `detach`): their results become aliases of their
    /// inputs. (`contiguous` copies only non-contiguous inputs, so it may run for one batch
    /// size and not the other.)
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
            // a copy of a constant must keep its own values. Were it an alias, a write into
            // its source after the copy would reach the exported constant; kept as an op, it
            // folds into a constant of its own values (or, from the input or a parameter,
            // converts to an alias: neither can be written).
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

    /// Folds, refuses or converts one op (`op.example` is its record for the example input).
    fn add_op(&mut self, op: AlignedOp<'_>) -> Result<(), Error> {
        let recorded = op.example;
        match recorded.kind {
            OpKind::HostRead => {
                if self.origin_of(&recorded.inputs[0]) == Origin::Dynamic {
                    return Err(self.unsupported(
                        recorded,
                        "the forward reads values of a tensor that depends on the input into Rust (`to_vec`, \
                         `item`); what Rust code computes from them is invisible to an ONNX graph",
                    ));
                }
                return Ok(());
            }
            OpKind::InPlace => {
                let t = &recorded.inputs[0];
                // Through an alias too: a view of a used tensor writes into it.
                let seen = self.names.contains_key(&t.id())
                    || self.consumed.contains(&t.id())
                    || self.info.params.contains_key(&t.id())
                    || self.used.iter().any(|u| u.is_alias_of(t));
                if seen || self.origin.get(&t.id()) == Some(&Origin::Dynamic) {
                    return Err(self.unsupported(
                        recorded,
                        "in-place updates of parameters, buffers or values the graph uses cannot be exported \
                         (a graph has no mutable state); use the out-of-place op (`add` for `add_`), and call \
                         `model.eval()` so that layers stop updating running statistics",
                    ));
                }
                // A tensor the forward created, written from a value computed from the input:
                // the graph would hold the traced example's values as a constant in its place.
                // (From parameters and constants only, the values written are the ones the
                // graph must hold: a constant.)
                if recorded.inputs[1..].iter().any(|src| self.origin_of(&self.resolve(src)) == Origin::Dynamic) {
                    return Err(self.unsupported(
                        recorded,
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
        for ((name, value), (_, value_grown)) in recorded.attrs.iter().zip(&op.grown.attrs) {
            let shape_like = matches!((recorded.name, *name), ("reshape" | "expand", "shape"));
            let same_rank = matches!((value, value_grown), (Attr::Ints(x), Attr::Ints(y)) if x.len() == y.len());
            if value != value_grown && !(shape_like && same_rank) {
                return Err(self.unsupported(
                    recorded,
                    format!(
                        "its attribute `{name}` depends on the dynamic axes ({value:?} for the example input, {value_grown:?} \
                         with the dynamic axes grown by one); export with fixed axes or compute it from the input"
                    ),
                ));
            }
        }
        let origins: Vec<Origin> = recorded.inputs.iter().map(|t| self.origin_of(t)).collect();
        let dynamic = origins.contains(&Origin::Dynamic);
        let from_params = origins.contains(&Origin::Param);
        // A view reads no values: a write through it before any op reads them is
        // exported with the written values, as eager execution computes.
        let view = matches!(recorded.name, "reshape" | "permute" | "narrow" | "expand");
        for t in &recorded.inputs {
            self.consumed.insert(t.id());
            if !view && self.read.insert(t.id()) {
                self.used.push(t.clone());
            }
        }
        if !dynamic && (!from_params || !convert::is_supported(recorded)) {
            // Constant folding: the value is known (the forward computed it). Values
            // computed from parameters stay nodes, so the weights keep their names.
            for (t, t_grown) in recorded.inputs.iter().zip(&op.grown.inputs) {
                if !self.names.contains_key(&t.id())
                    && !self.pending_const.contains_key(&t.id())
                    && !self.info.params.contains_key(&t.id())
                    && !same_values(t, t_grown)
                {
                    return Err(self.unsupported(
                        recorded,
                        format!(
                            "an input built inside the forward (shape {:?}) changes with the dynamic axes or between \
                             runs, so it cannot be a constant of the graph",
                            t.shape()
                        ),
                    ));
                }
            }
            self.pending_const.insert(out.id(), out.clone());
            self.origin.insert(out.id(), Origin::Const);
            return Ok(());
        }
        let mut inputs = Vec::with_capacity(recorded.inputs.len());
        for (t, t_grown) in recorded.inputs.iter().zip(&op.grown.inputs) {
            inputs.push(self.value_of(t, t_grown, recorded)?);
        }
        self.writer.set_scope(&self.info.path(recorded.module));
        let converted =
            convert::convert(&mut self.writer, &op, &inputs).map_err(|reason| self.unsupported(recorded, reason))?;
        let name = match converted {
            Converted::Value(value) => value,
            Converted::Alias => inputs[0].clone(),
        };
        self.names.insert(out.id(), name);
        self.origin.insert(out.id(), if dynamic { Origin::Dynamic } else { Origin::Param });
        Ok(())
    }

    /// The ONNX value of a forward's result (`grown`: the same result with the dynamic axes
    /// grown), writing what it needs.
    pub(crate) fn output_value(&mut self, t: &Tensor, grown: &Tensor) -> Result<String, Error> {
        let (t, grown) = (&self.resolve(t), &self.resolve(grown));
        let fake = TracedOp {
            name: "output",
            kind: OpKind::Traced,
            attrs: Vec::new(),
            inputs: Vec::new(),
            output: None,
            created: Vec::new(),
            module: None,
        };
        self.value_of(t, grown, &fake)
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
