//! Safetensors files: [`StateDict::save`] / [`StateDict::load`], with PyTorch's key names
//! and dtypes, so checkpoints move between this framework and PyTorch unchanged.
//!
//! Files are untrusted input. The `safetensors` crate validates the header (size cap,
//! UTF-8, JSON, contiguous in-bounds offsets, element counts that match byte lengths
//! without overflow, a data section that exactly fills the file) before any tensor is
//! materialised, and every allocation here is bounded by the file's own length.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors, View};

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::state_dict::StateDict;
use crate::storage::{CpuStorage, Storage};
use crate::tensor::Tensor;

/// Files at least this large are memory-mapped for loading; smaller ones are read.
const MMAP_THRESHOLD: u64 = 16 << 20;

fn to_safetensors_dtype(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::I64 => Dtype::I64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::Bool => Dtype::BOOL,
    }
}

/// A tensor as `safetensors` sees it; bytes are produced on demand, one tensor at a time.
struct TensorBytes<'a> {
    tensor: &'a Tensor,
    dtype: Dtype,
}

impl View for TensorBytes<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        self.tensor.shape()
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Owned(le_bytes(self.tensor))
    }
    fn data_len(&self) -> usize {
        self.tensor.numel() * self.tensor.dtype().size_in_bytes()
    }
}

/// The tensor's values, row-major, little-endian.
fn le_bytes(t: &Tensor) -> Vec<u8> {
    let s = t.storage_arc();
    let Storage::Cpu(c) = &*s else { unreachable!("meta tensors are rejected before serialising") };
    let l = t.layout();
    // A contiguous tensor is encoded straight from its storage; a strided view is gathered
    // first.
    let gathered;
    let (c, range) = match l.contiguous_range() {
        Some(r) => (c, r),
        None => {
            gathered = c.gather_layout(l);
            (&gathered, 0..l.numel())
        }
    };
    match c {
        CpuStorage::F32(v) => encode(&v[range], f32::to_le_bytes),
        CpuStorage::F64(v) => encode(&v[range], f64::to_le_bytes),
        CpuStorage::I64(v) => encode(&v[range], i64::to_le_bytes),
        CpuStorage::F16(v) => encode(&v[range], |x: f16| x.to_bits().to_le_bytes()),
        CpuStorage::BF16(v) => encode(&v[range], |x: bf16| x.to_bits().to_le_bytes()),
        CpuStorage::Bool(v) => v[range].iter().map(|&b| b as u8).collect(),
    }
}

/// Fixed-width little-endian encoding into a pre-sized buffer: a loop the compiler turns
/// into a plain copy on little-endian targets.
fn encode<const N: usize, T: Copy>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    let mut out = vec![0u8; v.len() * N];
    for (o, &x) in out.chunks_exact_mut(N).zip(v) {
        o.copy_from_slice(&f(x));
    }
    out
}

fn decode<const N: usize, T>(bytes: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    bytes.chunks_exact(N).map(|c| f(c.try_into().expect("chunks_exact"))).collect()
}

/// Builds a tensor from one validated safetensors entry. Integer types narrower than 64
/// bits widen to `i64` (lossless); formats with no counterpart here are an error.
fn tensor_from_view(key: &str, dtype: Dtype, shape: &[usize], bytes: &[u8], origin: &Path) -> Result<Tensor> {
    let storage = match dtype {
        Dtype::F32 => CpuStorage::F32(decode(bytes, f32::from_le_bytes)),
        Dtype::F64 => CpuStorage::F64(decode(bytes, f64::from_le_bytes)),
        Dtype::I64 => CpuStorage::I64(decode(bytes, i64::from_le_bytes)),
        Dtype::F16 => CpuStorage::F16(decode(bytes, |b| f16::from_bits(u16::from_le_bytes(b)))),
        Dtype::BF16 => CpuStorage::BF16(decode(bytes, |b| bf16::from_bits(u16::from_le_bytes(b)))),
        Dtype::BOOL => CpuStorage::Bool(bytes.iter().map(|&b| b != 0).collect()),
        Dtype::I32 => CpuStorage::I64(decode(bytes, |b| i32::from_le_bytes(b) as i64)),
        Dtype::I16 => CpuStorage::I64(decode(bytes, |b| i16::from_le_bytes(b) as i64)),
        Dtype::I8 => CpuStorage::I64(bytes.iter().map(|&b| b as i8 as i64).collect()),
        Dtype::U8 => CpuStorage::I64(bytes.iter().map(|&b| b as i64).collect()),
        Dtype::U16 => CpuStorage::I64(decode(bytes, |b| u16::from_le_bytes(b) as i64)),
        Dtype::U32 => CpuStorage::I64(decode(bytes, |b| u32::from_le_bytes(b) as i64)),
        other => {
            return Err(Error::UnsupportedFileDType {
                path: origin.to_path_buf(),
                key: key.to_string(),
                dtype: format!("{other:?}"),
            })
        }
    };
    Ok(Tensor::from_cpu(storage, shape))
}

