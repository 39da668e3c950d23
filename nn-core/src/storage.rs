//! Storage: the buffers behind tensors, one enum variant per backend.
//!
//! `Storage::Cpu` owns a typed `Vec`; `Storage::Meta` records only dtype and length. A GPU
//! backend would add a variant here; modules and the autograd engine never look inside.

use half::{bf16, f16};

use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::shape::{for_each_offset, Layout};

/// Typed host buffers. Large `f32`/`f64` buffers return to a recycling pool when dropped
/// (see `pool.rs`).
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
            $crate::storage::CpuStorage::F32($v) => {
                #[allow(dead_code)]
                type $T = f32;
                $body
            }
            $crate::storage::CpuStorage::F64($v) => {
                #[allow(dead_code)]
                type $T = f64;
                $body
            }
            $crate::storage::CpuStorage::I64($v) => {
                #[allow(dead_code)]
                type $T = i64;
                $body
            }
            $crate::storage::CpuStorage::F16($v) => {
                #[allow(dead_code)]
                type $T = half::f16;
                $body
            }
            $crate::storage::CpuStorage::BF16($v) => {
                #[allow(dead_code)]
                type $T = half::bf16;
                $body
            }
            $crate::storage::CpuStorage::Bool($v) => {
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
            $crate::storage::CpuStorage::F32($v) => {
                #[allow(dead_code)]
                type $T = f32;
                $body
            }
            $crate::storage::CpuStorage::F64($v) => {
                #[allow(dead_code)]
                type $T = f64;
                $body
            }
            other => panic!(
                "{}: expected a floating-point tensor (f32 or f64), got {}{}",
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
                let mut out = crate::pool::take(v.len());
                out.extend_from_slice(v);
                CpuStorage::F32(out)
            }
            CpuStorage::F64(v) => {
                let mut out = crate::pool::take(v.len());
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
            CpuStorage::F32(v) => crate::pool::give(std::mem::take(v)),
            CpuStorage::F64(v) => crate::pool::give(std::mem::take(v)),
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
            let mut v = crate::pool::try_with_capacity(len)?;
            v.resize(len, value);
            Some(v)
        }
        Some(match dtype {
            DType::F32 => CpuStorage::F32(crate::pool::try_filled(len, value as f32)?),
            DType::F64 => CpuStorage::F64(crate::pool::try_filled(len, value)?),
            DType::I64 => CpuStorage::I64(fill(len, value as i64)?),
            DType::F16 => CpuStorage::F16(fill(len, f16::from_f64(value))?),
            DType::BF16 => CpuStorage::BF16(fill(len, bf16::from_f64(value))?),
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
        fn conv<S: Element, D: Element>(src: &[S], layout: &Layout) -> Vec<D> {
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
/// above 2^53 is exact in `f64`, so the single rounding to the target (round-to-nearest-even
/// for floats, truncation toward zero for integers, as PyTorch) is correct.
#[inline(always)]
fn convert<S: Element, D: Element>(x: S) -> D {
    D::from_f64(x.as_f64())
}

/// Copies the elements selected by `layout` out of `v`, row-major.
pub(crate) fn strided_to_vec<T: Element>(v: &[T], layout: &Layout) -> Vec<T> {
    let mut out = T::alloc_buffer(layout.numel());
    if let Some(r) = layout.contiguous_range() {
        out.extend_from_slice(&v[r]);
        return out;
    }
    for_each_offset(layout.shape(), [layout.strides()], [layout.offset()], |[o]| out.push(v[o]));
    out
}

/// A tensor's buffer on some device.
#[derive(Clone, Debug, PartialEq)]
pub enum Storage {
    /// Values in host memory.
    Cpu(CpuStorage),
    /// No values: only the dtype and the element count.
    Meta {
        /// Element type.
        dtype: DType,
        /// Number of elements the buffer would hold.
        len: usize,
    },
}

impl Storage {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            Storage::Cpu(c) => c.dtype(),
            Storage::Meta { dtype, .. } => *dtype,
        }
    }

    /// The device the buffer lives on.
    pub fn device(&self) -> Device {
        match self {
            Storage::Cpu(_) => Device::Cpu,
            Storage::Meta { .. } => Device::Meta,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Storage::Cpu(c) => c.len(),
            Storage::Meta { len, .. } => *len,
        }
    }

    /// True when the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
