//! The head split of multi-head attention: `[N, L, H*D]` to `[N, H, L, D]` and back.

use nn_core::Tensor;

/// Splits `[N, L, H*D]` into heads, `[N, H, L, D]`.
pub(crate) fn split_heads(x: &Tensor, heads: usize) -> Tensor {
    let (n, l, e) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    x.reshape(&[n, l, heads, e / heads]).transpose(1, 2)
}

/// Merges `[N, H, L, D]` back into `[N, L, H*D]`.
pub(crate) fn merge_heads(x: &Tensor) -> Tensor {
    let (n, h, l, d) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    x.transpose(1, 2).reshape(&[n, l, h * d])
}
