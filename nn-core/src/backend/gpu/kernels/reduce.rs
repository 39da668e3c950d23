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
/// `f16` and `bf16` are read as stored (widened as each element is read) and summed as
/// `f32` values; the `f32` sums are then rounded to the half type by the conversion kernel
/// (a workgroup per output cannot write half a word: neighbouring outputs share one).
///
/// Each of a workgroup's 256 threads sums `r / 256` terms one after the other, so a
/// plain `f32` sum's error grows with `r` (2^24 copies of 0.1 averaged 0.10006, where the
/// CPU, summing in `f64`, gives 0.1): the threads sum in `f64` where the adapter has it,
/// else in `f32` with compensation (`rows.wgsl`'s `line_*` snippets).
pub(crate) fn sum_lines(x: &GpuStorage, l: &Layout, n_out: usize, r: usize) -> Option<GpuStorage> {
    sum_lines_in(x, l, n_out, r, x.ctx().f64)
}

/// [`sum_lines`] summing in `f64` (`wide`, on an adapter with `f64` only) or, for `f32`
/// and half types, in compensated `f32`; `f64` tensors always sum in `f64`.
fn sum_lines_in(x: &GpuStorage, l: &Layout, n_out: usize, r: usize, wide: bool) -> Option<GpuStorage> {
    let ctx = x.ctx();
    let dtype = x.dtype();
    if !(is_compute(dtype) || dtype.is_half()) || (dtype == DType::F64 && !ctx.f64) {
        return None;
    }
    let wide = wide || dtype == DType::F64;
    assert!(!wide || ctx.f64, "gpu:{}: an f64 sum on an adapter without f64", ctx.ordinal);
    let sum_dtype = if dtype.is_half() { DType::F32 } else { dtype };
    let out = GpuStorage::uninit(ctx, sum_dtype, n_out);
    if n_out == 0 {
        return Some(GpuStorage::uninit(ctx, dtype, 0));
    }
    let t = scalar(dtype);
    let mut p = strided_params(l.shape(), &[l]);
    p.push(u32_of("line length", r));
    p.push(u32_of("output count", n_out));
    let (acc, line) = if wide { ("f64", "line_f64") } else { ("f32", "line_compensated") };
    let tree = FAMILY.render("tree", &[("T", acc)]);
    let load = super::convert::load(dtype, acc);
    let x_ty = super::array_ty(dtype);
    let values = [
        ("PRELUDE", prelude()),
        ("TREE", &tree),
        ("T", t),
        ("ACC", acc),
        ("X", x_ty),
        ("LOAD", &load),
        ("LINE", FAMILY.kernel(line)),
    ];
    let src = FAMILY.render("sum", &values);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::host::CpuStorage;

    /// A long row (2^22 copies of 0.1, 16384 terms per thread) sums within 1e-6 of its
    /// exact value both ways: in f64 (where the adapter has it) and in compensated f32 (the
    /// path of adapters without f64, which `tests/gpu.rs` cannot choose).
    #[test]
    fn long_rows_sum_accurately_in_f64_and_in_compensated_f32() {
        let Ok(ctx) = crate::backend::gpu::context::get(0) else { return }; // tests/gpu.rs requires gpu:0
        let n = 1 << 22;
        let l = Layout::contiguous(&[n]);
        let x = GpuStorage::from_cpu(ctx, &CpuStorage::F32(vec![0.1; n]), &l);
        let exact = f64::from(0.1f32) * n as f64;
        for wide in [false, true] {
            if wide && !ctx.f64 {
                continue;
            }
            let sum = sum_lines_in(&x, &l, 1, n, wide).expect("f32 sums run on the GPU");
            let CpuStorage::F32(ref v) = sum.to_cpu() else { panic!("an f32 sum") };
            let err = (f64::from(v[0]) - exact).abs() / exact;
            assert!(err <= 1e-6, "f64 sums {wide}: {} for {exact} (relative error {err:e})", v[0]);
        }
    }
}
