//! What `reshape` and `view` accept as a shape: a fixed shape (`&[2, 3]`, a `Vec<usize>`),
//! or one with a dimension to infer, PyTorch's `-1`, as a tuple (`(b, t, -1)`, which mixes
//! `usize` sizes with the `-1` literal; `()` is a hole too, as candle's) or a signed slice
//! (`&[i64]`, the shape lists of ported code: `&shape[..]` of a `Vec<i64>`; only `usize`
//! vectors and arrays are shapes as they are, so that `vec![1; n]` needs no annotation).
//!
//! ```
//! use nn_core::Tensor;
//! let x = Tensor::zeros(&[2, 3, 4]);
//! let (b, t) = (2, 3);
//! assert_eq!(x.view((b, t, 2, -1)).shape(), &[2, 3, 2, 2]);
//! assert_eq!(x.reshape((-1, 4)).shape(), &[6, 4]);
//! assert_eq!(x.reshape((b, ())).shape(), &[2, 12]);
//! assert_eq!(x.reshape(&[-1i64][..]).shape(), &[24]);
//! assert_eq!(Tensor::scalar(1.0).reshape(()).shape(), &[] as &[usize]);
//! ```

use crate::shape::Dims;

/// One dimension of a [`ShapeSpec`]: a size, or (a negative `-1`, or `()`) the one size
/// inferred from the element count.
pub trait ShapeDim: Copy {
    /// The size, or `None` for the dimension to infer. A negative other than `-1` is
    /// refused, naming `op`.
    fn size(self, op: &str) -> Option<usize>;
}

impl ShapeDim for usize {
    fn size(self, _: &str) -> Option<usize> {
        Some(self)
    }
}

impl ShapeDim for () {
    fn size(self, _: &str) -> Option<usize> {
        None
    }
}

macro_rules! signed_dim {
    ($($t:ty),*) => {$(
        impl ShapeDim for $t {
            #[track_caller]
            fn size(self, op: &str) -> Option<usize> {
                match self {
                    -1 => None,
                    d if d < 0 => panic!("{op}: invalid shape dimension {d} (only -1, the size to infer, may be negative)"),
                    d => Some(usize::try_from(d).unwrap_or_else(|_| panic!("{op}: shape dimension {d} does not fit usize"))),
                }
            }
        }
    )*};
}
signed_dim!(i32, i64, isize);

/// A shape as `reshape` and `view` take it: see the [module docs](self).
pub trait ShapeSpec {
    /// The dimensions, `None` for one to infer.
    fn dims(&self, op: &str) -> Vec<Option<usize>>;
}

// Slices, arrays and vectors are shapes by reference only (`reshape(&[2, 3])`, as with a
// `&[usize]` parameter): were `[usize; N]` one by value too, clippy would
// ask every `reshape(&[..])` to drop its `&`.
impl ShapeSpec for &[usize] {
    fn dims(&self, _: &str) -> Vec<Option<usize>> {
        self.iter().map(|&d| Some(d)).collect()
    }
}

impl<const N: usize> ShapeSpec for &[usize; N] {
    fn dims(&self, op: &str) -> Vec<Option<usize>> {
        self.as_slice().dims(op)
    }
}

impl ShapeSpec for &Vec<usize> {
    fn dims(&self, op: &str) -> Vec<Option<usize>> {
        self.as_slice().dims(op)
    }
}

impl ShapeSpec for &Dims {
    fn dims(&self, op: &str) -> Vec<Option<usize>> {
        self.as_slice().dims(op)
    }
}

impl ShapeSpec for &[i64] {
    #[track_caller]
    fn dims(&self, op: &str) -> Vec<Option<usize>> {
        self.iter().map(|d| d.size(op)).collect()
    }
}

impl ShapeSpec for () {
    fn dims(&self, _: &str) -> Vec<Option<usize>> {
        Vec::new()
    }
}

macro_rules! tuple_spec {
    ($($t:ident $i:tt),+) => {
        impl<$($t: ShapeDim),+> ShapeSpec for ($($t,)+) {
            #[track_caller]
            fn dims(&self, op: &str) -> Vec<Option<usize>> {
                vec![$(self.$i.size(op)),+]
            }
        }
    };
}
tuple_spec!(A 0);
tuple_spec!(A 0, B 1);
tuple_spec!(A 0, B 1, C 2);
tuple_spec!(A 0, B 1, C 2, D 3);
tuple_spec!(A 0, B 1, C 2, D 3, E 4);
tuple_spec!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_spec!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_spec!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// `spec` resolved against `numel` elements (PyTorch's `infer_size`): the inferred
/// dimension is the element count over the product of the others.
///
/// # Panics
/// Naming `op` and the input's `shape`: with two dimensions to infer, one to infer
/// beside a zero size (any size would do), or an element count the shape cannot hold.
#[track_caller]
pub(crate) fn resolve(spec: &impl ShapeSpec, numel: usize, op: &str, shape: &[usize]) -> Dims {
    let dims = spec.dims(op);
    let shown = || {
        let parts: Vec<String> = dims.iter().map(|d| d.map_or("-1".to_string(), |s| s.to_string())).collect();
        format!("[{}]", parts.join(", "))
    };
    let holes = dims.iter().filter(|d| d.is_none()).count();
    if holes > 1 {
        panic!("{op}: only one dimension can be inferred, got shape {}", shown());
    }
    let known = dims.iter().flatten().try_fold(1usize, |p, &d| p.checked_mul(d));
    let fail = || -> ! {
        panic!("{op}: shape {} is invalid for input of shape {shape:?} ({numel} elements)", shown());
    };
    let Some(known) = known else { fail() };
    if holes == 0 {
        let out: Dims = dims.iter().map(|d| d.expect("no hole")).collect();
        // `checked_numel`, not the product: a shape whose strides overflow is refused too.
        if crate::shape::checked_numel(&out) != Some(numel) {
            fail();
        }
        return out;
    }
    if known == 0 {
        panic!(
            "{op}: cannot reshape a tensor of {numel} elements into shape {} because the unspecified dimension size -1 can be any value and is ambiguous",
            shown()
        );
    }
    if !numel.is_multiple_of(known) {
        fail();
    }
    dims.iter().map(|d| d.unwrap_or(numel / known)).collect()
}

