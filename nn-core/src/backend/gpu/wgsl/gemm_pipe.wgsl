// Register-blocked GEMM with double-buffered staging (software pipelining): a workgroup
// computes a BM x BN block of one batch entry, each thread 8 x 8 outputs, from BK-deep slices
// of A and B held twice in workgroup memory. While the threads multiply slice i out of one
// buffer, the loads of slice i + 1 are already in flight into registers (`ra`, `rb`, four
// elements per register, one `vec4` load where the operand's mode allows); they go to the
// other buffer after the product, and one barrier per slice separates the two.
// A's slice is stored k-major (element (r, kk) at kk * SA + r) and B's row-major (kk * SB + c),
// each row padded by four elements against bank conflicts, so a thread reads its rows and
// columns of a k as `vec4`s. A thread's rows are ty*4.. and BM/2 + ty*4.., its columns
// tx*4.. and BN/2 + tx*4..: neighbouring threads read neighbouring `vec4`s.
// Load modes as in gemm_fill.wgsl. Placeholders: {{BM}} {{BN}} {{BK}}.
//
// In bounds by construction (the kernels compile without runtime checks, see gemm.rs): every
// read of A, B and the input and every write of Y sits under an explicit test of its row,
// column and depth against m, n and k (`vec4` reads cover a whole unit of a binding whose
// size is a multiple of 64 bytes); workgroup and private arrays are indexed by constants,
// loop counters under constant bounds and the thread's own index.

//# loads
// Global to registers, shared with gemm_coop_block.wgsl's `double` kernel: the kernel defines
// BM, BN, BK, WG, NA = BM * BK / 4 / WG, NB = BN * BK / 4 / WG and R, the register type (a
// `vec4` the loaded `vec4<F>` converts to).
var<private> ra: array<R, NA>;
var<private> rb: array<R, NB>;

// Slice `t` of A into `ra`: k fastest (modes 0, 2: row u / (BK/4), four k from (u % (BK/4)) * 4)
// or m fastest (modes 1, 3: k u / (BM/4), four rows from (u % (BM/4)) * 4).
fn load_a(oa: u32, row0: u32, t: u32, tid: u32) {
    let m = P[0]; let k = P[1]; let rs = P[4]; let cs = P[5]; let mode = P[11];
    let step = vec4<u32>(0u, 1u, 2u, 3u);
    for (var e = 0u; e < NA; e++) {
        let u = tid + e * WG;
        var v = vec4<F>();
        if (mode == 0u || mode == 2u) {
            let r = row0 + u / (BK / 4u);
            let kk = t + (u % (BK / 4u)) * 4u;
            if (mode == 2u && r < m && kk < k) {
                v = select(vec4<F>(), ld4_lhs((oa + r * rs + kk) / 4u), vec4<u32>(kk) + step < vec4<u32>(k));
            } else if (mode == 0u && r < m) {
                for (var j = 0u; j < 4u; j++) {
                    if (kk + j < k) { v[j] = ld1_lhs(oa + r * rs + (kk + j) * cs); }
                }
            }
        } else {
            let kk = t + u / (BM / 4u);
            let r = row0 + (u % (BM / 4u)) * 4u;
            if (mode == 3u && r < m && kk < k) {
                v = select(vec4<F>(), ld4_lhs((oa + r + kk * cs) / 4u), vec4<u32>(r) + step < vec4<u32>(m));
            } else if (mode == 1u && kk < k) {
                for (var j = 0u; j < 4u; j++) {
                    if (r + j < m) { v[j] = ld1_lhs(oa + (r + j) * rs + kk * cs); }
                }
            }
        }
        ra[e] = R(v);
    }
}

// Slice `t` of B into `rb`: n fastest (modes 0, 2: k u / (BN/4), four columns from
// (u % (BN/4)) * 4) or k fastest (modes 1, 3: column u / (BK/4), four k from (u % (BK/4)) * 4).
fn load_b(ob: u32, col0: u32, t: u32, tid: u32) {
    let k = P[1]; let n = P[2]; let rs = P[6]; let cs = P[7]; let mode = P[12];
    let step = vec4<u32>(0u, 1u, 2u, 3u);
    for (var e = 0u; e < NB; e++) {
        let u = tid + e * WG;
        var v = vec4<F>();
        if (mode == 0u || mode == 2u) {
            let kk = t + u / (BN / 4u);
            let c = col0 + (u % (BN / 4u)) * 4u;
            if (mode == 2u && kk < k && c < n) {
                v = select(vec4<F>(), ld4_rhs((ob + kk * rs + c) / 4u), vec4<u32>(c) + step < vec4<u32>(n));
            } else if (mode == 0u && kk < k) {
                for (var j = 0u; j < 4u; j++) {
                    if (c + j < n) { v[j] = ld1_rhs(ob + kk * rs + (c + j) * cs); }
                }
            }
        } else {
            let c = col0 + u / (BK / 4u);
            let kk = t + (u % (BK / 4u)) * 4u;
            if (mode == 3u && kk < k && c < n) {
                v = select(vec4<F>(), ld4_rhs((ob + kk + c * cs) / 4u), vec4<u32>(kk) + step < vec4<u32>(k));
            } else if (mode == 1u && c < n) {
                for (var j = 0u; j < 4u; j++) {
                    if (kk + j < k) { v[j] = ld1_rhs(ob + (kk + j) * rs + c * cs); }
                }
            }
        }
        rb[e] = R(v);
    }
}

