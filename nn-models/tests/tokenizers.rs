//! `nn_models::tokenizer::Tokenizer` against transformers' fast tokenizers (fixtures by
//! `tests/fixtures/tokenizer_fixtures.py`: GPT-2's byte-level BPE, a Llama SentencePiece-style
//! BPE with byte fallback and a BERT WordPiece, trained on the repo's text): the same ids
//! and the same decoded text for every sample, streaming that prints whole characters,
//! and the bad inputs named.

use std::path::{Path, PathBuf};

use nn_models::tokenizer::Tokenizer;
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizers").join(name)
}

fn expected() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("expected.json")).unwrap()).unwrap()
}

#[test]
fn encode_and_decode_match_transformers_fast_tokenizers() {
    let expected = expected();
    for name in ["gpt2", "llama", "bert"] {
        let tok = Tokenizer::from_dir(fixture(name)).unwrap();
        let want = &expected[name];
        assert_eq!(tok.vocab_size() as u64, want["vocab_size"].as_u64().unwrap(), "{name}");
        for sample in want["samples"].as_array().unwrap() {
            let text = sample["text"].as_str().unwrap();
            let ids: Vec<i64> = sample["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
            assert_eq!(tok.encode(text), ids, "{name}: {text:?}");
            assert_eq!(tok.decode(&ids), sample["decoded"].as_str().unwrap(), "{name}: {text:?}");
        }
    }
    // The special tokens the post-processors add, and the eos from tokenizer_config.json.
    let llama = Tokenizer::from_dir(fixture("llama")).unwrap();
    assert_eq!(llama.encode("a")[0], llama.token_to_id("<s>").unwrap());
    assert_eq!(llama.eos_token_id(), llama.token_to_id("</s>"));
    let bert = Tokenizer::from_dir(fixture("bert")).unwrap();
    let ids = bert.encode("Elizabeth");
    assert_eq!(
        (ids[0], *ids.last().unwrap()),
        (bert.token_to_id("[CLS]").unwrap(), bert.token_to_id("[SEP]").unwrap())
    );
}

#[test]
fn streaming_prints_whole_characters_and_the_whole_text() {
    let expected = expected();
    for name in ["gpt2", "llama"] {
        let tok = Tokenizer::from_dir(fixture(name)).unwrap();
        for sample in expected[name]["samples"].as_array().unwrap() {
            let ids: Vec<i64> = sample["ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
            let mut stream = tok.decode_stream();
            let mut text = String::new();
            for &id in &ids {
                if let Some(piece) = stream.step(id).unwrap() {
                    assert!(!piece.contains('\u{fffd}'), "{name}: a broken character streamed: {piece:?}");
                    text += &piece;
                }
            }
            assert_eq!(text, tok.decode(&ids), "{name}");
        }
    }
}

#[test]
fn bad_tokenizers_and_ids_are_errors_naming_them() {
    let tok = Tokenizer::from_dir(fixture("gpt2")).unwrap();
    let e = tok.try_decode(&[3, 400]).unwrap_err().to_string();
    assert_eq!(e, "decode: id 1 is 400, outside the tokenizer's vocabulary of 400 ids");
    assert!(tok.try_decode(&[-1]).is_err());
    assert!(tok.decode_stream().step(9999).is_err());
    let e = tok.check_vocab(60).unwrap_err().to_string();
    assert!(e.contains("the tokenizer has 400 ids and the model's embedding 60 rows"), "{e}");
    tok.check_vocab(512).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let e = Tokenizer::from_dir(dir.path()).unwrap_err().to_string();
    assert!(e.contains("tokenizer.json"), "{e}");
    std::fs::write(dir.path().join("tokenizer.json"), "{\"model\": 3").unwrap();
    let e = Tokenizer::from_dir(dir.path()).unwrap_err().to_string();
    assert!(e.starts_with(&format!("`{}`", dir.path().join("tokenizer.json").display())), "{e}");
    std::fs::copy(fixture("gpt2/tokenizer.json"), dir.path().join("tokenizer.json")).unwrap();
    std::fs::write(dir.path().join("tokenizer_config.json"), "{\"eos_token\": \"</nope>\"}").unwrap();
    let e = Tokenizer::from_dir(dir.path()).unwrap_err().to_string();
    assert!(e.contains("`eos_token` is \"</nope>\", which is not in the vocabulary"), "{e}");
    std::fs::write(dir.path().join("tokenizer_config.json"), "{\"eos_token\": \"a\", \"eos_token\": \"b\"}").unwrap();
    let e = Tokenizer::from_dir(dir.path()).unwrap_err().to_string();
    assert!(e.contains("eos_token"), "a key twice is named: {e}");
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let e = Tokenizer::from_file(&fifo).unwrap_err().to_string();
    assert!(e.contains("FIFO"), "{e}");
}

#[test]
fn generate_streaming_hands_over_each_new_token_as_generate_returns_them() {
    use nn_models::generation::{generate, generate_streaming, GenerationConfig};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gpt2");
    let model = nn_models::gpt2::Gpt2LMHeadModel::from_pretrained(&dir).unwrap();
    let config = GenerationConfig { max_new_tokens: 6, ..Default::default() };
    let mut seen = Vec::new();
    let all = generate_streaming(&model, &[3, 1, 4], &config, |id| {
        seen.push(id);
        Ok(())
    })
    .unwrap();
    assert_eq!(all, generate(&model, &[3, 1, 4], &config).unwrap());
    assert_eq!(seen, all[3..]);
    // An error from the callback stops the generation and is returned.
    let e = generate_streaming(&model, &[3, 1, 4], &config, |_| Err(nn_models::Error::Input("stop".into())));
    assert_eq!(e.unwrap_err().to_string(), "stop");
}
