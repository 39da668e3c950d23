//! Free functions mirroring `torch.nn.functional`, for code ported from PyTorch. Each
//! forwards to the [`Tensor`] method of the same name.

pub use crate::loss::{
    binary_cross_entropy_with_logits, binary_cross_entropy_with_logits_weighted, cross_entropy, cross_entropy_weighted,
    cross_entropy_with, l1_loss, mse_loss, nll_loss, nll_loss_weighted, nll_loss_with, ClassLossConfig, Reduction,
};
pub use crate::ops::einsum::einsum;
pub use crate::ops::interpolate::interpolate;
use crate::ops::{AttentionConfig, Conv2dConfig, PadMode, Pool2dConfig};
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
    let _op = crate::autograd::entry::op_entry!(crate::names::LINEAR, [x, weight]; [bias], attrs = Vec::new, again = |c: &[Option<&crate::Tensor>]| (linear)(c[0].expect("present"), c[1].expect("present"), c[2]));
    if let Some(y) = bias.and_then(|b| x.fused_linear(weight, b)) {
        return y;
    }
    let y = x.matmul(&weight.t());
    match bias {
        Some(b) => y + b,
        None => y,
    }
}

/// `input + mat1 @ mat2`, PyTorch's `torch.addmm(input, mat1, mat2)` (`beta = alpha = 1`):
/// `mat1: [m, k]`, `mat2: [k, n]`, `input` broadcastable to `[m, n]`. One GEMM accumulates
/// into the broadcast input; see [`Tensor::addmm_with`].
///
/// ```
/// use nn_core::{functional::addmm, Tensor};
/// let b = Tensor::from_vec(vec![0.5, -0.5], &[2]);
/// let x = Tensor::from_vec(vec![1.0, 2.0], &[1, 2]);
/// let w_t = Tensor::from_vec(vec![1.0, 0.0, 1.0, 1.0], &[2, 2]);
/// assert_eq!(addmm(&b, &x, &w_t).to_vec(), vec![3.5, 1.5]);
/// ```
#[track_caller]
pub fn addmm(input: &Tensor, mat1: &Tensor, mat2: &Tensor) -> Tensor {
    input.addmm(mat1, mat2)
}

