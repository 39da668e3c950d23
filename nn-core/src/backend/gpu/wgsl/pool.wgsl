// Pooling kernels over contiguous planes: max and average pooling and their input
// gradients (gathers: each input pixel visits the windows that hold it, no atomics). `P`
// holds `[planes, h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw, mode]`, `mode` 0 max, 1
// average with padding counted, 2 average without, 3 adaptive average.
//
// Placeholders: `{{PRELUDE}}`, `{{POOL}}` (the `pool` snippet).

//# pool
struct Pool { planes: u32, h: u32, w: u32, ho: u32, wo: u32, kh: u32, kw: u32, sh: u32, sw: u32,
              ph: u32, pw: u32, dh: u32, dw: u32, mode: u32 }
fn pool() -> Pool {
    return Pool(P[0], P[1], P[2], P[3], P[4], P[5], P[6], P[7], P[8], P[9], P[10], P[11], P[12], P[13]);
}

// The average-pooling window of output (oh, ow): [hs, he) x [ws, we) and its divisor.
struct Win { hs: i32, he: i32, ws: i32, we: i32, div: f32 }
fn window(Q: Pool, oh: u32, ow: u32) -> Win {
    if (Q.mode == 3u) {
        let hs = oh * Q.h / Q.ho; let he = ((oh + 1u) * Q.h + Q.ho - 1u) / Q.ho;
        let ws = ow * Q.w / Q.wo; let we = ((ow + 1u) * Q.w + Q.wo - 1u) / Q.wo;
        return Win(i32(hs), i32(he), i32(ws), i32(we), f32((he - hs) * (we - ws)));
    }
    var hs = i32(oh * Q.sh) - i32(Q.ph);
    var ws = i32(ow * Q.sw) - i32(Q.pw);
    var he = min(hs + i32(Q.kh), i32(Q.h + Q.ph));
    var we = min(ws + i32(Q.kw), i32(Q.w + Q.pw));
    let pooled = f32((he - hs) * (we - ws));
    hs = max(hs, 0); ws = max(ws, 0); he = min(he, i32(Q.h)); we = min(we, i32(Q.w));
    var div = pooled;
    if (Q.mode == 2u) { div = f32((he - hs) * (we - ws)); }
    return Win(hs, he, ws, we, div);
}

//# max_pool
// The maxima and their `i64` in-plane positions (PyTorch's indices); NaN wins, ties keep
// the earlier tap.
{{PRELUDE}}
{{POOL}}
@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read_write> I: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    let Q = pool();
    if (i >= Q.planes * Q.ho * Q.wo) { return; }
    let ow = i % Q.wo; let oh = (i / Q.wo) % Q.ho; let q = i / (Q.wo * Q.ho);
    var best = -bitcast<f32>(0x7f800000u);
    var bi = -1;
    for (var ki = 0u; ki < Q.kh; ki++) {
        let ih = i32(oh * Q.sh + ki * Q.dh) - i32(Q.ph);
        if (ih < 0 || ih >= i32(Q.h)) { continue; }
        for (var kj = 0u; kj < Q.kw; kj++) {
            let iw = i32(ow * Q.sw + kj * Q.dw) - i32(Q.pw);
            if (iw < 0 || iw >= i32(Q.w)) { continue; }
            let f = ih * i32(Q.w) + iw;
            let v = X[q * Q.h * Q.w + u32(f)];
            // The last NaN wins, as in PyTorch's kernels (and the CPU's).
            if (bi < 0 || v > best || isnan_(v)) { best = v; bi = f; }
        }
    }
    Y[i] = best;
    I[2u * i] = u32(max(bi, 0));
    I[2u * i + 1u] = 0u;
}

//# max_pool_backward
// Each input pixel sums the output gradients of the windows whose maximum it was.
{{PRELUDE}}
{{POOL}}
@group(0) @binding(1) var<storage, read> G: array<f32>;
@group(0) @binding(2) var<storage, read> I: array<u32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    let Q = pool();
    if (i >= Q.planes * Q.h * Q.w) { return; }
    let x = i % Q.w; let y = (i / Q.w) % Q.h; let q = i / (Q.w * Q.h);
    let me = y * Q.w + x;
    var acc = 0.0;
    for (var ki = 0u; ki < Q.kh; ki++) {
        let ny = i32(y + Q.ph) - i32(ki * Q.dh);
        if (ny < 0 || u32(ny) % Q.sh != 0u) { continue; }
        let oh = u32(ny) / Q.sh;
        if (oh >= Q.ho) { continue; }
        for (var kj = 0u; kj < Q.kw; kj++) {
            let nx = i32(x + Q.pw) - i32(kj * Q.dw);
            if (nx < 0 || u32(nx) % Q.sw != 0u) { continue; }
            let ow = u32(nx) / Q.sw;
            if (ow >= Q.wo) { continue; }
            let o = (q * Q.ho + oh) * Q.wo + ow;
            if (I[2u * o] == me) { acc = acc + G[o]; }
        }
    }
    Y[i] = acc;
}

//# avg_pool
{{PRELUDE}}
{{POOL}}
@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    let Q = pool();
    if (i >= Q.planes * Q.ho * Q.wo) { return; }
    let ow = i % Q.wo; let oh = (i / Q.wo) % Q.ho; let q = i / (Q.wo * Q.ho);
    let W = window(Q, oh, ow);
    var acc = 0.0;
    for (var y = W.hs; y < W.he; y++) {
        for (var x = W.ws; x < W.we; x++) { acc = acc + X[(q * Q.h + u32(y)) * Q.w + u32(x)]; }
    }
    Y[i] = acc / W.div;
}

//# avg_pool_backward
// Each input pixel gathers `g / divisor` of every window that holds it.
{{PRELUDE}}
{{POOL}}
@group(0) @binding(1) var<storage, read> G: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    let Q = pool();
    if (i >= Q.planes * Q.h * Q.w) { return; }
    let x = i32(i % Q.w); let y = i32((i / Q.w) % Q.h); let q = i / (Q.w * Q.h);
    // Candidate outputs: all of them for adaptive windows, else those whose stride lands
    // within a kernel of this pixel.
    var oh0 = 0u; var oh1 = Q.ho; var ow0 = 0u; var ow1 = Q.wo;
    if (Q.mode != 3u) {
        oh0 = u32(max(0, (y + i32(Q.ph) - i32(Q.kh) + i32(Q.sh)) / i32(Q.sh)));
        oh1 = min(Q.ho, u32(y + i32(Q.ph)) / Q.sh + 1u);
        ow0 = u32(max(0, (x + i32(Q.pw) - i32(Q.kw) + i32(Q.sw)) / i32(Q.sw)));
        ow1 = min(Q.wo, u32(x + i32(Q.pw)) / Q.sw + 1u);
    }
    var acc = 0.0;
    for (var oh = oh0; oh < oh1; oh++) {
        for (var ow = ow0; ow < ow1; ow++) {
            let W = window(Q, oh, ow);
            if (y >= W.hs && y < W.he && x >= W.ws && x < W.we) { acc = acc + G[(q * Q.ho + oh) * Q.wo + ow] / W.div; }
        }
    }
    Y[i] = acc;
}
