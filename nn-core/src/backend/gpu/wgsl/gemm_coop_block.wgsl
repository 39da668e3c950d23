// GEMM on cooperative matrices (tensor cores) for f16 tensors, reusing each staged tile:
// a workgroup of four subgroups computes a 128 x 128 block, each subgroup a 64 x 64 quadrant
// as 4 x 4 accumulator tiles of 16 x 16 (`coop_mat16x16<ACC, C>`). Per 16-deep step a
// subgroup loads four tiles of A and four of B from workgroup memory and runs the 16 products
// among them: each tile it loads serves four accumulators (the 2 x 2 kernel, gemm_coop.wgsl,
// reuses each twice). BK = 32-deep slices of A and B are staged as f16, A column-major
// (element (r, kk) at kk * BM + r), B row-major (kk * BN + c), zero outside the matrix (so
// any m, k, n work). Each accumulator goes through a 16 x 16 staging area of its subgroup to
// the epilogue (alpha, beta, rounding to f16, edge masking), run by the subgroup's threads.
// Kernels: `common` then one of `single` (one slice at a time, staged by gemm_fill.wgsl: 16 KiB
// of operands) and `double` (two slices; the next one is loaded into registers by
// gemm_pipe.wgsl's `loads` while the current one is multiplied: 32 KiB); 4 KiB (f32 sums) of
// staging either way.
// Placeholders: {{SG}}, the adapter's subgroup size (fixed: its smallest equals its largest);
// {{ACC}}, the sums' type: f32, the adapter multiplying f16 into f32 tiles (an adapter
// offering f16 sums only refuses these variants, see gemm_caps.rs: the GEMM sums in f32).
//
// In bounds by construction (compiled without runtime checks, see gemm.rs): the global reads
// are gemm_fill.wgsl's or gemm_pipe.wgsl's, each under a test against m, n and k; the
// cooperative loads read 16 x 16 tiles at rows qm + 16 i + 0..16 < BM (and columns
// qn + 16 j + 0..16 < BN) of k rows kk + 0..16 < BK of a slice; the epilogue writes only rows
// below m and columns below n.

//# common
const BM = 128u;
const BN = 128u;
const BK = 32u;
const SG = {{SG}}u;
const WG = 4u * SG;
const RUN = 4u;
alias ACC = {{ACC}};

var<private> row: array<F, RUN>;
var<workgroup> Cs: array<ACC, 4u * 256u>;

// The 16 x 16 tile of C at (r0, c0) of batch entry `bt` from subgroup `sid`'s staging area,
// four columns per run.
fn epilogue(sid: u32, lane: u32, bt: u32, r0: u32, c0: u32) {
    workgroupBarrier();
    let m = P[0]; let n = P[2];
    let alpha = K[0];
    let beta = K[1];
    for (var u = lane; u < 64u; u += SG) {
        let r = r0 + u / 4u;
        let c = c0 + (u % 4u) * 4u;
        if (r >= m || c >= n) { continue; }
        for (var j = 0u; j < 4u; j++) {
            let cj = min(c + j, n - 1u);
            row[j] = alpha * F(Cs[sid * 256u + (u / 4u) * 16u + (u % 4u) * 4u + j]) + beta * input(P[10] + r * P[8] + cj * P[9]);
        }
        store_run(bt * m * n + r * n + c, min(4u, n - c));
    }
    workgroupBarrier();
}

//# single
var<workgroup> As: array<f16, BK * BM>;
var<workgroup> Bs: array<f16, BK * BN>;

