// Reductions and row kernels: one 256-thread workgroup per output line, combining in
// workgroup memory with a tree.
//
// Placeholders: `{{PRELUDE}}`; `{{TREE}}`, the `tree` snippet filled with `{{T}}`, the type
// summed; `{{X}}` and `{{LOAD}}`, the source's array type and `convert.wgsl`'s `load_*`
// snippet reading it as `{{T}}` (half sources are packed words); `{{LOG}}` (`true` or `false`): log-softmax rather than softmax.
// `sum`'s besides: `{{ACC}}`, the type summed in (`f64` or `f32`; `{{T}}` is then the
// output's, `{{TREE}}` and `{{LOAD}}` are filled with `{{ACC}}`) and `{{LINE}}`, one of the
// `line_*` snippets.

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
// layout): `n_out` outputs. Extras: `[r, n_out]`. Thread `t` sums elements t, t + 256, ...
// of its run (`line_sum`, in the accumulator type), then the 256 sums are added in a tree
// and the total rounded once to the output's type.
{{PRELUDE}}
{{TREE}}
@group(0) @binding(1) var<storage, read> X: array<{{X}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;
{{LOAD}}
{{LINE}}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let ex = extras(1u);
    let r = P[ex]; let n_out = P[ex + 1u];
    let o = wg.x + wg.y * nw.x;
    var acc = {{ACC}}(0.0);
    if (o < n_out) { acc = line_sum(o * r, r, t); }
    S[t] = acc;
    tree_sum(t);
    if (t == 0u && o < n_out) { Y[o] = {{T}}(S[0]); }
}

//# line_f64
// A thread's sum in f64 (`load_x` reads f64), as the CPU sums: for f32 and half values
// the rounding error of thousands of terms stays far below one f32 rounding.
fn line_sum(base: u32, r: u32, t: u32) -> f64 {
    var acc = f64(0.0);
    for (var j = t; j < r; j += 256u) { acc = acc + load_x(at(base + j, 0u)); }
    return acc;
}

//# line_compensated
// A thread's sum in f32 with Neumaier's compensation, for adapters without f64: `c`
// gathers what each addition rounds away (exactly: `(s - s2) + v` where |s| >= |v|), so
// the error stays near one rounding of the total rather than growing with the r / 256
// terms (2^24 copies of 0.1 averaged 0.10006 in a plain f32 sum). WGSL lets a compiler
// reassociate, and `(s - (s + v)) + v` is 0 in real arithmetic: `s2` is read back through
// its bits XORed with an opaque zero (`P[1] >> 31`, P[1] being the rank: 0, but read at
// run time), so the compiler cannot see that it is `s + v`. (A compiler rewriting
// `(s - s2) + v` as `(s + v) - s2` would still undo it; no known one does.) An infinite
// or NaN `s` is returned as it is (its compensation is NaN).
fn line_sum(base: u32, r: u32, t: u32) -> f32 {
    let opaque = P[1] >> 31u;
    var s = 0.0;
    var c = 0.0;
    for (var j = t; j < r; j += 256u) {
        let v = load_x(at(base + j, 0u));
        let s2 = bitcast<f32>(bitcast<u32>(s + v) ^ opaque);
        c = c + select((v - s2) + s, (s - s2) + v, abs(s) >= abs(v));
        s = s2;
    }
    if ((bitcast<u32>(s) & 0x7f800000u) == 0x7f800000u) { return s; }
    return s + c;
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
