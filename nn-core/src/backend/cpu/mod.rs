//! The CPU backend: typed host buffers ([`CpuStorage`]), the buffer pool, the GEMM, and
//! every kernel behind the backend interface (see [`crate::backend`]).
//!
//! Kernels here see typed slices and [`Layout`]s, never a `Tensor`: shape rules, checks and
//! autograd stay in `ops`.

use half::{bf16, f16};

use crate::dtype::{DType, Element};
use crate::shape::{for_each_offset, Layout};

pub(crate) mod attention;
pub(crate) mod buffer_pool;
pub(crate) mod bytes;
pub(crate) mod conv;
pub(crate) mod elementwise;
pub(crate) mod gemm;
pub(crate) mod gemm_bf16;
pub(crate) mod index;
pub(crate) mod isa_loops;
pub(crate) mod linalg;
pub(crate) mod norm;
pub(crate) mod parts;
pub(crate) mod poly_tables;
pub(crate) mod pooling;
pub(crate) mod powers;
pub(crate) mod reduce;
pub(crate) mod rows;
pub(crate) mod sample;
pub(crate) mod scan;
pub(crate) mod sort;
pub(crate) mod team;
pub(crate) mod tune;
pub(crate) mod update;
pub(crate) mod vector_fns;
pub(crate) mod widen;

/// The CPU side of an [`Element`]: how a typed vector sits in a [`CpuStorage`] and where
/// its buffers come from. Implemented for the six element types; kept here so that
/// `dtype` knows nothing of storage.
pub(crate) trait CpuElement: Element {
    /// Wraps a vector of this type into CPU storage.
    fn into_storage(v: Vec<Self>) -> CpuStorage;
    /// Borrows the values when `s` holds this type.
    fn slice(s: &CpuStorage) -> Option<&[Self]>;
    /// An empty buffer with room for `len` values (recycled for `f32`/`f64`).
    fn alloc_buffer(len: usize) -> Vec<Self> {
        Vec::with_capacity(len)
    }
}

/// A float type CPU kernels compute in: `f32` and `f64`, with their GEMM kernels.
pub(crate) trait CpuFloat: crate::dtype::FloatElement + CpuElement + gemm::Kernels {}
impl<T: crate::dtype::FloatElement + CpuElement + gemm::Kernels> CpuFloat for T {}