fn put_a(i: u32, v: F) { As[i] = f16(v); }
fn put_a4(q: u32, v: vec4<F>) { for (var j = 0u; j < 4u; j++) { As[4u * q + j] = f16(v[j]); } }
fn put_b(i: u32, v: F) { Bs[i] = f16(v); }
fn put_b4(q: u32, v: vec4<F>) { for (var j = 0u; j < 4u; j++) { Bs[4u * q + j] = f16(v[j]); } }

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sid: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let m = P[0]; let k = P[1]; let n = P[2]; let batch = P[3];
    let bt = wg.z;
    let oa = P[13u + bt];
    let ob = P[13u + batch + bt];
    let row0 = wg.y * BM;
    let col0 = wg.x * BN;
    let qm = (sid / 2u) * 64u;
    let qn = (sid % 2u) * 64u;
    var c00 = coop_mat16x16<ACC, C>();
    var c01 = coop_mat16x16<ACC, C>();
    var c02 = coop_mat16x16<ACC, C>();
    var c03 = coop_mat16x16<ACC, C>();
    var c10 = coop_mat16x16<ACC, C>();
    var c11 = coop_mat16x16<ACC, C>();
    var c12 = coop_mat16x16<ACC, C>();
    var c13 = coop_mat16x16<ACC, C>();
    var c20 = coop_mat16x16<ACC, C>();
    var c21 = coop_mat16x16<ACC, C>();
    var c22 = coop_mat16x16<ACC, C>();
    var c23 = coop_mat16x16<ACC, C>();
    var c30 = coop_mat16x16<ACC, C>();
    var c31 = coop_mat16x16<ACC, C>();
    var c32 = coop_mat16x16<ACC, C>();
    var c33 = coop_mat16x16<ACC, C>();
    for (var t = 0u; t < k; t += BK) {
        fill_a(oa, row0, t, tid);
        fill_b(ob, col0, t, tid);
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk += 16u) {
            let a0 = coopLoad<coop_mat16x16<f16, A>>(&As[kk * BM + qm + 0u], BM);
            let a1 = coopLoad<coop_mat16x16<f16, A>>(&As[kk * BM + qm + 16u], BM);
            let a2 = coopLoad<coop_mat16x16<f16, A>>(&As[kk * BM + qm + 32u], BM);
            let a3 = coopLoad<coop_mat16x16<f16, A>>(&As[kk * BM + qm + 48u], BM);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[kk * BN + qn + 0u], BN);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[kk * BN + qn + 16u], BN);
            let b2 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[kk * BN + qn + 32u], BN);
            let b3 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[kk * BN + qn + 48u], BN);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
            c20 = coopMultiplyAdd(a2, b0, c20);
            c21 = coopMultiplyAdd(a2, b1, c21);
            c22 = coopMultiplyAdd(a2, b2, c22);
            c23 = coopMultiplyAdd(a2, b3, c23);
            c30 = coopMultiplyAdd(a3, b0, c30);
            c31 = coopMultiplyAdd(a3, b1, c31);
            c32 = coopMultiplyAdd(a3, b2, c32);
            c33 = coopMultiplyAdd(a3, b3, c33);
        }
        workgroupBarrier();
    }
    coopStoreT(c00, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 0u, col0 + qn + 0u);
    coopStoreT(c01, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 0u, col0 + qn + 16u);
    coopStoreT(c02, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 0u, col0 + qn + 32u);
    coopStoreT(c03, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 0u, col0 + qn + 48u);
    coopStoreT(c10, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 16u, col0 + qn + 0u);
    coopStoreT(c11, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 16u, col0 + qn + 16u);
    coopStoreT(c12, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 16u, col0 + qn + 32u);
    coopStoreT(c13, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 16u, col0 + qn + 48u);
    coopStoreT(c20, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 32u, col0 + qn + 0u);
    coopStoreT(c21, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 32u, col0 + qn + 16u);
    coopStoreT(c22, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 32u, col0 + qn + 32u);
    coopStoreT(c23, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 32u, col0 + qn + 48u);
    coopStoreT(c30, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 48u, col0 + qn + 0u);
    coopStoreT(c31, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 48u, col0 + qn + 16u);
    coopStoreT(c32, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 48u, col0 + qn + 32u);
    coopStoreT(c33, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 48u, col0 + qn + 48u);
}

//# double
const NA = BM * BK / 4u / WG;
const NB = BN * BK / 4u / WG;
alias R = vec4<f16>;

var<workgroup> As: array<f16, 2u * BK * BM>;
var<workgroup> Bs: array<f16, 2u * BK * BN>;

// `ra` into buffer `s` of A (layouts of gemm_pipe.wgsl's `loads`).
fn store_a(s: u32, tid: u32) {
    let mode = P[11];
    for (var e = 0u; e < NA; e++) {
        let u = tid + e * WG;
        if (mode == 0u || mode == 2u) {
            let r = u / (BK / 4u);
            let kk = (u % (BK / 4u)) * 4u;
            for (var j = 0u; j < 4u; j++) { As[(s * BK + kk + j) * BM + r] = ra[e][j]; }
        } else {
            let kk = u / (BM / 4u);
            let r = (u % (BM / 4u)) * 4u;
            for (var j = 0u; j < 4u; j++) { As[(s * BK + kk) * BM + r + j] = ra[e][j]; }
        }
    }
}

