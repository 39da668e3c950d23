// The GEMM kernels' bindings and element access, one section per storage encoding
// (`//# NAME` to the next such line, as in template.rs). `gemm.rs` (`Kernel::source`) assembles a kernel
// from `header`, one `load_*` section per operand with `{{X}}` the binding (lhs, rhs, inp), one
// `input_*` section and one `store_*` section, then the kernel file.
//
// An operand binding is an array of 4-element units (`vec4<f32>`, `vec4<f64>`, `vec4<f16>`,
// or `vec2<u32>` holding four packed 16-bit values): `ld1_X(e)` reads element `e` as `F`,
// `ld4_X(u)` elements `4u..4u+4` as `vec4<F>`. F is the accumulator type (f32, or f64 for
// f64 tensors). The kernels write results through `store_run(e0, cnt)`: elements `e0..e0+cnt`
// of Y take `row[0..cnt]` (the kernel declares `row: array<F, RUN>`).

//# header
{{ENABLE}}
alias F = {{F}};

// P = [m, k, n, batch, rsa, csa, rsb, csb, rsi, csi, oi, a_mode, b_mode, oa..., ob...]
@group(0) @binding(0) var<storage, read> P: array<u32>;
// K = [alpha, beta]
@group(0) @binding(1) var<storage, read> K: array<F>;
@group(0) @binding(2) var<storage, read> lhs: array<{{UNIT}}>;
@group(0) @binding(3) var<storage, read> rhs: array<{{UNIT}}>;
@group(0) @binding({{Y_BINDING}}) var<storage, read_write> Y: array<{{OUT}}>;

//# load_float
fn ld1_{{X}}(e: u32) -> F { return {{X}}[e >> 2u][e & 3u]; }
fn ld4_{{X}}(u: u32) -> vec4<F> { return {{X}}[u]; }

//# load_f16
fn ld1_{{X}}(e: u32) -> F { return F({{X}}[e >> 2u][e & 3u]); }
fn ld4_{{X}}(u: u32) -> vec4<F> { return vec4<F>({{X}}[u]); }

//# load_f16_packed
fn ld1_{{X}}(e: u32) -> F { return unpack2x16float({{X}}[e >> 2u][(e >> 1u) & 1u])[e & 1u]; }
fn ld4_{{X}}(u: u32) -> vec4<F> {
    let w = {{X}}[u];
    return vec4<F>(unpack2x16float(w.x), unpack2x16float(w.y));
}

//# load_bf16
// A bf16 value is the high half of an f32.
fn ld1_{{X}}(e: u32) -> F { return bitcast<f32>(({{X}}[e >> 2u][(e >> 1u) & 1u] >> ((e & 1u) * 16u)) << 16u); }
fn ld4_{{X}}(u: u32) -> vec4<F> {
    let w = {{X}}[u];
    return bitcast<vec4<f32>>(vec4<u32>(w.x << 16u, w.x & 0xffff0000u, w.y << 16u, w.y & 0xffff0000u));
}

//# input_none
// Without an input (matmul, or addmm with beta = 0: the input is not read).
fn input(e: u32) -> F { return F(0); }

//# input_some
@group(0) @binding(4) var<storage, read> inp: array<{{UNIT}}>;
fn input(e: u32) -> F { return ld1_inp(e); }

//# store_float
// Y holds F, or f16 (rounded by the conversion).
fn store_run(e0: u32, cnt: u32) {
    for (var j = 0u; j < cnt; j++) { Y[e0 + j] = {{OUT}}(row[j]); }
}

//# store_packed
// Y holds two 16-bit values per word. A thread stores the words whose both halves are its own
// whole, and the others half by half, atomically (the other half belongs to another thread).
fn put_half(e: u32, h: u32) {
    let s = (e & 1u) * 16u;
    atomicAnd(&Y[e >> 1u], ~(0xffffu << s));
    atomicOr(&Y[e >> 1u], h << s);
}

fn store_run(e0: u32, cnt: u32) {
    var j = 0u;
    if ((e0 & 1u) == 1u && cnt > 0u) {
        put_half(e0, {{BITS}}(row[0]));
        j = 1u;
    }
    for (; j + 1u < cnt; j += 2u) {
        atomicStore(&Y[(e0 + j) >> 1u], {{BITS}}(row[j]) | ({{BITS}}(row[j + 1u]) << 16u));
    }
    if (j < cnt) { put_half(e0 + j, {{BITS}}(row[j])); }
}

// f32 to f16 bits, rounding to nearest even (NaN stays NaN, quiet; overflow goes to infinity).
fn f16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    let s = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) { return s | 0x7e00u | ((a >> 13u) & 0x3ffu); }
    if (a >= 0x477ff000u) { return s | 0x7c00u; } // 65520 and up round to infinity
    if (a >= 0x38800000u) {
        // Normal: rebias the exponent (127 - 15 = 112), round 23 mantissa bits to 10.
        let r = a - 0x38000000u;
        return s | ((r + 0xfffu + ((r >> 13u) & 1u)) >> 13u);
    }
    if (a < 0x33000000u) { return s; } // below 2^-25: zero
    // Subnormal: the value in units of 2^-24, rounded to nearest even.
    let mant = (a & 0x7fffffu) | 0x800000u;
    let shift = 126u - (a >> 23u);
    let half = 1u << (shift - 1u);
    let rem = mant & ((half << 1u) - 1u);
    var h = mant >> shift;
    if (rem > half || (rem == half && (h & 1u) == 1u)) { h += 1u; }
    return s | h;
}

// f32 to bf16 bits, rounding to nearest even (NaN stays NaN, quiet).
fn bf16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) { return (b >> 16u) | 0x40u; }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}
