//! The GEMM every CPU kernel goes through, [`gemm`] (`C = alpha A B + beta C`, operands
//! with any non-negative strides, bounds checked), and the choice of kernel and threads
//! behind it.
//!
//! Two backends, chosen once per process by measurement on this project's reference
//! machine (a 2-core Sapphire Rapids; the criterion group `gemm_backends_f32`,
//! `cargo bench -p nn-bench -- gemm_backends`, compares the two on the workloads' shapes):
//!
//! - the [`gemm`](https://docs.rs/gemm) crate with its AVX-512 (`x86-v4`) kernels, picked
//!   at run time when the CPU has AVX-512F. Single-threaded it beats `matrixmultiply`
//!   0.3.11 (which has AVX-512 kernels too) on the workloads' shapes: square 128 and 512,
//!   the MLP forward 64x784x256, the CNN's convolution products (16x72x4576, 8x9x23296)
//!   and weight gradients (8x23296x9, 16x4576x72), the Transformer projections; the one
//!   near-tie is the MLP weight gradient 256x64x784;
//! - `matrixmultiply` everywhere else (CPUs without AVX-512, other architectures), where
//!   no measurement compares the two.
//!
//! `NN_GEMM=gemm` or `NN_GEMM=matrixmultiply` overrides the choice (for benchmarking).
//!
//! Threads: one team for every kernel ([`super::team`]). A GEMM of at least
//! [`PAR_MADDS`] multiply-adds is cut into one block of C per team member, the caller
//! taking one; called from inside a team task or a rayon task (a conv block, a batch of
//! small matmuls, user code in `par_iter`) it runs on that thread, so nested parallelism
//! never oversubscribes the cores (as `matrixmultiply`'s own thread pool would next to
//! rayon's, slowing the CNN step at 2 threads: the `compare.py` row `cnn_step_b32`).

use std::sync::OnceLock;

/// Below this many multiply-adds a GEMM runs on one thread. With rayon (the caller asleep
/// while the pool works) splitting would pay off only from 2^24; on the CPU team (the
/// caller takes a block itself, the helper is awake) it does from 2^20: at 2 threads the
/// MLP forward and step at batch 64 (12.8M multiply-adds in the forward) are faster with
/// 2^20 than with 2^24 (the `compare.py` rows `mlp_forward_layers` and `mlp_step_b64`).
pub(crate) const PAR_MADDS: usize = 1 << 20;

/// Which kernel library runs a GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// The `gemm` crate (runtime-dispatched AVX-512 kernels).
    Gemm,
    /// `matrixmultiply`.
    MatrixMultiply,
}

/// The backend of this process (see the module docs).
pub(crate) fn backend() -> Backend {
    static CHOICE: OnceLock<Backend> = OnceLock::new();
    *CHOICE.get_or_init(|| {
        // The kernel libraries allocate their packing buffers on every call: keep the
        // heap's pages from going back to the OS between calls (see the function).
        super::buffer_pool::keep_heap_pages();
        match std::env::var("NN_GEMM").as_deref() {
            Ok("gemm") => Backend::Gemm,
            Ok("matrixmultiply") => Backend::MatrixMultiply,
            _ if has_avx512() => Backend::Gemm,
            _ => Backend::MatrixMultiply,
        }
    })
}

/// Whether the `gemm` crate's AVX-512 kernels run here. `NN_NO_AVX512=1` turns them off
/// with the other AVX-512 copies ([`super::isa_loops`]), so that an AVX-512 machine also tests
/// the `matrixmultiply` path every other CPU takes.
fn has_avx512() -> bool {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        let off = std::env::var_os("NN_NO_AVX512").is_some_and(|v| v == "1");
        !off && std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
    {
        false
    }
}

/// From this many multiply-adds a GEMM goes to the team even while its cores are far apart
/// (see [`super::team`]). On far cores the CNN's 4.5M-multiply-add products lose more in
/// moving their operands between the cores than they gain; the MLP's and Transformer's of
/// 17M to 67M still gain (the `compare.py` rows `cnn_step_b32`, `mlp_step_b256` and
/// `transformer_step` at 2 threads).
pub(crate) const FAR_PAR_MADDS: usize = 1 << 24;