//# main
const BM = {{BM}}u;
const BN = {{BN}}u;
const BK = {{BK}}u;
const WG = (BM / 8u) * (BN / 8u);
const RUN = 4u;
const SA = BM + 4u;
const SB = BN + 4u;
const NA = BM * BK / 4u / WG;
const NB = BN * BK / 4u / WG;

alias R = vec4<F>;

var<private> row: array<F, RUN>;
var<workgroup> As: array<vec4<F>, 2u * BK * SA / 4u>;
var<workgroup> Bs: array<vec4<F>, 2u * BK * SB / 4u>;

fn store_a(s: u32, tid: u32) {
    let mode = P[11];
    for (var e = 0u; e < NA; e++) {
        let u = tid + e * WG;
        if (mode == 0u || mode == 2u) {
            let r = u / (BK / 4u);
            let kk = (u % (BK / 4u)) * 4u;
            for (var j = 0u; j < 4u; j++) {
                As[(s * BK + kk + j) * (SA / 4u) + r / 4u][r % 4u] = ra[e][j];
            }
        } else {
            let kk = u / (BM / 4u);
            let r = (u % (BM / 4u)) * 4u;
            As[(s * BK + kk) * (SA / 4u) + r / 4u] = ra[e];
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
            Bs[(s * BK + kk) * (SB / 4u) + c / 4u] = rb[e];
        } else {
            let c = u / (BK / 4u);
            let kk = (u % (BK / 4u)) * 4u;
            for (var j = 0u; j < 4u; j++) {
                Bs[(s * BK + kk + j) * (SB / 4u) + c / 4u][c % 4u] = rb[e][j];
            }
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let m = P[0]; let k = P[1]; let n = P[2]; let batch = P[3];
    let bt = wg.z;
    let oa = P[13u + bt];
    let ob = P[13u + batch + bt];
    let row0 = wg.y * BM;
    let col0 = wg.x * BN;
    let tx = tid % (BN / 8u);
    let ty = tid / (BN / 8u);
    // acc[ri * 2 + h]: row ri (ty*4 + ri, or BM/2 + ty*4 + ri - 4), columns of half h.
    var acc = array<vec4<F>, 16>();
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
        for (var kk = 0u; kk < BK; kk++) {
            let qa = (s * BK + kk) * (SA / 4u);
            let qb = (s * BK + kk) * (SB / 4u);
            let a0 = As[qa + ty];
            let a1 = As[qa + BM / 8u + ty];
            let b0 = Bs[qb + tx];
            let b1 = Bs[qb + BN / 8u + tx];
            for (var r = 0u; r < 4u; r++) {
                acc[r * 2u] += a0[r] * b0;
                acc[r * 2u + 1u] += a0[r] * b1;
                acc[(r + 4u) * 2u] += a1[r] * b0;
                acc[(r + 4u) * 2u + 1u] += a1[r] * b1;
            }
        }
        if (more) {
            store_a(s ^ 1u, tid);
            store_b(s ^ 1u, tid);
        }
        workgroupBarrier();
    }
    let alpha = K[0];
    let beta = K[1];
    for (var ri = 0u; ri < 8u; ri++) {
        let r = row0 + (ri / 4u) * (BM / 2u) + ty * 4u + ri % 4u;
        for (var h = 0u; h < 2u; h++) {
            let c0 = col0 + h * (BN / 2u) + tx * 4u;
            if (r >= m || c0 >= n) { continue; }
            for (var j = 0u; j < 4u; j++) {
                let c = min(c0 + j, n - 1u);
                row[j] = alpha * acc[ri * 2u + h][j] + beta * input(P[10] + r * P[8] + c * P[9]);
            }
            store_run(bt * m * n + r * n + c0, min(4u, n - c0));
        }
    }
}
