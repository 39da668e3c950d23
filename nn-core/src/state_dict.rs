//! `StateDict`: an ordered map from dotted names to tensors.

use std::collections::HashMap;

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
#[derive(Clone, Default)]
pub struct StateDict {
    entries: Vec<(String, Tensor)>,
    index: HashMap<String, usize>,
}

impl StateDict {
    /// An empty state dict.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty state dict with room for `n` entries.
    pub fn with_capacity(n: usize) -> Self {
        StateDict { entries: Vec::with_capacity(n), index: HashMap::with_capacity(n) }
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
    pub fn add_prefix(&self, prefix: &str) -> StateDict {
        // Distinct keys stay distinct with one prefix before each.
        self.iter().map(|(k, v)| (format!("{prefix}{k}"), v.clone())).collect()
    }

    /// The entries under `rename`d keys, in order; an error when two meet.
    fn renamed(&self, op: impl Fn() -> String, rename: impl Fn(&str) -> &str) -> crate::Result<StateDict> {
        let mut out = StateDict::with_capacity(self.len());
        let mut from: HashMap<String, &str> = HashMap::with_capacity(self.len());
        for (k, v) in self.iter() {
            let key = rename(k).to_string();
            if let Some(first) = from.insert(key.clone(), k) {
                return Err(crate::Error::KeyCollision {
                    op: op(),
                    key,
                    first: first.to_string(),
                    second: k.to_string(),
                });
            }
            out.insert(key, v.clone());
        }
        Ok(out)
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
