//! The backend interface methods' GPU side: each function returns `Some` when every
//! operand is a GPU buffer and a native kernel covers their dtypes, and `None` otherwise
//! (the method then runs the CPU kernel, through the host path for GPU operands).

use std::cmp::Ordering;

use super::{gemm, kernels, GpuStorage};
use crate::backend::{BinaryOp, ConvGeometry, IndexArg, Storage, UnaryOp};
use crate::dtype::DType;
use crate::shape::Layout;

fn gpu(s: &Storage) -> Option<&GpuStorage> {
    match s {
        Storage::Gpu(g) => Some(g),
        _ => None,
    }
}

pub(crate) fn unary<O: UnaryOp>(x: &Storage, l: &Layout, op: &O) -> Option<GpuStorage> {
    let (w, k) = op.wgsl()?;
    kernels::unary(gpu(x)?, l, &w, k)
}

pub(crate) fn unary_grad<O: UnaryOp>(
    (g, lg): (&Storage, &Layout),
    (x, lx): (&Storage, &Layout),
    (y, ly): (&Storage, &Layout),
    op: &O,
) -> Option<GpuStorage> {
    let (w, k) = op.wgsl()?;
    kernels::unary_grad((gpu(g)?, lg), (gpu(x)?, lx), (gpu(y)?, ly), &w, k)
}

pub(crate) fn binary<O: BinaryOp>((a, la): (&Storage, &Layout), (b, lb): (&Storage, &Layout)) -> Option<GpuStorage> {
    kernels::binary((gpu(a)?, la), (gpu(b)?, lb), &O::WGSL?)
}

pub(crate) fn binary_grad<O: BinaryOp>(
    (g, lg): (&Storage, &Layout),
    (a, la): (&Storage, &Layout),
    (b, lb): (&Storage, &Layout),
    lhs: bool,
) -> Option<GpuStorage> {
    kernels::binary_grad((gpu(g)?, lg), (gpu(a)?, la), (gpu(b)?, lb), &O::WGSL?, lhs)
}

pub(crate) fn compare(
    (a, la): (&Storage, &Layout),
    (b, lb): (&Storage, &Layout),
    test: fn(Ordering) -> bool,
) -> Option<GpuStorage> {
    let accept = [Ordering::Less, Ordering::Equal, Ordering::Greater].map(test);
    kernels::compare((gpu(a)?, la), (gpu(b)?, lb), accept)
}

pub(crate) fn select(
    (c, lc): (&Storage, &Layout),
    (a, la): (&Storage, &Layout),
    (b, lb): (&Storage, &Layout),
) -> Option<GpuStorage> {
    kernels::select((gpu(c)?, lc), (gpu(a)?, la), (gpu(b)?, lb))
}

pub(crate) fn logical_not(x: &Storage, l: &Layout) -> Option<GpuStorage> {
    Some(kernels::logical_not(gpu(x)?, l))
}

pub(crate) fn convert(x: &Storage, l: &Layout, dtype: DType) -> Option<GpuStorage> {
    kernels::convert(gpu(x)?, l, dtype)
}

/// Element offsets of each batch entry's matrix (stride 0 along broadcast batch dims).
fn batch_offsets(l: &Layout, batch: &[usize]) -> Vec<usize> {
    let r = l.rank() - 2;
    let lead = batch.len() - r;
    let count: usize = batch.iter().product();
    (0..count)
        .map(|mut flat| {
            let mut off = l.offset();
            for d in (0..batch.len()).rev() {
                let i = flat % batch[d];
                flat /= batch[d];
                if d >= lead && l.shape()[d - lead] != 1 {
                    off += i * l.strides()[d - lead];
                }
            }
            off
        })
        .collect()
}

fn last_two(l: &Layout) -> [usize; 2] {
    let r = l.rank();
    [l.strides()[r - 2], l.strides()[r - 1]]
}

pub(crate) fn matmul(
    (a, la): (&Storage, &Layout),
    (b, lb): (&Storage, &Layout),
    batch: &[usize],
    mkn: (usize, usize, usize),
) -> Option<GpuStorage> {
    let (ga, gb) = (gpu(a)?, gpu(b)?);
    let offsets: Vec<(usize, usize)> = batch_offsets(la, batch).into_iter().zip(batch_offsets(lb, batch)).collect();
    gemm::matmul(ga, gb, mkn, (last_two(la), last_two(lb)), &offsets, None, (0.0, 1.0))
}

pub(crate) fn addmm(
    (input, li): (&Storage, &Layout),
    (a, la): (&Storage, &Layout),
    (b, lb): (&Storage, &Layout),
    (beta, alpha): (f64, f64),
) -> Option<GpuStorage> {
    let (gi, ga, gb) = (gpu(input)?, gpu(a)?, gpu(b)?);
    let mkn = (la.shape()[0], la.shape()[1], lb.shape()[1]);
    let offsets = [(la.offset(), lb.offset())];
    gemm::matmul(ga, gb, mkn, (last_two(la), last_two(lb)), &offsets, Some((gi, li)), (beta, alpha))
}

