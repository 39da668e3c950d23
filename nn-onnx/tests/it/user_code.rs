//! User-written forward code made of tensor ops traces like built-in layers.

use nn_core::manual_seed;
use nn_core::prelude::*;
use nn_layers::{LayerNorm, Linear};

use crate::support::{check, check_with, vals};

/// A hand-written attention block: projections, head split with view/permute/transpose,
/// scaled scores with a causal mask built in the forward, softmax, concatenation, a
/// residual and a norm, pooling with mean and max, narrow and chunk.
#[derive(Module)]
struct Block {
    #[module]
    qkv: Linear,
    #[module]
    out: Linear,
    #[module]
    norm: LayerNorm,
    #[param]
    gate: Parameter,
    #[buffer]
    offset: Tensor,
    #[base]
    base: ModuleBase,
    heads: usize,
}

impl Compute for Block {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let (b, l, e) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let d = e / self.heads;
        let qkv = self.qkv.forward(x);
        let parts = qkv.chunk(3, -1);
        let split = |t: &Tensor| t.reshape(&[b, l, self.heads, d]).permute(&[0, 2, 1, 3]);
        let (q, k, v) = (split(&parts[0]), split(&parts[1]), split(&parts[2]));
        let scores = q.matmul(&k.transpose(-2, -1)) / (d as f64).sqrt();
        let future = Tensor::ones(&[l, l]).triu(1).gt(&Tensor::zeros(&[]));
        let att = scores.masked_fill(&future, f64::NEG_INFINITY).softmax(-1);
        let y = att.matmul(&v).transpose(1, 2).contiguous().view(&[b, l, e]);
        let y = self.norm.forward(&(x + &self.out.forward(&y) * &self.gate.sigmoid()));
        let first = y.narrow(1, 0, 1).squeeze_dim(1);
        let pooled = Tensor::cat(&[&y.mean_dim(1, false), &y.logsumexp(1, false).exp().log(), &first], -1);
        let z = (pooled - &self.offset).clamp(-3.0, 3.0);
        let z = z.abs().sqrt() * z.sign_like() + z.powf(2.0) * 0.1;
        Tensor::stack(&[&z, &z.neg()], 1).flatten(1, -1).unsqueeze(1).expand(&[b, 2, 6 * e]).sum_dim(1, false)
    }
}

trait SignLike {
    fn sign_like(&self) -> Tensor;
}

impl SignLike for Tensor {
    /// `x / (|x| + eps)`: a differentiable sign written with broadcasting arithmetic.
    fn sign_like(&self) -> Tensor {
        self / &(self.abs() + 1e-6)
    }
}

#[test]
fn hand_written_attention_block() {
    manual_seed(11);
    let mut m = Block {
        qkv: Linear::new(8, 24),
        out: Linear::new(8, 8),
        norm: LayerNorm::new(8),
        gate: Parameter::new(vals(&[8], 3)),
        offset: vals(&[24], 4) * 0.1,
        base: ModuleBase::new(),
        heads: 2,
    };
    m.eval();
    check("hand-written block", &m, |b| vals(&[b, 5, 8], 15));
    // Opset 18 moved the axes of ReduceLogSumExp to an input; 21 needs IR version 10.
    for opset in [18, 21] {
        let opts = nn_onnx::ExportConfig { opset, ..Default::default() };
        let bytes =
            check_with(&format!("hand-written block, opset {opset}"), &m, |b| vals(&[b, 5, 8], 16), &[2, 3], &opts);
        assert_eq!(nn_onnx::inspect(&bytes).unwrap().opset, opset);
    }
}

/// Dtype conversions and `contiguous` copies inside the forward.
#[derive(Module)]
struct Casts {
    #[base]
    base: ModuleBase,
}

impl Compute for Casts {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        let wide = x.to_dtype(DType::F64).t().contiguous();
        let positive = wide.gt(&Tensor::full_on(&[], 0.0, DType::F64, Device::Cpu)).to_dtype(DType::F64);
        (&wide * &positive).t().to_dtype(DType::F32).argmax(1, false).to_dtype(DType::F32) + x.sum_dim(1, false)
    }
}

#[test]
fn dtype_casts_and_copies() {
    check("casts", &Casts { base: ModuleBase::new() }, |b| vals(&[b, 4], 17));
}
