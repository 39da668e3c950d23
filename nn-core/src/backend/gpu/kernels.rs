//! The WGSL kernels and the host code that sizes and dispatches them.
//!
//! Sources are generated per element type and op from the templates below and compiled
//! once per distinct source (the pipeline cache in [`super::context`]). Every kernel reads
//! its sizes and strides from binding 0, an `array<u32>` `P`: for strided kernels
//! `P = [n, rank, shape..., (strides..., offset) per operand, extras...]`, so the op's
//! scalars never change the source and one pipeline serves every shape.

use super::context::{Buffer, Ctx, WORKGROUP};
use super::{byte_len, GpuStorage};
use crate::backend::Wgsl;
use crate::dtype::DType;
use crate::shape::Layout;

/// Bindings 0 and the index helpers every one-dimensional kernel starts with.
pub(crate) const PRELUDE: &str = r#"
@group(0) @binding(0) var<storage, read> P: array<u32>;

// NaN, tested on the bits: a shader compiler may assume comparisons never see NaN and fold
// `x != x` to false (llvmpipe does). f64 values are tested through f32 (NaN stays NaN).
fn isnan_(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// The flat thread index over a grid spread across x and y.
fn flat(id: vec3<u32>, nw: vec3<u32>) -> u32 {
    return id.x + id.y * nw.x * 256u;
}

// The buffer position of row-major element `i` of operand `k`.
fn at(i: u32, k: u32) -> u32 {
    let nd = P[1];
    let base = 2u + nd + k * (nd + 1u);
    var rem = i;
    var off = P[base + nd];
    var d = nd;
    loop {
        if (d == 0u) { break; }
        d = d - 1u;
        let s = P[2u + d];
        off = off + (rem % s) * P[base + d];
        rem = rem / s;
    }
    return off;
}

// Where the extras after `nops` operands start.
fn extras(nops: u32) -> u32 {
    return 2u + P[1] + nops * (P[1] + 1u);
}
"#;

/// The helpers elementwise expressions may call (see [`Wgsl`]).
const MATH: &str = r#"
fn powf_(a: f32, b: f32) -> f32 {
    if (b == 0.0 || a == 1.0) { return 1.0; }
    if (isnan_(a) || isnan_(b)) { return a + b; }
    let r = exp2(b * log2(abs(a)));
    if (a < 0.0) {
        if (fract(b) != 0.0) { return bitcast<f32>(0x7fc00000u); }
        if (fract(b * 0.5) != 0.0) { return -r; }
    }
    return r;
}

fn erfc_(x: f32) -> f32 {
    let z = abs(x);
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
        + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
    return select(2.0 - r, r, x >= 0.0);
}

// erf: the Taylor series below 0.5 (relative error below 1e-9 there, where 1 - erfc
// would lose the leading digits), 1 - erfc_ above (within 2 ulp).
fn erf_(x: f32) -> f32 {
    if (isnan_(x)) { return x; }
    if (abs(x) < 0.5) {
        let x2 = x * x;
        let p = 1.0 + x2 * (-0.3333333333 + x2 * (0.1 + x2 * (-0.0238095238 + x2 * (0.0046296296 - x2 * 0.0007575758))));
        return 1.1283791671 * x * p;
    }
    return sign(x) * (1.0 - erfc_(abs(x)));
}

// erfinv: Giles' single-precision approximation (relative error below 3e-7 on f32
// inputs), infinite at +-1 and NaN outside [-1, 1].
fn erfinv_(x: f32) -> f32 {
    if (abs(x) >= 1.0) {
        return select(bitcast<f32>(0x7fc00000u), sign(x) * bitcast<f32>(0x7f800000u), abs(x) == 1.0);
    }
    var w = -log((1.0 - x) * (1.0 + x));
    var p: f32;
    if (w < 5.0) {
        w = w - 2.5;
        p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w;
        p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w;
        p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w;
        p = 1.50140941 + p * w;
    } else {
        w = sqrt(w) - 3.0;
        p = -0.000200214257;
        p = 0.000100950558 + p * w;
        p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w;
        p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w;
        p = 2.83297682 + p * w;
    }
    return p * x;
}

fn tanh_(x: f32) -> f32 {
    let z = abs(x);
    if (z < 0.2) {
        let x2 = x * x;
        return x * (1.0 + x2 * (-0.3333333333 + x2 * (0.1333333333 + x2 * (-0.0539682540 + x2 * 0.0218694885))));
    }
    let e = exp(-2.0 * z);
    return sign(x) * (1.0 - e) / (1.0 + e);
}
"#;

pub(crate) const MAIN_1D: &str = "@compute @workgroup_size(256)\nfn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {\n    let i = flat(id, nw);\n";

/// f32 to f16 and bf16 bits, rounding to nearest even exactly as the `half` crate does
/// (so a conversion on the GPU gives the CPU's bits).
const HALF_CONVERSIONS: &str = r#"
fn f16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    let sign = (b >> 16u) & 0x8000u;
    let e = i32((b >> 23u) & 0xffu);
    let m = b & 0x7fffffu;
    if (e == 255) {
        if (m != 0u) { return sign | 0x7e00u | (m >> 13u); }
        return sign | 0x7c00u;
    }
    let ue = e - 112;
    if (ue >= 31) { return sign | 0x7c00u; }
    if (ue <= 0) {
        if (ue < -10) { return sign; }
        let mm = m | 0x800000u;
        let shift = u32(14 - ue);
        var h = mm >> shift;
        let round_bit = 1u << (shift - 1u);
        if ((mm & round_bit) != 0u && (mm & (3u * round_bit - 1u)) != 0u) { h = h + 1u; }
        return sign | h;
    }
    let h = (u32(ue) << 10u) | (m >> 13u);
    if ((m & 0x1000u) != 0u && (m & 0x2fffu) != 0u) { return sign | (h + 1u); }
    return sign | h;
}

fn bf16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) { return (b >> 16u) | 0x40u; }
    if ((b & 0x8000u) != 0u && (b & 0x17fffu) != 0u) { return (b >> 16u) + 1u; }
    return b >> 16u;
}
"#;

/// The WGSL type a kernel computes in for a float dtype.
pub(crate) fn scalar(dtype: DType) -> &'static str {
    match dtype {
        DType::F64 => "f64",
        _ => "f32",
    }
}

/// Whether the backend has elementwise kernels computing in `dtype`.
pub(crate) fn is_compute(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F64)
}

/// `u32` for a size, or a panic naming the limit: kernels index with 32 bits.
pub(crate) fn u32_of(what: &str, v: usize) -> u32 {
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

pub(crate) fn groups_for(n: usize) -> u64 {
    (n as u64).div_ceil(u64::from(WORKGROUP))
}

/// Binding `b` as an array of `ty`, read-only or read-write.
pub(crate) fn binding(b: u32, name: &str, ty: &str, write: bool) -> String {
    let access = if write { "read_write" } else { "read" };
    format!("@group(0) @binding({b}) var<storage, {access}> {name}: array<{ty}>;\n")
}

fn enable_f64(dtypes: &[DType]) -> &'static str {
    // wgpu's WGSL front end accepts f64 once SHADER_F64 is enabled on the device; no
    // `enable` directive exists for it.
    let _ = dtypes;
    ""
}

/// Fills the first `n_words` words of `buf` with `pattern[0], pattern[1], pattern[0], ...`.
pub(crate) fn fill(ctx: &'static Ctx, buf: &Buffer, n_words: u64, pattern: [u32; 2]) {
    let src = format!(
        "{PRELUDE}{}{MAIN_1D}    if (i >= P[0]) {{ return; }}\n    Y[i] = select(P[1], P[2], (i & 1u) == 1u);\n}}\n",
        binding(1, "Y", "u32", true)
    );
    let n = u32_of("element count", n_words as usize);
    ctx.dispatch(&src, &[n, pattern[0], pattern[1]], &[buf], groups_for(n_words as usize));
}

/// An expression reading element position `o` of binding `X` (holding `dtype`) as `ty`.
fn load(dtype: DType, x: &str, o: &str, ty: &str) -> String {
    match dtype {
        DType::F32 | DType::F64 | DType::Bool => format!("{ty}({x}[{o}])"),
        DType::F16 => format!("{ty}(unpack2x16float({x}[({o}) >> 1u])[({o}) & 1u])"),
        DType::BF16 => format!("{ty}(bitcast<f32>((({x}[({o}) >> 1u] >> ((({o}) & 1u) * 16u)) & 0xffffu) << 16u))"),
        DType::I64 => unreachable!("i64 is copied, never converted, by GPU kernels"),
    }
}

