//! transformers' initialisation (`_init_weights`): linear layers and embeddings drawn from
//! `N(0, initializer_range)` with zero biases, and the zeroed padding row of a word
//! embedding.

use nn_core::init;
use nn_layers::{Embedding, Linear};

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
