//! Accumulating scatters in f32 (`scatter_add.wgsl`): `index_add` and `scatter_add`, with
//! atomic compare-exchange additions.

use super::convert::convert;
use super::{groups_for, prelude, strided_params, through_f32, u32_of};
use crate::backend::gpu::context::Buffer;
use crate::backend::gpu::template::Family;
use crate::backend::gpu::GpuStorage;
use crate::dtype::DType;
use crate::shape::Layout;

pub(super) static FAMILY: Family = Family::new("scatter_add.wgsl", include_str!("../wgsl/scatter_add.wgsl"));

/// `out = x + scatter(src)`: `out` starts as a contiguous copy of `x` through `l`, then the
/// `kernel` adds every element of `src` (through `ls`, of `shape`) at its destination,
/// computed from the element's position, the `extras` and the indices `idx`.
fn scatter_add_into(
    x: &GpuStorage,
    l: &Layout,
    (src, ls): (&GpuStorage, &Layout),
    shape: &[usize],
    idx: &Buffer,
    extras: &[u32],
    kernel: &str,
) -> Option<GpuStorage> {
    if x.dtype() != DType::F32 {
        return None; // float atomics are built on 32-bit words
    }
    let out = convert(x, l, DType::F32)?;
    let total: usize = shape.iter().product();
    if total == 0 {
        return Some(out);
    }
    let mut p = strided_params(shape, &[ls]);
    p.extend_from_slice(extras);
    let code = FAMILY.render(kernel, &[("PRELUDE", prelude()), ("ADD_AT", FAMILY.kernel("add_at"))]);
    out.ctx().dispatch(&code, &p, &[src.buffer(), idx, out.buffer()], groups_for(total));
    Some(out)
}

/// `index_add` along `d`: a copy of `x` with the slices of `src` added at `idx` (`k`).
pub(crate) fn index_add(
    x: &GpuStorage,
    l: &Layout,
    (src, ls): (&GpuStorage, &Layout),
    idx: &Buffer,
    d: usize,
) -> Option<GpuStorage> {
    // Half types: f32 sums on copies widened on the device, rounded once.
    if let Some(r) = through_f32([Some(x), Some(src)], |[x, s]| Some([index_add(x?, l, (s?, ls), idx, d)?])) {
        return r.map(|[y]| y);
    }
    let shape = l.shape();
    let (n, inner): (usize, usize) = (shape[d], shape[d + 1..].iter().product());
    let k = ls.shape()[d];
    let extras = [u32_of("index count", k), u32_of("size", n), u32_of("inner size", inner)];
    scatter_add_into(x, l, (src, ls), ls.shape(), idx, &extras, "index_add")
}

/// `scatter_add` along `d`: a copy of `x` with `src[p]` added at `p` with dim `d` replaced
/// by `idx[p]`, over the index's shape.
pub(crate) fn scatter_add(
    x: &GpuStorage,
    l: &Layout,
    (src, ls): (&GpuStorage, &Layout),
    idx: &Buffer,
    li_shape: &[usize],
    d: usize,
) -> Option<GpuStorage> {
    let wide = |[x, s]: [Option<&GpuStorage>; 2]| Some([scatter_add(x?, l, (s?, ls), idx, li_shape, d)?]);
    if let Some(r) = through_f32([Some(x), Some(src)], wide) {
        return r.map(|[y]| y);
    }
    // The destination offset of `p`: through the output's contiguous strides with dim `d`
    // zeroed, plus `idx[p]` times that dim's stride.
    let mut ostrides: Vec<usize> = crate::shape::contiguous_strides(l.shape()).to_vec();
    let step = ostrides.get(d).copied().unwrap_or(0);
    if !ostrides.is_empty() {
        ostrides[d] = 0;
    }
    let src_layout = Layout::new(li_shape.into(), ls.strides().into(), ls.offset());
    // Extras: the destination strides (rank of them), then the step.
    let mut extras: Vec<u32> = ostrides.iter().map(|&s| u32_of("stride", s)).collect();
    extras.push(u32_of("stride", step));
    scatter_add_into(x, l, (src, &src_layout), li_shape, idx, &extras, "scatter_add")
}