macro_rules! impl_cpu_element {
    ($t:ty, $variant:ident $(, $alloc:item)?) => {
        impl CpuElement for $t {
            fn into_storage(v: Vec<Self>) -> CpuStorage {
                CpuStorage::$variant(v)
            }
            fn slice(s: &CpuStorage) -> Option<&[Self]> {
                match s {
                    CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            $($alloc)?
        }
    };
}

impl_cpu_element!(
    f32,
    F32,
    fn alloc_buffer(len: usize) -> Vec<Self> {
        buffer_pool::take(len)
    }
);
impl_cpu_element!(
    f64,
    F64,
    fn alloc_buffer(len: usize) -> Vec<Self> {
        buffer_pool::take(len)
    }
);
impl_cpu_element!(i64, I64);
impl_cpu_element!(
    f16,
    F16,
    fn alloc_buffer(len: usize) -> Vec<Self> {
        buffer_pool::take(len)
    }
);
impl_cpu_element!(
    bf16,
    BF16,
    fn alloc_buffer(len: usize) -> Vec<Self> {
        buffer_pool::take(len)
    }
);
impl_cpu_element!(bool, Bool);

/// Typed host buffers. Large floating-point buffers return to a recycling pool when
/// dropped (see `pool.rs`).
#[derive(Debug, PartialEq)]
#[allow(missing_docs)]
pub enum CpuStorage {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I64(Vec<i64>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    Bool(Vec<bool>),
}

/// Runs `$body` with `$v` bound to the typed vector of any [`CpuStorage`] variant and
/// `$T` aliased to its element type.
macro_rules! with_cpu {
    ($s:expr, $T:ident, $v:ident => $body:expr) => {
        match $s {
            $crate::backend::cpu::CpuStorage::F32($v) => {
                #[allow(dead_code)]
                type $T = f32;
                $body
            }
            $crate::backend::cpu::CpuStorage::F64($v) => {
                #[allow(dead_code)]
                type $T = f64;
                $body
            }
            $crate::backend::cpu::CpuStorage::I64($v) => {
                #[allow(dead_code)]
                type $T = i64;
                $body
            }
            $crate::backend::cpu::CpuStorage::F16($v) => {
                #[allow(dead_code)]
                type $T = half::f16;
                $body
            }
            $crate::backend::cpu::CpuStorage::BF16($v) => {
                #[allow(dead_code)]
                type $T = half::bf16;
                $body
            }
            $crate::backend::cpu::CpuStorage::Bool($v) => {
                #[allow(dead_code)]
                type $T = bool;
                $body
            }
        }
    };
}
pub(crate) use with_cpu;

/// Like [`with_cpu`] for the compute types `F32`/`F64`; other dtypes panic with a message
/// naming `$op`.
macro_rules! with_float {
    ($s:expr, $op:expr, $T:ident, $v:ident => $body:expr) => {
        match $s {
            $crate::backend::cpu::CpuStorage::F32($v) => {
                #[allow(dead_code)]
                type $T = f32;
                $body
            }
            $crate::backend::cpu::CpuStorage::F64($v) => {
                #[allow(dead_code)]
                type $T = f64;
                $body
            }
            other => panic!(
                "{}: expected a floating-point tensor (f32, f64, bf16 or f16), got {}{}",
                $op,
                other.dtype(),
                if other.dtype().is_float() { "; convert with `.to_dtype(DType::F32)` first" } else { "" }
            ),
        }
    };
}
pub(crate) use with_float;

impl Clone for CpuStorage {
    fn clone(&self) -> Self {
        match self {
            CpuStorage::F32(v) => {
                let mut out = buffer_pool::take(v.len());
                out.extend_from_slice(v);
                CpuStorage::F32(out)
            }
            CpuStorage::F64(v) => {
                let mut out = buffer_pool::take(v.len());
                out.extend_from_slice(v);
                CpuStorage::F64(out)
            }
            CpuStorage::I64(v) => CpuStorage::I64(v.clone()),
            CpuStorage::F16(v) => CpuStorage::F16(v.clone()),
            CpuStorage::BF16(v) => CpuStorage::BF16(v.clone()),
            CpuStorage::Bool(v) => CpuStorage::Bool(v.clone()),
        }
    }
}

impl Drop for CpuStorage {
    fn drop(&mut self) {
        match self {
            CpuStorage::F32(v) => buffer_pool::give(std::mem::take(v)),
            CpuStorage::F64(v) => buffer_pool::give(std::mem::take(v)),
            CpuStorage::F16(v) => buffer_pool::give(std::mem::take(v)),
            CpuStorage::BF16(v) => buffer_pool::give(std::mem::take(v)),
            _ => {}
        }
    }
}

impl CpuStorage {
    /// The element type.
    pub fn dtype(&self) -> DType {
        with_cpu!(self, T, _v => T::DTYPE)
    }

    /// Number of elements in the buffer.
    pub fn len(&self) -> usize {
        with_cpu!(self, T, v => v.len())
    }

    /// True when the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A zero-filled buffer.
    ///
    /// # Panics
    /// When the allocator cannot provide the buffer.
    #[track_caller]
    pub fn zeros(dtype: DType, len: usize) -> CpuStorage {
        CpuStorage::full(dtype, len, 0.0)
    }

    /// A buffer filled with `value` converted to `dtype`.
    ///
    /// # Panics
    /// When the allocator cannot provide the buffer ([`try_full`](CpuStorage::try_full)
    /// returns `None` instead).
    #[track_caller]
    pub fn full(dtype: DType, len: usize, value: f64) -> CpuStorage {
        CpuStorage::try_full(dtype, len, value).unwrap_or_else(|| {
            panic!(
                "cannot allocate a tensor buffer of {len} {dtype} elements ({} bytes)",
                len as u128 * dtype.size_in_bytes() as u128
            )
        })
    }

    /// [`full`](CpuStorage::full), or `None` when the allocator cannot provide the buffer.
    pub fn try_full(dtype: DType, len: usize, value: f64) -> Option<CpuStorage> {
        fn fill<T: Clone>(len: usize, value: T) -> Option<Vec<T>> {
            let mut v = buffer_pool::try_with_capacity(len)?;
            v.resize(len, value);
            Some(v)
        }
        Some(match dtype {
            DType::F32 => CpuStorage::F32(buffer_pool::try_filled(len, value as f32)?),
            DType::F64 => CpuStorage::F64(buffer_pool::try_filled(len, value)?),
            DType::I64 => CpuStorage::I64(fill(len, value as i64)?),
            DType::F16 => CpuStorage::F16(fill(len, <f16 as Element>::from_f64(value))?),
            DType::BF16 => CpuStorage::BF16(fill(len, <bf16 as Element>::from_f64(value))?),
            DType::Bool => CpuStorage::Bool(fill(len, value != 0.0)?),
        })
    }

    /// The elements selected by `layout`, in row-major order, as a new buffer.
    pub fn gather_layout(&self, layout: &Layout) -> CpuStorage {
        with_cpu!(self, T, v => T::into_storage(strided_to_vec(v, layout)))
    }

    /// The elements selected by `layout`, converted to `dtype` (copied as they are when
    /// `dtype` is already the buffer's: an `i64` above 2^53 must not go through `f64`).
    pub fn convert_layout(&self, layout: &Layout, dtype: DType) -> CpuStorage {
        if dtype == self.dtype() {
            return self.gather_layout(layout);
        }
        fn conv<S: CpuElement, D: CpuElement>(src: &[S], layout: &Layout) -> Vec<D> {
            let mut out = Vec::with_capacity(layout.numel());
            if let Some(r) = layout.contiguous_range() {
                out.extend(src[r].iter().map(|&x| convert::<S, D>(x)));
            } else {
                for_each_offset(layout.shape(), [layout.strides()], [layout.offset()], |[o]| {
                    out.push(convert::<S, D>(src[o]))
                });
            }
            out
        }
        // Half types and f32 both ways, contiguous (autocast's casts): vector loops, in
        // parallel when long, into pooled buffers.
        if let Some(r) = layout.contiguous_range() {
            use widen::{convert, Half};
            match (self, dtype) {
                (CpuStorage::F32(v), DType::BF16) => return CpuStorage::BF16(convert(&v[r], bf16::narrow1)),
                (CpuStorage::BF16(v), DType::F32) => return CpuStorage::F32(convert(&v[r], Half::widen1)),
                (CpuStorage::F32(v), DType::F16) => return CpuStorage::F16(convert(&v[r], f16::narrow1)),
                (CpuStorage::F16(v), DType::F32) => return CpuStorage::F32(convert(&v[r], Half::widen1)),
                _ => {}
            }
        }
        // i64 to a 32-bit or half float rounds once, from the integer (`x as f32`, as
        // PyTorch): through f64 an integer past 2^53 would be rounded twice, and 2^60 +
        // 2^36 + 1 would become 2^60 where PyTorch gives 2^60 + 2^37.
        if let CpuStorage::I64(v) = self {
            let to_f32 = |v: &[i64]| -> Vec<f32> { strided_to_vec(v, layout).into_iter().map(|x| x as f32).collect() };
            match dtype {
                DType::F32 => return CpuStorage::F32(to_f32(v)),
                DType::F16 => return CpuStorage::F16(to_f32(v).into_iter().map(f16::from_f32).collect()),
                DType::BF16 => return CpuStorage::BF16(to_f32(v).into_iter().map(bf16::from_f32).collect()),
                _ => {}
            }
        }
        with_cpu!(self, S, v => match dtype {
            DType::F32 => CpuStorage::F32(conv::<S, f32>(v, layout)),
            DType::F64 => CpuStorage::F64(conv::<S, f64>(v, layout)),
            DType::I64 => CpuStorage::I64(conv::<S, i64>(v, layout)),
            DType::F16 => CpuStorage::F16(conv::<S, f16>(v, layout)),
            DType::BF16 => CpuStorage::BF16(conv::<S, bf16>(v, layout)),
            DType::Bool => CpuStorage::Bool(conv::<S, bool>(v, layout)),
        })
    }
}

/// Converts one element between types through `f64`. Every source value except `i64`
/// above 2^53 is exact in `f64`, so the rounding to the target is PyTorch's:
/// round-to-nearest-even for floats (to a half type through `f32`, as PyTorch's half types
/// are built from a `float`), truncation toward zero for integers.
#[inline(always)]
fn convert<S: CpuElement, D: CpuElement>(x: S) -> D {
    D::from_f64(x.as_f64())
}

/// Copies the elements selected by `layout` out of `v`, row-major.
pub(crate) fn strided_to_vec<T: CpuElement>(v: &[T], layout: &Layout) -> Vec<T> {
    let mut out = T::alloc_buffer(layout.numel());
    if layout.numel() == 0 {
        // No element to read: the offset of an empty view (a slice of an empty stack's
        // gradient) may lie past the end of its buffer.
        return out;
    }
    if let Some(r) = layout.contiguous_range() {
        out.extend_from_slice(&v[r]);
        return out;
    }
    let (shape, strides) = (layout.shape(), layout.strides());
    let rank = shape.len();
    if rank >= 2 && strides[rank - 1] == 1 && shape[rank - 1] >= 4 {
        // Rows of the last dim are contiguous runs (a transposed head split, a narrowed
        // row, a broadcast bias): one slice copy per run instead of an indexed push per
        // element, the runs split over the team when the copy is large.
        let run = shape[rank - 1];
        let numel = layout.numel();
        if !parts::split(numel, parts::PAR_THRESHOLD) {
            for_each_offset(&shape[..rank - 1], [&strides[..rank - 1]], [layout.offset()], |[o]| {
                out.extend_from_slice(&v[o..o + run])
            });
            return out;
        }
        let (outer, ostrides) = (&shape[..rank - 1], &strides[..rank - 1]);
        let rows = team::GRAIN.div_ceil(run);
        team::for_chunks(&mut out.spare_capacity_mut()[..numel], rows * run, |q, part| {
            // The index of this part's first run over the outer dims, then an odometer.
            let mut idx: smallvec::SmallVec<[usize; 8]> = smallvec::smallvec![0; outer.len()];
            let mut rest = q * rows;
            for (i, &n) in idx.iter_mut().zip(outer).rev() {
                (*i, rest) = (rest % n, rest / n);
            }
            let mut o = layout.offset() + idx.iter().zip(ostrides).map(|(i, s)| i * s).sum::<usize>();
            for dst in part.chunks_exact_mut(run) {
                for (d, s) in dst.iter_mut().zip(&v[o..o + run]) {
                    d.write(*s);
                }
                for ((i, &n), &st) in idx.iter_mut().zip(outer).zip(ostrides).rev() {
                    *i += 1;
                    o += st;
                    if *i < n {
                        break;
                    }
                    *i = 0;
                    o -= st * n;
                }
            }
        });
        // SAFETY: the parts cover the `numel` slots (`numel` is a multiple of `run`, so
        // each part is whole runs) and every run was written above; a panicking part
        // re-raises here before this line.
        unsafe { out.set_len(numel) };
        return out;
    }
    if let ([rows, cols], [1, cs]) = (shape, strides) {
        if *rows > 1 && *cols > 1 && *cs >= *rows {
            drop(out);
            return transposed_to_vec(v, layout.offset(), (*rows, *cols), *cs);
        }
    }
    for_each_offset(shape, [strides], [layout.offset()], |[o]| out.push(v[o]));
    out
}

/// Side of the square tiles [`transposed_to_vec`] goes through (a tile's rows and columns
/// both stay in the L1 cache).
const TILE: usize = 16;

/// A `rows x cols` matrix whose columns are contiguous, column `c` at
/// `v[offset + c * col_stride..][..rows]` (the transpose of a row-major matrix: strides
/// `[1, col_stride]`), row-major. Gathered in square tiles, so that the reads run along
/// the columns and the writes along the rows of one tile at a time, instead of every
/// element from a different cache line; split over the team by bands of rows when large.
///
/// A whole tile is read into a local block first (sixteen slice copies) and written out
/// row by row from it: a loop writing each element to `part[i * cols + c]` straight from
/// the column does a bounds check and a store to a different row per element, and is
/// several times slower on a linear layer's result (the `compare.py` row `llama_fwd` runs
/// such transpositions).
fn transposed_to_vec<T: CpuElement>(v: &[T], offset: usize, (rows, cols): (usize, usize), col_stride: usize) -> Vec<T> {
    let numel = rows * cols;
    let mut out = T::alloc_buffer(numel);
    let band = |q: usize, part: &mut [std::mem::MaybeUninit<T>]| {
        let (r0, nr) = (q * TILE, part.len() / cols);
        for c0 in (0..cols).step_by(TILE) {
            let nc = TILE.min(cols - c0);
            if nr == TILE && nc == TILE {
                // block[c][r] = element (r0 + r, c0 + c).
                let first = v[offset + c0 * col_stride + r0];
                let mut block = [[first; TILE]; TILE];
                for (c, col) in block.iter_mut().enumerate() {
                    col.copy_from_slice(&v[offset + (c0 + c) * col_stride + r0..][..TILE]);
                }
                for (r, row) in part.chunks_exact_mut(cols).enumerate() {
                    for (slot, col) in row[c0..c0 + TILE].iter_mut().zip(&block) {
                        slot.write(col[r]);
                    }
                }
            } else {
                for c in c0..c0 + nc {
                    for (i, &x) in v[offset + c * col_stride + r0..][..nr].iter().enumerate() {
                        part[i * cols + c].write(x);
                    }
                }
            }
        }
    };
    let slots = &mut out.spare_capacity_mut()[..numel];
    if parts::split(numel, parts::PAR_THRESHOLD) {
        team::for_chunks(slots, TILE * cols, band);
    } else {
        slots.chunks_mut(TILE * cols).enumerate().for_each(|(q, part)| band(q, part));
    }
    // SAFETY: the bands are whole rows covering all `rows`, and each wrote every column
    // of its rows (a panicking band re-raises in `for_chunks` before this line).
    unsafe { out.set_len(numel) };
    out
}

/// The elements `layout` selects, row-major: borrowed in place when they are one
/// contiguous range, else gathered (a kernel reading its operand whole).
pub(crate) fn values_of<'a, T: CpuElement>(v: &'a [T], layout: &Layout) -> std::borrow::Cow<'a, [T]> {
    match layout.contiguous_range() {
        Some(r) => std::borrow::Cow::Borrowed(&v[r]),
        None => std::borrow::Cow::Owned(strided_to_vec(v, layout)),
    }
}

/// Writes row-major `vals` into the positions of `layout` inside `dst` (same dtype).
pub(crate) fn scatter_into(dst: &mut CpuStorage, layout: &Layout, vals: &CpuStorage) {
    fn go<T: CpuElement>(dst: &mut [T], layout: &Layout, vals: &[T]) {
        if let Some(r) = layout.contiguous_range() {
            dst[r].copy_from_slice(vals);
            return;
        }
        let mut i = 0;
        for_each_offset(layout.shape(), [layout.strides()], [layout.offset()], |[o]| {
            dst[o] = vals[i];
            i += 1;
        });
    }
    let dtype = dst.dtype();
    let vals = if vals.dtype() == dtype {
        std::borrow::Cow::Borrowed(vals)
    } else {
        std::borrow::Cow::Owned(vals.convert_layout(&Layout::contiguous(&[vals.len()]), dtype))
    };
    with_cpu!(dst, T, d => go::<T>(d, layout, T::slice(&vals).expect("same dtype")))
}

/// Takes the vector out of `slot` when it holds `Vec<D>` (a type-checked identity: the
/// public constructors take any sealed [`Element`], while buffers are typed by variant).
fn take_as<D: 'static>(slot: &mut dyn std::any::Any) -> Option<Vec<D>> {
    slot.downcast_mut::<Option<Vec<D>>>().and_then(Option::take)
}

