//! Every checkpoint layout transformers writes (fixtures by `tests/fixtures/layouts.py`:
//! the `llama/` and `gpt2/` models saved again sharded and as `pytorch_model.bin`) loads
//! into the same model, and every index that disagrees with its shards is an error naming
//! the file and the entry.

use std::path::{Path, PathBuf};

use nn_core::prelude::*;
use nn_core::StateDict;
use nn_models::gpt2::Gpt2LMHeadModel;
use nn_models::llama::LlamaForCausalLM;
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn logits_match(got: &Tensor, io_dir: &str, what: &str) {
    let io = StateDict::load(fixture(io_dir).join("io.safetensors")).unwrap();
    let want = io.get("logits").unwrap();
    assert_eq!(got.shape(), want.shape(), "{what}");
    let worst =
        got.to_vec().iter().zip(want.to_vec()).map(|(g, e)| (g - e).abs() / (1.0 + e.abs())).fold(0.0, f32::max);
    assert!(worst <= 1e-5, "{what}: worst error {worst:e}");
}

fn llama_ids() -> Tensor {
    StateDict::load(fixture("llama").join("io.safetensors")).unwrap().get("input_ids").unwrap().clone()
}

#[test]
fn sharded_and_pickled_llama_checkpoints_load_as_the_single_file() {
    for layout in ["llama-sharded", "llama-bin", "llama-bin-sharded"] {
        let model = LlamaForCausalLM::from_pretrained(fixture("layouts").join(layout)).unwrap();
        logits_match(&model.forward(&llama_ids()), "llama", layout);
    }
    let located = nn_models::weights::locate(&fixture("layouts/llama-sharded")).unwrap();
    assert!(located.ends_with("model.safetensors.index.json"));
    let sd = nn_models::weights::read(&located).unwrap();
    let single = StateDict::load(fixture("llama/model.safetensors")).unwrap();
    assert_eq!(sd.len(), single.len(), "every key of every shard, once");
}

#[test]
fn a_pickled_gpt2_keeps_its_tied_head_as_one_parameter() {
    let dir = fixture("layouts/gpt2-bin");
    let file = StateDict::load_pytorch(dir.join("pytorch_model.bin")).unwrap();
    assert!(file.get("lm_head.weight").unwrap().is_alias_of(file.get("transformer.wte.weight").unwrap()));
    let model = Gpt2LMHeadModel::from_pretrained(&dir).unwrap();
    assert_eq!(model.lm_head.weight.id(), model.transformer.wte.weight.id());
    let ids = StateDict::load(fixture("gpt2").join("io.safetensors")).unwrap().get("input_ids").unwrap().clone();
    logits_match(&model.forward(&ids), "gpt2", "gpt2-bin");
}

