//! The tiled matrix product (`matmul`, `addmm`, and the GEMMs of the convolutions), moved
//! here as it was: a new GEMM replaces it.

use super::{array_ty, binding, is_compute, scalar, u32_of};
use crate::backend::gpu::GpuStorage;
use crate::dtype::DType;
use crate::shape::Layout;

/// Tiled matrix product: each workgroup of 16x16 threads computes a 64x64 block of one
/// batch entry, 4x4 per thread, staging 64x16 slices of A and B in workgroup memory.
/// `C = alpha * A @ B (+ beta * I)`.
const MATMUL: &str = r#"
var<workgroup> As: array<array<T, 64>, 16>;
var<workgroup> Bs: array<array<T, 64>, 16>;

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let m = P[0]; let k = P[1]; let n = P[2]; let batch = P[3];
    let rsa = P[4]; let csa = P[5]; let rsb = P[6]; let csb = P[7];
    let rsi = P[8]; let csi = P[9]; let oi = P[10];
    let bt = wg.z;
    let oa = P[11u + bt];
    let ob = P[11u + batch + bt];
    let row0 = wg.y * 64u;
    let col0 = wg.x * 64u;
    let tid = lid.y * 16u + lid.x;
    var acc: array<array<T, 4>, 4>;
    for (var i = 0u; i < 4u; i++) { for (var j = 0u; j < 4u; j++) { acc[i][j] = T(0.0); } }
    for (var t = 0u; t < k; t += 16u) {
        for (var e = 0u; e < 4u; e++) {
            let idx = tid + e * 256u;
            let r = idx / 16u; let kk = idx % 16u;
            var v = T(0.0);
            if (row0 + r < m && t + kk < k) { v = A[oa + (row0 + r) * rsa + (t + kk) * csa]; }
            As[kk][r] = v;
            let kb = idx / 64u; let c = idx % 64u;
            var w = T(0.0);
            if (t + kb < k && col0 + c < n) { w = B[ob + (t + kb) * rsb + (col0 + c) * csb]; }
            Bs[kb][c] = w;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk++) {
            var av: array<T, 4>;
            var bv: array<T, 4>;
            for (var i = 0u; i < 4u; i++) { av[i] = As[kk][lid.y * 4u + i]; bv[i] = Bs[kk][lid.x * 4u + i]; }
            for (var i = 0u; i < 4u; i++) { for (var j = 0u; j < 4u; j++) { acc[i][j] = acc[i][j] + av[i] * bv[j]; } }
        }
        workgroupBarrier();
    }
    let alpha = K[0]; let beta = K[1];
    for (var i = 0u; i < 4u; i++) {
        let r = row0 + lid.y * 4u + i;
        if (r >= m) { continue; }
        for (var j = 0u; j < 4u; j++) {
            let c = col0 + lid.x * 4u + j;
            if (c >= n) { continue; }
            var v = alpha * acc[i][j];
            EPILOGUE
            Y[bt * m * n + r * n + c] = v;
        }
    }
}
"#;

/// `alpha * A @ B + beta * I` for `batch_offsets` matrices of A and B (element offsets of
/// each batch entry), A `[m, k]` with strides `(rsa, csa)`, B `[k, n]` with `(rsb, csb)`;
/// `input` is I viewed as `[m, n]` (`beta` is then applied; with `beta == 0` I is not read).
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul(
    a: &GpuStorage,
    b: &GpuStorage,
    (m, k, n): (usize, usize, usize),
    (a_strides, b_strides): ([usize; 2], [usize; 2]),
    batch_offsets: &[(usize, usize)],
    input: Option<(&GpuStorage, &Layout)>,
    (beta, alpha): (f64, f64),
) -> Option<GpuStorage> {
    let ctx = a.ctx();
    let dtype = a.dtype();
    if !is_compute(dtype) || batch_offsets.len() > 65535 {
        return None;
    }
    let batch = batch_offsets.len();
    let out = GpuStorage::uninit(ctx, dtype, batch * m * n);
    if batch * m * n == 0 {
        return Some(out);
    }
    let (li_strides, oi) = match input {
        Some((_, li)) => ([li.strides()[0], li.strides()[1]], li.offset()),
        None => ([0, 0], 0),
    };
    let mut p: Vec<u32> = [m, k, n, batch, a_strides[0], a_strides[1], b_strides[0], b_strides[1]]
        .iter()
        .chain(&li_strides)
        .chain(&[oi])
        .map(|&v| u32_of("matrix size or stride", v))
        .collect();
    p.extend(batch_offsets.iter().map(|&(oa, _)| u32_of("offset", oa)));
    p.extend(batch_offsets.iter().map(|&(_, ob)| u32_of("offset", ob)));
    let t = scalar(dtype);
    let (epilogue, input_decl) = match input {
        Some((i, _)) if beta != 0.0 => {
            ("v = v + beta * I[oi + r * rsi + c * csi];".to_string(), binding(4, "I", array_ty(i.dtype()), false))
        }
        _ => ("let unused = beta * T(rsi + csi + oi);".to_string(), String::new()),
    };
    let body = MATMUL.replace("EPILOGUE", &epilogue).replace("T(", &format!("{t}(")).replace("<T,", &format!("<{t},"));
    let src = format!(
        "@group(0) @binding(0) var<storage, read> P: array<u32>;\n{}{}{}{}{input_decl}{body}",
        binding(1, "K", t, false),
        binding(2, "A", t, false),
        binding(3, "B", t, false),
        binding(if input_decl.is_empty() { 4 } else { 5 }, "Y", t, true),
    );
    let k_bytes: Vec<u8> = if dtype == DType::F64 {
        [alpha, beta].iter().flat_map(|v| v.to_le_bytes()).collect()
    } else {
        [alpha as f32, beta as f32].iter().flat_map(|v| v.to_le_bytes()).collect()
    };
    let kb = ctx.upload(&k_bytes);
    let mut bufs = vec![&kb, a.buffer(), b.buffer()];
    if let (Some((i, _)), false) = (input, input_decl.is_empty()) {
        bufs.push(i.buffer());
    }
    bufs.push(out.buffer());
    ctx.dispatch3(&src, &p, &bufs, [n.div_ceil(64) as u32, m.div_ceil(64) as u32, batch as u32]);
    Some(out)
}
