// Accumulating scatters (`index_add`, `scatter_add`) in f32: every element of the source
// `S` (through `P`'s layout) is added into `Y` at its destination with a compare-exchange
// loop on the word, so the order of additions to one element is not fixed (as PyTorch's
// CUDA `index_add_`).
//
// Placeholders: `{{PRELUDE}}`, `{{ADD_AT}}` (the `add_at` snippet).

//# add_at
@group(0) @binding(1) var<storage, read> S: array<f32>;
@group(0) @binding(2) var<storage, read> I: array<u32>;
@group(0) @binding(3) var<storage, read_write> Y: array<atomic<u32>>;

fn add_at(p: u32, v: f32) {
    var old = atomicLoad(&Y[p]);
    loop {
        let r = atomicCompareExchangeWeak(&Y[p], old, bitcast<u32>(bitcast<f32>(old) + v));
        if (r.exchanged) { break; }
        old = r.old_value;
    }
}

//# index_add
// Source `[outer, k, inner]` into `[outer, n, inner]` at the `k` positions `I`. Extras:
// `[k, n, inner]`.
{{PRELUDE}}
{{ADD_AT}}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    if (i >= P[0]) { return; }
    let ex = extras(1u);
    let k = P[ex]; let n = P[ex + 1u]; let inner = P[ex + 2u];
    add_at(((i / (k * inner)) * n + I[(i / inner) % k]) * inner + i % inner, S[at(i, 0u)]);
}

//# scatter_add
// Source element `i` (of the index's shape) to the destination through the output's
// contiguous strides with the scattered dim's zeroed, plus `I[i]` times that dim's stride.
// Extras: `[strides (rank of them), step]`.
{{PRELUDE}}
{{ADD_AT}}
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

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    if (i >= P[0]) { return; }
    let ex = extras(1u);
    add_at(dst_offset(i, ex) + I[i] * P[ex + P[1]], S[at(i, 0u)]);
}
