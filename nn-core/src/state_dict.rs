//! `StateDict`: an ordered map from dotted names to tensors.

use std::collections::{BTreeMap, HashMap};

use crate::tensor::Tensor;

/// An ordered name -> tensor map: a module's parameters and persistent buffers under
/// their dotted names (`"encoder.layers.0.weight"`), in traversal order, as PyTorch's
/// `state_dict()`.
///
/// ```
/// use nn_core::{StateDict, Tensor};
/// let mut sd = StateDict::default();
/// sd.insert("w".to_string(), Tensor::ones(&[2]));
/// sd.insert("b".to_string(), Tensor::zeros(&[1]));
/// assert_eq!(sd.keys().collect::<Vec<_>>(), vec!["w", "b"]);
/// assert_eq!(sd.get("w").unwrap().to_vec(), vec![1.0, 1.0]);
/// assert_eq!(sd.len(), 2);
/// ```
///
/// Beside the tensors it keeps what PyTorch keeps beside them: each module's layout
/// [`version`](StateDict::version) (PyTorch's `state_dict._metadata`) and the modules'
/// [extra states](StateDict::extra_state) (`<prefix>._extra_state`), as JSON. Neither is
/// among [`keys`](StateDict::keys) or counted by [`len`](StateDict::len); a file keeps both
/// in its metadata. See [`state_hooks`](crate::module::state_hooks).
#[derive(Clone, Default)]
pub struct StateDict {
    entries: Vec<(String, Tensor)>,
    index: HashMap<String, usize>,
    /// Layout versions by module path (`""` for the root).
    versions: BTreeMap<String, u32>,
    /// Extra states by key, in insertion order.
    extra: Vec<(String, serde_json::Value)>,
}

impl StateDict {
    /// An empty state dict.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty state dict with room for `n` entries.
    pub fn with_capacity(n: usize) -> Self {
        StateDict { entries: Vec::with_capacity(n), index: HashMap::with_capacity(n), ..Default::default() }
    }

    /// The layout version recorded for the module at `path` (`""` for the root,
    /// `"encoder.0"`), as `#[module(version = N)]` declares it; `None` when none is recorded
    /// (the module declares none, or the file predates it).
    pub fn version(&self, path: &str) -> Option<u32> {
        self.versions.get(path).copied()
    }

    /// Records `version` for the module at `path`; returns the previous one.
    pub fn set_version(&mut self, path: &str, version: u32) -> Option<u32> {
        self.versions.insert(path.to_string(), version)
    }

    /// Forgets the version of the module at `path`; returns it.
    pub fn remove_version(&mut self, path: &str) -> Option<u32> {
        self.versions.remove(path)
    }

