//! Containers: `Sequential`, `ModuleList<M>`, `ModuleDict<M>`. They implement
//! [`Module`] through the same visitor the derive generates, with run-time names.

use std::any::Any;
use std::collections::HashMap;
use std::ops::{Index, IndexMut};

use nn_core::module::{CopySlot, DeepCopier, HoldsState, SetChild};
use nn_core::{Compute, Forward, HasBase, Item, Layer, Module, ModuleBase, Name, Tensor};

/// A chain of layers run in order; children are named `"0"`, `"1"`, ... (or a name given
/// with [`add_named`](Sequential::add_named)), parameterless ones included, so state-dict
/// keys match PyTorch's `nn.Sequential` (`"0.weight"`, `"2.weight"`).
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::{Linear, ReLU, Sequential};
/// let net = Sequential::new().add(Linear::new(4, 8)).add(ReLU::new()).add(Linear::new(8, 2));
/// let keys: Vec<String> = net.state_dict().keys().map(String::from).collect();
/// assert_eq!(keys, ["0.weight", "0.bias", "2.weight", "2.bias"]);
/// assert_eq!(net.forward(&Tensor::ones(&[3, 4])).shape(), &[3, 2]);
/// ```
#[derive(Default)]
pub struct Sequential {
    layers: Vec<(Option<String>, Box<dyn Layer>)>,
    base: ModuleBase,
}

impl Sequential {
    /// An empty chain.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a layer (named by its position).
    ///
    /// # Panics
    /// When a layer added with [`add_named`](Sequential::add_named) already has that name
    /// (`add_named("1", ..)` then a second `add`): two layers under one name would share
    /// one state-dict key, and one of them would silently not be saved.
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, layer: impl Layer + 'static) -> Self {
        self.push(Box::new(layer));
        self
    }

    /// Appends a layer under an explicit name (PyTorch's `OrderedDict` form).
    ///
    /// # Panics
    /// When the name is empty, contains `.`, or is already used.
    pub fn add_named(mut self, name: impl Into<String>, layer: impl Layer + 'static) -> Self {
        let name = name.into();
        assert!(!name.is_empty() && !name.contains('.'), "Sequential::add_named: invalid name {name:?}");
        assert!(self.names().all(|n| n != name), "Sequential::add_named: name {name:?} is already used");
        self.layers.push((Some(name), Box::new(layer)));
        self
    }

    /// Appends a boxed layer (named by its position).
    ///
    /// # Panics
    /// As [`add`](Sequential::add).
    pub fn push(&mut self, layer: Box<dyn Layer>) {
        let name = self.layers.len().to_string();
        assert!(
            self.names().all(|n| n != name),
            "Sequential: the layer at position {name} would be named {name:?}, which a layer added with add_named \
             already is; name this one with add_named too"
        );
        self.layers.push((None, layer));
    }

    fn names(&self) -> impl Iterator<Item = String> + '_ {
        self.layers.iter().enumerate().map(|(i, (n, _))| n.clone().unwrap_or_else(|| i.to_string()))
    }

    /// Number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// True when there is no layer.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The layers in order.
    pub fn iter(&self) -> impl Iterator<Item = &dyn Layer> {
        self.layers.iter().map(|(_, l)| l.as_ref())
    }

    /// The layer at `i` as its concrete type: `seq.get::<Linear>(0)`; `None` when out of
    /// range or of another type.
    pub fn get<T: Layer>(&self, i: usize) -> Option<&T> {
        self.layers.get(i)?.1.as_any().downcast_ref::<T>()
    }

    /// The layer at `i` as its concrete type, mutably.
    pub fn get_mut<T: Layer>(&mut self, i: usize) -> Option<&mut T> {
        self.layers.get_mut(i)?.1.as_any_mut().downcast_mut::<T>()
    }

    /// Replaces the layer at `i` (keeping its name), returning the old one.
    ///
    /// # Panics
    /// When `i` is out of range.
    #[track_caller]
    pub fn set(&mut self, i: usize, layer: impl Layer + 'static) -> Box<dyn Layer> {
        let len = self.layers.len();
        let slot = self
            .layers
            .get_mut(i)
            .unwrap_or_else(|| panic!("Sequential::set: index {i} out of range for {len} layers"));
        std::mem::replace(&mut slot.1, Box::new(layer))
    }

    /// The position of the child named `name` (`"0"`, or a name from `add_named`).
    fn position(&self, name: &str) -> Option<usize> {
        self.names().position(|n| n == name)
    }
}

