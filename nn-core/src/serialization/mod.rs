//! Safetensors files: [`StateDict::save`] / [`StateDict::load`], with PyTorch's key names
//! and dtypes, so checkpoints move between this framework and PyTorch unchanged.
//!
//! Files are untrusted input. Only regular files are opened; the header is read here in
//! one pass and validated completely (size cap, UTF-8, JSON, no name twice, shapes whose
//! dimensions multiply within bounds, offsets that tile the data section exactly, a data
//! section that exactly fills the file) before any tensor is materialised, and every
//! allocation is bounded by the file's own length: the tensors take at most that many
//! bytes, except the narrow integer types (`I32`, `U32`, `I16`, `U16`, `I8`, `U8`), which
//! load as `i64` (nn's integer type; so a `U8` file of n bytes takes 8n bytes). Writing
//! goes through the `safetensors` crate.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use half::{bf16, f16};
use safetensors::{Dtype, View};

use crate::backend::Storage;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::state_dict::StateDict;
use crate::tensor::Tensor;

mod header;

pub use header::{check_unique_keys, MAX_HEADER_BYTES};
use header::{Entry, Header};

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
    t.storage_arc().to_le_bytes(t.layout()).expect("meta tensors are rejected before serialising")
}

/// The elements of `bytes`, `N` bytes each, converted by `f`.
fn decode<const N: usize, T>(bytes: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    bytes.chunks_exact(N).map(|c| f(c.try_into().expect("chunks_exact"))).collect()
}

/// [`decode`] in parts on the CPU team, for the large element types (`f32`, `f64`,
/// `i64`): copying out of the file's pages is most of a load (measured on a 2-vCPU Xeon,
/// a 64 MB state dict of sixteen 4 MB tensors: 30-31 ms on one thread, 19-21 on two).
/// Not [`team::fill`](crate::backend::cpu::team::fill), whose loop counts the items of
/// a generic iterator: with the same parts it loaded in 37 ms on one thread, against
/// 31 for the slice loop below (back to back, measured twice).
fn decode_native<const N: usize, T: Copy + Send>(bytes: &[u8], f: impl Fn([u8; N]) -> T + Sync) -> Vec<T> {
    use crate::backend::cpu::team;
    let len = bytes.len() / N;
    let mut out: Vec<T> = Vec::with_capacity(len);
    team::for_chunks(&mut out.spare_capacity_mut()[..len], team::GRAIN * 16, |q, part| {
        let src = &bytes[q * team::GRAIN * 16 * N..][..part.len() * N];
        for (slot, c) in part.iter_mut().zip(src.chunks_exact(N)) {
            slot.write(f(c.try_into().expect("chunks_exact")));
        }
    });
    // SAFETY: the parts cover all `len` slots and each was written in full above (a panic
    // in a part is raised by `for_chunks` before this line).
    unsafe { out.set_len(len) };
    out
}