/// How many blocks of `C` a GEMM of this size is cut into here. The values depend on the
/// cut (the gemm crate's kernels sum a block's products in an order that depends on its
/// shape), so it follows the team's size ([`super::team::parts`]), never the measured
/// distance between its cores, which only decides whether the blocks run on the team
/// (see [`run_with`]). Cut by that distance, the same MNIST CNN would give different
/// values from run to run.
fn threads_for(m: usize, k: usize, n: usize) -> usize {
    let madds = m.saturating_mul(k).saturating_mul(n);
    if madds >= PAR_MADDS {
        super::team::parts()
    } else {
        1
    }
}

/// The operands of one GEMM call: `m x k` times `k x n` into `m x n`, strides in elements.
#[derive(Clone, Copy)]
pub(crate) struct Gemm<T> {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub alpha: T,
    pub a: *const T,
    pub rsa: isize,
    pub csa: isize,
    pub b: *const T,
    pub rsb: isize,
    pub csb: isize,
    pub beta: T,
    pub c: *mut T,
    pub rsc: isize,
    pub csc: isize,
}

// SAFETY: a `Gemm` is only sent to other threads by `split` below, which hands each thread
// a disjoint block of `c`; `a` and `b` are only read.
unsafe impl<T: Send> Send for Gemm<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for Gemm<T> {}

impl<T: Copy> Gemm<T> {
    /// `c = alpha a b + beta c` over slices: `a` is `m x k` and `b` is `k x n` with the
    /// given (row, column) strides, `c` is row-major. (Only the pointers are kept.)
    #[cfg(test)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn over(
        (m, k, n): (usize, usize, usize),
        alpha: T,
        (a, sa): (&[T], (usize, usize)),
        (b, sb): (&[T], (usize, usize)),
        beta: T,
        c: &mut [T],
    ) -> Gemm<T> {
        let (rsa, csa, rsb, csb) = (sa.0 as isize, sa.1 as isize, sb.0 as isize, sb.1 as isize);
        let (a, b, c, rsc) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), n as isize);
        Gemm { m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc: 1 }
    }

    /// How [`run_with`] cuts C over `threads` threads: by rows or by columns, and the
    /// rows or columns per block.
    ///
    /// Each block is a call of its own, and the gemm crate packs an operand it cannot read
    /// in place anew in every call: a block of rows packs all of B again, a block of
    /// columns all of A. With row-major C, the crate packs B into panels by gathering
    /// unless B's rows are contiguous (`x W^T`, a linear layer's forward, gathers `W`),
    /// and A unless A's rows are (`dY^T X`, its weight gradient, packs `dY`). So C is cut
    /// along the side that leaves the gathered operand whole in each block: a linear
    /// layer's forward by columns, its weight gradient by rows: so cut, a block of the
    /// 784-256 layer at batch 256 runs faster than cut the other way, forward and weight
    /// gradient alike (the `compare.py` row `mlp_step_b256`). Otherwise (both or neither
    /// gathered, `matrixmultiply`, or too narrow a side) the longer side is cut.
    ///
    /// Columns go in multiples of 16, the kernel's rows as the crate sees C (the crate
    /// computes a row-major C as its column-major transpose): cut in 392 and 392, the
    /// weight gradient's 784 columns would leave each block a ragged panel of 8.
    fn split(&self, backend: Backend, threads: usize) -> (bool, usize) {
        let (gather_a, gather_b) = (self.csa != 1, self.csb != 1);
        let by_rows = match backend {
            Backend::Gemm if gather_b && !gather_a && self.n >= 64 * threads => false,
            Backend::Gemm if gather_a && !gather_b && self.m >= 16 * threads => true,
            _ => self.m >= self.n,
        };
        if by_rows {
            (true, self.m.div_ceil(threads))
        } else if backend == Backend::Gemm && self.n >= 64 * threads {
            (false, self.n.div_ceil(threads).next_multiple_of(16))
        } else {
            (false, self.n.div_ceil(threads))
        }
    }

    /// Rows (`by_rows`) or columns `start..start + size` of C, with the matching rows of
    /// A or columns of B. (A method, so closures capture the whole `Send` value.)
    fn block(&self, by_rows: bool, start: usize, size: usize) -> Gemm<T> {
        let s = start as isize;
        // `wrapping_offset`: plain address arithmetic; the result is only dereferenced
        // by the kernel, inside the bounds the caller vouched for.
        if by_rows {
            Gemm { m: size, a: self.a.wrapping_offset(s * self.rsa), c: self.c.wrapping_offset(s * self.rsc), ..*self }
        } else {
            Gemm { n: size, b: self.b.wrapping_offset(s * self.csb), c: self.c.wrapping_offset(s * self.csc), ..*self }
        }
    }
}

