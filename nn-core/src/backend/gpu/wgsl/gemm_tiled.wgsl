// Register-blocked GEMM: a workgroup computes a BM x BN block of one batch entry, each thread
// a TM x TN sub-block (rows ty*TM.., columns tx*TN..) held in vec4 registers, from BK-deep
// slices of A and B staged in workgroup memory (gemm_fill.wgsl) and read back as vec4.
// Placeholders: {{BM}} {{BN}} {{BK}} {{TM}} {{TN}} (TM and TN multiples of 4).
//
// `main` takes its accumulators, one slice's products and its epilogue ({{ACC}},
// {{PRODUCT}}, {{EPILOGUE}}) in one of two forms: the `loops_*` sections keep the
// accumulators in an array indexed by loop counters (compilers that unroll the loops keep
// it in registers); the unrolled form, written out by gemm.rs, holds them in named `vec4`
// variables, so no register array is ever indexed by a variable, whatever the compiler
// unrolls (one that does not unroll the loop form keeps its accumulators in local memory,
// one load and store per multiply-add).

//# common
const BM = {{BM}}u;
const BN = {{BN}}u;
const BK = {{BK}}u;
const TM = {{TM}}u;
const TN = {{TN}}u;
const WG = (BM / TM) * (BN / TN);
const RUN = TN;

var<private> row: array<F, RUN>;
var<workgroup> As: array<vec4<F>, BK * BM / 4u>;
var<workgroup> Bs: array<vec4<F>, BK * BN / 4u>;

fn put_a(i: u32, v: F) { As[i / 4u][i % 4u] = v; }
fn put_a4(q: u32, v: vec4<F>) { As[q] = v; }
fn put_b(i: u32, v: F) { Bs[i / 4u][i % 4u] = v; }
fn put_b4(q: u32, v: vec4<F>) { Bs[q] = v; }

//# main
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let m = P[0]; let k = P[1]; let n = P[2]; let batch = P[3];
    let bt = wg.z;
    let oa = P[13u + bt];
    let ob = P[13u + batch + bt];
    let row0 = wg.y * BM;
    let col0 = wg.x * BN;
    let tx = tid % (BN / TN);
    let ty = tid / (BN / TN);
{{ACC}}
    for (var t = 0u; t < k; t += BK) {
        fill_a(oa, row0, t, tid);
        fill_b(ob, col0, t, tid);
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            // This thread's rows of A and columns of B at depth kk, as vec4 units.
            let qa = (kk * BM + ty * TM) / 4u;
            let qb = (kk * BN + tx * TN) / 4u;
{{PRODUCT}}
        }
        workgroupBarrier();
    }
    let alpha = K[0];
    let beta = K[1];
    let c0 = col0 + tx * TN;
{{EPILOGUE}}
}

//# loops_acc
    var acc = array<vec4<F>, TM * TN / 4u>();
//# loops_product
            var a: array<vec4<F>, TM / 4u>;
            var b: array<vec4<F>, TN / 4u>;
            for (var i = 0u; i < TM / 4u; i++) { a[i] = As[qa + i]; }
            for (var j = 0u; j < TN / 4u; j++) { b[j] = Bs[qb + j]; }
            for (var i = 0u; i < TM; i++) {
                let ai = a[i / 4u][i % 4u];
                for (var j = 0u; j < TN / 4u; j++) {
                    acc[i * (TN / 4u) + j] += ai * b[j];
                }
            }
//# loops_epilogue
    for (var i = 0u; i < TM; i++) {
        let r = row0 + ty * TM + i;
        if (r >= m || c0 >= n) { continue; }
        for (var j = 0u; j < TN; j++) {
            let c = min(c0 + j, n - 1u);
            row[j] = alpha * acc[i * (TN / 4u) + j / 4u][j % 4u] + beta * input(P[10] + r * P[8] + c * P[9]);
        }
        store_run(bt * m * n + r * n + c0, min(TN, n - c0));
    }