/// Builds a tensor from one validated safetensors entry. Integer types narrower than 64
/// bits widen to `i64` (lossless); formats with no counterpart here are an error.
pub(crate) fn tensor_from_view(
    key: &str,
    dtype: Dtype,
    shape: &[usize],
    bytes: &[u8],
    origin: &Path,
) -> Result<Tensor> {
    let storage = match dtype {
        Dtype::F32 => Storage::from_vec(decode_native(bytes, f32::from_le_bytes)),
        Dtype::F64 => Storage::from_vec(decode_native(bytes, f64::from_le_bytes)),
        Dtype::I64 => Storage::from_vec(decode_native(bytes, i64::from_le_bytes)),
        Dtype::F16 => Storage::from_vec(decode(bytes, |b| f16::from_bits(u16::from_le_bytes(b)))),
        Dtype::BF16 => Storage::from_vec(decode(bytes, |b| bf16::from_bits(u16::from_le_bytes(b)))),
        Dtype::BOOL => {
            // A bool is one byte, 0 or 1 (as PyTorch and NumPy write it); another byte is
            // a corrupt file, not `true`.
            if let Some(i) = bytes.iter().position(|&b| b > 1) {
                return Err(Error::InvalidFile {
                    path: origin.to_path_buf(),
                    reason: format!("`{key}` is BOOL, and its element {i} is the byte {}, not 0 or 1", bytes[i]),
                });
            }
            Storage::from_vec(bytes.iter().map(|&b| b != 0).collect())
        }
        Dtype::I32 => Storage::from_vec(decode(bytes, |b| i32::from_le_bytes(b) as i64)),
        Dtype::I16 => Storage::from_vec(decode(bytes, |b| i16::from_le_bytes(b) as i64)),
        Dtype::I8 => Storage::from_vec(bytes.iter().map(|&b| b as i8 as i64).collect()),
        Dtype::U8 => Storage::from_vec(bytes.iter().map(|&b| b as i64).collect()),
        Dtype::U16 => Storage::from_vec(decode(bytes, |b| u16::from_le_bytes(b) as i64)),
        Dtype::U32 => Storage::from_vec(decode(bytes, |b| u32::from_le_bytes(b) as i64)),
        other => {
            return Err(Error::UnsupportedFileDType {
                path: origin.to_path_buf(),
                key: key.to_string(),
                dtype: format!("{other:?}"),
            })
        }
    };
    Ok(Tensor::from_storage(storage, shape))
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
    /// A tensor listed under several names (a tied parameter) is written once, under its
    /// first name, and the others are recorded in the metadata ([`TIED_NAMES_KEY`]):
    /// [`load`](StateDict::load) lists them again, as one tensor.
    ///
    /// # Errors
    /// [`Error::Io`] for file-system failures; [`Error::MetaHasNoValues`] when an entry is
    /// on the meta device.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        self.save_with_metadata(path, None)
    }

    /// [`save`](StateDict::save) with a string-to-string metadata map in the header
    /// (`__metadata__`, as `safetensors.torch.save_file(metadata=...)`).
    ///
    /// The file is written as it is encoded, one tensor after another, a megabyte at a
    /// time: no copy of the whole state dict is made. Its bytes are those of
    /// [`to_safetensors_bytes`](StateDict::to_safetensors_bytes).
    ///
    /// # Errors
    /// As [`save`](StateDict::save); [`Error::InvalidFile`] when `metadata` uses
    /// [`TIED_NAMES_KEY`], which is nn's own. Nothing is written then.
    pub fn save_with_metadata(&self, path: impl AsRef<Path>, metadata: Option<HashMap<String, String>>) -> Result<()> {
        let mut files = crate::io::AtomicFiles::new();
        self.save_staged(&mut files, path, metadata)?;
        files.commit()
    }

    /// [`save_with_metadata`](StateDict::save_with_metadata) as one file of a set written
    /// together ([`AtomicFiles`](crate::io::AtomicFiles)): the file is written in full
    /// under a temporary name, and takes `path`'s place when the set is committed (a model's
    /// weights beside its config).
    ///
    /// # Errors
    /// As [`save_with_metadata`](StateDict::save_with_metadata).
    pub fn save_staged(
        &self,
        files: &mut crate::io::AtomicFiles,
        path: impl AsRef<Path>,
        metadata: Option<HashMap<String, String>>,
    ) -> Result<()> {
        let (header, entries, data_len) = self.safetensors_header(metadata)?;
        files.write(path, |f| {
            // Sized up front: the file system allocates once.
            f.set_len(8 + header.len() as u64 + data_len as u64)?;
            let mut w = std::io::BufWriter::with_capacity(1 << 20, crate::io::EarlyWriteback::new(f));
            w.write_all(&(header.len() as u64).to_le_bytes())?;
            w.write_all(&header)?;
            for t in entries {
                t.storage_arc().write_le(t.layout(), &mut w)?;
            }
            w.flush()
        })
    }

    /// The entries a file holds: each tensor once, under its first name. Entries that are
    /// one tensor handle (the same [`TensorId`](crate::TensorId): a tied parameter in a
    /// module's state dict, listed under each of its names) are written once, as
    /// `safetensors.torch.save_model` and Hugging Face's `save_pretrained` do; the later
    /// names are recorded in the metadata under [`TIED_NAMES_KEY`] (`safetensors.torch`
    /// records them as plain metadata keys), and [`load`](StateDict::load) lists them
    /// again as the same tensor, so a file read back holds every name. Distinct tensors are
    /// never merged, even when they share storage (copy-on-write after a load) or hold
    /// equal values.
    fn distinct_entries(&self) -> Vec<(&str, &Tensor)> {
        let mut seen = std::collections::HashSet::new();
        self.iter().filter(|(_, t)| seen.insert(t.id())).collect()
    }

    /// `metadata` with nn's own entries added: the names
    /// [`distinct_entries`](Self::distinct_entries) leaves out under [`TIED_NAMES_KEY`], the
    /// modules' versions under [`VERSIONS_KEY`] and their extra states under
    /// [`EXTRA_STATE_KEY`]; or an error when the caller's metadata uses one of those keys.
    fn with_nn_metadata(&self, metadata: Option<HashMap<String, String>>) -> Result<Option<HashMap<String, String>>> {
        if self.contains_key("__metadata__") {
            return Err(Error::InvalidFile {
                path: "<memory>".into(),
                reason: "an entry is named `__metadata__`, the safetensors header's own key (the file's metadata): \
                         rename it"
                    .into(),
            });
        }
        for (key, what) in [
            (TIED_NAMES_KEY, "the names of tied entries"),
            (VERSIONS_KEY, "the modules' layout versions"),
            (EXTRA_STATE_KEY, "the modules' extra states"),
        ] {
            if metadata.as_ref().is_some_and(|m| m.contains_key(key)) {
                return Err(Error::InvalidFile {
                    path: "<memory>".into(),
                    reason: format!("the metadata key `{key}` is nn's own ({what})"),
                });
            }
        }
        let mut metadata = metadata;
        if self.versions().next().is_some() {
            let versions: std::collections::BTreeMap<&str, u32> = self.versions().collect();
            let json = serde_json::to_string(&versions).expect("strings and numbers serialise");
            metadata.get_or_insert_with(HashMap::new).insert(VERSIONS_KEY.to_string(), json);
        }
        if self.extra_states().next().is_some() {
            let extra: Vec<(&str, &serde_json::Value)> = self.extra_states().collect();
            let json = serde_json::to_string(&extra).expect("JSON values serialise");
            metadata.get_or_insert_with(HashMap::new).insert(EXTRA_STATE_KEY.to_string(), json);
        }
        let mut first: HashMap<crate::TensorId, &str> = HashMap::new();
        let mut tied = std::collections::BTreeMap::new();
        for (name, t) in self.iter() {
            match first.get(&t.id()) {
                Some(kept) => {
                    tied.insert(name, *kept);
                }
                None => {
                    first.insert(t.id(), name);
                }
            }
        }
        if tied.is_empty() {
            return Ok(metadata);
        }
        let mut metadata = metadata.unwrap_or_default();
        metadata.insert(TIED_NAMES_KEY.to_string(), serde_json::to_string(&tied).expect("strings serialise"));
        Ok(Some(metadata))
    }

    /// The safetensors header (padded to 8 bytes, as the `safetensors` crate writes it),
    /// the tensors in file order (descending alignment, then name) and their total bytes.
    fn safetensors_header(&self, metadata: Option<HashMap<String, String>>) -> Result<(Vec<u8>, Vec<&Tensor>, usize)> {
        if let Some((k, t)) = self.iter().find(|(_, t)| t.device() == Device::Meta) {
            return Err(Error::MetaHasNoValues { op: "StateDict::save", shape: t.shape().to_vec() }.with_key(k));
        }
        let metadata = self.with_nn_metadata(metadata)?;
        let mut entries: Vec<(&str, &Tensor)> = self.distinct_entries();
        let st = |t: &Tensor| to_safetensors_dtype(t.dtype());
        entries.sort_by(|(ln, l), (rn, r)| st(r).cmp(&st(l)).then(ln.cmp(rn)));
        let mut offset = 0;
        let infos = entries
            .iter()
            .map(|(name, t)| {
                let n = t.numel() * t.dtype().size_in_bytes();
                let info = safetensors::tensor::TensorInfo {
                    dtype: st(t),
                    shape: t.shape().to_vec(),
                    data_offsets: (offset, offset + n),
                };
                offset += n;
                (name.to_string(), info)
            })
            .collect();
        let bad = |reason: String| Error::InvalidFile { path: "<memory>".into(), reason };
        let meta = safetensors::tensor::Metadata::new(metadata, infos).map_err(|e| bad(e.to_string()))?;
        let mut header = serde_json::to_string(&meta).map_err(|e| bad(e.to_string()))?.into_bytes();
        header.resize(header.len().next_multiple_of(8), b' ');
        if header.len() > MAX_HEADER_BYTES {
            return Err(bad(format!("the header would take {} bytes, more than {MAX_HEADER_BYTES}", header.len())));
        }
        Ok((header, entries.into_iter().map(|(_, t)| t).collect(), offset))
    }

    /// The safetensors encoding of this state dict.
    ///
    /// # Errors
    /// [`Error::MetaHasNoValues`] when an entry has no values.
    pub fn to_safetensors_bytes(&self, metadata: Option<HashMap<String, String>>) -> Result<Vec<u8>> {
        if let Some((k, t)) = self.iter().find(|(_, t)| t.device() == Device::Meta) {
            return Err(Error::MetaHasNoValues { op: "StateDict::save", shape: t.shape().to_vec() }.with_key(k));
        }
        let metadata = self.with_nn_metadata(metadata)?;
        let views = self
            .distinct_entries()
            .into_iter()
            .map(|(k, t)| (k, TensorBytes { tensor: t, dtype: to_safetensors_dtype(t.dtype()) }));
        safetensors::serialize(views, metadata)
            .map_err(|e| Error::InvalidFile { path: "<memory>".into(), reason: e.to_string() })
    }

    /// Loads a safetensors file, in file order. The file is validated completely before
    /// any tensor is built; large files are memory-mapped.
    ///
    /// Only regular files are read (a FIFO would block forever, `/dev/zero` never ends),
    /// headers are limited to [`MAX_HEADER_BYTES`] as the format specifies, and a header
    /// must not name a tensor twice.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read; [`Error::NotARegularFile`] for FIFOs,
    /// devices, sockets and directories; [`Error::InvalidFile`] when it is not a valid
    /// safetensors file (truncated, corrupt header, offsets out of bounds, duplicate names,
    /// unrepresentable shapes, ...); [`Error::UnsupportedFileDType`] for an element type
    /// with no counterpart here.
    pub fn load(path: impl AsRef<Path>) -> Result<StateDict> {
        Ok(Self::load_with_metadata(path)?.0)
    }

    /// [`load`](StateDict::load), also returning the header's `__metadata__` map.
    ///
    /// # Errors
    /// As [`load`](StateDict::load).
    pub fn load_with_metadata(path: impl AsRef<Path>) -> Result<(StateDict, HashMap<String, String>)> {
        let path = path.as_ref();
        crate::io::with_file_bytes(path, |bytes| Self::parse(bytes, path))
    }

    /// Parses safetensors bytes held in memory.
    ///
    /// # Errors
    /// As [`load`](StateDict::load).
    pub fn from_safetensors_bytes(bytes: &[u8]) -> Result<(StateDict, HashMap<String, String>)> {
        Self::parse(bytes, Path::new("<memory>"))
    }

    fn parse(bytes: &[u8], origin: &Path) -> Result<(StateDict, HashMap<String, String>)> {
        let mut header = Header::parse(bytes, origin)?;
        let data = &bytes[header.data_start..];
        // The tied names are checked before any tensor is built.
        let tied = match header.metadata.remove(TIED_NAMES_KEY) {
            Some(json) => read_tied_names(&json, &header.entries, origin)?,
            None => Vec::new(),
        };
        let versions = match header.metadata.remove(VERSIONS_KEY) {
            Some(json) => read_versions(&json, origin)?,
            None => Vec::new(),
        };
        let extra = match header.metadata.remove(EXTRA_STATE_KEY) {
            Some(json) => read_extra_states(&json, origin)?,
            None => Vec::new(),
        };
        let mut sd = StateDict::with_capacity(header.entries.len() + tied.len());
        for (path, v) in versions {
            sd.set_version(&path, v);
        }
        for (key, state) in extra {
            sd.insert_extra_state(key, state);
        }
        for e in header.entries {
            let t = tensor_from_view(&e.name, e.dtype, &e.shape, &data[e.begin..e.end], origin)?;
            sd.insert(e.name, t);
        }
        for (name, kept) in tied {
            let t = sd.get(&kept).expect("checked: the kept name is an entry").clone();
            sd.insert(name, t);
        }
        Ok((sd, header.metadata))
    }
}

