//! The key/value cache of causal models: the keys and values of the positions already
//! seen, one pair per layer, so a new token attends to them without recomputing them.

use std::sync::{Arc, Mutex};

use nn_core::Tensor;

/// Keys and values of earlier positions for every layer of one model, `[N, heads, T, D]`
/// each. A handle: clones share the cache (the model's layers append to it while they run
/// inside `forward`, so their hooks fire as usual).
///
/// ```
/// use nn_models::KvCache;
/// let cache = KvCache::new(2);
/// assert_eq!((cache.num_layers(), cache.seq_len()), (2, 0));
/// ```
#[derive(Clone, Debug)]
pub struct KvCache {
    layers: Arc<Mutex<Vec<Slot>>>,
}

/// One layer's keys and values, once it has run.
type Slot = Option<(Tensor, Tensor)>;

impl KvCache {
    /// An empty cache for a model of `num_layers` layers.
    pub fn new(num_layers: usize) -> Self {
        KvCache { layers: Arc::new(Mutex::new(vec![None; num_layers])) }
    }

    /// How many layers it holds.
    pub fn num_layers(&self) -> usize {
        self.lock().len()
    }

    /// How many positions are cached (those of the first layer; every layer holds as many
    /// between two forward passes).
    pub fn seq_len(&self) -> usize {
        self.lock().first().and_then(|l| l.as_ref()).map_or(0, |(k, _)| k.shape()[2])
    }

    /// Forgets every position.
    pub fn clear(&self) {
        self.lock().iter_mut().for_each(|l| *l = None);
    }

    /// Panics unless the cache fits `model`'s `layers` layers and `input_ids` (`[N, L]`):
    /// one length in every layer, the batch size and device of what it holds. (Its dtype is
    /// the keys' own, f32 or, under autocast, the autocast dtype: [`LayerCache::append`]
    /// checks it against the new keys.)
    #[track_caller]
    pub(crate) fn check(&self, model: &str, layers: usize, input_ids: &Tensor) {
        let held = self.lock();
        if held.len() != layers {
            panic!(
                "{model}: `cache` has {} layers, the model {layers} (make it with the model's `new_cache`)",
                held.len()
            );
        }
        let lens: Vec<usize> = held.iter().map(|l| l.as_ref().map_or(0, |(k, _)| k.shape()[2])).collect();
        if lens.iter().any(|&l| l != lens[0]) {
            panic!(
                "{model}: `cache` holds different lengths per layer ({lens:?}): a forward stopped part way; clear it"
            );
        }
        if let Some((k, _)) = held.iter().flatten().next() {
            let n = input_ids.shape()[0];
            if k.shape()[0] != n || k.device() != input_ids.device() {
                panic!(
                    "{model}: `cache` holds {} keys {:?} on {}; input_ids {:?} on {} need batch {n} there",
                    k.shape()[0],
                    k.shape(),
                    k.device(),
                    input_ids.shape(),
                    input_ids.device()
                );
            }
        }
    }

    /// The handle of layer `i`.
    ///
    /// # Panics
    /// When `i` is not a layer of the cache.
    pub(crate) fn layer(&self, i: usize) -> LayerCache {
        let n = self.num_layers();
        assert!(i < n, "KvCache: layer {i} of a cache of {n} layers");
        LayerCache { cache: self.clone(), index: i }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.layers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One layer's slot of a [`KvCache`].
#[derive(Clone, Debug)]
pub struct LayerCache {
    cache: KvCache,
    index: usize,
}

impl LayerCache {
    /// How many positions this layer holds.
    pub(crate) fn cache_len(&self) -> usize {
        self.cache.lock()[self.index].as_ref().map_or(0, |(k, _)| k.shape()[2])
    }

    /// Appends the new positions' keys and values (`[N, heads, L, D]`) and returns all of
    /// them, the cached ones first, with the number of cached positions before this call.
    ///
    /// # Panics
    /// When the new keys' dtype is not the cached ones' (a cache filled under autocast and
    /// extended without it, or the other way): before anything is appended when it is the
    /// first layer's, which every forward appends to first.
    #[track_caller]
    pub(crate) fn append(&self, k: &Tensor, v: &Tensor) -> (Tensor, Tensor, usize) {
        let mut layers = self.cache.lock();
        let slot = &mut layers[self.index];
        if let Some((pk, _)) = slot.as_ref().filter(|(pk, _)| pk.dtype() != k.dtype()) {
            panic!(
                "KvCache: layer {} holds {} keys and this forward computes {} ones: extend a cache under the autocast \
                 state it was filled under (or clear it)",
                self.index,
                pk.dtype(),
                k.dtype()
            );
        }
        let (keys, values, past) = match slot.take() {
            None => (k.clone(), v.clone(), 0),
            Some((pk, pv)) => {
                let past = pk.shape()[2];
                (Tensor::cat(&[&pk, k], 2), Tensor::cat(&[&pv, v], 2), past)
            }
        };
        *slot = Some((keys.snapshot(), values.snapshot()));
        (keys, values, past)
    }
}

/// The attention mask of `l` new queries over `past + l` keys: query `i` (at position
/// `past + i`) may attend to keys `0..=past + i`. `None` where no key is masked (one new
/// query); bool, `true` = may attend (`scaled_dot_product_attention`'s polarity).
pub(crate) fn causal_mask(l: usize, past: usize, device: nn_core::Device) -> Option<Tensor> {
    if l == 1 {
        return None;
    }
    Some(Tensor::from_vec_bool(causal_band(l, past), &[l, past + l]).to_device(device))
}

/// The causal band of `l` new queries after `past` cached positions, `[l, past + l]` row
/// by row: query `i` sits at `past + i` and may attend to every key up to it.
pub(crate) fn causal_band(l: usize, past: usize) -> Vec<bool> {
    (0..l).flat_map(|i| (0..past + l).map(move |j| j <= past + i)).collect()
}

/// A cache is state a model carries between calls, not a tensor of its input: hooks see
/// no slot for it (as PyTorch's hooks see a `Cache` object, not its tensors).
impl nn_core::module::IoTensors for KvCache {
    fn absent_slots() -> usize {
        0
    }
    fn push_tensors(&self, _out: &mut Vec<Option<Tensor>>) {}
    fn take_tensors(&self, _slots: &mut nn_core::module::IoSlots) -> Self {
        self.clone()
    }
}

/// As [`KvCache`]'s: no slot.
impl nn_core::module::IoTensors for LayerCache {
    fn absent_slots() -> usize {
        0
    }
    fn push_tensors(&self, _out: &mut Vec<Option<Tensor>>) {}
    fn take_tensors(&self, _slots: &mut nn_core::module::IoSlots) -> Self {
        self.clone()
    }
}
