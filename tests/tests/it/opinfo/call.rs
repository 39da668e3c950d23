//! One OpInfo call as the fixture writes it (`input`, `args`, `kwargs`), with every
//! argument an op reads marked used: an argument nn's form of the op never reads makes the
//! case unsupported, named, instead of silently ignored.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use nn_core::{Device, StateDict, Tensor};
use serde_json::Value;

/// Why a case cannot be expressed in nn (an argument, a value or an op it lacks).
///
/// A reason that starts with [`UNREPRESENTABLE`] names a value nn's types cannot hold (a
/// negative size, a mode string PyTorch refuses too): for an error input that is nn's
/// refusal, made before the program runs.
#[derive(Debug)]
pub(crate) struct Unsupported(pub(crate) String);

/// The prefix of a reason that names a value nn's types cannot hold.
pub(crate) const UNREPRESENTABLE: &str = "not representable in nn's types: ";

pub(crate) type R<T> = Result<T, Unsupported>;

/// `Err(Unsupported)` with a formatted reason.
macro_rules! unsupported {
    ($($t:tt)*) => { return Err($crate::opinfo::call::Unsupported(format!($($t)*))) };
}
pub(crate) use unsupported;

/// A decoded argument.
#[derive(Clone, Debug)]
pub(crate) enum A {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// A tensor of the case, by name.
    T(String),
    List(Vec<A>),
    DType(String),
}

impl A {
    fn decode(v: &Value) -> R<A> {
        Ok(match v {
            Value::Null => A::None,
            Value::Bool(b) => A::Bool(*b),
            Value::Number(n) if n.is_i64() => A::Int(n.as_i64().unwrap()),
            Value::Number(n) => A::Float(n.as_f64().unwrap()),
            Value::String(s) => A::Str(s.clone()),
            Value::Object(m) if m.contains_key("t") => A::T(m["t"].as_str().unwrap().to_string()),
            Value::Object(m) if m.contains_key("list") => {
                A::List(m["list"].as_array().unwrap().iter().map(A::decode).collect::<R<_>>()?)
            }
            Value::Object(m) if m.contains_key("float") => A::Float(match m["float"].as_str().unwrap() {
                "nan" => f64::NAN,
                "inf" => f64::INFINITY,
                "-inf" => f64::NEG_INFINITY,
                other => unsupported!("the float {other}"),
            }),
            Value::Object(m) if m.contains_key("dtype") => A::DType(m["dtype"].as_str().unwrap().to_string()),
            Value::Object(m) if m.contains_key("opaque") => {
                unsupported!("an argument of Python type {}", m["opaque"].as_str().unwrap())
            }
            other => unsupported!("the value {other}"),
        })
    }

    /// A short description for the reason of an unsupported case.
    pub(crate) fn describe(&self) -> String {
        match self {
            A::None => "None".into(),
            A::Bool(b) => b.to_string(),
            A::Int(i) => i.to_string(),
            A::Float(f) => f.to_string(),
            A::Str(s) => format!("{s:?}"),
            A::T(_) => "a tensor".into(),
            A::List(l) => format!("a list of {}", l.len()),
            A::DType(d) => d.clone(),
        }
    }
}

/// One call: its arguments and the case's tensors (copies, so an in-place update or a
/// gradient never reaches the fixture; leaves require grad, non-contiguous operands are
/// non-contiguous views).
pub(crate) struct Call {
    input: A,
    args: Vec<A>,
    kwargs: BTreeMap<String, A>,
    tensors: HashMap<String, Tensor>,
    used: RefCell<BTreeSet<String>>,
}

impl Call {
    pub(crate) fn new(
        case: &Value,
        index: usize,
        fixture: &StateDict,
        device: Device,
        is_leaf: &dyn Fn(&str) -> bool,
    ) -> R<Call> {
        let mut tensors = HashMap::new();
        let mut noncontiguous = BTreeSet::new();
        collect_nc(&case["input"], &mut noncontiguous);
        for a in case["args"].as_array().unwrap() {
            collect_nc(a, &mut noncontiguous);
        }
        for a in case["kwargs"].as_object().unwrap().values() {
            collect_nc(a, &mut noncontiguous);
        }
        let input = A::decode(&case["input"])?;
        let args = case["args"].as_array().unwrap().iter().map(A::decode).collect::<R<Vec<_>>>()?;
        let kwargs = case["kwargs"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| Ok((k.clone(), A::decode(v)?)))
            .collect::<R<_>>()?;
        // The case's tensors are `c<index>.<k>`, numbered from 0.
        for k in 0.. {
            let name = format!("c{index}.{k}");
            let Some(t) = fixture.get(&name) else { break };
            let mut t = t.detach().copy().to_device(device);
            if noncontiguous.contains(&name) && t.rank() >= 2 {
                t = t.transpose(-1, -2).contiguous().transpose(-1, -2).detach();
            }
            if is_leaf(&name) {
                t = t.requires_grad_(true);
            }
            tensors.insert(name, t);
        }
        Ok(Call { input, args, kwargs, tensors, used: RefCell::new(BTreeSet::new()) })
    }

    /// The case's tensor `name` (after the call: updated in place, holding its gradient).
    pub(crate) fn tensor(&self, name: &str) -> Tensor {
        self.tensors.get(name).unwrap_or_else(|| panic!("no tensor {name} in the case")).clone()
    }

    /// `a` as a tensor.
    pub(crate) fn t(&self, a: &A) -> R<Tensor> {
        match a {
            A::T(name) => Ok(self.tensor(name)),
            other => unsupported!("{} where nn takes a tensor", other.describe()),
        }
    }

    /// The input, a tensor.
    pub(crate) fn x(&self) -> R<Tensor> {
        self.t(&self.input)
    }

