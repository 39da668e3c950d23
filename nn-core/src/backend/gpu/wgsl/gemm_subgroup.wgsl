// GEMM with the A fragments exchanged through subgroup shuffles instead of workgroup memory:
// a workgroup computes a 64 x 64 block, each thread 4 x 4 outputs (rows ty*4.., columns
// tx*4..). The LANES consecutive threads sharing a row group each read, per BK-deep slice,
// a different k of those rows from A straight into registers; in the product every k of the
// slice comes from its owner by `subgroupShuffle`. B is staged in workgroup memory
// (gemm_fill.wgsl). Threads are numbered from the subgroup builtins, so that a LANES-group
// is always inside one subgroup; LANES (placeholder {{LANES}}) divides 16 and the adapter's
// smallest subgroup size.

const BM = 64u;
const BN = 64u;
const BK = 16u;
const TM = 4u;
const TN = 4u;
const WG = 256u;
const RUN = TN;
const L = {{LANES}}u;
const H = BK / L;

var<private> row: array<F, RUN>;
var<workgroup> Bs: array<vec4<F>, BK * BN / 4u>;

fn put_b(i: u32, v: F) { Bs[i / 4u][i % 4u] = v; }
fn put_b4(q: u32, v: vec4<F>) { Bs[q] = v; }

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(subgroup_id) sid: u32,
    @builtin(subgroup_size) sgs: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let m = P[0]; let k = P[1]; let n = P[2]; let batch = P[3];
    let rsa = P[4]; let csa = P[5];
    let bt = wg.z;
    let oa = P[13u + bt];
    let ob = P[13u + batch + bt];
    let row0 = wg.y * BM;
    let col0 = wg.x * BN;
    let tid = sid * sgs + lane;
    let tx = tid % (BN / TN);
    let ty = tid / (BN / TN);
    let base = lane - lane % L;
    var acc = array<vec4<F>, TM>();
    for (var t = 0u; t < k; t += BK) {
        var own = array<F, TM * H>();
        for (var i = 0u; i < TM; i++) {
            let r = row0 + ty * TM + i;
            for (var h = 0u; h < H; h++) {
                let kk = t + lane % L + h * L;
                if (r < m && kk < k) { own[i * H + h] = ld1_lhs(oa + r * rsa + kk * csa); }
            }
        }
        fill_b(ob, col0, t, tid);
        workgroupBarrier();
        for (var h = 0u; h < H; h++) {
            for (var kl = 0u; kl < L; kl++) {
                let b = Bs[((h * L + kl) * BN + tx * TN) / 4u];
                for (var i = 0u; i < TM; i++) {
                    acc[i] += subgroupShuffle(own[i * H + h], base + kl) * b;
                }
            }
        }
        workgroupBarrier();
    }
    let alpha = K[0];
    let beta = K[1];
    let c0 = col0 + tx * TN;
    for (var i = 0u; i < TM; i++) {
        let r = row0 + ty * TM + i;
        if (r >= m || c0 >= n) { continue; }
        for (var j = 0u; j < TN; j++) {
            let c = min(c0 + j, n - 1u);
            row[j] = alpha * acc[i][j] + beta * input(P[10] + r * P[8] + c * P[9]);
        }
        store_run(bt * m * n + r * n + c0, min(TN, n - c0));
    }
}