/// The array type of a binding holding `dtype`.
fn array_ty(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "f32",
        DType::F64 => "f64",
        _ => "u32",
    }
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
    let (body, threads) = match dtype {
        DType::F16 | DType::BF16 => {
            // One thread per output word: two 16-bit elements.
            let half = |o: &str| {
                if from == dtype {
                    format!("((X[({o}) >> 1u] >> ((({o}) & 1u) * 16u)) & 0xffffu)")
                } else {
                    let f = if dtype == DType::F16 { "f16_bits" } else { "bf16_bits" };
                    format!("{f}(f32({}))", load(from, "X", o, value_ty))
                }
            };
            (
                format!(
                    "    let e = 2u * i;\n    if (e >= P[0]) {{ return; }}\n    let lo = {};\n    var hi = 0u;\n    \
                     if (e + 1u < P[0]) {{ hi = {}; }}\n    Y[i] = lo | (hi << 16u);\n",
                    half("at(e, 0u)"),
                    half("at(e + 1u, 0u)")
                ),
                n.div_ceil(2),
            )
        }
        _ if from == dtype => {
            let w = byte_len(dtype, 1) / 4;
            let mut b = "    if (i >= P[0]) { return; }\n    let o = at(i, 0u);\n".to_string();
            for j in 0..w {
                b += &format!("    Y[i * {w}u + {j}u] = X[o * {w}u + {j}u];\n");
            }
            (b, n)
        }
        DType::Bool => {
            // Nonzero, NaN included: on the bits in f32 (a shader compiler may fold
            // comparisons with NaN away), `!(v == 0.0)` in f64.
            let v = load(from, "X", "at(i, 0u)", value_ty);
            let test = if value_ty == "f32" {
                format!("(bitcast<u32>({v}) & 0x7fffffffu) != 0u")
            } else {
                format!("!({v} == 0.0)")
            };
            (format!("    if (i >= P[0]) {{ return; }}\n    Y[i] = select(0u, 1u, {test});\n"), n)
        }
        DType::F32 | DType::F64 => (
            format!("    if (i >= P[0]) {{ return; }}\n    Y[i] = {};\n", load(from, "X", "at(i, 0u)", scalar(dtype))),
            n,
        ),
        DType::I64 => unreachable!("returned None above"),
    };
    let same_words = from == dtype && !matches!(dtype, DType::F16 | DType::BF16);
    let (xt, yt) = if same_words { ("u32", "u32") } else { (array_ty(from), array_ty(dtype)) };
    let src = format!(
        "{}{PRELUDE}{HALF_CONVERSIONS}{}{}{MAIN_1D}{body}}}\n",
        enable_f64(&[from, dtype]),
        binding(1, "X", xt, false),
        binding(2, "Y", yt, true)
    );
    ctx.dispatch(&src, &params, &[x.buffer(), out.buffer()], groups_for(threads));
    Some(out)
}

/// A WGSL elementwise kernel: `out[i] = body`, reading operand `k` of `inputs` at
/// `at(i, k)` through its layout (all of `shape`), with the op's scalars as `p0`, `p1`.
fn elementwise(
    ctx: &'static Ctx,
    dtype: DType,
    out_dtype: DType,
    shape: &[usize],
    inputs: &[(&GpuStorage, &Layout, &str)],
    scalars: Option<[f64; 2]>,
    body: &str,
) -> GpuStorage {
    let n: usize = shape.iter().product();
    let out = GpuStorage::uninit(ctx, out_dtype, n);
    if n == 0 {
        return out;
    }
    let c = scalar(dtype);
    let mut decls = String::new();
    let mut reads = String::new();
    let mut bufs: Vec<&Buffer> = Vec::new();
    let mut next = 1;
    let k_buf;
    if let Some([a, b]) = scalars {
        decls += &binding(next, "K", c, false);
        reads += "    let p0 = K[0];\n    let p1 = K[1];\n";
        let bytes: Vec<u8> = if dtype == DType::F64 {
            [a, b].iter().flat_map(|v| v.to_le_bytes()).collect()
        } else {
            [a as f32, b as f32].iter().flat_map(|v| v.to_le_bytes()).collect()
        };
        k_buf = ctx.upload(&bytes);
        bufs.push(&k_buf);
        next += 1;
    }
    for (k, (s, _, name)) in inputs.iter().enumerate() {
        decls += &binding(next, &format!("I{k}"), array_ty(s.dtype()), false);
        reads += &format!("    let {name} = I{k}[at(i, {k}u)];\n");
        bufs.push(s.buffer());
        next += 1;
    }
    decls += &binding(next, "Y", array_ty(out_dtype), true);
    bufs.push(out.buffer());
    let src =
        format!("{PRELUDE}{MATH}{decls}{MAIN_1D}    if (i >= P[0]) {{ return; }}\n{reads}    Y[i] = {body};\n}}\n");
    let layouts: Vec<&Layout> = inputs.iter().map(|(_, l, _)| *l).collect();
    ctx.dispatch(&src, &strided_params(shape, &layouts), &bufs, groups_for(n));
    out
}

fn supports(ctx: &Ctx, dtype: DType, w: &Wgsl) -> bool {
    dtype == DType::F32 || (dtype == DType::F64 && ctx.f64 && !w.f32_only)
}

/// `f(x)` elementwise.
pub(crate) fn unary(x: &GpuStorage, l: &Layout, w: &Wgsl, scalars: [f64; 2]) -> Option<GpuStorage> {
    let ctx = x.ctx();
    supports(ctx, x.dtype(), w).then(|| {
        let t = scalar(x.dtype());
        elementwise(ctx, x.dtype(), x.dtype(), l.shape(), &[(x, l, "x")], Some(scalars), &format!("{t}({})", w.f))
    })
}

/// `g * f'(x, y)` elementwise.
pub(crate) fn unary_grad(
    (g, lg): (&GpuStorage, &Layout),
    (x, lx): (&GpuStorage, &Layout),
    (y, ly): (&GpuStorage, &Layout),
    w: &Wgsl,
    scalars: [f64; 2],
) -> Option<GpuStorage> {
    let ctx = g.ctx();
    supports(ctx, g.dtype(), w).then(|| {
        let body = format!("g * {}({})", scalar(g.dtype()), w.d1);
        elementwise(
            ctx,
            g.dtype(),
            g.dtype(),
            lg.shape(),
            &[(g, lg, "g"), (x, lx, "x"), (y, ly, "y")],
            Some(scalars),
            &body,
        )
    })
}

/// `f(a, b)` elementwise over layouts broadcast to one shape.
pub(crate) fn binary((a, la): (&GpuStorage, &Layout), (b, lb): (&GpuStorage, &Layout), w: &Wgsl) -> Option<GpuStorage> {
    let ctx = a.ctx();
    supports(ctx, a.dtype(), w).then(|| {
        elementwise(ctx, a.dtype(), a.dtype(), la.shape(), &[(a, la, "a"), (b, lb, "b")], None, &format!("({})", w.f))
    })
}

/// `g * df/da` (`lhs`) or `g * df/db` at the shape of `g`.
pub(crate) fn binary_grad(
    (g, lg): (&GpuStorage, &Layout),
    (a, la): (&GpuStorage, &Layout),
    (b, lb): (&GpuStorage, &Layout),
    w: &Wgsl,
    lhs: bool,
) -> Option<GpuStorage> {
    let ctx = g.ctx();
    supports(ctx, g.dtype(), w).then(|| {
        let body = format!("g * {}({})", scalar(g.dtype()), if lhs { w.d1 } else { w.d2 });
        elementwise(ctx, g.dtype(), g.dtype(), lg.shape(), &[(g, lg, "g"), (a, la, "a"), (b, lb, "b")], None, &body)
    })
}

/// A bool buffer: for each pair, whether its ordering is one of `accept` (less, equal,
/// greater); false where unordered (NaN).
pub(crate) fn compare(
    (a, la): (&GpuStorage, &Layout),
    (b, lb): (&GpuStorage, &Layout),
    accept: [bool; 3],
) -> Option<GpuStorage> {
    if !is_compute(a.dtype()) {
        return None;
    }
    let [lt, eq, gt] = accept.map(|t| if t { "1u" } else { "0u" });
    let body = format!("select(select(select(0u, {gt}, a > b), {eq}, a == b), {lt}, a < b)");
    Some(elementwise(a.ctx(), a.dtype(), DType::Bool, la.shape(), &[(a, la, "a"), (b, lb, "b")], None, &body))
}

