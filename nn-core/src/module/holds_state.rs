//! [`HoldsState`]: the marker the derive uses to reject unregistered state fields.

use super::Parameter;
use crate::tensor::Tensor;

/// Marks types whose values hold module state (modules, tensors, parameters, and
/// collections of them). `#[derive(Module)]` uses it to reject such fields when they are
/// left unannotated; derived modules implement it automatically.
pub trait HoldsState {}

impl HoldsState for Tensor {}
impl HoldsState for Parameter {}
impl<T: HoldsState> HoldsState for Vec<T> {}
impl<T: HoldsState> HoldsState for std::collections::VecDeque<T> {}
impl<T: HoldsState, const N: usize> HoldsState for [T; N] {}
impl<T: HoldsState> HoldsState for [T] {}
impl<T: HoldsState> HoldsState for Option<T> {}
impl<T: HoldsState + ?Sized> HoldsState for Box<T> {}
impl<T: HoldsState + ?Sized> HoldsState for std::sync::Arc<T> {}
impl<T: HoldsState + ?Sized> HoldsState for std::rc::Rc<T> {}
impl<T: HoldsState + ?Sized> HoldsState for std::cell::RefCell<T> {}
impl<T: HoldsState + ?Sized> HoldsState for std::sync::Mutex<T> {}
impl<T: HoldsState + ?Sized> HoldsState for std::sync::RwLock<T> {}
impl<T: HoldsState + ?Sized> HoldsState for std::cell::Cell<T> {}
impl<T: HoldsState> HoldsState for std::cell::OnceCell<T> {}
impl<T: HoldsState> HoldsState for std::sync::OnceLock<T> {}
impl<T: HoldsState, F> HoldsState for std::sync::LazyLock<T, F> {}
impl<T: HoldsState + ?Sized> HoldsState for std::sync::Weak<T> {}
impl<T: HoldsState + ?Sized> HoldsState for std::rc::Weak<T> {}
impl<P: HoldsState> HoldsState for std::pin::Pin<P> {}
impl<T: HoldsState + ?Sized> HoldsState for &T {}
impl<T: HoldsState + ?Sized> HoldsState for &mut T {}
impl<T: HoldsState> HoldsState for std::collections::LinkedList<T> {}
impl<A: smallvec::Array> HoldsState for smallvec::SmallVec<A> where A::Item: HoldsState {}
impl<K, V: HoldsState, S> HoldsState for std::collections::HashMap<K, V, S> {}
impl<K, V: HoldsState> HoldsState for std::collections::BTreeMap<K, V> {}
macro_rules! tuple_state {
    ($($t:ident),+) => { impl<$($t: HoldsState),+> HoldsState for ($($t,)+) {} };
}
tuple_state!(A);
tuple_state!(A, B);
tuple_state!(A, B, C);
tuple_state!(A, B, C, D);
tuple_state!(A, B, C, D, E);
tuple_state!(A, B, C, D, E, F);
