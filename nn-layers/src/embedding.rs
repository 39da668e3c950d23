//! `Embedding`.

use nn_core::{Compute, DType, ExtraRepr, Module, ModuleBase, Parameter, Tensor};

/// A lookup table of `num_embeddings` vectors of size `embedding_dim` (PyTorch's
/// `nn.Embedding`). Parameter `weight` `[num_embeddings, embedding_dim]`, init `N(0, 1)`
/// with the `padding_idx` row zeroed; that row receives no gradient. Input: `i64` indices
/// of any shape; output: that shape plus `[embedding_dim]`.
///
/// ```
/// use nn_core::{Forward, Tensor};
/// use nn_layers::Embedding;
/// let e = Embedding::with_padding_idx(10, 3, 0);
/// assert_eq!(e.to_string(), "Embedding(10, 3, padding_idx=0)");
/// let y = e.forward(&Tensor::from_vec_i64(vec![0, 4], &[2]));
/// assert_eq!(y.shape(), &[2, 3]);
/// assert_eq!(y.to_vec()[..3], [0.0, 0.0, 0.0]);
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct Embedding {
    /// `[num_embeddings, embedding_dim]`.
    #[param]
    pub weight: Parameter,
    #[base]
    base: ModuleBase,
    padding_idx: Option<usize>,
}

impl Embedding {
    /// A table initialised from `N(0, 1)`.
    pub fn new(num_embeddings: usize, embedding_dim: usize) -> Self {
        Embedding {
            weight: Parameter::new(Tensor::randn(&[num_embeddings, embedding_dim])),
            base: ModuleBase::default(),
            padding_idx: None,
        }
    }

    /// A table whose `padding_idx` row is zero and never trained.
    ///
    /// # Panics
    /// When `padding_idx >= num_embeddings`.
    #[track_caller]
    pub fn with_padding_idx(num_embeddings: usize, embedding_dim: usize, padding_idx: usize) -> Self {
        if padding_idx >= num_embeddings {
            panic!("Embedding: padding_idx {padding_idx} must be within num_embeddings {num_embeddings}");
        }
        let mut e = Self::new(num_embeddings, embedding_dim);
        e.padding_idx = Some(padding_idx);
        e.zero_padding_row();
        e
    }

    /// The row that reads as zeros and is never trained (PyTorch's `padding_idx`), if any.
    pub fn padding_idx(&self) -> Option<usize> {
        self.padding_idx
    }

    /// Zeros the `padding_idx` row (if any) with tensor ops, so that it works on whatever
    /// device and dtype the table has.
    pub(crate) fn zero_padding_row(&self) {
        let Some(row) = self.padding_idx else { return };
        let n = self.weight.shape()[0];
        let mut rows = vec![false; n];
        rows[row] = true;
        let padding_row = Tensor::from_vec_bool(rows, &[n, 1]).to_device(self.weight.device());
        nn_core::no_grad(|| self.weight.copy_(&self.weight.masked_fill(&padding_row, 0.0)));
    }
}

impl ExtraRepr for Embedding {
    fn extra_repr(&self) -> String {
        let w = self.weight.value();
        let s = w.shape();
        match self.padding_idx {
            Some(p) => format!("{}, {}, padding_idx={p}", s[0], s[1]),
            None => format!("{}, {}", s[0], s[1]),
        }
    }
}

impl Compute for Embedding {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, idx: &Tensor) -> Tensor {
        if idx.dtype() != DType::I64 {
            panic!("{} expects i64 indices, got {} of shape {:?}", self, idx.dtype(), idx.shape());
        }
        let y = Tensor::embedding(idx, &self.weight.value());
        match self.padding_idx {
            // Rows looked up at the padding index pass no gradient to the table.
            Some(p) => {
                let pad = idx.eq(&Tensor::from_vec_i64(vec![p as i64], &[]).to_device(idx.device())).unsqueeze(-1);
                Tensor::where_cond(&pad, &y.detach(), &y)
            }
            None => y,
        }
    }
}
