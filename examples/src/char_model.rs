//! The character-level Transformer of `char_transformer` and `lora`, its corpus (Jane
//! Austen's *Pride and Prejudice*, shipped in `data/`) and its batches.

use nn_core::functional::cross_entropy;
use nn_core::random::with_rng;
use nn_core::{no_grad, Compute, DType, Forward, Module, ModuleBase, Tensor};
use nn_layers::{
    Activation, Embedding, EncoderInput, LayerNorm, Linear, TransformerEncoder, TransformerEncoderLayer,
    TransformerEncoderLayerConfig,
};
use rand::Rng;

use crate::repo_data_dir;

/// Context length.
pub const BLOCK: usize = 64;
/// Windows per batch.
pub const BATCH: usize = 32;

/// Two pre-norm encoder layers with a causal mask, 4 heads, `d_model` 64.
#[derive(Module)]
pub struct CharTransformer {
    /// Token embedding.
    #[module]
    pub tok: Embedding,
    /// Learned position embedding.
    #[module]
    pub pos: Embedding,
    /// The encoder layers (`encoder.layers.0.self_attn.out_proj`, ...).
    #[module]
    pub encoder: TransformerEncoder,
    /// Final norm.
    #[module]
    pub norm: LayerNorm,
    /// Next-character logits.
    #[module]
    pub head: Linear,
    #[base]
    base: ModuleBase,
}

impl CharTransformer {
    /// A model over `vocab` characters.
    pub fn new(vocab: usize) -> Self {
        let d = 64;
        let cfg = TransformerEncoderLayerConfig {
            dim_feedforward: 256,
            dropout: 0.1,
            activation: Activation::Gelu,
            batch_first: true,
            norm_first: true,
            ..Default::default()
        };
        CharTransformer {
            tok: Embedding::new(vocab, d),
            pos: Embedding::new(BLOCK, d),
            encoder: TransformerEncoder::new(2, || TransformerEncoderLayer::with_config(d, 4, cfg), None),
            norm: LayerNorm::new(d),
            head: Linear::new(d, vocab),
            base: ModuleBase::new(),
        }
    }
}

impl Compute for CharTransformer {
    type Input = Tensor;
    type Output = Tensor;
    /// `[B, T]` character ids -> `[B, T, vocab]` next-character logits.
    fn compute(&self, idx: &Tensor) -> Tensor {
        let t = idx.shape()[1];
        let pos = Tensor::from_vec_i64((0..t as i64).collect(), &[t]).to_device(idx.device());
        let x = self.tok.forward(idx) + self.pos.forward(&pos);
        // true = may not attend (MultiheadAttention's convention): the future.
        let causal =
            Tensor::from_vec_bool((0..t * t).map(|k| k % t > k / t).collect(), &[t, t]).to_device(idx.device());
        let h = self.encoder.forward(&EncoderInput::new(&x).src_mask(&causal));
        self.head.forward(&self.norm.forward(&h))
    }
}

/// The text as character ids, split 90% / 10% into training and held-out parts.
pub struct Corpus {
    /// The sorted distinct characters.
    pub vocab: Vec<char>,
    /// Every character as its index in `vocab`.
    pub ids: Vec<i64>,
    /// Where the held-out part starts.
    pub cut: usize,
}

impl Corpus {
    /// Reads `data/pride_and_prejudice.txt`.
    ///
    /// # Errors
    /// When the file cannot be read.
    pub fn load() -> std::io::Result<Corpus> {
        let text = std::fs::read_to_string(repo_data_dir().join("pride_and_prejudice.txt"))?;
        let mut vocab: Vec<char> = text.chars().collect();
        vocab.sort_unstable();
        vocab.dedup();
        let ids: Vec<i64> = text.chars().map(|c| vocab.binary_search(&c).map_or(0, |i| i as i64)).collect();
        let cut = ids.len() * 9 / 10;
        Ok(Corpus { vocab, ids, cut })
    }

    /// The id of `c` (0 for a character outside the vocabulary).
    pub fn id(&self, c: char) -> i64 {
        self.vocab.binary_search(&c).map_or(0, |i| i as i64)
    }

    /// The training part.
    pub fn train(&self) -> &[i64] {
        &self.ids[..self.cut]
    }

    /// The held-out part.
    pub fn held(&self) -> &[i64] {
        &self.ids[self.cut..]
    }
}

/// The fewest ids [`batch`] and [`evaluate`] can cut a window from: a context of `BLOCK`
/// and the next one.
pub const MIN_TEXT: usize = BLOCK + 1;

/// `BATCH` random windows of `BLOCK + 1` ids: inputs and next-character targets. Every
/// start whose window fits is drawn, `0..=ids.len() - BLOCK - 1`.
///
/// # Panics
/// When `ids` is shorter than one window ([`MIN_TEXT`]); the examples refuse too small a
/// `--limit` before.
pub fn batch(ids: &[i64]) -> (Tensor, Tensor) {
    assert!(ids.len() >= MIN_TEXT, "batch: {} ids are fewer than one window of {MIN_TEXT}", ids.len());
    let starts: Vec<usize> = with_rng(|r| (0..BATCH).map(|_| r.random_range(0..=ids.len() - MIN_TEXT)).collect());
    windows(ids, &starts)
}

