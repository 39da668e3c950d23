//! Shapes, strides and layouts: how a tensor's logical indices map onto its storage.

use smallvec::SmallVec;

use crate::error::{Error, Result};

/// How an unrepresentable shape is described in messages.
pub(crate) const OVERFLOW: &str =
    "whose dimensions multiply past isize::MAX (zero dimensions counted as 1): no tensor can have that shape";

/// Inline storage for shapes and strides: no heap allocation up to 6 dimensions.
pub type Dims = SmallVec<[usize; 6]>;

/// A strided view over a storage buffer: element `[i0, i1, ...]` lives at
/// `offset + i0 * strides[0] + i1 * strides[1] + ...`.
///
/// Strides are in elements and never negative. A stride of 0 repeats values (a broadcast
/// view); transposes and narrows only change strides and offset, never copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    shape: Dims,
    strides: Dims,
    offset: usize,
}

/// The most elements a tensor may have, and the bound on the product of its dimensions
/// (zero dimensions counted as 1): `isize::MAX`, the most elements any buffer can hold.
/// Every shape a tensor is created with is checked against it, so element counts, strides
/// and offsets never wrap around.
pub const MAX_NUMEL: usize = isize::MAX as usize;

/// The number of elements of `shape`, or `None` when the shape is unrepresentable: the
/// product of its dimensions, with zero dimensions counted as 1 (they still need strides),
/// exceeds [`MAX_NUMEL`].
///
/// ```
/// use nn_core::shape::checked_numel;
/// assert_eq!(checked_numel(&[2, 3]), Some(6));
/// assert_eq!(checked_numel(&[0, 5]), Some(0));
/// assert_eq!(checked_numel(&[(1 << 63) + 1, 2]), None); // would wrap to 2
/// assert_eq!(checked_numel(&[0, 1 << 40, 1 << 40]), None); // its strides overflow
/// ```
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    let mut bound = 1usize;
    let mut numel = 1usize;
    for &d in shape {
        bound = bound.checked_mul(d.max(1)).filter(|&b| b <= MAX_NUMEL)?;
        numel *= d;
    }
    Some(numel)
}

/// [`checked_numel`], as an error naming `op` and the shape.
///
/// # Errors
/// [`Error::ShapeOverflow`] when the shape is unrepresentable.
pub fn try_numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    checked_numel(shape).ok_or_else(|| Error::ShapeOverflow { op, shape: shape.to_vec() })
}

/// [`checked_numel`], panicking with a message naming `op` and the shape.
#[track_caller]
pub(crate) fn numel_of(op: &'static str, shape: &[usize]) -> usize {
    try_numel(op, shape).unwrap_or_else(|e| panic!("{e}"))
}

/// Row-major (C order) strides for `shape`.
///
/// # Panics
/// When `shape` is unrepresentable (see [`checked_numel`]).
#[track_caller]
pub fn contiguous_strides(shape: &[usize]) -> Dims {
    numel_of("contiguous_strides", shape);
    let mut strides: Dims = smallvec::smallvec![0; shape.len()];
    let mut acc = 1usize;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc *= d;
    }
    strides
}

impl Layout {
    /// The row-major layout of `shape` starting at offset 0.
    ///
    /// # Panics
    /// When `shape` is unrepresentable (see [`checked_numel`]; [`Layout::try_contiguous`]
    /// returns an error instead).
    #[track_caller]
    pub fn contiguous(shape: &[usize]) -> Self {
        Layout { shape: shape.into(), strides: contiguous_strides(shape), offset: 0 }
    }

    /// The row-major layout of `shape`, or an error naming `op` when the shape is
    /// unrepresentable.
    ///
    /// # Errors
    /// [`Error::ShapeOverflow`].
    pub fn try_contiguous(op: &'static str, shape: &[usize]) -> Result<Self> {
        try_numel(op, shape)?;
        Ok(Layout::contiguous(shape))
    }

    /// A layout from explicit parts (the caller guarantees they fit its storage).
    pub fn new(shape: Dims, strides: Dims, offset: usize) -> Self {
        debug_assert_eq!(shape.len(), strides.len());
        Layout { shape, strides, offset }
    }

    /// The sizes of the dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The stride of each dimension, in elements.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// The storage index of element `[0, 0, ...]`.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when elements are laid out row-major without gaps (the offset may be non-zero).
    pub fn is_contiguous(&self) -> bool {
        let mut acc = 1usize;
        for (&d, &s) in self.shape.iter().zip(&self.strides).rev() {
            if d != 1 && s != acc {
                return false;
            }
            acc *= d;
        }
        true
    }

    /// The contiguous range of storage this layout covers, when it is contiguous.
    pub fn contiguous_range(&self) -> Option<std::ops::Range<usize>> {
        self.is_contiguous().then(|| self.offset..self.offset + self.numel())
    }

