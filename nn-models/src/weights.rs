//! The weights of a checkpoint directory, in every layout transformers writes: one
//! `model.safetensors`; shards named by `model.safetensors.index.json`; one
//! `pytorch_model.bin` (PyTorch's zip format, read by nn-core's restricted unpickler,
//! [`StateDict::load_pytorch`]); shards named by `pytorch_model.bin.index.json`. They are
//! looked for in that order, as transformers prefers safetensors.
//!
//! A sharded checkpoint is checked against its index before anything is returned: every
//! shard the index names must be a plain file name in the directory (no `..`, no
//! separator, no absolute path; a symbolic link only to a file beside the directory's
//! other shards or the index's own target, as the Hugging Face cache links its
//! snapshots to its blobs), must exist, and must hold exactly the keys the index maps to
//! it; a file beside them that looks like a shard of the same checkpoint but is not named
//! (a leftover of an earlier save) is an error too. Each failure names the file and the
//! entry.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use nn_core::StateDict;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::error::{Error, Result};

/// The layouts, in the order they are looked for: (file, sharded index).
const LAYOUTS: [(&str, &str); 2] =
    [("model.safetensors", "model.safetensors.index.json"), ("pytorch_model.bin", "pytorch_model.bin.index.json")];

/// An index file larger than this is refused before it is read (a 1.1B model's index is
/// about 25 KB; a million keys take about 60 MB).
const MAX_INDEX_BYTES: u64 = 256 << 20;

/// Where the weights of `dir` are: the file, or the index of its shards. Safetensors are
/// taken over PyTorch's format where both are there (hub repositories often ship both);
/// a file and an index of the same format together are ambiguous, and refused.
///
/// # Errors
/// [`Error::MissingWeights`] when the directory holds none of the four layouts;
/// [`Error::Shards`] when it holds a file and an index of one format.
pub fn locate(dir: &Path) -> Result<PathBuf> {
    for (file, index) in LAYOUTS {
        let (file_path, index_path) = (dir.join(file), dir.join(index));
        match (file_path.is_file(), index_path.is_file()) {
            (true, true) => {
                return Err(Error::Shards {
                    path: index_path,
                    reason: format!(
                        "`{file}` is beside it: which is the checkpoint is ambiguous (one is left from an earlier                          save); remove the stale one"
                    ),
                })
            }
            (true, false) => return Ok(file_path),
            (false, true) => return Ok(index_path),
            (false, false) => {}
        }
    }
    Err(Error::MissingWeights { dir: dir.to_path_buf() })
}

/// Removes the safetensors weights of an earlier save from `dir`, keeping the `written`
/// files: the single file or the index that is not among them, and every shard-named file
/// (`model-NNNNN-of-MMMMM.safetensors`) that is not.
pub(crate) fn remove_stale(dir: &Path, written: &[String]) -> Result<()> {
    let keep: HashSet<&str> = written.iter().map(String::as_str).collect();
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Io { path: dir.to_path_buf(), source })?;
    for e in entries {
        let Some(name) = e.ok().and_then(|e| e.file_name().into_string().ok()) else { continue };
        let ours = name == LAYOUTS[0].0 || name == LAYOUTS[0].1 || shard_stem(&name) == Some(("model", "safetensors"));
        if ours && !keep.contains(name.as_str()) {
            let path = dir.join(&name);
            std::fs::remove_file(&path).map_err(|source| Error::Io { path, source })?;
        }
    }
    Ok(())
}

/// Every tensor of the checkpoint at `path` ([`locate`]), from one file or all its shards,
/// each in the dtype it was saved in.
///
/// # Errors
/// [`Error::Shards`] when an index disagrees with its shards; [`Error::WeightsFile`] for a
/// file that cannot be read; [`Error::Io`] for an index that cannot be.
pub fn read(path: &Path) -> Result<StateDict> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if name.ends_with(".index.json") {
        return read_sharded(path);
    }
    read_file(path)
}

/// One weights file: safetensors, or PyTorch's format for `.bin`, `.pt` and `.pth`.
///
/// # Errors
/// [`Error::WeightsFile`], naming what is wrong with the file.
pub fn read_file(path: &Path) -> Result<StateDict> {
    let pickle = path.extension().and_then(|e| e.to_str()).is_some_and(|e| matches!(e, "bin" | "pt" | "pth"));
    let sd = if pickle { StateDict::load_pytorch(path) } else { StateDict::load(path) };
    sd.map_err(|source| Error::WeightsFile { path: path.to_path_buf(), source: Box::new(source) })
}

/// An index's `weight_map`, in file order; a key twice is an error.
struct WeightMap(Vec<(String, String)>);