/// `a` where the bool buffer `c` is true, `b` elsewhere.
pub(crate) fn select(
    (c, lc): (&GpuStorage, &Layout),
    (a, la): (&GpuStorage, &Layout),
    (b, lb): (&GpuStorage, &Layout),
) -> Option<GpuStorage> {
    if !matches!(a.dtype(), DType::F32 | DType::F64 | DType::Bool) {
        return None;
    }
    Some(elementwise(
        c.ctx(),
        a.dtype(),
        a.dtype(),
        lc.shape(),
        &[(c, lc, "c"), (a, la, "a"), (b, lb, "b")],
        None,
        "select(b, a, c != 0u)",
    ))
}

/// Logical not of a bool buffer.
pub(crate) fn logical_not(x: &GpuStorage, l: &Layout) -> GpuStorage {
    elementwise(x.ctx(), DType::Bool, DType::Bool, l.shape(), &[(x, l, "x")], None, "select(1u, 0u, x != 0u)")
}

/// Tiled matrix product: each workgroup of 16x16 threads computes a 64x64 block of one
/// batch entry, 4x4 per thread, staging 64x16 slices of A and B in workgroup memory.
/// `C = alpha * A @ B (+ beta * I)`.
const MATMUL: &str = r#"
var<workgroup> As: array<array<T, 64>, 16>;
var<workgroup> Bs: array<array<T, 64>, 16>;

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let m = P[0]; let k = P[1]; let n = P[2]; let batch = P[3];
    let rsa = P[4]; let csa = P[5]; let rsb = P[6]; let csb = P[7];
    let rsi = P[8]; let csi = P[9]; let oi = P[10];
    let bt = wg.z;
    let oa = P[11u + bt];
    let ob = P[11u + batch + bt];
    let row0 = wg.y * 64u;
    let col0 = wg.x * 64u;
    let tid = lid.y * 16u + lid.x;
    var acc: array<array<T, 4>, 4>;
    for (var i = 0u; i < 4u; i++) { for (var j = 0u; j < 4u; j++) { acc[i][j] = T(0.0); } }
    for (var t = 0u; t < k; t += 16u) {
        for (var e = 0u; e < 4u; e++) {
            let idx = tid + e * 256u;
            let r = idx / 16u; let kk = idx % 16u;
            var v = T(0.0);
            if (row0 + r < m && t + kk < k) { v = A[oa + (row0 + r) * rsa + (t + kk) * csa]; }
            As[kk][r] = v;
            let kb = idx / 64u; let c = idx % 64u;
            var w = T(0.0);
            if (t + kb < k && col0 + c < n) { w = B[ob + (t + kb) * rsb + (col0 + c) * csb]; }
            Bs[kb][c] = w;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk++) {
            var av: array<T, 4>;
            var bv: array<T, 4>;
            for (var i = 0u; i < 4u; i++) { av[i] = As[kk][lid.y * 4u + i]; bv[i] = Bs[kk][lid.x * 4u + i]; }
            for (var i = 0u; i < 4u; i++) { for (var j = 0u; j < 4u; j++) { acc[i][j] = acc[i][j] + av[i] * bv[j]; } }
        }
        workgroupBarrier();
    }
    let alpha = K[0]; let beta = K[1];
    for (var i = 0u; i < 4u; i++) {
        let r = row0 + lid.y * 4u + i;
        if (r >= m) { continue; }
        for (var j = 0u; j < 4u; j++) {
            let c = col0 + lid.x * 4u + j;
            if (c >= n) { continue; }
            var v = alpha * acc[i][j];
            EPILOGUE
            Y[bt * m * n + r * n + c] = v;
        }
    }
}
"#;

/// `alpha * A @ B + beta * I` for `batch_offsets` matrices of A and B (element offsets of
/// each batch entry), A `[m, k]` with strides `(rsa, csa)`, B `[k, n]` with `(rsb, csb)`;
/// `input` is I viewed as `[m, n]` (`beta` is then applied; with `beta == 0` I is not read).
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
    if !is_compute(dtype) || batch_offsets.len() > 65535 {
        return None;
    }
    let batch = batch_offsets.len();
    let out = GpuStorage::uninit(ctx, dtype, batch * m * n);
    if batch * m * n == 0 {
        return Some(out);
    }
    let (li_strides, oi) = match input {
        Some((_, li)) => ([li.strides()[0], li.strides()[1]], li.offset()),
        None => ([0, 0], 0),
    };
    let mut p: Vec<u32> = [m, k, n, batch, a_strides[0], a_strides[1], b_strides[0], b_strides[1]]
        .iter()
        .chain(&li_strides)
        .chain(&[oi])
        .map(|&v| u32_of("matrix size or stride", v))
        .collect();
    p.extend(batch_offsets.iter().map(|&(oa, _)| u32_of("offset", oa)));
    p.extend(batch_offsets.iter().map(|&(_, ob)| u32_of("offset", ob)));
    let t = scalar(dtype);
    let (epilogue, input_decl) = match input {
        Some((i, _)) if beta != 0.0 => {
            ("v = v + beta * I[oi + r * rsi + c * csi];".to_string(), binding(4, "I", array_ty(i.dtype()), false))
        }
        _ => ("let unused = beta * T(rsi + csi + oi);".to_string(), String::new()),
    };
    let body = MATMUL.replace("EPILOGUE", &epilogue).replace("T(", &format!("{t}(")).replace("<T,", &format!("<{t},"));
    let src = format!(
        "@group(0) @binding(0) var<storage, read> P: array<u32>;\n{}{}{}{}{input_decl}{body}",
        binding(1, "K", t, false),
        binding(2, "A", t, false),
        binding(3, "B", t, false),
        binding(if input_decl.is_empty() { 4 } else { 5 }, "Y", t, true),
    );
    let k_bytes: Vec<u8> = if dtype == DType::F64 {
        [alpha, beta].iter().flat_map(|v| v.to_le_bytes()).collect()
    } else {
        [alpha as f32, beta as f32].iter().flat_map(|v| v.to_le_bytes()).collect()
    };
    let kb = ctx.upload(&k_bytes);
    let mut bufs = vec![&kb, a.buffer(), b.buffer()];
    if let (Some((i, _)), false) = (input, input_decl.is_empty()) {
        bufs.push(i.buffer());
    }
    bufs.push(out.buffer());
    ctx.dispatch3(&src, &p, &bufs, [n.div_ceil(64) as u32, m.div_ceil(64) as u32, batch as u32]);
    Some(out)
}

/// A reduction or row kernel run by one 256-thread workgroup per output line.
const ROW_PRELUDE: &str = r#"
var<workgroup> S: array<T, 256>;

fn tree_sum(t: u32) {
    for (var s = 128u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (t < s) { S[t] = S[t] + S[t + s]; }
    }
    workgroupBarrier();
}

fn tree_max(t: u32) {
    for (var s = 128u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (t < s) {
            let a = S[t]; let b = S[t + s];
            // NaN wins, as in the CPU kernel.
            if (isnan_(f32(b)) || b > a) { S[t] = b; }
        }
    }
    workgroupBarrier();
}
"#;

/// Sums of `x` viewed through `l` (reduced dims last, so each output is a run of `r`
/// consecutive row-major elements of `l`): `n_out` outputs.
pub(crate) fn sum_lines(x: &GpuStorage, l: &Layout, n_out: usize, r: usize) -> Option<GpuStorage> {
    let ctx = x.ctx();
    let dtype = x.dtype();
    if !is_compute(dtype) || (dtype == DType::F64 && !ctx.f64) {
        return None;
    }
    let out = GpuStorage::uninit(ctx, dtype, n_out);
    if n_out == 0 {
        return Some(out);
    }
    let t = scalar(dtype);
    let mut p = strided_params(l.shape(), &[l]);
    p.push(u32_of("line length", r));
    p.push(u32_of("output count", n_out));
    let src = format!(
        "{PRELUDE}{}{}{}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let ex = extras(1u);
    let r = P[ex]; let n_out = P[ex + 1u];
    let o = wg.x + wg.y * nw.x;
    var acc = {t}(0.0);
    if (o < n_out) {{
        for (var j = t; j < r; j += 256u) {{ acc = acc + X[at(o * r + j, 0u)]; }}
    }}
    S[t] = acc;
    tree_sum(t);
    if (t == 0u && o < n_out) {{ Y[o] = S[0]; }}
}}
",
        ROW_PRELUDE.replace("<T,", &format!("<{t},")),
        binding(1, "X", t, false),
        binding(2, "Y", t, true),
    );
    ctx.dispatch(&src, &p, &[x.buffer(), out.buffer()], n_out as u64);
    Some(out)
}