/// The element types with kernels in both libraries.
pub(crate) trait Kernels: Copy + Send + Sync + num_traits::Float + 'static {
    /// `matrixmultiply`'s kernel for this type.
    ///
    /// # Safety
    /// As [`run_with`].
    unsafe fn matrixmultiply(g: &Gemm<Self>);
}

impl Kernels for f32 {
    unsafe fn matrixmultiply(g: &Gemm<f32>) {
        // SAFETY: forwarded contract.
        unsafe {
            matrixmultiply::sgemm(
                g.m, g.k, g.n, g.alpha, g.a, g.rsa, g.csa, g.b, g.rsb, g.csb, g.beta, g.c, g.rsc, g.csc,
            )
        }
    }
}

impl Kernels for f64 {
    unsafe fn matrixmultiply(g: &Gemm<f64>) {
        // SAFETY: forwarded contract.
        unsafe {
            matrixmultiply::dgemm(
                g.m, g.k, g.n, g.alpha, g.a, g.rsa, g.csa, g.b, g.rsb, g.csb, g.beta, g.c, g.rsc, g.csc,
            )
        }
    }
}

/// A read-only matrix operand of [`gemm`]: element `(i, j)` is
/// `data[offset + i * row_stride + j * col_stride]` (a stride may be 0, for a broadcast).
#[derive(Clone, Copy)]
pub(crate) struct MatRef<'a, T> {
    /// The buffer holding the matrix.
    pub data: &'a [T],
    /// Index of element `(0, 0)`.
    pub offset: usize,
    /// Step between rows.
    pub row_stride: usize,
    /// Step between columns.
    pub col_stride: usize,
}

impl<'a, T> MatRef<'a, T> {
    /// A row-major `rows x cols` matrix at the start of `data`, or its transpose read in
    /// place (`transposed`: `data` holds the `cols x rows` matrix).
    pub(crate) fn row_major(data: &'a [T], (rows, cols): (usize, usize), transposed: bool) -> Self {
        let (row_stride, col_stride) = if transposed { (1, rows) } else { (cols, 1) };
        MatRef { data, offset: 0, row_stride, col_stride }
    }

    /// Panics unless every element of a `rows x cols` view lies inside `data`.
    #[track_caller]
    fn check(&self, what: &str, rows: usize, cols: usize) {
        if rows == 0 || cols == 0 {
            return;
        }
        let last = (rows - 1)
            .checked_mul(self.row_stride)
            .and_then(|r| (cols - 1).checked_mul(self.col_stride).and_then(|c| r.checked_add(c)))
            .and_then(|rc| rc.checked_add(self.offset));
        assert!(
            last.is_some_and(|l| l < self.data.len()),
            "gemm: operand {what} ({rows} x {cols}, strides {} and {}, offset {}) overruns its buffer of {}",
            self.row_stride,
            self.col_stride,
            self.offset,
            self.data.len()
        );
    }
}

