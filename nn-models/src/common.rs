//! Pieces the transformers models share: transformers' initialisation, the head split of
//! multi-head attention, and the input of causal language models.

use std::borrow::Cow;

use nn_core::module::{ForwardArg, ModuleIo};
use nn_core::{init, DType, Tensor};
use nn_layers::{Embedding, Linear};

use crate::kv_cache::KvCache;

/// transformers' default `initializer_range`.
pub(crate) fn std_init() -> f64 {
    0.02
}

/// A linear layer with transformers' initialisation: weight `N(0, std)`, bias zeros.
pub(crate) fn hf_linear(in_features: usize, out_features: usize, bias: bool, std: f64) -> Linear {
    let l = Linear::with_bias(in_features, out_features, bias);
    init::normal_(&l.weight, 0.0, std);
    if let Some(b) = &l.bias {
        init::zeros_(b);
    }
    l
}

/// An embedding with transformers' initialisation, `N(0, std)`.
pub(crate) fn hf_embedding(num: usize, dim: usize, std: f64) -> Embedding {
    let e = Embedding::new(num, dim);
    init::normal_(&e.weight, 0.0, std);
    e
}

/// A word embedding with transformers' initialisation and `padding_idx`: the row of
/// `pad_token_id` (counted from the end when negative, as `nn.Embedding`'s) is zeroed
/// after the normal draw, as `_init_weights` does, and never receives a gradient.
///
/// # Panics
/// When `pad_token_id` names no row, naming the config field.
pub(crate) fn hf_word_embedding(num: usize, dim: usize, std: f64, pad_token_id: Option<i64>) -> Embedding {
    let Some(pad) = pad_token_id else {
        return hf_embedding(num, dim, std);
    };
    let row = padding_row(pad, num).unwrap_or_else(|e| panic!("{e}"));
    let e = Embedding::with_padding_idx(num, dim, row);
    init::normal_(&e.weight, 0.0, std);
    nn_core::no_grad(|| {
        e.weight.narrow(0, row, 1).zero_();
    });
    e
}

/// The embedding row `pad_token_id` names in a table of `num` rows.
///
/// # Errors
/// Naming the field, when it is outside `-num..num`.
pub(crate) fn padding_row(pad: i64, num: usize) -> std::result::Result<usize, String> {
    let n = i64::try_from(num).unwrap_or(i64::MAX);
    let row = if pad < 0 { pad + n } else { pad };
    if (0..n).contains(&row) {
        Ok(row as usize)
    } else {
        Err(format!("`pad_token_id` {pad} is not a row of the {num}-token embedding (it must be in -{num}..{num})"))
    }
}

/// Splits `[N, L, H*D]` into heads, `[N, H, L, D]`.
pub(crate) fn split_heads(x: &Tensor, heads: usize) -> Tensor {
    let (n, l, e) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    x.reshape(&[n, l, heads, e / heads]).transpose(1, 2)
}

/// Merges `[N, H, L, D]` back into `[N, L, H*D]`.
pub(crate) fn merge_heads(x: &Tensor) -> Tensor {
    let (n, h, l, d) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    x.transpose(1, 2).reshape(&[n, l, h * d])
}

/// The input of the causal models ([`Gpt2LMHeadModel`](crate::gpt2::Gpt2LMHeadModel), [`LlamaForCausalLM`](crate::llama::LlamaForCausalLM) and their stacks): token ids `[N, L]` (i64) and,
/// optionally, the cache of the positions before them. A plain `&Tensor` converts (no
/// cache): `model.forward(&input_ids)`.
///
/// **No padding.** There is no `attention_mask` (nor `position_ids`): every row is one
/// whole sequence, its tokens at positions `past..past + L`, each attending to every
/// earlier one. A batch of sequences of different lengths padded to one length computes
/// the padded rows wrongly (the real tokens attend to the padding and sit at shifted
/// positions), as transformers does when no mask is passed: run such sequences one by one,
/// or in batches of equal length.
#[derive(Clone, Debug)]
pub struct CausalLmInput {
    /// `[N, L]`, i64: the primary input, which hooks see.
    pub input_ids: Tensor,
    /// The earlier positions' keys and values, extended by the call.
    pub cache: Option<KvCache>,
}

impl CausalLmInput {
    /// Ids continuing the positions held in `cache`.
    pub fn with_cache(input_ids: &Tensor, cache: &KvCache) -> Self {
        CausalLmInput { input_ids: input_ids.clone(), cache: Some(cache.clone()) }
    }
}

impl ModuleIo for CausalLmInput {
    fn primary(&self) -> &Tensor {
        &self.input_ids
    }
    fn with_primary(&self, primary: Tensor) -> Self {
        CausalLmInput { input_ids: primary, ..self.clone() }
    }
}

impl<'a> ForwardArg<'a, CausalLmInput> for &'a Tensor {
    fn into_input(self) -> Cow<'a, CausalLmInput> {
        Cow::Owned(CausalLmInput { input_ids: self.clone(), cache: None })
    }
}

/// Checks `[N, L]` i64 ids against the vocabulary and the positions left after `past`.
#[track_caller]
pub(crate) fn check_ids(model: &str, ids: &Tensor, past: usize, limit: usize, field: &str) {
    if ids.rank() != 2 || ids.dtype() != DType::I64 {
        panic!("{model}: input_ids must be i64 [batch, seq], got {} {:?}", ids.dtype(), ids.shape());
    }
    let l = ids.shape()[1];
    if past + l > limit {
        panic!("{model}: {past} cached plus {l} new positions exceed the model's {limit} positions (`{field}`)");
    }
}
