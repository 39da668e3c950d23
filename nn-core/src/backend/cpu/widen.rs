//! `f16` and `bf16` arithmetic: the kernels are written for `f32` and `f64`, and a half
//! operand is widened to `f32` before one runs, its `f32` result rounded back (once, to
//! nearest even) where the op's result is a half type. PyTorch's CPU kernels compute half
//! types in `f32` per op the same way, rounding each op's result; sums and products
//! accumulate in `f32`.

use ::half::{bf16, f16};

use super::CpuStorage;
use crate::dtype::DType;

/// Runs `kernel` on `operands`, any `f16`/`bf16` among them widened to `f32`, and rounds
/// each `f32` result whose expected dtype (`outs`) is a half type to it. Operands without
/// a half type go straight to the kernel.
pub(crate) fn through_f32<const N: usize, const M: usize>(
    operands: [&CpuStorage; N],
    outs: [DType; M],
    kernel: impl FnOnce([&CpuStorage; N]) -> [CpuStorage; M],
) -> [CpuStorage; M] {
    if !operands.iter().any(|s| s.dtype().is_half()) {
        return kernel(operands);
    }
    let wide: [Option<CpuStorage>; N] = operands.map(widen);
    let results = kernel(std::array::from_fn(|i| wide[i].as_ref().unwrap_or(operands[i])));
    let mut outs = outs.into_iter();
    results.map(|r| narrow(r, outs.next().expect("one dtype per result")))
}

/// The `f32` copy of a half-type buffer; `None` for other types.
pub(crate) fn widen(s: &CpuStorage) -> Option<CpuStorage> {
    match s {
        CpuStorage::F16(v) => Some(CpuStorage::F32(v.iter().map(|x| x.to_f32()).collect())),
        CpuStorage::BF16(v) => Some(CpuStorage::F32(v.iter().map(|x| x.to_f32()).collect())),
        _ => None,
    }
}

/// `s` rounded to `dtype` when `s` is `f32` and `dtype` a half type; `s` otherwise.
pub(crate) fn narrow(s: CpuStorage, dtype: DType) -> CpuStorage {
    match (&s, dtype) {
        (CpuStorage::F32(v), DType::F16) => CpuStorage::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
        (CpuStorage::F32(v), DType::BF16) => CpuStorage::BF16(v.iter().map(|&x| bf16::from_f32(x)).collect()),
        _ => s,
    }
}
