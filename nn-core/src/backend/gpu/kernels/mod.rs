//! The WGSL kernels and the host code that sizes and dispatches them: one module per kernel
//! family, each rendering the kernels of its `.wgsl` file under `gpu/wgsl/`.
//!
//! Sources are rendered per element type and op by the template step
//! ([`super::template`]) and compiled once per distinct source (the pipeline cache in
//! [`super::context`]). Every kernel reads its sizes and strides from binding 0, an
//! `array<u32>` `P`: for strided kernels `P = [n, rank, shape..., (strides..., offset) per
//! operand, extras...]`, so the op's scalars never change the source and one pipeline
//! serves every shape. `f64` kernels need no `enable` directive: wgpu's WGSL front end
//! accepts `f64` once the device has `SHADER_F64`.

mod conv;
mod convert;
mod elementwise;
mod index;
mod optim;
mod pool;
mod reduce;
mod scatter_add;
mod sort;

pub(crate) use conv::{conv2d, conv2d_backward};
pub(crate) use convert::{convert, fill, scatter, upload};
pub(crate) use elementwise::{binary, binary_grad, compare, logical_not, select, unary, unary_grad};
pub(crate) use index::{check_range, checked_indices, class_targets, gather, index_select};
pub(crate) use optim::optimizer_step;
pub(crate) use pool::{avg_pool2d, avg_pool2d_backward, max_pool2d, max_pool2d_backward};
pub(crate) use reduce::{softmax, sum_lines};
pub(crate) use scatter_add::{index_add, scatter_add};
pub(crate) use sort::{arg_extreme, scan, sort};

use super::context::WORKGROUP;
use super::template::Family;
use super::GpuStorage;
use crate::dtype::DType;
use crate::shape::Layout;

/// Binding 0 and the index helpers (`flat`, `at`, `extras`, `isnan_`) every kernel but the
/// GEMM starts with: the `{{PRELUDE}}` of the other files.
static PRELUDE: Family = Family::new("prelude.wgsl", include_str!("../wgsl/prelude.wgsl"));

/// The text of `{{PRELUDE}}`.
fn prelude() -> &'static str {
    PRELUDE.kernel("prelude")
}

/// Every `.wgsl` file, for the template step's tests.
#[cfg(test)]
pub(super) const FAMILIES: [&Family; 10] = [
    &PRELUDE,
    &elementwise::FAMILY,
    &convert::FAMILY,
    &reduce::FAMILY,
    &index::FAMILY,
    &scatter_add::FAMILY,
    &sort::FAMILY,
    &conv::FAMILY,
    &pool::FAMILY,
    &optim::FAMILY,
];

/// The WGSL type a kernel computes in for a float dtype.
pub(crate) fn scalar(dtype: DType) -> &'static str {
    match dtype {
        DType::F64 => "f64",
        _ => "f32",
    }
}

/// A kernel with `f32`/`f64` versions only, run for half-type operands on `f32` copies
/// made on the device, its outputs rounded back to the operands' half dtype on the device
/// (each value rounded once, as the CPU's host path computes them); `None` when no
/// operand is a half type (the caller runs the kernel as it is). No host round trip.
pub(crate) fn through_f32<const N: usize, const M: usize>(
    operands: [Option<&GpuStorage>; N],
    kernel: impl FnOnce([Option<&GpuStorage>; N]) -> Option<[GpuStorage; M]>,
) -> Option<Option<[GpuStorage; M]>> {
    let half = operands.iter().flatten().map(|g| g.dtype()).find(|d| d.is_half())?;
    let widen = |g: &GpuStorage| {
        let l = Layout::contiguous(&[g.len()]);
        convert(g, &l, DType::F32).expect("a half type converts to f32 on every adapter")
    };
    let wide: [Option<GpuStorage>; N] = operands.map(|o| o.filter(|g| g.dtype().is_half()).map(widen));
    let args: [Option<&GpuStorage>; N] = std::array::from_fn(|i| wide[i].as_ref().or(operands[i]));
    // `Some(None)` when the f32 kernel declines too (the caller takes the host path).
    Some(kernel(args).map(|outs| {
        outs.map(|y| {
            if y.dtype() != DType::F32 {
                return y; // indices (a max pooling's positions)
            }
            let l = Layout::contiguous(&[y.len()]);
            convert(&y, &l, half).expect("f32 converts to a half type on every adapter")
        })
    }))
}

/// Whether the backend has elementwise kernels computing in `dtype`.
pub(crate) fn is_compute(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F64)
}

/// `u32` for a size, or a panic naming the limit: kernels index with 32 bits.
fn u32_of(what: &str, v: usize) -> u32 {
    u32::try_from(v).unwrap_or_else(|_| panic!("gpu: {what} {v} exceeds the 32-bit indexing of the GPU kernels"))
}

/// `[n, rank, shape..., (strides..., offset) per layout]` for layouts of one `shape`.
pub(crate) fn strided_params(shape: &[usize], layouts: &[&Layout]) -> Vec<u32> {
    let n: usize = shape.iter().product();
    let mut p = vec![u32_of("element count", n), u32_of("rank", shape.len())];
    p.extend(shape.iter().map(|&d| u32_of("dimension", d)));
    for l in layouts {
        debug_assert_eq!(l.shape(), shape, "layouts of one shape");
        p.extend(l.strides().iter().map(|&s| u32_of("stride", s)));
        p.push(u32_of("offset", l.offset()));
    }
    p
}

fn groups_for(n: usize) -> u64 {
    (n as u64).div_ceil(u64::from(WORKGROUP))
}

/// Binding `b` as an array of `ty`, read-only or read-write (for the kernels whose
/// bindings vary: the elementwise inputs, the optimizer state, the GEMM's input).
fn binding(b: u32, name: &str, ty: &str, write: bool) -> String {
    let access = if write { "read_write" } else { "read" };
    format!("@group(0) @binding({b}) var<storage, {access}> {name}: array<{ty}>;\n")
}

/// The array type of a binding holding `dtype`.
fn array_ty(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "f32",
        DType::F64 => "f64",
        _ => "u32",
    }
}

/// `values` as the bytes of a `K` binding of `dtype`'s compute type (`f64` or `f32`).
fn scalar_bytes(dtype: DType, values: &[f64]) -> Vec<u8> {
    if dtype == DType::F64 {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    } else {
        values.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect()
    }
}
