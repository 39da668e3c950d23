//! The tensor slots of a module's input and output: what hooks see of them.
//!
//! [`ModuleIo::tensors`] lists every tensor an input or output holds, in a fixed order,
//! as *slots*: slot 0 is the primary tensor, then the other elements of a tuple or the
//! tensor fields of an input struct, `None` where an optional tensor is absent (a mask
//! not given). Hooks that see every tensor ([`ModuleBase::register_forward_hook_tensors`]
//! and the other `_tensors` forms) receive these slots and may return replacements,
//! which [`ModuleIo::with_tensors`] puts back.
//!
//! The parts of a tuple implement [`IoTensors`]: a `Tensor` is one slot, an
//! `Option<T>` the slots of `T` (all `None` when absent), a `Vec<T>` and a tuple the slots
//! of their elements in order, and a value without tensors (`String`, `usize`, `bool`,
//! ...) none. A type of one's own in a tuple implements it too, or the tuple is not a
//! `ModuleIo`: a tensor that hooks cannot see is a compile error, not a silent gap.
//!
//! [`ModuleBase::register_forward_hook_tensors`]: super::ModuleBase::register_forward_hook_tensors

use super::ModuleIo;
use crate::tensor::Tensor;

/// A part of a module's input or output tuple: the tensors it holds, as hook slots (see
/// the [module docs](self)).
///
/// ```
/// use nn_core::module::{IoSlots, IoTensors};
/// use nn_core::Tensor;
///
/// /// A pair of masks a model passes along.
/// #[derive(Clone)]
/// struct Masks { causal: Tensor, padding: Option<Tensor>, window: usize }
///
/// impl IoTensors for Masks {
///     fn absent_slots() -> usize { 2 }
///     fn push_tensors(&self, out: &mut Vec<Option<Tensor>>) {
///         self.causal.push_tensors(out);
///         self.padding.push_tensors(out);
///     }
///     fn take_tensors(&self, slots: &mut IoSlots) -> Self {
///         Masks { causal: slots.take(&self.causal), padding: slots.take(&self.padding), window: self.window }
///     }
/// }
///
/// // `(Tensor, Masks)` is now a module input whose three tensors hooks see.
/// let m = Masks { causal: Tensor::ones(&[2, 2]), padding: None, window: 4 };
/// let mut slots = Vec::new();
/// m.push_tensors(&mut slots);
/// assert_eq!(slots.len(), 2);
/// assert!(slots[1].is_none());
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be part of a module's input or output: hooks could not see the tensors it holds",
    label = "`{Self}` does not implement `IoTensors`",
    note = "implement `nn_core::module::IoTensors` for `{Self}`: `push_tensors` lists its tensors, `take_tensors` puts \
            replacements back (a type that holds no tensor pushes nothing); every tensor a module takes or returns \
            is visible to its hooks"
)]
pub trait IoTensors: Clone {
    /// How many slots a value of this type has when an `Option` of it is `None` (a
    /// `Tensor`: 1, a pair of tensors: 2, a type without tensors: 0), so that a slot
    /// list keeps its layout whether an optional part is given or not.
    fn absent_slots() -> usize;
    /// Appends this value's tensors, in order.
    fn push_tensors(&self, out: &mut Vec<Option<Tensor>>);
    /// A copy of this value with its tensors taken, in the order `push_tensors` gave them,
    /// from `slots` (what hooks returned).
    fn take_tensors(&self, slots: &mut IoSlots) -> Self;
    /// A value built from the slots a hook filled where an `Option` of this type was
    /// `None`: `Tensor` builds one from its slot; the default refuses (`None`), and the
    /// hook's replacement is a panic naming the type.
    fn from_slots(_slots: Vec<Option<Tensor>>) -> Option<Self> {
        None
    }
}

/// The slots a hook returned, being put back into an input or output by
/// [`IoTensors::take_tensors`] and [`ModuleIo::with_tensors`].
pub struct IoSlots {
    owner: &'static str,
    slots: std::vec::IntoIter<Option<Tensor>>,
    taken: usize,
}

impl IoSlots {
    /// The slots `slots` for a value of type `owner` that has `expected` of them.
    ///
    /// # Panics
    /// When `slots` holds another number of slots than `expected`: a hook returned a
    /// list of the wrong length.
    pub fn new(owner: &'static str, slots: Vec<Option<Tensor>>, expected: usize) -> Self {
        assert!(
            slots.len() == expected,
            "a hook returned {} tensor slots for `{owner}`, which has {expected}: return the slots it was given, \
             each replaced or kept",
            slots.len()
        );
        IoSlots { owner, slots: slots.into_iter(), taken: 0 }
    }