    /// One past the largest storage index this layout can touch (0 for an empty tensor).
    pub fn storage_span(&self) -> usize {
        if self.numel() == 0 {
            return 0;
        }
        self.offset + self.shape.iter().zip(&self.strides).map(|(&d, &s)| (d - 1) * s).sum::<usize>() + 1
    }

    /// Reorders the dimensions: output dim `i` is input dim `perm[i]`.
    pub(crate) fn permute(&self, perm: &[usize]) -> Layout {
        Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    /// Restricts dimension `dim` to `start..start + len`.
    pub(crate) fn narrow(&self, dim: usize, start: usize, len: usize) -> Layout {
        let mut l = self.clone();
        l.offset += start * self.strides[dim];
        l.shape[dim] = len;
        l
    }

    /// A view of this layout broadcast to `shape` (stride 0 on expanded dims), if allowed.
    ///
    /// # Panics
    /// When `shape` is unrepresentable (see [`checked_numel`]).
    #[track_caller]
    pub(crate) fn broadcast_to(&self, shape: &[usize]) -> Option<Layout> {
        if shape.len() < self.rank() {
            return None;
        }
        numel_of("expand", shape);
        let lead = shape.len() - self.rank();
        let mut strides: Dims = smallvec::smallvec![0; shape.len()];
        for (i, &d) in shape.iter().enumerate() {
            if i < lead {
                continue;
            }
            let (sd, ss) = (self.shape[i - lead], self.strides[i - lead]);
            strides[i] = if sd == d {
                ss
            } else if sd == 1 {
                0
            } else {
                return None;
            };
        }
        Some(Layout { shape: shape.into(), strides, offset: self.offset })
    }

    /// A view with a new shape over the same elements, when the strides allow it without
    /// copying (always for contiguous layouts). Mirrors PyTorch's `view` rules.
    pub(crate) fn reshape_view(&self, shape: &[usize]) -> Option<Layout> {
        if self.is_contiguous() || self.numel() == 0 {
            return Some(Layout { shape: shape.into(), strides: contiguous_strides(shape), offset: self.offset });
        }
        // Merge runs of old dims that are mutually contiguous, then split them into new dims.
        let old: Vec<(usize, usize)> =
            self.shape.iter().zip(&self.strides).filter(|(&d, _)| d != 1).map(|(&d, &s)| (d, s)).collect();
        let mut strides: Dims = smallvec::smallvec![0; shape.len()];
        let mut oi = 0usize;
        let mut ni = 0usize;
        while ni < shape.len() {
            if shape[ni] == 1 {
                strides[ni] = 1;
                ni += 1;
                continue;
            }
            if oi >= old.len() {
                return None;
            }
            // Take a chunk of old dims with product P that is contiguous in itself.
            let mut chunk_size = old[oi].0;
            let mut chunk_end = oi;
            let mut new_size = 1usize;
            let new_start = ni;
            // Grow new dims and old dims until their products agree.
            loop {
                while new_size < chunk_size && ni < shape.len() {
                    new_size *= shape[ni];
                    ni += 1;
                }
                if new_size == chunk_size {
                    break;
                }
                chunk_end += 1;
                if chunk_end >= old.len() || old[chunk_end - 1].1 != old[chunk_end].0 * old[chunk_end].1 {
                    return None;
                }
                chunk_size *= old[chunk_end].0;
            }
            // Strides for new dims new_start..ni within a chunk whose innermost stride is
            // old[chunk_end].1.
            let mut acc = old[chunk_end].1;
            for j in (new_start..ni).rev() {
                strides[j] = acc;
                acc *= shape[j];
            }
            oi = chunk_end + 1;
        }
        if oi != old.len() {
            return None;
        }
        Some(Layout { shape: shape.into(), strides, offset: self.offset })
    }
}

/// The broadcast shape of `a` and `b` under NumPy/PyTorch rules, or `None`.
///
/// # Panics
/// When the broadcast shape is unrepresentable (see [`checked_numel`]): `[1 << 40, 1]`
/// and `[1, 1 << 40]` are each fine, their broadcast is not.
#[track_caller]
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Dims> {
    let rank = a.len().max(b.len());
    let mut out: Dims = smallvec::smallvec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
        let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    if checked_numel(&out).is_none() {
        panic!("broadcast: shapes {a:?} and {b:?} broadcast to {out:?}, {}", OVERFLOW);
    }
    Some(out)
}

/// A dimension index: `usize` counts from the front, negative `i32`/`i64`/`isize` from the
/// back (`-1` is the last dimension), as in PyTorch.
pub trait Dim: Copy + std::fmt::Debug {
    /// Resolves to a dimension index in `0..rank`, panicking with `op` in the message.
    fn resolve(self, rank: usize, op: &str) -> usize;
}

fn resolve_signed(d: i64, rank: usize, op: &str) -> usize {
    let r = rank as i64;
    let lo = if rank == 0 { -1 } else { -r };
    let hi = if rank == 0 { 0 } else { r - 1 };
    if d < lo || d > hi {
        panic!("{op}: dimension {d} out of range for a tensor of rank {rank} (expected {lo}..={hi})");
    }
    if d < 0 {
        (d + r.max(1)) as usize
    } else {
        d as usize
    }
}

impl Dim for usize {
    fn resolve(self, rank: usize, op: &str) -> usize {
        // Not `as i64`: a `usize` that wrapped below zero (`x.rank() - 2` of a rank-1
        // tensor) would read as -1 and pick the last dimension.
        match i64::try_from(self) {
            Ok(d) => resolve_signed(d, rank, op),
            Err(_) => panic!(
                "{op}: dimension {self} out of range for a tensor of rank {rank} (a usize that wrapped below zero?)"
            ),
        }
    }
}
impl Dim for i32 {
    fn resolve(self, rank: usize, op: &str) -> usize {
        resolve_signed(self as i64, rank, op)
    }
}
impl Dim for i64 {
    fn resolve(self, rank: usize, op: &str) -> usize {
        resolve_signed(self, rank, op)
    }
}
impl Dim for isize {
    fn resolve(self, rank: usize, op: &str) -> usize {
        resolve_signed(self as i64, rank, op)
    }
}

/// Calls `f` with the storage offsets of every element of `shape` in row-major order, for
/// `N` layouts walked in lockstep (each given by its strides and base offset). The
/// innermost dimension is a tight loop; outer dimensions advance like an odometer.
#[inline]
pub(crate) fn for_each_offset<const N: usize>(
    shape: &[usize],
    strides: [&[usize]; N],
    offsets: [usize; N],
    mut f: impl FnMut([usize; N]),
) {
    let rank = shape.len();
    if shape.contains(&0) {
        return;
    }
    if rank == 0 {
        f(offsets);
        return;
    }
    let inner = shape[rank - 1];
    let inner_strides: [usize; N] = std::array::from_fn(|k| strides[k][rank - 1]);
    let mut idx: Dims = smallvec::smallvec![0; rank];
    let mut base = offsets;
    loop {
        let mut o = base;
        for _ in 0..inner {
            f(o);
            for k in 0..N {
                o[k] += inner_strides[k];
            }
        }
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            for k in 0..N {
                base[k] += strides[k][d];
            }
            if idx[d] < shape[d] {
                break;
            }
            for k in 0..N {
                base[k] -= strides[k][d] * shape[d];
            }
            idx[d] = 0;
        }
    }
}

