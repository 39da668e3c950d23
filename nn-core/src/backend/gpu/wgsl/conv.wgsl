// Convolution kernels around the GEMM: im2col (the column matrices of the input) and
// col2im (the input gradient folded back from the column gradients). `P` holds the
// geometry, `[n, c, h, w, o, kh, kw, ho, wo, sh, sw, ph, pw, dh, dw, groups]`.
//
// Placeholders: `{{PRELUDE}}`, `{{GEO}}` (the `geo` snippet), `{{T}}` (the dtype, `f32` or
// `f64`).

//# geo
struct Geo { n: u32, c: u32, h: u32, w: u32, o: u32, kh: u32, kw: u32, ho: u32, wo: u32,
             sh: u32, sw: u32, ph: u32, pw: u32, dh: u32, dw: u32, groups: u32 }
fn geo() -> Geo {
    return Geo(P[0], P[1], P[2], P[3], P[4], P[5], P[6], P[7], P[8], P[9], P[10], P[11], P[12], P[13], P[14], P[15]);
}

//# im2col
// `[n * groups, c/groups * kh * kw, ho * wo]`, zero where a tap falls in the padding.
{{PRELUDE}}
{{GEO}}
@group(0) @binding(1) var<storage, read> X: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    let G = geo();
    let cg = G.c / G.groups;
    let rows = cg * G.kh * G.kw;
    let px = G.ho * G.wo;
    if (i >= G.n * G.groups * rows * px) { return; }
    let p = i % px; let r = (i / px) % rows; let b = i / (px * rows);
    let s = b / G.groups; let grp = b % G.groups;
    let cc = r / (G.kh * G.kw); let ki = (r / G.kw) % G.kh; let kj = r % G.kw;
    let iy = i32((p / G.wo) * G.sh + ki * G.dh) - i32(G.ph);
    let ix = i32((p % G.wo) * G.sw + kj * G.dw) - i32(G.pw);
    var v = {{T}}(0.0);
    if (iy >= 0 && iy < i32(G.h) && ix >= 0 && ix < i32(G.w)) {
        v = X[((s * G.c + grp * cg + cc) * G.h + u32(iy)) * G.w + u32(ix)];
    }
    Y[i] = v;
}

//# col2im
// Each input pixel sums the column-gradient entries of the taps that read it (no atomics,
// one fixed order).
{{PRELUDE}}
{{GEO}}
@group(0) @binding(1) var<storage, read> D: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    let G = geo();
    if (i >= G.n * G.c * G.h * G.w) { return; }
    let x = i % G.w; let y = (i / G.w) % G.h; let ch = (i / (G.w * G.h)) % G.c; let s = i / (G.w * G.h * G.c);
    let cg = G.c / G.groups;
    let grp = ch / cg; let cc = ch % cg;
    let rows = cg * G.kh * G.kw;
    let px = G.ho * G.wo;
    let base = (s * G.groups + grp) * rows * px;
    var acc = {{T}}(0.0);
    for (var ki = 0u; ki < G.kh; ki++) {
        let ny = i32(y + G.ph) - i32(ki * G.dh);
        if (ny < 0 || u32(ny) % G.sh != 0u) { continue; }
        let oy = u32(ny) / G.sh;
        if (oy >= G.ho) { continue; }
        for (var kj = 0u; kj < G.kw; kj++) {
            let nx = i32(x + G.pw) - i32(kj * G.dw);
            if (nx < 0 || u32(nx) % G.sw != 0u) { continue; }
            let ox = u32(nx) / G.sw;
            if (ox >= G.wo) { continue; }
            acc = acc + D[base + ((cc * G.kh + ki) * G.kw + kj) * px + oy * G.wo + ox];
        }
    }
    Y[i] = acc;
}
