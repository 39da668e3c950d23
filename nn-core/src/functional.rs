//! Free functions mirroring `torch.nn.functional`, for code ported from PyTorch. Each
//! forwards to the [`Tensor`] method of the same name.

use crate::ops::{AttentionOptions, Conv2dOptions, Pool2dOptions};
use crate::shape::Dim;
use crate::tensor::Tensor;

/// `x @ weight^T + bias` with `weight: [out_features, in_features]`, as `F.linear`.
///
/// ```
/// use nn_core::{functional::linear, Tensor};
/// let x = Tensor::from_vec(vec![1.0, 2.0], &[1, 2]);
/// let w = Tensor::from_vec(vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]);
/// let b = Tensor::from_vec(vec![0.5, 0.5, 0.5], &[3]);
/// assert_eq!(linear(&x, &w, Some(&b)).to_vec(), vec![1.5, 2.5, 3.5]);
/// ```
#[track_caller]
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Tensor {
    let y = x.matmul(&weight.t());
    match bias {
        Some(b) => y + b,
        None => y,
    }
}

/// See [`Tensor::relu`].
pub fn relu(x: &Tensor) -> Tensor {
    x.relu()
}

/// See [`Tensor::gelu`].
pub fn gelu(x: &Tensor) -> Tensor {
    x.gelu()
}

/// See [`Tensor::softmax`].
#[track_caller]
pub fn softmax<D: Dim>(x: &Tensor, dim: D) -> Tensor {
    x.softmax(dim)
}

/// See [`Tensor::log_softmax`].
#[track_caller]
pub fn log_softmax<D: Dim>(x: &Tensor, dim: D) -> Tensor {
    x.log_softmax(dim)
}

/// See [`Tensor::conv2d`].
#[track_caller]
pub fn conv2d(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>, options: Conv2dOptions) -> Tensor {
    x.conv2d(weight, bias, options)
}

/// See [`Tensor::max_pool2d`].
#[track_caller]
pub fn max_pool2d(x: &Tensor, options: Pool2dOptions) -> Tensor {
    x.max_pool2d(options)
}

/// See [`Tensor::avg_pool2d`].
#[track_caller]
pub fn avg_pool2d(x: &Tensor, options: Pool2dOptions, count_include_pad: bool) -> Tensor {
    x.avg_pool2d(options, count_include_pad)
}

/// See [`Tensor::adaptive_avg_pool2d`].
#[track_caller]
pub fn adaptive_avg_pool2d(x: &Tensor, output_size: (usize, usize)) -> Tensor {
    x.adaptive_avg_pool2d(output_size)
}

/// See [`Tensor::dropout`].
#[track_caller]
pub fn dropout(x: &Tensor, p: f64, training: bool) -> Tensor {
    x.dropout(p, training)
}

/// See [`Tensor::layer_norm`].
#[track_caller]
pub fn layer_norm(
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Tensor {
    x.layer_norm(normalized_shape, weight, bias, eps)
}

/// See [`Tensor::embedding`].
#[track_caller]
pub fn embedding(indices: &Tensor, weight: &Tensor) -> Tensor {
    Tensor::embedding(indices, weight)
}

/// See [`Tensor::scaled_dot_product_attention`].
#[track_caller]
pub fn scaled_dot_product_attention(q: &Tensor, k: &Tensor, v: &Tensor, options: &AttentionOptions<'_>) -> Tensor {
    q.scaled_dot_product_attention(k, v, options)
}
