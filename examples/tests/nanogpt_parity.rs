//! The nanoGPT port (`nn_examples::nanogpt`) against PyTorch: the same initial weights,
//! batches of *Pride and Prejudice* and five AdamW steps with clipping give PyTorch 2.15's
//! losses and final weights (fixture from `tests/fixtures/pytorch/nanogpt.py`, float64).

use nn_core::optim::{clip_grad_norm_, AdamW, AdamWConfig, Optimizer};
use nn_core::{DType, Module, StateDict, Tensor};
use nn_examples::char_model::Corpus;
use nn_examples::nanogpt::{Gpt, GptConfig};

const BLOCK: usize = 16;
const BATCH: usize = 4;

fn fixture() -> StateDict {
    StateDict::load(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/nanogpt.safetensors")).unwrap()
}

/// The entries under `prefix`, without it.
fn under(sd: &StateDict, prefix: &str) -> StateDict {
    sd.iter().filter_map(|(k, v)| Some((k.strip_prefix(prefix)?.to_string(), v.clone()))).collect()
}

fn worst(a: &Tensor, b: &Tensor) -> f64 {
    let (a, b) = (a.to_vec_of::<f64>(), b.to_vec_of::<f64>());
    assert_eq!(a.len(), b.len());
    a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

#[test]
fn five_training_steps_match_pytorch() {
    let fx = fixture();
    let corpus = Corpus::load().unwrap();
    let config = GptConfig {
        block_size: BLOCK,
        vocab_size: corpus.vocab.len(),
        n_layer: 2,
        n_head: 2,
        n_embd: 32,
        dropout: 0.0,
        bias: false,
    };
    let mut model = Gpt::new(config);
    model.to_dtype(DType::F64);
    model.load_state_dict(&under(&fx, "init."), true).unwrap();
    // The tie holds through the load: one parameter, as nanoGPT's.
    assert_eq!(model.parameters().len(), 2 + 2 * 6 + 1);
    let mut opt =
        AdamW::new(model.param_groups(0.1), AdamWConfig { lr: 1e-3, betas: (0.9, 0.95), ..Default::default() });
    let losses = fx.get("loss").unwrap().to_vec_of::<f64>();
    let ids = &corpus.ids[..20000];
    for (step, want) in losses.iter().enumerate() {
        // The batches are the fixture's starts over the same character ids.
        let starts: Vec<usize> = (0..BATCH).map(|b| (step * 997 + b * 3571) % (ids.len() - BLOCK - 1)).collect();
        let x: Vec<i64> = starts.iter().flat_map(|&s| ids[s..s + BLOCK].to_vec()).collect();
        let y: Vec<i64> = starts.iter().flat_map(|&s| ids[s + 1..s + BLOCK + 1].to_vec()).collect();
        let (x, y) = (Tensor::from_vec_i64(x, &[BATCH, BLOCK]), Tensor::from_vec_i64(y, &[BATCH, BLOCK]));
        assert_eq!(x.to_vec_of::<i64>(), fx.get(&format!("x.{step}")).unwrap().to_vec_of::<i64>());
        assert_eq!(y.to_vec_of::<i64>(), fx.get(&format!("y.{step}")).unwrap().to_vec_of::<i64>());
        let loss = model.loss(&x, &y);
        assert!((loss.item() - want).abs() < 1e-10, "step {step}: loss {} vs PyTorch's {want}", loss.item());
        opt.zero_grad();
        loss.backward();
        clip_grad_norm_(&model.parameters(), 1.0);
        opt.step();
    }
    let got = model.state_dict();
    for (k, want) in under(&fx, "final.").iter() {
        let w = worst(got.get(k).unwrap_or_else(|| panic!("no {k}")), want);
        assert!(w < 1e-10, "{k}: {w} from PyTorch's");
    }
}

#[test]
fn generation_crops_the_context_and_extends_it() {
    nn_core::manual_seed(0);
    let config =
        GptConfig { block_size: 8, vocab_size: 11, n_layer: 1, n_head: 2, n_embd: 16, dropout: 0.1, bias: true };
    let mut model = Gpt::new(config);
    model.eval();
    let out = model.generate(&Tensor::from_vec_i64(vec![1, 2, 3], &[1, 3]), 10, 0.8, 5);
    assert_eq!(out.shape(), &[1, 13]);
    assert!(out.to_vec_of::<i64>().iter().all(|&t| (0..11).contains(&t)));
}