/// Softmax or log-softmax of `x` through `l` viewed as `[outer, n, inner]`, along `n`.
pub(crate) fn softmax(
    x: &GpuStorage,
    l: &Layout,
    (outer, n, inner): (usize, usize, usize),
    log: bool,
) -> Option<GpuStorage> {
    let ctx = x.ctx();
    if x.dtype() != DType::F32 {
        return None; // exp and log exist in f32 only
    }
    let total = outer * n * inner;
    let out = GpuStorage::uninit(ctx, DType::F32, total);
    let lines = outer * inner;
    if total == 0 {
        return Some(out);
    }
    let mut p = strided_params(l.shape(), &[l]);
    p.extend([u32_of("softmax length", n), u32_of("inner size", inner), u32_of("line count", lines)]);
    let write = if log { "Y[e] = v - mx - log(total);" } else { "Y[e] = exp(v - mx) / total;" };
    let src = format!(
        "{PRELUDE}{}{}{}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let ex = extras(1u);
    let n = P[ex]; let inner = P[ex + 1u]; let lines = P[ex + 2u];
    let line = wg.x + wg.y * nw.x;
    let valid = line < lines;
    let base = (line / inner) * n * inner + line % inner;
    var m = -bitcast<f32>(0x7f800000u);
    if (valid) {{
        for (var j = t; j < n; j += 256u) {{
            let v = X[at(base + j * inner, 0u)];
            if (isnan_(v) || v > m) {{ m = v; }}
        }}
    }}
    S[t] = m;
    tree_max(t);
    let mx = S[0];
    workgroupBarrier();
    var acc = 0.0;
    if (valid) {{
        for (var j = t; j < n; j += 256u) {{ acc = acc + exp(X[at(base + j * inner, 0u)] - mx); }}
    }}
    S[t] = acc;
    tree_sum(t);
    let total = S[0];
    if (valid) {{
        for (var j = t; j < n; j += 256u) {{
            let e = base + j * inner;
            let v = X[at(e, 0u)];
            {write}
        }}
    }}
}}
",
        ROW_PRELUDE.replace("<T,", "<f32,"),
        binding(1, "X", "f32", false),
        binding(2, "Y", "f32", true),
    );
    ctx.dispatch(&src, &p, &[x.buffer(), out.buffer()], lines as u64);
    Some(out)
}

/// `dst[at(i)] = vals[i]` for the contiguous `vals` (of `dst`'s dtype, 32- or 64-bit
/// elements) and the positions `layout` selects in `dst`.
pub(crate) fn scatter(dst: &GpuStorage, layout: &Layout, vals: &GpuStorage) {
    let n = layout.numel();
    if n == 0 {
        return;
    }
    let w = byte_len(dst.dtype(), 1) / 4;
    let mut body = "    if (i >= P[0]) { return; }\n    let o = at(i, 0u);\n".to_string();
    for j in 0..w {
        body += &format!("    Y[o * {w}u + {j}u] = X[i * {w}u + {j}u];\n");
    }
    let src = format!("{PRELUDE}{}{}{MAIN_1D}{body}}}\n", binding(1, "X", "u32", false), binding(2, "Y", "u32", true));
    dst.ctx().dispatch(&src, &strided_params(layout.shape(), &[layout]), &[vals.buffer(), dst.buffer()], groups_for(n));
}

/// Whether the index kernels copy this dtype (32- and 64-bit elements; 16-bit ones take
/// the host path).
pub(crate) fn words_ok(dtype: DType) -> bool {
    words(dtype).is_some()
}

/// Words per element for the index kernels' copies, or `None` for 16-bit dtypes.
fn words(dtype: DType) -> Option<u64> {
    (!matches!(dtype, DType::F16 | DType::BF16)).then(|| byte_len(dtype, 1) / 4)
}

fn copy_words(w: u64, dst: &str, src: &str) -> String {
    (0..w).map(|j| format!("    Y[({dst}) * {w}u + {j}u] = X[({src}) * {w}u + {j}u];\n")).collect()
}

/// `index_select` along `d` of `x` through `l`, with validated indices `idx` (`k` of them).
pub(crate) fn index_select(x: &GpuStorage, l: &Layout, idx: &Buffer, k: usize, d: usize) -> Option<GpuStorage> {
    let w = words(x.dtype())?;
    let ctx = x.ctx();
    let shape = l.shape();
    let (outer, n, inner): (usize, usize, usize) =
        (shape[..d].iter().product(), shape[d], shape[d + 1..].iter().product());
    let total = outer * k * inner;
    let out = GpuStorage::uninit(ctx, x.dtype(), total);
    if total == 0 {
        return Some(out);
    }
    let mut p = strided_params(shape, &[l]);
    p.extend([u32_of("count", total), u32_of("index count", k), u32_of("size", n), u32_of("inner size", inner)]);
    let body = format!(
        "    let ex = extras(1u);
    if (i >= P[ex]) {{ return; }}
    let k = P[ex + 1u]; let n = P[ex + 2u]; let inner = P[ex + 3u];
    let o = i / (k * inner); let j = (i / inner) % k; let t = i % inner;
    let s = at((o * n + I[j]) * inner + t, 0u);
{}",
        copy_words(w, "i", "s")
    );
    let src = format!(
        "{PRELUDE}{}{}{}{MAIN_1D}{body}}}\n",
        binding(1, "X", "u32", false),
        binding(2, "I", "u32", false),
        binding(3, "Y", "u32", true)
    );
    ctx.dispatch(&src, &p, &[x.buffer(), idx, out.buffer()], groups_for(total));
    Some(out)
}

/// `gather` along `d`: `out[p] = x[p with dim d replaced by idx[p]]` over the index's shape.
pub(crate) fn gather(x: &GpuStorage, l: &Layout, idx: &Buffer, li_shape: &[usize], d: usize) -> Option<GpuStorage> {
    let w = words(x.dtype())?;
    let ctx = x.ctx();
    let total: usize = li_shape.iter().product();
    let out = GpuStorage::uninit(ctx, x.dtype(), total);
    if total == 0 {
        return Some(out);
    }
    let mut strides: Vec<usize> = l.strides().to_vec();
    let step = strides.get(d).copied().unwrap_or(0);
    if !strides.is_empty() {
        strides[d] = 0;
    }
    let base = Layout::new(li_shape.into(), strides.as_slice().into(), l.offset());
    let mut p = strided_params(li_shape, &[&base]);
    p.push(u32_of("stride", step));
    let body = format!(
        "    if (i >= P[0]) {{ return; }}\n    let s = at(i, 0u) + I[i] * P[extras(1u)];\n{}",
        copy_words(w, "i", "s")
    );
    let src = format!(
        "{PRELUDE}{}{}{}{MAIN_1D}{body}}}\n",
        binding(1, "X", "u32", false),
        binding(2, "I", "u32", false),
        binding(3, "Y", "u32", true)
    );
    ctx.dispatch(&src, &p, &[x.buffer(), idx, out.buffer()], groups_for(total));
    Some(out)
}

/// Adds `f32` values into `Y` (an `array<atomic<u32>>`) with a compare-exchange loop: the
/// order of additions to one element is not fixed (as PyTorch's CUDA `index_add_`).
const ATOMIC_ADD: &str = r#"
// The offset of row-major element `i` of the shape through strides held at `P[ex..]`.
fn dst_offset(i: u32, ex: u32) -> u32 {
    var rem = i;
    var off = 0u;
    var d = P[1];
    loop {
        if (d == 0u) { break; }
        d = d - 1u;
        let s = P[2u + d];
        off = off + (rem % s) * P[ex + d];
        rem = rem / s;
    }
    return off;
}

fn add_at(p: u32, v: f32) {
    var old = atomicLoad(&Y[p]);
    loop {
        let r = atomicCompareExchangeWeak(&Y[p], old, bitcast<u32>(bitcast<f32>(old) + v));
        if (r.exchanged) { break; }
        old = r.old_value;
    }
}
"#;

