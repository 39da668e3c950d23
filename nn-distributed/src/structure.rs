//! What the wrappers share: checking that every rank holds the same named tensors, and
//! broadcasting a list of tensors from one rank into every rank's copies.

use nn_core::{no_grad, DType, Tensor};

use crate::comm::{wire_dtype, Buf, Op};
use crate::group::{recv, ProcessGroup};
use crate::reduce_op::ReduceOp;

/// A named tensor to compare across ranks, with its `requires_grad`.
pub(crate) type Entry = (String, Tensor, bool);

/// Checks that every rank's `entries` agree with rank 0's: the count, then entry by entry
/// the name, dtype, `requires_grad` and shape. All ranks see all signatures (two
/// all-gathers), so all return the same `Err`: the first difference, naming the entry and
/// the ranks. `what` names the entries in the messages (`parameters and buffers`).
pub(crate) fn verify_same(group: &ProcessGroup, entries: &[Entry], what: &str) -> Result<(), String> {
    if group.world_size() == 1 {
        return Ok(());
    }
    let sig: Vec<i64> = entries.iter().flat_map(|(name, t, rg)| Signature::of(name, t, *rg).encode()).collect();
    let count = Tensor::from_vec_i64(vec![entries.len() as i64, sig.len() as i64], &[2]);
    let counts: Vec<Vec<i64>> = group.all_gather(&count).iter().map(Tensor::to_vec_i64).collect();
    if let Some(r) = counts.iter().position(|c| c[0] != counts[0][0]) {
        return Err(format!("rank 0 has {} {what}, rank {r} has {}", counts[0][0], counts[r][0]));
    }
    // Same counts: compare entry by entry; pad to the longest signature so that one
    // all_gather fits every rank.
    let longest = counts.iter().map(|c| c[1]).max().unwrap_or(0) as usize;
    let mut padded = sig;
    padded.resize(longest, -1);
    let all: Vec<Vec<i64>> =
        group.all_gather(&Tensor::from_vec_i64(padded, &[longest])).iter().map(Tensor::to_vec_i64).collect();
    let first = Signature::decode_all(&all[0], entries.len());
    for (r, other) in all.iter().enumerate().skip(1) {
        for (i, (a, b)) in first.iter().zip(Signature::decode_all(other, entries.len())).enumerate() {
            if a.name != b.name {
                return Err(format!("entry {i} of the {what} is `{}` on rank 0 but `{}` on rank {r}", a.name, b.name));
            }
            if *a != b {
                return Err(format!("`{}` is {} on rank 0 but {} on rank {r}", a.name, a.show(), b.show()));
            }
        }
    }
    Ok(())
}

/// One entry as the ranks compare it.
#[derive(Debug, PartialEq, Eq)]
struct Signature {
    name: String,
    /// `DType as i64`, or `-1` when it could not be read.
    dtype: i64,
    requires_grad: bool,
    shape: Vec<i64>,
}

impl Signature {
    fn of(name: &str, t: &Tensor, requires_grad: bool) -> Signature {
        let shape = t.shape().iter().map(|&s| s as i64).collect();
        Signature { name: name.to_string(), dtype: t.dtype() as i64, requires_grad, shape }
    }

    /// `[name length, name bytes.., dtype, requires_grad, rank, dims..]`.
    fn encode(&self) -> Vec<i64> {
        let mut v = vec![self.name.len() as i64];
        v.extend(self.name.bytes().map(i64::from));
        v.extend([self.dtype, self.requires_grad as i64, self.shape.len() as i64]);
        v.extend(&self.shape);
        v
    }

    /// `n` signatures from `v` (another rank's, maybe not well formed: what cannot be read
    /// comes out empty and differs from any real signature).
    fn decode_all(v: &[i64], n: usize) -> Vec<Signature> {
        let mut at = 0;
        let mut take = |k: usize| -> &[i64] {
            let (start, end) = (at.min(v.len()), (at + k).min(v.len()));
            at += k;
            &v[start..end]
        };
        (0..n)
            .map(|_| {
                let len = take(1).first().copied().unwrap_or(0).clamp(0, 1 << 16) as usize;
                let name = take(len).iter().map(|&b| u8::try_from(b).unwrap_or(b'?') as char).collect();
                let head = take(3).to_vec();
                let get = |i: usize| head.get(i).copied().unwrap_or(-1);
                let rank = get(2).clamp(0, 64) as usize;
                Signature { name, dtype: get(0), requires_grad: get(1) == 1, shape: take(rank).to_vec() }
            })
            .collect()
    }

