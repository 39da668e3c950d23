//! A restricted unpickler for the `data.pkl` of PyTorch's zip files ([`crate::pytorch_file`]).
//!
//! Pickle is a program for a stack machine whose `GLOBAL` and `REDUCE` opcodes import and
//! call any Python function, so a pickle from elsewhere must not be run by an ordinary
//! unpickler. This one runs no code: it knows the opcodes `torch.save` writes (protocols 2
//! to 5) and a closed set of globals — the tensor and parameter rebuild functions, the
//! storage types, `collections.OrderedDict` — each interpreted here, as PyTorch's
//! `torch.load(weights_only=True)` allows them. Any other global, and every opcode outside
//! that set, is refused by name before anything is built.
//!
//! Every value the machine makes costs at least one byte of the pickle (containers share
//! their items through `Rc`, so a memo read costs nothing extra), which bounds its memory
//! by the pickle's length; lengths read from the stream are checked against the bytes
//! left before anything is allocated.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use crate::dtype::DType;

/// A dict's items, shared by the values that hold it (the memo, the stack).
pub(crate) type DictItems = Rc<RefCell<Vec<(Value, Value)>>>;

/// What a pickle describes: the values a state dict's pickle can hold.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    None,
    /// A bool or a float: only ever arguments the rebuild functions ignore
    /// (`requires_grad`), so their values are not kept.
    Bool,
    Int(i64),
    Float,
    Str(Rc<str>),
    Tuple(Rc<[Value]>),
    List(Rc<RefCell<Vec<Value>>>),
    /// Insertion-ordered, as Python's dicts are.
    Dict(DictItems),
    /// One of the allowed globals, not yet called.
    Global(Global),
    /// A persistent id resolved to a storage of the archive.
    Storage(Rc<StorageRef>),
    /// A tensor: a strided view of a storage, materialised by the caller.
    Tensor(Rc<TensorRef>),
}

impl Value {
    /// The Python type's name, for error messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool => "bool",
            Value::Int(_) => "int",
            Value::Float => "float",
            Value::Str(_) => "str",
            Value::Tuple(_) => "tuple",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::Global(_) => "global",
            Value::Storage(_) => "storage",
            Value::Tensor(_) => "tensor",
        }
    }
}

/// The globals a PyTorch state dict's pickle may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Global {
    OrderedDict,
    RebuildTensorV2,
    RebuildTensor,
    RebuildParameter,
    RebuildParameterWithState,
    /// `torch.FloatStorage` and its kin: the element type of a storage.
    StorageType(StorageDType),
}

/// A storage's element type as PyTorch names it: nn's dtype, or an integer type that
/// widens to `i64` on load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StorageDType {
    Native(DType),
    I32,
    I16,
    I8,
    U8,
}

impl StorageDType {
    /// Bytes per element in the file.
    pub(crate) fn size(self) -> usize {
        match self {
            StorageDType::Native(d) => d.size_in_bytes(),
            StorageDType::I32 => 4,
            StorageDType::I16 => 2,
            StorageDType::I8 | StorageDType::U8 => 1,
        }
    }
}

/// Every global the unpickler accepts, by its `module.name`, for the error message.
const ALLOWED: &str = "collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch._utils._rebuild_tensor, \
     torch._utils._rebuild_parameter, torch._utils._rebuild_parameter_with_state and the storage types \
     torch.{Float,Double,Half,BFloat16,Long,Int,Short,Char,Byte,Bool}Storage";

fn global(module: &str, name: &str) -> Option<Global> {
    use StorageDType::*;
    Some(match (module, name) {
        ("collections", "OrderedDict") => Global::OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2") => Global::RebuildTensorV2,
        ("torch._utils", "_rebuild_tensor") => Global::RebuildTensor,
        ("torch._utils", "_rebuild_parameter") => Global::RebuildParameter,
        ("torch._utils", "_rebuild_parameter_with_state") => Global::RebuildParameterWithState,
        ("torch", storage) => Global::StorageType(match storage {
            "FloatStorage" => Native(DType::F32),
            "DoubleStorage" => Native(DType::F64),
            "HalfStorage" => Native(DType::F16),
            "BFloat16Storage" => Native(DType::BF16),
            "LongStorage" => Native(DType::I64),
            "BoolStorage" => Native(DType::Bool),
            "IntStorage" => I32,
            "ShortStorage" => I16,
            "CharStorage" => I8,
            "ByteStorage" => U8,
            _ => return None,
        }),
        _ => return None,
    })
}