impl StateDict {
    /// Saves to a safetensors file, atomically (see [`crate::io::atomic_write`]): a
    /// failure at any point leaves a previous file at `path` intact.
    ///
    /// ```
    /// use nn_core::{StateDict, Tensor};
    /// let dir = std::env::temp_dir().join(format!("nn-sd-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join("w.safetensors");
    /// let mut sd = StateDict::default();
    /// sd.insert("w".to_string(), Tensor::from_vec(vec![1.0, 2.0], &[2]));
    /// sd.insert("step".to_string(), Tensor::from_vec_i64(vec![7], &[]));
    /// sd.save(&path).unwrap();
    /// let back = StateDict::load(&path).unwrap();
    /// assert_eq!(back.get("w").unwrap().to_vec(), vec![1.0, 2.0]);
    /// assert_eq!(back.get("step").unwrap().shape(), &[] as &[usize]);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`Error::Io`] for file-system failures; [`Error::MetaHasNoValues`] when an entry is
    /// on the meta device.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        self.save_with_metadata(path, None)
    }

    /// [`save`](StateDict::save) with a string-to-string metadata map in the header
    /// (`__metadata__`, as `safetensors.torch.save_file(metadata=...)`).
    pub fn save_with_metadata(&self, path: impl AsRef<Path>, metadata: Option<HashMap<String, String>>) -> Result<()> {
        let bytes = self.to_safetensors_bytes(metadata)?;
        crate::io::atomic_write(path, |f| {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
            w.write_all(&bytes)?;
            w.flush()
        })
    }

    /// The safetensors encoding of this state dict.
    ///
    /// # Errors
    /// [`Error::MetaHasNoValues`] when an entry has no values.
    pub fn to_safetensors_bytes(&self, metadata: Option<HashMap<String, String>>) -> Result<Vec<u8>> {
        if let Some((k, t)) = self.iter().find(|(_, t)| t.device() == Device::Meta) {
            return Err(Error::MetaHasNoValues { op: "StateDict::save", shape: t.shape().to_vec() }.with_key(k));
        }
        let views = self.iter().map(|(k, t)| (k, TensorBytes { tensor: t, dtype: to_safetensors_dtype(t.dtype()) }));
        safetensors::serialize(views, metadata)
            .map_err(|e| Error::InvalidFile { path: "<memory>".into(), reason: e.to_string() })
    }

    /// Loads a safetensors file, in file order. The file is validated completely before
    /// any tensor is built; large files are memory-mapped.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read; [`Error::InvalidFile`] when it is not a
    /// valid safetensors file (truncated, corrupt header, offsets out of bounds, ...);
    /// [`Error::UnsupportedFileDType`] for an element type with no counterpart here.
    pub fn load(path: impl AsRef<Path>) -> Result<StateDict> {
        Ok(Self::load_with_metadata(path)?.0)
    }

    /// [`load`](StateDict::load), also returning the header's `__metadata__` map.
    pub fn load_with_metadata(path: impl AsRef<Path>) -> Result<(StateDict, HashMap<String, String>)> {
        let path = path.as_ref();
        let io_err = |source| Error::Io { path: path.to_path_buf(), source };
        let file = std::fs::File::open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        if len >= MMAP_THRESHOLD {
            // SAFETY: the map is read-only and dropped before returning; every tensor is
            // copied out of it. Concurrent truncation of the file by another process is
            // the one hazard of any mmap-based reader and is not defended against.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err)?;
            Self::parse(&map, path)
        } else {
            let mut bytes = Vec::with_capacity(len as usize);
            std::io::Read::read_to_end(&mut &file, &mut bytes).map_err(io_err)?;
            Self::parse(&bytes, path)
        }
    }

    /// Parses safetensors bytes held in memory.
    ///
    /// # Errors
    /// As [`load`](StateDict::load).
    pub fn from_safetensors_bytes(bytes: &[u8]) -> Result<(StateDict, HashMap<String, String>)> {
        Self::parse(bytes, Path::new("<memory>"))
    }

    fn parse(bytes: &[u8], origin: &Path) -> Result<(StateDict, HashMap<String, String>)> {
        let invalid =
            |e: safetensors::SafeTensorError| Error::InvalidFile { path: origin.to_path_buf(), reason: e.to_string() };
        let (_, meta) = SafeTensors::read_metadata(bytes).map_err(invalid)?;
        let st = SafeTensors::deserialize(bytes).map_err(invalid)?;
        let mut sd = StateDict::default();
        for key in meta.offset_keys() {
            let view = st.tensor(&key).map_err(invalid)?;
            sd.insert(key.clone(), tensor_from_view(&key, view.dtype(), view.shape(), view.data(), origin)?);
        }
        Ok((sd, meta.metadata().clone().unwrap_or_default()))
    }
}

/// Checks that no JSON object in `json` has the same key twice: `serde_json` would keep
/// the last one silently, so a file could say one thing to this reader and another to
/// the next.
pub(crate) fn check_unique_keys(json: &str) -> std::result::Result<(), String> {
    let mut de = serde_json::Deserializer::from_str(json);
    serde::de::DeserializeSeed::deserialize(UniqueKeys, &mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())
}

/// A JSON value walked only to find duplicate keys (nesting is bounded by `serde_json`'s
/// recursion limit).
struct UniqueKeys;

impl<'de> serde::de::DeserializeSeed<'de> for UniqueKeys {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for UniqueKeys {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while seq.next_element_seed(UniqueKeys)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                return Err(serde::de::Error::custom(format_args!("duplicate key `{key}`")));
            }
            map.next_value_seed(UniqueKeys)?;
            seen.insert(key);
        }
        Ok(())
    }
}
