//! Conversions and copies (`convert.wgsl`): dtype conversions and layout copies, fills,
//! scatters into a layout's positions, and uploads of host buffers.

use super::{array_ty, groups_for, prelude, scalar, strided_params, u32_of};
use crate::backend::gpu::context::{Buffer, Ctx};
use crate::backend::gpu::template::Family;
use crate::backend::gpu::{byte_len, GpuStorage};
use crate::backend::host::CpuStorage;
use crate::dtype::DType;
use crate::shape::Layout;

pub(super) static FAMILY: Family = Family::new("convert.wgsl", include_str!("../wgsl/convert.wgsl"));

/// Fills the first `n_words` words of `buf` with `pattern[0], pattern[1], pattern[0], ...`.
pub(crate) fn fill(ctx: &'static Ctx, buf: &Buffer, n_words: u64, pattern: [u32; 2]) {
    let src = FAMILY.render("fill", &[("PRELUDE", prelude())]);
    let n = u32_of("element count", n_words as usize);
    ctx.dispatch(&src, &[n, pattern[0], pattern[1]], &[buf], groups_for(n_words as usize));
}

/// Uploads a host buffer made without reading any device value (dropout masks).
pub(crate) fn upload(ctx: &'static Ctx, c: &CpuStorage) -> GpuStorage {
    GpuStorage::from_cpu(ctx, c, &Layout::contiguous(&[c.len()]))
}

/// The `load_x(o)` snippet reading position `o` of a binding `X` holding `dtype` as `ty`.
pub(super) fn load(dtype: DType, ty: &str) -> String {
    let kernel = match dtype {
        // f32 and bf16 subnormals widened exactly: a plain conversion flushes them to zero
        // on drivers without denormal preservation (NVIDIA's). Both widen f32 bits (a bf16
        // value is the top half of an f32) with the `f64_of_f32_bits` snippet.
        DType::F32 if ty == "f64" => "load_f32_to_f64",
        DType::BF16 if ty == "f64" => "load_bf16_to_f64",
        DType::F32 | DType::F64 | DType::Bool => "load_word",
        DType::F16 => "load_f16",
        DType::BF16 => "load_bf16",
        DType::I64 => unreachable!("i64 is copied, never converted, by GPU kernels"),
    };
    let load = FAMILY.render(kernel, &[("T", ty)]);
    if kernel.ends_with("_to_f64") {
        return format!("{}{load}", FAMILY.kernel("f64_of_f32_bits"));
    }
    load
}

/// The elements `l` selects from `x`, row-major, converted to `dtype` (a copy when it is
/// already `x`'s), or `None` when this pair of dtypes has no kernel (conversions to and
/// from `i64`).
pub(crate) fn convert(x: &GpuStorage, l: &Layout, dtype: DType) -> Option<GpuStorage> {
    let ctx = x.ctx();
    let from = x.dtype();
    if from != dtype && (from == DType::I64 || dtype == DType::I64) {
        return None;
    }
    let n = l.numel();
    let out = GpuStorage::uninit(ctx, dtype, n);
    if n == 0 {
        return Some(out);
    }
    let params = strided_params(l.shape(), &[l]);
    let value_ty = if from == DType::F64 || dtype == DType::F64 { "f64" } else { "f32" };
    let pre = ("PRELUDE", prelude());
    let (src, threads) = match dtype {
        // One thread per output word: two 16-bit elements.
        DType::F16 | DType::BF16 if from == dtype => (FAMILY.render("copy_half", &[pre]), n.div_ceil(2)),
        DType::F16 | DType::BF16 => {
            let bits = if dtype == DType::F16 { "f16_bits" } else { "bf16_bits" };
            let values = [
                pre,
                ("HALF_BITS", FAMILY.kernel("half_bits")),
                ("X", array_ty(from)),
                ("LOAD", &load(from, value_ty)),
                ("BITS", bits),
            ];
            (FAMILY.render("to_half", &values), n.div_ceil(2))
        }
        _ if from == dtype => {
            let words = (byte_len(dtype, 1) / 4).to_string();
            (FAMILY.render("copy", &[pre, ("WORDS", &words)]), n)
        }
        DType::Bool => {
            let nonzero = FAMILY.kernel(if value_ty == "f32" { "nonzero_f32" } else { "nonzero_f64" });
            let values = [pre, ("X", array_ty(from)), ("LOAD", &load(from, value_ty)), ("NONZERO", nonzero)];
            (FAMILY.render("to_bool", &values), n)
        }
        DType::F32 | DType::F64 => {
            let t = scalar(dtype);
            (FAMILY.render("to_float", &[pre, ("X", array_ty(from)), ("T", t), ("LOAD", &load(from, t))]), n)
        }
        DType::I64 => unreachable!("returned None above"),
    };
    ctx.dispatch(&src, &params, &[x.buffer(), out.buffer()], groups_for(threads));
    Some(out)
}

/// `dst[at(i)] = vals[i]` for the contiguous `vals` (of `dst`'s dtype; 16-bit elements
/// packed two to a word, each written with atomics on its half of the word) and the
/// positions `layout` selects in `dst`.
pub(crate) fn scatter(dst: &GpuStorage, layout: &Layout, vals: &GpuStorage) {
    let n = layout.numel();
    if n == 0 {
        return;
    }
    let src = if dst.dtype().is_half() {
        FAMILY.render("scatter_half", &[("PRELUDE", prelude())])
    } else {
        let words = (byte_len(dst.dtype(), 1) / 4).to_string();
        FAMILY.render("scatter", &[("PRELUDE", prelude()), ("WORDS", &words)])
    };
    dst.ctx().dispatch(&src, &strided_params(layout.shape(), &[layout]), &[vals.buffer(), dst.buffer()], groups_for(n));
}