/// A storage named by a persistent id: `('storage', type, key, location, numel)`.
#[derive(Debug)]
pub(crate) struct StorageRef {
    pub(crate) dtype: StorageDType,
    /// The archive entry `data/{key}`.
    pub(crate) key: String,
    /// Elements, as the persistent id gives it (checked against the entry's length).
    pub(crate) numel: usize,
}

/// A tensor as `_rebuild_tensor_v2` describes it.
#[derive(Debug)]
pub(crate) struct TensorRef {
    pub(crate) storage: Rc<StorageRef>,
    pub(crate) offset: usize,
    pub(crate) shape: Vec<usize>,
    pub(crate) stride: Vec<usize>,
}

/// Why a pickle was refused, with the byte offset of the opcode.
pub(crate) type Refusal = String;

/// The most dimensions a tensor may have (PyTorch's own limit is 64 too).
const MAX_DIMS: usize = 64;

struct Machine<'a> {
    bytes: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
    /// `(dict, state)` of each BUILD: the attributes set on an OrderedDict (a state dict's
    /// `_metadata`).
    built: Vec<(DictItems, Value)>,
}

/// Runs the pickle in `bytes` and returns the object it builds, with the attribute
/// dictionaries BUILD set on it when it is a dict (an OrderedDict's `__dict__`, where a
/// state dict keeps `_metadata`), in order.
pub(crate) fn load(bytes: &[u8]) -> Result<(Value, Vec<Value>), Refusal> {
    let mut m =
        Machine { bytes, pos: 0, stack: Vec::new(), marks: Vec::new(), memo: HashMap::new(), built: Vec::new() };
    loop {
        let at = m.pos;
        let op = m.take(1).map_err(|e| format!("{e} (the pickle ends without STOP)"))?[0];
        match m.step(op) {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => return Err(format!("at byte {at} (opcode 0x{op:02x}): {e}")),
        }
    }
    if m.pos != bytes.len() {
        return Err(format!("{} bytes follow the STOP opcode", bytes.len() - m.pos));
    }
    match (m.stack.pop(), m.stack.is_empty()) {
        (Some(v), true) => {
            let attrs = match &v {
                Value::Dict(d) => m.built.into_iter().filter(|(t, _)| Rc::ptr_eq(t, d)).map(|(_, s)| s).collect(),
                _ => Vec::new(),
            };
            Ok((v, attrs))
        }
        _ => Err("the pickle does not leave exactly one object on its stack".into()),
    }
}

