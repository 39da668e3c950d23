//! Checks that run on the device: index bounds and class targets. A failure is recorded in
//! an error slot of the context and reported at the next host read (see
//! [`super::context`]), so no check makes the host wait.

use super::batch::Check;
use super::context::Buffer;
use super::kernels::{binding, groups_for, strided_params, u32_of, MAIN_1D, PRELUDE};
use super::GpuStorage;
use crate::dtype::DType;
use crate::shape::Layout;

/// Validated indices: `index` (i64, through `li`) with negative values counted from the
/// back of a dim of `size`, as `u32` words. The check runs on the device: an index outside
/// `-size..size` is reported at the next host read, naming `op`, `dim` and the value (see
/// [`super::context`]); its word is written as 0, and the results computed from it are
/// marked unreadable.
#[track_caller]
pub(crate) fn checked_indices(index: &GpuStorage, li: &Layout, size: usize, op: &str, dim: usize) -> Buffer {
    let ctx = index.ctx();
    let n = li.numel();
    let out = ctx.alloc(4 * n as u64);
    let slot = ctx.error_slot(Check {
        op: op.to_string(),
        dim,
        size,
        index: index.share(),
        layout: li.clone(),
        writes: vec![out.id],
        launch: 0,
        thread: std::thread::current().id(),
    });
    let mut p = strided_params(li.shape(), &[li]);
    p.push(u32_of("dimension size", size));
    p.push(slot);
    let src = format!(
        "{PRELUDE}{}{}{}{MAIN_1D}    if (i >= P[0]) {{ return; }}
    let size = P[extras(1u)];
    let o = at(i, 0u);
    let lo = X[2u * o];
    let hi = X[2u * o + 1u];
    var ok = false;
    var j = 0u;
    if (hi == 0u && lo < size) {{ ok = true; j = lo; }}
    if (hi == 0xffffffffu && lo >= 0u - size && size > 0u) {{ ok = true; j = lo + size; }}
    if (!ok) {{ atomicMax(&F[P[extras(1u) + 1u]], 0xffffffffu - i); }}
    Y[i] = j;
}}
",
        binding(1, "X", "u32", false),
        binding(2, "Y", "u32", true),
        binding(3, "F", "atomic<u32>", true),
    );
    ctx.dispatch_with_errors(&src, &p, &[index.buffer(), &out], groups_for(n));
    out
}

/// Checks on the device that every value of the `i64` index (through `li`) lies in
/// `0..n`; a failure is reported at the next host read, naming `op` (see
/// [`checked_indices`]).
pub(crate) fn check_range(index: &GpuStorage, li: &Layout, n: usize, op: &str) {
    let ctx = index.ctx();
    let count = li.numel();
    if count == 0 {
        return;
    }
    let slot = ctx.error_slot(Check {
        op: op.to_string(),
        dim: 0,
        size: n,
        index: index.share(),
        layout: li.clone(),
        writes: Vec::new(),
        launch: 0,
        thread: std::thread::current().id(),
    });
    let mut p = strided_params(li.shape(), &[li]);
    p.push(u32_of("dimension size", n));
    p.push(slot);
    let src = format!(
        "{PRELUDE}{}{}{MAIN_1D}    if (i >= P[0]) {{ return; }}
    let o = at(i, 0u);
    if (X[2u * o + 1u] != 0u || X[2u * o] >= P[extras(1u)]) {{ atomicMax(&F[P[extras(1u) + 1u]], 0xffffffffu - i); }}
}}
",
        binding(1, "X", "u32", false),
        binding(2, "F", "atomic<u32>", true),
    );
    ctx.dispatch_with_errors(&src, &p, &[index.buffer()], groups_for(count));
}

/// For class targets `t` (`i64`, through `lt`) of a loss over `c` classes: the targets as
/// `i64` gather indices with `ignore_index` replaced by 0, and a 0/1 mask of the kept ones
/// in `dtype` (`F32`). A kept target outside `0..c` is reported at the next host read,
/// naming `op` (the loss).
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
    let slot = ctx.error_slot(Check {
        op: op.to_string(),
        dim: 1,
        size: c,
        index: t.share(),
        layout: lt.clone(),
        writes: vec![safe.buffer().id, mask.buffer().id],
        launch: 0,
        thread: std::thread::current().id(),
    });
    let mut p = strided_params(lt.shape(), &[lt]);
    let ignore = ignore_index as u64;
    p.extend([u32_of("class count", c), ignore as u32, (ignore >> 32) as u32, slot]);
    let src = format!(
        "{PRELUDE}{}{}{}{}{MAIN_1D}    if (i >= P[0]) {{ return; }}
    let e = extras(1u);
    let o = at(i, 0u);
    let lo = X[2u * o];
    let hi = X[2u * o + 1u];
    let ignored = lo == P[e + 1u] && hi == P[e + 2u];
    var j = 0u;
    if (!ignored) {{
        if (hi == 0u && lo < P[e]) {{ j = lo; }} else {{ atomicMax(&F[P[e + 3u]], 0xffffffffu - i); }}
    }}
    S[2u * i] = j;
    S[2u * i + 1u] = 0u;
    M[i] = select(1.0, 0.0, ignored);
}}
",
        binding(1, "X", "u32", false),
        binding(2, "S", "u32", true),
        binding(3, "M", "f32", true),
        binding(4, "F", "atomic<u32>", true),
    );
    ctx.dispatch_with_errors(&src, &p, &[t.buffer(), safe.buffer(), mask.buffer()], groups_for(n));
    Some((safe, mask))
}
