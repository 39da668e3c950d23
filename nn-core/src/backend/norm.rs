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

    /// Scaled dot-product attention without mask or dropout, `softmax(q k^T scale) v`,
    /// this being `q` (`[B, L, E]` or `[N, H, L, E]`; `k` and `v` of the same batch
    /// shape, `[.., S, E]` and `[.., S, Ev]`, none empty): `[out, weights]`, the output
    /// `[.., L, Ev]` stored token-major (`[B, L, Ev]` or `[N, L, H, Ev]` in memory) and
    /// the weights `[.., L, S]` contiguous. `None` where this backend has no fused kernel
    /// for these operands.
    pub(crate) fn attention_fused(
        &self,
        lq: &Layout,
        k: (&Storage, &Layout),
        v: (&Storage, &Layout),
        scale: f64,
    ) -> Option<[Storage; 2]> {
        let (q, kc, vc) = (on_cpu(self)?, on_cpu(k.0)?, on_cpu(v.0)?);
        cpu::attention::attention((q, lq), (kc, k.1), (vc, v.1), scale).map(|r| r.map(Storage::Cpu))
    }

    /// The gradients `[q, k, v]` of [`attention_fused`](Storage::attention_fused) from
    /// this upstream gradient (`lg` selects it, any strides) and the saved weights, each
    /// stored token-major as the forward's output. `None` where this backend has no fused
    /// kernel for these operands.
    pub(crate) fn attention_fused_backward(
        &self,
        lg: &Layout,
        weights: &Storage,
        q: (&Storage, &Layout),
        k: (&Storage, &Layout),
        v: (&Storage, &Layout),
        scale: f64,
    ) -> Option<[Storage; 3]> {
        let (g, p) = (on_cpu(self)?, on_cpu(weights)?);
        let (qc, kc, vc) = (on_cpu(q.0)?, on_cpu(k.0)?, on_cpu(v.0)?);
        cpu::attention::attention_backward((g, lg), p, [(qc, q.1), (kc, k.1), (vc, v.1)], scale)
            .map(|r| r.map(Storage::Cpu))
    }

    /// The gradient of a softmax (log-softmax, `log`) along contiguous rows of `n`
    /// (`n > 0`) from this upstream gradient (`l` selects it) and the forward output `y`
    /// (contiguous). `None` where this backend has no fused kernel for these operands.
    pub(crate) fn softmax_rows_backward(&self, l: &Layout, y: &Storage, n: usize, log: bool) -> Option<Storage> {
        cpu::norm::softmax_backward((on_cpu(self)?, l), on_cpu(y)?, n, log).map(Storage::Cpu)
    }
}
