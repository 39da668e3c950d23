//! PyTorch's own files: [`StateDict::load_pytorch`] reads what `torch.save(state_dict)`
//! writes (the zip format PyTorch has written by default since 1.6, and so transformers'
//! `pytorch_model.bin`), without Python and without running the pickle inside.
//!
//! The archive holds `{name}/data.pkl`, a pickle describing the dict, and one stored entry
//! `{name}/data/{key}` per storage. The pickle is run by a restricted unpickler
//! (`nn_core`'s private `pickle` module) that knows the tensor-rebuild globals and nothing else, as
//! `torch.load(weights_only=True)` does: any other global or opcode is refused by name.
//! Every entry read must be stored uncompressed (as PyTorch writes them) and pass its
//! CRC-32 check, each storage must have exactly the bytes its elements need, and every
//! tensor must lie inside its storage.
//! Tensors that view the same storage the same way (tied weights) load as one tensor,
//! listed under each name; other views are copied out contiguous, and their copies may
//! total at most twice the storages' bytes (a hostile pickle cannot make one storage
//! count a thousand times). Tensors load on the CPU, wherever they were saved, in their
//! dtype; the narrow integer types widen to `i64`, as in [`StateDict::load`]. The state
//! dict's `_metadata` (each module's `_version`) becomes [`StateDict::version`], which load
//! pre-hooks receive ([`state_hooks`](crate::module::state_hooks)).
//!
//! Refused with an error naming the file and what is wrong: the legacy (pre-1.6) format,
//! TorchScript archives, big-endian files, compressed entries, a truncated archive, and
//! a top-level object that is not a dict of names to tensors.

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

use safetensors::Dtype;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::pickle::{self, StorageDType, TensorRef, Value};
use crate::state_dict::StateDict;
use crate::tensor::Tensor;

/// The magic number that opens a legacy (pre-1.6, not zip) `torch.save` file's pickle.
const LEGACY_MAGIC: [u8; 10] = [0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20];

impl StateDict {
    /// Reads a PyTorch state dict saved by `torch.save` (`pytorch_model.bin`, `.pt`,
    /// `.pth`): see the [module docs](crate::pytorch_file) for what is read and refused.
    ///
    /// ```no_run
    /// # fn main() -> nn_core::Result<()> {
    /// let sd = nn_core::StateDict::load_pytorch("pytorch_model.bin")?;
    /// for (name, t) in sd.iter() {
    ///     println!("{name}: {:?} {}", t.shape(), t.dtype());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read; [`Error::NotARegularFile`] for FIFOs,
    /// devices and directories; [`Error::InvalidPyTorchFile`] for anything the file holds
    /// that is not a state dict this reader accepts, naming the entry;
    /// [`Error::UnsupportedFileDType`] for a storage type with no counterpart here.
    pub fn load_pytorch(path: impl AsRef<Path>) -> Result<StateDict> {
        let path = path.as_ref();
        crate::io::with_file_bytes(path, |bytes| parse(bytes, path))
    }

    /// [`load_pytorch`](StateDict::load_pytorch) from bytes held in memory (errors name
    /// the file `<memory>`).
    ///
    /// # Errors
    /// As [`load_pytorch`](StateDict::load_pytorch).
    pub fn from_pytorch_bytes(bytes: &[u8]) -> Result<StateDict> {
        parse(bytes, Path::new("<memory>"))
    }
}