/// `shape` with the dims where `mask` is true kept as size 1 (a reduction's `keepdim`
/// shape).
pub(crate) fn kept_shape(shape: &[usize], mask: &[bool]) -> Dims {
    shape.iter().zip(mask).map(|(&d, &m)| if m { 1 } else { d }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rules() {
        assert_eq!(broadcast_shapes(&[3, 1], &[4]).unwrap().as_slice(), &[3, 4]);
        assert_eq!(broadcast_shapes(&[], &[2, 2]).unwrap().as_slice(), &[2, 2]);
        assert_eq!(broadcast_shapes(&[0, 1], &[1, 5]).unwrap().as_slice(), &[0, 5]);
        assert!(broadcast_shapes(&[3], &[4]).is_none());
    }

    #[test]
    fn reshape_view_of_transposed_needs_copy() {
        let l = Layout::contiguous(&[2, 3]).permute(&[1, 0]);
        assert!(l.reshape_view(&[6]).is_none());
        assert_eq!(l.reshape_view(&[3, 2, 1]).unwrap().strides(), &[1, 3, 1]);
        let l = Layout::contiguous(&[4, 6]).narrow(1, 0, 3); // rows with gaps
        assert_eq!(l.reshape_view(&[4, 3, 1]).unwrap().strides(), &[6, 1, 1]);
        assert!(l.reshape_view(&[12]).is_none());
        let l = Layout::contiguous(&[2, 3, 4]).permute(&[1, 0, 2]); // [3,2,4] strides [4,12,1]
        assert!(l.reshape_view(&[3, 8]).is_none());
        assert_eq!(l.reshape_view(&[3, 2, 2, 2]).unwrap().strides(), &[4, 12, 2, 1]);
    }

    #[test]
    fn offsets_walk_strides() {
        let l = Layout::contiguous(&[2, 3]).permute(&[1, 0]);
        let mut seen = vec![];
        for_each_offset(l.shape(), [l.strides()], [l.offset()], |[o]| seen.push(o));
        assert_eq!(seen, vec![0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn negative_dims() {
        assert_eq!((-1i32).resolve(3, "t"), 2);
        assert_eq!(0usize.resolve(0, "t"), 0);
        assert_eq!((-1i32).resolve(0, "t"), 0);
    }

    #[test]
    #[should_panic(expected = "sum: dimension 3 out of range for a tensor of rank 2")]
    fn dim_out_of_range_names_op() {
        3usize.resolve(2, "sum");
    }
}
