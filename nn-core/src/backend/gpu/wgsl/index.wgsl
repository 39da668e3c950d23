// Index kernels: validating `i64` indices, and copying the elements they select
// (`index_select`, `gather`) word by word.
//
// Placeholders: `{{PRELUDE}}`; `{{WORDS}}`, the 32-bit words per copied element.

//# checked_indices
// `i64` indices (two words each) as `u32` positions in a dim of `size` (extras:
// `[size, slot]`). An index outside `0..size` (a negative one included, as in PyTorch)
// is written as 0, and its position `i` goes into error slot `slot` as `0xffffffff - i`
// (`atomicMax`: the first bad position wins; 0 means none), read at the next host wait.
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
    if (!ok) { atomicMax(&F[P[extras(1u) + 1u]], 0xffffffffu - i); }
    Y[i] = j;
}

//# check_range
// Error slot `slot` gets the first position of an `i64` index outside `0..n` (extras:
// `[n, slot]`), as `checked_indices` records it.
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> X: array<u32>;
@group(0) @binding(2) var<storage, read_write> F: array<atomic<u32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    if (i >= P[0]) { return; }
    let o = at(i, 0u);
    if (X[2u * o + 1u] != 0u || X[2u * o] >= P[extras(1u)]) { atomicMax(&F[P[extras(1u) + 1u]], 0xffffffffu - i); }
}

//# class_targets
// Class targets of a loss (extras: `[classes, ignore_index lo, ignore_index hi, slot]`):
// `S` gets each as an `i64` gather index (0 where ignored or out of range), `M` 1.0 where
// kept and 0.0 where ignored; a kept target outside `0..classes` is recorded in the error
// slot as `checked_indices` records it.
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> X: array<u32>;
@group(0) @binding(2) var<storage, read_write> S: array<u32>;
@group(0) @binding(3) var<storage, read_write> M: array<f32>;
@group(0) @binding(4) var<storage, read_write> F: array<atomic<u32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    if (i >= P[0]) { return; }
    let e = extras(1u);
    let o = at(i, 0u);
    let lo = X[2u * o];
    let hi = X[2u * o + 1u];
    let ignored = lo == P[e + 1u] && hi == P[e + 2u];
    var j = 0u;
    if (!ignored) {
        if (hi == 0u && lo < P[e]) { j = lo; } else { atomicMax(&F[P[e + 3u]], 0xffffffffu - i); }
    }
    S[2u * i] = j;
    S[2u * i + 1u] = 0u;
    M[i] = select(1.0, 0.0, ignored);
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
