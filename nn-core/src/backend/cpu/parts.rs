//! How the CPU kernels split their work over the thread team ([`team`]): the thresholds
//! below which a kernel stays on one thread, the grain of a contiguous loop's tasks, and
//! [`in_parts`], the contiguous map every elementwise kernel and dtype conversion fills.
//!
//! This file depends on the team alone, so the kernels that split (elementwise, the
//! half-type conversions in [`widen`](super::widen), reductions) depend on it and not on
//! one another.

use std::mem::MaybeUninit;

use super::team::{self, GRAIN};
use super::CpuElement;

/// Below this many elements, elementwise kernels stay on one thread.
pub(crate) const PAR_THRESHOLD: usize = 1 << 15;

/// Whether a kernel with `work` elements should split across the CPU team's threads
/// ([`team`]): at least `threshold` of them, and more than one thread to run on.
#[inline]
pub(crate) fn split(work: usize, threshold: usize) -> bool {
    work >= threshold && team::threads() > 1
}

/// [`split`] for kernels whose values depend on the split (partial sums per part): by the
/// team's size ([`team::parts`]), not by whether the team runs the loop this time.
pub(crate) fn split_parts(work: usize, threshold: usize) -> bool {
    work >= threshold && team::parts() > 1
}

/// From this many elements on, the `f32` loops of the ops with a vectorized function
/// (`vector_fns`: `exp`, `tanh`, the GELUs, ...) split over the team wherever its cores are
/// (`team::threads_for_large`): a GELU over a GPT-2 MLP activation ([2, 128, 3072]) is
/// far more arithmetic per thread than a loop's opening costs to cross between far cores.
pub(crate) const LARGE_MAP: usize = 1 << 17;

/// Elements per task of a contiguous elementwise loop of `len`: [`GRAIN`] when it is worth
/// splitting, else all of them (one task, on this thread). `large` loops ([`LARGE_MAP`])
/// split wherever the team's cores are, not by [`split`], which says no while the cores
/// are measured far apart: a long `tanh` is worth crossing between far cores (the
/// `elementwise` benchmark in nn-bench shows it).
pub(crate) fn grain(len: usize, large: bool) -> usize {
    let threads = if large { team::threads_for_large() } else { team::threads() };
    if len >= PAR_THRESHOLD && threads > 1 {
        GRAIN
    } else {
        len
    }
}

/// A contiguous elementwise map of `src` into a new buffer: `map(src from the part's
/// start, part)` fills each part (in parallel above the split threshold; the loops of
/// long maps over the whole team, see [`LARGE_MAP`]) and must write all of its slots.
#[inline(always)]
pub(crate) fn in_parts<T: Sync, U: CpuElement + Send>(
    src: &[T],
    map: impl Fn(&[T], &mut [MaybeUninit<U>]) + Sync,
) -> Vec<U> {
    let mut out = U::alloc_buffer(src.len());
    let large = src.len() >= LARGE_MAP;
    let grain = grain(src.len(), large);
    team::for_chunks_with(large, &mut out.spare_capacity_mut()[..src.len()], grain, |q, part| {
        map(&src[q * grain..], part)
    });
    // SAFETY: the parts cover every slot, and `map` writes all of a part's.
    unsafe { out.set_len(src.len()) };
    out
}
