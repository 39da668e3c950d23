//! Reductions on the CPU.

use super::parts::PAR_THRESHOLD;
use super::team;
use super::widen::Half;
use super::{buffer_pool, strided_to_vec, with_cpu, with_float, CpuElement, CpuStorage};
use crate::shape::{contiguous_strides, for_each_offset, kept_shape, Layout};

/// The sum over the masked dims (see [`crate::backend::Storage::sum`]), of every float
/// dtype as it is stored: `f16` and `bf16` are widened as they are read (no `f32` copy of
/// the operand: for its bias gradients, that pass would slow the `compare.py` row
/// `amp_transformer_step_bf16`).
pub(crate) fn sum(x: &CpuStorage, l: &Layout, mask: &[bool]) -> CpuStorage {
    match x {
        CpuStorage::F16(v) => CpuStorage::F16(sum_kernel(v, l, mask)),
        CpuStorage::BF16(v) => CpuStorage::BF16(sum_kernel(v, l, mask)),
        _ => with_float!(x, "sum", T, v => T::into_storage(sum_kernel(v, l, mask))),
    }
}

/// An element type [`sum`] reads: its values as `f64` (exact), and a sum back in it, in
/// `f64` for `f64` and rounded through `f32` for the others (for half types, the value
/// that summing their `f32` copies and rounding the `f32` result gives).
trait Summand: CpuElement + Copy + Send + Sync {
    /// The value, exactly.
    fn wide(self) -> f64;
    /// A sum, rounded to this type.
    fn from_sum(s: f64) -> Self;
}