fn parse(bytes: &[u8], path: &Path) -> Result<StateDict> {
    let bad = |reason: String| Error::InvalidPyTorchFile { path: path.to_path_buf(), reason };
    if bytes.starts_with(&LEGACY_MAGIC) {
        return Err(bad(
            "it is in the legacy format of PyTorch before 1.6, which is not read: load it in PyTorch and \
                        save it again with torch.save (or as safetensors)"
                .into(),
        ));
    }
    if !bytes.starts_with(b"PK\x03\x04") {
        return Err(bad("it is not a zip archive (PyTorch's format since 1.6)".into()));
    }
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| bad(format!("its zip directory cannot be read ({e}): truncated or corrupt")))?;
    let names: Vec<String> = zip
        .file_names()
        .map(|n| n.map(|n| n.into_owned()))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| bad(format!("an entry's name cannot be read ({e})")))?;
    let pkl: Vec<&String> = names.iter().filter(|n| n.split('/').count() == 2 && n.ends_with("/data.pkl")).collect();
    let prefix = match pkl[..] {
        [one] => one.strip_suffix("data.pkl").expect("filtered by suffix").to_string(),
        [] => return Err(bad("the archive has no `<name>/data.pkl` entry".into())),
        _ => return Err(bad(format!("the archive has {} `data.pkl` entries", pkl.len()))),
    };
    if names.iter().any(|n| *n == format!("{prefix}constants.pkl")) {
        return Err(bad("it is a TorchScript archive (torch.jit.save), not a state dict: save the module's \
                        state_dict() with torch.save"
            .into()));
    }
    if let Some(order) = entry(&mut zip, bytes, path, &format!("{prefix}byteorder"))? {
        if order != b"little" {
            return Err(bad(format!(
                "its byte order is {:?}: only little-endian files are read",
                String::from_utf8_lossy(&order[..order.len().min(16)])
            )));
        }
    }
    let pkl = entry(&mut zip, bytes, path, &format!("{prefix}data.pkl"))?.expect("listed above");
    let (root, attributes) = pickle::load(pkl).map_err(|e| bad(format!("`{prefix}data.pkl` {e}")))?;
    let versions = read_metadata(&attributes).map_err(|e| bad(format!("`{prefix}data.pkl`: `_metadata` {e}")))?;
    let items = match &root {
        Value::Dict(d) => d.borrow().clone(),
        other => {
            return Err(bad(format!(
                "`{prefix}data.pkl` holds a {}, not a state dict (a dict of names to tensors)",
                other.kind()
            )))
        }
    };

    let mut sd = StateDict::with_capacity(items.len());
    let mut storages: HashMap<String, &[u8]> = HashMap::new();
    let mut views: HashMap<(String, usize, Vec<usize>, Vec<usize>), Tensor> = HashMap::new();
    // What strided views may copy: twice the file (which holds every storage), so that a
    // pickle viewing one storage many times cannot ask for more memory than that.
    let mut budget = 2 * bytes.len() + (1 << 20);
    for (k, v) in items {
        let Value::Str(name) = &k else {
            return Err(bad(format!("`{prefix}data.pkl`: a key of the dict is a {}, not a name", k.kind())));
        };
        let Value::Tensor(t) = &v else {
            return Err(bad(format!(
                "`{prefix}data.pkl`: entry `{name}` is a {}, not a tensor (only state dicts are read: save \
                 model.state_dict())",
                v.kind()
            )));
        };
        if sd.contains_key(name) {
            return Err(bad(format!("`{prefix}data.pkl`: the name `{name}` is in the dict twice")));
        }
        let storage = match storages.get(&t.storage.key) {
            Some(s) => *s,
            None => {
                let entry_name = format!("{prefix}data/{}", t.storage.key);
                let s = entry(&mut zip, bytes, path, &entry_name)?.ok_or_else(|| {
                    bad(format!("entry `{name}` reads the storage `{entry_name}`, which is not in the archive"))
                })?;
                let want = t.storage.numel.checked_mul(t.storage.dtype.size());
                if want != Some(s.len()) {
                    return Err(bad(format!(
                        "the storage `{entry_name}` has {} bytes, where its {} elements of {} bytes need {}",
                        s.len(),
                        t.storage.numel,
                        t.storage.dtype.size(),
                        want.map_or("more than memory".to_string(), |w| w.to_string())
                    )));
                }
                storages.insert(t.storage.key.clone(), s);
                s
            }
        };
        let id = (t.storage.key.clone(), t.offset, t.shape.clone(), t.stride.clone());
        if let Some(shared) = views.get(&id) {
            sd.insert(name.to_string(), shared.clone());
            continue;
        }
        let tensor = materialise(name, t, storage, path, &mut budget)?;
        views.insert(id, tensor.clone());
        sd.insert(name.to_string(), tensor);
    }
    for (path, v) in versions {
        sd.set_version(&path, v);
    }
    Ok(sd)
}

/// The module versions in a state dict's `_metadata` attribute (PyTorch's
/// `{module path: {"version": n}}`, one entry per module), from the attribute dictionaries
/// set on the pickled OrderedDict. Entries without a version are skipped, as PyTorch's
/// loader reads them; a malformed one is an error naming it.
fn read_metadata(attributes: &[Value]) -> std::result::Result<Vec<(String, u32)>, String> {
    let str_of = |v: &Value| match v {
        Value::Str(s) => Some(s.to_string()),
        _ => None,
    };
    let mut versions = Vec::new();
    for attrs in attributes {
        let Value::Dict(attrs) = attrs else { continue };
        for (k, v) in attrs.borrow().iter() {
            if str_of(k).as_deref() != Some("_metadata") {
                continue;
            }
            let Value::Dict(meta) = v else { return Err(format!("is a {}, not a dict", v.kind())) };
            for (path, entry) in meta.borrow().iter() {
                let path = str_of(path).ok_or_else(|| format!("has a key that is a {}, not a path", path.kind()))?;
                let Value::Dict(entry) = entry else {
                    return Err(format!("for `{path}` is a {}, not a dict", entry.kind()));
                };
                for (name, value) in entry.borrow().iter() {
                    if str_of(name).as_deref() != Some("version") {
                        continue;
                    }
                    match value {
                        Value::Int(n) if u32::try_from(*n).is_ok() => versions.push((path.clone(), *n as u32)),
                        Value::Int(n) => return Err(format!("gives `{path}` the version {n}, outside u32's range")),
                        other => {
                            return Err(format!("gives `{path}` a version that is a {}, not a number", other.kind()))
                        }
                    }
                }
            }
        }
    }
    Ok(versions)
}