impl Index<usize> for Sequential {
    type Output = dyn Layer;
    fn index(&self, i: usize) -> &dyn Layer {
        self.layers[i].1.as_ref()
    }
}

impl Compute for Sequential {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let mut x = x.clone();
        for (_, l) in &self.layers {
            x = l.forward(&x);
        }
        x
    }
}

/// A `Sequential` held as an `Arc` is what
/// [`checkpoint_sequential`](nn_core::grad_checkpoint::checkpoint_sequential) cuts into
/// checkpointed segments.
///
/// ```
/// use std::sync::Arc;
/// use nn_core::grad_checkpoint::checkpoint_sequential;
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::{Linear, Sequential, Tanh};
///
/// let seq = Arc::new((0..4).fold(Sequential::new(), |s, _| s.add(Linear::new(3, 3)).add(Tanh::new())));
/// let x = Tensor::randn(&[2, 3]).requires_grad_(true);
/// checkpoint_sequential(&seq, 2, &x).sum().backward();
/// let checkpointed: Vec<Vec<f32>> = seq.parameters().iter().map(|p| p.grad().unwrap().to_vec()).collect();
/// seq.zero_grad();
/// seq.forward(&x).sum().backward();
/// let plain: Vec<Vec<f32>> = seq.parameters().iter().map(|p| p.grad().unwrap().to_vec()).collect();
/// assert_eq!(checkpointed, plain);
/// ```
impl nn_core::grad_checkpoint::Segments for Sequential {
    fn len(&self) -> usize {
        self.layers.len()
    }
    fn run_layers(&self, range: std::ops::Range<usize>, x: &Tensor) -> Tensor {
        let mut x = x.clone();
        for (_, l) in &self.layers[range] {
            x = l.forward(&x);
        }
        x
    }
}

impl HasBase for Sequential {
    fn module_base(&self) -> &ModuleBase {
        &self.base
    }
}

impl HoldsState for Sequential {}

impl Module for Sequential {
    fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        for (i, (n, l)) in self.layers.iter().enumerate() {
            let name = n.as_deref().map(Name::Key).unwrap_or(Name::Index(i));
            f(name, Item::Module(l.as_dyn()));
        }
    }
    fn visit_modules_mut<'a>(&'a mut self, f: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {
        for (i, (n, l)) in self.layers.iter_mut().enumerate() {
            let name = n.as_deref().map(Name::Key).unwrap_or(Name::Index(i));
            f(name, l.as_dyn_mut());
        }
    }
    fn type_name(&self) -> &'static str {
        "Sequential"
    }
    fn deep_copy_into(&self, copier: &mut DeepCopier, slot: CopySlot<'_>) {
        let layers = self.layers.iter().map(|(n, l)| (n.clone(), (**l).deep_copy_layer(copier))).collect();
        slot.put(Sequential { layers, base: self.base.deep_copy() });
    }
    fn __set_child(&mut self, name: &str, slot: &mut dyn Any) -> SetChild {
        let Some(i) = self.position(name) else { return SetChild::NoSuchChild };
        nn_core::__private::set_from(&mut self.layers[i].1, slot)
    }
    nn_core::module_accessors!(base);
}

impl std::fmt::Display for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        nn_core::module::fmt_module(self, f)
    }
}

/// A list of modules of one type, registered as `"0"`, `"1"`, ... (PyTorch's
/// `nn.ModuleList`). Use it where a plain `Vec` of layers would be invisible.
///
/// ```
/// use nn_core::Module;
/// use nn_layers::{Linear, ModuleList};
/// let list = ModuleList::from(vec![Linear::new(3, 3), Linear::new(3, 3)]);
/// assert_eq!(list.len(), 2);
/// assert_eq!(list.named_parameters()[2].0, "1.weight");
/// ```
pub struct ModuleList<M> {
    items: Vec<M>,
    base: ModuleBase,
}

impl<M> Default for ModuleList<M> {
    fn default() -> Self {
        ModuleList { items: Vec::new(), base: ModuleBase::default() }
    }
}

impl<M> From<Vec<M>> for ModuleList<M> {
    fn from(items: Vec<M>) -> Self {
        ModuleList { items, base: ModuleBase::default() }
    }
}

impl<M> FromIterator<M> for ModuleList<M> {
    fn from_iter<I: IntoIterator<Item = M>>(iter: I) -> Self {
        Self::from(iter.into_iter().collect::<Vec<_>>())
    }
}

