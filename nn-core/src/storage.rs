//! The buffers behind tensors, by their older path: [`Storage`] and [`CpuStorage`] live
//! in [`crate::backend`], which also defines the interface every op's kernels go through.

pub use crate::backend::{CpuStorage, Storage};
