//! Convolutions (`conv.wgsl`): im2col and col2im around the GEMM.

use super::elementwise::binary;
use super::reduce::sum_lines;
use super::{groups_for, is_compute, prelude, scalar, through_f32, u32_of};
use crate::backend::gpu::gemm::matmul;
use crate::backend::gpu::template::Family;
use crate::backend::gpu::GpuStorage;
use crate::backend::{ConvGeometry, Wgsl};
use crate::shape::Layout;

pub(super) static FAMILY: Family = Family::new("conv.wgsl", include_str!("../wgsl/conv.wgsl"));

/// The convolution geometry as kernel parameters: `[n, c, h, w, o, kh, kw, ho, wo, sh, sw,
/// ph, pw, dh, dw, groups]`.
fn conv_params(g: &ConvGeometry) -> Vec<u32> {
    let o = &g.opt;
    [
        g.n,
        g.c,
        g.h,
        g.w,
        g.o,
        g.kh,
        g.kw,
        g.ho,
        g.wo,
        o.stride.0,
        o.stride.1,
        o.padding.0,
        o.padding.1,
        o.dilation.0,
        o.dilation.1,
        o.groups,
    ]
    .iter()
    .map(|&v| u32_of("convolution size", v))
    .collect()
}

/// The kernel `name` of `conv.wgsl` for elements of type `t`.
fn source(name: &str, t: &str) -> String {
    FAMILY.render(name, &[("PRELUDE", prelude()), ("GEO", FAMILY.kernel("geo")), ("T", t)])
}

/// The column matrices of a convolution input: `[n * groups, c/groups * kh * kw, ho * wo]`,
/// zero where a tap falls in the padding.
fn im2col(x: &GpuStorage, g: &ConvGeometry) -> GpuStorage {
    let ctx = x.ctx();
    let total = g.n * g.opt.groups * g.col_rows() * g.out_pixels();
    let cols = GpuStorage::uninit(ctx, x.dtype(), total);
    let src = source("im2col", scalar(x.dtype()));
    ctx.dispatch(&src, &conv_params(g), &[x.buffer(), cols.buffer()], groups_for(total));
    cols
}

/// A convolution: im2col, then one GEMM per (sample, group) whose `[og, ho * wo]` results
/// land exactly where `[n, o, ho, wo]` wants them; the bias is added after.
pub(crate) fn conv2d(
    x: &GpuStorage,
    w: &GpuStorage,
    bias: Option<&GpuStorage>,
    g: &ConvGeometry,
) -> Option<GpuStorage> {
    if let Some(y) = through_f32([Some(x), Some(w), bias], |[x, w, b]| Some([conv2d(x?, w?, b, g)?])) {
        return y.map(|[y]| y);
    }
    if !is_compute(x.dtype()) {
        return None;
    }
    let (groups, og, rows, px) = (g.opt.groups, g.out_channels_per_group(), g.col_rows(), g.out_pixels());
    let cols = im2col(x, g);
    let offsets: Vec<(usize, usize)> = (0..g.n * groups).map(|b| ((b % groups) * og * rows, b * rows * px)).collect();
    let out = matmul(w, &cols, (og, rows, px), ([rows, 1], [px, 1]), &offsets, None, (0.0, 1.0))?;
    let Some(bias) = bias else { return Some(out) };
    let shape = [g.n, g.o, g.ho, g.wo];
    let lo = Layout::contiguous(&shape);
    let lb = Layout::new(shape.as_slice().into(), [0, 1, 0, 0].as_slice().into(), 0);
    let add = Wgsl::binary("a + b", "1.0", "1.0", false);
    binary((&out, &lo), (bias, &lb), &add)
}

/// The input and weight gradients of [`conv2d`] (each only when asked for; an empty buffer
/// otherwise): `dW` sums per-sample GEMMs `dY_g @ cols_g^T`, `dX` is a GEMM `W_g^T @ dY_g`
/// folded back by col2im (each input pixel gathers the taps that read it: no atomics, one
/// fixed order).
pub(crate) fn conv2d_backward(
    dy: &GpuStorage,
    x: &GpuStorage,
    w: &GpuStorage,
    g: &ConvGeometry,
    (need_dx, need_dw): (bool, bool),
) -> Option<(GpuStorage, GpuStorage)> {
    let wide = |[dy, x, w]: [Option<&GpuStorage>; 3]| {
        let (dx, dw) = conv2d_backward(dy?, x?, w?, g, (need_dx, need_dw))?;
        Some([dx, dw])
    };
    if let Some(r) = through_f32([Some(dy), Some(x), Some(w)], wide) {
        return r.map(|[dx, dw]| (dx, dw));
    }
    if !is_compute(x.dtype()) {
        return None;
    }
    let ctx = x.ctx();
    let dtype = x.dtype();
    let (groups, og, rows, px) = (g.opt.groups, g.out_channels_per_group(), g.col_rows(), g.out_pixels());
    let batch = g.n * groups;
    let dw = if need_dw {
        let cols = im2col(x, g);
        // Per (sample, group): dY [og, px] @ cols^T [px, rows] -> [n, groups, og, rows].
        let offsets: Vec<(usize, usize)> = (0..batch).map(|b| (b * og * px, b * rows * px)).collect();
        let per = matmul(dy, &cols, (og, px, rows), ([px, 1], [1, px]), &offsets, None, (0.0, 1.0))?;
        let l = Layout::contiguous(&[g.n, groups * og * rows]).permute(&[1, 0]);
        sum_lines(&per, &l, groups * og * rows, g.n)?
    } else {
        GpuStorage::uninit(ctx, dtype, 0)
    };
    let dx = if need_dx {
        // Per (sample, group): W_g^T [rows, og] @ dY [og, px] -> dcols [n * groups, rows, px].
        let offsets: Vec<(usize, usize)> = (0..batch).map(|b| ((b % groups) * og * rows, b * og * px)).collect();
        let dcols = matmul(w, dy, (rows, og, px), ([1, rows], [px, 1]), &offsets, None, (0.0, 1.0))?;
        let total = g.n * g.c * g.h * g.w;
        let dx = GpuStorage::uninit(ctx, dtype, total);
        let src = source("col2im", scalar(dtype));
        ctx.dispatch(&src, &conv_params(g), &[dcols.buffer(), dx.buffer()], groups_for(total));
        dx
    } else {
        GpuStorage::uninit(ctx, dtype, 0)
    };
    Some((dx, dw))
}