impl CpuStorage {
    /// Moves a host vector into the variant of its element type.
    pub(crate) fn from_vec<T: Element>(v: Vec<T>) -> CpuStorage {
        let slot: &mut dyn std::any::Any = &mut Some(v);
        if let Some(v) = take_as(slot) {
            return CpuStorage::F32(v);
        }
        if let Some(v) = take_as(slot) {
            return CpuStorage::F64(v);
        }
        if let Some(v) = take_as(slot) {
            return CpuStorage::I64(v);
        }
        if let Some(v) = take_as(slot) {
            return CpuStorage::F16(v);
        }
        if let Some(v) = take_as(slot) {
            return CpuStorage::BF16(v);
        }
        if let Some(v) = take_as(slot) {
            return CpuStorage::Bool(v);
        }
        unreachable!("`Element` is sealed to the six storage types")
    }

    /// The buffer as a `Vec<T>`, converted when it holds another type; the elements
    /// `layout` selects, row-major.
    pub(crate) fn to_vec_of<T: Element>(&self, layout: &Layout) -> Vec<T> {
        let mut converted = self.convert_layout(layout, T::DTYPE);
        with_cpu!(&mut converted, U, v => {
            let slot: &mut dyn std::any::Any = &mut Some(std::mem::take(v));
            take_as::<T>(slot).expect("converted to T's dtype")
        })
    }
}

