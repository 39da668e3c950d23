//! Pooling (`pool.wgsl`): max and average pooling over contiguous planes and their input
//! gradients.

use super::{groups_for, prelude, through_f32, u32_of};
use crate::backend::gpu::template::Family;
use crate::backend::gpu::GpuStorage;
use crate::backend::{AvgPool, AvgWindows, MaxPool, PoolPlanes};
use crate::dtype::DType;

pub(super) static FAMILY: Family = Family::new("pool.wgsl", include_str!("../wgsl/pool.wgsl"));

/// Pooling parameters: `[planes, h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw, mode]`
/// (`mode`: 0 max, 1 average with padding counted, 2 average without, 3 adaptive).
fn pool_params(pl: &PoolPlanes, k: [usize; 8], mode: u32) -> Vec<u32> {
    let mut p: Vec<u32> =
        [pl.planes, pl.h, pl.w, pl.ho, pl.wo].iter().chain(&k).map(|&v| u32_of("pooling size", v)).collect();
    p.push(mode);
    p
}

fn max_params(pool: &MaxPool) -> Vec<u32> {
    let o = &pool.options;
    pool_params(
        &pool.planes,
        [o.kernel.0, o.kernel.1, o.stride.0, o.stride.1, o.padding.0, o.padding.1, o.dilation.0, o.dilation.1],
        0,
    )
}

fn avg_params(pool: &AvgPool) -> Vec<u32> {
    match pool.windows {
        AvgWindows::Fixed { kernel: k, stride: s, padding: p, count_include_pad } => {
            pool_params(&pool.planes, [k.0, k.1, s.0, s.1, p.0, p.1, 1, 1], if count_include_pad { 1 } else { 2 })
        }
        AvgWindows::Adaptive => pool_params(&pool.planes, [1, 1, 1, 1, 0, 0, 1, 1], 3),
    }
}

/// The kernel `name` of `pool.wgsl`.
fn source(name: &str) -> String {
    FAMILY.render(name, &[("PRELUDE", prelude()), ("POOL", FAMILY.kernel("pool"))])
}

/// Max pooling of contiguous planes: the values and the `i64` in-plane positions of the
/// maxima (PyTorch's indices). NaN wins; ties keep the earlier tap.
pub(crate) fn max_pool2d(x: &GpuStorage, pool: &MaxPool) -> Option<(GpuStorage, GpuStorage)> {
    let wide = |[x]: [Option<&GpuStorage>; 1]| max_pool2d(x?, pool).map(|(y, i)| [y, i]);
    if let Some(r) = through_f32([Some(x)], wide) {
        return r.map(|[y, i]| (y, i));
    }
    if x.dtype() != DType::F32 {
        return None;
    }
    let ctx = x.ctx();
    let pl = &pool.planes;
    let total = pl.planes * pl.ho * pl.wo;
    let out = GpuStorage::uninit(ctx, DType::F32, total);
    let idx = GpuStorage::uninit(ctx, DType::I64, total);
    let bufs = [x.buffer(), out.buffer(), idx.buffer()];
    ctx.dispatch(&source("max_pool"), &max_params(pool), &bufs, groups_for(total));
    Some((out, idx))
}

/// The input gradient of a max pooling: each input pixel sums the output gradients of the
/// windows whose maximum it was (a gather: one fixed order, no atomics).
pub(crate) fn max_pool2d_backward(g: &GpuStorage, idx: &GpuStorage, pool: &MaxPool) -> Option<GpuStorage> {
    if let Some(r) = through_f32([Some(g)], |[g]| Some([max_pool2d_backward(g?, idx, pool)?])) {
        return r.map(|[dx]| dx);
    }
    if g.dtype() != DType::F32 {
        return None;
    }
    let ctx = g.ctx();
    let pl = &pool.planes;
    let total = pl.planes * pl.h * pl.w;
    let dx = GpuStorage::uninit(ctx, DType::F32, total);
    let bufs = [g.buffer(), idx.buffer(), dx.buffer()];
    ctx.dispatch(&source("max_pool_backward"), &max_params(pool), &bufs, groups_for(total));
    Some(dx)
}

/// Average pooling of contiguous planes.
pub(crate) fn avg_pool2d(x: &GpuStorage, pool: &AvgPool) -> Option<GpuStorage> {
    if let Some(r) = through_f32([Some(x)], |[x]| Some([avg_pool2d(x?, pool)?])) {
        return r.map(|[y]| y);
    }
    if x.dtype() != DType::F32 {
        return None;
    }
    let ctx = x.ctx();
    let pl = &pool.planes;
    let total = pl.planes * pl.ho * pl.wo;
    let out = GpuStorage::uninit(ctx, DType::F32, total);
    ctx.dispatch(&source("avg_pool"), &avg_params(pool), &[x.buffer(), out.buffer()], groups_for(total));
    Some(out)
}

/// The input gradient of an average pooling: each input pixel gathers `g / divisor` of
/// every window that holds it.
pub(crate) fn avg_pool2d_backward(g: &GpuStorage, pool: &AvgPool) -> Option<GpuStorage> {
    if let Some(r) = through_f32([Some(g)], |[g]| Some([avg_pool2d_backward(g?, pool)?])) {
        return r.map(|[dx]| dx);
    }
    if g.dtype() != DType::F32 {
        return None;
    }
    let ctx = g.ctx();
    let pl = &pool.planes;
    let total = pl.planes * pl.h * pl.w;
    let dx = GpuStorage::uninit(ctx, DType::F32, total);
    ctx.dispatch(&source("avg_pool_backward"), &avg_params(pool), &[g.buffer(), dx.buffer()], groups_for(total));
    Some(dx)
}