/// `beta * input + alpha * (mat1 @ mat2)`, PyTorch's
/// `torch.addmm(input, mat1, mat2, beta=beta, alpha=alpha)`; see [`Tensor::addmm_with`].
///
/// ```
/// use nn_core::{functional::addmm_with, Tensor};
/// let c = Tensor::full(&[2, 2], 1.0);
/// let y = addmm_with(&c, &Tensor::eye(2), &Tensor::eye(2), 3.0, -1.0);
/// assert_eq!(y.to_vec(), vec![2.0, 3.0, 3.0, 2.0]);
/// ```
#[track_caller]
pub fn addmm_with(input: &Tensor, mat1: &Tensor, mat2: &Tensor, beta: f64, alpha: f64) -> Tensor {
    input.addmm_with(mat1, mat2, beta, alpha)
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
pub fn conv2d(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>, options: Conv2dConfig) -> Tensor {
    x.conv2d(weight, bias, options)
}

/// See [`Tensor::max_pool2d`].
#[track_caller]
pub fn max_pool2d(x: &Tensor, options: Pool2dConfig) -> Tensor {
    x.max_pool2d(options)
}

/// See [`Tensor::avg_pool2d`].
#[track_caller]
pub fn avg_pool2d(x: &Tensor, options: Pool2dConfig, count_include_pad: bool) -> Tensor {
    x.avg_pool2d(options, count_include_pad)
}

/// See [`Tensor::adaptive_avg_pool2d`].
#[track_caller]
pub fn adaptive_avg_pool2d(x: &Tensor, output_size: (usize, usize)) -> Tensor {
    x.adaptive_avg_pool2d(output_size)
}

/// Pads the trailing dims of `x` by `pads` (`[last_left, last_right, ...]`, negative
/// amounts crop), as `F.pad(x, pads, mode, value)`; see [`Tensor::pad`].
///
/// ```
/// use nn_core::{functional::pad, ops::PadMode, Tensor};
/// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]);
/// let y = pad(&x, &[1, 0, 0, 1], PadMode::Replicate, 0.0);
/// assert_eq!(y.shape(), &[1, 1, 3, 3]);
/// assert_eq!(y.to_vec(), vec![1.0, 1.0, 2.0, 3.0, 3.0, 4.0, 3.0, 3.0, 4.0]);
/// ```
#[track_caller]
pub fn pad(x: &Tensor, pads: &[i64], mode: PadMode, value: f64) -> Tensor {
    x.pad(pads, mode, value)
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
pub fn scaled_dot_product_attention(q: &Tensor, k: &Tensor, v: &Tensor, options: &AttentionConfig<'_>) -> Tensor {
    q.scaled_dot_product_attention(k, v, options)
}

/// Group normalisation over `[N, C, *]`: channels split into `num_groups` groups, each
/// normalised over its channels and spatial positions, then an optional per-channel affine
/// (`F.group_norm`).
///
/// # Panics
/// When `C` is not divisible by `num_groups`, or the affine shapes are not `[C]`.
#[track_caller]
pub fn group_norm(x: &Tensor, num_groups: usize, weight: Option<&Tensor>, bias: Option<&Tensor>, eps: f64) -> Tensor {
    let run = |x: &Tensor, [w, b]: [Option<&Tensor>; 2]| group_norm(x, num_groups, w, b, eps);
    // Under GPU autocast (PyTorch's CUDA list): in f32.
    let _op = crate::autograd::entry::op_entry!(untraced crate::names::GROUP_NORM, [Some(x), weight, bias],
        again = |c| run(c[0].expect("present"), [c[1], c[2]]));
    if let Some(y) = crate::ops::norm::half_with_f32_params(x, [weight, bias], run) {
        return y;
    }
    if x.rank() < 2 || num_groups == 0 || !x.shape()[1].is_multiple_of(num_groups) {
        panic!(
            "group_norm: expected input [N, C, *] with C divisible by num_groups={num_groups}, got shape {:?}",
            x.shape()
        );
    }
    let (n, c) = (x.shape()[0], x.shape()[1]);
    // PyTorch's checks: a group of no channels or no positions has no statistics.
    if c == 0 {
        panic!("group_norm: expected the number of channels to be greater than 0, got shape {:?}", x.shape());
    }
    if x.shape()[2..].contains(&0) {
        panic!("group_norm: expected the spatial size (H x W ...) to be greater than 0, got shape {:?}", x.shape());
    }
    for (name, t) in [("weight", weight), ("bias", bias)] {
        if let Some(t) = t.filter(|t| t.shape() != [c]) {
            // A [2, 2] weight for 4 channels would otherwise be read row-major.
            panic!(
                "group_norm: {name} of shape {:?} for an input with {c} channels (shape {:?})",
                t.shape(),
                x.shape()
            );
        }
    }
    let g = x.reshape(&[n, num_groups, x.numel() / (n * num_groups).max(1)]);
    let mean = g.mean_dim(2, true);
    let centered = &g - &mean;
    let var = centered.square().mean_dim(2, true);
    let y = (&centered * &(var + eps).sqrt().recip()).reshape(x.shape());
    let mut bshape = vec![1; x.rank()];
    bshape[1] = c;
    let y = match weight {
        Some(w) => y * w.reshape(&bshape),
        None => y,
    };
    match bias {
        Some(b) => y + b.reshape(&bshape),
        None => y,
    }
}

/// The shapes `bilinear` takes, or a panic naming the mismatch (PyTorch raises for each;
/// reshaping a mismatched `x2` to `x1`'s rows paired the wrong rows without a word).
#[track_caller]
fn check_bilinear(x1: &Tensor, x2: &Tensor, weight: &Tensor, bias: Option<&Tensor>) {
    let bad = |what: String| panic!("bilinear: {what}");
    if weight.rank() != 3 {
        bad(format!("expected a weight of shape [out, in1, in2], got {:?}", weight.shape()));
    }
    if x1.rank() == 0 || x1.rank() != x2.rank() {
        bad(format!("input dimensions do not match: got {:?} and {:?}", x1.shape(), x2.shape()));
    }
    let (r, (i, j)) = (x1.rank() - 1, (weight.shape()[1], weight.shape()[2]));
    if x1.shape()[..r] != x2.shape()[..r] {
        bad(format!("input batch dimensions do not match: got {:?} and {:?}", &x1.shape()[..r], &x2.shape()[..r]));
    }
    if (x1.shape()[r], x2.shape()[r]) != (i, j) {
        bad(format!(
            "inputs of {} and {} features for a weight of shape {:?} ([out, in1, in2])",
            x1.shape()[r],
            x2.shape()[r],
            weight.shape()
        ));
    }
    if let Some(b) = bias.filter(|b| b.shape() != [weight.shape()[0]]) {
        bad(format!("expected a bias of shape [{}], got {:?}", weight.shape()[0], b.shape()));
    }
}

/// `x1^T A x2 + b` per output feature: `x1: [*, in1]`, `x2: [*, in2]`,
/// `weight: [out, in1, in2]`, `bias: [out]` (`F.bilinear`).
///
/// # Panics
/// When the shapes do not fit: `x1` and `x2` with other leading dims, features other than
/// the weight's, a weight not of rank 3, a bias not of shape `[out]`.
#[track_caller]
pub fn bilinear(x1: &Tensor, x2: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Tensor {
    // Under autocast: the operands promoted to the widest (PyTorch's CUDA promote list), and
    // its parts (a product and a sum) not cast, as PyTorch's bilinear is one op.
    let again =
        |c: &[Option<&Tensor>]| bilinear(c[0].expect("present"), c[1].expect("present"), c[2].expect("present"), c[3]);
    let _op = crate::autograd::entry::op_entry!(untraced crate::names::BILINEAR, [Some(x1), Some(x2), Some(weight), bias], again = again);
    check_bilinear(x1, x2, weight, bias);
    let (o, i, j) = (weight.shape()[0], weight.shape()[1], weight.shape()[2]);
    let lead = &x1.shape()[..x1.rank() - 1];
    let n: usize = lead.iter().product();
    let a = x1.reshape(&[n, i]);
    let b = x2.reshape(&[n, j]);
    // u[n, o, j] = sum_i a[n, i] W[o, i, j]
    let u = a.matmul(&weight.permute(&[1, 0, 2]).reshape(&[i, o * j])).reshape(&[n, o, j]);
    let y = (u * b.unsqueeze(1)).sum_dim(2, false);
    let y = match bias {
        Some(bb) => y + bb,
        None => y,
    };
    let mut shape = lead.to_vec();
    shape.push(o);
    y.reshape(&shape)
}
