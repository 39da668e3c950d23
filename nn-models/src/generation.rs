//! Generation for causal language models: greedy decoding and seeded sampling
//! (temperature, top-k, top-p), with or without the key/value cache.

use nn_core::{no_grad, DType, Device, Tensor};
use rand::Rng;

use crate::error::{Error, Result};
use crate::kv_cache::KvCache;

/// A causal language model [`generate`] can drive.
pub trait CausalLm {
    /// Logits `[N, L, vocab]` for `input_ids` `[N, L]` (i64), the positions following those
    /// in `cache` (which the call extends), or the whole sequence when `cache` is `None`.
    fn logits(&self, input_ids: &Tensor, cache: Option<&KvCache>) -> Tensor;
    /// An empty cache for this model.
    fn new_cache(&self) -> KvCache;
    /// The number of positions and the config field that sets it.
    fn max_positions(&self) -> (usize, &'static str);
    /// The number of token ids the model embeds: [`generate`] refuses a prompt id outside
    /// `0..vocab_size`.
    fn vocab_size(&self) -> usize;
    /// The device of the model's weights: [`generate`] puts each step's ids there.
    fn device(&self) -> Device;
    /// The tokens that end a sequence, from the model's config (`eos_token_id`, one id or a
    /// list): [`generate`] stops after any of them unless told otherwise, as transformers'
    /// `generate` does. None by default.
    fn eos_token_ids(&self) -> Vec<i64> {
        Vec::new()
    }
}

/// One token id or several, as a `config.json` gives `eos_token_id` (Llama 3 lists two).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(untagged)]
pub enum TokenIds {
    /// One id.
    One(i64),
    /// Several.
    Many(Vec<i64>),
}

impl TokenIds {
    /// The ids, in order.
    ///
    /// ```
    /// use nn_models::generation::TokenIds;
    /// assert_eq!(TokenIds::One(2).ids(), [2]);
    /// assert_eq!(serde_json::from_str::<TokenIds>("[128001, 128009]").unwrap().ids(), [128001, 128009]);
    /// ```
    pub fn ids(&self) -> Vec<i64> {
        match self {
            TokenIds::One(id) => vec![*id],
            TokenIds::Many(ids) => ids.clone(),
        }
    }
}

/// How the next token is chosen.
#[derive(Clone, Debug, PartialEq)]
pub enum Sampling {
    /// The most likely token (the first one on ties, as `torch.argmax`).
    Greedy,
    /// A draw from the distribution after transformers' warpers, in their order:
    /// temperature, then top-k, then top-p. Draws come from nn's global generator
    /// ([`nn_core::manual_seed`] makes them reproducible).
    Sample {
        /// Logits are divided by it (> 0).
        temperature: f64,
        /// Keep only the `k` most likely tokens.
        top_k: Option<usize>,
        /// Keep the smallest set of most likely tokens whose probability reaches `p`.
        top_p: Option<f64>,
    },
}

/// Options of [`generate`].
#[derive(Clone, Debug, PartialEq)]
pub struct GenerationConfig {
    /// How many tokens to add at most.
    pub max_new_tokens: usize,
    /// How each is chosen.
    pub sampling: Sampling,
    /// Stop after this token (it is included), as transformers does. `None`: after any of
    /// the model's own ([`CausalLm::eos_token_ids`], its config's `eos_token_id`), as
    /// transformers' `generate` takes them from the model's config. (A checkpoint's
    /// `generation_config.json` is not read: pass its values here.)
    pub eos_token_id: Option<i64>,
    /// Never stop early: run all `max_new_tokens`, whatever `eos_token_id` says.
    pub ignore_eos: bool,
    /// Keep the keys and values of earlier positions (default); without, every step runs
    /// the whole sequence again (the reference the cache is tested and measured against).
    pub use_cache: bool,
}

impl Default for GenerationConfig {
    fn default() -> Self {
        GenerationConfig {
            max_new_tokens: 20,
            sampling: Sampling::Greedy,
            eos_token_id: None,
            ignore_eos: false,
            use_cache: true,
        }
    }
}

/// Continues `prompt` (token ids) by up to `config.max_new_tokens` tokens; returns the
/// prompt followed by the new tokens.
///
/// # Errors
/// [`Error::TooLong`] when the prompt, or the prompt with `max_new_tokens`, exceeds the
/// model's positions; [`Error::Input`] for an empty prompt, a prompt id outside the
/// vocabulary, a sampling option out of range, or NaN logits (a step's logits hold NaN:
/// greedy decoding would pick the NaN's token, as `torch.argmax` does, and go on as if
/// it were the most likely).
pub fn generate(model: &impl CausalLm, prompt: &[i64], config: &GenerationConfig) -> Result<Vec<i64>> {
    generate_streaming(model, prompt, config, |_| Ok(()))
}

/// [`generate`], calling `on_token` with each new token as it is chosen (transformers'
/// `streamer=`; with [`Tokenizer::decode_stream`](crate::tokenizer::Tokenizer::decode_stream)
/// it prints text as it decodes). An error from `on_token` stops the generation and is
/// returned.
///
/// # Errors
/// As [`generate`], and `on_token`'s.
pub fn generate_streaming(
    model: &impl CausalLm,
    prompt: &[i64],
    config: &GenerationConfig,
    mut on_token: impl FnMut(i64) -> Result<()>,
) -> Result<Vec<i64>> {
    let (limit, field) = model.max_positions();
    if prompt.is_empty() {
        return Err(Error::Input("generate: the prompt is empty (it needs at least one token)".into()));
    }
    let vocab = model.vocab_size();
    if let Some((i, id)) = prompt.iter().enumerate().find(|(_, id)| !(0..vocab as i64).contains(id)) {
        return Err(Error::Input(format!(
            "generate: prompt token {i} is {id}, outside the model's vocabulary of {vocab} ids"
        )));
    }
    if prompt.len() > limit {
        return Err(Error::TooLong { what: "the prompt", len: prompt.len(), limit, field });
    }
    // The last new token is never fed back, so the model sees at most
    // `prompt + max_new_tokens - 1` positions (transformers' limit too).
    let total = prompt.len().saturating_add(config.max_new_tokens);
    if total - 1 > limit {
        return Err(Error::TooLong { what: "the prompt plus max_new_tokens - 1", len: total - 1, limit, field });
    }
    if let Sampling::Sample { temperature, top_k, top_p } = config.sampling {
        if !(temperature > 0.0 && temperature.is_finite()) {
            return Err(Error::Input(format!("generate: temperature must be positive and finite, got {temperature}")));
        }
        if top_k == Some(0) {
            return Err(Error::Input("generate: top_k must be at least 1".into()));
        }
        if let Some(p) = top_p {
            if !(p > 0.0 && p <= 1.0) {
                return Err(Error::Input(format!("generate: top_p must be in (0, 1], got {p}")));
            }
        }
    }
    let eos = match (config.ignore_eos, config.eos_token_id) {
        (true, _) => Vec::new(),
        (false, Some(id)) => vec![id],
        (false, None) => model.eos_token_ids(),
    };
    no_grad(|| {
        let mut tokens = prompt.to_vec();
        let cache = config.use_cache.then(|| model.new_cache());
        let mut next_input = tokens.clone();
        for _ in 0..config.max_new_tokens {
            let ids = Tensor::from_vec_i64(next_input.clone(), &[1, next_input.len()]).to_device(model.device());
            let logits = model.logits(&ids, cache.as_ref());
            let v = logits.shape()[2];
            let last = logits.narrow(1, logits.shape()[1] - 1, 1).to_dtype(DType::F64).to_vec_f64();
            debug_assert_eq!(last.len(), v);
            let next = choose(&last, &config.sampling)?;
            tokens.push(next);
            on_token(next)?;
            next_input = if cache.is_some() { vec![next] } else { tokens.clone() };
            if eos.contains(&next) {
                break;
            }
        }
        Ok(tokens)
    })
}

/// The next token from one row of logits.
///
/// # Errors
/// [`Error::Input`] for NaN logits (greedy or not: the NaN's token is no choice), or
/// sampling scores with no finite maximum (a temperature so small that the scaled logits
/// overflow): a draw from them would be a default token, not a sample (PyTorch's
/// `multinomial` refuses such probabilities too).
fn choose(logits: &[f64], sampling: &Sampling) -> Result<i64> {
    if let Some(i) = logits.iter().position(|l| l.is_nan()) {
        return Err(Error::Input(format!(
            "generate: the logits hold NaN (first at token {i}): the model's output overflowed or its weights hold NaN"
        )));
    }
    match sampling {
        Sampling::Greedy => Ok(argmax(logits) as i64),
        Sampling::Sample { temperature, top_k, top_p } => {
            let mut scores: Vec<f64> = logits.iter().map(|l| l / temperature).collect();
            if let Some(k) = top_k {
                keep_top_k(&mut scores, *k);
            }
            if let Some(p) = top_p {
                keep_top_p(&mut scores, *p);
            }
            let probs = softmax(&scores);
            if probs.iter().any(|p| !p.is_finite()) {
                return Err(Error::Input(format!(
                    "generate: the sampling probabilities are not finite (a temperature of {temperature} makes the \
                     scaled logits overflow)"
                )));
            }
            let u: f64 = nn_core::random::with_rng(|r| r.random());
            let mut acc = 0.0;
            for (i, p) in probs.iter().enumerate() {
                acc += p;
                if u < acc {
                    return Ok(i as i64);
                }
            }
            // Rounding left `acc` just under 1: the last token with any probability.
            Ok(probs.iter().rposition(|&p| p > 0.0).expect("finite probabilities sum to 1") as i64)
        }
    }
}

/// The index of the largest value, the first on ties; NaN counts as largest (as
/// `torch.argmax`).
pub(crate) fn argmax(v: &[f64]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x.is_nan() {
            return i;
        }
        if x > v[best] {
            best = i;
        }
    }
    best
}

