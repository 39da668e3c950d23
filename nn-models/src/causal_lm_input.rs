//! The input of the causal language models, [`CausalLmInput`], and what it turns into:
//! Hugging Face attention masks read as token flags, the positions of a padded batch, the
//! checks of the ids, and [`RowAttention`], what a batch's rows add to the causal rule.
//! BERT reads its attention mask through the same [`hf_mask_tokens`].

use std::borrow::Cow;

use nn_core::module::ForwardArg;
use nn_core::{DType, Tensor};

use crate::kv_cache::KvCache;

/// The input of the causal models ([`Gpt2LMHeadModel`](crate::gpt2::Gpt2LMHeadModel),
/// [`LlamaForCausalLM`](crate::llama::LlamaForCausalLM) and their stacks): token ids
/// `[N, L]` (i64) and, optionally, the cache of the positions before them, an attention
/// mask and position ids. A plain `&Tensor` converts (no cache, no mask):
/// `model.forward(&input_ids)`.
///
/// **Padded batches** take transformers' two inputs:
/// - `attention_mask` `[N, past + L]` (1 = token, 0 = padding; i64, bool or float, any
///   other value refused), over the cached positions and the new ones: no token attends
///   to a padding key. Without it every row is one whole sequence, and real tokens attend
///   to the padding, silently (as in transformers).
/// - `position_ids` `[N, L]` (or `[1, L]`), i64: each new token's position. Without it
///   they are `past..past + L` in every row, as transformers' `forward` takes them; a
///   left-padded row's tokens then sit at shifted positions. [`positions_from_mask`]
///   gives what transformers' `generate` passes (`cumsum(mask) - 1`).
///
/// The outputs at padding positions are not meaningful (their queries attend to nothing
/// but padding); compare and read the others.
#[derive(Clone, Debug, nn_core::ModuleIo)]
pub struct CausalLmInput {
    /// `[N, L]`, i64: the primary input, which hooks see.
    #[io(primary)]
    pub input_ids: Tensor,
    /// The earlier positions' keys and values, extended by the call.
    pub cache: Option<KvCache>,
    /// `[N, past + L]`, 1 = token, 0 = padding (Hugging Face's convention).
    pub attention_mask: Option<Tensor>,
    /// `[N, L]` or `[1, L]`, i64: the positions of the new tokens.
    pub position_ids: Option<Tensor>,
}

impl CausalLmInput {
    /// Ids alone: positions `0..L`, no padding.
    pub fn new(input_ids: &Tensor) -> Self {
        CausalLmInput { input_ids: input_ids.clone(), cache: None, attention_mask: None, position_ids: None }
    }

    /// Ids continuing the positions held in `cache`.
    pub fn with_cache(input_ids: &Tensor, cache: &KvCache) -> Self {
        CausalLmInput { cache: Some(cache.clone()), ..CausalLmInput::new(input_ids) }
    }

    /// The same input with an attention mask `[N, past + L]` (1 = token, 0 = padding).
    pub fn attention_mask(self, mask: &Tensor) -> Self {
        CausalLmInput { attention_mask: Some(mask.clone()), ..self }
    }

    /// The same input with position ids `[N, L]` or `[1, L]` (i64).
    pub fn position_ids(self, positions: &Tensor) -> Self {
        CausalLmInput { position_ids: Some(positions.clone()), ..self }
    }
}

impl<'a> ForwardArg<'a, CausalLmInput> for &'a Tensor {
    fn into_input(self) -> Cow<'a, CausalLmInput> {
        Cow::Owned(CausalLmInput::new(self))
    }
}

/// transformers' `generate` positions of a padded batch: `cumsum(mask, -1) - 1` along each
/// row, with 1 at padding, of the last `new` columns (the tokens being fed; all of them
/// when nothing is cached). `mask` is `[N, S]`, 1 = token, 0 = padding.
///
/// ```
/// use nn_core::Tensor;
/// use nn_models::positions_from_mask;
/// let mask = Tensor::from_vec_i64(vec![0, 0, 1, 1, 1, 1, 1, 1], &[2, 4]);
/// assert_eq!(positions_from_mask(&mask, 4).to_vec_i64(), [1, 1, 0, 1, 0, 1, 2, 3]);
/// assert_eq!(positions_from_mask(&mask, 1).to_vec_i64(), [1, 3]);
/// ```
///
/// # Panics
/// When `mask` is not `[N, S]` of 0 and 1, or `new` exceeds `S`.
#[track_caller]
pub fn positions_from_mask(mask: &Tensor, new: usize) -> Tensor {
    let (n, s) = match mask.shape() {
        &[n, s] => (n, s),
        other => panic!("positions_from_mask: the mask must be [batch, seq], got {other:?}"),
    };
    assert!(new <= s, "positions_from_mask: {new} new positions of a mask of {s}");
    let keep = hf_mask_tokens("positions_from_mask", mask).to_device(nn_core::Device::Cpu).to_vec_bool();
    let mut out = Vec::with_capacity(n * new);
    for row in keep.chunks(s) {
        let mut count = 0i64;
        let all: Vec<i64> = row
            .iter()
            .map(|&k| {
                count += i64::from(k);
                if k {
                    count - 1
                } else {
                    1
                }
            })
            .collect();
        out.extend_from_slice(&all[s - new..]);
    }
    Tensor::from_vec_i64(out, &[n, new]).to_device(mask.device())
}

