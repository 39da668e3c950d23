//! What an adapter offers the GEMM ([`super::gemm`]) and how each element type is encoded
//! in its kernels; why an adapter refuses a variant.

use super::gemm_variants::{Algo, Variant};
use crate::dtype::DType;

/// How a kernel reads and writes its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Enc {
    F32,
    F64,
    /// f16 as `f16` (`SHADER_F16`).
    F16,
    /// f16 as packed words.
    F16Packed,
    /// bf16 as packed words.
    BF16,
}

impl Enc {
    /// The encoding of `dtype` on this adapter (`packed`: f16 as words even with
    /// `SHADER_F16`), or `None` for the dtypes without a GPU GEMM (i64, bool).
    pub(crate) fn of(caps: &Caps, dtype: DType, packed: bool) -> Option<Enc> {
        match dtype {
            DType::F32 => Some(Enc::F32),
            DType::F64 => Some(Enc::F64),
            DType::F16 if caps.features.contains(wgpu::Features::SHADER_F16) && !packed => Some(Enc::F16),
            DType::F16 => Some(Enc::F16Packed),
            DType::BF16 => Some(Enc::BF16),
            DType::I64 | DType::Bool => None,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Enc::F32 => "f32",
            Enc::F64 => "f64",
            Enc::F16 => "f16",
            Enc::F16Packed => "f16 (packed words)",
            Enc::BF16 => "bf16",
        }
    }
}

/// What an adapter offers the GEMM, read once when it is opened.
#[derive(Debug)]
pub(crate) struct Caps {
    pub(crate) ordinal: usize,
    pub(crate) adapter: String,
    /// The features enabled on the device.
    pub(crate) features: wgpu::Features,
    /// The smallest and largest subgroup sizes.
    pub(crate) subgroup_sizes: [u32; 2],
    /// Cooperative matrices of 16x16x16 with f16 operands and f32 sums.
    pub(crate) coop_f16: bool,
    /// Cooperative matrices of 16x16x16 with f16 operands and f16 sums (named in
    /// refusals only: no variant is offered that sums in f16).
    pub(crate) coop_f16_sums: bool,
}

impl Caps {
    pub(crate) fn new(
        ordinal: usize,
        info: &wgpu::AdapterInfo,
        features: wgpu::Features,
        coop: &[wgpu::CooperativeMatrixProperties],
    ) -> Caps {
        use wgpu::CooperativeScalarType as S;
        let offers = |sums| {
            coop.iter().any(|p| (p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type) == (16, 16, 16, S::F16, sums))
        };
        Caps {
            ordinal,
            adapter: info.name.clone(),
            features,
            subgroup_sizes: [info.subgroup_min_size, info.subgroup_max_size],
            coop_f16: offers(S::F32),
            coop_f16_sums: offers(S::F16),
        }
    }

    /// Why the adapter cannot run variant `v`, or `None` when it can.
    pub(crate) fn refusal(&self, v: &Variant) -> Option<String> {
        use wgpu::Features as F;
        let coop = matches!(v.algo, Algo::Coop | Algo::CoopBlock { .. });
        let needs = match v.algo {
            Algo::Tiled { .. } | Algo::Pipelined { .. } => F::empty(),
            Algo::Subgroup => F::SUBGROUP,
            Algo::Coop | Algo::CoopBlock { .. } => F::EXPERIMENTAL_COOPERATIVE_MATRIX | F::SHADER_F16 | F::SUBGROUP,
        };
        let names = [
            (F::EXPERIMENTAL_COOPERATIVE_MATRIX, "EXPERIMENTAL_COOPERATIVE_MATRIX"),
            (F::SHADER_F16, "SHADER_F16"),
            (F::SUBGROUP, "SUBGROUP"),
        ];
        let lacks: Vec<&str> =
            names.iter().filter(|(f, _)| needs.contains(*f) && !self.features.contains(*f)).map(|(_, n)| *n).collect();
        let [lo, hi] = self.subgroup_sizes;
        let missing = if !lacks.is_empty() {
            format!("wgpu feature {}", lacks.join(" and "))
        } else if v.algo == Algo::Subgroup && !lo.is_power_of_two() {
            format!("subgroups of a power-of-two size (its smallest is {lo})")
        } else if coop && !self.coop_f16 {
            // f16 sums are refused too (the `coop128x128` variants took them): partial sums
            // rounded to f16 at every step lose digits with depth and overflow past 65504
            // (a 512-deep product of +-200 values gave inf where the result is 0), against
            // the GEMM's contract for f16 (summed in f32, rounded once). The tuner then
            // falls back to a variant summing in f32.
            let only = if self.coop_f16_sums { " (it offers f16 sums only, which the GEMM does not use)" } else { "" };
            format!("16x16x16 cooperative matrices of f16 with f32 sums{only}")
        } else if coop && lo != hi {
            format!("a fixed subgroup size (it has {lo} to {hi})")
        } else {
            return None;
        };
        Some(format!(
            "gpu:{} adapter `{}` lacks {missing}: GEMM variant `{}` refused",
            self.ordinal, self.adapter, v.name
        ))
    }

    /// The type the `coop128x128` variants sum in: `f32` where the adapter offers f16 x f16 -> f32
    /// tiles, else `f16` (such an adapter refuses them, see [`Caps::refusal`]: never run).
    pub(crate) fn coop_sums(&self) -> &'static str {
        if self.coop_f16 {
            "f32"
        } else {
            "f16"
        }
    }

    /// Threads sharing A's fragments in `gemm_subgroup.wgsl`: a power of two dividing 16 and
    /// every subgroup size.
    pub(crate) fn lanes(&self) -> u32 {
        self.subgroup_sizes[0].clamp(1, 16)
    }
}
