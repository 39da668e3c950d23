//! PyTorch's basic indexing, `x[:, -1, :]`, as [`Tensor::i`]: integers (which drop their
//! dimension), ranges with negative ends (clamped as Python slices are), strided ranges
//! ([`Idx::step`]), `..` (a whole dimension), [`NEW_AXIS`] (`None`), [`ELLIPSIS`] (`...`)
//! and one integer tensor (`x[:, ids]`, an `index_select`).
//!
//! ```
//! use nn_core::ops::{Idx, ELLIPSIS, NEW_AXIS};
//! use nn_core::Tensor;
//!
//! let x = Tensor::arange(0.0, 24.0, 1.0).reshape(&[2, 3, 4]);
//! assert_eq!(x.i((.., -1, ..)).shape(), &[2, 4]);             // x[:, -1, :]
//! assert_eq!(x.i((0, 1..)).shape(), &[2, 4]);                 // x[0, 1:]
//! assert_eq!(x.i((ELLIPSIS, -1)).to_vec()[..3], [3.0, 7.0, 11.0]); // x[..., -1]
//! assert_eq!(x.i((NEW_AXIS, .., ..-1)).shape(), &[1, 2, 2, 4]);   // x[None, :, :-1]
//! assert_eq!(x.i((.., .., Idx::step(.., 2))).shape(), &[2, 3, 2]); // x[:, :, ::2]
//! let ids = Tensor::from_vec_i64(vec![2, 0], &[2]);
//! assert_eq!(x.i((.., &ids)).shape(), &[2, 2, 4]);             // x[:, ids]
//! // Views where PyTorch's are: writing through one writes `x` (x[:, 0] = 0).
//! x.i((.., 0)).fill_(0.0);
//! assert_eq!(x.to_vec()[..4], [0.0; 4]);
//! ```

use std::ops::{Bound, RangeBounds};

use crate::dtype::DType;
use crate::tensor::Tensor;

/// One index of [`Tensor::i`].
#[derive(Clone, Debug)]
pub enum Idx {
    /// One position (negative from the end): the dimension is dropped.
    At(i64),
    /// Positions `start..end` every `step` (each end optional, negative from the end,
    /// clamped to the dimension as Python slices are).
    Slice {
        /// First position (inclusive).
        start: Option<i64>,
        /// Last position (exclusive).
        end: Option<i64>,
        /// Positive stride.
        step: usize,
    },
    /// A new dimension of size 1 (PyTorch's `None`).
    NewAxis,
    /// As many whole dimensions as the other indices leave (PyTorch's `...`).
    Ellipsis,
    /// The positions an integer tensor lists, along one dimension (PyTorch's `x[:, ids]`
    /// with one index tensor): an `index_select`.
    Indices(Tensor),
}

/// PyTorch's `None` in an index: a new dimension of size 1.
pub const NEW_AXIS: Idx = Idx::NewAxis;
/// PyTorch's `...` in an index.
pub const ELLIPSIS: Idx = Idx::Ellipsis;

impl Idx {
    /// A strided slice, PyTorch's `start:end:step` (`Idx::step(.., 2)` is `::2`).
    ///
    /// # Panics
    /// When `step` is 0 (PyTorch refuses negative steps too).
    #[track_caller]
    pub fn step<R: RangeBounds<i64>>(range: R, step: usize) -> Idx {
        if step == 0 {
            panic!("index: slice step cannot be zero");
        }
        let start = match range.start_bound() {
            Bound::Included(&s) => Some(s),
            Bound::Excluded(&s) => Some(s + 1),
            Bound::Unbounded => None,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => Some(e + 1),
            Bound::Excluded(&e) => Some(e),
            Bound::Unbounded => None,
        };
        Idx::Slice { start, end, step }
    }

    fn from_bounds(start: Bound<i64>, end: Bound<i64>) -> Idx {
        struct B(Bound<i64>, Bound<i64>);
        impl RangeBounds<i64> for B {
            fn start_bound(&self) -> Bound<&i64> {
                self.0.as_ref()
            }
            fn end_bound(&self) -> Bound<&i64> {
                self.1.as_ref()
            }
        }
        Idx::step(B(start, end), 1)
    }

    /// Whether this index consumes one dimension of the input.
    fn consumes(&self) -> bool {
        !matches!(self, Idx::NewAxis | Idx::Ellipsis)
    }
}