    /// `(module path, version)` pairs, ordered by path.
    pub fn versions(&self) -> impl Iterator<Item = (&str, u32)> {
        self.versions.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// The extra state stored under `key` (`"_extra_state"` for the root's,
    /// `"encoder._extra_state"`).
    ///
    /// ```
    /// use nn_core::StateDict;
    /// let mut sd = StateDict::new();
    /// sd.insert_extra_state("tok._extra_state".to_string(), serde_json::json!({"vocab": 50257}));
    /// assert_eq!(sd.extra_state("tok._extra_state").unwrap()["vocab"], 50257);
    /// assert!(sd.is_empty()); // no tensor
    /// ```
    pub fn extra_state(&self, key: &str) -> Option<&serde_json::Value> {
        self.extra.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Inserts or replaces the extra state under `key`; returns the previous one.
    pub fn insert_extra_state(&mut self, key: String, state: serde_json::Value) -> Option<serde_json::Value> {
        match self.extra.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => Some(std::mem::replace(v, state)),
            None => {
                self.extra.push((key, state));
                None
            }
        }
    }

    /// Removes the extra state under `key`.
    pub fn remove_extra_state(&mut self, key: &str) -> Option<serde_json::Value> {
        let i = self.extra.iter().position(|(k, _)| k == key)?;
        Some(self.extra.remove(i).1)
    }

    /// `(key, extra state)` pairs, in insertion order.
    pub fn extra_states(&self) -> impl Iterator<Item = (&str, &serde_json::Value)> {
        self.extra.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Inserts or replaces `name`; a new name goes last, a replaced one keeps its place.
    /// Returns the previous tensor.
    pub fn insert(&mut self, name: String, tensor: Tensor) -> Option<Tensor> {
        match self.index.get(&name) {
            Some(&i) => Some(std::mem::replace(&mut self.entries[i].1, tensor)),
            None => {
                self.index.insert(name.clone(), self.entries.len());
                self.entries.push((name, tensor));
                None
            }
        }
    }

    /// The tensor stored under `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.index.get(name).map(|&i| &self.entries[i].1)
    }

    /// True when `name` is present.
    pub fn contains_key(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Removes `name`, keeping the order of the others.
    pub fn remove(&mut self, name: &str) -> Option<Tensor> {
        let i = self.index.remove(name)?;
        let (_, t) = self.entries.remove(i);
        for v in self.index.values_mut() {
            if *v > i {
                *v -= 1;
            }
        }
        Some(t)
    }

    /// The names, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    /// The tensors, in order.
    pub fn values(&self) -> impl Iterator<Item = &Tensor> {
        self.entries.iter().map(|(_, v)| v)
    }

    /// `(name, tensor)` pairs, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The same entries with `prefix` taken off every key that starts with it, the others
    /// as they are (PyTorch's `consume_prefix_in_state_dict_if_present`): the `_orig_mod.`
    /// of a `torch.compile`d model's state dict, the `module.` of DDP's.
    ///
    /// ```
    /// use nn_core::{StateDict, Tensor};
    /// let sd: StateDict = [("_orig_mod.fc.weight".to_string(), Tensor::ones(&[1]))].into_iter().collect();
    /// let sd = sd.strip_prefix("_orig_mod.").unwrap();
    /// assert_eq!(sd.keys().collect::<Vec<_>>(), vec!["fc.weight"]);
    /// ```
    ///
    /// # Errors
    /// [`Error::KeyCollision`](crate::Error::KeyCollision) when a stripped key is already
    /// present (`a` beside `_orig_mod.a`); `self` is not consumed, nothing is lost.
    pub fn strip_prefix(&self, prefix: &str) -> crate::Result<StateDict> {
        let op = || format!("strip_prefix({prefix:?})");
        self.renamed(op, |k| k.strip_prefix(prefix).unwrap_or(k))
    }

    /// The same entries with `prefix` put before every key (to load a model's state dict
    /// into a wrapper that holds it under `prefix`).
    ///
    /// ```
    /// use nn_core::{StateDict, Tensor};
    /// let sd: StateDict = [("weight".to_string(), Tensor::ones(&[1]))].into_iter().collect();
    /// assert_eq!(sd.add_prefix("encoder.").keys().collect::<Vec<_>>(), vec!["encoder.weight"]);
    /// ```
    ///
    /// Extra states' keys take the prefix too, and versions move to the modules' new paths
    /// (the root's, `""`, to `encoder`).
    pub fn add_prefix(&self, prefix: &str) -> StateDict {
        // Distinct keys stay distinct with one prefix before each.
        let mut out: StateDict = self.iter().map(|(k, v)| (format!("{prefix}{k}"), v.clone())).collect();
        out.extra = self.extra.iter().map(|(k, v)| (format!("{prefix}{k}"), v.clone())).collect();
        out.versions = self.versions.iter().map(|(p, v)| (prefixed_path(prefix, p), *v)).collect();
        out
    }

    /// The entries under `rename`d keys, in order; an error when two meet. Extra states are
    /// renamed as entries are, versions as their modules' paths (the path and a dot, renamed,
    /// its dot taken off).
    fn renamed(&self, op: impl Fn() -> String, rename: impl Fn(&str) -> &str) -> crate::Result<StateDict> {
        fn check<'k>(
            from: &mut HashMap<String, &'k str>,
            op: &dyn Fn() -> String,
            key: &str,
            k: &'k str,
        ) -> crate::Result<()> {
            match from.insert(key.to_string(), k) {
                Some(first) => Err(crate::Error::KeyCollision {
                    op: op(),
                    key: key.to_string(),
                    first: first.to_string(),
                    second: k.to_string(),
                }),
                None => Ok(()),
            }
        }
        let mut out = StateDict::with_capacity(self.len());
        let mut from: HashMap<String, &str> = HashMap::with_capacity(self.len());
        for (k, v) in self.iter() {
            let key = rename(k);
            check(&mut from, &op, key, k)?;
            out.insert(key.to_string(), v.clone());
        }
        let mut from = HashMap::new();
        for (k, v) in &self.extra {
            let key = rename(k);
            check(&mut from, &op, key, k)?;
            out.extra.push((key.to_string(), v.clone()));
        }
        let mut from = HashMap::new();
        let dotted: Vec<(String, u32)> = self.versions.iter().map(|(p, v)| (format!("{p}."), *v)).collect();
        for (p, v) in &dotted {
            let path = rename(p);
            let path = path.strip_suffix('.').unwrap_or(path);
            check(&mut from, &op, path, p.strip_suffix('.').unwrap_or(p))?;
            out.versions.insert(path.to_string(), *v);
        }
        Ok(out)
    }
}

/// The path of the module at `path` once every key has `prefix` before it: `encoder.` and
/// the root give `encoder`.
fn prefixed_path(prefix: &str, path: &str) -> String {
    let joined = format!("{prefix}{path}");
    if path.is_empty() {
        joined.strip_suffix('.').map(str::to_string).unwrap_or(joined)
    } else {
        joined
    }
}

impl std::fmt::Debug for StateDict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.entries.iter().map(|(k, v)| (k, (v.shape(), v.dtype())))).finish()
    }
}

impl FromIterator<(String, Tensor)> for StateDict {
    fn from_iter<I: IntoIterator<Item = (String, Tensor)>>(iter: I) -> Self {
        let mut sd = StateDict::default();
        for (k, v) in iter {
            sd.insert(k, v);
        }
        sd
    }
}

impl<'a> IntoIterator for &'a StateDict {
    type Item = (&'a str, &'a Tensor);
    type IntoIter =
        std::iter::Map<std::slice::Iter<'a, (String, Tensor)>, fn(&'a (String, Tensor)) -> (&'a str, &'a Tensor)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sd(keys: &[&str]) -> StateDict {
        keys.iter().map(|k| (k.to_string(), Tensor::zeros(&[1]))).collect()
    }

    #[test]
    fn prefixes_come_off_and_go_on_in_order() {
        let s = sd(&["_orig_mod.a.weight", "b", "_orig_mod.c"]).strip_prefix("_orig_mod.").unwrap();
        assert_eq!(s.keys().collect::<Vec<_>>(), ["a.weight", "b", "c"]);
        assert_eq!(s.add_prefix("m.").keys().collect::<Vec<_>>(), ["m.a.weight", "m.b", "m.c"]);
    }

    #[test]
    fn a_strip_that_merges_two_keys_is_refused() {
        let e = sd(&["a", "_orig_mod.a"]).strip_prefix("_orig_mod.").expect_err("refused").to_string();
        assert_eq!(
            e,
            "strip_prefix(\"_orig_mod.\"): `a` and `_orig_mod.a` would both be named `a`, and one of them would be lost"
        );
    }
}