impl<M> ModuleList<M> {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }
    /// Appends a module (PyTorch's `append`).
    pub fn push(&mut self, m: M) {
        self.items.push(m);
    }
    /// Inserts a module at `i`, moving the later ones (and their state-dict keys) up one
    /// index, as PyTorch's `insert`.
    ///
    /// # Panics
    /// When `i > len()`.
    #[track_caller]
    pub fn insert(&mut self, i: usize, m: M) {
        let len = self.items.len();
        if i > len {
            panic!("ModuleList::insert: index {i} out of range for {len} modules");
        }
        self.items.insert(i, m);
    }
    /// Appends every module of `ms` (PyTorch's `extend`).
    pub fn extend(&mut self, ms: impl IntoIterator<Item = M>) {
        self.items.extend(ms);
    }
    /// Removes and returns the last module (PyTorch's `pop()`).
    pub fn pop(&mut self) -> Option<M> {
        self.items.pop()
    }
    /// Removes and returns the module at `i`, the later ones renumbered down one index, as
    /// PyTorch's `pop(i)` / `del list[i]`.
    ///
    /// # Panics
    /// When `i` is out of range.
    #[track_caller]
    pub fn remove(&mut self, i: usize) -> M {
        let len = self.items.len();
        if i >= len {
            panic!("ModuleList::remove: index {i} out of range for {len} modules");
        }
        self.items.remove(i)
    }
    /// Number of modules.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// The modules in order.
    pub fn iter(&self) -> std::slice::Iter<'_, M> {
        self.items.iter()
    }
    /// The modules in order, mutably.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, M> {
        self.items.iter_mut()
    }
    /// The module at `i`, if any.
    pub fn get(&self, i: usize) -> Option<&M> {
        self.items.get(i)
    }
    /// The module at `i`, mutably, if any.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut M> {
        self.items.get_mut(i)
    }
    /// Replaces the module at `i`, returning the old one (also `list[i] = m`).
    ///
    /// # Panics
    /// When `i` is out of range.
    #[track_caller]
    pub fn set(&mut self, i: usize, m: M) -> M {
        let len = self.items.len();
        let slot = self
            .items
            .get_mut(i)
            .unwrap_or_else(|| panic!("ModuleList::set: index {i} out of range for {len} modules"));
        std::mem::replace(slot, m)
    }
}

impl<M> Index<usize> for ModuleList<M> {
    type Output = M;
    fn index(&self, i: usize) -> &M {
        &self.items[i]
    }
}

impl<M> IndexMut<usize> for ModuleList<M> {
    fn index_mut(&mut self, i: usize) -> &mut M {
        &mut self.items[i]
    }
}

impl<'a, M> IntoIterator for &'a ModuleList<M> {
    type Item = &'a M;
    type IntoIter = std::slice::Iter<'a, M>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

impl<M: Module> HoldsState for ModuleList<M> {}

impl<M: Module> Module for ModuleList<M> {
    fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        for (i, m) in self.items.iter().enumerate() {
            f(Name::Index(i), Item::Module(m.as_dyn()));
        }
    }
    fn visit_modules_mut<'a>(&'a mut self, f: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {
        for (i, m) in self.items.iter_mut().enumerate() {
            f(Name::Index(i), m.as_dyn_mut());
        }
    }
    fn type_name(&self) -> &'static str {
        "ModuleList"
    }
    fn deep_copy_into(&self, copier: &mut DeepCopier, slot: CopySlot<'_>) {
        let items = self.items.iter().map(|m| copier.module(m)).collect();
        slot.put(ModuleList { items, base: self.base.deep_copy() });
    }
    /// A list holds modules but has no forward: hooks go on its items.
    fn runs_forward(&self) -> bool {
        false
    }
    fn __set_child(&mut self, name: &str, slot: &mut dyn Any) -> SetChild {
        let index = name.parse::<usize>().ok().filter(|_| name == "0" || !name.starts_with('0'));
        match index.and_then(|i| self.items.get_mut(i)) {
            Some(m) => nn_core::__private::set_from(m, slot),
            None => SetChild::NoSuchChild,
        }
    }
    nn_core::module_accessors!(base);
}

impl<M: Module> std::fmt::Display for ModuleList<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        nn_core::module::fmt_module(self, f)
    }
}