/// The metadata key under which [`StateDict::save`] records the names of tied entries it
/// writes once: a JSON object mapping each left-out name to the name written.
pub const TIED_NAMES_KEY: &str = "nn.tied_names";

/// The metadata key under which [`StateDict::save`] records the modules' layout versions
/// ([`StateDict::version`]): a JSON object mapping each module path to its version.
pub const VERSIONS_KEY: &str = "nn.versions";

/// The metadata key under which [`StateDict::save`] records the modules' extra states
/// ([`StateDict::extra_state`]): a JSON list of `[key, state]` pairs, in order.
pub const EXTRA_STATE_KEY: &str = "nn.extra_state";

/// The `(module path, version)` pairs of a file's [`VERSIONS_KEY`] entry: a map of paths
/// to integers from 0 to `u32::MAX`, no path twice.
fn read_versions(json: &str, origin: &Path) -> Result<Vec<(String, u32)>> {
    let bad = |reason: String| Error::InvalidFile { path: origin.to_path_buf(), reason };
    check_unique_keys(json).map_err(|e| bad(format!("`{VERSIONS_KEY}`: {e}")))?;
    let map: std::collections::BTreeMap<String, u32> = serde_json::from_str(json)
        .map_err(|e| bad(format!("`{VERSIONS_KEY}` is not a map of module paths to versions: {e}")))?;
    Ok(map.into_iter().collect())
}

