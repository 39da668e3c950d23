//! The CPU form of the optimizers' updates ([`UpdateRule`]): a rule's loop over a
//! parameter, its gradient and its state, in parts over the thread team when the parameter
//! is long, each part in the AVX2 + FMA copy where the CPU has it (the rule's loop is
//! inlined into that copy, so it vectorizes, square roots and divisions included).

use std::ops::Range;

use super::isa_loops::with_avx2;
use super::parts::{split, PAR_THRESHOLD};
use super::team;
use super::CpuStorage;
use crate::backend::update::UpdateRule;
use crate::dtype::FloatElement;

/// `rule` over `p[range]` with the gradient `g` and the state buffers `bufs` (each as
/// long as `range`, of `p`'s dtype: the caller checked both).
pub(crate) fn apply<R: UpdateRule>(
    p: &mut CpuStorage,
    range: Range<usize>,
    g: &CpuStorage,
    bufs: &mut [&mut CpuStorage],
    fresh: bool,
    rule: &R,
) {
    match (p, g) {
        (CpuStorage::F32(p), CpuStorage::F32(g)) => {
            let mut state: Vec<&mut [f32]> = bufs.iter_mut().map(|b| f32s(b)).collect();
            in_parts(&mut p[range], g, &mut state, fresh, rule);
        }
        (CpuStorage::F64(p), CpuStorage::F64(g)) => {
            let mut state: Vec<&mut [f64]> = bufs.iter_mut().map(|b| f64s(b)).collect();
            in_parts(&mut p[range], g, &mut state, fresh, rule);
        }
        (p, g) => unreachable!("{}: checked before: parameter {} with gradient {}", R::NAME, p.dtype(), g.dtype()),
    }
}

fn f32s(b: &mut CpuStorage) -> &mut [f32] {
    match b {
        CpuStorage::F32(v) => v,
        other => unreachable!("optimizer state conformed to f32 is {}", other.dtype()),
    }
}

fn f64s(b: &mut CpuStorage) -> &mut [f64] {
    match b {
        CpuStorage::F64(v) => v,
        other => unreachable!("optimizer state conformed to f64 is {}", other.dtype()),
    }
}

/// The rule over a parameter, its gradient and its buffers: in parts on the CPU team when
/// the parameter is large, else in one call.
fn in_parts<T: FloatElement, R: UpdateRule>(p: &mut [T], g: &[T], bufs: &mut [&mut [T]], fresh: bool, rule: &R) {
    let run = |p: &mut [T], g: &[T], bufs: &mut [&mut [T]]| {
        with_avx2(
            #[inline(always)]
            || rule.cpu(p, g, bufs, fresh),
        )
    };
    let mut all: Vec<&mut [T]> = std::iter::once(p).chain(bufs.iter_mut().map(|b| &mut b[..])).collect();
    if !split(g.len(), PAR_THRESHOLD) {
        let (p, bufs) = all.split_first_mut().expect("the parameter is first");
        return run(p, g, bufs);
    }
    team::for_chunks_n(&mut all, team::GRAIN, |q, parts| {
        let (p, bufs) = parts.split_first_mut().expect("the parameter is first");
        run(p, &g[q * team::GRAIN..][..p.len()], bufs)
    });
}