/// Modules of one type under string keys, in insertion order (PyTorch's
/// `nn.ModuleDict`).
///
/// ```
/// use nn_core::Module;
/// use nn_layers::{Linear, ModuleDict};
/// let d: ModuleDict<Linear> = [("b".to_string(), Linear::new(2, 2)), ("a".to_string(), Linear::new(2, 2))]
///     .into_iter()
///     .collect();
/// assert_eq!(d.keys().collect::<Vec<_>>(), ["b", "a"]);
/// assert_eq!(d.state_dict().keys().next(), Some("b.weight"));
/// ```
pub struct ModuleDict<M> {
    items: Vec<(String, M)>,
    index: HashMap<String, usize>,
    base: ModuleBase,
}

impl<M> Default for ModuleDict<M> {
    fn default() -> Self {
        ModuleDict { items: Vec::new(), index: HashMap::new(), base: ModuleBase::default() }
    }
}

impl<M> ModuleDict<M> {
    /// An empty dictionary.
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts or replaces `key` (a replaced entry keeps its position); returns the old
    /// module.
    ///
    /// # Panics
    /// When the key is empty or contains `.`.
    pub fn insert(&mut self, key: String, m: M) -> Option<M> {
        assert!(!key.is_empty() && !key.contains('.'), "ModuleDict::insert: invalid key {key:?} (non-empty, no `.`)");
        match self.index.get(&key) {
            Some(&i) => Some(std::mem::replace(&mut self.items[i].1, m)),
            None => {
                self.index.insert(key.clone(), self.items.len());
                self.items.push((key, m));
                None
            }
        }
    }
    /// Removes `key` and returns its module (PyTorch's `pop(key)` / `del d[key]`), the
    /// others keeping their order.
    pub fn remove(&mut self, key: &str) -> Option<M> {
        let i = self.index.remove(key)?;
        let (_, m) = self.items.remove(i);
        for v in self.index.values_mut() {
            if *v > i {
                *v -= 1;
            }
        }
        Some(m)
    }
    /// True when `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }
    /// The module under `key`.
    pub fn get(&self, key: &str) -> Option<&M> {
        self.index.get(key).map(|&i| &self.items[i].1)
    }
    /// The module under `key`, mutably.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut M> {
        self.index.get(key).map(|&i| &mut self.items[i].1)
    }
    /// The keys in insertion order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.items.iter().map(|(k, _)| k.as_str())
    }
    /// `(key, module)` pairs in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &M)> {
        self.items.iter().map(|(k, m)| (k.as_str(), m))
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

impl<M> FromIterator<(String, M)> for ModuleDict<M> {
    fn from_iter<I: IntoIterator<Item = (String, M)>>(iter: I) -> Self {
        let mut d = ModuleDict::default();
        for (k, m) in iter {
            d.insert(k, m);
        }
        d
    }
}

impl<M> Index<&str> for ModuleDict<M> {
    type Output = M;
    fn index(&self, key: &str) -> &M {
        self.get(key).unwrap_or_else(|| panic!("ModuleDict: no key {key:?}"))
    }
}

impl<M: Module> HoldsState for ModuleDict<M> {}

impl<M: Module> Module for ModuleDict<M> {
    fn visit<'a>(&'a self, f: &mut dyn FnMut(Name<'a>, Item<'a>)) {
        for (k, m) in &self.items {
            f(Name::Key(k), Item::Module(m.as_dyn()));
        }
    }
    fn visit_modules_mut<'a>(&'a mut self, f: &mut dyn FnMut(Name<'_>, &'a mut dyn Module)) {
        for (k, m) in &mut self.items {
            f(Name::Key(k), m.as_dyn_mut());
        }
    }
    fn type_name(&self) -> &'static str {
        "ModuleDict"
    }
    fn deep_copy_into(&self, copier: &mut DeepCopier, slot: CopySlot<'_>) {
        let items = self.items.iter().map(|(k, m)| (k.clone(), copier.module(m))).collect();
        slot.put(ModuleDict { items, index: self.index.clone(), base: self.base.deep_copy() });
    }
    /// A dictionary holds modules but has no forward: hooks go on its entries.
    fn runs_forward(&self) -> bool {
        false
    }
    fn __set_child(&mut self, name: &str, slot: &mut dyn Any) -> SetChild {
        match self.get_mut(name) {
            Some(m) => nn_core::__private::set_from(m, slot),
            None => SetChild::NoSuchChild,
        }
    }
    nn_core::module_accessors!(base);
}

impl<M: Module> std::fmt::Display for ModuleDict<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        nn_core::module::fmt_module(self, f)
    }
}
