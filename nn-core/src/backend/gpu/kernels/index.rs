//! Index kernels (`index.wgsl`): validating `i64` indices and class targets on the device
//! (failures reported at the next host read), `index_select` and `gather`.

use super::{groups_for, prelude, strided_params, through_f32, u32_of};
use crate::backend::gpu::batch::Check;
use crate::backend::gpu::context::Buffer;
use crate::backend::gpu::template::Family;
use crate::backend::gpu::{byte_len, GpuStorage};
use crate::dtype::DType;
use crate::shape::Layout;

pub(super) static FAMILY: Family = Family::new("index.wgsl", include_str!("../wgsl/index.wgsl"));

/// A check of `index` (through `li`) by `op`, whose failure marks the buffers `writes`.
fn check(index: &GpuStorage, li: &Layout, op: &str, (dim, size): (usize, usize), writes: Vec<u64>) -> Check {
    Check {
        op: op.to_string(),
        dim,
        size,
        index: index.share(),
        layout: li.clone(),
        writes,
        launch: 0,
        thread: std::thread::current().id(),
    }
}

/// Validated indices: `index` (i64, through `li`) in a dim of `size`, as `u32` words. The
/// check runs on the device: an index outside `0..size` (a negative one included, as on
/// the CPU and in PyTorch) is reported at the next host read, naming `op`, `dim` and the value (see
/// [`crate::backend::gpu::context`]); its word is written as 0, and the results computed
/// from it are marked unreadable.
#[track_caller]
pub(crate) fn checked_indices(index: &GpuStorage, li: &Layout, size: usize, op: &str, dim: usize) -> Buffer {
    let ctx = index.ctx();
    let n = li.numel();
    let out = ctx.alloc(4 * n as u64);
    let check = check(index, li, op, (dim, size), vec![out.id]);
    let mut p = strided_params(li.shape(), &[li]);
    p.push(u32_of("dimension size", size));
    let src = FAMILY.render("checked_indices", &[("PRELUDE", prelude())]);
    ctx.dispatch_checked(&src, check, p, &[index.buffer(), &out], groups_for(n));
    out
}

/// Checks on the device that every value of the `i64` index (through `li`) lies in
/// `0..n`; a failure is reported at the next host read, naming `op` (as
/// [`checked_indices`] does), and marks the index's buffer, so that everything the op
/// goes on to compute from it is unreadable too (whatever the op's own indexing checks;
/// `embedding` reports its own message first).
pub(crate) fn check_range(index: &GpuStorage, li: &Layout, n: usize, op: &str) {
    let count = li.numel();
    if count == 0 {
        return;
    }
    let check = check(index, li, op, (0, n), vec![index.buffer().id]);
    let mut p = strided_params(li.shape(), &[li]);
    p.push(u32_of("dimension size", n));
    let src = FAMILY.render("check_range", &[("PRELUDE", prelude())]);
    index.ctx().dispatch_checked(&src, check, p, &[index.buffer()], groups_for(count));
}

/// For class targets `t` (`i64`, through `lt`) of a loss over `c` classes: the targets as
/// `i64` gather indices with `ignore_index` replaced by 0, and a 0/1 mask of the kept ones
/// in `dtype` (`F32` only; `None` otherwise). A kept target outside `0..c` is reported at
/// the next host read, naming `op` (the loss).
pub(crate) fn class_targets(
    t: &GpuStorage,
    lt: &Layout,
    c: usize,
    ignore_index: i64,
    dtype: DType,
    op: &str,
) -> Option<(GpuStorage, GpuStorage)> {
    if dtype != DType::F32 {
        return None;
    }
    let ctx = t.ctx();
    let n = lt.numel();
    let safe = GpuStorage::uninit(ctx, DType::I64, n);
    let mask = GpuStorage::uninit(ctx, DType::F32, n);
    if n == 0 {
        return Some((safe, mask));
    }
    let check = check(t, lt, op, (1, c), vec![safe.buffer().id, mask.buffer().id]);
    let mut p = strided_params(lt.shape(), &[lt]);
    let ignore = ignore_index as u64;
    p.extend([u32_of("class count", c), ignore as u32, (ignore >> 32) as u32]);
    let src = FAMILY.render("class_targets", &[("PRELUDE", prelude())]);
    ctx.dispatch_checked(&src, check, p, &[t.buffer(), safe.buffer(), mask.buffer()], groups_for(n));
    Some((safe, mask))
}

/// Words per element for the index kernels' copies, or `None` for 16-bit dtypes.
fn words(dtype: DType) -> Option<u64> {
    (!matches!(dtype, DType::F16 | DType::BF16)).then(|| byte_len(dtype, 1) / 4)
}

/// `index_select` along `d` of `x` through `l`, with validated indices `idx` (`k` of them).
pub(crate) fn index_select(x: &GpuStorage, l: &Layout, idx: &Buffer, k: usize, d: usize) -> Option<GpuStorage> {
    // 16-bit elements on an f32 copy made on the device (exact), the result rounded back.
    if let Some(r) = through_f32([Some(x)], |[x]| Some([index_select(x?, l, idx, k, d)?])) {
        return r.map(|[y]| y);
    }
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
    if let Some(r) = through_f32([Some(x)], |[x]| Some([gather(x?, l, idx, li_shape, d)?])) {
        return r.map(|[y]| y);
    }
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
