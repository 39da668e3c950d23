// GEMM on cooperative matrices (tensor cores) for f16 tensors: f16 products summed in f32.
// A workgroup of four subgroups computes a 64 x 64 block, each subgroup a 32 x 32 quadrant as
// 2 x 2 tiles of 16 x 16 (`coop_mat16x16`). BK-deep slices of A and B are staged in workgroup
// memory as f16 (gemm_fill.wgsl, zero outside the matrix, so any m, k, n work). Each sum tile
// goes through a 16 x 16 f32 staging area of its subgroup to the epilogue (alpha, beta,
// rounding to f16, edge masking), run by the subgroup's threads: 12 KiB of workgroup memory.
// Placeholder: {{SG}}, the adapter's subgroup size (fixed: its smallest equals its largest).

const BM = 64u;
const BN = 64u;
const BK = 32u;
const SG = {{SG}}u;
const WG = 4u * SG;
const RUN = 4u;

var<private> row: array<F, RUN>;
// A's slice column-major (element (r, kk) at kk * BM + r), B's row-major (kk * BN + c).
var<workgroup> As: array<f16, BK * BM>;
var<workgroup> Bs: array<f16, BK * BN>;
var<workgroup> Cs: array<f32, 4u * 256u>;

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
    let qm = (sid / 2u) * 32u;
    let qn = (sid % 2u) * 32u;
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    for (var t = 0u; t < k; t += BK) {
        fill_a(oa, row0, t, tid);
        fill_b(ob, col0, t, tid);
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk += 16u) {
            let a0 = coopLoad<coop_mat16x16<f16, A>>(&As[kk * BM + qm], BM);
            let a1 = coopLoad<coop_mat16x16<f16, A>>(&As[kk * BM + qm + 16u], BM);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[kk * BN + qn], BN);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[kk * BN + qn + 16u], BN);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
        }
        workgroupBarrier();
    }
    coopStoreT(c00, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm, col0 + qn);
    coopStoreT(c01, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm, col0 + qn + 16u);
    coopStoreT(c10, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 16u, col0 + qn);
    coopStoreT(c11, &Cs[sid * 256u], 16u);
    epilogue(sid, lane, bt, row0 + qm + 16u, col0 + qn + 16u);
}

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
            row[j] = alpha * Cs[sid * 256u + (u / 4u) * 16u + (u % 4u) * 4u + j] + beta * input(P[10] + r * P[8] + cj * P[9]);
        }
        store_run(bt * m * n + r * n + c, min(4u, n - c));
    }
    workgroupBarrier();
}