/// Sums over the dims where `mask` is true: the layout is permuted so that the reduced
/// dims come last, each output then sums a run of consecutive row-major elements.
pub(crate) fn sum(x: &Storage, l: &Layout, mask: &[bool]) -> Option<GpuStorage> {
    let g = gpu(x)?;
    let kept: Vec<usize> = (0..l.rank()).filter(|&d| !mask[d]).collect();
    let reduced: Vec<usize> = (0..l.rank()).filter(|&d| mask[d]).collect();
    let r: usize = reduced.iter().map(|&d| l.shape()[d]).product();
    let n_out: usize = kept.iter().map(|&d| l.shape()[d]).product();
    let perm: Vec<usize> = kept.into_iter().chain(reduced).collect();
    kernels::sum_lines(g, &l.permute(&perm), n_out, r)
}

pub(crate) fn softmax(x: &Storage, l: &Layout, dims: (usize, usize, usize), log: bool) -> Option<GpuStorage> {
    kernels::softmax(gpu(x)?, l, dims, log)
}

/// The validated indices of `index` for a dim of `size`.
#[track_caller]
fn indices(index: &IndexArg<'_>, size: usize) -> Option<super::context::Buffer> {
    Some(kernels::checked_indices(gpu(index.index)?, index.layout, size, index.op, index.dim))
}

#[track_caller]
pub(crate) fn index_select(x: &Storage, l: &Layout, index: &IndexArg<'_>) -> Option<GpuStorage> {
    let g = gpu(x)?;
    let idx = indices(index, l.shape()[index.dim])?;
    kernels::index_select(g, l, &idx, index.layout.numel(), index.dim)
}

#[track_caller]
pub(crate) fn gather(x: &Storage, l: &Layout, index: &IndexArg<'_>) -> Option<GpuStorage> {
    let g = gpu(x)?;
    let idx = indices(index, l.shape().get(index.dim).copied().unwrap_or(1))?;
    kernels::gather(g, l, &idx, index.layout.shape(), index.dim)
}

/// The source and validated indices of `index_add`/`scatter_add` (f32 atomics; half types
/// on f32 copies made on the device).
#[track_caller]
fn accumulate<'a>(
    x: &'a Storage,
    src: &'a Storage,
    index: &IndexArg<'_>,
    size: usize,
) -> Option<(&'a GpuStorage, &'a GpuStorage, super::context::Buffer)> {
    let (g, s) = (gpu(x)?, gpu(src)?);
    (g.dtype() == DType::F32 || g.dtype().is_half()).then_some(())?;
    Some((g, s, indices(index, size)?))
}

#[track_caller]
pub(crate) fn index_add(
    x: &Storage,
    l: &Layout,
    (src, ls): (&Storage, &Layout),
    index: &IndexArg<'_>,
) -> Option<GpuStorage> {
    let (g, s, idx) = accumulate(x, src, index, l.shape()[index.dim])?;
    kernels::index_add(g, l, (s, ls), &idx, index.dim)
}

#[track_caller]
pub(crate) fn scatter_add(
    x: &Storage,
    l: &Layout,
    (src, ls): (&Storage, &Layout),
    index: &IndexArg<'_>,
) -> Option<GpuStorage> {
    let (g, s, idx) = accumulate(x, src, index, l.shape().get(index.dim).copied().unwrap_or(1))?;
    kernels::scatter_add(g, l, (s, ls), &idx, index.layout.shape(), index.dim)
}

pub(crate) fn arg_extreme(x: &Storage, rows: &Layout, n: usize, largest: bool) -> Option<GpuStorage> {
    kernels::arg_extreme(gpu(x)?, rows, n, largest)
}

pub(crate) fn scan(
    x: &Storage,
    l: &Layout,
    dims: (usize, usize, usize),
    scan: crate::backend::Scan,
) -> Option<GpuStorage> {
    kernels::scan(gpu(x)?, l, dims, scan)
}

pub(crate) fn sort(
    x: &Storage,
    l: &Layout,
    dims: (usize, usize, usize),
    spec: crate::backend::SortSpec,
) -> Option<(GpuStorage, GpuStorage)> {
    kernels::sort(gpu(x)?, l, dims, spec)
}

pub(crate) fn conv2d(x: &Storage, w: &Storage, bias: Option<&Storage>, geo: &ConvGeometry) -> Option<GpuStorage> {
    let bias = match bias {
        Some(b) => Some(gpu(b)?),
        None => None,
    };
    kernels::conv2d(gpu(x)?, gpu(w)?, bias, geo)
}

pub(crate) fn conv2d_backward(
    dy: &Storage,
    x: &Storage,
    w: &Storage,
    geo: &ConvGeometry,
    needs: (bool, bool),
) -> Option<(GpuStorage, GpuStorage)> {
    kernels::conv2d_backward(gpu(dy)?, gpu(x)?, gpu(w)?, geo, needs)
}

pub(crate) fn avg_pool2d(x: &Storage, pool: &crate::backend::AvgPool) -> Option<GpuStorage> {
    kernels::avg_pool2d(gpu(x)?, pool)
}

pub(crate) fn avg_pool2d_backward(g: &Storage, pool: &crate::backend::AvgPool) -> Option<GpuStorage> {
    kernels::avg_pool2d_backward(gpu(g)?, pool)
}
