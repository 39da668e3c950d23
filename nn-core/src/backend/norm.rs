//! Fused row kernels (layer norm forward and backward, the softmax backward).
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
    /// mean and `1 / sqrt(var + eps)` per row). `None` where this backend has no fused
    /// kernel for these operands.
    pub(crate) fn layer_norm_rows(
        &self,
        l: &Layout,
        weight: Option<(&Storage, &Layout)>,
        bias: Option<(&Storage, &Layout)>,
        n: usize,
        eps: f64,
    ) -> Option<[Storage; 3]> {
        let x = on_cpu(self)?;
        let (w, b) = (opt_on_cpu(weight)?, opt_on_cpu(bias)?);
        cpu::norm::layer_norm((x, l), w, b, n, eps).map(|r| r.map(Storage::Cpu))
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
        n: usize,
        need: [bool; 3],
    ) -> Option<[Option<Storage>; 3]> {
        let (x, g) = (on_cpu(self)?, on_cpu(gy.0)?);
        let (mean, rstd, w) = (on_cpu(mean)?, on_cpu(rstd)?, opt_on_cpu(weight)?);
        cpu::norm::layer_norm_backward((x, l), (g, gy.1), (mean, rstd), w, n, need)
            .map(|r| r.map(|s| s.map(Storage::Cpu)))
    }

    /// The gradient of a softmax (log-softmax, `log`) along contiguous rows of `n`
    /// (`n > 0`) from this upstream gradient (`l` selects it) and the forward output `y`
    /// (contiguous). `None` where this backend has no fused kernel for these operands.
    pub(crate) fn softmax_rows_backward(&self, l: &Layout, y: &Storage, n: usize, log: bool) -> Option<Storage> {
        cpu::norm::softmax_backward((on_cpu(self)?, l), on_cpu(y)?, n, log).map(Storage::Cpu)
    }
}