/// The windows of `BLOCK + 1` ids at `starts`: inputs and next-character targets,
/// `[starts.len(), BLOCK]` each.
fn windows(ids: &[i64], starts: &[usize]) -> (Tensor, Tensor) {
    let x: Vec<i64> = starts.iter().flat_map(|&s| ids[s..s + BLOCK].iter().copied()).collect();
    let y: Vec<i64> = starts.iter().flat_map(|&s| ids[s + 1..s + BLOCK + 1].iter().copied()).collect();
    (Tensor::from_vec_i64(x, &[starts.len(), BLOCK]), Tensor::from_vec_i64(y, &[starts.len(), BLOCK]))
}

/// The loss of one batch (logits flattened to `[BATCH * BLOCK, vocab]`).
pub fn batch_loss(model: &CharTransformer, x: &Tensor, y: &Tensor, vocab: usize) -> Tensor {
    cross_entropy(&model.forward(x).reshape(&[BATCH * BLOCK, vocab]), &y.reshape(&[BATCH * BLOCK]))
}

/// The starts of `n` windows spread evenly over `len` ids: the first at 0, the last at the
/// last start that fits (`len - BLOCK - 1`).
fn strided_starts(len: usize, n: usize) -> Vec<usize> {
    let last = (len - MIN_TEXT) as u128;
    let steps = n.saturating_sub(1).max(1) as u128;
    (0..n).map(|k| (k as u128 * last / steps) as usize).collect()
}

/// `(accuracy, mean loss)` of next-character prediction over `batches` batches of
/// held-out windows, without a graph. The windows are fixed, `batches * BATCH` of them
/// spread evenly over `held`, and the global generator is neither read nor advanced: two
/// calls (a model before and after fine-tuning) score the same characters.
///
/// # Panics
/// When `held` is shorter than one window ([`MIN_TEXT`]) or `batches` is 0.
pub fn evaluate(model: &CharTransformer, held: &[i64], vocab: usize, batches: usize) -> (f64, f64) {
    assert!(held.len() >= MIN_TEXT, "evaluate: {} held-out ids are fewer than one window of {MIN_TEXT}", held.len());
    assert!(batches > 0, "evaluate: no batches to score");
    let (mut correct, mut total, mut loss) = (0.0, 0.0, 0.0);
    let device = model.parameters().first().map_or(nn_core::Device::Cpu, |p| p.device());
    let starts = strided_starts(held.len(), batches * BATCH);
    no_grad(|| {
        for chunk in starts.chunks(BATCH) {
            let (x, y) = windows(held, chunk);
            let (x, y) = (x.to_device(device), y.to_device(device));
            let rows = chunk.len() * BLOCK;
            let logits = model.forward(&x).reshape(&[rows, vocab]);
            let y = y.reshape(&[rows]);
            loss += cross_entropy(&logits, &y).item();
            correct += logits.argmax(1, false).eq(&y).to_dtype(DType::F32).sum().item();
            total += rows as f64;
        }
    });
    (correct / total, loss / batches as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_reaches_the_last_window_that_fits() {
        // Exactly one window: the only start is 0 (an empty range of starts would panic).
        let ids: Vec<i64> = (0..MIN_TEXT as i64).collect();
        let (x, y) = batch(&ids);
        assert_eq!(x.to_vec_i64()[..BLOCK], ids[..BLOCK]);
        assert_eq!(y.to_vec_i64()[..BLOCK], ids[1..]);
        // Two windows: both starts are drawn.
        let ids: Vec<i64> = (0..MIN_TEXT as i64 + 1).collect();
        nn_core::manual_seed(0);
        let firsts: std::collections::BTreeSet<i64> =
            (0..8).flat_map(|_| batch(&ids).0.to_vec_i64().into_iter().step_by(BLOCK)).collect();
        assert_eq!(firsts.into_iter().collect::<Vec<_>>(), [0, 1]);
    }

    #[test]
    fn evaluation_windows_are_fixed_and_span_the_text() {
        let s = strided_starts(1000, 4);
        assert_eq!(s, [0, (1000 - MIN_TEXT) / 3, 2 * (1000 - MIN_TEXT) / 3, 1000 - MIN_TEXT]);
        assert_eq!(strided_starts(MIN_TEXT, 3), [0, 0, 0]);
    }

    #[test]
    fn evaluate_does_not_depend_on_the_generator() {
        let ids: Vec<i64> = (0..500).map(|i| (i * 7 % 5) as i64).collect();
        nn_core::manual_seed(1);
        let mut model = CharTransformer::new(5);
        model.eval();
        let a = evaluate(&model, &ids, 5, 1);
        // Another state of the global generator (as after training between two calls):
        // the same windows, the same score.
        nn_core::manual_seed(99);
        assert_eq!(evaluate(&model, &ids, 5, 1), a);
    }
}
