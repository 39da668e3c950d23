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

use std::sync::Arc;

use super::context::{Buffer, Ctx, Kernel as Pipeline};
pub(crate) use super::gemm_caps::{Caps, Enc};
use super::gemm_tune;
use super::template::Family;
use super::GpuStorage;
use crate::shape::Layout;

static ELEM: Family = Family::new("gemm_elem.wgsl", include_str!("wgsl/gemm_elem.wgsl"));
static FILL: Family = Family::new("gemm_fill.wgsl", include_str!("wgsl/gemm_fill.wgsl"));
static TILED: Family = Family::new("gemm_tiled.wgsl", include_str!("wgsl/gemm_tiled.wgsl"));
static PIPELINED: Family = Family::new("gemm_pipe.wgsl", include_str!("wgsl/gemm_pipe.wgsl"));
const SUBGROUP: &str = include_str!("wgsl/gemm_subgroup.wgsl");
const COOP: &str = include_str!("wgsl/gemm_coop.wgsl");
static COOP_BLOCK: Family = Family::new("gemm_coop_block.wgsl", include_str!("wgsl/gemm_coop_block.wgsl"));

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

/// One compiled form of a variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Kernel {
    /// Index in [`VARIANTS`].
    pub(crate) variant: usize,
    pub(crate) enc: Enc,
    /// Whether `beta * I` is added (addmm with `beta != 0`).
    pub(crate) input: bool,
    /// Compiled with wgpu's runtime checks (bounds checks and loop bounding): only when
    /// asked for (see [`compile`]).
    pub(crate) checked: bool,
}

impl Kernel {
    /// Whether the variant takes operands of this encoding.
    pub(crate) fn serves(variant: usize, enc: Enc) -> bool {
        match VARIANTS[variant].algo {
            Algo::Tiled { .. } => true,
            Algo::Subgroup | Algo::Pipelined { .. } => enc != Enc::F64,
            Algo::Coop | Algo::CoopBlock { .. } => enc == Enc::F16,
        }
    }

    /// Rows and columns of C one workgroup computes.
    pub(crate) fn block(&self) -> [usize; 2] {
        match VARIANTS[self.variant].algo {
            Algo::Tiled { bm, bn, .. } | Algo::Pipelined { bm, bn, .. } => [bm as usize, bn as usize],
            Algo::Subgroup | Algo::Coop => [64, 64],
            Algo::CoopBlock { .. } => [128, 128],
        }
    }

    /// The WGSL source: `gemm_elem.wgsl`'s sections for the encoding, the staging functions,
    /// then the variant's kernel file.
    pub(crate) fn source(&self, caps: &Caps) -> String {
        let (f, unit, out, load, store, bits) = match self.enc {
            Enc::F32 => ("f32", "vec4<f32>", "f32", "load_float", "store_float", ""),
            Enc::F64 => ("f64", "vec4<f64>", "f64", "load_float", "store_float", ""),
            Enc::F16 => ("f32", "vec4<f16>", "f16", "load_f16", "store_float", ""),
            Enc::F16Packed => ("f32", "vec2<u32>", "atomic<u32>", "load_f16_packed", "store_packed", "f16_bits"),
            Enc::BF16 => ("f32", "vec2<u32>", "atomic<u32>", "load_bf16", "store_packed", "bf16_bits"),
        };
        let algo = VARIANTS[self.variant].algo;
        let mut enable = String::new();
        if self.enc == Enc::F16 {
            enable.push_str("enable f16;\n");
        }
        if matches!(algo, Algo::Coop | Algo::CoopBlock { .. }) {
            enable.push_str("enable wgpu_cooperative_matrix;\n");
        }
        let y_binding = if self.input { "5" } else { "4" };
        let fills = [("ENABLE", enable.as_str()), ("F", f), ("UNIT", unit), ("OUT", out), ("Y_BINDING", y_binding)];
        let mut src = fill(ELEM.kernel("header"), &fills);
        let mut operands = vec!["lhs", "rhs"];
        if self.input {
            operands.push("inp");
            src += &fill(ELEM.kernel("input_some"), &[("UNIT", unit)]);
        } else {
            src += ELEM.kernel("input_none");
        }
        for x in operands {
            src += &fill(ELEM.kernel(load), &[("X", x)]);
        }
        src += &fill(ELEM.kernel(store), &[("OUT", out), ("BITS", bits)]);
        let registers = matches!(algo, Algo::Pipelined { .. } | Algo::CoopBlock { double: true });
        if registers {
            src += PIPELINED.kernel("loads");
        } else {
            if algo != Algo::Subgroup {
                src += FILL.kernel("fill_a");
            }
            src += FILL.kernel("fill_b");
        }
        let n = |v: u32| v.to_string();
        src += &match algo {
            Algo::Tiled { bm, bn, bk, tm, tn, unrolled } => {
                let sizes = [("BM", n(bm)), ("BN", n(bn)), ("BK", n(bk)), ("TM", n(tm)), ("TN", n(tn))];
                let sizes: Vec<(&str, &str)> = sizes.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let common = fill(TILED.kernel("common"), &sizes);
                let [acc, product, epilogue] = if unrolled {
                    unrolled_parts(tm, tn)
                } else {
                    ["loops_acc", "loops_product", "loops_epilogue"].map(|k| TILED.kernel(k).to_string())
                };
                let parts = [("ACC", acc.as_str()), ("PRODUCT", product.as_str()), ("EPILOGUE", epilogue.as_str())];
                common + &fill(TILED.kernel("main"), &parts)
            }
            Algo::Pipelined { bm, bn, bk } => {
                fill(PIPELINED.kernel("main"), &[("BM", &n(bm)), ("BN", &n(bn)), ("BK", &n(bk))])
            }
            Algo::Subgroup => fill(SUBGROUP, &[("LANES", &n(caps.lanes()))]),
            Algo::Coop => fill(COOP, &[("SG", &n(caps.subgroup_sizes[0]))]),
            Algo::CoopBlock { double } => {
                let common = [("SG", n(caps.subgroup_sizes[0])), ("ACC", caps.coop_sums().to_string())];
                let common: Vec<(&str, &str)> = common.iter().map(|(k, v)| (*k, v.as_str())).collect();
                fill(COOP_BLOCK.kernel("common"), &common) + COOP_BLOCK.kernel(if double { "double" } else { "single" })
            }
        };
        src
    }
}