impl<'de> serde::Deserialize<'de> for WeightMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WeightMap;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object mapping tensor names to shard file names")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> std::result::Result<WeightMap, A::Error> {
                let mut seen = HashSet::new();
                let mut out = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, String>()? {
                    if !seen.insert(k.clone()) {
                        return Err(serde::de::Error::custom(format!("the key `{k}` is mapped twice")));
                    }
                    out.push((k, v));
                }
                Ok(WeightMap(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(serde::Deserialize)]
struct Index {
    #[serde(default, rename = "metadata")]
    _metadata: IgnoredAny,
    weight_map: WeightMap,
}

fn read_sharded(index_path: &Path) -> Result<StateDict> {
    let bad = |reason: String| Error::Shards { path: index_path.to_path_buf(), reason };
    let text = crate::pretrained::read_text(index_path, MAX_INDEX_BYTES, "an index", bad)?;
    let index: Index = serde_json::from_str(&text).map_err(|e| bad(format!("not a shard index: {e}")))?;
    drop(text);
    let dir = index_path.parent().unwrap_or(Path::new("."));

    // Shards in the order the index first names them, each with the keys mapped to it.
    let mut shards: Vec<(String, HashSet<String>)> = Vec::new();
    let mut position: HashMap<String, usize> = HashMap::new();
    for (key, shard) in index.weight_map.0 {
        let i = *position.entry(shard.clone()).or_insert_with(|| {
            shards.push((shard.clone(), HashSet::new()));
            shards.len() - 1
        });
        shards[i].1.insert(key);
    }
    if shards.is_empty() {
        return Err(bad("the index's `weight_map` is empty".into()));
    }
    let allowed = allowed_dirs(dir, index_path);
    for (shard, _) in &shards {
        check_shard_name(shard, dir, &allowed).map_err(|reason| bad(format!("shard `{shard}`: {reason}")))?;
    }
    leftovers(dir, &shards).map_err(bad)?;

    // Every shard's stray keys are found before any key the index names is reported
    // missing: a key mapped to the wrong shard is then named where it is.
    let mut out = StateDict::new();
    let mut missing: Option<(String, &str)> = None;
    for (shard, keys) in &shards {
        let sd = read_file(&dir.join(shard))?;
        for k in sd.keys() {
            if !keys.contains(k) {
                let twice = if out.contains_key(k) { ", and that shard holds it too" } else { "" };
                return Err(bad(format!(
                    "shard `{shard}` holds `{k}`, which the index maps {}{twice}",
                    elsewhere(k, &shards)
                )));
            }
        }
        if missing.is_none() {
            missing = keys.iter().filter(|k| !sd.contains_key(k)).min().map(|k| (k.clone(), shard.as_str()));
        }
        for (k, t) in sd.iter() {
            out.insert(k.to_string(), t.clone());
        }
    }
    if let Some((k, shard)) = missing {
        return Err(bad(format!("the index maps `{k}` to `{shard}`, which does not hold it")));
    }
    Ok(out)
}

/// Where the index maps `key`, for a message.
fn elsewhere(key: &str, shards: &[(String, HashSet<String>)]) -> String {
    match shards.iter().find(|(_, keys)| keys.contains(key)) {
        Some((shard, _)) => format!("to `{shard}`"),
        None => "nowhere (it is not in the weight map)".to_string(),
    }
}

/// The directories a shard may resolve into: the checkpoint directory itself and the one
/// the index file resolves into (the Hugging Face cache's blobs).
fn allowed_dirs(dir: &Path, index: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(d) = dir.canonicalize() {
        out.push(d);
    }
    if let Some(d) = index.canonicalize().ok().and_then(|p| p.parent().map(Path::to_path_buf)) {
        out.push(d);
    }
    out
}

fn check_shard_name(shard: &str, dir: &Path, allowed: &[PathBuf]) -> std::result::Result<(), String> {
    let plain = !shard.is_empty()
        && shard != "."
        && shard != ".."
        && !shard.contains(['/', '\\', '\0'])
        && !Path::new(shard).is_absolute();
    if !plain {
        return Err("not a plain file name in the checkpoint directory".into());
    }
    let path = dir.join(shard);
    let meta = std::fs::symlink_metadata(&path).map_err(|_| "no such file beside the index".to_string())?;
    if meta.file_type().is_symlink() {
        let target = path.canonicalize().map_err(|e| format!("a symbolic link that does not resolve ({e})"))?;
        if !target.parent().is_some_and(|p| allowed.iter().any(|a| a == p)) {
            return Err(format!(
                "a symbolic link to `{}`, outside the checkpoint directory and the index's own",
                target.display()
            ));
        }
    }
    Ok(())
}

/// A file named like one of the index's shards (`stem-NNNNN-of-MMMMM.ext`) that the index
/// does not name: most likely left by an earlier save with another shard count, and its
/// weights would be silently ignored.
fn leftovers(dir: &Path, shards: &[(String, HashSet<String>)]) -> std::result::Result<(), String> {
    let named: HashSet<&str> = shards.iter().map(|(s, _)| s.as_str()).collect();
    let Some(stem) = shards.iter().find_map(|(s, _)| shard_stem(s)) else { return Ok(()) };
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(()) };
    let mut stray: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| shard_stem(n) == Some(stem) && !named.contains(n.as_str()))
        .collect();
    stray.sort();
    match stray.first() {
        Some(s) => Err(format!(
            "`{s}` beside it is named like one of its shards, but the index does not name it (a leftover of \
             another save? {} such file{}): remove it or fix the index",
            stray.len(),
            if stray.len() == 1 { "" } else { "s" }
        )),
        None => Ok(()),
    }
}

/// `("model", "safetensors")` of `model-00001-of-00002.safetensors`.
fn shard_stem(name: &str) -> Option<(&str, &str)> {
    let (base, ext) = name.rsplit_once('.')?;
    let (rest, total) = base.rsplit_once("-of-")?;
    let (stem, part) = rest.rsplit_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(part) && digits(total)).then_some((stem, ext))
}