impl<'a> Machine<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Refusal> {
        let bytes = self.bytes;
        if n > bytes.len() - self.pos {
            return Err(format!("{n} bytes asked for, {} left", bytes.len() - self.pos));
        }
        self.pos += n;
        Ok(&bytes[self.pos - n..self.pos])
    }

    fn uint<const N: usize>(&mut self) -> Result<u64, Refusal> {
        let mut b = [0u8; 8];
        b[..N].copy_from_slice(self.take(N)?);
        Ok(u64::from_le_bytes(b))
    }

    fn line(&mut self) -> Result<&'a str, Refusal> {
        let rest = &self.bytes[self.pos..];
        let end = rest.iter().position(|&b| b == b'\n').ok_or("a text argument without its newline")?;
        let s = std::str::from_utf8(&rest[..end]).map_err(|_| "a text argument that is not UTF-8")?;
        self.pos += end + 1;
        Ok(s)
    }

    fn string(&mut self, n: u64) -> Result<Value, Refusal> {
        let n = usize::try_from(n).map_err(|_| "a string longer than memory")?;
        let b = self.take(n)?;
        let s = std::str::from_utf8(b).map_err(|_| "a string that is not UTF-8")?;
        Ok(Value::Str(s.into()))
    }

    fn pop(&mut self) -> Result<Value, Refusal> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err("an opcode pops past a MARK".into());
        }
        self.stack.pop().ok_or_else(|| "an opcode pops an empty stack".into())
    }

    fn top(&mut self) -> Result<&mut Value, Refusal> {
        self.stack.last_mut().ok_or_else(|| "an opcode reads an empty stack".into())
    }

    /// The items since the last MARK, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<Value>, Refusal> {
        let m = self.marks.pop().ok_or("an opcode needs a MARK and there is none")?;
        Ok(self.stack.split_off(m))
    }

    fn push(&mut self, v: Value) {
        self.stack.push(v);
    }

    fn put(&mut self, i: u32) -> Result<(), Refusal> {
        let v = self.top()?.clone();
        self.memo.insert(i, v);
        Ok(())
    }

    fn get(&mut self, i: u32) -> Result<(), Refusal> {
        let v = self.memo.get(&i).ok_or_else(|| format!("memo entry {i} is read before it is written"))?.clone();
        self.push(v);
        Ok(())
    }

    fn tuple(&mut self, n: usize) -> Result<(), Refusal> {
        if self.stack.len() < n || self.marks.last().is_some_and(|&m| m > self.stack.len() - n) {
            return Err(format!("a TUPLE{n} with fewer than {n} items on the stack"));
        }
        let items = self.stack.split_off(self.stack.len() - n);
        self.push(Value::Tuple(items.into()));
        Ok(())
    }

    fn set_items(&mut self, items: Vec<Value>) -> Result<(), Refusal> {
        if !items.len().is_multiple_of(2) {
            return Err("SETITEMS with an odd number of items".into());
        }
        let Value::Dict(d) = self.top()? else {
            return Err("SETITEM(S) on something that is not a dict".into());
        };
        let d = d.clone();
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            d.borrow_mut().push((k, v));
        }
        Ok(())
    }

    fn append(&mut self, items: Vec<Value>) -> Result<(), Refusal> {
        let Value::List(l) = self.top()? else {
            return Err("APPEND(S) on something that is not a list".into());
        };
        l.borrow_mut().extend(items);
        Ok(())
    }

    /// A literal opcode: an integer, a float (kept as its kind) or a string.
    fn literal(&mut self, op: u8) -> Result<(), Refusal> {
        match op {
            b'J' => {
                let v = self.uint::<4>()? as u32 as i32;
                self.push(Value::Int(v.into()))
            }
            b'K' => {
                let v = self.uint::<1>()?;
                self.push(Value::Int(v as i64))
            }
            b'M' => {
                let v = self.uint::<2>()?;
                self.push(Value::Int(v as i64))
            }
            0x8a => {
                let n = self.take(1)?[0] as usize;
                if n > 8 {
                    return Err(format!("a LONG1 of {n} bytes: larger than 64 bits"));
                }
                let b = self.take(n)?;
                let mut v = [if b.last().is_some_and(|&x| x & 0x80 != 0) { 0xff } else { 0 }; 8];
                v[..n].copy_from_slice(b);
                self.push(Value::Int(i64::from_le_bytes(v)))
            }
            b'G' => {
                self.take(8)?;
                self.push(Value::Float)
            }
            b'X' => {
                let n = self.uint::<4>()?;
                let s = self.string(n)?;
                self.push(s)
            }
            0x8c => {
                let n = self.uint::<1>()?;
                let s = self.string(n)?;
                self.push(s)
            }
            0x8d => {
                let n = self.uint::<8>()?;
                let s = self.string(n)?;
                self.push(s)
            }
            other => unreachable!("0x{other:02x} is not a literal opcode"),
        }
        Ok(())
    }

    /// One opcode; `Ok(true)` at STOP.
    fn step(&mut self, op: u8) -> Result<bool, Refusal> {
        match op {
            b'.' => return Ok(true),
            0x80 => {
                let proto = self.take(1)?[0];
                if !(2..=5).contains(&proto) {
                    return Err(format!("pickle protocol {proto}: torch.save writes 2 to 5"));
                }
            }
            0x95 => {
                self.take(8)?; // FRAME: a length hint only.
            }
            b'(' => self.marks.push(self.stack.len()),
            b'N' => self.push(Value::None),
            0x88 | 0x89 => self.push(Value::Bool),
            b'J' | b'K' | b'M' | 0x8a | b'G' | b'X' | 0x8c | 0x8d => self.literal(op)?,
            b'}' => self.push(Value::Dict(Rc::default())),
            b']' => self.push(Value::List(Rc::default())),
            b')' => self.push(Value::Tuple(Rc::new([]))),
            b'd' => {
                let items = self.pop_mark()?;
                self.push(Value::Dict(Rc::default()));
                self.set_items(items)?;
            }
            b'l' => {
                let items = self.pop_mark()?;
                self.push(Value::List(Rc::new(RefCell::new(items))));
            }
            b't' => {
                let items = self.pop_mark()?;
                self.push(Value::Tuple(items.into()));
            }
            0x85 => self.tuple(1)?,
            0x86 => self.tuple(2)?,
            0x87 => self.tuple(3)?,
            b's' => {
                let v = self.pop()?;
                let k = self.pop()?;
                self.set_items(vec![k, v])?;
            }
            b'u' => {
                let items = self.pop_mark()?;
                self.set_items(items)?;
            }
            b'a' => {
                let v = self.pop()?;
                self.append(vec![v])?;
            }
            b'e' => {
                let items = self.pop_mark()?;
                self.append(items)?;
            }
            // BINPUT / LONG_BINPUT / MEMOIZE, BINGET / LONG_BINGET.
            b'q' | b'r' | 0x94 => {
                let i = match op {
                    b'q' => self.uint::<1>()? as u32,
                    b'r' => self.uint::<4>()? as u32,
                    _ => u32::try_from(self.memo.len()).map_err(|_| "too many memo entries")?,
                };
                self.put(i)?
            }
            b'h' | b'j' => {
                let i = if op == b'h' { self.uint::<1>()? } else { self.uint::<4>()? } as u32;
                self.get(i)?
            }
            b'0' => {
                self.pop()?;
            }
            b'c' => {
                let (module, name) = (self.line()?, self.line()?);
                self.push_global(module, name)?
            }
            0x93 => {
                let (name, module) = (self.pop()?, self.pop()?);
                let (Value::Str(module), Value::Str(name)) = (&module, &name) else {
                    return Err("STACK_GLOBAL on values that are not strings".into());
                };
                self.push_global(module, name)?
            }
            b'Q' => {
                let pid = self.pop()?;
                let storage = persistent_load(&pid)?;
                self.push(Value::Storage(Rc::new(storage)))
            }
            b'R' => {
                let args = self.pop()?;
                let callable = self.pop()?;
                let (Value::Global(g), Value::Tuple(args)) = (&callable, &args) else {
                    return Err(format!(
                        "REDUCE of a {} with a {}: expected an allowed global and a tuple",
                        callable.kind(),
                        args.kind()
                    ));
                };
                let v = call(*g, args)?;
                self.push(v)
            }
            b'b' => {
                let state = self.pop()?;
                let target = match (self.top()?, &state) {
                    // An OrderedDict's attributes (a state dict's `_metadata`): kept aside.
                    (Value::Dict(d), Value::Dict(_)) => Rc::clone(d),
                    (top, _) => return Err(format!("BUILD of a {} on a {}", state.kind(), top.kind())),
                };
                self.built.push((target, state));
            }
            other => {
                return Err(format!(
                    "the opcode {} is outside the tensor-rebuild set",
                    opcode_name(other).map_or_else(|| format!("0x{other:02x}"), |n| n.to_string())
                ))
            }
        }
        Ok(false)
    }

    fn push_global(&mut self, module: &str, name: &str) -> Result<(), Refusal> {
        let g = global(module, name).ok_or_else(|| {
            format!("the global `{module}.{name}` is not in the tensor-rebuild set (read: {ALLOWED}), as torch.load(weights_only=True) refuses it")
        })?;
        self.push(Value::Global(g));
        Ok(())
    }
}