/// The written-out parts of `gemm_tiled.wgsl`'s `main` (the `u` variants) for `tm x tn` outputs
/// per thread: the accumulators (`acc_i_q`, row `i`, columns `4q..4q+4` of the thread's
/// block), one slice's products (A's `tm` rows as `a0..` and B's `tn` columns as `b0..`,
/// read as `vec4`s at `qa`/`qb`), and the epilogue (`alpha * acc + beta * input`, each row
/// stored through `row`). The order of the sums is the loop form's, so both forms compute
/// the same values.
fn unrolled_parts(tm: u32, tn: u32) -> [String; 3] {
    use std::fmt::Write;
    const LANE: [&str; 4] = ["x", "y", "z", "w"];
    let (mut acc, mut product, mut epilogue) = (String::new(), String::new(), String::new());
    for i in 0..tm {
        for q in 0..tn / 4 {
            writeln!(acc, "    var acc_{i}_{q} = vec4<F>();").expect("a String");
        }
    }
    for p in 0..tm / 4 {
        writeln!(product, "            let a{p} = As[qa + {p}u];").expect("a String");
    }
    for q in 0..tn / 4 {
        writeln!(product, "            let b{q} = Bs[qb + {q}u];").expect("a String");
    }
    for i in 0..tm {
        for q in 0..tn / 4 {
            let a = format!("a{}.{}", i / 4, LANE[(i % 4) as usize]);
            writeln!(product, "            acc_{i}_{q} += {a} * b{q};").expect("a String");
        }
    }
    for i in 0..tm {
        writeln!(epilogue, "    {{\n        let r = row0 + ty * TM + {i}u;").expect("a String");
        writeln!(epilogue, "        if (r < m && c0 < n) {{").expect("a String");
        for j in 0..tn {
            let value = format!("acc_{i}_{}.{}", j / 4, LANE[(j % 4) as usize]);
            writeln!(
                epilogue,
                "            row[{j}] = alpha * {value} + beta * input(P[10] + r * P[8] + min(c0 + {j}u, n - 1u) * P[9]);"
            )
            .expect("a String");
        }
        writeln!(epilogue, "            store_run(bt * m * n + r * n + c0, min(TN, n - c0));\n        }}\n    }}")
            .expect("a String");
    }
    [acc, product, epilogue]
}

/// `template` with each `{{NAME}}` replaced by its value in `fills`, through the template
/// step of the other kernels ([`super::template::substitute`]). One set of values serves
/// the sections of a variant, so values a section does not use are dropped first.
///
/// # Panics
/// When a placeholder is left unfilled (a bug here, caught by every GPU test).
fn fill(template: &str, fills: &[(&str, &str)]) -> String {
    let used: Vec<(&str, &str)> =
        fills.iter().copied().filter(|(name, _)| template.contains(&format!("{{{{{name}}}}}"))).collect();
    super::template::substitute(("gemm_*.wgsl", "GEMM"), template, &used)
}

