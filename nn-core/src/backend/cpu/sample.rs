//! Sampling from categorical distributions (`multinomial`), on the global generator.

use rand::Rng;

use super::{strided_to_vec, with_float, CpuStorage};
use crate::dtype::Element;
use crate::random::with_rng;
use crate::shape::Layout;

/// See [`crate::backend::Storage::multinomial`].
pub(crate) fn multinomial(x: &CpuStorage, rows: &Layout, n: usize, samples: usize, replacement: bool) -> CpuStorage {
    let p: Vec<f64> =
        with_float!(x, "multinomial", T, v => strided_to_vec(v, rows).into_iter().map(T::as_f64).collect());
    let count = p.len().checked_div(n).unwrap_or(0);
    // Every row is checked before any is drawn: a bad row changes no generator state.
    for row in p.chunks(n) {
        if row.iter().any(|&w| !w.is_finite() || w < 0.0) {
            panic!("multinomial: probability tensor contains either `inf`, `nan` or element < 0");
        }
        if row.iter().sum::<f64>() <= 0.0 {
            panic!("multinomial: invalid multinomial distribution (sum of probabilities <= 0)");
        }
    }
    let mut out = Vec::with_capacity(count * samples);
    with_rng(|r| {
        let mut cdf = Vec::with_capacity(n);
        let mut keys: Vec<(f64, usize)> = Vec::with_capacity(n);
        for row in p.chunks(n) {
            if replacement {
                // Inverse transform: the first category whose cumulative weight exceeds u.
                cdf.clear();
                let mut acc = 0.0;
                cdf.extend(row.iter().map(|&w| {
                    acc += w;
                    acc
                }));
                let last = row.iter().rposition(|&w| w > 0.0).expect("a positive weight");
                for _ in 0..samples {
                    let u = r.random::<f64>() * acc;
                    out.push(cdf.partition_point(|&c| c <= u).min(last) as i64);
                }
            } else {
                // The exponential race: category i arrives at E_i / p_i with E_i ~ Exp(1);
                // the first `samples` arrivals are a draw without replacement, in order.
                keys.clear();
                for (i, &w) in row.iter().enumerate() {
                    let e = -(1.0 - r.random::<f64>()).ln();
                    if w > 0.0 {
                        keys.push((e / w, i));
                    }
                }
                keys.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                out.extend(keys.iter().take(samples).map(|&(_, i)| i as i64));
                // Fewer positive weights than samples: PyTorch then returns zero-weight
                // categories after the others (here in their order).
                let missing = samples.saturating_sub(keys.len());
                out.extend(row.iter().enumerate().filter(|&(_, &w)| w == 0.0).take(missing).map(|(i, _)| i as i64));
            }
        }
    });
    CpuStorage::I64(out)
}