/// The names of the opcodes refused, for the message.
fn opcode_name(op: u8) -> Option<&'static str> {
    Some(match op {
        b'i' => "INST",
        b'o' => "OBJ",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        b'P' => "PERSID",
        0x82..=0x84 => "EXT",
        b'I' => "INT",
        b'L' => "LONG",
        0x8b => "LONG4",
        b'F' => "FLOAT",
        b'S' => "STRING",
        b'T' | b'U' => "BINSTRING",
        b'B' | b'C' | 0x8e => "BINBYTES",
        0x96 | 0x97 => "BYTEARRAY/NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        b'p' => "PUT",
        b'g' => "GET",
        b'V' => "UNICODE",
        0x8f => "EMPTY_SET",
        0x90 => "ADDITEMS",
        0x91 => "FROZENSET",
        b'2' => "DUP",
        b'1' => "POP_MARK",
        _ => return None,
    })
}

/// `('storage', torch.FloatStorage, '0', 'cpu', numel)`: the location is ignored (every
/// storage loads on the CPU, as `map_location='cpu'` has it).
fn persistent_load(pid: &Value) -> Result<StorageRef, Refusal> {
    let shape = match pid {
        Value::Tuple(t) => format!("({})", t.iter().map(Value::kind).collect::<Vec<_>>().join(", ")),
        other => other.kind().to_string(),
    };
    let bad =
        || format!("a persistent id that is not ('storage', <storage type>, <key>, <location>, <numel>): {shape}");
    let Value::Tuple(t) = pid else { return Err(bad()) };
    match &t[..] {
        [Value::Str(tag), Value::Global(Global::StorageType(dtype)), Value::Str(key), Value::Str(_), Value::Int(n)]
            if &**tag == "storage" =>
        {
            if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!("the storage key {key:?} is not a plain name"));
            }
            let numel = usize::try_from(*n).map_err(|_| format!("storage `{key}` has {n} elements"))?;
            Ok(StorageRef { dtype: *dtype, key: key.to_string(), numel })
        }
        _ => Err(bad()),
    }
}