    /// The next slot, raw.
    ///
    /// # Panics
    /// When no slot is left (an `IoTensors` impl that takes more than it pushed).
    pub fn next_slot(&mut self) -> Option<Tensor> {
        self.taken += 1;
        self.slots.next().unwrap_or_else(|| {
            panic!(
                "`{}`: more tensor slots taken than it lists (its IoTensors impl takes more than it pushes)",
                self.owner
            )
        })
    }

    /// The next part, shaped like `like` (`like.take_tensors(self)`).
    pub fn take<T: IoTensors>(&mut self, like: &T) -> T {
        like.take_tensors(self)
    }

    /// The next slot, which must hold a tensor (a tensor that is not optional).
    ///
    /// # Panics
    /// When the hook returned `None` there.
    pub fn take_tensor(&mut self) -> Tensor {
        let i = self.taken;
        self.next_slot().unwrap_or_else(|| {
            panic!(
                "a hook returned None for tensor slot {i} of `{}`, which must hold a tensor: return the tensor it was \
                 given, or a replacement",
                self.owner
            )
        })
    }
}

impl IoTensors for Tensor {
    fn absent_slots() -> usize {
        1
    }
    fn push_tensors(&self, out: &mut Vec<Option<Tensor>>) {
        out.push(Some(self.clone()));
    }
    fn take_tensors(&self, slots: &mut IoSlots) -> Self {
        slots.take_tensor()
    }
    fn from_slots(slots: Vec<Option<Tensor>>) -> Option<Self> {
        slots.into_iter().next().flatten()
    }
}

impl<T: IoTensors> IoTensors for Option<T> {
    fn absent_slots() -> usize {
        T::absent_slots()
    }
    fn push_tensors(&self, out: &mut Vec<Option<Tensor>>) {
        match self {
            Some(v) => v.push_tensors(out),
            None => out.extend(std::iter::repeat_n(None, T::absent_slots())),
        }
    }
    fn take_tensors(&self, slots: &mut IoSlots) -> Self {
        let n = match self {
            Some(v) => {
                let mut own = Vec::new();
                v.push_tensors(&mut own);
                own.len()
            }
            None => T::absent_slots(),
        };
        let owner = slots.owner;
        let taken: Vec<Option<Tensor>> = (0..n).map(|_| slots.next_slot()).collect();
        if taken.iter().all(Option::is_none) {
            // Every slot emptied (or left empty): the part is absent. A part without
            // tensors keeps its value.
            return if n == 0 { self.clone() } else { None };
        }
        match self {
            Some(v) => Some(v.take_tensors(&mut IoSlots::new(owner, taken, n))),
            None => Some(T::from_slots(taken).unwrap_or_else(|| {
                panic!(
                    "a hook returned tensors for an absent `Option<{}>` part of `{owner}`, which cannot be built from \
                     tensors: leave its slots None",
                    std::any::type_name::<T>()
                )
            })),
        }
    }
}

impl<T: IoTensors> IoTensors for Vec<T> {
    fn absent_slots() -> usize {
        0
    }
    fn push_tensors(&self, out: &mut Vec<Option<Tensor>>) {
        self.iter().for_each(|v| v.push_tensors(out));
    }
    fn take_tensors(&self, slots: &mut IoSlots) -> Self {
        self.iter().map(|v| v.take_tensors(slots)).collect()
    }
}

/// Types that hold no tensor: no slots.
macro_rules! no_tensors {
    ($($t:ty),*) => {$(
        impl IoTensors for $t {
            fn absent_slots() -> usize { 0 }
            fn push_tensors(&self, _out: &mut Vec<Option<Tensor>>) {}
            fn take_tensors(&self, _slots: &mut IoSlots) -> Self { self.clone() }
        }
    )*};
}

no_tensors!(
    (),
    bool,
    u8,
    u16,
    u32,
    u64,
    usize,
    i8,
    i16,
    i32,
    i64,
    isize,
    f32,
    f64,
    String,
    &'static str,
    crate::DType,
    crate::Device
);

