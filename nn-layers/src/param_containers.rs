//! Parameter containers: [`ParameterList`] and [`ParameterDict`] (PyTorch's
//! `nn.ParameterList` / `nn.ParameterDict`), for a number of raw parameters known only at
//! run time (per-head scales, mixture weights). Held as `#[module]` fields, their
//! parameters are named as PyTorch names them: `scales.0`, `gains.a`.

use std::collections::HashMap;
use std::ops::Index;

use nn_core::module::{CopySlot, DeepCopier, HoldsState};
use nn_core::{Item, Module, ModuleBase, Name, Parameter};

/// Parameters in order, named `"0"`, `"1"`, ... (PyTorch's `nn.ParameterList`).
///
/// ```
/// use nn_core::{Module, Parameter, Tensor};
/// use nn_layers::ParameterList;
///
/// #[derive(Module)]
/// struct Mixture {
///     #[module]
///     scales: ParameterList,
/// }
/// let heads = 3;
/// let m = Mixture { scales: (0..heads).map(|_| Parameter::new(Tensor::ones(&[4]))).collect() };
/// let keys: Vec<String> = m.state_dict().keys().map(String::from).collect();
/// assert_eq!(keys, ["scales.0", "scales.1", "scales.2"]);
/// assert_eq!(m.parameters().len(), 3);
/// assert_eq!(m.scales[1].shape(), &[4]);
/// ```
#[derive(Default)]
pub struct ParameterList {
    items: Vec<Parameter>,
    base: ModuleBase,
}

impl From<Vec<Parameter>> for ParameterList {
    fn from(items: Vec<Parameter>) -> Self {
        ParameterList { items, base: ModuleBase::default() }
    }
}

impl FromIterator<Parameter> for ParameterList {
    fn from_iter<I: IntoIterator<Item = Parameter>>(iter: I) -> Self {
        Self::from(iter.into_iter().collect::<Vec<_>>())
    }
}

impl ParameterList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }
    /// Appends a parameter (PyTorch's `append`).
    pub fn push(&mut self, p: Parameter) {
        self.items.push(p);
    }
    /// Inserts a parameter at `i`, moving the later ones up one index (and so one name).
    ///
    /// # Panics
    /// When `i > len()`.
    #[track_caller]
    pub fn insert(&mut self, i: usize, p: Parameter) {
        let len = self.items.len();
        if i > len {
            panic!("ParameterList::insert: index {i} out of range for {len} parameters");
        }
        self.items.insert(i, p);
    }
    /// Appends every parameter of `ps` (PyTorch's `extend`).
    pub fn extend(&mut self, ps: impl IntoIterator<Item = Parameter>) {
        self.items.extend(ps);
    }
    /// Removes and returns the last parameter.
    pub fn pop(&mut self) -> Option<Parameter> {
        self.items.pop()
    }
    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// The parameters in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Parameter> {
        self.items.iter()
    }
    /// The parameter at `i`, if any.
    pub fn get(&self, i: usize) -> Option<&Parameter> {
        self.items.get(i)
    }
}

impl Index<usize> for ParameterList {
    type Output = Parameter;
    #[track_caller]
    fn index(&self, i: usize) -> &Parameter {
        let len = self.items.len();
        self.items.get(i).unwrap_or_else(|| panic!("ParameterList: index {i} out of range for {len} parameters"))
    }
}

impl<'a> IntoIterator for &'a ParameterList {
    type Item = &'a Parameter;
    type IntoIter = std::slice::Iter<'a, Parameter>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

impl HoldsState for ParameterList {}

impl Module for ParameterList {
    fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        for (i, p) in self.items.iter().enumerate() {
            nn_core::module::parametrize::report(p, Name::Index(i), f);
        }
    }
    fn visit_modules_mut<'a>(&'a mut self, _: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {}
    fn type_name(&self) -> &'static str {
        "ParameterList"
    }
    fn deep_copy_into(&self, copier: &mut DeepCopier, slot: CopySlot<'_>) {
        let items = self.items.iter().map(|p| copier.parameter(p)).collect();
        slot.put(ParameterList { items, base: self.base.deep_copy() });
    }
    /// A list holds parameters but has no forward: hooks go on the module using them.
    fn runs_forward(&self) -> bool {
        false
    }
    nn_core::module_accessors!(base);
}

