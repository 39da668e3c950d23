//! Tests of state-dict customisation: hooks in PyTorch's order (against
//! `tests/fixtures/pytorch/state_hooks/order.json`, recorded from PyTorch 2.15), extra
//! state and versions through memory, files and checkpoints, and every refusal leaving the
//! module as it was.

use std::sync::{Arc, Mutex};

use super::*;
use crate::prelude::*;
use crate::{ExtraState, HookHandle, StateDict};

type Log = Arc<Mutex<Vec<String>>>;

#[derive(Module)]
#[module(version = 3)]
struct Leaf {
    #[param]
    weight: Parameter,
    #[base]
    base: ModuleBase,
}

impl Compute for Leaf {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        x * self.weight.tensor()
    }
}

#[derive(Module)]
#[module(extra_state)]
struct WithExtra {
    #[param]
    weight: Parameter,
    count: u64,
    #[base]
    base: ModuleBase,
}

impl Compute for WithExtra {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        x * self.weight.tensor()
    }
}

impl ExtraState for WithExtra {
    type State = u64;
    fn extra_state(&self) -> u64 {
        self.count
    }
    fn set_extra_state(&mut self, count: u64) {
        self.count = count;
    }
}

#[derive(Module)]
struct A {
    #[module]
    x: Leaf,
    #[base]
    base: ModuleBase,
}

impl Compute for A {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        self.x.forward(x)
    }
}

#[derive(Module)]
struct Root {
    #[module]
    a: A,
    #[module]
    b: WithExtra,
    #[base]
    base: ModuleBase,
}

impl Compute for Root {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        self.b.forward(&self.a.forward(x))
    }
}

fn root() -> Root {
    Root {
        a: A {
            x: Leaf { weight: Parameter::new(Tensor::zeros(&[2])), base: ModuleBase::new() },
            base: ModuleBase::new(),
        },
        b: WithExtra { weight: Parameter::new(Tensor::zeros(&[1])), count: 5, base: ModuleBase::new() },
        base: ModuleBase::new(),
    }
}

/// Registers a logging hook of each kind on every module of `m`.
fn log_every_hook(m: &Root) -> (Log, Vec<HookHandle>) {
    let log: Log = Arc::default();
    let mut handles = Vec::new();
    for (name, module) in m.named_modules() {
        let l = log.clone();
        handles.push(
            module
                .register_state_dict_post_hook(move |_, prefix| {
                    l.lock().unwrap().push(format!("state_dict_post {prefix:?}"));
                    Ok(())
                })
                .unwrap(),
        );
        let l = log.clone();
        handles.push(
            module
                .register_load_state_dict_pre_hook(move |_, prefix, version| {
                    l.lock().unwrap().push(format!("load_pre {prefix:?} {version:?}"));
                    Ok(())
                })
                .unwrap(),
        );
        let l = log.clone();
        handles.push(
            module
                .register_load_state_dict_post_hook(move |_| {
                    l.lock().unwrap().push(format!("load_post {name:?}"));
                    Ok(())
                })
                .unwrap(),
        );
    }
    (log, handles)
}

fn fixture() -> serde_json::Value {
    let text = include_str!("../../../tests/fixtures/pytorch/state_hooks/order.json");
    serde_json::from_str(text).unwrap()
}

/// `[kind, arg, ...]` rows of the fixture as this test's log lines, for the kinds given.
fn pytorch_calls(rows: &serde_json::Value, kinds: &[&str]) -> Vec<String> {
    rows.as_array()
        .unwrap()
        .iter()
        .filter_map(|row| {
            let kind = row[0].as_str().unwrap();
            kinds.contains(&kind).then(|| match kind {
                "load_pre" => format!("load_pre {:?} {:?}", row[1].as_str().unwrap(), Some(row[2].as_u64().unwrap())),
                "state_dict_post" => format!("state_dict_post {:?}", row[1].as_str().unwrap()),
                _ => format!("{kind} {:?}", row[1].as_str().unwrap()),
            })
        })
        .collect()
}

#[test]
fn state_dict_post_hooks_run_children_first_as_pytorchs() {
    let m = root();
    let (log, _handles) = log_every_hook(&m);
    let sd = m.state_dict();
    assert_eq!(*log.lock().unwrap(), pytorch_calls(&fixture()["state_dict_calls"], &["state_dict_post"]));
    // PyTorch's keys, `b._extra_state` beside the tensors.
    let mut keys: Vec<String> = sd.keys().map(str::to_string).collect();
    keys.extend(sd.extra_states().map(|(k, _)| k.to_string()));
    let theirs: Vec<String> =
        fixture()["keys"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().to_string()).collect();
    assert_eq!(keys, theirs);
    assert_eq!(sd.extra_state("b._extra_state"), Some(&serde_json::json!(5)));
    // The declared version where PyTorch's `_metadata` has it (PyTorch records 1 for
    // modules that declare none; nn records none).
    assert_eq!(sd.version("a.x"), fixture()["versions"]["a.x"].as_u64().map(|v| v as u32));
    assert_eq!(sd.versions().collect::<Vec<_>>(), [("a.x", 3)]);
}

