//! Index kernels (`index.wgsl`): validating `i64` indices on the device, `index_select`
//! and `gather`.

use super::convert::fill;
use super::{groups_for, prelude, strided_params, u32_of};
use crate::backend::gpu::context::Buffer;
use crate::backend::gpu::template::Family;
use crate::backend::gpu::{byte_len, GpuStorage};
use crate::dtype::DType;
use crate::shape::Layout;

pub(super) static FAMILY: Family = Family::new("index.wgsl", include_str!("../wgsl/index.wgsl"));

/// Validated indices: `index` (i64, through `li`) with negative values counted from the
/// back of a dim of `size`, as `u32` words. An index outside `-size..size` panics with the
/// CPU kernels' message naming `op` and `dim` (the host waits here for one word: a wrong
/// index is reported at the op that used it, never later and never silently clamped).
#[track_caller]
pub(crate) fn checked_indices(index: &GpuStorage, li: &Layout, size: usize, op: &str, dim: usize) -> Buffer {
    let ctx = index.ctx();
    let n = li.numel();
    let out = ctx.alloc(4 * n as u64);
    let flag = ctx.alloc(4);
    fill(ctx, &flag, 1, [u32::MAX, u32::MAX]);
    let mut p = strided_params(li.shape(), &[li]);
    p.push(u32_of("dimension size", size));
    let src = FAMILY.render("checked_indices", &[("PRELUDE", prelude())]);
    ctx.dispatch(&src, &p, &[index.buffer(), &out, &flag], groups_for(n));
    let first = u32::from_le_bytes(ctx.download(&flag, 4).try_into().expect("4 bytes"));
    if first != u32::MAX {
        let values = index.to_cpu().to_vec_of::<i64>(li);
        let bad = values[first as usize];
        panic!("{op}: index {bad} is out of bounds for dimension {dim} with size {size}");
    }
    out
}

/// Whether the index kernels copy this dtype (32- and 64-bit elements; 16-bit ones take
/// the host path).
pub(crate) fn words_ok(dtype: DType) -> bool {
    words(dtype).is_some()
}

/// The first value of the `i64` index (through `li`) outside `0..n`, in row-major order.
pub(crate) fn first_outside(index: &GpuStorage, li: &Layout, n: usize) -> Option<i64> {
    let ctx = index.ctx();
    let count = li.numel();
    if count == 0 {
        return None;
    }
    let flag = ctx.alloc(4);
    fill(ctx, &flag, 1, [u32::MAX, u32::MAX]);
    let mut p = strided_params(li.shape(), &[li]);
    p.push(u32_of("dimension size", n));
    let src = FAMILY.render("first_outside", &[("PRELUDE", prelude())]);
    ctx.dispatch(&src, &p, &[index.buffer(), &flag], groups_for(count));
    let first = u32::from_le_bytes(ctx.download(&flag, 4).try_into().expect("4 bytes"));
    (first != u32::MAX).then(|| index.to_cpu().to_vec_of::<i64>(li)[first as usize])
}

/// Words per element for the index kernels' copies, or `None` for 16-bit dtypes.
fn words(dtype: DType) -> Option<u64> {
    (!matches!(dtype, DType::F16 | DType::BF16)).then(|| byte_len(dtype, 1) / 4)
}

/// `index_select` along `d` of `x` through `l`, with validated indices `idx` (`k` of them).
pub(crate) fn index_select(x: &GpuStorage, l: &Layout, idx: &Buffer, k: usize, d: usize) -> Option<GpuStorage> {
    let w = words(x.dtype())?;
    let ctx = x.ctx();
    let shape = l.shape();
    let (outer, n, inner): (usize, usize, usize) =
        (shape[..d].iter().product(), shape[d], shape[d + 1..].iter().product());
    let total = outer * k * inner;
    let out = GpuStorage::uninit(ctx, x.dtype(), total);
    if total == 0 {
        return Some(out);
    }
    let mut p = strided_params(shape, &[l]);
    p.extend([u32_of("count", total), u32_of("index count", k), u32_of("size", n), u32_of("inner size", inner)]);
    let src = FAMILY.render("index_select", &[("PRELUDE", prelude()), ("WORDS", &w.to_string())]);
    ctx.dispatch(&src, &p, &[x.buffer(), idx, out.buffer()], groups_for(total));
    Some(out)
}

/// `gather` along `d`: `out[p] = x[p with dim d replaced by idx[p]]` over the index's shape.
pub(crate) fn gather(x: &GpuStorage, l: &Layout, idx: &Buffer, li_shape: &[usize], d: usize) -> Option<GpuStorage> {
    let w = words(x.dtype())?;
    let ctx = x.ctx();
    let total: usize = li_shape.iter().product();
    let out = GpuStorage::uninit(ctx, x.dtype(), total);
    if total == 0 {
        return Some(out);
    }
    let mut strides: Vec<usize> = l.strides().to_vec();
    let step = strides.get(d).copied().unwrap_or(0);
    if !strides.is_empty() {
        strides[d] = 0;
    }
    let base = Layout::new(li_shape.into(), strides.as_slice().into(), l.offset());
    let mut p = strided_params(li_shape, &[&base]);
    p.push(u32_of("stride", step));
    let src = FAMILY.render("gather", &[("PRELUDE", prelude()), ("WORDS", &w.to_string())]);
    ctx.dispatch(&src, &p, &[x.buffer(), idx, out.buffer()], groups_for(total));
    Some(out)
}
