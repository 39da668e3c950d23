//! Fused kernels (layer norm forward and backward, the softmax backward, attention).
//!
//! Unlike the rest of the interface these are optional: a backend without a fused kernel
//! for an operand answers `None`, and the op composes the same values from primitives on
//! that device (so no device falls back to the host for them). The CPU backend fuses
//! `f32` and `f64`.

use super::{cpu, CpuStorage, Storage};
use crate::shape::Layout;

/// The CPU buffer of `s`, if it is one.
fn on_cpu(s: &Storage) -> Option<&CpuStorage> {
    match s {
        Storage::Cpu(c) => Some(c),
        _ => None,
    }
}

/// An optional `(buffer, layout)` operand on the CPU: `Some(None)` when absent, `None`
/// when present elsewhere.
fn opt_on_cpu<'a>(p: Option<(&'a Storage, &'a Layout)>) -> Option<Option<(&'a CpuStorage, &'a Layout)>> {
    match p {
        None => Some(None),
        Some((s, l)) => on_cpu(s).map(|c| Some((c, l))),
    }
}

/// How a fused attention runs, besides its operands and mask (see
/// [`Storage::attention_fused`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttentionPlan {
    /// The scores' scale.
    pub scale: f64,
    /// PyTorch's causal mask (top-left aligned: query `i` attends keys `j <= i`), given
    /// instead of a mask.
    pub causal: bool,
    /// The dropout probability on the weights, in `[0, 1)` (0: none).
    pub dropout: f64,
    /// Results token-major (`[N, L, H, D]` in memory, the layout heads are split from, a
    /// task per batch entry) rather than head-major (`[N, H, L, D]`, tasks of heads).
    pub token_major: bool,
}

impl Storage {
    /// Layer normalization of the rows of `n` elements `l` selects (`n > 0`), with an
    /// optional weight and bias of `n` elements: `[y, mean, rstd]` (`y` contiguous, one
    /// mean and `1 / sqrt(var + eps)` per row). Not `centered`, RMS normalization: the
    /// mean is 0 and `rstd = 1 / sqrt(mean(x^2) + eps)`. `None` where this backend has no
    /// fused kernel for these operands.
    pub(crate) fn layer_norm_rows(
        &self,
        l: &Layout,
        weight: Option<(&Storage, &Layout)>,
        bias: Option<(&Storage, &Layout)>,
        n: usize,
        (eps, centered): (f64, bool),
    ) -> Option<[Storage; 3]> {
        let x = on_cpu(self)?;
        let (w, b) = (opt_on_cpu(weight)?, opt_on_cpu(bias)?);
        cpu::norm::layer_norm((x, l), w, b, n, (eps, centered)).map(|r| r.map(Storage::Cpu))
    }

    /// The gradients of [`layer_norm_rows`](Storage::layer_norm_rows) (this is its
    /// input `x`) from the upstream gradient `gy` and the saved `mean` and `rstd`:
    /// `[gx, gweight, gbias]`, each present when `need` asks for it. `None` where this
    /// backend has no fused kernel for these operands.
    pub(crate) fn layer_norm_rows_backward(
        &self,
        l: &Layout,
        gy: (&Storage, &Layout),
        (mean, rstd): (&Storage, &Storage),
        weight: Option<(&Storage, &Layout)>,
        (n, centered): (usize, bool),
        need: [bool; 3],
    ) -> Option<[Option<Storage>; 3]> {
        let (x, g) = (on_cpu(self)?, on_cpu(gy.0)?);
        let (mean, rstd, w) = (on_cpu(mean)?, on_cpu(rstd)?, opt_on_cpu(weight)?);
        cpu::norm::layer_norm_backward((x, l), (g, gy.1), (mean, rstd), w, (n, centered), need)
            .map(|r| r.map(|s| s.map(Storage::Cpu)))
    }

    /// Scaled dot-product attention, `softmax(q k^T scale + mask) v` with dropout on the
    /// weights, this being `q` (`[N, H, L, E]`; `k` `[N, H_kv, S, E]` and `v`
    /// `[N, H_kv, S, Ev]` with `H_kv` dividing `H`, query head `h` using key and value head
    /// `h / (H / H_kv)`; none empty) and `mask` a bool (`true` = may attend) or additive
    /// mask of `q`'s dtype whose layout broadcasts it to `[N, H, L, S]`: `[out, weights,
    /// kept]`, the output `[N, H, L, Ev]` stored as `plan` says, the weights before dropout
    /// `[N, H, L, S]` contiguous, and which of them dropout kept (bool, the same shape; empty
    /// without dropout), drawn in order from the global generator as
    /// [`dropout_mask`](Storage::dropout_mask) draws. `None` where this backend has no fused
    /// kernel for these operands (and then nothing is drawn).
    pub(crate) fn attention_fused(
        &self,
        lq: &Layout,
        k: (&Storage, &Layout),
        v: (&Storage, &Layout),
        mask: Option<(&Storage, &Layout)>,
        plan: &AttentionPlan,
    ) -> Option<[Storage; 3]> {
        let (q, kc, vc, m) = (on_cpu(self)?, on_cpu(k.0)?, on_cpu(v.0)?, opt_on_cpu(mask)?);
        let qkv = [(q, lq), (kc, k.1), (vc, v.1)];
        cpu::attention::attention(qkv, m, plan).map(|r| r.map(Storage::Cpu))
    }

    /// The gradients `[q, k, v]` of [`attention_fused`](Storage::attention_fused) from
    /// this upstream gradient (`lg` selects it, any strides), the saved weights and kept
    /// weights, and the same operands, mask and plan, each stored as the forward's output;
    /// with `scores_grad`, also the gradient of the masked scores `[N, H, L, S]`
    /// (contiguous; an additive mask's before its broadcast is summed; `f32` for `f16` and
    /// `bf16` operands, so that the sum over the broadcast rounds once). `None` where this
    /// backend has no fused kernel for these operands.
    pub(crate) fn attention_fused_backward(
        &self,
        lg: &Layout,
        (weights, kept): (&Storage, &Storage),
        [q, k, v]: [(&Storage, &Layout); 3],
        mask: Option<(&Storage, &Layout)>,
        plan: &AttentionPlan,
        scores_grad: bool,
    ) -> Option<([Storage; 3], Option<Storage>)> {
        let (g, p, kept, m) = (on_cpu(self)?, on_cpu(weights)?, on_cpu(kept)?, opt_on_cpu(mask)?);
        let qkv = [(on_cpu(q.0)?, q.1), (on_cpu(k.0)?, k.1), (on_cpu(v.0)?, v.1)];
        let (grads, ds) = cpu::attention::attention_backward((g, lg), (p, kept), qkv, m, plan, scores_grad)?;
        Some((grads.map(Storage::Cpu), ds.map(Storage::Cpu)))
    }

    /// The gradient of a softmax (log-softmax, `log`) along contiguous rows of `n`
    /// (`n > 0`) from this upstream gradient (`l` selects it) and the forward output `y`
    /// (contiguous). `None` where this backend has no fused kernel for these operands.
    pub(crate) fn softmax_rows_backward(&self, l: &Layout, y: &Storage, n: usize, log: bool) -> Option<Storage> {
        cpu::norm::softmax_backward((on_cpu(self)?, l), on_cpu(y)?, n, log).map(Storage::Cpu)
    }
}
