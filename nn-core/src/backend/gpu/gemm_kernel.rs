//! One compiled form of a GEMM variant ([`Kernel`]): its WGSL source assembled from the
//! `gemm_*.wgsl` templates, its compilation ([`compile`]), and one product's operands and
//! launch ([`Call`]). [`super::gemm`] picks the form through [`super::gemm_tune`].

use std::sync::Arc;

use super::context::{Buffer, Ctx, Kernel as Pipeline};
use super::gemm_caps::{Caps, Enc};
use super::gemm_variants::{Algo, VARIANTS};
use super::template::Family;
use crate::shape::Layout;

static ELEM: Family = Family::new("gemm_elem.wgsl", include_str!("wgsl/gemm_elem.wgsl"));
static FILL: Family = Family::new("gemm_fill.wgsl", include_str!("wgsl/gemm_fill.wgsl"));
static TILED: Family = Family::new("gemm_tiled.wgsl", include_str!("wgsl/gemm_tiled.wgsl"));
static PIPELINED: Family = Family::new("gemm_pipe.wgsl", include_str!("wgsl/gemm_pipe.wgsl"));
const SUBGROUP: &str = include_str!("wgsl/gemm_subgroup.wgsl");
const COOP: &str = include_str!("wgsl/gemm_coop.wgsl");
static COOP_BLOCK: Family = Family::new("gemm_coop_block.wgsl", include_str!("wgsl/gemm_coop_block.wgsl"));

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
    pub(crate) a: &'a Buffer,
    pub(crate) b: &'a Buffer,
    /// I and its layout, when `beta * I` is added.
    pub(crate) input: Option<(&'a Buffer, &'a Layout)>,
    /// `[rsa, csa, rsb, csb]`.
    pub(crate) strides: [usize; 4],
    /// The load modes of A and B (see `gemm_fill.wgsl`).
    pub(crate) modes: [u32; 2],
    /// Element offsets of A's and B's matrix per batch entry.
    pub(crate) offsets: &'a [(usize, usize)],
    /// `[alpha, beta]` in the accumulator type.
    pub(crate) scalars: Buffer,
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

/// `v` as a kernel parameter.
///
/// # Panics
/// When `v` exceeds 32 bits (the kernels index in 32 bits).
pub(crate) fn u32_of(v: usize) -> u32 {
    u32::try_from(v).unwrap_or_else(|_| panic!("gpu GEMM: size or stride {v} exceeds 32-bit indexing"))
}