    /// `[4, 3] f32`, with ` (no grad)` for a tensor that does not require grad.
    fn show(&self) -> String {
        let dtype = [DType::F32, DType::F64, DType::I64, DType::F16, DType::BF16, DType::Bool]
            .into_iter()
            .find(|d| *d as i64 == self.dtype)
            .map(|d| d.to_string())
            .unwrap_or_else(|| "?".into());
        format!("{:?} {dtype}{}", self.shape, if self.requires_grad { "" } else { " (no grad)" })
    }
}

/// Copies rank `root`'s values into `tensors` on every rank: one broadcast per wire dtype.
/// Every rank passes tensors of the same shapes and dtypes, in the same order.
pub(crate) fn broadcast_tensors(group: &ProcessGroup, tensors: &[Tensor], root: usize) {
    if group.world_size() == 1 {
        return;
    }
    let mut pending = Vec::new();
    for wire in [DType::F32, DType::F64, DType::I64] {
        let members: Vec<&Tensor> = tensors.iter().filter(|t| wire_dtype(t.dtype()) == wire).collect();
        if members.is_empty() {
            continue;
        }
        let mut buf = Buf::for_dtype(wire, members.iter().map(|t| t.numel()).sum());
        members.iter().for_each(|t| buf.extend_from(t));
        pending.push((members, group.submit(Op::Broadcast { buf, root })));
    }
    for (members, rx) in pending {
        let buf = recv(&rx, "broadcast of parameters");
        if group.rank() == root {
            continue;
        }
        let mut offset = 0;
        no_grad(|| {
            for t in members {
                t.copy_(&buf.tensor(offset, t.shape(), t.dtype()));
                offset += t.numel();
            }
        });
    }
}

/// Gradient clipping when each rank holds part of the gradients (FSDP's shards, ZeRO's
/// partition): `held` are this rank's parameters whose gradients count (each gradient
/// counted on exactly one rank); the sums of squares are all-reduced, and every rank
/// scales the gradients of `scaled` alike. Returns the total norm before clipping. A
/// collective.
pub(crate) fn clip_grad_norm_across(
    group: &ProcessGroup,
    held: &[&nn_core::Parameter],
    scaled: &[&nn_core::Parameter],
    max_norm: f64,
) -> f64 {
    // Checked before the collective, so a bad value panics on every rank alike.
    nn_core::optim::clip_coefficient(0.0, max_norm);
    let local: f64 =
        held.iter().filter_map(|p| p.grad()).map(|g| g.to_vec_of::<f64>().iter().map(|v| v * v).sum::<f64>()).sum();
    let total = group.all_reduce(&Tensor::from_vec_f64(vec![local], &[1]), ReduceOp::Sum);
    let norm = total.to_vec_of::<f64>()[0].sqrt();
    if let Some(scale) = nn_core::optim::clip_coefficient(norm, max_norm) {
        for p in scaled {
            if let Some(g) = p.grad() {
                p.set_grad(Some(&g * scale));
            }
        }
    }
    norm
}

#[cfg(test)]
mod tests {
    use super::Signature;
    use nn_core::Tensor;

    #[test]
    fn signatures_round_trip_and_survive_garbage() {
        let a = Signature::of("0.weight", &Tensor::zeros(&[4, 3]), true);
        let b = Signature::of("running_mean", &Tensor::zeros(&[7]), false);
        let v: Vec<i64> = [a.encode(), b.encode()].concat();
        let got = Signature::decode_all(&v, 2);
        assert_eq!(got, [a, b]);
        assert_eq!(got[0].show(), "[4, 3] f32");
        assert_eq!(got[1].show(), "[7] f32 (no grad)");
        // Truncated or padded input decodes to something, without panicking.
        assert_eq!(Signature::decode_all(&v[..5], 2).len(), 2);
        assert_eq!(Signature::decode_all(&[-1; 4], 3).len(), 3);
    }
}
