//! The team's loops over buffers: a buffer (or several of one length) cut into chunks, each
//! chunk a task that writes its own part, on [`run`](super::run)'s threads.

use super::{run, run_with, threads, threads_for_large};

/// A pointer that may cross threads: each task derives a disjoint part of its target.
#[derive(Clone, Copy)]
struct Shared<T>(*mut T);
// SAFETY: only used by the functions below, whose tasks touch disjoint elements.
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// The part `[start, start + len)`. (A method, so closures capture the whole value.)
    ///
    /// # Safety
    /// In bounds, and no other live reference to these elements.
    #[allow(clippy::mut_from_ref)]
    unsafe fn part(&self, start: usize, len: usize) -> &mut [T] {
        // SAFETY: forwarded contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

/// Runs `f(q, part)` over `out` cut in consecutive parts of `chunk` elements (the last
/// may be shorter), in parallel as [`run`].
pub(crate) fn for_chunks<T: Send>(out: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    for_chunks_with(false, out, chunk, f)
}

/// [`for_chunks`], on the team wherever its cores are when `large` (as [`run_large`](super::run_large)).
pub(crate) fn for_chunks_with<T: Send>(large: bool, out: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let (len, chunk) = (out.len(), chunk.max(1));
    let p = Shared(out.as_mut_ptr());
    let threads = if large { threads_for_large() } else { threads() };
    run_with(threads, len.div_ceil(chunk), |q| {
        let start = q * chunk;
        // SAFETY: part `q` is `[q chunk, min((q + 1) chunk, len))`, disjoint from every
        // other part and inside `out`, which is borrowed exclusively for the call.
        f(q, unsafe { p.part(start, chunk.min(len - start)) })
    })
}

/// [`for_chunks`] over two buffers cut alike: `f(q, part of a, part of b)`, with parts of
/// `ca` and `cb` elements.
pub(crate) fn for_chunks2<A: Send, B: Send>(
    (a, ca): (&mut [A], usize),
    (b, cb): (&mut [B], usize),
    f: impl Fn(usize, &mut [A], &mut [B]) + Sync,
) {
    let (ca, cb) = (ca.max(1), cb.max(1));
    let tasks = a.len().div_ceil(ca);
    assert_eq!(tasks, b.len().div_ceil(cb), "for_chunks2: buffers cut in different numbers of parts");
    let (la, lb) = (a.len(), b.len());
    let (pa, pb) = (Shared(a.as_mut_ptr()), Shared(b.as_mut_ptr()));
    run(tasks, |q| {
        let (sa, sb) = (q * ca, q * cb);
        // SAFETY: as in `for_chunks`, for each buffer.
        let (x, y) = unsafe { (pa.part(sa, ca.min(la - sa)), pb.part(sb, cb.min(lb - sb))) };
        f(q, x, y)
    })
}

/// [`for_chunks`] over several buffers cut into the same number of parts, each in parts of
/// its own size: `f(q, parts)`, where `parts[i]` is part `q` of `bufs[i].0`, of
/// `bufs[i].1` elements (the fused attention's per-batch outputs).
pub(crate) fn for_parts<T: Send>(bufs: &mut [(&mut [T], usize)], f: impl Fn(usize, &mut [&mut [T]]) + Sync) {
    let sizes: Vec<(usize, usize)> = bufs.iter().map(|(b, c)| (b.len(), (*c).max(1))).collect();
    let tasks = sizes.first().map_or(0, |&(len, c)| len.div_ceil(c));
    assert!(
        sizes.iter().all(|&(len, c)| len.div_ceil(c) == tasks),
        "for_parts: buffers cut in different numbers of parts"
    );
    let ptrs: Vec<Shared<T>> = bufs.iter_mut().map(|(b, _)| Shared(b.as_mut_ptr())).collect();
    run(tasks, |q| {
        // SAFETY: as in `for_chunks`, for each buffer (all borrowed exclusively for the
        // call; part `q` of buffer `i` is `[q c, min((q + 1) c, len))` of its `len`).
        let mut parts: Vec<&mut [T]> =
            ptrs.iter().zip(&sizes).map(|(p, &(len, c))| unsafe { p.part(q * c, c.min(len - q * c)) }).collect();
        f(q, &mut parts)
    })
}

/// [`for_chunks`] over several buffers of one length cut alike: `f(q, parts)`, where
/// `parts[i]` is part `q` of `bufs[i]` (an optimizer's parameter and state buffers).
pub(crate) fn for_chunks_n<T: Send>(bufs: &mut [&mut [T]], chunk: usize, f: impl Fn(usize, &mut [&mut [T]]) + Sync) {
    let len = bufs.first().map_or(0, |b| b.len());
    assert!(bufs.iter().all(|b| b.len() == len), "for_chunks_n: buffers of different lengths");
    let chunk = chunk.max(1);
    let ptrs: Vec<Shared<T>> = bufs.iter_mut().map(|b| Shared(b.as_mut_ptr())).collect();
    run(len.div_ceil(chunk), |q| {
        let start = q * chunk;
        // SAFETY: as in `for_chunks`, for each buffer (all borrowed exclusively for the
        // call, each of `len` elements).
        let mut parts: Vec<&mut [T]> = ptrs.iter().map(|p| unsafe { p.part(start, chunk.min(len - start)) }).collect();
        f(q, &mut parts)
    })
}

/// Elements per task of the elementwise loops (big enough that claiming a task costs
/// nothing next to it).
pub(crate) const GRAIN: usize = 1 << 14;

/// Fills `out` (emptied first) with `len` elements made in parallel parts of `grain`:
/// the part `range` holds the items of `f(range)`, an iterator of at least `range.len()`
/// items (checked). The elementwise kernels' way to write a fresh output in parallel.
pub(crate) fn fill<U, I>(out: &mut Vec<U>, len: usize, grain: usize, f: impl Fn(std::ops::Range<usize>) -> I + Sync)
where
    U: Send,
    I: Iterator<Item = U>,
{
    out.clear();
    out.reserve(len);
    let grain = grain.max(1);
    for_chunks(&mut out.spare_capacity_mut()[..len], grain, |q, part| {
        let start = q * grain;
        let written = super::super::isa_loops::write_items(part, f(start..start + part.len()));
        assert_eq!(written, part.len(), "team::fill: a part's iterator ended early");
    });
    // SAFETY: the parts cover all `len` slots, and each wrote all of its slots (counted;
    // a panic is raised by `for_chunks` before this line).
    unsafe { out.set_len(len) };
}