#[test]
fn load_hooks_run_in_pytorchs_order_of_each_kind() {
    let mut m = root();
    let sd = m.state_dict();
    // PyTorch's file records version 1 for each module without one of its own.
    let mut sd_v = sd.clone();
    for path in ["", "a", "b"] {
        sd_v.set_version(path, 1);
    }
    let (log, _handles) = log_every_hook(&m);
    m.b.count = 0;
    m.load_state_dict(&sd_v, true).unwrap();
    assert_eq!(m.b.count, 5, "the extra state is loaded");
    let calls = &fixture()["load_calls"];
    let log = log.lock().unwrap();
    let pre: Vec<String> = log.iter().filter(|l| l.starts_with("load_pre")).cloned().collect();
    let post: Vec<String> = log.iter().filter(|l| l.starts_with("load_post")).cloned().collect();
    assert_eq!(pre, pytorch_calls(calls, &["load_pre"]));
    assert_eq!(post, pytorch_calls(calls, &["load_post"]));
    // Every pre-hook before any post-hook: nn matches the whole state dict before it
    // assigns anything (PyTorch interleaves them subtree by subtree).
    assert_eq!(log.len(), pre.len() + post.len());
    assert!(log[..pre.len()].iter().all(|l| l.starts_with("load_pre")));
}

#[test]
fn a_removed_state_hook_no_longer_runs() {
    let m = root();
    let (log, handles) = log_every_hook(&m);
    for h in handles {
        assert!(h.is_registered());
        h.remove();
    }
    let _ = m.state_dict();
    assert!(log.lock().unwrap().is_empty());
}

#[test]
fn a_pre_hook_migrates_an_old_layout_by_its_version() {
    let mut m = root();
    m.a.x
        .register_load_state_dict_pre_hook(|sd, prefix, version| {
            if version.unwrap_or(1) < 3 {
                let w = sd.remove(&format!("{prefix}w")).ok_or("no `w` in a version-2 layout")?;
                sd.insert(format!("{prefix}weight"), w);
            }
            Ok(())
        })
        .unwrap();
    let mut old = m.state_dict();
    let w = old.remove("a.x.weight").unwrap();
    old.insert("a.x.w".to_string(), Tensor::ones(&[2]));
    old.set_version("a.x", 2);
    let before = w.to_vec();
    m.load_state_dict(&old, true).unwrap();
    assert_eq!(m.a.x.weight.tensor().to_vec(), [1.0, 1.0]);
    assert_eq!(before, [0.0, 0.0]);
    // The caller's state dict is not changed by the hook.
    assert!(old.contains_key("a.x.w") && !old.contains_key("a.x.weight"));
    // A current file (version 3) is not migrated.
    let current = m.state_dict();
    m.load_state_dict(&current, true).unwrap();
}

#[test]
fn a_pre_hook_that_makes_an_unknown_key_is_refused_naming_its_module() {
    let mut m = root();
    m.a.x
        .register_load_state_dict_pre_hook(|sd, prefix, _| {
            let w = sd.remove(&format!("{prefix}weight")).unwrap();
            sd.insert(format!("{prefix}weigth"), w);
            Ok(())
        })
        .unwrap();
    let sd: StateDict = [("a.x.weight".to_string(), Tensor::ones(&[2]))].into_iter().collect();
    for strict in [true, false] {
        let e = m.load_state_dict(&sd, strict).unwrap_err().to_string();
        assert_eq!(
            e,
            "load_state_dict pre-hook of `a.x` (Leaf): it made the key(s) `a.x.weigth`, which the model does not \
             have: their values would be dropped as unexpected"
        );
    }
    assert_eq!(m.a.x.weight.tensor().to_vec(), [0.0, 0.0]);
}

#[test]
fn a_hook_error_names_the_module_and_changes_nothing() {
    let mut m = root();
    m.b.register_load_state_dict_post_hook(|_| Err("refusing on purpose".into())).unwrap();
    let mut sd = m.state_dict();
    sd.insert("a.x.weight".to_string(), Tensor::ones(&[2]));
    sd.insert_extra_state("b._extra_state".to_string(), serde_json::json!(9));
    let e = m.load_state_dict(&sd, true).unwrap_err();
    assert!(matches!(e, Error::StateDictHook { kind: "load_state_dict post-hook", module: "WithExtra", .. }));
    assert_eq!(e.to_string(), "load_state_dict post-hook of `b` (WithExtra): refusing on purpose");
    assert_eq!(m.a.x.weight.tensor().to_vec(), [0.0, 0.0]);
    assert_eq!(m.b.count, 5);

    let m = root();
    m.register_state_dict_post_hook(|_, _| Err("no".into())).unwrap();
    assert_eq!(m.try_state_dict().unwrap_err().to_string(), "state_dict post-hook of `<root>` (Root): no");
}

