//! Scaled dot-product attention, composed from differentiable primitives.

use crate::device::Device;
use crate::dtype::DType;
use crate::storage::CpuStorage;
use crate::tensor::Tensor;

/// Options of [`Tensor::scaled_dot_product_attention`].
#[derive(Clone, Debug, Default)]
pub struct AttentionOptions<'a> {
    /// A mask broadcastable to `[..., L, S]`: `Bool` (true = may attend, as PyTorch's
    /// `scaled_dot_product_attention`) or floating point (added to the scores).
    pub attn_mask: Option<&'a Tensor>,
    /// Dropout probability on the attention weights (applied only when > 0).
    pub dropout_p: f64,
    /// Apply a causal (lower-triangular) mask; cannot be combined with `attn_mask`.
    pub is_causal: bool,
    /// Score scale; defaults to `1 / sqrt(E)`.
    pub scale: Option<f64>,
}

impl Tensor {
    /// `softmax(q k^T * scale + mask) v` for `q: [..., L, E]`, `k: [..., S, E]`,
    /// `v: [..., S, Ev]`; output `[..., L, Ev]`. Rows whose every position is masked give
    /// NaN, as in PyTorch.
    ///
    /// ```
    /// use nn_core::{ops::AttentionOptions, Tensor};
    /// let q = Tensor::ones(&[1, 2, 4]);
    /// let v = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[1, 2, 2]);
    /// let causal = AttentionOptions { is_causal: true, ..Default::default() };
    /// let y = q.scaled_dot_product_attention(&q, &v, &causal);
    /// // Row 0 only sees position 0; row 1 averages both (equal scores).
    /// assert_eq!(y.to_vec(), vec![1.0, 2.0, 2.0, 3.0]);
    /// ```
    #[track_caller]
    pub fn scaled_dot_product_attention(&self, key: &Tensor, value: &Tensor, options: &AttentionOptions<'_>) -> Tensor {
        self.scaled_dot_product_attention_with_weights(key, value, options).0
    }

    /// Like [`scaled_dot_product_attention`](Tensor::scaled_dot_product_attention), also
    /// returning the attention weights `[..., L, S]` (after dropout, as PyTorch's
    /// `MultiheadAttention` returns them).
    #[track_caller]
    pub fn scaled_dot_product_attention_with_weights(
        &self,
        key: &Tensor,
        value: &Tensor,
        options: &AttentionOptions<'_>,
    ) -> (Tensor, Tensor) {
        const OP: &str = "scaled_dot_product_attention";
        let (q, k, v) = (self, key, value);
        if q.rank() < 2 || k.rank() < 2 || v.rank() < 2 {
            panic!(
                "{OP}: query, key and value need at least 2 dims, got {:?}, {:?}, {:?}",
                q.shape(),
                k.shape(),
                v.shape()
            );
        }
        let (e, ek) = (q.shape()[q.rank() - 1], k.shape()[k.rank() - 1]);
        let (s, sv) = (k.shape()[k.rank() - 2], v.shape()[v.rank() - 2]);
        if e != ek {
            panic!("{OP}: query {:?} and key {:?} have different embedding sizes {e} and {ek}", q.shape(), k.shape());
        }
        if s != sv {
            panic!("{OP}: key {:?} and value {:?} have different sequence lengths {s} and {sv}", k.shape(), v.shape());
        }
        if options.is_causal && options.attn_mask.is_some() {
            panic!("{OP}: explicit attn_mask should not be set when is_causal=true");
        }
        let l = q.shape()[q.rank() - 2];
        let scale = options.scale.unwrap_or(1.0 / (e as f64).sqrt());
        let mut scores = q.matmul(&k.transpose(-2, -1)) * scale;
        let causal;
        let mask = if options.is_causal {
            let m: Vec<bool> = (0..l).flat_map(|i| (0..s).map(move |j| j <= i)).collect();
            causal = Tensor::from_cpu(CpuStorage::Bool(m), &[l, s]);
            Some(if q.device() == Device::Meta { causal.to_device(Device::Meta) } else { causal })
        } else {
            options.attn_mask.cloned()
        };
        if let Some(m) = mask {
            if crate::shape::broadcast_shapes(m.shape(), scores.shape()).is_none_or(|b| b.as_slice() != scores.shape())
            {
                panic!(
                    "{OP}: attn_mask of shape {:?} cannot be broadcast to the scores' shape {:?}",
                    m.shape(),
                    scores.shape()
                );
            }
            scores = if m.dtype() == DType::Bool {
                scores.masked_fill(&m.logical_not(), f64::NEG_INFINITY)
            } else {
                &scores + &m
            };
        }
        let mut weights = scores.softmax(-1);
        if options.dropout_p > 0.0 {
            weights = weights.dropout(options.dropout_p, true);
        }
        (weights.matmul(v), weights)
    }
}