macro_rules! at {
    ($($t:ty),*) => {$(
        impl From<$t> for Idx {
            fn from(i: $t) -> Idx {
                Idx::At(i as i64)
            }
        }
        impl From<std::ops::Range<$t>> for Idx {
            fn from(r: std::ops::Range<$t>) -> Idx {
                Idx::from_bounds(Bound::Included(r.start as i64), Bound::Excluded(r.end as i64))
            }
        }
        impl From<std::ops::RangeInclusive<$t>> for Idx {
            fn from(r: std::ops::RangeInclusive<$t>) -> Idx {
                Idx::from_bounds(Bound::Included(*r.start() as i64), Bound::Included(*r.end() as i64))
            }
        }
        impl From<std::ops::RangeFrom<$t>> for Idx {
            fn from(r: std::ops::RangeFrom<$t>) -> Idx {
                Idx::from_bounds(Bound::Included(r.start as i64), Bound::Unbounded)
            }
        }
        impl From<std::ops::RangeTo<$t>> for Idx {
            fn from(r: std::ops::RangeTo<$t>) -> Idx {
                Idx::from_bounds(Bound::Unbounded, Bound::Excluded(r.end as i64))
            }
        }
        impl From<std::ops::RangeToInclusive<$t>> for Idx {
            fn from(r: std::ops::RangeToInclusive<$t>) -> Idx {
                Idx::from_bounds(Bound::Unbounded, Bound::Included(r.end as i64))
            }
        }
    )*};
}
at!(i32, i64, usize);

impl From<std::ops::RangeFull> for Idx {
    fn from(_: std::ops::RangeFull) -> Idx {
        Idx::Slice { start: None, end: None, step: 1 }
    }
}

impl From<&Tensor> for Idx {
    fn from(t: &Tensor) -> Idx {
        Idx::Indices(t.clone())
    }
}

/// What [`Tensor::i`] takes: one index, or a tuple of up to six.
pub trait IntoIndex {
    /// The indices, in order.
    fn into_index(self) -> Vec<Idx>;
}

impl<T: Into<Idx>> IntoIndex for T {
    fn into_index(self) -> Vec<Idx> {
        vec![self.into()]
    }
}

macro_rules! tuple_index {
    ($($t:ident $v:ident),+) => {
        impl<$($t: Into<Idx>),+> IntoIndex for ($($t,)+) {
            fn into_index(self) -> Vec<Idx> {
                let ($($v,)+) = self;
                vec![$($v.into()),+]
            }
        }
    };
}
tuple_index!(A a);
tuple_index!(A a, B b);
tuple_index!(A a, B b, C c);
tuple_index!(A a, B b, C c, D d);
tuple_index!(A a, B b, C c, D d, E e);
tuple_index!(A a, B b, C c, D d, E e, F f);

/// A Python slice bound resolved against `size`: negative from the end, then clamped.
fn clamp_bound(b: i64, size: usize) -> usize {
    let n = size as i64;
    let b = if b < 0 { b + n } else { b };
    b.clamp(0, n) as usize
}