#[test]
fn a_panicking_hook_panics_naming_the_module_and_changes_nothing() {
    let mut m = root();
    m.a.register_load_state_dict_pre_hook(|_, _, _| panic!("boom")).unwrap();
    let mut sd = m.state_dict();
    sd.insert("a.x.weight".to_string(), Tensor::ones(&[2]));
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.load_state_dict(&sd, true))).unwrap_err();
    let msg = e.downcast_ref::<String>().unwrap();
    assert_eq!(msg, "load_state_dict pre-hook of `a` (A) panicked: boom");
    assert_eq!(m.a.x.weight.tensor().to_vec(), [0.0, 0.0]);
}

#[test]
fn a_post_hook_may_excuse_missing_keys_before_strictness() {
    let mut m = root();
    let sd: StateDict = [("a.x.weight".to_string(), Tensor::ones(&[2]))].into_iter().collect();
    let e = m.load_state_dict(&sd, true).unwrap_err().to_string();
    assert!(e.contains("b.weight") && e.contains("b._extra_state"), "{e}");
    m.b.register_load_state_dict_post_hook(|keys| {
        keys.missing_keys.retain(|k| !k.starts_with("b."));
        Ok(())
    })
    .unwrap();
    let report = m.load_state_dict(&sd, true).unwrap();
    assert!(report.is_empty());
    assert_eq!(m.a.x.weight.tensor().to_vec(), [1.0, 1.0]);
    assert_eq!(m.b.count, 5, "no extra state in the file: left as it was");
}

#[test]
fn a_post_hook_edits_what_is_saved() {
    let m = root();
    m.a.x
        .register_state_dict_post_hook(|sd, prefix| {
            let w = sd.remove(&format!("{prefix}weight")).unwrap();
            sd.insert(format!("{prefix}w"), w);
            Ok(())
        })
        .unwrap();
    // A removed key and its replacement: the replacement goes last.
    assert_eq!(m.state_dict().keys().collect::<Vec<_>>(), ["b.weight", "a.x.w"]);
}

#[test]
fn extra_state_is_matched_checked_and_set_at_load() {
    let mut m = root();
    let mut sd = m.state_dict();
    // The wrong type: refused naming the module, nothing changed.
    sd.insert_extra_state("b._extra_state".to_string(), serde_json::json!("five"));
    sd.insert("a.x.weight".to_string(), Tensor::ones(&[2]));
    let e = m.load_state_dict(&sd, false).unwrap_err().to_string();
    assert!(e.starts_with("set_extra_state of `b` (WithExtra): invalid type: string \"five\""), "{e}");
    assert_eq!(m.a.x.weight.tensor().to_vec(), [0.0, 0.0]);
    // Missing: a missing key; unexpected: an unexpected key.
    sd.remove_extra_state("b._extra_state");
    sd.insert_extra_state("a._extra_state".to_string(), serde_json::json!(1));
    let report = m.load_state_dict(&sd, false).unwrap();
    assert_eq!(report.missing_keys, ["b._extra_state"]);
    assert_eq!(report.unexpected_keys, ["a._extra_state"]);
    assert!(m.load_state_dict(&sd, true).is_err());
}

#[test]
fn the_extra_state_of_a_shared_module_is_refused_before_anything_changes() {
    #[derive(Module)]
    struct Holder {
        #[param]
        w: Parameter,
        #[module]
        inner: Arc<WithExtra>,
        #[base]
        base: ModuleBase,
    }
    impl Compute for Holder {
        type Input = Tensor;
        type Output = Tensor;
        fn compute(&self, x: &Tensor) -> Tensor {
            self.inner.forward(x)
        }
    }
    let inner = Arc::new(WithExtra { weight: Parameter::new(Tensor::zeros(&[1])), count: 5, base: ModuleBase::new() });
    let mut m = Holder { w: Parameter::new(Tensor::zeros(&[1])), inner: inner.clone(), base: ModuleBase::new() };
    let mut sd = m.state_dict();
    sd.insert("w".to_string(), Tensor::ones(&[1]));
    sd.insert_extra_state("inner._extra_state".to_string(), serde_json::json!(7));
    let e = m.load_state_dict(&sd, true).unwrap_err().to_string();
    assert!(e.starts_with("set_extra_state of `inner` (WithExtra): the module is one of 2 handles on it"), "{e}");
    assert_eq!(m.w.tensor().to_vec(), [0.0]);
    assert_eq!(m.inner.count, 5);
    // The only handle: the load goes through.
    drop(inner);
    m.load_state_dict(&sd, true).unwrap();
    assert_eq!((m.w.tensor().to_vec(), m.inner.count), (vec![1.0], 7));
}