/// The `(key, state)` pairs of a file's [`EXTRA_STATE_KEY`] entry: each key
/// `_extra_state` or ending in `._extra_state`, none twice.
fn read_extra_states(json: &str, origin: &Path) -> Result<Vec<(String, serde_json::Value)>> {
    use crate::module::EXTRA_STATE_KEY as SUFFIX;
    let bad = |reason: String| Error::InvalidFile { path: origin.to_path_buf(), reason };
    let pairs: Vec<(String, serde_json::Value)> = serde_json::from_str(json)
        .map_err(|e| bad(format!("`{EXTRA_STATE_KEY}` is not a list of [key, state] pairs: {e}")))?;
    let mut seen = std::collections::HashSet::new();
    for (key, _) in &pairs {
        if !(key == SUFFIX || key.ends_with(&format!(".{SUFFIX}"))) {
            return Err(bad(format!("`{EXTRA_STATE_KEY}` holds `{key}`, which is not an extra state's key (`{SUFFIX}` or `<prefix>.{SUFFIX}`)")));
        }
        if !seen.insert(key.as_str()) {
            return Err(bad(format!("`{EXTRA_STATE_KEY}` holds `{key}` twice")));
        }
    }
    Ok(pairs)
}

/// The `(left-out name, written name)` pairs of a file's [`TIED_NAMES_KEY`] entry, checked
/// against its entries: each written name is one, no left-out name is one, no name twice.
fn read_tied_names(json: &str, entries: &[Entry], origin: &Path) -> Result<Vec<(String, String)>> {
    let bad = |reason: String| Error::InvalidFile { path: origin.to_path_buf(), reason };
    check_unique_keys(json).map_err(|e| bad(format!("`{TIED_NAMES_KEY}`: {e}")))?;
    let map: std::collections::BTreeMap<String, String> =
        serde_json::from_str(json).map_err(|e| bad(format!("`{TIED_NAMES_KEY}` is not a map of names: {e}")))?;
    let names: std::collections::HashSet<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    for (name, kept) in &map {
        if names.contains(name.as_str()) {
            return Err(bad(format!("`{TIED_NAMES_KEY}` ties `{name}`, which the file holds as a tensor of its own")));
        }
        if !names.contains(kept.as_str()) {
            return Err(bad(format!("`{TIED_NAMES_KEY}` ties `{name}` to `{kept}`, which the file does not hold")));
        }
    }
    Ok(map.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tensors large enough to be read in several parts (on the team, when it has more
    /// than one thread) come back bit for bit, in every dtype read that way.
    #[test]
    fn large_tensors_read_in_parts_come_back_bit_for_bit() {
        let n = 3 * 16 * crate::backend::cpu::team::GRAIN + 12_345; // three parts and a tail
        let bits = |i: usize| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // Arbitrary bit patterns: NaN payloads, subnormals and negative zeros included.
        let f32s: Vec<f32> = (0..n).map(|i| f32::from_bits((bits(i) >> 32) as u32)).collect();
        let f64s: Vec<f64> = (0..n).map(|i| f64::from_bits(bits(i))).collect();
        let i64s: Vec<i64> = (0..n).map(|i| bits(i) as i64).collect();
        let mut sd = StateDict::default();
        sd.insert("a".into(), Tensor::from_vec(f32s.clone(), &[n]));
        sd.insert("b".into(), Tensor::from_vec_f64(f64s.clone(), &[n]));
        sd.insert("c".into(), Tensor::from_vec_i64(i64s.clone(), &[n]));
        let bytes = sd.to_safetensors_bytes(None).unwrap();
        let (back, _) = StateDict::from_safetensors_bytes(&bytes).unwrap();
        let same = |a: &[u64], b: &[u64]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y);
        let got32: Vec<u64> =
            back.get("a").unwrap().to_vec_of::<f32>().iter().map(|v| u64::from(v.to_bits())).collect();
        assert!(same(&got32, &f32s.iter().map(|v| u64::from(v.to_bits())).collect::<Vec<_>>()));
        let got64: Vec<u64> = back.get("b").unwrap().to_vec_of::<f64>().iter().map(|v| v.to_bits()).collect();
        assert!(same(&got64, &f64s.iter().map(|v| v.to_bits()).collect::<Vec<_>>()));
        let goti: Vec<u64> = back.get("c").unwrap().to_vec_of::<i64>().iter().map(|&v| v as u64).collect();
        assert!(same(&goti, &i64s.iter().map(|&v| v as u64).collect::<Vec<_>>()));
    }

    #[test]
    fn the_streamed_file_holds_the_bytes_of_the_in_memory_encoding() {
        let mut sd = StateDict::default();
        let big = Tensor::arange(0.0, 700_000.0, 1.0); // several write chunks
        sd.insert("b.big".into(), big);
        sd.insert("a.strided".into(), Tensor::arange(0.0, 12.0, 1.0).reshape(&[3, 4]).t());
        sd.insert("c.half".into(), Tensor::arange(0.0, 5.0, 0.5).to_dtype(DType::F16));
        sd.insert("c.bf".into(), Tensor::arange(0.0, 3.0, 1.0).to_dtype(DType::BF16));
        sd.insert("d.f64".into(), Tensor::from_vec_f64(vec![1.5, -2.0], &[2]));
        sd.insert("e.step".into(), Tensor::from_vec_i64(vec![7], &[]));
        sd.insert("f.mask".into(), Tensor::from_vec_bool(vec![true, false, true], &[3]));
        sd.insert("g.empty".into(), Tensor::zeros(&[0, 3]));
        let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sd.safetensors");
        sd.save_with_metadata(&path, Some(meta.clone())).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), sd.to_safetensors_bytes(Some(meta)).unwrap());
        let back = StateDict::load(&path).unwrap();
        assert_eq!(back.get("a.strided").unwrap().to_vec(), sd.get("a.strided").unwrap().to_vec());
        assert_eq!(back.get("b.big").unwrap().to_vec(), sd.get("b.big").unwrap().to_vec());
    }

    /// A bool byte other than 0 and 1 is a corrupt file; an entry named `__metadata__`
    /// is refused at save (the file would hold the header's own key twice, and `load`
    /// would refuse it after it had replaced a good one).
    #[test]
    fn bool_bytes_and_the_metadata_key_are_checked() {
        let mut sd = StateDict::default();
        sd.insert("mask".into(), Tensor::from_vec_bool(vec![true, false, true], &[3]));
        let mut bytes = sd.to_safetensors_bytes(None).unwrap();
        let n = bytes.len();
        assert_eq!(&bytes[n - 3..], [1, 0, 1]);
        bytes[n - 2] = 2;
        let e = StateDict::from_safetensors_bytes(&bytes).unwrap_err().to_string();
        assert!(e.contains("`mask` is BOOL, and its element 1 is the byte 2, not 0 or 1"), "{e}");

        sd.insert("__metadata__".into(), Tensor::ones(&[1]));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sd.safetensors");
        for e in [sd.to_safetensors_bytes(None).unwrap_err(), sd.save(&path).unwrap_err()] {
            assert!(e.to_string().contains("an entry is named `__metadata__`"), "{e}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing written");
    }
}
