// Conversions and copies: filling a buffer with a word pattern, copying or converting the
// elements a layout selects into a contiguous buffer, and scattering contiguous values into
// the positions a layout selects.
//
// Placeholders: `{{PRELUDE}}`; `{{WORDS}}`, the 32-bit words per element of a copy;
// `{{X}}`, the array type of the source; `{{T}}`, the type a value is read as; `{{LOAD}}`,
// one of the `load_*` snippets (filled with `{{T}}`; the `*_to_f64` ones follow the
// `f64_of_f32_bits` snippet they call), defining `load_x(o)`, the value at position `o` of
// `X`; `{{HALF_BITS}}` and `{{BITS}}` (`f16_bits` or `bf16_bits`); `{{NONZERO}}`, one of
// the `nonzero_*` snippets.

//# fill
// Words `pattern[0], pattern[1], pattern[0], ...`, from `P = [n, pattern[0], pattern[1]]`.
{{PRELUDE}}
@group(0) @binding(1) var<storage, read_write> Y: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    if (i >= P[0]) { return; }
    Y[i] = select(P[1], P[2], (i & 1u) == 1u);
}

//# copy
// The elements of a 32- or 64-bit dtype, copied word by word.
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> X: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<u32>;
const W: u32 = {{WORDS}}u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    if (i >= P[0]) { return; }
    let o = at(i, 0u);
    for (var j = 0u; j < W; j++) { Y[i * W + j] = X[o * W + j]; }
}

//# scatter
// `Y[at(i)] = X[i]`: contiguous values of a 32- or 64-bit dtype into the positions `P`'s
// layout selects.
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> X: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<u32>;
const W: u32 = {{WORDS}}u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    if (i >= P[0]) { return; }
    let o = at(i, 0u);
    for (var j = 0u; j < W; j++) { Y[o * W + j] = X[i * W + j]; }
}

//# scatter_half
// `Y[at(i)] = X[i]` for a 16-bit dtype: each thread replaces its element's half of an
// output word with two atomic operations on its own 16 bits, so the other element of the
// word, written by another thread, is left as it is.
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> X: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<atomic<u32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    if (i >= P[0]) { return; }
    let o = at(i, 0u);
    let v = (X[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu;
    let shift = (o & 1u) * 16u;
    atomicAnd(&Y[o >> 1u], ~(0xffffu << shift));
    atomicOr(&Y[o >> 1u], v << shift);
}

//# copy_half
// The elements of a 16-bit dtype: one thread per output word of two elements.
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> X: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<u32>;

fn half_at(o: u32) -> u32 {
    return (X[o >> 1u] >> ((o & 1u) * 16u)) & 0xffffu;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    let e = 2u * i;
    if (e >= P[0]) { return; }
    let lo = half_at(at(e, 0u));
    var hi = 0u;
    if (e + 1u < P[0]) { hi = half_at(at(e + 1u, 0u)); }
    Y[i] = lo | (hi << 16u);
}

//# to_half
// Conversion to f16 or bf16: one thread per output word of two elements.
{{PRELUDE}}
{{HALF_BITS}}
@group(0) @binding(1) var<storage, read> X: array<{{X}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<u32>;
{{LOAD}}
fn half_at(o: u32) -> u32 {
    return {{BITS}}(f32(load_x(o)));
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    let e = 2u * i;
    if (e >= P[0]) { return; }
    let lo = half_at(at(e, 0u));
    var hi = 0u;
    if (e + 1u < P[0]) { hi = half_at(at(e + 1u, 0u)); }
    Y[i] = lo | (hi << 16u);
}

//# to_bool
// Conversion to bool (a word per element): nonzero, NaN included.
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> X: array<{{X}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<u32>;
{{LOAD}}
{{NONZERO}}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    if (i >= P[0]) { return; }
    Y[i] = select(0u, 1u, nonzero(load_x(at(i, 0u))));
}

//# to_float
// Conversion to f32 or f64 (the output's array type is the value type).
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> X: array<{{X}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;
{{LOAD}}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    if (i >= P[0]) { return; }
    Y[i] = load_x(at(i, 0u));
}

//# load_word
// f32, f64 and bool sources: an element per array element.
fn load_x(o: u32) -> {{T}} {
    return {{T}}(X[o]);
}

//# f64_of_f32_bits
// The f32 of bits `bits` as f64, subnormals kept: built from the bits, since drivers may
// flush an f32 subnormal in a conversion. Prepended to the `load_*_to_f64` snippets.
fn f64_of_f32_bits(bits: u32) -> f64 {
    if ((bits & 0x7f800000u) == 0u) {
        let m = ldexp(f64(bits & 0x007fffffu), -149);
        return select(m, -m, (bits >> 31u) != 0u);
    }
    return f64(bitcast<f32>(bits));
}

//# load_f32_to_f64
// f32 to f64 with subnormals kept (`f64_of_f32_bits`).
fn load_x(o: u32) -> {{T}} {
    return f64_of_f32_bits(bitcast<u32>(X[o]));
}

//# load_bf16_to_f64
// bf16 to f64 with subnormals kept: the bf16 bits are the top half of an f32's, and a
// bf16 subnormal is an f32 subnormal (`f64_of_f32_bits`).
fn load_x(o: u32) -> {{T}} {
    return f64_of_f32_bits(((X[o >> 1u] >> ((o & 1u) * 16u)) & 0xffffu) << 16u);
}

//# load_f16
fn load_x(o: u32) -> {{T}} {
    return {{T}}(unpack2x16float(X[o >> 1u])[o & 1u]);
}

//# load_bf16
fn load_x(o: u32) -> {{T}} {
    return {{T}}(bitcast<f32>(((X[o >> 1u] >> ((o & 1u) * 16u)) & 0xffffu) << 16u));
}

//# nonzero_f32
// On the bits: a shader compiler may fold comparisons with NaN away.
fn nonzero(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) != 0u;
}

//# nonzero_f64
fn nonzero(v: f64) -> bool {
    return !(v == 0.0);
}

//# half_bits
// f32 to f16 and bf16 bits, rounding to nearest even exactly as the `half` crate does
// (so a conversion on the GPU gives the CPU's bits).

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
