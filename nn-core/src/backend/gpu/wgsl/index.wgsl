// Index kernels: validating `i64` indices, and copying the elements they select
// (`index_select`, `gather`) word by word.
//
// Placeholders: `{{PRELUDE}}`; `{{WORDS}}`, the 32-bit words per copied element.

//# checked_indices
// `i64` indices (two words each) as `u32` positions in a dim of `size` (extras: `[size]`),
// negative ones counted from the back; `F[0]` gets the first position of an index outside
// `-size..size`.
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> X: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<u32>;
@group(0) @binding(3) var<storage, read_write> F: array<atomic<u32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    if (i >= P[0]) { return; }
    let size = P[extras(1u)];
    let o = at(i, 0u);
    let lo = X[2u * o];
    let hi = X[2u * o + 1u];
    var ok = false;
    var j = 0u;
    if (hi == 0u && lo < size) { ok = true; j = lo; }
    if (hi == 0xffffffffu && lo >= 0u - size && size > 0u) { ok = true; j = lo + size; }
    if (!ok) { atomicMin(&F[0], i); }
    Y[i] = j;
}

//# first_outside
// `F[0]` gets the first position of an `i64` index outside `0..n` (extras: `[n]`).
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> X: array<u32>;
@group(0) @binding(2) var<storage, read_write> F: array<atomic<u32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    if (i >= P[0]) { return; }
    let o = at(i, 0u);
    if (X[2u * o + 1u] != 0u || X[2u * o] >= P[extras(1u)]) { atomicMin(&F[0], i); }
}

//# index_select
// `Y` `[outer, k, inner]` from `X` `[outer, n, inner]` (through `P`'s layout) at the `k`
// positions `I`. Extras: `[count, k, n, inner]`.
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> X: array<u32>;
@group(0) @binding(2) var<storage, read> I: array<u32>;
@group(0) @binding(3) var<storage, read_write> Y: array<u32>;
const W: u32 = {{WORDS}}u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    let ex = extras(1u);
    if (i >= P[ex]) { return; }
    let k = P[ex + 1u]; let n = P[ex + 2u]; let inner = P[ex + 3u];
    let o = i / (k * inner); let j = (i / inner) % k; let t = i % inner;
    let s = at((o * n + I[j]) * inner + t, 0u);
    for (var w = 0u; w < W; w++) { Y[i * W + w] = X[s * W + w]; }
}

//# gather
// `Y[i] = X[at(i) + I[i] * step]`: `P`'s layout has the gathered dim's stride zeroed, and
// the extras hold that stride, `[step]`.
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> X: array<u32>;
@group(0) @binding(2) var<storage, read> I: array<u32>;
@group(0) @binding(3) var<storage, read_write> Y: array<u32>;
const W: u32 = {{WORDS}}u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    if (i >= P[0]) { return; }
    let s = at(i, 0u) + I[i] * P[extras(1u)];
    for (var w = 0u; w < W; w++) { Y[i * W + w] = X[s * W + w]; }
}