/// The pipeline of `kernel` (source `src`), compiled under error scopes: `Err` carries
/// wgpu's message, from naga or the driver.
///
/// Without `kernel.checked` the module is compiled without wgpu's runtime checks (no
/// bounds checks or clamping on buffer and array accesses, no loop bounding, no division
/// guards): the GEMM's inner loops read workgroup memory on every multiply-add, and every
/// such check costs there. `kernel.checked` comes from a `+checked` suffix of
/// `NN_GPU_GEMM` (or [`crate::gpu::force_gemm`]), or `NN_GPU_GEMM_CHECKED=1`.
pub(crate) fn compile(ctx: &Ctx, kernel: Kernel, src: &str) -> Result<Arc<Pipeline>, String> {
    if kernel.checked {
        return ctx.try_kernel(src);
    }
    // SAFETY: every GEMM kernel (`gemm_*.wgsl`, as assembled by `Kernel::source`) stays in
    // bounds by construction, which the checks would only re-verify:
    // - Global reads (A, B, the input) and writes (Y) happen only under explicit tests of
    //   their row, column and depth against m, n and k (`fill_a`/`fill_b`, `load_a`/`load_b`,
    //   the epilogues, `min(c, n - 1)` for the input), at element offsets within each
    //   tensor's storage by the layouts `matmul` is given. Four-element reads cover one unit
    //   of the binding (`vec4`/`vec2<u32>`), and every buffer is a whole number of 64-byte
    //   size classes (`context::size_class`), so a unit holding an element in the tensor
    //   lies inside the binding. Packed-word stores write words holding their own elements.
    // - `P` has 13 + 2 * batch words (`Call::params`) and is read at 0..13 and 13 + bt,
    //   13 + batch + bt for the batch entry bt < batch (the grid's z); `K` has two.
    // - Workgroup, private and cooperative-matrix arrays are indexed by constants, loop
    //   counters with constant bounds and the thread's (or subgroup's) own index, each
    //   bounded by the array's constant size (the comments at the top of each kernel file).
    // - Every loop ends: constant bounds, or `t < k` stepping by BK with k at most
    //   2^32 - 1024 (checked by `matmul`); every integer division is by a nonzero constant.
    unsafe { ctx.build_trusted(src, wgpu::ShaderRuntimeChecks::unchecked()) }
}

/// One product's operands, sizes and parameters.
pub(crate) struct Call<'a> {
    pub(crate) ctx: &'static Ctx,
    pub(crate) enc: Enc,
    /// `[m, k, n]`.
    pub(crate) mkn: [usize; 3],
    a: &'a Buffer,
    b: &'a Buffer,
    /// I and its layout, when `beta * I` is added.
    input: Option<(&'a Buffer, &'a Layout)>,
    /// `[rsa, csa, rsb, csb]`.
    strides: [usize; 4],
    /// The load modes of A and B (see `gemm_fill.wgsl`).
    pub(crate) modes: [u32; 2],
    /// Element offsets of A's and B's matrix per batch entry.
    offsets: &'a [(usize, usize)],
    /// `[alpha, beta]` in the accumulator type.
    scalars: Buffer,
}

impl Call<'_> {
    pub(crate) fn batch(&self) -> usize {
        self.offsets.len()
    }

    pub(crate) fn has_input(&self) -> bool {
        self.input.is_some()
    }

    /// `P` for sizes `[m, k, n]` over `offsets` (see `gemm_elem.wgsl`).
    fn params(&self, [m, k, n]: [usize; 3], offsets: &[(usize, usize)]) -> Vec<u32> {
        let [rsa, csa, rsb, csb] = self.strides;
        let (rsi, csi, oi) = self.input.map_or((0, 0, 0), |(_, l)| (l.strides()[0], l.strides()[1], l.offset()));
        let mut p: Vec<u32> =
            [m, k, n, offsets.len(), rsa, csa, rsb, csb, rsi, csi, oi].iter().map(|&v| u32_of(v)).collect();
        p.extend(self.modes);
        p.extend(offsets.iter().map(|&(oa, _)| u32_of(oa)));
        p.extend(offsets.iter().map(|&(_, ob)| u32_of(ob)));
        p
    }

    /// Queues `kernel` (compiled into `pipeline`) writing C into `out`; with `proxy`, the product of
    /// the leading `[m, k, n]` block of the first batch entry (for timing, see
    /// [`gemm_tune`]).
    pub(crate) fn run(&self, kernel: Kernel, pipeline: &Pipeline, out: &Buffer, proxy: Option<[usize; 3]>) {
        let (mkn, offsets) = match proxy {
            Some(mkn) => (mkn, &self.offsets[..1]),
            None => (self.mkn, self.offsets),
        };
        let [m, _, n] = mkn;
        let [bm, bn] = kernel.block();
        let mut bufs = vec![&self.scalars, self.a, self.b];
        if let Some((i, _)) = self.input {
            bufs.push(i);
        }
        bufs.push(out);
        let grid = [n.div_ceil(bn), m.div_ceil(bm), offsets.len()].map(|g| g as u32);
        self.ctx.launch3(pipeline, &self.params(mkn, offsets), &bufs, grid);
    }
}

fn u32_of(v: usize) -> u32 {
    u32::try_from(v).unwrap_or_else(|_| panic!("gpu GEMM: size or stride {v} exceeds 32-bit indexing"))
}

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
    let enc = Enc::of(&ctx.gemm.caps, dtype, forced.packed)?;
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