impl Tensor {
    /// PyTorch's indexing `x[...]` (see [`Idx`] for the index kinds):
    /// `x.i((.., -1, ..))` is `x[:, -1, :]`. Integers and ranges give views (so a write
    /// through the result writes `x`, PyTorch's `x[:, 0] = v`); a strided range or an index
    /// tensor copies, as PyTorch's advanced indexing does.
    ///
    /// # Panics
    /// With more indices than dimensions, two ellipses, an integer out of range (PyTorch:
    /// "index 3 is out of bounds for dimension 0 with size 3"), more than one index tensor
    /// (use `gather` or `index_select` for those), or an index tensor that is not integer.
    #[track_caller]
    pub fn i(&self, index: impl IntoIndex) -> Tensor {
        let items = index.into_index();
        let consumed = items.iter().filter(|i| i.consumes()).count();
        let ellipses = items.iter().filter(|i| matches!(i, Idx::Ellipsis)).count();
        if ellipses > 1 {
            panic!("index: an index can only have a single ellipsis (`...`)");
        }
        if items.iter().filter(|i| matches!(i, Idx::Indices(_))).count() > 1 {
            panic!("index: more than one index tensor; use `gather` or `index_select` dimension by dimension");
        }
        if consumed > self.rank() {
            panic!("index: too many indices for tensor of dimension {} (got {consumed})", self.rank());
        }
        let mut y = self.clone();
        // `d`: the dimension of `y` the next index applies to; `src`: the input's.
        let (mut d, mut src) = (0, 0);
        for item in items {
            if item.consumes() {
                src += 1;
            }
            match item {
                Idx::At(i) => {
                    let size = y.shape()[d];
                    let n = size as i64;
                    if i < -n || i >= n {
                        panic!("index: index {i} is out of bounds for dimension {} with size {size}", src - 1);
                    }
                    let p = if i < 0 { i + n } else { i } as usize;
                    y = y.narrow(d, p, 1).squeeze_dim(d);
                }
                Idx::Slice { start, end, step } => {
                    let size = y.shape()[d];
                    let s = start.map_or(0, |s| clamp_bound(s, size));
                    let e = end.map_or(size, |e| clamp_bound(e, size)).max(s);
                    y = y.narrow(d, s, e - s);
                    if step > 1 {
                        let picks: Vec<i64> = (0..(e - s) as i64).step_by(step).collect();
                        let n = picks.len();
                        let ids = Tensor::from_vec_i64(picks, &[n]).to_device(y.device());
                        y = y.index_select(d, &ids);
                    }
                    d += 1;
                }
                Idx::NewAxis => {
                    y = y.unsqueeze(d);
                    d += 1;
                }
                Idx::Ellipsis => {
                    d += self.rank() - consumed;
                    src += self.rank() - consumed;
                }
                Idx::Indices(t) => {
                    if t.dtype() != DType::I64 {
                        panic!("index: an index tensor must be i64, got {} of shape {:?}", t.dtype(), t.shape());
                    }
                    // A 1-D tensor keeps the dimension (its length); others flatten to it
                    // and take its shape, as PyTorch's one-tensor indexing does.
                    let flat = t.reshape(&[t.numel()]);
                    let picked = y.index_select(d, &flat);
                    let mut shape = y.shape()[..d].to_vec();
                    shape.extend_from_slice(t.shape());
                    shape.extend_from_slice(&y.shape()[d + 1..]);
                    y = picked.reshape(&shape);
                    d += t.rank();
                }
            }
        }
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x() -> Tensor {
        Tensor::arange(0.0, 24.0, 1.0).reshape(&[2, 3, 4])
    }

    #[test]
    fn basic_indexing_matches_pytorch() {
        // torch.arange(24.).reshape(2, 3, 4)
        assert_eq!(x().i(1).shape(), &[3, 4]);
        assert_eq!(x().i((1, 2, 3)).item(), 23.0);
        assert_eq!(x().i((-1, -1, -1)).item(), 23.0);
        assert_eq!(x().i((.., 1)).to_vec(), [4.0, 5.0, 6.0, 7.0, 16.0, 17.0, 18.0, 19.0]);
        // x[:, -2:, 1] and clamped slices x[0, 1:10] / x[0, -10:1]
        assert_eq!(x().i((.., -2.., 1)).to_vec(), [5.0, 9.0, 17.0, 21.0]);
        assert_eq!(x().i((0, 1..10)).shape(), &[2, 4]);
        assert_eq!(x().i((0, -10..1)).shape(), &[1, 4]);
        let empty = Idx::Slice { start: Some(2), end: Some(1), step: 1 };
        assert_eq!(x().i((0, empty)).shape(), &[0, 4], "an empty slice, x[0, 2:1]");
        // x[0, :, 1::2], x[..., None], x[None, ..., 0]
        assert_eq!(x().i((0, .., Idx::step(1.., 2))).to_vec(), [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]);
        assert_eq!(x().i((ELLIPSIS, NEW_AXIS)).shape(), &[2, 3, 4, 1]);
        assert_eq!(x().i((NEW_AXIS, ELLIPSIS, 0)).shape(), &[1, 2, 3]);
        assert_eq!(x().i(..=0).shape(), &[1, 3, 4]);
        // x[:, ids] with a 2-D ids keeps its shape.
        let ids = Tensor::from_vec_i64(vec![0, 2, 1, 1], &[2, 2]);
        let y = x().i((.., &ids));
        assert_eq!(y.shape(), &[2, 2, 2, 4]);
        assert_eq!(y.i((0, 0, 1, 0)).item(), 8.0);
    }

    #[test]
    fn gradients_flow_back_through_indexing() {
        let x = x().requires_grad_(true);
        x.i((.., -1, Idx::step(.., 2))).sum().backward();
        let g = x.grad().unwrap().to_vec();
        let want: Vec<f32> = (0..24).map(|i| if i % 12 >= 8 && (i % 4) % 2 == 0 { 1.0 } else { 0.0 }).collect();
        assert_eq!(g, want);
    }

    #[test]
    #[should_panic(expected = "index: index 3 is out of bounds for dimension 1 with size 3")]
    fn an_integer_out_of_range_is_refused() {
        x().i((0, 3));
    }

    #[test]
    #[should_panic(expected = "index: too many indices for tensor of dimension 3 (got 4)")]
    fn too_many_indices_are_refused() {
        x().i((0, 0, 0, 0));
    }
}