impl std::fmt::Display for ParameterList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        nn_core::module::fmt_module(self, f)
    }
}

/// Parameters under string keys, in insertion order (PyTorch's `nn.ParameterDict`).
///
/// ```
/// use nn_core::{Module, Parameter, Tensor};
/// use nn_layers::ParameterDict;
///
/// #[derive(Module)]
/// struct Gains {
///     #[module]
///     gains: ParameterDict,
/// }
/// let g = Gains {
///     gains: [("b", 1.0), ("a", 2.0)].into_iter().map(|(k, v)| (k.to_string(), Parameter::new(Tensor::full(&[1], v)))).collect(),
/// };
/// let keys: Vec<String> = g.state_dict().keys().map(String::from).collect();
/// assert_eq!(keys, ["gains.b", "gains.a"]);
/// assert_eq!(g.gains["a"].to_vec(), vec![2.0]);
/// ```
#[derive(Default)]
pub struct ParameterDict {
    items: Vec<(String, Parameter)>,
    index: HashMap<String, usize>,
    base: ModuleBase,
}

impl ParameterDict {
    /// An empty dictionary.
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts or replaces `key` (a replaced entry keeps its position); returns the old
    /// parameter.
    ///
    /// # Panics
    /// When the key is empty or contains `.` (it would read as a path in the state dict):
    /// nothing is inserted. [`try_insert`](ParameterDict::try_insert) returns the refusal.
    #[track_caller]
    pub fn insert(&mut self, key: impl Into<String>, p: Parameter) -> Option<Parameter> {
        self.try_insert(key, p).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`insert`](ParameterDict::insert), refusing an invalid key with an error naming it.
    ///
    /// # Errors
    /// A message naming the key, when it is empty or contains `.`.
    pub fn try_insert(&mut self, key: impl Into<String>, p: Parameter) -> Result<Option<Parameter>, String> {
        let key = key.into();
        if key.is_empty() || key.contains('.') {
            return Err(format!(
                "ParameterDict::insert: invalid key {key:?}: a key is non-empty and has no `.` (a dot would read as a \
                 submodule path in the state dict)"
            ));
        }
        Ok(match self.index.get(&key) {
            Some(&i) => Some(std::mem::replace(&mut self.items[i].1, p)),
            None => {
                self.index.insert(key.clone(), self.items.len());
                self.items.push((key, p));
                None
            }
        })
    }

    /// Removes `key` (PyTorch's `pop`), keeping the order of the others.
    pub fn remove(&mut self, key: &str) -> Option<Parameter> {
        let i = self.index.remove(key)?;
        let (_, p) = self.items.remove(i);
        for v in self.index.values_mut() {
            if *v > i {
                *v -= 1;
            }
        }
        Some(p)
    }
    /// The parameter under `key`.
    pub fn get(&self, key: &str) -> Option<&Parameter> {
        self.index.get(key).map(|&i| &self.items[i].1)
    }
    /// True when `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }
    /// The keys in insertion order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.items.iter().map(|(k, _)| k.as_str())
    }
    /// `(key, parameter)` pairs in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Parameter)> {
        self.items.iter().map(|(k, p)| (k.as_str(), p))
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl FromIterator<(String, Parameter)> for ParameterDict {
    /// # Panics
    /// As [`insert`](ParameterDict::insert), for an invalid key.
    fn from_iter<I: IntoIterator<Item = (String, Parameter)>>(iter: I) -> Self {
        let mut d = ParameterDict::default();
        for (k, p) in iter {
            d.insert(k, p);
        }
        d
    }
}

impl Index<&str> for ParameterDict {
    type Output = Parameter;
    #[track_caller]
    fn index(&self, key: &str) -> &Parameter {
        self.get(key).unwrap_or_else(|| {
            let keys: Vec<&str> = self.keys().collect();
            panic!("ParameterDict: no key {key:?}; its keys are {keys:?}")
        })
    }
}