/// The bytes of the archive's entry `name`, which must be stored uncompressed and lie in
/// the file; `None` when there is no such entry.
fn entry<'b>(
    zip: &mut zip::ZipArchive<std::io::Cursor<&'b [u8]>>,
    bytes: &'b [u8],
    path: &Path,
    name: &str,
) -> Result<Option<&'b [u8]>> {
    let bad = |reason: String| Error::InvalidPyTorchFile { path: path.to_path_buf(), reason };
    let Some(i) = zip.index_for_name(name) else { return Ok(None) };
    let f = zip.by_index_raw(i).map_err(|e| bad(format!("entry `{name}`: {e}")))?;
    if f.compression() != zip::CompressionMethod::Stored || f.compressed_size() != f.size() {
        return Err(bad(format!(
            "entry `{name}` is compressed ({}): PyTorch stores its entries uncompressed",
            f.compression()
        )));
    }
    let start = f.data_start().ok_or_else(|| bad(format!("entry `{name}` has no data offset")))?;
    let end = start.checked_add(f.size()).filter(|&e| e <= bytes.len() as u64);
    let end = end.ok_or_else(|| bad(format!("entry `{name}` runs past the end of the file (truncated)")))?;
    let data = &bytes[start as usize..end as usize];
    // The checksum the archive records: a flipped bit in a storage is an error, not a
    // weight that loads changed.
    let crc = crc32fast::hash(data);
    if crc != f.crc32() {
        return Err(bad(format!(
            "entry `{name}` fails its CRC-32 check (0x{crc:08x}, the archive records 0x{:08x}): the file is corrupt",
            f.crc32()
        )));
    }
    Ok(Some(data))
}

/// The tensor `t` describes, copied out of its storage's bytes.
fn materialise(name: &str, t: &Rc<TensorRef>, storage: &[u8], path: &Path, budget: &mut usize) -> Result<Tensor> {
    let es = t.storage.dtype.size();
    let numel: usize = t.shape.iter().product();
    let contiguous = {
        let mut expect = 1;
        let mut ok = true;
        for (&n, &s) in t.shape.iter().zip(&t.stride).rev() {
            ok &= n <= 1 || s == expect;
            expect *= n;
        }
        ok
    };
    let bytes: std::borrow::Cow<'_, [u8]> = if contiguous {
        // In bounds: the unpickler checked that the view lies inside the storage, whose
        // entry has exactly its elements' bytes.
        let start = if numel == 0 { 0 } else { t.offset * es };
        std::borrow::Cow::Borrowed(&storage[start..start + numel * es])
    } else {
        *budget = budget.checked_sub(numel * es).ok_or_else(|| Error::InvalidPyTorchFile {
            path: path.to_path_buf(),
            reason: format!(
                "entry `{name}`: its strided views copy more than twice the file's bytes out of storage `{}`",
                t.storage.key
            ),
        })?;
        let mut out = Vec::with_capacity(numel * es);
        gather(&t.shape, &t.stride, t.offset, &mut |i| out.extend_from_slice(&storage[i * es..(i + 1) * es]));
        std::borrow::Cow::Owned(out)
    };
    let dtype = match t.storage.dtype {
        StorageDType::Native(DType::F32) => Dtype::F32,
        StorageDType::Native(DType::F64) => Dtype::F64,
        StorageDType::Native(DType::F16) => Dtype::F16,
        StorageDType::Native(DType::BF16) => Dtype::BF16,
        StorageDType::Native(DType::I64) => Dtype::I64,
        StorageDType::Native(DType::Bool) => Dtype::BOOL,
        StorageDType::I32 => Dtype::I32,
        StorageDType::I16 => Dtype::I16,
        StorageDType::I8 => Dtype::I8,
        StorageDType::U8 => Dtype::U8,
    };
    crate::serialization::tensor_from_view(name, dtype, &t.shape, &bytes, path).map_err(|e| match e {
        // The safetensors decoder's wording names the file as safetensors: say what it is.
        Error::InvalidFile { path, reason } => Error::InvalidPyTorchFile { path, reason },
        other => other,
    })
}

/// Calls `f` with the storage index of every element of the view, in row-major order.
fn gather(shape: &[usize], stride: &[usize], offset: usize, f: &mut impl FnMut(usize)) {
    match shape {
        [] => f(offset),
        [n, rest @ ..] => {
            for i in 0..*n {
                gather(rest, &stride[1..], offset + i * stride[0], f);
            }
        }
    }
}