/// A Hugging Face attention mask as a bool tensor on its device, `true` = a token: 1 (or
/// `true`) is, 0 is not. Any other value panics: an additive mask (0 = attend, -10000 or
/// -inf = padding, what `get_extended_attention_mask` makes) read as "not zero attends"
/// would attend to the padding alone, silently. A bool mask is taken as it is; the values
/// of another are read on the host to be checked (a wait on a GPU: pass a bool mask there
/// to avoid it). While tracing for export, and on the meta device, they cannot be read:
/// there every value but 0 is a token (the graph computes `mask != 0`).
#[track_caller]
pub(crate) fn hf_mask_tokens(model: &str, mask: &Tensor) -> Tensor {
    if mask.dtype() == DType::Bool {
        return mask.clone();
    }
    if nn_core::trace::is_tracing() || mask.device() == nn_core::Device::Meta {
        return mask.ne(&Tensor::full_on(&[], 0.0, mask.dtype(), mask.device()));
    }
    let values = mask.to_device(nn_core::Device::Cpu).to_dtype(DType::F64).to_vec_f64();
    if let Some(v) = values.iter().find(|v| **v != 0.0 && **v != 1.0) {
        panic!(
            "{model}: attention_mask holds {v}; it must be 1 (attend) or 0 (padding), as Hugging Face's (an additive \
             mask of 0 and -inf or -10000 is the other convention: pass `mask.eq(0)` of it)"
        );
    }
    Tensor::from_vec_bool(values.iter().map(|v| *v == 1.0).collect(), mask.shape()).to_device(mask.device())
}

/// What a batch's rows add to the causal rule, made by the causal models from
/// [`CausalLmInput`]'s `attention_mask` and `position_ids` and passed to each layer.
#[derive(Clone, Debug, Default)]
pub struct RowAttention {
    /// `[N, 1, L, past + L]` bool, `true` = may attend: causal and not padding. `None`:
    /// the causal rule alone.
    pub keep: Option<Tensor>,
    /// The new tokens' positions, `N * L` row-major. `None`: `past..past + L` in every row.
    pub positions: Option<Vec<usize>>,
    /// Rotary `cos` and `sin` tables of these positions, made once per forward by a model
    /// whose layers all use one rotary embedding (Llama), in the dtype of the layers'
    /// input. `None`: each layer makes its own.
    pub rotary: Option<(Tensor, Tensor)>,
}

/// The mask and the rotary tables are slots (three: `keep`, `cos`, `sin`); the positions
/// are not tensors.
impl nn_core::module::IoTensors for RowAttention {
    fn absent_slots() -> usize {
        3
    }
    fn push_tensors(&self, out: &mut Vec<Option<Tensor>>) {
        self.keep.push_tensors(out);
        self.rotary.push_tensors(out);
    }
    fn take_tensors(&self, slots: &mut nn_core::module::IoSlots) -> Self {
        RowAttention {
            keep: slots.take(&self.keep),
            positions: self.positions.clone(),
            rotary: slots.take(&self.rotary),
        }
    }
}

impl RowAttention {
    /// Checks `input`'s mask and position ids against `[N, L]` ids after `past` cached
    /// positions (positions below `limit`, the config's `field`), and builds them.
    #[track_caller]
    pub(crate) fn of(model: &str, input: &CausalLmInput, past: usize, limit: usize, field: &str) -> RowAttention {
        let ids = &input.input_ids;
        let (n, l) = (ids.shape()[0], ids.shape()[1]);
        let s = past + l;
        let keep = input.attention_mask.as_ref().map(|mask| {
            if mask.shape() != [n, s] {
                panic!(
                    "{model}: attention_mask {:?} must be [batch, cached + new positions] = [{n}, {s}] ({past} cached, \
                     {l} new)",
                    mask.shape()
                );
            }
            // Causal (new query `i` sits at `past + i`) and a token, built on the mask's
            // device: `[L, S]` and `[N, S]` broadcast to `[N, 1, L, S]`.
            let device = mask.device();
            let causal: Vec<f32> =
                crate::kv_cache::causal_band(l, past).into_iter().map(|k| f32::from(u8::from(k))).collect();
            let causal = Tensor::from_vec(causal, &[1, 1, l, s]).to_device(device);
            let token = hf_mask_tokens(model, mask).to_dtype(DType::F32).reshape(&[n, 1, 1, s]);
            (&causal * &token).ne(&Tensor::full_on(&[], 0.0, DType::F32, device))
        });
        let positions = input.position_ids.as_ref().map(|p| {
            let rows = match p.shape() {
                &[r, pl] if pl == l && (r == n || r == 1) && p.dtype() == DType::I64 => r,
                _ => panic!(
                    "{model}: position_ids must be i64 [{n}, {l}] or [1, {l}] for input_ids {:?}, got {} {:?}",
                    ids.shape(),
                    p.dtype(),
                    p.shape()
                ),
            };
            let values = p.to_device(nn_core::Device::Cpu).to_vec_i64();
            if let Some(v) = values.iter().find(|&&v| !(0..limit as i64).contains(&v)) {
                panic!("{model}: position_ids holds {v}, outside the model's {limit} positions (`{field}`)");
            }
            (0..n).flat_map(|r| values[(r % rows) * l..(r % rows + 1) * l].iter().map(|&v| v as usize)).collect()
        });
        RowAttention { keep, positions, rotary: None }
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