fn dims(v: &Value, what: &str) -> Result<Vec<usize>, Refusal> {
    let Value::Tuple(t) = v else { return Err(format!("the {what} is a {}, not a tuple", v.kind())) };
    if t.len() > MAX_DIMS {
        return Err(format!("the {what} has {} dimensions (at most {MAX_DIMS})", t.len()));
    }
    t.iter()
        .map(|d| match d {
            Value::Int(n) => usize::try_from(*n).map_err(|_| format!("the {what} has the entry {n}")),
            other => Err(format!("the {what} has a {} entry", other.kind())),
        })
        .collect()
}

/// Applies an allowed global to its arguments.
fn call(g: Global, args: &[Value]) -> Result<Value, Refusal> {
    match (g, args) {
        (Global::OrderedDict, []) => Ok(Value::Dict(Rc::default())),
        (Global::RebuildTensorV2, [s, off, size, stride, _, _, ..])
        | (Global::RebuildTensor, [s, off, size, stride]) => {
            let Value::Storage(storage) = s else {
                return Err(format!("a tensor rebuilt from a {}, not a storage", s.kind()));
            };
            let Value::Int(off) = off else { return Err("a tensor with a storage offset that is not an int".into()) };
            let offset = usize::try_from(*off).map_err(|_| format!("a tensor at the storage offset {off}"))?;
            let (shape, stride) = (dims(size, "size")?, dims(stride, "stride")?);
            if shape.len() != stride.len() {
                return Err(format!("a tensor of size {shape:?} with the stride {stride:?}"));
            }
            view_fits(storage, offset, &shape, &stride)?;
            Ok(Value::Tensor(Rc::new(TensorRef { storage: storage.clone(), offset, shape, stride })))
        }
        (Global::RebuildParameter, [t @ Value::Tensor(_), _, _])
        | (Global::RebuildParameterWithState, [t @ Value::Tensor(_), _, _, _]) => Ok(t.clone()),
        (g, args) => Err(format!("{g:?} called with {} arguments of the wrong kinds", args.len())),
    }
}

/// Checks that every element the view reads lies in its storage.
fn view_fits(s: &StorageRef, offset: usize, shape: &[usize], stride: &[usize]) -> Result<(), Refusal> {
    let overflow = || format!("a tensor of size {shape:?} whose extent overflows");
    let mut numel = 1usize;
    let mut last = offset;
    for (&n, &st) in shape.iter().zip(stride) {
        numel = numel.checked_mul(n).ok_or_else(overflow)?;
        if n > 0 {
            last = (n - 1).checked_mul(st).and_then(|e| e.checked_add(last)).ok_or_else(overflow)?;
        }
    }
    if numel > 0 && last >= s.numel {
        return Err(format!(
            "a tensor of size {shape:?}, stride {stride:?} at offset {offset} reads element {last} of storage `{}`, which has {}",
            s.key, s.numel
        ));
    }
    Ok(())
}
