//! Reductions and row kernels (`rows.wgsl`): sums over trailing dims, softmax and
//! log-softmax, one workgroup per output line.

use super::{is_compute, prelude, scalar, strided_params, through_f32, u32_of};
use crate::backend::gpu::template::Family;
use crate::backend::gpu::GpuStorage;
use crate::dtype::DType;
use crate::shape::Layout;

pub(super) static FAMILY: Family = Family::new("rows.wgsl", include_str!("../wgsl/rows.wgsl"));

/// Sums of `x` viewed through `l` (reduced dims last, so each output is a run of `r`
/// consecutive row-major elements of `l`): `n_out` outputs.
///
/// `f16` and `bf16` are read as stored (widened as each element is read) and summed in
/// `f32`; the `f32` sums are then rounded to the half type by the conversion kernel (a
/// workgroup per output cannot write half a word: neighbouring outputs share one).
pub(crate) fn sum_lines(x: &GpuStorage, l: &Layout, n_out: usize, r: usize) -> Option<GpuStorage> {
    let ctx = x.ctx();
    let dtype = x.dtype();
    if !(is_compute(dtype) || dtype.is_half()) || (dtype == DType::F64 && !ctx.f64) {
        return None;
    }
    let sum_dtype = if dtype.is_half() { DType::F32 } else { dtype };
    let out = GpuStorage::uninit(ctx, sum_dtype, n_out);
    if n_out == 0 {
        return Some(GpuStorage::uninit(ctx, dtype, 0));
    }
    let t = scalar(dtype);
    let mut p = strided_params(l.shape(), &[l]);
    p.push(u32_of("line length", r));
    p.push(u32_of("output count", n_out));
    let tree = FAMILY.render("tree", &[("T", t)]);
    let load = super::convert::load(dtype, t);
    let x_ty = super::array_ty(dtype);
    let src = FAMILY.render("sum", &[("PRELUDE", prelude()), ("TREE", &tree), ("T", t), ("X", x_ty), ("LOAD", &load)]);
    ctx.dispatch(&src, &p, &[x.buffer(), out.buffer()], n_out as u64);
    if dtype.is_half() {
        return super::convert::convert(&out, &Layout::contiguous(&[n_out]), dtype);
    }
    Some(out)
}

/// Softmax or log-softmax of `x` through `l` viewed as `[outer, n, inner]`, along `n`.
pub(crate) fn softmax(
    x: &GpuStorage,
    l: &Layout,
    (outer, n, inner): (usize, usize, usize),
    log: bool,
) -> Option<GpuStorage> {
    // Half types on an f32 copy made on the device (the widened buffer keeps `l`'s
    // positions), each result rounded once.
    if let Some(r) = through_f32([Some(x)], |[x]| Some([softmax(x?, l, (outer, n, inner), log)?])) {
        return r.map(|[y]| y);
    }
    let ctx = x.ctx();
    if x.dtype() != DType::F32 {
        return None; // exp and log exist in f32 only
    }
    let total = outer * n * inner;
    let out = GpuStorage::uninit(ctx, DType::F32, total);
    let lines = outer * inner;
    if total == 0 {
        return Some(out);
    }
    let mut p = strided_params(l.shape(), &[l]);
    p.extend([u32_of("softmax length", n), u32_of("inner size", inner), u32_of("line count", lines)]);
    let tree = FAMILY.render("tree", &[("T", "f32")]);
    let src = FAMILY
        .render("softmax", &[("PRELUDE", prelude()), ("TREE", &tree), ("LOG", if log { "true" } else { "false" })]);
    ctx.dispatch(&src, &p, &[x.buffer(), out.buffer()], lines as u64);
    Some(out)
}