    /// The input, a list of tensors.
    pub(crate) fn xs(&self) -> R<Vec<Tensor>> {
        match &self.input {
            A::List(l) => l.iter().map(|a| self.t(a)).collect(),
            other => unsupported!("{} where nn takes a list of tensors", other.describe()),
        }
    }

    /// How many positional arguments the call has.
    pub(crate) fn args_len(&self) -> usize {
        self.args.len()
    }

    /// Positional argument `i`, or keyword `name` (either one marked used).
    pub(crate) fn get(&self, i: usize, name: &str) -> Option<&A> {
        if let Some(a) = self.args.get(i) {
            self.used.borrow_mut().insert(i.to_string());
            return Some(a);
        }
        self.kw(name)
    }

    /// Keyword `name`, marked used.
    pub(crate) fn kw(&self, name: &str) -> Option<&A> {
        let a = self.kwargs.get(name)?;
        self.used.borrow_mut().insert(name.to_string());
        Some(a)
    }

    /// Argument `(i, name)` or `None` where absent or Python's `None`.
    pub(crate) fn opt(&self, i: usize, name: &str) -> Option<&A> {
        self.get(i, name).filter(|a| !matches!(a, A::None))
    }

    /// A required tensor argument.
    pub(crate) fn tensor_arg(&self, i: usize, name: &str) -> R<Tensor> {
        match self.opt(i, name) {
            Some(a) => self.t(a),
            None => unsupported!("no `{name}`"),
        }
    }

    /// An optional tensor argument.
    pub(crate) fn opt_tensor(&self, i: usize, name: &str) -> R<Option<Tensor>> {
        self.opt(i, name).map(|a| self.t(a)).transpose()
    }

    /// An optional integer argument.
    pub(crate) fn opt_int(&self, i: usize, name: &str) -> R<Option<i64>> {
        self.opt(i, name).map(int).transpose()
    }

    /// An integer argument with a default.
    pub(crate) fn int_or(&self, i: usize, name: &str, default: i64) -> R<i64> {
        Ok(self.opt_int(i, name)?.unwrap_or(default))
    }

    /// A float argument with a default.
    pub(crate) fn float_or(&self, i: usize, name: &str, default: f64) -> R<f64> {
        self.opt(i, name).map(float).transpose().map(|v| v.unwrap_or(default))
    }

    /// A bool argument with a default.
    pub(crate) fn bool_or(&self, i: usize, name: &str, default: bool) -> R<bool> {
        match self.opt(i, name) {
            None => Ok(default),
            Some(A::Bool(b)) => Ok(*b),
            Some(other) => unsupported!("`{name}` = {}", other.describe()),
        }
    }

    /// A string argument with a default.
    pub(crate) fn str_or(&self, i: usize, name: &str, default: &str) -> R<String> {
        match self.opt(i, name) {
            None => Ok(default.to_string()),
            Some(A::Str(s)) => Ok(s.clone()),
            Some(other) => unsupported!("`{name}` = {}", other.describe()),
        }
    }

    /// Integers: one, or a list (PyTorch's `int or tuple`), or `None`.
    pub(crate) fn opt_ints(&self, i: usize, name: &str) -> R<Option<Vec<i64>>> {
        self.opt(i, name).map(ints).transpose()
    }

    /// The rest of the positional arguments from `i` on, as integers (`x.permute(0, 2, 1)`
    /// and `x.permute((0, 2, 1))` alike), else keyword `name`.
    pub(crate) fn varargs_ints(&self, i: usize, name: &str) -> R<Vec<i64>> {
        if self.args.len() == i + 1 || self.args.len() <= i {
            return match self.opt(i, name) {
                Some(a) => ints(a),
                None => unsupported!("no `{name}`"),
            };
        }
        (i..self.args.len()).map(|j| int(self.get(j, name).unwrap())).collect()
    }

    /// The first argument no op read, described; `None` when the op read every one.
    pub(crate) fn unused(&self) -> Option<String> {
        let used = self.used.borrow();
        for (i, a) in self.args.iter().enumerate() {
            if !used.contains(&i.to_string()) {
                return Some(format!("positional argument {i} ({})", a.describe()));
            }
        }
        for (k, a) in &self.kwargs {
            if !used.contains(k) {
                return Some(format!("keyword `{k}`={}", a.describe()));
            }
        }
        None
    }
}

pub(crate) fn int(a: &A) -> R<i64> {
    match a {
        A::Int(i) => Ok(*i),
        other => unsupported!("{} where nn takes an integer", other.describe()),
    }
}

pub(crate) fn float(a: &A) -> R<f64> {
    match a {
        A::Int(i) => Ok(*i as f64),
        A::Float(f) => Ok(*f),
        other => unsupported!("{} where nn takes a float", other.describe()),
    }
}

pub(crate) fn ints(a: &A) -> R<Vec<i64>> {
    match a {
        A::Int(i) => Ok(vec![*i]),
        A::List(l) => l.iter().map(int).collect(),
        other => unsupported!("{} where nn takes integers", other.describe()),
    }
}

/// Non-negative integers (sizes).
pub(crate) fn sizes(v: &[i64]) -> R<Vec<usize>> {
    v.iter()
        .map(|&i| usize::try_from(i).map_err(|_| Unsupported(format!("{UNREPRESENTABLE}the negative size {i}"))))
        .collect()
}

fn collect_nc(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) if m.get("nc") == Some(&Value::Bool(true)) => {
            out.insert(m["t"].as_str().unwrap().to_string());
        }
        Value::Object(m) if m.contains_key("list") => {
            m["list"].as_array().unwrap().iter().for_each(|x| collect_nc(x, out))
        }
        _ => {}
    }
}
