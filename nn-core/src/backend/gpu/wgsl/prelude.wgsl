// The start of every one-dimensional kernel: binding 0 and the index helpers. Binding 0,
// `P`, holds the sizes and strides, `[n, rank, shape..., (strides..., offset) per operand,
// extras...]` for strided kernels (see `kernels::strided_params`).

//# prelude
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