/// `c = alpha a b + beta c` for `a: m x k`, `b: k x n` and `c` an `m x n` row-major
/// slice, with the process's kernel library and thread policy; every operand's extent is
/// checked against its buffer. With `beta = 0`, `c` is not read (BLAS semantics: its NaN
/// do not propagate). With [`gemm_uninit`] (the same checks and call, for a fresh
/// output), the one way into GEMM for every kernel.
#[track_caller]
pub(crate) fn gemm<T: Kernels>(
    dims: (usize, usize, usize),
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    c: &mut [T],
) {
    gemm_on(backend(), dims, alpha, a, b, beta, c)
}

/// [`gemm`] on an explicit kernel library (the benchmark that chose the default calls it).
#[track_caller]
pub(crate) fn gemm_on<T: Kernels>(
    library: Backend,
    (m, k, n): (usize, usize, usize),
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    c: &mut [T],
) {
    // SAFETY: an exclusive borrow of initialized elements, at least `m * n` (checked).
    unsafe { gemm_raw(library, (m, k, n), alpha, a, b, beta, (c.as_mut_ptr(), c.len(), n)) }
}

/// [`gemm`] with `beta = 0` into uninitialized memory (never read), which the product
/// initializes: a fresh output needs no zeroing pass first (zero-filling the products'
/// outputs would be a measurable part of the `compare.py` row `transformer_step`).
#[track_caller]
pub(crate) fn gemm_uninit<T: Kernels>(
    dims: (usize, usize, usize),
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: &mut [std::mem::MaybeUninit<T>],
) {
    gemm_uninit_rows(dims, alpha, a, b, (c, dims.2))
}

/// [`gemm_uninit`] into rows `rsc` apart: row `i` of the product is
/// `c[i * rsc..i * rsc + n]`, and the elements between rows are left as they are (one
/// head's block of a token-major `[L, H, D]` output).
#[track_caller]
pub(crate) fn gemm_uninit_rows<T: Kernels>(
    dims: (usize, usize, usize),
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    (c, rsc): (&mut [std::mem::MaybeUninit<T>], usize),
) {
    assert!(dims.1 > 0, "gemm_uninit: an empty sum would leave the output unwritten");
    // SAFETY: an exclusive borrow; with beta = 0 the kernels only write C (BLAS
    // semantics, which both libraries follow), so its elements need not be initialized.
    unsafe { gemm_raw(backend(), dims, alpha, a, b, T::zero(), (c.as_mut_ptr().cast(), c.len(), rsc)) }
}

/// [`gemm`] into rows `rsc` apart: row `i` of the product is `c[i * rsc..i * rsc + n]`,
/// and the elements between rows are left as they are (one block of keys of a query
/// block's scores).
#[track_caller]
pub(crate) fn gemm_rows<T: Kernels>(
    dims: (usize, usize, usize),
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    (c, rsc): (&mut [T], usize),
) {
    // SAFETY: an exclusive borrow of initialized elements (the extent is checked).
    unsafe { gemm_raw(backend(), dims, alpha, a, b, beta, (c.as_mut_ptr(), c.len(), rsc)) }
}

/// [`gemm_uninit_rows`] adding to what the product's rows hold: `c = alpha a b + c` (the
/// key gradients of a grouped-query head, summed over the query heads of its group).
///
/// # Safety
/// The product's elements of `c` (`m` rows of `n`, `rsc` apart) are initialized.
#[track_caller]
pub(crate) unsafe fn gemm_add_rows<T: Kernels>(
    dims: (usize, usize, usize),
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    (c, rsc): (&mut [std::mem::MaybeUninit<T>], usize),
) {
    // SAFETY: an exclusive borrow; the kernels read only the product's elements of C,
    // initialized by the caller's contract.
    unsafe { gemm_raw(backend(), dims, alpha, a, b, T::one(), (c.as_mut_ptr().cast(), c.len(), rsc)) }
}

