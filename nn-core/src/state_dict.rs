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
