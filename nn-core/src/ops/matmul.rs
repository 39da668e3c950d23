//! Matrix multiplication (batched, broadcasting) through `matrixmultiply`, with strides
//! passed straight through: a transposed view is multiplied without a copy.

use std::sync::Arc;

use rayon::prelude::*;
use smallvec::smallvec;

use super::{check_float, check_same, cpu};
use crate::autograd::{op_result, Grads};
use crate::device::Device;
use crate::dtype::{Element, FloatElement};
use crate::shape::{broadcast_shapes, for_each_offset, Dims, Layout};
use crate::storage::{with_float, Storage};
use crate::tensor::Tensor;

/// Below this many multiply-adds per matrix, batches are spread over threads instead of
/// letting each GEMM thread internally.
const SMALL_GEMM: usize = 96 * 96 * 96;

/// Batched GEMM over broadcast batch dims: `a: [..., m, k]`, `b: [..., k, n]`.
fn bmm_kernel<T: FloatElement>(
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    batch: &[usize],
    m: usize,
    k: usize,
    n: usize,
) -> Vec<T> {
    let (ra, rb) = (la.rank(), lb.rank());
    let (rsa, csa) = (la.strides()[ra - 2] as isize, la.strides()[ra - 1] as isize);
    let (rsb, csb) = (lb.strides()[rb - 2] as isize, lb.strides()[rb - 1] as isize);
    // Batch offsets of both operands, with stride 0 on broadcast batch dims.
    let ba = la.broadcast_batch(batch);
    let bb = lb.broadcast_batch(batch);
    let mut offsets = Vec::with_capacity(batch.iter().product());
    for_each_offset(batch, [&ba, &bb], [la.offset(), lb.offset()], |[oa, ob]| offsets.push((oa, ob)));
    let mut out = vec![T::zero(); offsets.len() * m * n];
    if m == 0 || n == 0 || k == 0 {
        return out;
    }
    let run = |(oa, ob): (usize, usize), c: &mut [T]| {
        // SAFETY: `oa`/`ob` plus the strides stay inside `a`/`b` (they come from valid
        // layouts of those buffers); `c` is an exclusive m x n row-major block.
        unsafe {
            T::gemm(
                m,
                k,
                n,
                T::one(),
                a.as_ptr().add(oa),
                rsa,
                csa,
                b.as_ptr().add(ob),
                rsb,
                csb,
                T::zero(),
                c.as_mut_ptr(),
                n as isize,
                1,
            )
        }
    };
    if offsets.len() > 1 && m * n * k < SMALL_GEMM {
        out.par_chunks_mut(m * n).zip(offsets.par_iter()).for_each(|(c, &o)| run(o, c));
    } else {
        for (c, &o) in out.chunks_mut(m * n).zip(&offsets) {
            run(o, c);
        }
    }
    out
}

impl Layout {
    /// Strides of the leading (batch) dims, right-aligned to `batch` with 0 where broadcast.
    fn broadcast_batch(&self, batch: &[usize]) -> Dims {
        let r = self.rank() - 2;
        let lead = batch.len() - r;
        (0..batch.len())
            .map(|i| if i < lead || self.shape()[i - lead] == 1 { 0 } else { self.strides()[i - lead] })
            .collect()
    }
}

impl Tensor {
    /// Matrix product with PyTorch's `matmul` semantics: 1-D operands are promoted (and the
    /// added dim removed), leading batch dims broadcast.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    /// let b = Tensor::from_vec(vec![5.0, 6.0], &[2]);
    /// assert_eq!(a.matmul(&b).to_vec(), vec![17.0, 39.0]);
    /// assert_eq!(a.matmul(&a.t()).to_vec(), vec![5.0, 11.0, 11.0, 25.0]);
    /// ```
    ///
    /// # Panics
    /// When the inner dimensions differ:
    /// `matmul: [32, 100] x [784, 256]: inner dimensions 100 and 784 differ`.
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Tensor {
        let (ra, rb) = (self.rank(), other.rank());
        if ra == 0 || rb == 0 {
            panic!(
                "matmul: both arguments need at least 1 dimension, got shapes {:?} and {:?}",
                self.shape(),
                other.shape()
            );
        }
        let inner_a = self.shape()[ra - 1];
        let inner_b = other.shape()[if rb == 1 { 0 } else { rb - 2 }];
        if inner_a != inner_b {
            panic!("matmul: {:?} x {:?}: inner dimensions {inner_a} and {inner_b} differ", self.shape(), other.shape());
        }
        let a = if ra == 1 { self.unsqueeze(0) } else { self.clone() };
        let b = if rb == 1 { other.unsqueeze(1) } else { other.clone() };
        let mut out = bmm(&a, &b);
        if rb == 1 {
            out = out.squeeze_dim(-1);
        }
        if ra == 1 {
            out = out.squeeze_dim(if rb == 1 { -1 } else { -2 });
        }
        out
    }
}

/// `[..., m, k] x [..., k, n]` with broadcast batch dims.
#[track_caller]
fn bmm(a: &Tensor, b: &Tensor) -> Tensor {
    const OP: &str = "matmul";
    let (device, dtype) = check_same(OP, &[a, b]);
    check_float(OP, a);
    let (ra, rb) = (a.rank(), b.rank());
    let (m, k, n) = (a.shape()[ra - 2], a.shape()[ra - 1], b.shape()[rb - 1]);
    let Some(batch) = broadcast_shapes(&a.shape()[..ra - 2], &b.shape()[..rb - 2]) else {
        panic!("matmul: {:?} x {:?}: batch dimensions cannot be broadcast together", a.shape(), b.shape());
    };
    let mut shape = batch.clone();
    shape.extend_from_slice(&[m, n]);
    let storage = if device == Device::Meta {
        Storage::Meta { dtype, len: shape.iter().product() }
    } else {
        let (sa, sb) = (a.storage_arc(), b.storage_arc());
        Storage::Cpu(with_float!(cpu(&sa), OP, T, va => {
            let vb = T::slice(cpu(&sb)).expect("same dtype");
            T::into_storage(bmm_kernel(va, a.layout(), vb, b.layout(), &batch, m, k, n))
        }))
    };
    op_result(OP, Arc::new(storage), Layout::contiguous(&shape), &[a, b], || {
        let (a, b) = (a.detach(), b.detach());
        move |g: &Tensor, needs: &[bool]| -> Grads {
            smallvec![
                needs[0].then(|| bmm(g, &b.transpose(-1, -2)).sum_to_shape(a.shape())),
                needs[1].then(|| bmm(&a.transpose(-1, -2), g).sum_to_shape(b.shape())),
            ]
        }
    })
}