/// The checks and the call behind [`gemm_on`], [`gemm_uninit`], [`gemm_uninit_rows`],
/// [`gemm_rows`] and [`gemm_add_rows`]: row `i` of the product is `c[i * rsc..i * rsc + n]`.
///
/// # Safety
/// `c` points to `c_len` elements borrowed exclusively; unless `beta` is 0, the product's
/// elements among them are initialized (the kernels read no others).
#[track_caller]
unsafe fn gemm_raw<T: Kernels>(
    library: Backend,
    (m, k, n): (usize, usize, usize),
    alpha: T,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: T,
    (c, c_len, rsc): (*mut T, usize, usize),
) {
    a.check("a", m, k);
    b.check("b", k, n);
    assert!(rsc >= n, "gemm: output rows {rsc} apart overlap rows of {n}");
    let span = if m == 0 || n == 0 { 0 } else { (m - 1) * rsc + n };
    assert!(c_len >= span, "gemm: output of {c_len} elements for {m} x {n}, rows {rsc} apart");
    let g = Gemm {
        m,
        k,
        n,
        alpha,
        a: a.data[a.offset.min(a.data.len())..].as_ptr(),
        rsa: a.row_stride as isize,
        csa: a.col_stride as isize,
        b: b.data[b.offset.min(b.data.len())..].as_ptr(),
        rsb: b.row_stride as isize,
        csb: b.col_stride as isize,
        beta,
        c,
        rsc: rsc as isize,
        csc: 1,
    };
    // SAFETY: the checks above bound every element the strides reach in `a`, `b` and
    // `c` (rows `rsc >= n` apart: no two share an element); `c` is borrowed exclusively
    // (the caller's contract), so it overlaps neither operand.
    unsafe { run_with(library, g) }
}

/// Runs one GEMM with an explicit kernel library and the thread policy.
///
/// # Safety
/// `a`, `b` and `c` with their strides must describe valid matrices of the given sizes;
/// `c` must not overlap `a` or `b`, and no two of its elements may share an address.
pub(crate) unsafe fn run_with<T: Kernels>(backend: Backend, g: Gemm<T>) {
    if g.m == 0 || g.n == 0 {
        return;
    }
    if g.k == 0 {
        // An empty sum: C = beta C (and exactly zero when beta is zero, whatever C held).
        for i in 0..g.m as isize {
            for j in 0..g.n as isize {
                // SAFETY: inside C by the contract.
                unsafe {
                    let p = g.c.offset(i * g.rsc + j * g.csc);
                    *p = if g.beta == T::zero() { T::zero() } else { g.beta * *p };
                }
            }
        }
        return;
    }
    let threads = threads_for(g.m, g.k, g.n);
    if threads > 1 {
        // Split C into one block per thread, each a single-threaded call (see `split`).
        // (The gemm crate's own rayon splitting is slower here: with it, a 784-256 MLP step
        // at batch 64 is slower on 2 threads than on 1; the `compare.py` row `mlp_step_b64`.)
        let (by_rows, chunk) = g.split(backend, threads);
        let len = if by_rows { g.m } else { g.n };
        let block = |i: usize| {
            let part = g.block(by_rows, i * chunk, chunk.min(len - i * chunk));
            // SAFETY: each part writes a disjoint block of C, inside it by the contract.
            unsafe { single(backend, &part) }
        };
        // Large products go to the team even while its cores are far apart; smaller
        // ones only while they are near (the same blocks either way).
        let madds = g.m.saturating_mul(g.k).saturating_mul(g.n);
        if madds >= FAR_PAR_MADDS {
            super::team::run_large(len.div_ceil(chunk), block);
        } else {
            super::team::run(len.div_ceil(chunk), block);
        }
    } else {
        // SAFETY: forwarded contract.
        unsafe { single(backend, &g) }
    }
}