/// Tuples of parts: their parts' slots in order.
macro_rules! tuple_tensors {
    ($($name:ident . $i:tt),+) => {
        impl<$($name: IoTensors),+> IoTensors for ($($name,)+) {
            fn absent_slots() -> usize { 0 $(+ $name::absent_slots())+ }
            fn push_tensors(&self, out: &mut Vec<Option<Tensor>>) {
                $(self.$i.push_tensors(out);)+
            }
            fn take_tensors(&self, slots: &mut IoSlots) -> Self {
                ($(self.$i.take_tensors(slots),)+)
            }
            fn from_slots(slots: Vec<Option<Tensor>>) -> Option<Self> {
                let mut rest = slots.into_iter();
                Some(($({
                    let part: Vec<Option<Tensor>> = rest.by_ref().take($name::absent_slots()).collect();
                    $name::from_slots(part)?
                },)+))
            }
        }
    };
}

tuple_tensors!(A.0, B.1);
tuple_tensors!(A.0, B.1, C.2);
tuple_tensors!(A.0, B.1, C.2, D.3);

/// The slots of `value`, for a [`ModuleIo::tensors`] implementation.
pub fn slots_of<T: IoTensors>(value: &T) -> Vec<Option<Tensor>> {
    let mut out = Vec::new();
    value.push_tensors(&mut out);
    out
}

impl ModuleIo for Tensor {
    fn primary(&self) -> &Tensor {
        self
    }
    fn with_primary(&self, primary: Tensor) -> Self {
        primary
    }
    fn tensors(&self) -> Vec<Option<Tensor>> {
        vec![Some(self.clone())]
    }
    fn with_tensors(&self, slots: Vec<Option<Tensor>>) -> Self {
        IoSlots::new("Tensor", slots, 1).take_tensor()
    }
}

/// Module inputs and outputs that are tuples with a tensor first: the tensor is the
/// primary, and every part's tensors are slots.
macro_rules! tuple_io {
    ($($name:ident . $i:tt),*) => {
        impl<$($name: IoTensors),*> ModuleIo for (Tensor, $($name),*) {
            fn primary(&self) -> &Tensor {
                &self.0
            }
            fn with_primary(&self, primary: Tensor) -> Self {
                (primary, $(self.$i.clone()),*)
            }
            fn tensors(&self) -> Vec<Option<Tensor>> {
                let mut out = vec![Some(self.0.clone())];
                $(self.$i.push_tensors(&mut out);)*
                out
            }
            fn with_tensors(&self, slots: Vec<Option<Tensor>>) -> Self {
                let n = self.tensors().len();
                let mut s = IoSlots::new(std::any::type_name::<Self>(), slots, n);
                (s.take_tensor(), $(s.take(&self.$i)),*)
            }
        }
    };
}

tuple_io!(B.1);
tuple_io!(B.1, C.2);
tuple_io!(B.1, C.2, D.3);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_slots_keep_their_layout() {
        let x = Tensor::ones(&[2]);
        let io: (Tensor, Option<(Tensor, Tensor)>, usize) = (x.clone(), None, 3);
        let slots = io.tensors();
        assert_eq!(slots.len(), 3);
        assert!(slots[1].is_none() && slots[2].is_none());
        // A hook fills the absent pair: the part is built from its slots.
        let back = io.with_tensors(vec![Some(x.clone()), Some(x.clone() * 2.0), Some(x.clone() * 3.0)]);
        assert_eq!(back.1.as_ref().map(|(_, b)| b.to_vec()), Some(vec![3.0, 3.0]));
        assert_eq!(back.2, 3);
    }

    #[test]
    fn an_emptied_option_is_absent_and_a_required_slot_is_refused() {
        let x = Tensor::ones(&[2]);
        let io: (Tensor, Option<Tensor>) = (x.clone(), Some(x.clone()));
        assert!(io.with_tensors(vec![Some(x.clone()), None]).1.is_none());
        let r = std::panic::catch_unwind(|| io.with_tensors(vec![None, None]));
        let msg = r.err().and_then(|p| p.downcast_ref::<String>().cloned()).unwrap_or_default();
        assert!(msg.contains("returned None for tensor slot 0"), "{msg}");
        let r = std::panic::catch_unwind(|| io.with_tensors(vec![Some(x.clone())]));
        let msg = r.err().and_then(|p| p.downcast_ref::<String>().cloned()).unwrap_or_default();
        assert!(msg.contains("returned 1 tensor slots") && msg.contains("which has 2"), "{msg}");
    }
}
