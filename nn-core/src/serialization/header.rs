//! The safetensors header, read as untrusted input: parsed in one pass and validated
//! completely (size cap, UTF-8, JSON with no key twice, shapes whose dimensions multiply
//! within bounds, offsets that tile the data section exactly) before any tensor is
//! materialised.

use std::collections::HashMap;
use std::path::Path;

use safetensors::Dtype;

use crate::error::{Error, Result};

/// The largest header a safetensors file may have: 100 MB, the limit of the format's
/// specification (and of the reference `safetensors` crate).
pub const MAX_HEADER_BYTES: usize = 100_000_000;

/// A validated safetensors header: entries in data order, each with a representable
/// shape and offsets that tile the data section exactly.
pub(super) struct Header {
    pub(super) entries: Vec<Entry>,
    pub(super) metadata: HashMap<String, String>,
    /// Where the data section starts in the file.
    pub(super) data_start: usize,
}

/// One tensor of the header; `begin..end` is relative to the data section.
pub(super) struct Entry {
    pub(super) name: String,
    pub(super) dtype: Dtype,
    pub(super) shape: Vec<usize>,
    pub(super) begin: usize,
    pub(super) end: usize,
}

/// A tensor's description, as the format writes it (unknown fields are ignored, as the
/// reference implementation does; a repeated field is an error).
#[derive(serde::Deserialize)]
struct Info {
    dtype: Dtype,
    shape: Vec<usize>,
    data_offsets: (usize, usize),
}

impl Header {
    /// Parses and validates the header at the start of `bytes` (a whole file's, read from
    /// `origin`).
    pub(super) fn parse(bytes: &[u8], origin: &Path) -> Result<Header> {
        let invalid = |reason: String| Error::InvalidFile { path: origin.to_path_buf(), reason };
        let Some(len_bytes) = bytes.first_chunk::<8>() else {
            return Err(invalid(format!("{} bytes, less than the 8-byte header length", bytes.len())));
        };
        let n = u64::from_le_bytes(*len_bytes);
        if n > MAX_HEADER_BYTES as u64 {
            return Err(invalid(format!("header length {n} is over the format's limit of {MAX_HEADER_BYTES} bytes")));
        }
        let data_start = 8 + n as usize;
        let Some(text) = bytes.get(8..data_start) else {
            return Err(invalid(format!("header length {n}, but only {} bytes follow it", bytes.len() - 8)));
        };
        let text = std::str::from_utf8(text).map_err(|e| invalid(format!("header is not UTF-8: {e}")))?;
        let raw: RawHeader = serde_json::from_str(text).map_err(|e| invalid(format!("header: {e}")))?;
        let mut entries = raw.entries;
        let mut names = std::collections::HashSet::with_capacity(entries.len());
        if let Some(e) = entries.iter().find(|e| !names.insert(e.name.as_str())) {
            return Err(invalid(format!("header names tensor `{}` twice", e.name)));
        }
        drop(names);
        // In data order (stable: zero-size tensors keep the header's order), tiling the
        // data section without gaps or overlaps.
        entries.sort_by_key(|e| (e.begin, e.end));
        let mut pos = 0usize;
        for e in &entries {
            if e.begin != pos || e.end < e.begin {
                return Err(invalid(format!(
                    "tensor `{}` has data offsets [{}, {}], expected to start at {pos} (tensors must tile the data \
                     section in order)",
                    e.name, e.begin, e.end
                )));
            }
            let numel = crate::shape::checked_numel(&e.shape).ok_or_else(|| {
                invalid(format!("tensor `{}` has shape {:?}, {}", e.name, e.shape, crate::shape::OVERFLOW))
            })?;
            let size = numel.checked_mul(e.dtype.bitsize()).filter(|bits| bits % 8 == 0).map(|bits| bits / 8);
            if size != Some(e.end - e.begin) {
                return Err(invalid(format!(
                    "tensor `{}`: {} values of {:?} do not fill its {} bytes",
                    e.name,
                    numel,
                    e.dtype,
                    e.end - e.begin
                )));
            }
            pos = e.end;
        }
        let data_len = bytes.len() - data_start;
        if pos != data_len {
            return Err(invalid(format!("the tensors cover {pos} bytes of a {data_len}-byte data section")));
        }
        Ok(Header { entries, metadata: raw.metadata.unwrap_or_default(), data_start })
    }
}

/// The header's JSON object, read in one pass: tensors in header order, `__metadata__`
/// with unique keys, and no key twice.
struct RawHeader {
    entries: Vec<Entry>,
    metadata: Option<HashMap<String, String>>,
}

impl<'de> serde::Deserialize<'de> for RawHeader {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawHeader;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object of tensors")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<RawHeader, A::Error> {
                let mut out = RawHeader { entries: Vec::new(), metadata: None };
                let mut seen_metadata = false;
                while let Some(name) = map.next_key::<String>()? {
                    if name == "__metadata__" {
                        if std::mem::replace(&mut seen_metadata, true) {
                            return Err(serde::de::Error::custom("duplicate key `__metadata__`"));
                        }
                        out.metadata = map.next_value::<Option<UniqueMap>>()?.map(|m| m.0);
                    } else {
                        let info: Info = map.next_value()?;
                        let (begin, end) = info.data_offsets;
                        out.entries.push(Entry { name, dtype: info.dtype, shape: info.shape, begin, end });
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// A string-to-string map that refuses a key given twice.
struct UniqueMap(HashMap<String, String>);

impl<'de> serde::Deserialize<'de> for UniqueMap {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = UniqueMap;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object of strings")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<UniqueMap, A::Error> {
                let mut out = HashMap::new();
                while let Some((k, v)) = map.next_entry::<String, String>()? {
                    if out.contains_key(&k) {
                        return Err(serde::de::Error::custom(format_args!("duplicate key `{k}` in `__metadata__`")));
                    }
                    out.insert(k, v);
                }
                Ok(UniqueMap(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Checks that no JSON object in `json` has the same key twice: `serde_json` would keep
/// the last one silently, so a file could say one thing to this reader and another to
/// the next. For metadata and configs read from files (nn-models' `config.json`).
///
/// ```
/// use nn_core::serialization::check_unique_keys;
/// assert!(check_unique_keys(r#"{"eps": 1e-5, "layers": [{"n": 1}, {"n": 2}]}"#).is_ok());
/// let e = check_unique_keys(r#"{"eps": 1e-5, "eps": 0.5}"#).unwrap_err();
/// assert!(e.contains("duplicate key `eps`"), "{e}");
/// ```
///
/// # Errors
/// The duplicate key (or what makes `json` invalid), with its position.
pub fn check_unique_keys(json: &str) -> std::result::Result<(), String> {
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