/// One GEMM on the calling thread.
///
/// # Safety
/// As [`run_with`].
unsafe fn single<T: Kernels>(backend: Backend, g: &Gemm<T>) {
    match backend {
        // The gemm crate computes `dst = alpha dst + beta lhs rhs` and takes column
        // strides before row strides.
        // SAFETY: forwarded contract.
        Backend::Gemm => unsafe {
            gemm::gemm(
                g.m,
                g.n,
                g.k,
                g.c,
                g.csc,
                g.rsc,
                g.beta != T::zero(),
                g.a,
                g.csa,
                g.rsa,
                g.b,
                g.csb,
                g.rsb,
                g.beta,
                g.alpha,
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        },
        // SAFETY: forwarded contract.
        Backend::MatrixMultiply => unsafe { T::matrixmultiply(g) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A naive reference product in f64.
    fn naive(
        m: usize,
        k: usize,
        n: usize,
        a: &[f64],
        (rsa, csa): (usize, usize),
        b: &[f64],
        (rsb, csb): (usize, usize),
    ) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * rsa + p * csa] * b[p * rsb + j * csb]).sum();
            }
        }
        c
    }

    fn values(len: usize, seed: usize) -> Vec<f64> {
        (0..len).map(|i| ((i * 37 + seed * 11) % 23) as f64 * 0.25 - 2.5).collect()
    }

    /// Every backend, with and without threads, transposed operands, alpha/beta and the
    /// empty cases, against the naive product.
    #[test]
    fn both_backends_match_a_naive_product() {
        // Sizes on both sides of the threading threshold (33 x 17 x 65 < PAR_MADDS <= 256^3).
        for (m, k, n) in [(1, 1, 1), (7, 5, 3), (33, 17, 65), (256, 256, 256), (8, 9, 3000), (5, 0, 4), (0, 3, 3)] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let a = values(m * k, 1);
                let b = values(k * n, 2);
                let sa = if ta { (1, m) } else { (k, 1) };
                let sb = if tb { (1, k) } else { (n, 1) };
                let expect = naive(m, k, n, &a, sa, &b, sb);
                for backend in [Backend::Gemm, Backend::MatrixMultiply] {
                    // f64: exact small integers times 0.25 steps, so sums are exact.
                    let c0 = values(m * n, 3);
                    let mut c = c0.clone();
                    let g = Gemm::over((m, k, n), 2.0, (&a, sa), (&b, sb), 0.5, &mut c);
                    // SAFETY: the slices above have exactly these sizes and strides.
                    unsafe { run_with(backend, g) };
                    let want: Vec<f64> = expect.iter().zip(&c0).map(|(e, c)| 2.0 * e + 0.5 * c).collect();
                    assert_eq!(c, want, "{backend:?} {m}x{k}x{n} ta={ta} tb={tb}");
                    // beta = 0 ignores C entirely, even NaN (f32 this time).
                    let (af, bf): (Vec<f32>, Vec<f32>) =
                        (a.iter().map(|&v| v as f32).collect(), b.iter().map(|&v| v as f32).collect());
                    let mut cf = vec![f32::NAN; m * n];
                    let g = Gemm::over((m, k, n), 1.0f32, (&af, sa), (&bf, sb), 0.0, &mut cf);
                    // SAFETY: as above.
                    unsafe { run_with(backend, g) };
                    let got: Vec<f64> = cf.iter().map(|&v| v as f64).collect();
                    assert_eq!(got, expect, "{backend:?} f32 {m}x{k}x{n} ta={ta} tb={tb}");
                }
            }
        }
    }

    /// A linear layer's forward `x W^T` (the crate gathers `W`) is cut by columns, its
    /// weight gradient `dY^T X` (the crate packs `dY^T`) by rows, anything else along its
    /// longer side; column blocks are multiples of 16.
    #[test]
    fn blocks_leave_the_gathered_operand_whole() {
        let (x, w) = (vec![0f32; 256 * 784], vec![0f32; 256 * 784]);
        let mut c = vec![0f32; 256 * 784];
        // x [256, 784] times W^T, W [256, 784]: B's columns 784 apart.
        let fwd = Gemm::over((256, 784, 256), 1.0, (&x, (784, 1)), (&w, (1, 784)), 0.0, &mut c);
        assert_eq!(fwd.split(Backend::Gemm, 2), (false, 128));
        assert_eq!(fwd.split(Backend::MatrixMultiply, 2), (true, 128));
        // dY^T [256, 256] (dY [256 batch, 256]) times x [256, 784].
        let grad = Gemm::over((256, 256, 784), 1.0, (&x, (1, 256)), (&w, (784, 1)), 0.0, &mut c);
        assert_eq!(grad.split(Backend::Gemm, 2), (true, 128));
        assert_eq!(grad.split(Backend::MatrixMultiply, 2), (false, 392));
        // Both row-major: the longer side, columns in multiples of 16 (784 as 400 + 384).
        let plain = Gemm::over((256, 256, 784), 1.0, (&x, (256, 1)), (&w, (784, 1)), 0.0, &mut c);
        assert_eq!(plain.split(Backend::Gemm, 2), (false, 400));
        // Too few columns for a panel each: rows, though the crate gathers B.
        let narrow = Gemm::over((256, 784, 100), 1.0, (&x, (784, 1)), (&w, (1, 784)), 0.0, &mut c);
        assert_eq!(narrow.split(Backend::Gemm, 2), (true, 128));
    }

    /// Products cut into ragged blocks (784 columns as 400 + 384, 100 rows as 50 + 50)
    /// with every operand layout, against the naive product, on the team's threads.
    #[test]
    fn ragged_blocks_match_a_naive_product() {
        for (m, k, n) in [(64, 300, 784), (100, 200, 784)] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let (a, b) = (values(m * k, 1), values(k * n, 2));
                let sa = if ta { (1, m) } else { (k, 1) };
                let sb = if tb { (1, k) } else { (n, 1) };
                let mut c = vec![f64::NAN; m * n];
                let g = Gemm::over((m, k, n), 1.0, (&a, sa), (&b, sb), 0.0, &mut c);
                // SAFETY: the slices above have exactly these sizes and strides.
                unsafe { run_with(Backend::Gemm, g) };
                assert_eq!(c, naive(m, k, n, &a, sa, &b, sb), "{m}x{k}x{n} ta={ta} tb={tb}");
            }
        }
    }

    #[test]
    fn inside_a_rayon_task_a_gemm_stays_on_its_thread() {
        assert_eq!(threads_for(8, 8, 8), 1);
        let inside = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        assert_eq!(inside.install(|| threads_for(1024, 1024, 1024)), 1);
    }

    #[test]
    fn the_safe_entry_refuses_an_operand_that_overruns_its_buffer() {
        let (a, b) = (vec![1.0f64; 6], vec![1.0f64; 5]);
        let mut c = vec![0.0; 4];
        let err = std::panic::catch_unwind(move || {
            gemm(
                (2, 3, 2),
                1.0,
                MatRef::row_major(&a, (2, 3), false),
                MatRef::row_major(&b, (3, 2), false),
                0.0,
                &mut c,
            )
        })
        .unwrap_err();
        let msg = err.downcast_ref::<String>().expect("a formatted message");
        assert!(msg.contains("operand b (3 x 2, strides 2 and 1, offset 0) overruns its buffer of 5"), "{msg}");
    }

    #[test]
    fn the_safe_entry_multiplies_strided_and_broadcast_operands() {
        // a: three rows of [1, 2] (row stride 0, a broadcast); b: [[1, 1, 1], [0, 0, 1]] read
        // through the transpose of its storage [[1, 0], [1, 0], [1, 1]].
        let a = [1.0f32, 2.0];
        let b = [1.0f32, 0.0, 1.0, 0.0, 1.0, 1.0];
        let mut c = [0.0f32; 9];
        let a = MatRef { data: &a, offset: 0, row_stride: 0, col_stride: 1 };
        gemm((3, 2, 3), 1.0, a, MatRef::row_major(&b, (2, 3), true), 0.0, &mut c);
        assert_eq!(c, [1.0, 1.0, 3.0, 1.0, 1.0, 3.0, 1.0, 1.0, 3.0]);
    }
}