impl Summand for f32 {
    #[inline(always)]
    fn wide(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn from_sum(s: f64) -> Self {
        s as f32
    }
}

impl Summand for f64 {
    #[inline(always)]
    fn wide(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_sum(s: f64) -> Self {
        s
    }
}

impl<H: Half> Summand for H {
    #[inline(always)]
    fn wide(self) -> f64 {
        self.widen1() as f64
    }
    #[inline(always)]
    fn from_sum(s: f64) -> Self {
        H::narrow1(s as f32)
    }
}

/// The index of the largest (or smallest) element of each row (see
/// [`crate::backend::Storage::arg_extreme`]); NaN wins over everything, and the first of
/// equal candidates is kept.
pub(crate) fn arg_extreme(x: &CpuStorage, rows: &Layout, n: usize, largest: bool) -> CpuStorage {
    CpuStorage::I64(with_cpu!(x, T, v => {
        let rows = strided_to_vec(v, rows);
        rows.chunks(n)
            .map(|row| {
                let mut best = 0usize;
                for (i, val) in row.iter().enumerate().skip(1) {
                    let b = &row[best];
                    // NaN (val != val) wins over everything and keeps the first NaN.
                    #[allow(clippy::eq_op)]
                    let val_nan = val != val;
                    #[allow(clippy::eq_op)]
                    let b_nan = b != b;
                    let better = if b_nan { false } else if val_nan { true } else if largest { val > b } else { val < b };
                    if better {
                        best = i;
                    }
                }
                best as i64
            })
            .collect()
    }))
}

/// `acc += row` elementwise in `f64` (a reduction over leading dims, as a bias gradient
/// is), vectorized with AVX2 where the CPU has it.
fn add_run<T: Summand>(acc: &mut [f64], row: &[T]) {
    super::isa_loops::with_avx2(
        #[inline(always)]
        || {
            for (a, x) in acc.iter_mut().zip(row) {
                *a += x.wide();
            }
        },
    )
}

/// Sum of a contiguous run in `f64`, over 8 independent lanes (vectorisable, and more
/// accurate than a sequential sum), with AVX2 where the CPU has it.
fn sum_run<T: Summand>(c: &[T]) -> f64 {
    super::isa_loops::with_avx2(
        #[inline(always)]
        || sum_lanes(c),
    )
}

#[inline(always)]
fn sum_lanes<T: Summand>(c: &[T]) -> f64 {
    let mut lanes = [0f64; 8];
    let chunks = c.chunks_exact(8);
    let rem = chunks.remainder();
    for ch in chunks {
        for k in 0..8 {
            lanes[k] += ch[k].wide();
        }
    }
    lanes.iter().sum::<f64>() + rem.iter().map(|x| x.wide()).sum::<f64>()
}

/// Sums `v` (viewed through `layout`) over the masked dims into a row-major buffer of the
/// kept shape. Accumulates in `f64` for accuracy at any length. Works a whole innermost
/// row at a time: a row sum when the last dim is reduced, a row add when it is kept.
fn sum_kernel<T: Summand>(v: &[T], layout: &Layout, mask: &[bool]) -> Vec<T> {
    let shape = layout.shape();
    let kept = kept_shape(shape, mask);
    let n_out: usize = kept.iter().product();
    if shape.contains(&0) {
        return vec![T::from_sum(0.0); n_out];
    }
    // Fast path: contiguous input reduced over a suffix of dims -> independent rows.
    let first_reduced = mask.iter().position(|&m| m).unwrap_or(mask.len());
    let suffix = mask[first_reduced..].iter().all(|&m| m);
    if let (Some(r), true) = (layout.contiguous_range(), suffix) {
        let src = &v[r];
        let row: usize = shape[first_reduced..].iter().product();
        let sum_row = |c: &[T]| T::from_sum(sum_run(c));
        let mut out = T::alloc_buffer(n_out);
        if super::parts::split(src.len(), PAR_THRESHOLD) && n_out > 1 {
            let rows = (team::GRAIN / row.max(1)).max(1);
            team::fill(&mut out, n_out, rows, |r| src[r.start * row..r.end * row].chunks(row).map(sum_row));
        } else {
            out.extend(src.chunks(row).map(sum_row));
        }
        return out;
    }
    // Contiguous input reduced over a prefix of dims (a bias gradient): blocks of rows
    // summed on the team into f64 partial rows, then added in block order (so the result
    // depends on the team's size only, not on timing).
    let first_kept = mask.iter().position(|&m| !m).unwrap_or(mask.len());
    let prefix = first_kept > 0 && mask[first_kept..].iter().all(|&m| !m);
    if let (Some(r), true) = (layout.contiguous_range(), prefix) {
        let (src, cols) = (&v[r], n_out);
        let rows = src.len() / cols;
        if super::parts::split_parts(src.len(), PAR_THRESHOLD) && rows > 1 {
            // Blocks by the team's size (`team::parts`), run on the team or not.
            let per = rows.div_ceil(team::parts().min(rows));
            let mut partial = vec![0f64; rows.div_ceil(per) * cols];
            team::for_chunks(&mut partial, cols, |q, acc| {
                for row in src[q * per * cols..((q + 1) * per).min(rows) * cols].chunks_exact(cols) {
                    add_run(acc, row);
                }
            });
            let mut blocks = partial.chunks_exact(cols);
            let mut acc = blocks.next().expect("rows > 1").to_vec();
            for b in blocks {
                for (a, x) in acc.iter_mut().zip(b) {
                    *a += x;
                }
            }
            return acc.into_iter().map(T::from_sum).collect();
        }
    }
    let mut acc = buffer_pool::filled(n_out, 0f64);
    let mut ostrides = contiguous_strides(&kept);
    for (s, &m) in ostrides.iter_mut().zip(mask) {
        if m {
            *s = 0;
        }
    }
    let rank = shape.len();
    let (len, in_step) = (shape[rank - 1], layout.strides()[rank - 1]);
    let last_reduced = mask[rank - 1];
    for_each_offset(
        &shape[..rank - 1],
        [&layout.strides()[..rank - 1], &ostrides[..rank - 1]],
        [layout.offset(), 0],
        |[i, o]| {
            if in_step == 1 {
                let row = &v[i..i + len];
                if last_reduced {
                    acc[o] += sum_run(row);
                } else {
                    add_run(&mut acc[o..o + len], row);
                }
            } else {
                for k in 0..len {
                    let x = v[i + k * in_step].wide();
                    if last_reduced {
                        acc[o] += x;
                    } else {
                        acc[o + k] += x;
                    }
                }
            }
        },
    );
    acc.into_iter().map(T::from_sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sums over leading dims (a bias gradient), small and split over the team, against
    /// naive column sums (small integers: every order of addition is exact).
    #[test]
    fn sums_over_leading_dims_match_column_sums() {
        for shape in [vec![3, 4, 5], vec![300, 7, 40]] {
            let numel: usize = shape.iter().product();
            let v: Vec<f64> = (0..numel).map(|i| ((i * 7919) % 13) as f64 - 6.0).collect();
            let cols = shape[2];
            let mut expect = vec![0.0; cols];
            for (i, x) in v.iter().enumerate() {
                expect[i % cols] += x;
            }
            assert_eq!(sum_kernel(&v, &Layout::contiguous(&shape), &[true, true, false]), expect);
            let v32: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            let got = sum_kernel(&v32, &Layout::contiguous(&shape), &[true, true, false]);
            assert_eq!(got, expect.iter().map(|&x| x as f32).collect::<Vec<_>>());
        }
    }

    /// `f16` and `bf16` sums read the half values as they are and give what summing their
    /// `f32` copies and rounding gives (`through_f32`, the reference path), over a
    /// suffix of dims (rows), a prefix (columns, split over the team when large) and a
    /// transposed view (the general path).
    #[test]
    fn half_sums_equal_the_f32_sums_rounded() {
        use crate::backend::cpu::widen::{narrow, widen};
        use crate::dtype::DType;
        for shape in [vec![3, 4, 5], vec![300, 7, 40]] {
            let numel: usize = shape.iter().product();
            let v: Vec<f32> = (0..numel).map(|i| ((i * 7919) % 1013) as f32 / 97.0 - 5.0).collect();
            let contiguous = Layout::contiguous(&shape);
            let transposed = Layout::contiguous(&[shape[2], shape[1], shape[0]]).permute(&[2, 1, 0]);
            let cases = [
                (&contiguous, [false, true, true]),
                (&contiguous, [true, true, false]),
                (&contiguous, [true, false, true]),
                (&transposed, [true, false, false]),
            ];
            for dtype in [DType::BF16, DType::F16] {
                let x = narrow(CpuStorage::F32(v.clone()), dtype);
                let x32 = widen(&x).expect("a half buffer");
                for (l, mask) in &cases {
                    let want = narrow(sum(&x32, l, mask), dtype);
                    assert!(sum(&x, l, mask) == want, "{dtype} {shape:?} {mask:?} {:?}", l.strides());
                }
            }
        }
    }
}
