//! Raw f32 GEMM with the `gemm` crate (the kernel candle and burn-flex both call), to separate
//! framework overhead from kernel speed.
//!
//! `dst = lhs x rhs` with row-major, contiguous operands and a destination allocated once
//! (`read_dst = false`, so it is overwritten, not accumulated). Threads:
//! `Parallelism::Rayon(n)` on rayon's global pool when `RAYON_NUM_THREADS` = n > 1,
//! `Parallelism::None` otherwise (the machine's parallelism when it is unset).

use gemm::Parallelism;

use crate::{emit, gflops, median_ms, rayon_threads, Filter, GEMM_BUDGET_MS, GEMM_SIZES};

/// The `m x k x n` shapes of the MLP step: its forward products at batches 64 and 256 and the
/// weight gradients of its first layer (`x^T [784 x batch] x grad [batch x 256]`).
const MLP_SHAPES: [(usize, usize, usize); 4] = [(64, 784, 256), (256, 784, 256), (784, 64, 256), (784, 256, 256)];

/// Deterministic values in [-1, 1) (a small LCG: the figures do not depend on the values).
fn fill(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn time_gemm(name: &str, m: usize, k: usize, n: usize, parallelism: Parallelism) {
    let lhs = fill(m * k, 1);
    let rhs = fill(k * n, 2);
    let mut dst = vec![0f32; m * n];
    let ms = median_ms(
        || {
            // SAFETY: `dst` is m x n, `lhs` m x k and `rhs` k x n, all row-major (row stride =
            // column count, column stride 1) and live for the whole call; `dst` aliases
            // neither operand.
            unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    dst.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    lhs.as_ptr(),
                    1,
                    k as isize,
                    rhs.as_ptr(),
                    1,
                    n as isize,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    parallelism,
                )
            }
        },
        GEMM_BUDGET_MS,
    );
    std::hint::black_box(&dst);
    emit(name, ms, "GFLOP/s", gflops(m, k, n, ms));
}

/// Runs the selected workloads.
pub fn run(filter: &Filter) {
    let threads = rayon_threads();
    let parallelism = if threads > 1 { Parallelism::Rayon(threads) } else { Parallelism::None };
    for n in GEMM_SIZES {
        let name = format!("gemm_{n}");
        if filter.wants(&name) {
            time_gemm(&name, n, n, n, parallelism);
        }
    }
    for (m, k, n) in MLP_SHAPES {
        let name = format!("gemm_{m}x{k}x{n}");
        if filter.wants(&name) {
            time_gemm(&name, m, k, n, parallelism);
        }
    }
}