fn store_b(s: u32, tid: u32) {
    let mode = P[12];
    for (var e = 0u; e < NB; e++) {
        let u = tid + e * WG;
        if (mode == 0u || mode == 2u) {
            let kk = u / (BN / 4u);
            let c = (u % (BN / 4u)) * 4u;
            for (var j = 0u; j < 4u; j++) { Bs[(s * BK + kk) * BN + c + j] = rb[e][j]; }
        } else {
            let c = u / (BK / 4u);
            let kk = (u % (BK / 4u)) * 4u;
            for (var j = 0u; j < 4u; j++) { Bs[(s * BK + kk + j) * BN + c] = rb[e][j]; }
        }
    }
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sid: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let m = P[0]; let k = P[1]; let n = P[2]; let batch = P[3];
    let bt = wg.z;
    let oa = P[13u + bt];
    let ob = P[13u + batch + bt];
    let row0 = wg.y * BM;
    let col0 = wg.x * BN;
    let qm = (sid / 2u) * 64u;
    let qn = (sid % 2u) * 64u;
    var c00 = coop_mat16x16<ACC, C>();
    var c01 = coop_mat16x16<ACC, C>();
    var c02 = coop_mat16x16<ACC, C>();
    var c03 = coop_mat16x16<ACC, C>();
    var c10 = coop_mat16x16<ACC, C>();
    var c11 = coop_mat16x16<ACC, C>();
    var c12 = coop_mat16x16<ACC, C>();
    var c13 = coop_mat16x16<ACC, C>();
    var c20 = coop_mat16x16<ACC, C>();
    var c21 = coop_mat16x16<ACC, C>();
    var c22 = coop_mat16x16<ACC, C>();
    var c23 = coop_mat16x16<ACC, C>();
    var c30 = coop_mat16x16<ACC, C>();
    var c31 = coop_mat16x16<ACC, C>();
    var c32 = coop_mat16x16<ACC, C>();
    var c33 = coop_mat16x16<ACC, C>();
    // The host keeps k at most 2^32 - 1024, so the slice count does not overflow.
    let slices = (k + BK - 1u) / BK;
    load_a(oa, row0, 0u, tid);
    load_b(ob, col0, 0u, tid);
    store_a(0u, tid);
    store_b(0u, tid);
    workgroupBarrier();
    for (var i = 0u; i < slices; i++) {
        let s = i & 1u;
        let more = i + 1u < slices;
        if (more) {
            load_a(oa, row0, (i + 1u) * BK, tid);
            load_b(ob, col0, (i + 1u) * BK, tid);
        }
        for (var kk = s * BK; kk < s * BK + BK; kk += 16u) {
            let a0 = coopLoad<coop_mat16x16<f16, A>>(&As[kk * BM + qm + 0u], BM);
            let a1 = coopLoad<coop_mat16x16<f16, A>>(&As[kk * BM + qm + 16u], BM);
            let a2 = coopLoad<coop_mat16x16<f16, A>>(&As[kk * BM + qm + 32u], BM);
            let a3 = coopLoad<coop_mat16x16<f16, A>>(&As[kk * BM + qm + 48u], BM);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[kk * BN + qn + 0u], BN);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[kk * BN + qn + 16u], BN);
            let b2 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[kk * BN + qn + 32u], BN);
            let b3 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[kk * BN + qn + 48u], BN);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
            c20 = coopMultiplyAdd(a2, b0, c20);
            c21 = coopMultiplyAdd(a2, b1, c21);
            c22 = coopMultiplyAdd(a2, b2, c22);
            c23 = coopMultiplyAdd(a2, b3, c23);
            c30 = coopMultiplyAdd(a3, b0, c30);
            c31 = coopMultiplyAdd(a3, b1, c31);
            c32 = coopMultiplyAdd(a3, b2, c32);
            c33 = coopMultiplyAdd(a3, b3, c33);
        }
        if (more) {
            store_a(s ^ 1u, tid);
            store_b(s ^ 1u, tid);
        }
        workgroupBarrier();
    }
    coopStoreT(c00, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 0u, col0 + qn + 0u);
    coopStoreT(c01, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 0u, col0 + qn + 16u);
    coopStoreT(c02, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 0u, col0 + qn + 32u);
    coopStoreT(c03, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 0u, col0 + qn + 48u);
    coopStoreT(c10, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 16u, col0 + qn + 0u);
    coopStoreT(c11, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 16u, col0 + qn + 16u);
    coopStoreT(c12, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 16u, col0 + qn + 32u);
    coopStoreT(c13, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 16u, col0 + qn + 48u);
    coopStoreT(c20, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 32u, col0 + qn + 0u);
    coopStoreT(c21, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 32u, col0 + qn + 16u);
    coopStoreT(c22, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 32u, col0 + qn + 32u);
    coopStoreT(c23, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 32u, col0 + qn + 48u);
    coopStoreT(c30, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 48u, col0 + qn + 0u);
    coopStoreT(c31, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 48u, col0 + qn + 16u);
    coopStoreT(c32, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 48u, col0 + qn + 32u);
    coopStoreT(c33, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 48u, col0 + qn + 48u);
}
