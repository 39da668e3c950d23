//! The GPU matrix product, `alpha * A @ B (+ beta * I)` over a batch, as one of several WGSL
//! kernels ("variants") chosen per adapter and problem size ([`super::gemm_tune`]).
//!
//! # Variants
//! | name            | kernel file          | block of C per workgroup | per thread       | needs |
//! |-----------------|----------------------|--------------------------|------------------|-------|
//! | `t32x32_4x4`    | `gemm_tiled.wgsl`    | 32 x 32                  | 4 x 4            | nothing |
//! | `t64x64_4x4`    | `gemm_tiled.wgsl`    | 64 x 64                  | 4 x 4            | nothing (the general variant) |
//! | `t64x64_8x8`    | `gemm_tiled.wgsl`    | 64 x 64                  | 8 x 8            | nothing |
//! | `t128x64_8x4`   | `gemm_tiled.wgsl`    | 128 x 64                 | 8 x 4            | nothing |
//! | `t128x128_8x8`  | `gemm_tiled.wgsl`    | 128 x 128                | 8 x 8            | nothing |
//! | `sg64x64_4x4`   | `gemm_subgroup.wgsl` | 64 x 64                  | 4 x 4            | `SUBGROUP` |
//! | `coop64x64_f16` | `gemm_coop.wgsl`     | 64 x 64                  | 32 x 32 per subgroup | `EXPERIMENTAL_COOPERATIVE_MATRIX` (16x16x16 f16 products, f32 sums), `SHADER_F16`, `SUBGROUP`, a fixed subgroup size |
//! | `db128x128_k8`  | `gemm_pipe.wgsl`     | 128 x 128                | 8 x 8            | nothing (not f64) |
//! | `db128x128_k16` | `gemm_pipe.wgsl`     | 128 x 128                | 8 x 8            | nothing (not f64) |
//! | `db128x64_k16`  | `gemm_pipe.wgsl`     | 128 x 64                 | 8 x 8            | nothing (not f64) |
//! | `coop128x128_f16` | `gemm_coop_block.wgsl` | 128 x 128           | 64 x 64 per subgroup | as `coop64x64_f16` (f32 sums: refused where the adapter's cooperative matrices sum in f16 only, see *Element types*) |
//! | `coop128x128_db_f16` | `gemm_coop_block.wgsl` | 128 x 128        | 64 x 64 per subgroup | as `coop128x128_f16` |
//! | `u64x64_4x4`, `u64x64_8x8`, `u128x64_8x4`, `u128x128_8x8` | `gemm_tiled.wgsl` (written out) | as the `t` variants of those names | | nothing |
//!
//! The tiled variants are one template (register blocks in `vec4` registers, BK-deep slices of
//! A and B staged in workgroup memory); the `u` variants have its products written out,
//! their accumulators named registers (a driver that does not unroll the `t` variants'
//! loops keeps those accumulators in local memory); the `db` variants hold two slices (the `k` in their
//! name deep) and load the next into registers while multiplying the current one;
//! `sg64x64_4x4` passes A's fragments between threads by subgroup shuffles instead; the
//! `coop` variants run f16 tensors only, on the adapter's matrix units, the `coop128x128`
//! ones with 4 x 4 sum tiles per subgroup, so each staged tile serves four products (`db`:
//! two slices staged, the next loaded into registers during the products, as the `db` f32
//! variants).
//!
//! Every variant compiles without wgpu's runtime checks (bounds checks, loop bounding):
//! they stay in bounds by construction, see [`compile`].
//!
//! # Layouts
//! Every variant takes any strides, batch offsets (broadcast batch dims repeat an offset) and
//! sizes: edge tiles are zero-padded in workgroup memory. Each operand is staged four elements
//! per load where its contiguous dim allows (stride 1 there, the other stride and every batch
//! offset multiples of four), and one element per load otherwise (the general path).
//!
//! # Element types
//! f32 and f64 tensors compute in their own type. f16 and bf16 tensors are read as f32, summed
//! in f32 and rounded once, to nearest even, to their type: the CPU's contract. f16 is read as
//! `f16` where the adapter has `SHADER_F16`; without it (and always for bf16) as packed words,
//! two values to a `u32`, and results sharing a word with another thread's are written with
//! atomic and/or on their half. The cooperative-matrix variants are offered only where the
//! adapter's matrix units sum f16 products in f32: f16 sums (all some adapters offer) would
//! round every partial sum and overflow past 65504, so those adapters refuse them and the
//! tuner falls back to the next variant.
//!
//! # Refusals
//! A variant whose adapter feature is missing is refused before any compilation, with a
//! message naming the adapter, the variant and the feature. A variant whose compilation fails
//! (naga or the driver; caught by error scopes) is refused for that element type, the message
//! naming the adapter, the variant and the error. The call then runs the general variant;
//! [`crate::gpu::gemm_report`] lists the refusals.