impl HoldsState for ParameterDict {}

impl Module for ParameterDict {
    fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        for (k, p) in &self.items {
            nn_core::module::parametrize::report(p, Name::Key(k), f);
        }
    }
    fn visit_modules_mut<'a>(&'a mut self, _: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {}
    fn type_name(&self) -> &'static str {
        "ParameterDict"
    }
    fn deep_copy_into(&self, copier: &mut DeepCopier, slot: CopySlot<'_>) {
        let items = self.items.iter().map(|(k, p)| (k.clone(), copier.parameter(p))).collect();
        slot.put(ParameterDict { items, index: self.index.clone(), base: self.base.deep_copy() });
    }
    /// A dictionary holds parameters but has no forward: hooks go on the module using them.
    fn runs_forward(&self) -> bool {
        false
    }
    nn_core::module_accessors!(base);
}

impl std::fmt::Display for ParameterDict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        nn_core::module::fmt_module(self, f)
    }
}

#[cfg(test)]
mod tests {
    use nn_core::{Device, Module, Parameter, StateDict, Tensor};

    use super::*;

    #[derive(nn_core::Module)]
    struct Net {
        #[module]
        scales: ParameterList,
        #[module]
        gains: ParameterDict,
    }

    fn net() -> Net {
        let scales = (0..3).map(|i| Parameter::new(Tensor::full(&[2], i as f64))).collect();
        let mut gains = ParameterDict::new();
        gains.insert("q", Parameter::new(Tensor::ones(&[1])));
        gains.insert("k", Parameter::new(Tensor::ones(&[1])));
        Net { scales, gains }
    }

    #[test]
    fn keys_follow_pytorch_and_state_round_trips() {
        let n = net();
        let keys: Vec<String> = n.state_dict().keys().map(String::from).collect();
        assert_eq!(keys, ["scales.0", "scales.1", "scales.2", "gains.q", "gains.k"]);
        let mut m = net();
        let sd: StateDict = n.state_dict().iter().map(|(k, v)| (k.to_string(), Tensor::full(v.shape(), 7.0))).collect();
        m.load_state_dict(&sd, true).unwrap();
        assert_eq!(m.scales[2].to_vec(), vec![7.0, 7.0]);
        assert_eq!(m.gains["k"].to_vec(), vec![7.0]);
        m.to_device(Device::Meta);
        assert_eq!(m.scales[0].device(), Device::Meta);
    }

    #[test]
    fn list_edits_renumber_and_copies_are_independent() {
        let mut n = net();
        n.scales.insert(0, Parameter::new(Tensor::full(&[2], 9.0)));
        assert_eq!(n.named_parameters()[0].0, "scales.0");
        assert_eq!(n.scales[1].to_vec(), vec![0.0, 0.0]);
        assert_eq!(n.scales.pop().map(|p| p.to_vec()), Some(vec![2.0, 2.0]));
        n.scales.extend([Parameter::new(Tensor::zeros(&[1]))]);
        assert_eq!(n.scales.len(), 4);
        assert!(n.gains.remove("q").is_some());
        assert_eq!(n.named_parameters().last().unwrap().0, "gains.k");
        let c = n.deep_copy();
        nn_core::no_grad(|| c.scales[0].mul_(0.0));
        assert_eq!(n.scales[0].to_vec(), vec![9.0, 9.0], "the copy has its own parameters");
    }

    #[test]
    fn dict_keys_with_a_dot_or_empty_are_refused_and_nothing_changes() {
        let mut d = ParameterDict::new();
        for bad in ["a.b", ""] {
            let e = d.try_insert(bad, Parameter::new(Tensor::ones(&[1]))).unwrap_err();
            assert!(e.contains(&format!("invalid key {bad:?}")), "{e}");
        }
        assert!(d.is_empty());
    }

    #[test]
    #[should_panic(expected = "ParameterDict: no key \"z\"; its keys are [\"q\", \"k\"]")]
    fn a_missing_key_names_the_keys() {
        let _ = &net().gains["z"];
    }
}