/// `spec` as `expand`'s target for a tensor of `shape` (PyTorch's `expand`): `-1` keeps the
/// size of the dimension it is aligned with (from the back), and is refused in a new
/// leading dimension.
#[track_caller]
pub(crate) fn resolve_expand(spec: &impl ShapeSpec, shape: &[usize]) -> Dims {
    let dims = spec.dims("expand");
    let (n, r) = (dims.len(), shape.len());
    if n < r {
        panic!(
            "expand: the number of sizes provided ({n}) must be greater or equal to the number of dimensions in the \
             tensor ({r}, shape {shape:?})"
        );
    }
    dims.iter()
        .enumerate()
        .map(|(i, d)| match d {
            Some(s) => *s,
            None if i < n - r => panic!("expand: -1 is not allowed in a leading, new dimension (dimension {i} of {n})"),
            None => shape[i - (n - r)],
        })
        .collect()
}

/// A start position along a dimension (`narrow`'s): a `usize`, or a signed integer where a
/// negative one counts from the end, as PyTorch's.
pub trait Start: Copy {
    /// The position in `0..=size`, panicking with `op` in the message when out of range.
    fn resolve(self, size: usize, op: &str) -> usize;
}

impl Start for usize {
    #[track_caller]
    fn resolve(self, size: usize, op: &str) -> usize {
        i64::try_from(self).map_or_else(|_| out_of_range(op, size, self as i128), |s| s.resolve(size, op))
    }
}

#[track_caller]
fn out_of_range(op: &str, size: usize, got: i128) -> ! {
    panic!("{op}: start out of range (expected to be in range of [-{size}, {size}], but got {got})")
}

macro_rules! signed_start {
    ($($t:ty),*) => {$(
        impl Start for $t {
            #[track_caller]
            fn resolve(self, size: usize, op: &str) -> usize {
                let (s, n) = (self as i128, size as i128);
                if s < -n || s > n {
                    out_of_range(op, size, s);
                }
                (if s < 0 { s + n } else { s }) as usize
            }
        }
    )*};
}
signed_start!(i32, i64, isize);

#[cfg(test)]
mod tests {
    use super::*;

    fn r(spec: impl ShapeSpec, numel: usize) -> Vec<usize> {
        resolve(&spec, numel, "reshape", &[numel]).to_vec()
    }

    #[test]
    fn every_form_resolves_as_pytorch_does() {
        assert_eq!(r(&[2, 3], 6), [2, 3]);
        assert_eq!(r((2, -1), 6), [2, 3]);
        assert_eq!(r((-1,), 6), [6]);
        assert_eq!(r((2usize, (), 1), 6), [2, 3, 1]);
        assert_eq!(r(&[-1i64, 2][..], 6), [3, 2]);
        assert_eq!(r(&vec![3usize, 2], 6), [3, 2]);
        assert_eq!(r(&vec![1; 2], 1), [1, 1]);
        let ported: Vec<i64> = vec![2, -1];
        assert_eq!(r(&ported[..], 6), [2, 3]);
        assert_eq!(r((), 1), [] as [usize; 0]);
        // A zero size beside known sizes: -1 is not needed.
        assert_eq!(r((0, 4), 0), [0, 4]);
    }

    #[test]
    #[should_panic(expected = "the unspecified dimension size -1 can be any value and is ambiguous")]
    fn a_hole_beside_a_zero_size_is_refused() {
        r((-1, 0), 0);
    }

    #[test]
    fn expand_keeps_sizes_under_minus_one() {
        assert_eq!(resolve_expand(&(4, -1, 3), &[2, 1]).to_vec(), [4, 2, 3]);
        assert_eq!(resolve_expand(&&[2, 5], &[2, 1]).to_vec(), [2, 5]);
        assert_eq!(Start::resolve(-1, 5, "narrow"), 4);
        assert_eq!(Start::resolve(5usize, 5, "narrow"), 5);
        assert_eq!(Start::resolve(-5i64, 5, "narrow"), 0);
    }

    #[test]
    #[should_panic(expected = "expand: -1 is not allowed in a leading, new dimension (dimension 0 of 3)")]
    fn expand_refuses_a_new_minus_one() {
        resolve_expand(&(-1, 2, 1), &[2, 1]);
    }

    #[test]
    #[should_panic(expected = "narrow: start out of range (expected to be in range of [-3, 3], but got -4)")]
    fn a_start_past_the_front_is_refused() {
        Start::resolve(-4, 3, "narrow");
    }

    #[test]
    #[should_panic(expected = "reshape: only one dimension can be inferred, got shape [-1, -1]")]
    fn two_holes_are_refused() {
        r((-1, -1), 6);
    }

    #[test]
    #[should_panic(expected = "reshape: invalid shape dimension -2")]
    fn other_negatives_are_refused() {
        r((-2, 3), 6);
    }

    #[test]
    #[should_panic(expected = "reshape: shape [4, -1] is invalid for input of shape [6] (6 elements)")]
    fn an_inexact_hole_is_refused() {
        r((4, -1), 6);
    }

    #[test]
    #[should_panic(expected = "reshape: shape [2, 2] is invalid for input of shape [6] (6 elements)")]
    fn a_wrong_count_is_refused() {
        r(&[2, 2], 6);
    }
}
