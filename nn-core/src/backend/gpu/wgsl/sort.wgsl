// Order kernels: the position of each row's extreme (`argmax`, `argmin`), running sums and
// products (`cumsum`, `cumprod`), and sorting lines (`sort`, `topk`).
//
// Placeholders: `{{PRELUDE}}`; `{{LARGEST}}` (`true` for the largest); `{{T}}`, the dtype
// scanned (`f32` or `f64`); `{{SORT_MAX}}`, the longest line a workgroup sorts.

//# arg_extreme
// One workgroup per row of `n` f32 elements; the `i64` position of the largest (smallest)
// element, NaN winning over every number and the first of equal candidates kept. Extras:
// `[n, rows]`.
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<u32>;
const LARGEST: bool = {{LARGEST}};

var<workgroup> V: array<f32, 256>;
var<workgroup> J: array<u32, 256>;

// Whether candidate (b, jb) beats (a, ja): NaN first, then the better value, then the
// earlier position.
fn beats(a: f32, ja: u32, b: f32, jb: u32) -> bool {
    if (isnan_(a)) { return isnan_(b) && jb < ja; }
    if (isnan_(b)) { return true; }
    if (select(a > b, b > a, LARGEST)) { return true; }
    return b == a && jb < ja;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let ex = extras(1u);
    let n = P[ex]; let rows = P[ex + 1u];
    let r = wg.x + wg.y * nw.x;
    var best = 0.0;
    var bj = 0xffffffffu;
    if (r < rows) {
        for (var j = t; j < n; j += 256u) {
            let v = X[at(r * n + j, 0u)];
            if (bj == 0xffffffffu || beats(best, bj, v, j)) { best = v; bj = j; }
        }
    }
    V[t] = best;
    J[t] = bj;
    for (var s = 128u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (t < s) {
            let jb = J[t + s];
            if (jb != 0xffffffffu && (J[t] == 0xffffffffu || beats(V[t], J[t], V[t + s], jb))) {
                V[t] = V[t + s];
                J[t] = jb;
            }
        }
    }
    if (t == 0u && r < rows) {
        Y[2u * r] = J[0];
        Y[2u * r + 1u] = 0u;
    }
}

//# scan
// One thread per line of the layout viewed as `[outer, n, inner]`, accumulating in f64
// and rounding each output once, exactly as the CPU kernel. Extras: `[n, inner, lines,
// product, reverse]`.
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> X: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    let ex = extras(1u);
    let n = P[ex]; let inner = P[ex + 1u];
    if (i >= P[ex + 2u]) { return; }
    let prod = P[ex + 3u] == 1u;
    let rev = P[ex + 4u] == 1u;
    let first = (i / inner) * n * inner + i % inner;
    var acc = f64(0.0);
    if (prod) { acc = f64(1.0); }
    for (var s = 0u; s < n; s = s + 1u) {
        var k = s;
        if (rev) { k = n - 1u - s; }
        let e = first + k * inner;
        let v = f64(X[at(e, 0u)]);
        if (prod) { acc = acc * v; } else { acc = acc + v; }
        Y[e] = {{T}}(acc);
    }
}

//# sort
// One workgroup per f32 line of the layout viewed as `[outer, n, inner]`: a bitonic
// network on `(value, position)` pairs in a total order (value with NaN above every
// number, then position), so the result is the stable sort's; the first `k` are kept,
// ordered by position again for unsorted `topk`. Extras: `[n, inner, lines, k, width,
// descending, by_position]`.
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read_write> I: array<u32>;

const PAD: u32 = 0xffffffffu;
var<workgroup> V: array<f32, {{SORT_MAX}}>;
var<workgroup> J: array<u32, {{SORT_MAX}}>;

// -1, 0 or 1 as a is below, equal to or above b, NaN above every number.
fn cmpv(a: f32, b: f32) -> i32 {
    let an = isnan_(a);
    let bn = isnan_(b);
    if (an && bn) { return 0; }
    if (an) { return 1; }
    if (bn) { return -1; }
    if (a < b) { return -1; }
    if (a > b) { return 1; }
    return 0;
}

// Whether pair (a, ja) comes strictly before (b, jb): mode 0 ascending, 1 descending
// (positions ascending on ties in both), 2 by position only; padding comes last.
fn before(mode: u32, a: f32, ja: u32, b: f32, jb: u32) -> bool {
    if (ja == PAD) { return false; }
    if (jb == PAD) { return true; }
    if (mode == 2u) { return ja < jb; }
    var c = cmpv(a, b);
    if (mode == 1u) { c = -c; }
    return c < 0 || (c == 0 && ja < jb);
}

// The bitonic network over the `width` pairs in V and J.
fn bitonic(mode: u32, width: u32, t0: u32) {
    for (var size = 2u; size <= width; size = size << 1u) {
        for (var stride = size >> 1u; stride > 0u; stride = stride >> 1u) {
            workgroupBarrier();
            for (var t = t0; t < width / 2u; t = t + 256u) {
                let i = 2u * stride * (t / stride) + t % stride;
                let j = i + stride;
                var swap = false;
                if ((i & size) == 0u) {
                    swap = before(mode, V[j], J[j], V[i], J[i]);
                } else {
                    swap = before(mode, V[i], J[i], V[j], J[j]);
                }
                if (swap) {
                    let v = V[i]; V[i] = V[j]; V[j] = v;
                    let w = J[i]; J[i] = J[j]; J[j] = w;
                }
            }
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>, @builtin(local_invocation_index) t0: u32) {
    let ex = extras(1u);
    let n = P[ex]; let inner = P[ex + 1u]; let lines = P[ex + 2u]; let k = P[ex + 3u]; let width = P[ex + 4u];
    let descending = P[ex + 5u]; let by_position = P[ex + 6u];
    let r = min(wg.x + wg.y * nw.x, lines - 1u);
    let o = r / inner;
    let c = r % inner;
    for (var t = t0; t < width; t = t + 256u) {
        if (t < n) {
            V[t] = X[at((o * n + t) * inner + c, 0u)];
            J[t] = t;
        } else {
            V[t] = 0.0;
            J[t] = PAD;
        }
    }
    bitonic(descending, width, t0);
    if (by_position == 1u) {
        for (var t = t0; t < width; t = t + 256u) {
            if (t >= k) { J[t] = PAD; }
        }
        bitonic(2u, width, t0);
    }
    if (wg.x + wg.y * nw.x >= lines) { return; }
    for (var t = t0; t < k; t = t + 256u) {
        let e = (o * k + t) * inner + c;
        Y[e] = V[t];
        I[2u * e] = J[t];
        I[2u * e + 1u] = 0u;
    }
}