#[test]
fn extra_state_and_versions_survive_files_prefixes_and_checkpoints() {
    let mut m = root();
    m.b.count = 42;
    let sd = m.state_dict();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    sd.save(&path).unwrap();
    let back = StateDict::load(&path).unwrap();
    assert_eq!(back.extra_state("b._extra_state"), Some(&serde_json::json!(42)));
    assert_eq!(back.version("a.x"), Some(3));

    let wrapped = sd.add_prefix("model.");
    assert_eq!(wrapped.extra_state("model.b._extra_state"), Some(&serde_json::json!(42)));
    assert_eq!(wrapped.version("model.a.x"), Some(3));
    let mut rooted = StateDict::new();
    rooted.set_version("", 7);
    assert_eq!(rooted.add_prefix("enc.").version("enc"), Some(7));
    assert_eq!(rooted.add_prefix("enc.").strip_prefix("enc.").unwrap().version(""), Some(7));
    let unwrapped = wrapped.strip_prefix("model.").unwrap();
    assert_eq!(unwrapped.extra_state("b._extra_state"), Some(&serde_json::json!(42)));
    assert_eq!(unwrapped.version("a.x"), Some(3));

    let ck = crate::checkpoint::Checkpoint::new(sd, None, None, 0, 0);
    let ck_path = dir.path().join("ck.safetensors");
    ck.save(&ck_path).unwrap();
    m.b.count = 0;
    crate::checkpoint::Checkpoint::load(&ck_path).unwrap().restore(&mut m, None, None).unwrap();
    assert_eq!(m.b.count, 42);
}

#[test]
fn hostile_metadata_is_refused_naming_the_entry() {
    let sd: StateDict = [("w".to_string(), Tensor::ones(&[1]))].into_iter().collect();
    let cases = [
        (crate::serialization::VERSIONS_KEY, "{\"a\": -1}", "is not a map of module paths to versions"),
        (crate::serialization::VERSIONS_KEY, "{\"a\": 1, \"a\": 2}", "duplicate"),
        (crate::serialization::EXTRA_STATE_KEY, "[[\"w\", 1]]", "which is not an extra state's key"),
        (crate::serialization::EXTRA_STATE_KEY, "[[\"_extra_state\", 1], [\"_extra_state\", 2]]", "twice"),
        (crate::serialization::EXTRA_STATE_KEY, "{}", "is not a list of [key, state] pairs"),
    ];
    for (key, json, expected) in cases {
        // Written by hand: `save_with_metadata` refuses nn's own keys.
        let e =
            sd.save_with_metadata("/nonexistent/x", Some([(key.to_string(), json.to_string())].into())).unwrap_err();
        assert!(e.to_string().contains("is nn's own"), "{e}");
        let bytes = safetensors::serialize(
            [("w", safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1], &[0, 0, 128, 63]).unwrap())],
            Some([(key.to_string(), json.to_string())].into()),
        )
        .unwrap();
        let e = StateDict::from_safetensors_bytes(&bytes).unwrap_err().to_string();
        assert!(e.contains(expected), "{json}: {e}");
    }
}

#[test]
fn a_state_that_json_cannot_hold_is_refused_at_save() {
    #[derive(Module)]
    #[module(extra_state)]
    struct Scale {
        s: f64,
    }
    impl ExtraState for Scale {
        type State = f64;
        fn extra_state(&self) -> f64 {
            self.s
        }
        fn set_extra_state(&mut self, s: f64) {
            self.s = s;
        }
    }
    let e = Scale { s: f64::NAN }.try_state_dict().unwrap_err().to_string();
    assert!(e.starts_with("get_extra_state of `<root>` (Scale): the state does not read back"), "{e}");
    assert_eq!(Scale { s: 0.5 }.state_dict().extra_state("_extra_state"), Some(&serde_json::json!(0.5)));
}

#[test]
fn state_hooks_need_a_base() {
    #[derive(Module)]
    struct Bare {
        #[param]
        w: Parameter,
    }
    let e = Bare { w: Parameter::new(Tensor::ones(&[1])) }.register_state_dict_post_hook(|_, _| Ok(())).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`Bare` has no `ModuleBase` to hold state-dict hooks: give it a `#[base] base: ModuleBase` field"
    );
}