fn softmax(scores: &[f64]) -> Vec<f64> {
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|x| x / sum).collect()
}

/// transformers' `TopKLogitsWarper`: scores below the k-th largest become `-inf`.
fn keep_top_k(scores: &mut [f64], k: usize) {
    if k >= scores.len() {
        return;
    }
    let mut sorted = scores.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let kth = sorted[k - 1];
    scores.iter_mut().filter(|s| **s < kth).for_each(|s| *s = f64::NEG_INFINITY);
}

/// transformers' `TopPLogitsWarper`: in ascending order of probability, tokens whose
/// cumulative probability stays at or below `1 - p` are removed; the most likely token
/// always stays.
fn keep_top_p(scores: &mut [f64], p: f64) {
    let probs = softmax(scores);
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let mut cum = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        cum += probs[i];
        if cum <= 1.0 - p && rank + 1 < order.len() {
            scores[i] = f64::NEG_INFINITY;
        } else {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_and_top_p_keep_what_transformers_keeps() {
        let mut s = vec![1.0, 3.0, 2.0, 3.0, 0.5];
        keep_top_k(&mut s, 2);
        assert_eq!(s, [f64::NEG_INFINITY, 3.0, f64::NEG_INFINITY, 3.0, f64::NEG_INFINITY]);
        // Probabilities 0.5, 0.3, 0.15, 0.05 (as logs): top-p 0.75 keeps the first two
        // (cumulative from the bottom: 0.05, 0.2 <= 0.25 removed; 0.5 > 0.25 kept).
        let mut s: Vec<f64> = [0.5f64, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
        keep_top_p(&mut s, 0.75);
        assert!(s[0].is_finite() && s[1].is_finite() && s[2] == f64::NEG_INFINITY && s[3] == f64::NEG_INFINITY);
        // A tiny p keeps the most likely token only.
        let mut s: Vec<f64> = [0.5f64, 0.3, 0.2].iter().map(|p| p.ln()).collect();
        keep_top_p(&mut s, 1e-9);
        assert_eq!(s.iter().filter(|x| x.is_finite()).count(), 1);
        assert!(s[0].is_finite());
    }

    #[test]
    fn argmax_takes_the_first_maximum() {
        assert_eq!(argmax(&[1.0, 4.0, 4.0, 2.0]), 1);
        assert_eq!(argmax(&[1.0, f64::NAN, 4.0]), 1);
    }

    #[test]
    fn sampling_follows_the_distribution_and_the_seed() {
        let logits: Vec<f64> = [0.6f64, 0.3, 0.1].iter().map(|p| p.ln()).collect();
        let s = Sampling::Sample { temperature: 1.0, top_k: None, top_p: None };
        nn_core::manual_seed(3);
        let draws: Vec<i64> = (0..6000).map(|_| choose(&logits, &s).unwrap()).collect();
        let count = |t| draws.iter().filter(|&&d| d == t).count() as f64 / 6000.0;
        for (t, p) in [(0, 0.6), (1, 0.3), (2, 0.1)] {
            assert!((count(t) - p).abs() < 0.03, "token {t}: {} vs {p}", count(t));
        }
        nn_core::manual_seed(3);
        let again: Vec<i64> = (0..6000).map(|_| choose(&logits, &s).unwrap()).collect();
        assert_eq!(draws, again);
        // top_k 1 is greedy.
        let k1 = Sampling::Sample { temperature: 0.7, top_k: Some(1), top_p: None };
        assert!((0..50).all(|_| choose(&logits, &k1).unwrap() == 0));
        // NaN logits, or a temperature that overflows the scores: an error, not token 0.
        let nan = [0.1, f64::NAN, 0.3];
        let s1 = Sampling::Sample { temperature: 1.0, top_k: None, top_p: None };
        for sampling in [s1, Sampling::Greedy] {
            let err = choose(&nan, &sampling).unwrap_err().to_string();
            assert!(err.contains("the logits hold NaN (first at token 1)"), "{err}");
        }
        let tiny = Sampling::Sample { temperature: 1e-310, top_k: None, top_p: None };
        let err = choose(&[1.0, -1.0, 0.5], &tiny).unwrap_err().to_string();
        assert!(err.contains("temperature of") && err.contains("overflow"), "{err}");
    }
}
