//! Order kernels (`sort.wgsl`): `argmax`/`argmin` per row, running sums and products,
//! and sorting lines (`sort`, `topk`).

use super::{groups_for, is_compute, prelude, scalar, strided_params, through_f32, u32_of};
use crate::backend::gpu::template::Family;
use crate::backend::gpu::GpuStorage;
use crate::backend::{Scan, SortSpec};
use crate::dtype::DType;
use crate::shape::Layout;

pub(super) static FAMILY: Family = Family::new("sort.wgsl", include_str!("../wgsl/sort.wgsl"));

/// For each row of `n` elements of `rows`, the `i64` index of its largest (`largest`) or
/// smallest element; NaN wins over every number and the first of equal candidates is kept.
pub(crate) fn arg_extreme(x: &GpuStorage, rows: &Layout, n: usize, largest: bool) -> Option<GpuStorage> {
    // Half types on an f32 copy made on the device (exact; `rows` keeps its positions).
    if let Some(r) = through_f32([Some(x)], |[x]| Some([arg_extreme(x?, rows, n, largest)?])) {
        return r.map(|[i]| i);
    }
    if x.dtype() != DType::F32 {
        return None;
    }
    let ctx = x.ctx();
    let count = rows.numel() / n.max(1);
    let out = GpuStorage::uninit(ctx, DType::I64, count);
    if count == 0 {
        return Some(out);
    }
    let mut p = strided_params(rows.shape(), &[rows]);
    p.extend([u32_of("row length", n), u32_of("row count", count)]);
    let largest = if largest { "true" } else { "false" };
    let src = FAMILY.render("arg_extreme", &[("PRELUDE", prelude()), ("LARGEST", largest)]);
    ctx.dispatch(&src, &p, &[x.buffer(), out.buffer()], count as u64);
    Some(out)
}

/// Running sums or products (`cumsum`, `cumprod`) along `n` of `x` through `l` viewed as
/// `[outer, n, inner]`: one thread per line, accumulating in `f64` and rounding each output
/// once, exactly as the CPU kernel. `None` (the host path) without `f64` shaders or for
/// dtypes other than `f32`/`f64`.
pub(crate) fn scan(
    x: &GpuStorage,
    l: &Layout,
    (outer, n, inner): (usize, usize, usize),
    scan: Scan,
) -> Option<GpuStorage> {
    let ctx = x.ctx();
    if !is_compute(x.dtype()) || !ctx.f64 {
        return None;
    }
    let out = GpuStorage::uninit(ctx, x.dtype(), l.numel());
    let lines = outer * inner;
    if lines == 0 || n == 0 {
        return Some(out);
    }
    let mut p = strided_params(l.shape(), &[l]);
    p.extend([u32_of("line length", n), u32_of("line stride", inner), u32_of("line count", lines)]);
    p.extend([u32::from(scan.prod), u32::from(scan.reverse)]);
    let src = FAMILY.render("scan", &[("PRELUDE", prelude()), ("T", scalar(x.dtype()))]);
    ctx.dispatch(&src, &p, &[x.buffer(), out.buffer()], groups_for(lines));
    Some(out)
}

/// The longest line [`sort`] sorts on the device (its workgroup memory holds one line).
const SORT_MAX: usize = 1024;

/// Sorts every line of `f32` `x` through `l`, viewed as `[outer, n, inner]`, along `n` and
/// keeps the first `spec.k`: `(values, i64 positions)`, as the CPU kernel. One workgroup
/// per line runs a bitonic network on `(value, position)` pairs in a total order (value
/// with NaN above every number, then position), so the result is the stable sort's; for
/// unsorted `topk`, a second network orders the `k` kept pairs by position. `None` (the
/// host path) for `f64` and `i64` and lines longer than [`SORT_MAX`]; half types sort an
/// `f32` copy made on the device.
pub(crate) fn sort(
    x: &GpuStorage,
    l: &Layout,
    (outer, n, inner): (usize, usize, usize),
    spec: SortSpec,
) -> Option<(GpuStorage, GpuStorage)> {
    if n > SORT_MAX {
        return None;
    }
    // Half types on an f32 copy made on the device (exact), the values rounded back.
    let wide = |[x]: [Option<&GpuStorage>; 1]| sort(x?, l, (outer, n, inner), spec).map(|(v, i)| [v, i]);
    if let Some(r) = through_f32([Some(x)], wide) {
        return r.map(|[v, i]| (v, i));
    }
    if x.dtype() != DType::F32 {
        return None;
    }
    let ctx = x.ctx();
    let lines = outer * inner;
    let len = lines * spec.k;
    let (values, indices) = (GpuStorage::uninit(ctx, DType::F32, len), GpuStorage::uninit(ctx, DType::I64, len));
    if len == 0 {
        return Some((values, indices));
    }
    let width = n.next_power_of_two().max(2);
    let mut p = strided_params(l.shape(), &[l]);
    p.extend([n, inner, lines, spec.k, width].map(|v| u32_of("sort size", v)));
    p.extend([u32::from(spec.descending), u32::from(!spec.sorted)]);
    let src = FAMILY.render("sort", &[("PRELUDE", prelude()), ("SORT_MAX", &SORT_MAX.to_string())]);
    ctx.dispatch(&src, &p, &[x.buffer(), values.buffer(), indices.buffer()], lines as u64);
    Some((values, indices))
}