/// A copy of the sharded Llama directory, its index edited by `edit`.
fn sharded_copy(edit: impl FnOnce(&mut serde_json::Map<String, Value>, &Path)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(fixture("layouts/llama-sharded")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    let index_path = dir.path().join("model.safetensors.index.json");
    let mut index: Value = serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    edit(index["weight_map"].as_object_mut().unwrap(), dir.path());
    std::fs::write(&index_path, serde_json::to_string(&index).unwrap()).unwrap();
    dir
}

fn refused(dir: &Path) -> String {
    match LlamaForCausalLM::from_pretrained(dir) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

const SHARD1: &str = "model-00001-of-00003.safetensors";
const SHARD2: &str = "model-00002-of-00003.safetensors";

/// The first key the index maps to `shard`.
fn first_key(map: &serde_json::Map<String, Value>, shard: &str) -> String {
    map.iter().find(|(_, v)| v.as_str() == Some(shard)).unwrap().0.clone()
}

#[test]
fn shard_names_outside_the_directory_are_refused() {
    for name in ["../model-00001-of-00003.safetensors", "/etc/passwd", "sub/x.safetensors", ""] {
        let dir = sharded_copy(|map, _| {
            let k = first_key(map, SHARD1);
            map.insert(k, name.into());
        });
        let e = refused(dir.path());
        assert!(e.contains(&format!("shard `{name}`: not a plain file name in the checkpoint directory")), "{e}");
        assert!(e.contains("model.safetensors.index.json"), "names the index: {e}");
    }
    // A symbolic link out of the directory is refused; one to a file beside the index loads.
    let outside = tempfile::tempdir().unwrap();
    let dir = sharded_copy(|_, dir| {
        std::fs::rename(dir.join(SHARD1), outside.path().join("blob")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("blob"), dir.join(SHARD1)).unwrap();
    });
    let e = refused(dir.path());
    assert!(e.contains("a symbolic link to") && e.contains("outside the checkpoint directory"), "{e}");
    let dir = sharded_copy(|_, dir| {
        std::fs::rename(dir.join(SHARD1), dir.join("blob")).unwrap();
        std::os::unix::fs::symlink(dir.join("blob"), dir.join(SHARD1)).unwrap();
    });
    LlamaForCausalLM::from_pretrained(dir.path()).unwrap();
}

#[test]
fn an_index_that_disagrees_with_its_shards_names_the_shard_and_key() {
    // A shard missing.
    let dir = sharded_copy(|_, dir| std::fs::remove_file(dir.join(SHARD2)).unwrap());
    let e = refused(dir.path());
    assert!(e.contains(&format!("shard `{SHARD2}`: no such file beside the index")), "{e}");

    // A key mapped to the wrong shard: that shard lacks it, and the right one holds it unnamed.
    let mut moved = String::new();
    let dir = sharded_copy(|map, _| {
        moved = first_key(map, SHARD1);
        map.insert(moved.clone(), SHARD2.into());
    });
    let e = refused(dir.path());
    assert!(e.contains(&format!("shard `{SHARD1}` holds `{moved}`, which the index maps to `{SHARD2}`")), "{e}");

    // A key the shard holds that the index leaves out.
    let dir = sharded_copy(|map, _| {
        moved = first_key(map, SHARD2);
        map.remove(&moved);
    });
    let e = refused(dir.path());
    assert!(e.contains(&format!("holds `{moved}`, which the index maps nowhere")), "{e}");

    // A key the index maps to a shard that does not hold it.
    let dir = sharded_copy(|map, _| {
        map.insert("model.extra.weight".into(), SHARD2.into());
    });
    let e = refused(dir.path());
    assert!(e.contains(&format!("the index maps `model.extra.weight` to `{SHARD2}`, which does not hold it")), "{e}");

    // A stray shard of the same checkpoint, not named by the index.
    let dir = sharded_copy(|_, dir| {
        std::fs::copy(dir.join(SHARD1), dir.join("model-00004-of-00004.safetensors")).unwrap();
    });
    let e = refused(dir.path());
    assert!(e.contains("`model-00004-of-00004.safetensors` beside it is named like one of its shards"), "{e}");

    // A key twice, and an index that is not JSON.
    let dir = sharded_copy(|_, _| {});
    let index = dir.path().join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index).unwrap();
    let key = first_key(serde_json::from_str::<Value>(&text).unwrap()["weight_map"].as_object().unwrap(), SHARD1);
    let twice = text.replacen("\"weight_map\":{", &format!("\"weight_map\":{{\"{key}\":\"{SHARD1}\","), 1);
    std::fs::write(&index, twice).unwrap();
    let e = refused(dir.path());
    assert!(e.contains(&format!("the key `{key}` is mapped twice")), "{e}");
    std::fs::write(&index, "{\"weight_map\": [").unwrap();
    let e = refused(dir.path());
    assert!(e.contains("not a shard index"), "{e}");
}

#[test]
fn a_hostile_pickle_in_a_directory_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("llama/config.json"), dir.path().join("config.json")).unwrap();
    let evil = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/pytorch/pickle/eval.pt");
    std::fs::copy(evil, dir.path().join("pytorch_model.bin")).unwrap();
    let e = refused(dir.path());
    assert!(e.starts_with("cannot load `") && e.contains("pytorch_model.bin"), "{e}");
    assert!(e.contains("the global `__builtin__.eval` is not in the tensor-rebuild set"), "{e}");
}