/// `out = x + scatter(src)`: `out` starts as a contiguous copy of `x` through `l`, then every
/// element `e` of `src` (through `ls`, of `shape`) is added at `dst(e)`, a WGSL expression of
/// `e`, the extras `P[ex..]` and the indices `I`.
fn scatter_add_into(
    x: &GpuStorage,
    l: &Layout,
    (src, ls): (&GpuStorage, &Layout),
    shape: &[usize],
    idx: &Buffer,
    extras: &[u32],
    dst: &str,
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
    let src_code = format!(
        "{PRELUDE}{}{}{}{ATOMIC_ADD}{MAIN_1D}    if (i >= P[0]) {{ return; }}\n    let ex = extras(1u);\n    add_at({dst}, S[at(i, 0u)]);\n}}\n",
        binding(1, "S", "f32", false),
        binding(2, "I", "u32", false),
        binding(3, "Y", "atomic<u32>", true)
    );
    out.ctx().dispatch(&src_code, &p, &[src.buffer(), idx, out.buffer()], groups_for(total));
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
    let shape = l.shape();
    let (n, inner): (usize, usize) = (shape[d], shape[d + 1..].iter().product());
    let k = ls.shape()[d];
    let extras = [u32_of("index count", k), u32_of("size", n), u32_of("inner size", inner)];
    let dst = "((i / (P[ex] * P[ex + 2u])) * P[ex + 1u] + I[(i / P[ex + 2u]) % P[ex]]) * P[ex + 2u] + i % P[ex + 2u]";
    scatter_add_into(x, l, (src, ls), ls.shape(), idx, &extras, dst)
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
    // The destination offset of `p`: through the output's contiguous strides with dim `d`
    // zeroed, plus `idx[p]` times that dim's stride. Passed as a second "operand" layout.
    let mut ostrides: Vec<usize> = crate::shape::contiguous_strides(l.shape()).to_vec();
    let step = ostrides.get(d).copied().unwrap_or(0);
    if !ostrides.is_empty() {
        ostrides[d] = 0;
    }
    let src_layout = Layout::new(li_shape.into(), ls.strides().into(), ls.offset());
    let dst_layout = Layout::new(li_shape.into(), ostrides.as_slice().into(), 0);
    // Extras: the destination layout's strides (rank of them), then the step.
    let mut extras: Vec<u32> = dst_layout.strides().iter().map(|&s| u32_of("stride", s)).collect();
    extras.push(u32_of("stride", step));
    let rank = li_shape.len();
    let dst = format!("dst_offset(i, ex) + I[i] * P[ex + {rank}u]");
    scatter_add_into(x, l, (src, &src_layout), li_shape, idx, &extras, &dst)
}

/// For each row of `n` elements of `rows`, the `i64` index of its largest (`largest`) or
/// smallest element; NaN wins over every number and the first of equal candidates is kept.
pub(crate) fn arg_extreme(x: &GpuStorage, rows: &Layout, n: usize, largest: bool) -> Option<GpuStorage> {
    if x.dtype() != DType::F32 {
        return None;
    }
    let ctx = x.ctx();
    let count = rows.numel() / n.max(1);
    let out = GpuStorage::uninit(ctx, DType::I64, count);
    if count == 0 {
        return Some(out);
    }
    let mut p = strided_params(rows.shape(), &[rows]);
    p.extend([u32_of("row length", n), u32_of("row count", count)]);
    let better = if largest { "b > a" } else { "b < a" };
    let src = format!(
        "{PRELUDE}{}{}
var<workgroup> V: array<f32, 256>;
var<workgroup> J: array<u32, 256>;

// Whether candidate (b, jb) beats (a, ja): NaN first, then the better value, then the
// earlier position.
fn beats(a: f32, ja: u32, b: f32, jb: u32) -> bool {{
    if (isnan_(a)) {{ return isnan_(b) && jb < ja; }}
    if (isnan_(b)) {{ return true; }}
    if ({better}) {{ return true; }}
    return b == a && jb < ja;
}}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
    let ex = extras(1u);
    let n = P[ex]; let rows = P[ex + 1u];
    let r = wg.x + wg.y * nw.x;
    var best = 0.0;
    var bj = 0xffffffffu;
    if (r < rows) {{
        for (var j = t; j < n; j += 256u) {{
            let v = X[at(r * n + j, 0u)];
            if (bj == 0xffffffffu || beats(best, bj, v, j)) {{ best = v; bj = j; }}
        }}
    }}
    V[t] = best;
    J[t] = bj;
    for (var s = 128u; s > 0u; s = s >> 1u) {{
        workgroupBarrier();
        if (t < s) {{
            let jb = J[t + s];
            if (jb != 0xffffffffu && (J[t] == 0xffffffffu || beats(V[t], J[t], V[t + s], jb))) {{
                V[t] = V[t + s];
                J[t] = jb;
            }}
        }}
    }}
    if (t == 0u && r < rows) {{
        Y[2u * r] = J[0];
        Y[2u * r + 1u] = 0u;
    }}
}}
",
        binding(1, "X", "f32", false),
        binding(2, "Y", "u32", true)
    );
    ctx.dispatch(&src, &p, &[x.buffer(), out.buffer()], count as u64);
    Some(out)
}

/// Running sums or products (`cumsum`, `cumprod`) along `n` of `x` through `l` viewed as
/// `[outer, n, inner]`: one thread per line, accumulating in `f64` and rounding each output
/// once, exactly as the CPU kernel. `None` (the host path) without `f64` shaders or for
/// dtypes other than `f32`/`f64`.
pub(crate) fn scan(
    x: &GpuStorage,
    l: &Layout,
    (outer, n, inner): (usize, usize, usize),
    scan: crate::backend::Scan,
) -> Option<GpuStorage> {
    let ctx = x.ctx();
    if !is_compute(x.dtype()) || !ctx.f64 {
        return None;
    }
    let out = GpuStorage::uninit(ctx, x.dtype(), l.numel());
    let lines = outer * inner;
    if lines == 0 || n == 0 {
        return Some(out);
    }
    let mut p = strided_params(l.shape(), &[l]);
    p.extend([u32_of("line length", n), u32_of("line stride", inner), u32_of("line count", lines)]);
    p.extend([u32::from(scan.prod), u32::from(scan.reverse)]);
    let t = scalar(x.dtype());
    let src = format!(
        "{PRELUDE}{}{}{MAIN_1D}    let ex = extras(1u);
    let n = P[ex]; let inner = P[ex + 1u];
    if (i >= P[ex + 2u]) {{ return; }}
    let prod = P[ex + 3u] == 1u;
    let rev = P[ex + 4u] == 1u;
    let first = (i / inner) * n * inner + i % inner;
    var acc = f64(0.0);
    if (prod) {{ acc = f64(1.0); }}
    for (var s = 0u; s < n; s = s + 1u) {{
        var k = s;
        if (rev) {{ k = n - 1u - s; }}
        let e = first + k * inner;
        let v = f64(X[at(e, 0u)]);
        if (prod) {{ acc = acc * v; }} else {{ acc = acc + v; }}
        Y[e] = {t}(acc);
    }}
}}
",
        binding(1, "X", t, false),
        binding(2, "Y", t, true)
    );
    ctx.dispatch(&src, &p, &[x.buffer(), out.buffer()], groups_for(lines));
    Some(out)
}

/// The longest line [`sort`] sorts on the device (its workgroup memory holds one line).
const SORT_MAX: usize = 1024;

