// Reductions and row kernels: one 256-thread workgroup per output line, combining in
// workgroup memory with a tree.
//
// Placeholders: `{{PRELUDE}}`; `{{TREE}}`, the `tree` snippet filled with `{{T}}`, the type
// summed; `{{X}}` and `{{LOAD}}`, the source's array type and `convert.wgsl`'s `load_*`
// snippet reading it as `{{T}}` (half sources are packed words); `{{LOG}}` (`true` or `false`): log-softmax rather than softmax.

//# tree
var<workgroup> S: array<{{T}}, 256>;

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

//# sum
// Sums of runs of `r` consecutive row-major elements (the reduced dims come last in the
// layout): `n_out` outputs. Extras: `[r, n_out]`.
{{PRELUDE}}
{{TREE}}
@group(0) @binding(1) var<storage, read> X: array<{{X}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;
{{LOAD}}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let ex = extras(1u);
    let r = P[ex]; let n_out = P[ex + 1u];
    let o = wg.x + wg.y * nw.x;
    var acc = {{T}}(0.0);
    if (o < n_out) {
        for (var j = t; j < r; j += 256u) { acc = acc + load_x(at(o * r + j, 0u)); }
    }
    S[t] = acc;
    tree_sum(t);
    if (t == 0u && o < n_out) { Y[o] = S[0]; }
}

//# softmax
// Softmax or log-softmax in f32 along `n` of the layout viewed as `[outer, n, inner]`.
// Extras: `[n, inner, lines]`.
{{PRELUDE}}
{{TREE}}
@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
const LOG: bool = {{LOG}};

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let ex = extras(1u);
    let n = P[ex]; let inner = P[ex + 1u]; let lines = P[ex + 2u];
    let line = wg.x + wg.y * nw.x;
    let valid = line < lines;
    let base = (line / inner) * n * inner + line % inner;
    var m = -bitcast<f32>(0x7f800000u);
    if (valid) {
        for (var j = t; j < n; j += 256u) {
            let v = X[at(base + j * inner, 0u)];
            if (isnan_(v) || v > m) { m = v; }
        }
    }
    S[t] = m;
    tree_max(t);
    let mx = S[0];
    workgroupBarrier();
    var acc = 0.0;
    if (valid) {
        for (var j = t; j < n; j += 256u) { acc = acc + exp(X[at(base + j * inner, 0u)] - mx); }
    }
    S[t] = acc;
    tree_sum(t);
    let total = S[0];
    if (valid) {
        for (var j = t; j < n; j += 256u) {
            let e = base + j * inner;
            let v = X[at(e, 0u)];
            if (LOG) { Y[e] = v - mx - log(total); } else { Y[e] = exp(v - mx) / total; }
        }
    }
}
