// Staging of operand tiles in workgroup memory, shared by the GEMM kernels (kernels as in
// gemm_elem.wgsl). A kernel defines BM, BN, BK, WG and the writers `put_a(i, v)`,
// `put_a4(q, v)` (element `i`, or elements `4q..4q+4`, of the A tile held k-major: element
// (r, kk) at `kk * BM + r`) and likewise `put_b`/`put_b4` (element (kk, c) at `kk * BN + c`).
// Elements outside the matrix are staged as zero, so edge tiles need no other care.
//
// The load modes (P[11] for A, P[12] for B), chosen on the host from the strides:
//   A: 0 any strides, k fastest; 1 any strides, m fastest;
//      2 k contiguous, four k per load; 3 m contiguous, four rows per load.
//   B: 0 any strides, n fastest; 1 any strides, k fastest;
//      2 n contiguous, four columns per load; 3 k contiguous, four k per load.
// Modes 2 and 3 need the offsets and the other stride to be multiples of four (checked on
// the host), so a load of four never straddles a unit of the binding.

//# fill_a
fn fill_a(oa: u32, row0: u32, t: u32, tid: u32) {
    let m = P[0]; let k = P[1]; let rs = P[4]; let cs = P[5]; let mode = P[11];
    let step = vec4<u32>(0u, 1u, 2u, 3u);
    if (mode == 2u) {
        for (var e = 0u; e < BM * BK / 4u / WG; e++) {
            let u = tid + e * WG;
            let r = u / (BK / 4u);
            let kk = (u % (BK / 4u)) * 4u;
            var v = vec4<F>();
            if (row0 + r < m && t + kk < k) {
                v = select(vec4<F>(), ld4_lhs((oa + (row0 + r) * rs + t + kk) / 4u), vec4<u32>(t + kk) + step < vec4<u32>(k));
            }
            for (var j = 0u; j < 4u; j++) { put_a((kk + j) * BM + r, v[j]); }
        }
    } else if (mode == 3u) {
        for (var e = 0u; e < BM * BK / 4u / WG; e++) {
            let u = tid + e * WG;
            let kk = u / (BM / 4u);
            let r = (u % (BM / 4u)) * 4u;
            var v = vec4<F>();
            if (row0 + r < m && t + kk < k) {
                v = select(vec4<F>(), ld4_lhs((oa + row0 + r + (t + kk) * cs) / 4u), vec4<u32>(row0 + r) + step < vec4<u32>(m));
            }
            put_a4((kk * BM + r) / 4u, v);
        }
    } else {
        for (var e = 0u; e < BM * BK / WG; e++) {
            let u = tid + e * WG;
            var r = u / BK;
            var kk = u % BK;
            if (mode == 1u) { r = u % BM; kk = u / BM; }
            var v = F(0);
            if (row0 + r < m && t + kk < k) { v = ld1_lhs(oa + (row0 + r) * rs + (t + kk) * cs); }
            put_a(kk * BM + r, v);
        }
    }
}

//# fill_b
fn fill_b(ob: u32, col0: u32, t: u32, tid: u32) {
    let k = P[1]; let n = P[2]; let rs = P[6]; let cs = P[7]; let mode = P[12];
    let step = vec4<u32>(0u, 1u, 2u, 3u);
    if (mode == 2u) {
        for (var e = 0u; e < BN * BK / 4u / WG; e++) {
            let u = tid + e * WG;
            let kk = u / (BN / 4u);
            let c = (u % (BN / 4u)) * 4u;
            var v = vec4<F>();
            if (t + kk < k && col0 + c < n) {
                v = select(vec4<F>(), ld4_rhs((ob + (t + kk) * rs + col0 + c) / 4u), vec4<u32>(col0 + c) + step < vec4<u32>(n));
            }
            put_b4((kk * BN + c) / 4u, v);
        }
    } else if (mode == 3u) {
        for (var e = 0u; e < BN * BK / 4u / WG; e++) {
            let u = tid + e * WG;
            let c = u / (BK / 4u);
            let kk = (u % (BK / 4u)) * 4u;
            var v = vec4<F>();
            if (t + kk < k && col0 + c < n) {
                v = select(vec4<F>(), ld4_rhs((ob + t + kk + (col0 + c) * cs) / 4u), vec4<u32>(t + kk) + step < vec4<u32>(k));
            }
            for (var j = 0u; j < 4u; j++) { put_b((kk + j) * BN + c, v[j]); }
        }
    } else {
        for (var e = 0u; e < BN * BK / WG; e++) {
            let u = tid + e * WG;
            var kk = u / BN;
            var c = u % BN;
            if (mode == 1u) { kk = u % BK; c = u / BK; }
            var w = F(0);
            if (t + kk < k && col0 + c < n) { w = ld1_rhs(ob + (t + kk) * rs + (col0 + c) * cs); }
            put_b(kk * BN + c, w);
        }
    }
}