/// Sorts every line of `f32` `x` through `l`, viewed as `[outer, n, inner]`, along `n` and
/// keeps the first `spec.k`: `(values, i64 positions)`, as the CPU kernel. One workgroup
/// per line runs a bitonic network on `(value, position)` pairs in a total order (value
/// with NaN above every number, then position), so the result is the stable sort's; for
/// unsorted `topk`, a second network orders the `k` kept pairs by position. `None` (the
/// host path) for other dtypes and lines longer than [`SORT_MAX`].
pub(crate) fn sort(
    x: &GpuStorage,
    l: &Layout,
    (outer, n, inner): (usize, usize, usize),
    spec: crate::backend::SortSpec,
) -> Option<(GpuStorage, GpuStorage)> {
    if x.dtype() != DType::F32 || n > SORT_MAX {
        return None;
    }
    let ctx = x.ctx();
    let lines = outer * inner;
    let len = lines * spec.k;
    let (values, indices) = (GpuStorage::uninit(ctx, DType::F32, len), GpuStorage::uninit(ctx, DType::I64, len));
    if len == 0 {
        return Some((values, indices));
    }
    let width = n.next_power_of_two().max(2);
    let mut p = strided_params(l.shape(), &[l]);
    p.extend([n, inner, lines, spec.k, width].map(|v| u32_of("sort size", v)));
    p.extend([u32::from(spec.descending), u32::from(!spec.sorted)]);
    let src = format!(
        "{PRELUDE}{}{}{}
const PAD: u32 = 0xffffffffu;
var<workgroup> V: array<f32, {SORT_MAX}>;
var<workgroup> J: array<u32, {SORT_MAX}>;

// -1, 0 or 1 as a is below, equal to or above b, NaN above every number.
fn cmpv(a: f32, b: f32) -> i32 {{
    let an = isnan_(a);
    let bn = isnan_(b);
    if (an && bn) {{ return 0; }}
    if (an) {{ return 1; }}
    if (bn) {{ return -1; }}
    if (a < b) {{ return -1; }}
    if (a > b) {{ return 1; }}
    return 0;
}}

// Whether pair (a, ja) comes strictly before (b, jb): mode 0 ascending, 1 descending
// (positions ascending on ties in both), 2 by position only; padding comes last.
fn before(mode: u32, a: f32, ja: u32, b: f32, jb: u32) -> bool {{
    if (ja == PAD) {{ return false; }}
    if (jb == PAD) {{ return true; }}
    if (mode == 2u) {{ return ja < jb; }}
    var c = cmpv(a, b);
    if (mode == 1u) {{ c = -c; }}
    return c < 0 || (c == 0 && ja < jb);
}}

// The bitonic network over the `width` pairs in V and J.
fn bitonic(mode: u32, width: u32, t0: u32) {{
    for (var size = 2u; size <= width; size = size << 1u) {{
        for (var stride = size >> 1u; stride > 0u; stride = stride >> 1u) {{
            workgroupBarrier();
            for (var t = t0; t < width / 2u; t = t + 256u) {{
                let i = 2u * stride * (t / stride) + t % stride;
                let j = i + stride;
                var swap = false;
                if ((i & size) == 0u) {{
                    swap = before(mode, V[j], J[j], V[i], J[i]);
                }} else {{
                    swap = before(mode, V[i], J[i], V[j], J[j]);
                }}
                if (swap) {{
                    let v = V[i]; V[i] = V[j]; V[j] = v;
                    let w = J[i]; J[i] = J[j]; J[j] = w;
                }}
            }}
        }}
    }}
    workgroupBarrier();
}}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) t0: u32) {{
    let ex = extras(1u);
    let n = P[ex]; let inner = P[ex + 1u]; let lines = P[ex + 2u]; let k = P[ex + 3u]; let width = P[ex + 4u];
    let descending = P[ex + 5u]; let by_position = P[ex + 6u];
    let r = min(wg.x + wg.y * nw.x, lines - 1u);
    let o = r / inner;
    let c = r % inner;
    for (var t = t0; t < width; t = t + 256u) {{
        if (t < n) {{
            V[t] = X[at((o * n + t) * inner + c, 0u)];
            J[t] = t;
        }} else {{
            V[t] = 0.0;
            J[t] = PAD;
        }}
    }}
    bitonic(descending, width, t0);
    if (by_position == 1u) {{
        for (var t = t0; t < width; t = t + 256u) {{
            if (t >= k) {{ J[t] = PAD; }}
        }}
        bitonic(2u, width, t0);
    }}
    if (wg.x + wg.y * nw.x >= lines) {{ return; }}
    for (var t = t0; t < k; t = t + 256u) {{
        let e = (o * k + t) * inner + c;
        Y[e] = V[t];
        I[2u * e] = J[t];
        I[2u * e + 1u] = 0u;
    }}
}}
",
        binding(1, "X", "f32", false),
        binding(2, "Y", "f32", true),
        binding(3, "I", "u32", true)
    );
    ctx.dispatch(&src, &p, &[x.buffer(), values.buffer(), indices.buffer()], lines as u64);
    Some((values, indices))
}

/// Uploads a host buffer made without reading any device value (dropout masks).
pub(crate) fn upload(ctx: &'static Ctx, c: &crate::backend::cpu::CpuStorage) -> GpuStorage {
    GpuStorage::from_cpu(ctx, c, &Layout::contiguous(&[c.len()]))
}

/// The convolution geometry as kernel parameters: `[n, c, h, w, o, kh, kw, ho, wo, sh, sw,
/// ph, pw, dh, dw, groups]`.
fn conv_params(g: &crate::backend::ConvGeometry) -> Vec<u32> {
    let o = &g.opt;
    [
        g.n,
        g.c,
        g.h,
        g.w,
        g.o,
        g.kh,
        g.kw,
        g.ho,
        g.wo,
        o.stride.0,
        o.stride.1,
        o.padding.0,
        o.padding.1,
        o.dilation.0,
        o.dilation.1,
        o.groups,
    ]
    .iter()
    .map(|&v| u32_of("convolution size", v))
    .collect()
}

const CONV_PRELUDE: &str = r#"
@group(0) @binding(0) var<storage, read> P: array<u32>;
struct Geo { n: u32, c: u32, h: u32, w: u32, o: u32, kh: u32, kw: u32, ho: u32, wo: u32,
             sh: u32, sw: u32, ph: u32, pw: u32, dh: u32, dw: u32, groups: u32 }
fn geo() -> Geo {
    return Geo(P[0], P[1], P[2], P[3], P[4], P[5], P[6], P[7], P[8], P[9], P[10], P[11], P[12], P[13], P[14], P[15]);
}
fn flat(id: vec3<u32>, nw: vec3<u32>) -> u32 { return id.x + id.y * nw.x * 256u; }
"#;

/// The column matrices of a convolution input: `[n * groups, c/groups * kh * kw, ho * wo]`,
/// zero where a tap falls in the padding.
fn im2col(x: &GpuStorage, g: &crate::backend::ConvGeometry) -> GpuStorage {
    let ctx = x.ctx();
    let t = scalar(x.dtype());
    let total = g.n * g.opt.groups * g.col_rows() * g.out_pixels();
    let cols = GpuStorage::uninit(ctx, x.dtype(), total);
    let src = format!(
        "{CONV_PRELUDE}{}{}{MAIN_1D}    let G = geo();
    let cg = G.c / G.groups;
    let rows = cg * G.kh * G.kw;
    let px = G.ho * G.wo;
    if (i >= G.n * G.groups * rows * px) {{ return; }}
    let p = i % px; let r = (i / px) % rows; let b = i / (px * rows);
    let s = b / G.groups; let grp = b % G.groups;
    let cc = r / (G.kh * G.kw); let ki = (r / G.kw) % G.kh; let kj = r % G.kw;
    let iy = i32((p / G.wo) * G.sh + ki * G.dh) - i32(G.ph);
    let ix = i32((p % G.wo) * G.sw + kj * G.dw) - i32(G.pw);
    var v = {t}(0.0);
    if (iy >= 0 && iy < i32(G.h) && ix >= 0 && ix < i32(G.w)) {{
        v = X[((s * G.c + grp * cg + cc) * G.h + u32(iy)) * G.w + u32(ix)];
    }}
    Y[i] = v;
}}
",
        binding(1, "X", t, false),
        binding(2, "Y", t, true)
    );
    ctx.dispatch(&src, &conv_params(g), &[x.buffer(), cols.buffer()], groups_for(total));
    cols
}

/// A convolution: im2col, then one GEMM per (sample, group) whose `[og, ho * wo]` results
/// land exactly where `[n, o, ho, wo]` wants them; the bias is added after.
pub(crate) fn conv2d(
    x: &GpuStorage,
    w: &GpuStorage,
    bias: Option<&GpuStorage>,
    g: &crate::backend::ConvGeometry,
) -> Option<GpuStorage> {
    if !is_compute(x.dtype()) {
        return None;
    }
    let (groups, og, rows, px) = (g.opt.groups, g.out_channels_per_group(), g.col_rows(), g.out_pixels());
    let cols = im2col(x, g);
    let offsets: Vec<(usize, usize)> = (0..g.n * groups).map(|b| ((b % groups) * og * rows, b * rows * px)).collect();
    let out = matmul(w, &cols, (og, rows, px), ([rows, 1], [px, 1]), &offsets, None, (0.0, 1.0))?;
    let Some(bias) = bias else { return Some(out) };
    let shape = [g.n, g.o, g.ho, g.wo];
    let lo = Layout::contiguous(&shape);
    let lb = Layout::new(shape.as_slice().into(), [0, 1, 0, 0].as_slice().into(), 0);
    let add = Wgsl::binary("a + b", "1.0", "1.0", false);
    binary((&out, &lo), (bias, &lb), &add)
}