use super::gemm_caps::Enc;
use super::gemm_kernel::{u32_of, Call};
use super::gemm_tune;
use super::GpuStorage;
use crate::shape::Layout;

/// A's load mode from its strides `[rs, cs]`, its rows `m` and depth `k`.
fn mode_a([rs, cs]: [usize; 2], m: usize, k: usize, aligned: bool) -> u32 {
    if aligned && cs == 1 && (rs.is_multiple_of(4) || m == 1) {
        2
    } else if aligned && rs == 1 && (cs.is_multiple_of(4) || k == 1) {
        3
    } else {
        u32::from(rs < cs)
    }
}

/// B's load mode from its strides `[rs, cs]`, its depth `k` and columns `n`.
fn mode_b([rs, cs]: [usize; 2], k: usize, n: usize, aligned: bool) -> u32 {
    if aligned && cs == 1 && (rs.is_multiple_of(4) || k == 1) {
        2
    } else if aligned && rs == 1 && (cs.is_multiple_of(4) || n == 1) {
        3
    } else {
        u32::from(rs < cs)
    }
}

/// `alpha * A @ B + beta * I` for `batch_offsets` matrices of A and B (element offsets of
/// each batch entry), A `[m, k]` with strides `(rsa, csa)`, B `[k, n]` with `(rsb, csb)`;
/// `input` is I viewed as `[m, n]` (`beta` is then applied; with `beta == 0` I is not read).
/// `None` (the host path) for dtypes without a GEMM kernel and grids past wgpu's limits.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul(
    a: &GpuStorage,
    b: &GpuStorage,
    (m, k, n): (usize, usize, usize),
    (a_strides, b_strides): ([usize; 2], [usize; 2]),
    batch_offsets: &[(usize, usize)],
    input: Option<(&GpuStorage, &Layout)>,
    (beta, alpha): (f64, f64),
) -> Option<GpuStorage> {
    let ctx = a.ctx();
    let dtype = a.dtype();
    let forced = gemm_tune::forced();
    let enc = Enc::of(&ctx.gemm_caps, dtype, forced.packed)?;
    let batch = batch_offsets.len();
    let same = b.dtype() == dtype && input.is_none_or(|(i, _)| i.dtype() == dtype);
    // k below 2^32 - 1024: the kernels' slice loops (`t < k`, stepping by up to 128) end.
    let deep = k > (u32::MAX - 1024) as usize;
    if !same || deep || batch > 65535 || m.div_ceil(32) > 65535 || n.div_ceil(32) > 65535 {
        return None;
    }
    let out = GpuStorage::uninit(ctx, dtype, batch * m * n);
    if batch * m * n == 0 {
        return Some(out);
    }
    u32_of(batch * m * n); // panics past 32-bit indexing
    let scalars = match enc {
        Enc::F64 => ctx.upload(&[alpha.to_le_bytes(), beta.to_le_bytes()].concat()),
        _ => ctx.upload(&[(alpha as f32).to_le_bytes(), (beta as f32).to_le_bytes()].concat()),
    };
    let aligned_a = batch_offsets.iter().all(|&(oa, _)| oa.is_multiple_of(4));
    let aligned_b = batch_offsets.iter().all(|&(_, ob)| ob.is_multiple_of(4));
    let call = Call {
        ctx,
        enc,
        mkn: [m, k, n],
        a: a.buffer(),
        b: b.buffer(),
        input: input.filter(|_| beta != 0.0).map(|(i, l)| (i.buffer(), l)),
        strides: [a_strides[0], a_strides[1], b_strides[0], b_strides[1]],
        modes: [mode_a(a_strides, m, k, aligned_a), mode_b(b_strides, k, n, aligned_b)],
        offsets: batch_offsets,
        scalars,
    };
    let (kernel, pipeline) = gemm_tune::choose(&call, forced, out.buffer());
    call.run(kernel, &pipeline, out.buffer(), None);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::gemm_caps::Caps;
    use super::super::gemm_kernel::Kernel;
    use super::super::gemm_variants::{Algo, GENERAL, VARIANTS};
    use super::*;

    fn caps(features: wgpu::Features) -> Caps {
        Caps {
            ordinal: 0,
            adapter: "test adapter".into(),
            features,
            subgroup_sizes: [32, 32],
            coop_f16: true,
            coop_f16_sums: false,
        }
    }

    /// `src` parses and validates in naga with every capability (so the subgroup and
    /// cooperative-matrix kernels are checked on adapters without them) and translates to
    /// SPIR-V, with and without bounds checks (the unchecked form is what adapters compile).
    fn validates(what: &str, src: &str) {
        use wgpu::naga;
        let module =
            naga::front::wgsl::parse_str(src).unwrap_or_else(|e| panic!("{what}: {}\n{src}", e.emit_to_string(src)));
        let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{what}: {}\n{src}", e.emit_to_string(src)));
        let mut options = naga::back::spv::Options::default();
        for policy in [naga::proc::BoundsCheckPolicy::Restrict, naga::proc::BoundsCheckPolicy::Unchecked] {
            options.bounds_check_policies = naga::proc::BoundsCheckPolicies {
                index: policy,
                buffer: policy,
                image_load: policy,
                binding_array: policy,
            };
            naga::back::spv::write_vec(&module, &info, &options, None)
                .unwrap_or_else(|e| panic!("{what}: SPIR-V ({policy:?}): {e}"));
        }
    }

    /// Every variant's source for every encoding it serves, with and without an input.
    #[test]
    fn every_source_validates_and_translates() {
        let caps = caps(wgpu::Features::all());
        let encs = [Enc::F32, Enc::F64, Enc::F16, Enc::F16Packed, Enc::BF16];
        let mut checked = 0;
        for variant in 0..VARIANTS.len() {
            for &enc in encs.iter().filter(|&&e| Kernel::serves(variant, e)) {
                for input in [false, true] {
                    let kernel = Kernel { variant, enc, input, checked: false };
                    validates(&format!("{kernel:?}"), &kernel.source(&caps));
                    checked += 1;
                }
            }
        }
        // 9 tiled (5 with loops, 4 unrolled) x 5 encodings, subgroup and 3 pipelined x 4,
        // 3 coop x 1; with and without an input.
        assert_eq!(checked, 2 * (9 * 5 + 4 * 4 + 3));
    }

    /// The blocked cooperative-matrix kernels sum in f32 and validate where the adapter
    /// offers f32 sums (with or without f16 sums besides); where it offers f16 sums only, or
    /// none, they are refused, naming f32 sums, and the general variant is still offered.
    #[test]
    fn the_blocked_coop_kernels_sum_in_f32_or_are_refused() {
        let block = VARIANTS.iter().position(|v| v.algo == Algo::CoopBlock { double: false }).expect("listed");
        let mut caps = caps(wgpu::Features::all());
        for f16_sums in [false, true] {
            (caps.coop_f16, caps.coop_f16_sums) = (true, f16_sums);
            for variant in [block, block + 1] {
                assert_eq!(caps.refusal(&VARIANTS[variant]), None);
                let src = Kernel { variant, enc: Enc::F16, input: true, checked: false }.source(&caps);
                assert!(src.contains("alias ACC = f32;"), "{src}");
                validates(VARIANTS[variant].name, &src);
            }
        }
        for f16_sums in [true, false] {
            (caps.coop_f16, caps.coop_f16_sums) = (false, f16_sums);
            for variant in [block, block + 1] {
                let why = caps.refusal(&VARIANTS[variant]).expect("refused");
                let name = format!("`{}`", VARIANTS[variant].name);
                assert!(why.contains("cooperative matrices of f16 with f32 sums") && why.contains(&name), "{why}");
                assert_eq!(why.contains("f16 sums only"), f16_sums, "{why}");
            }
            assert_eq!(caps.refusal(&VARIANTS[GENERAL]), None);
        }
    }

    #[test]
    fn refusals_name_the_adapter_the_variant_and_the_feature() {
        let bare = caps(wgpu::Features::empty());
        assert_eq!(bare.refusal(&VARIANTS[GENERAL]), None);
        let sg = bare.refusal(&VARIANTS[5]).expect("refused");
        assert_eq!(sg, "gpu:0 adapter `test adapter` lacks wgpu feature SUBGROUP: GEMM variant `sg64x64_4x4` refused");
        let coop = bare.refusal(&VARIANTS[6]).expect("refused");
        assert!(coop.contains("EXPERIMENTAL_COOPERATIVE_MATRIX") && coop.contains("SHADER_F16"), "{coop}");
        let mut no_shape = caps(wgpu::Features::all());
        no_shape.coop_f16 = false;
        assert!(no_shape.refusal(&VARIANTS[6]).expect("refused").contains("16x16x16"));
    }

    #[test]
    fn load_modes_need_contiguity_and_alignment() {
        assert_eq!(mode_a([8, 1], 5, 7, true), 2);
        assert_eq!(mode_a([8, 1], 5, 7, false), 0);
        assert_eq!(mode_a([7, 1], 5, 7, true), 0); // rows not aligned
        assert_eq!(mode_a([1, 12], 5, 7, true), 3);
        assert_eq!(mode_a([1, 5], 5, 7, true), 1); // transposed, unaligned: m fastest
        assert_eq!(mode_b([16, 1], 3, 16, true), 2);
        assert_eq!(mode_b([1, 4], 3, 16, true), 3);
        assert_eq!(mode_b([1, 3], 3, 16, true), 1);
        assert_eq!(mode_b([3, 1], 3, 3, true), 0);
    }
}