#[test]
fn sharded_saves_load_back_and_a_later_save_removes_the_other_layout() {
    let model = Gpt2LMHeadModel::from_pretrained(fixture("gpt2")).unwrap();
    let ids = StateDict::load(fixture("gpt2").join("io.safetensors")).unwrap().get("input_ids").unwrap().clone();
    let dir = tempfile::tempdir().unwrap();
    let names = |d: &Path| {
        let mut v: Vec<String> =
            std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    };
    model.save_pretrained_with(dir.path(), &nn_models::SaveOptions { max_shard_size: Some(10_000) }).unwrap();
    let files = names(dir.path());
    assert_eq!(files.first().unwrap(), "config.json");
    assert_eq!(files.last().unwrap(), "model.safetensors.index.json");
    assert!(files.len() >= 4 && !files.contains(&"model.safetensors".to_string()), "{files:?}");
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("model.safetensors.index.json")).unwrap())
            .unwrap();
    let map = index["weight_map"].as_object().unwrap();
    assert!(map.contains_key("transformer.wte.weight") && !map.contains_key("lm_head.weight"), "the tied head once");
    assert_eq!(
        index["metadata"]["total_size"].as_u64().unwrap() as usize,
        model.parameters().iter().map(|p| p.numel() * 4).sum::<usize>()
            + model.buffers().iter().map(|b| b.numel() * b.dtype().size_in_bytes()).sum::<usize>()
    );
    let back = Gpt2LMHeadModel::from_pretrained(dir.path()).unwrap();
    logits_match(&back.forward(&ids), "gpt2", "sharded save");
    assert_eq!(back.lm_head.weight.id(), back.transformer.wte.weight.id());

    // Saved again in one file: the shards and the index go.
    model.save_pretrained(dir.path()).unwrap();
    assert_eq!(names(dir.path()), ["config.json", "model.safetensors"]);
    // And a stale index put back by hand makes the directory ambiguous, loudly.
    let sharded = tempfile::tempdir().unwrap();
    model.save_pretrained_with(sharded.path(), &nn_models::SaveOptions { max_shard_size: Some(10_000) }).unwrap();
    std::fs::copy(sharded.path().join("model.safetensors.index.json"), dir.path().join("model.safetensors.index.json"))
        .unwrap();
    let e = Gpt2LMHeadModel::from_pretrained(dir.path()).err().unwrap().to_string();
    assert!(e.contains("`model.safetensors` is beside it: which is the checkpoint is ambiguous"), "{e}");
}

#[test]
fn load_options_keep_or_convert_the_checkpoints_dtype() {
    use nn_core::DType;
    use nn_models::LoadOptions;
    // The Llama fixture saved in bf16, as a bf16 checkpoint is published.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("llama/config.json"), dir.path().join("config.json")).unwrap();
    let f32_file = StateDict::load(fixture("llama/model.safetensors")).unwrap();
    let bf16_file: StateDict = f32_file.iter().map(|(k, t)| (k.to_string(), t.to_dtype(DType::BF16))).collect();
    bf16_file.save(dir.path().join("model.safetensors")).unwrap();

    let kept = LlamaForCausalLM::from_pretrained_with(dir.path(), &LoadOptions::default()).unwrap();
    assert!(kept.parameters().iter().all(|p| p.dtype() == DType::BF16), "the checkpoint's dtype, never f32");
    let widened = LlamaForCausalLM::from_pretrained(dir.path()).unwrap();
    assert!(widened.parameters().iter().all(|p| p.dtype() == DType::F32), "from_pretrained: f32");
    let converted = LlamaForCausalLM::from_pretrained_with(
        fixture("llama"),
        &LoadOptions { dtype: Some(DType::BF16), ..Default::default() },
    )
    .unwrap();
    for ((name, a), (_, b)) in kept.named_parameters().iter().zip(converted.named_parameters()) {
        assert_eq!(a.to_vec(), b.to_vec(), "{name}: f32 rounded to bf16 once, either way");
    }
    // The bf16 model computes what the widened one does, within bf16's precision.
    let (ids, want) = (llama_ids(), widened.forward(&llama_ids()));
    let got = kept.forward(&ids);
    assert_eq!(got.dtype(), DType::BF16);
    let worst = got.to_vec().iter().zip(want.to_vec()).map(|(g, e)| (g - e).abs()).fold(0.0, f32::max);
    assert!(worst < 0.1, "bf16 against f32 logits: {worst}");
}

#[test]
fn an_index_that_is_a_fifo_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("model.safetensors.index.json");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let e = nn_models::weights::read(&fifo).unwrap_err().to_string();
    assert!(e.contains("is not a regular file (a FIFO)"), "{e}");
}