/// The input and weight gradients of [`conv2d`] (each only when asked for; an empty buffer
/// otherwise): `dW` sums per-sample GEMMs `dY_g @ cols_g^T`, `dX` is a GEMM `W_g^T @ dY_g`
/// folded back by col2im (each input pixel gathers the taps that read it: no atomics, one
/// fixed order).
pub(crate) fn conv2d_backward(
    dy: &GpuStorage,
    x: &GpuStorage,
    w: &GpuStorage,
    g: &crate::backend::ConvGeometry,
    (need_dx, need_dw): (bool, bool),
) -> Option<(GpuStorage, GpuStorage)> {
    if !is_compute(x.dtype()) {
        return None;
    }
    let ctx = x.ctx();
    let dtype = x.dtype();
    let (groups, og, rows, px) = (g.opt.groups, g.out_channels_per_group(), g.col_rows(), g.out_pixels());
    let batch = g.n * groups;
    let dw = if need_dw {
        let cols = im2col(x, g);
        // Per (sample, group): dY [og, px] @ cols^T [px, rows] -> [n, groups, og, rows].
        let offsets: Vec<(usize, usize)> = (0..batch).map(|b| (b * og * px, b * rows * px)).collect();
        let per = matmul(dy, &cols, (og, px, rows), ([px, 1], [1, px]), &offsets, None, (0.0, 1.0))?;
        let l = Layout::contiguous(&[g.n, groups * og * rows]).permute(&[1, 0]);
        sum_lines(&per, &l, groups * og * rows, g.n)?
    } else {
        GpuStorage::uninit(ctx, dtype, 0)
    };
    let dx = if need_dx {
        // Per (sample, group): W_g^T [rows, og] @ dY [og, px] -> dcols [n * groups, rows, px].
        let offsets: Vec<(usize, usize)> = (0..batch).map(|b| ((b % groups) * og * rows, b * og * px)).collect();
        let dcols = matmul(w, dy, (rows, og, px), ([1, rows], [px, 1]), &offsets, None, (0.0, 1.0))?;
        let total = g.n * g.c * g.h * g.w;
        let dx = GpuStorage::uninit(ctx, dtype, total);
        let t = scalar(dtype);
        let src = format!(
            "{CONV_PRELUDE}{}{}{MAIN_1D}    let G = geo();
    if (i >= G.n * G.c * G.h * G.w) {{ return; }}
    let x = i % G.w; let y = (i / G.w) % G.h; let ch = (i / (G.w * G.h)) % G.c; let s = i / (G.w * G.h * G.c);
    let cg = G.c / G.groups;
    let grp = ch / cg; let cc = ch % cg;
    let rows = cg * G.kh * G.kw;
    let px = G.ho * G.wo;
    let base = (s * G.groups + grp) * rows * px;
    var acc = {t}(0.0);
    for (var ki = 0u; ki < G.kh; ki++) {{
        let ny = i32(y + G.ph) - i32(ki * G.dh);
        if (ny < 0 || u32(ny) % G.sh != 0u) {{ continue; }}
        let oy = u32(ny) / G.sh;
        if (oy >= G.ho) {{ continue; }}
        for (var kj = 0u; kj < G.kw; kj++) {{
            let nx = i32(x + G.pw) - i32(kj * G.dw);
            if (nx < 0 || u32(nx) % G.sw != 0u) {{ continue; }}
            let ox = u32(nx) / G.sw;
            if (ox >= G.wo) {{ continue; }}
            acc = acc + D[base + ((cc * G.kh + ki) * G.kw + kj) * px + oy * G.wo + ox];
        }}
    }}
    Y[i] = acc;
}}
",
            binding(1, "D", t, false),
            binding(2, "Y", t, true)
        );
        ctx.dispatch(&src, &conv_params(g), &[dcols.buffer(), dx.buffer()], groups_for(total));
        dx
    } else {
        GpuStorage::uninit(ctx, dtype, 0)
    };
    Some((dx, dw))
}

/// Pooling parameters: `[planes, h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw, mode]`
/// (`mode`: 0 max, 1 average with padding counted, 2 average without, 3 adaptive).
fn pool_params(pl: &crate::backend::PoolPlanes, k: [usize; 8], mode: u32) -> Vec<u32> {
    let mut p: Vec<u32> =
        [pl.planes, pl.h, pl.w, pl.ho, pl.wo].iter().chain(&k).map(|&v| u32_of("pooling size", v)).collect();
    p.push(mode);
    p
}

const POOL_PRELUDE: &str = r#"
@group(0) @binding(0) var<storage, read> P: array<u32>;

// NaN, tested on the bits: a shader compiler may assume comparisons never see NaN and fold
// `x != x` to false (llvmpipe does). f64 values are tested through f32 (NaN stays NaN).
fn isnan_(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}
struct Pool { planes: u32, h: u32, w: u32, ho: u32, wo: u32, kh: u32, kw: u32, sh: u32, sw: u32,
              ph: u32, pw: u32, dh: u32, dw: u32, mode: u32 }
fn pool() -> Pool {
    return Pool(P[0], P[1], P[2], P[3], P[4], P[5], P[6], P[7], P[8], P[9], P[10], P[11], P[12], P[13]);
}
fn flat(id: vec3<u32>, nw: vec3<u32>) -> u32 { return id.x + id.y * nw.x * 256u; }

// The average-pooling window of output (oh, ow): [hs, he) x [ws, we) and its divisor.
struct Win { hs: i32, he: i32, ws: i32, we: i32, div: f32 }
fn window(Q: Pool, oh: u32, ow: u32) -> Win {
    if (Q.mode == 3u) {
        let hs = oh * Q.h / Q.ho; let he = ((oh + 1u) * Q.h + Q.ho - 1u) / Q.ho;
        let ws = ow * Q.w / Q.wo; let we = ((ow + 1u) * Q.w + Q.wo - 1u) / Q.wo;
        return Win(i32(hs), i32(he), i32(ws), i32(we), f32((he - hs) * (we - ws)));
    }
    var hs = i32(oh * Q.sh) - i32(Q.ph);
    var ws = i32(ow * Q.sw) - i32(Q.pw);
    var he = min(hs + i32(Q.kh), i32(Q.h + Q.ph));
    var we = min(ws + i32(Q.kw), i32(Q.w + Q.pw));
    let pooled = f32((he - hs) * (we - ws));
    hs = max(hs, 0); ws = max(ws, 0); he = min(he, i32(Q.h)); we = min(we, i32(Q.w));
    var div = pooled;
    if (Q.mode == 2u) { div = f32((he - hs) * (we - ws)); }
    return Win(hs, he, ws, we, div);
}
"#;

fn max_params(pool: &crate::backend::MaxPool) -> Vec<u32> {
    let o = &pool.options;
    pool_params(
        &pool.planes,
        [o.kernel.0, o.kernel.1, o.stride.0, o.stride.1, o.padding.0, o.padding.1, o.dilation.0, o.dilation.1],
        0,
    )
}

/// Max pooling of contiguous planes: the values and the `i64` in-plane positions of the
/// maxima (PyTorch's indices). NaN wins; ties keep the earlier tap.
pub(crate) fn max_pool2d(x: &GpuStorage, pool: &crate::backend::MaxPool) -> Option<(GpuStorage, GpuStorage)> {
    if x.dtype() != DType::F32 {
        return None;
    }
    let ctx = x.ctx();
    let pl = &pool.planes;
    let total = pl.planes * pl.ho * pl.wo;
    let out = GpuStorage::uninit(ctx, DType::F32, total);
    let idx = GpuStorage::uninit(ctx, DType::I64, total);
    let src = format!(
        "{POOL_PRELUDE}{}{}{}{MAIN_1D}    let Q = pool();
    if (i >= Q.planes * Q.ho * Q.wo) {{ return; }}
    let ow = i % Q.wo; let oh = (i / Q.wo) % Q.ho; let q = i / (Q.wo * Q.ho);
    var best = -bitcast<f32>(0x7f800000u);
    var bi = -1;
    for (var ki = 0u; ki < Q.kh; ki++) {{
        let ih = i32(oh * Q.sh + ki * Q.dh) - i32(Q.ph);
        if (ih < 0 || ih >= i32(Q.h)) {{ continue; }}
        for (var kj = 0u; kj < Q.kw; kj++) {{
            let iw = i32(ow * Q.sw + kj * Q.dw) - i32(Q.pw);
            if (iw < 0 || iw >= i32(Q.w)) {{ continue; }}
            let f = ih * i32(Q.w) + iw;
            let v = X[q * Q.h * Q.w + u32(f)];
            if (bi < 0 || v > best || (isnan_(v) && !isnan_(best))) {{ best = v; bi = f; }}
        }}
    }}
    Y[i] = best;
    I[2u * i] = u32(max(bi, 0));
    I[2u * i + 1u] = 0u;
}}
",
        binding(1, "X", "f32", false),
        binding(2, "Y", "f32", true),
        binding(3, "I", "u32", true)
    );
    ctx.dispatch(&src, &max_params(pool), &[x.buffer(), out.buffer(), idx.buffer()], groups_for(total));
    Some((out, idx))
}

