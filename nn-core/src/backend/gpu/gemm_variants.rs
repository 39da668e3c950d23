//! The GEMM's kernel designs ("variants", [`super::gemm`]'s table): what each computes and
//! the block it takes; data only, read by the adapter's capabilities
//! ([`super::gemm_caps`]), the kernels' sources ([`super::gemm_kernel`]) and the tuner.

/// How a variant computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Algo {
    /// `gemm_tiled.wgsl`: a `bm x bn` block of C per workgroup, `tm x tn` per thread,
    /// `bk`-deep slices; `unrolled`: its products and epilogue written out with one named
    /// register per accumulator ([`unrolled_parts`]) instead of loops over an array.
    Tiled { bm: u32, bn: u32, bk: u32, tm: u32, tn: u32, unrolled: bool },
    /// `gemm_pipe.wgsl`: a `bm x bn` block per workgroup, 8 x 8 per thread, `bk`-deep
    /// slices double-buffered.
    Pipelined { bm: u32, bn: u32, bk: u32 },
    /// `gemm_subgroup.wgsl`.
    Subgroup,
    /// `gemm_coop.wgsl`.
    Coop,
    /// `gemm_coop_block.wgsl`, one slice staged at a time or (`double`) two.
    CoopBlock { double: bool },
}

/// A GEMM kernel design, compiled per element encoding (see [`Kernel`]).
pub(crate) struct Variant {
    pub(crate) name: &'static str,
    pub(crate) algo: Algo,
}

const fn tiled(name: &'static str, [bm, bn, bk]: [u32; 3], [tm, tn]: [u32; 2], unrolled: bool) -> Variant {
    let threads = (bm / tm) * (bn / tn);
    // The template's preconditions: vec4 register rows, whole loads per thread, one workgroup.
    assert!(tm.is_multiple_of(4) && tn.is_multiple_of(4) && bk.is_multiple_of(4) && threads <= 256);
    assert!((bm * bk / 4).is_multiple_of(threads) && (bn * bk / 4).is_multiple_of(threads));
    Variant { name, algo: Algo::Tiled { bm, bn, bk, tm, tn, unrolled } }
}

const fn pipelined(name: &'static str, bm: u32, bn: u32, bk: u32) -> Variant {
    let threads = (bm / 8) * (bn / 8);
    // The template's preconditions: whole vec4 loads per thread, split halves, one workgroup.
    assert!(bm.is_multiple_of(64) && bn.is_multiple_of(64) && bk.is_multiple_of(4) && threads <= 256);
    assert!((bm * bk / 4).is_multiple_of(threads) && (bn * bk / 4).is_multiple_of(threads));
    Variant { name, algo: Algo::Pipelined { bm, bn, bk } }
}

/// Every variant, in the order they are tried as fallbacks.
pub(crate) const VARIANTS: [Variant; 16] = [
    tiled("t32x32_4x4", [32, 32, 16], [4, 4], false),
    tiled("t64x64_4x4", [64, 64, 16], [4, 4], false),
    tiled("t64x64_8x8", [64, 64, 16], [8, 8], false),
    tiled("t128x64_8x4", [128, 64, 16], [8, 4], false),
    tiled("t128x128_8x8", [128, 128, 16], [8, 8], false),
    Variant { name: "sg64x64_4x4", algo: Algo::Subgroup },
    Variant { name: "coop64x64_f16", algo: Algo::Coop },
    pipelined("db128x128_k8", 128, 128, 8),
    pipelined("db128x128_k16", 128, 128, 16),
    pipelined("db128x64_k16", 128, 64, 16),
    Variant { name: "coop128x128_f16", algo: Algo::CoopBlock { double: false } },
    Variant { name: "coop128x128_db_f16", algo: Algo::CoopBlock { double: true } },
    tiled("u64x64_4x4", [64, 64, 16], [4, 4], true),
    tiled("u64x64_8x8", [64, 64, 16], [8, 8], true),
    tiled("u128x64_8x4", [128, 64, 16], [8, 4], true),
    tiled("u128x128_8x8", [128, 128, 16], [8, 8], true),
];

/// The variant every call can run (any element type, layout and adapter): the fallback.
pub(crate) const GENERAL: usize = 1;

/// The variant products too small to tune run.
pub(crate) const SMALL: usize = 0;
