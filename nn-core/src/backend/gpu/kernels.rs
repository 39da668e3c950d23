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
const PRELUDE: &str = r#"
@group(0) @binding(0) var<storage, read> P: array<u32>;

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
    if (a != a || b != b) { return a + b; }
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

const MAIN_1D: &str = "@compute @workgroup_size(256)\nfn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {\n    let i = flat(id, nw);\n";

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

/// Binding `b` as an array of `ty`, read-only or read-write.
fn binding(b: u32, name: &str, ty: &str, write: bool) -> String {
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
        DType::Bool => (
            format!(
                "    if (i >= P[0]) {{ return; }}\n    Y[i] = select(0u, 1u, {} != 0.0);\n",
                load(from, "X", "at(i, 0u)", value_ty)
            ),
            n,
        ),
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
        elementwise(ctx, x.dtype(), x.dtype(), l.shape(), &[(x, l, "x")], Some(scalars), &format!("({})", w.f))
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
        let body = format!("g * ({})", w.d1);
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
        let body = format!("g * ({})", if lhs { w.d1 } else { w.d2 });
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
            if (b != b || b > a) { S[t] = b; }
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
            if (v != v || v > m) {{ m = v; }}
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