/// An empty host vector with room for `len` values, recycled for `f32`/`f64`; `None` when
/// the allocator cannot provide it.
pub(crate) fn try_alloc<T: Element>(len: usize) -> Option<Vec<T>> {
    let pooled: Option<Box<dyn std::any::Any>> = match T::DTYPE {
        DType::F32 => Some(Box::new(Some(buffer_pool::try_take::<f32>(len)?))),
        DType::F64 => Some(Box::new(Some(buffer_pool::try_take::<f64>(len)?))),
        _ => None,
    };
    match pooled {
        Some(mut b) => take_as::<T>(b.as_mut()),
        None => buffer_pool::try_with_capacity(len),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Transposed matrices (columns contiguous, with an offset and columns further apart
    /// than their length, as a narrowed transpose) in tiles, tile edges and the team's
    /// split included, against an element-by-element gather.
    #[test]
    fn transposed_matrices_gathered_in_tiles_match_a_gather() {
        for (rows, cols, cs, offset) in
            [(2, 2, 2, 0), (17, 33, 17, 0), (16, 16, 20, 3), (300, 257, 301, 5), (5, 3000, 5, 0)]
        {
            let v: Vec<i64> = (0..(offset + cols * cs) as i64).collect();
            let l = Layout::new(smallvec::smallvec![rows, cols], smallvec::smallvec![1, cs], offset);
            let mut expect = Vec::new();
            for_each_offset(l.shape(), [l.strides()], [l.offset()], |[o]| expect.push(v[o]));
            assert_eq!(strided_to_vec(&v, &l), expect, "{rows} x {cols}, columns {cs} apart, offset {offset}");
        }
    }

    /// Strided copies by contiguous runs, small (one thread) and large (split over the
    /// team), against an element-by-element gather.
    #[test]
    fn strided_copies_by_runs_match_a_gather() {
        for (shape, perm) in [(vec![3, 5, 8], vec![1, 0, 2]), (vec![40, 30, 64], vec![1, 0, 2])] {
            let numel: usize = shape.iter().product();
            let v: Vec<f32> = (0..numel).map(|i| i as f32).collect();
            let l = Layout::contiguous(&shape).permute(&perm);
            let mut expect = Vec::new();
            for_each_offset(l.shape(), [l.strides()], [l.offset()], |[o]| expect.push(v[o]));
            assert_eq!(strided_to_vec(&v, &l), expect);
            // A broadcast row (stride 0 on the leading dims), as a bias is.
            let b = Layout::contiguous(&[shape[2]]).broadcast_to(&[shape[0] * shape[1], shape[2]]).unwrap();
            let got = strided_to_vec(&v[..shape[2]], &b);
            assert!(got.chunks(shape[2]).all(|row| row == &v[..shape[2]]));
        }
    }
}
