//! The buffers behind tensors, by their older path: [`Storage`] and [`CpuStorage`] live
//! in [`crate::backend`], which also defines the interface every op's kernels go through.

pub use crate::backend::{CpuStorage, Storage};

/// Bytes held by the CPU backend's buffer pool: freed tensor buffers of at least 4096
/// elements, kept (up to 2 GiB by default) for the next op that needs one of a similar
/// size, so a training loop does not take fresh pages from the OS at every step. They are
/// free for nn's own use but still allocated: a memory measurement through the process's
/// allocator counts them (see [`set_buffer_pool_limit`]).
///
/// ```
/// use nn_core::storage::{buffer_pool_bytes, set_buffer_pool_limit};
/// set_buffer_pool_limit(0); // no pooling: freed buffers go back to the allocator
/// drop(nn_core::Tensor::zeros(&[1 << 14]));
/// assert_eq!(buffer_pool_bytes(), 0);
/// ```
pub fn buffer_pool_bytes() -> usize {
    crate::backend::cpu::buffer_pool::bytes()
}

/// Sets the most bytes the CPU buffer pool keeps ([`buffer_pool_bytes`]; 2 GiB by
/// default, `0` turns pooling off) and frees what it holds above that at once. For memory
/// measurements, which then see every freed buffer go back to the allocator; steps that
/// allocate large buffers may be slower without the pool.
pub fn set_buffer_pool_limit(bytes: usize) {
    crate::backend::cpu::buffer_pool::set_limit(bytes)
}