/// The input gradient of a max pooling: each input pixel sums the output gradients of the
/// windows whose maximum it was (a gather: one fixed order, no atomics).
pub(crate) fn max_pool2d_backward(
    g: &GpuStorage,
    idx: &GpuStorage,
    pool: &crate::backend::MaxPool,
) -> Option<GpuStorage> {
    if g.dtype() != DType::F32 {
        return None;
    }
    let ctx = g.ctx();
    let pl = &pool.planes;
    let total = pl.planes * pl.h * pl.w;
    let dx = GpuStorage::uninit(ctx, DType::F32, total);
    let src = format!(
        "{POOL_PRELUDE}{}{}{}{MAIN_1D}    let Q = pool();
    if (i >= Q.planes * Q.h * Q.w) {{ return; }}
    let x = i % Q.w; let y = (i / Q.w) % Q.h; let q = i / (Q.w * Q.h);
    let me = y * Q.w + x;
    var acc = 0.0;
    for (var ki = 0u; ki < Q.kh; ki++) {{
        let ny = i32(y + Q.ph) - i32(ki * Q.dh);
        if (ny < 0 || u32(ny) % Q.sh != 0u) {{ continue; }}
        let oh = u32(ny) / Q.sh;
        if (oh >= Q.ho) {{ continue; }}
        for (var kj = 0u; kj < Q.kw; kj++) {{
            let nx = i32(x + Q.pw) - i32(kj * Q.dw);
            if (nx < 0 || u32(nx) % Q.sw != 0u) {{ continue; }}
            let ow = u32(nx) / Q.sw;
            if (ow >= Q.wo) {{ continue; }}
            let o = (q * Q.ho + oh) * Q.wo + ow;
            if (I[2u * o] == me) {{ acc = acc + G[o]; }}
        }}
    }}
    Y[i] = acc;
}}
",
        binding(1, "G", "f32", false),
        binding(2, "I", "u32", false),
        binding(3, "Y", "f32", true)
    );
    ctx.dispatch(&src, &max_params(pool), &[g.buffer(), idx.buffer(), dx.buffer()], groups_for(total));
    Some(dx)
}

fn avg_params(pool: &crate::backend::AvgPool) -> Vec<u32> {
    match pool.windows {
        crate::backend::AvgWindows::Fixed { kernel: k, stride: s, padding: p, count_include_pad } => {
            pool_params(&pool.planes, [k.0, k.1, s.0, s.1, p.0, p.1, 1, 1], if count_include_pad { 1 } else { 2 })
        }
        crate::backend::AvgWindows::Adaptive => pool_params(&pool.planes, [1, 1, 1, 1, 0, 0, 1, 1], 3),
    }
}

/// Average pooling of contiguous planes.
pub(crate) fn avg_pool2d(x: &GpuStorage, pool: &crate::backend::AvgPool) -> Option<GpuStorage> {
    if x.dtype() != DType::F32 {
        return None;
    }
    let ctx = x.ctx();
    let pl = &pool.planes;
    let total = pl.planes * pl.ho * pl.wo;
    let out = GpuStorage::uninit(ctx, DType::F32, total);
    let src = format!(
        "{POOL_PRELUDE}{}{}{MAIN_1D}    let Q = pool();
    if (i >= Q.planes * Q.ho * Q.wo) {{ return; }}
    let ow = i % Q.wo; let oh = (i / Q.wo) % Q.ho; let q = i / (Q.wo * Q.ho);
    let W = window(Q, oh, ow);
    var acc = 0.0;
    for (var y = W.hs; y < W.he; y++) {{
        for (var x = W.ws; x < W.we; x++) {{ acc = acc + X[(q * Q.h + u32(y)) * Q.w + u32(x)]; }}
    }}
    Y[i] = acc / W.div;
}}
",
        binding(1, "X", "f32", false),
        binding(2, "Y", "f32", true)
    );
    ctx.dispatch(&src, &avg_params(pool), &[x.buffer(), out.buffer()], groups_for(total));
    Some(out)
}

/// The input gradient of an average pooling: each input pixel gathers `g / divisor` of
/// every window that holds it.
pub(crate) fn avg_pool2d_backward(g: &GpuStorage, pool: &crate::backend::AvgPool) -> Option<GpuStorage> {
    if g.dtype() != DType::F32 {
        return None;
    }
    let ctx = g.ctx();
    let pl = &pool.planes;
    let total = pl.planes * pl.h * pl.w;
    let dx = GpuStorage::uninit(ctx, DType::F32, total);
    let src = format!(
        "{POOL_PRELUDE}{}{}{MAIN_1D}    let Q = pool();
    if (i >= Q.planes * Q.h * Q.w) {{ return; }}
    let x = i32(i % Q.w); let y = i32((i / Q.w) % Q.h); let q = i / (Q.w * Q.h);
    // Candidate outputs: all of them for adaptive windows, else those whose stride lands
    // within a kernel of this pixel.
    var oh0 = 0u; var oh1 = Q.ho; var ow0 = 0u; var ow1 = Q.wo;
    if (Q.mode != 3u) {{
        oh0 = u32(max(0, (y + i32(Q.ph) - i32(Q.kh) + i32(Q.sh)) / i32(Q.sh)));
        oh1 = min(Q.ho, u32(y + i32(Q.ph)) / Q.sh + 1u);
        ow0 = u32(max(0, (x + i32(Q.pw) - i32(Q.kw) + i32(Q.sw)) / i32(Q.sw)));
        ow1 = min(Q.wo, u32(x + i32(Q.pw)) / Q.sw + 1u);
    }}
    var acc = 0.0;
    for (var oh = oh0; oh < oh1; oh++) {{
        for (var ow = ow0; ow < ow1; ow++) {{
            let W = window(Q, oh, ow);
            if (y >= W.hs && y < W.he && x >= W.ws && x < W.we) {{ acc = acc + G[(q * Q.ho + oh) * Q.wo + ow] / W.div; }}
        }}
    }}
    Y[i] = acc;
}}
",
        binding(1, "G", "f32", false),
        binding(2, "Y", "f32", true)
    );
    ctx.dispatch(&src, &avg_params(pool), &[g.buffer(), dx.buffer()], groups_for(total));
    Some(dx)
}

/// One optimizer step over the `n` elements of a contiguous parameter starting at
/// `offset` in `p`: the optimizer's WGSL `body` (see `optim::DeviceKernel`) with its
/// gradient `g` and state buffers.
pub(crate) fn optimizer_step(
    p: &GpuStorage,
    offset: usize,
    n: usize,
    g: &GpuStorage,
    state: &[&GpuStorage],
    body: &str,
    scalars: &[f64],
) {
    if n == 0 {
        return;
    }
    let ctx = p.ctx();
    let t = scalar(p.dtype());
    let mut decls = binding(1, "k", t, false) + &binding(2, "Pp", t, true) + &binding(3, "G", t, false);
    let mut load = String::new();
    let mut store = String::new();
    for j in 0..3 {
        if j < state.len() {
            decls += &binding(4 + j as u32, &format!("B{j}"), t, true);
            load += &format!("    var b{j} = B{j}[i];\n");
            store += &format!("    B{j}[i] = b{j};\n");
        } else {
            load += &format!("    var b{j} = {t}(0.0);\n");
        }
    }
    let src = format!(
        "{PRELUDE}{decls}{MAIN_1D}    if (i >= P[0]) {{ return; }}\n    let o = P[1] + i;\n    var p = Pp[o];\n    let g = G[i];\n{load}{body}\n    Pp[o] = p;\n{store}}}\n"
    );
    let k_bytes: Vec<u8> = if p.dtype() == DType::F64 {
        scalars.iter().flat_map(|v| v.to_le_bytes()).collect()
    } else {
        scalars.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect()
    };
    let kb = ctx.upload(&k_bytes);
    let mut bufs = vec![&kb, p.buffer(), g.buffer()];
    bufs.extend(state.iter().map(|s| s.buffer()));
    ctx.dispatch(&src, &[u32_of("element count", n), u32_of("offset", offset)], &bufs, groups_for(n));
}
