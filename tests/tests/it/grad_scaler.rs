//! `GradScaler` with a real model and checkpoints: a resumed run with a scaler continues
//! bit for bit, checkpoints without a scaler (those written before scalers were saved
//! included) load as before, and hostile scaler metadata is refused without changing the
//! run.

use std::path::Path;

use nn_core::amp::{GradScaler, GradScalerConfig, GradScalerState, StepOutcome};
use nn_core::checkpoint::Checkpoint;
use nn_core::functional as F;
use nn_core::optim::{clip_grad_norm_, Adam, AdamConfig, Optimizer};
use nn_core::{Error, Forward, Module, StateDict, Tensor};
use nn_layers::{Linear, Sequential, Tanh};
use serde_json::{json, Value};

struct Run {
    model: Sequential,
    opt: Adam,
    scaler: GradScaler,
    /// `(iteration, scale after update, stepped)` for each iteration run.
    log: Vec<(u64, f64, bool)>,
}

/// Model values, optimizer state (buffers, step counts, learning rates), as bits.
type Snapshot = (Vec<(String, Vec<u64>)>, Vec<(String, Vec<u64>)>, Vec<u64>);

impl Run {
    /// Growth every 3 clean iterations, so that the scale both grows and backs off.
    fn new() -> Run {
        let model = Sequential::new().add(Linear::new(3, 8)).add(Tanh::new()).add(Linear::new(8, 2));
        let opt = Adam::new(model.named_parameters(), AdamConfig { lr: 1e-2, ..Default::default() });
        let scaler = GradScaler::with_config(GradScalerConfig { growth_interval: 3, ..Default::default() });
        Run { model, opt, scaler, log: vec![] }
    }

    /// One iteration of the PyTorch recipe (scale, backward, unscale_, clip, step,
    /// update) on batch `i`; every fifth batch holds an inf, so the first layer's weight
    /// gradient holds NaN (`0 * inf` behind a saturated `tanh`) and the step is skipped.
    fn iteration(&mut self, i: u64) {
        let mut x: Vec<f32> = (0..12).map(|k| ((k * 7 + i * 3) % 11) as f32 / 5.0 - 1.0).collect();
        if i % 5 == 4 {
            x[5] = f32::INFINITY;
        }
        let y = Tensor::from_vec_i64(vec![0, 1, 1, 0], &[4]);
        self.opt.zero_grad();
        let loss = F::cross_entropy(&self.model.forward(&Tensor::from_vec(x, &[4, 3])), &y);
        self.scaler.scale(&loss).backward();
        self.scaler.unscale_(&mut self.opt);
        clip_grad_norm_(&self.opt.parameters(), 1.0);
        let stepped = self.scaler.step(&mut self.opt) == StepOutcome::Stepped;
        self.scaler.update();
        self.log.push((i, self.scaler.get_scale(), stepped));
    }

    fn snapshot(&self) -> Snapshot {
        let bits = |sd: &StateDict| -> Vec<(String, Vec<u64>)> {
            sd.iter().map(|(k, t)| (k.to_string(), t.to_vec_f64().iter().map(|v| v.to_bits()).collect())).collect()
        };
        let opt = self.opt.state_dict();
        (bits(&self.model.state_dict()), bits(&opt.tensors), opt.lrs.iter().map(|v| v.to_bits()).collect())
    }

    fn checkpoint(&self) -> Checkpoint {
        Checkpoint::new(self.model.state_dict(), Some(self.opt.state_dict()), None, 0, self.log.len() as u64)
            .with_scaler(self.scaler.state_dict())
    }
}

#[test]
fn resumed_training_with_a_scaler_is_bit_identical() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("amp.safetensors");
    let mut full = Run::new();
    for i in 0..24 {
        full.iteration(i);
        if i == 11 {
            full.checkpoint().save(&path).unwrap();
        }
    }
    // The run exercised what a resume must carry: skips, backoffs, growth, and a growth
    // count in progress at the checkpoint (2 of 3: the next clean iteration grows).
    let skipped: Vec<u64> = full.log.iter().filter(|l| !l.2).map(|l| l.0).collect();
    assert_eq!(skipped, vec![4, 9, 14, 19]);
    let scales: Vec<f64> = full.log.iter().map(|l| l.1).collect();
    assert_eq!(scales[..4], [65536.0, 65536.0, 131072.0, 131072.0]);
    assert_eq!(scales[4], 65536.0, "backoff after the inf batch");
    let ck = Checkpoint::load(&path).unwrap();
    assert_eq!(ck.scaler.unwrap().growth_tracker, 2);

    // A fresh run (other initial weights, a scaler with other settings) restored from the
    // checkpoint.
    let mut resumed = Run::new();
    resumed.scaler = GradScaler::with_config(GradScalerConfig { init_scale: 8.0, ..Default::default() });
    assert!(resumed.snapshot() != full.snapshot());
    // Resuming the optimizer without the scaler would restart the scale silently: refused,
    // nothing changed. Restoring the model alone (to evaluate it) is fine.
    let before = resumed.snapshot();
    let e = ck.restore(&mut resumed.model, Some(&mut resumed.opt), None).unwrap_err().to_string();
    assert!(e.contains("holds a grad scaler's state") && e.contains("restore_with_scaler"), "{e}");
    assert!(resumed.snapshot() == before);
    let mut eval = Run::new();
    ck.restore(&mut eval.model, None, None).unwrap();
    let mut fresh_scale = ck.clone();
    fresh_scale.scaler = None;
    fresh_scale.restore(&mut eval.model, Some(&mut eval.opt), None).unwrap();
    ck.restore_with_scaler(&mut resumed.model, Some(&mut resumed.opt), None, &mut resumed.scaler).unwrap();
    assert_eq!(resumed.scaler.state_dict(), ck.scaler.unwrap());
    for i in 12..24 {
        resumed.iteration(i);
    }
    assert_eq!(resumed.log, full.log[12..], "scales or skips differ after resuming");
    assert!(resumed.snapshot() == full.snapshot(), "parameters or optimizer state differ after resuming");
    assert_eq!(resumed.scaler, full.scaler);
}

/// The metadata fields of format 1 before scalers were saved.
const OLD_FIELDS: [&str; 9] = [
    "epoch",
    "extra",
    "format_version",
    "optimizer_lrs",
    "rng_seed",
    "rng_stream",
    "rng_word_pos",
    "scheduler",
    "step",
];

fn metadata(path: &Path) -> Value {
    serde_json::from_str(&StateDict::load_with_metadata(path).unwrap().1["nn.checkpoint"]).unwrap()
}

#[test]
fn checkpoints_without_a_scaler_load_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let mut source = Run::new();
    for i in 0..3 {
        source.iteration(i);
    }
    // Saved without a scaler: the metadata is the old one, field for field, but for the
    // optimizer's hyper-parameters (saved since; older files load without them) and the
    // scheduler's state (a list since format 2).
    let path = dir.path().join("plain.safetensors");
    let plain = Checkpoint::new(source.model.state_dict(), Some(source.opt.state_dict()), None, 1, 3);
    plain.save(&path).unwrap();
    let meta = metadata(&path);
    let mut keys: Vec<&str> = meta.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    // Format 2 has no `scheduler` (it lists `schedulers`, absent when there are none).
    let mut want: Vec<&str> = OLD_FIELDS.into_iter().filter(|k| *k != "scheduler").collect();
    want.push("optimizer_hyper_params");
    want.sort_unstable();
    assert_eq!(keys, want);

    // A file as the old build wrote it (its metadata by hand): loads, with no scaler.
    let old = dir.path().join("old.safetensors");
    let mut tensors = StateDict::default();
    for (k, t) in source.model.state_dict().iter() {
        tensors.insert(format!("model.{k}"), t.clone());
    }
    let old_meta = json!({
        "format_version": 1, "epoch": 1, "step": 3, "optimizer_lrs": null, "scheduler": null,
        "rng_seed": "07".repeat(32), "rng_stream": 0, "rng_word_pos": "64", "extra": {"best": 0.5},
    });
    let meta = [("nn.checkpoint".to_string(), old_meta.to_string())].into_iter().collect();
    tensors.save_with_metadata(&old, Some(meta)).unwrap();
    for path in [&path, &old] {
        let ck = Checkpoint::load(path).unwrap();
        assert_eq!(ck.scaler, None);
        let mut victim = Run::new();
        victim.iteration(0);
        let (before, scaler_before) = (victim.snapshot(), victim.scaler.clone());
        // Asked for a scaler it does not have: an error, and nothing changed.
        let opt = ck.optimizer.as_ref().map(|_| &mut victim.opt as &mut dyn Optimizer);
        let e = ck.restore_with_scaler(&mut victim.model, opt, None, &mut victim.scaler).unwrap_err();
        assert!(e.to_string().contains("no grad scaler state to restore"), "{e}");
        assert!(victim.snapshot() == before);
        assert_eq!(victim.scaler, scaler_before);
        // Without one, it restores as it always did.
        let opt = ck.optimizer.as_ref().map(|_| &mut victim.opt as &mut dyn Optimizer);
        ck.restore(&mut victim.model, opt, None).unwrap();
        assert_eq!(
            victim.model.state_dict().get("0.weight").unwrap().to_vec(),
            source.model.state_dict().get("0.weight").unwrap().to_vec()
        );
    }
    // And with a scaler, the metadata gains one `scaler` object with PyTorch's key names.
    plain.with_scaler(source.scaler.state_dict()).save(&path).unwrap();
    assert_eq!(
        metadata(&path)["scaler"],
        json!({"scale": 131072.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3, "_growth_tracker": 0})
    );
}

type Edit = Box<dyn FnOnce(&mut Value)>;

#[test]
fn hostile_scaler_metadata_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.safetensors");
    let mut source = Run::new();
    for i in 0..2 {
        source.iteration(i);
    }
    source.checkpoint().save(&good).unwrap();
    let mut victim = Run::new();
    victim.iteration(0);
    let (before, scaler_before) = (victim.snapshot(), victim.scaler.clone());

    let set = |field: &'static str, v: Value| -> Edit { Box::new(move |j: &mut Value| j["scaler"][field] = v) };
    let cases: Vec<(&str, Edit, &str)> = vec![
        ("zero scale", set("scale", json!(0.0)), "`scaler.scale` is 0.0; a scale is a finite positive normal f32"),
        ("negative scale", set("scale", json!(-65536.0)), "`scaler.scale` is -65536.0"),
        ("scale past f32", set("scale", json!(1e39)), "`scaler.scale` is 1e39"),
        ("subnormal scale", set("scale", json!(1e-40)), "`scaler.scale` is 1e-40"),
        // What serde_json writes for a NaN or an infinity.
        ("null scale", set("scale", Value::Null), "invalid type: null, expected f64"),
        ("scale as text", set("scale", json!("65536")), "invalid type: string"),
        (
            "zero growth interval",
            set("growth_interval", json!(0)),
            "`scaler.growth_interval` is 0; it must be at least 1",
        ),
        ("negative growth interval", set("growth_interval", json!(-5)), "invalid value: integer `-5`"),
        (
            "growth factor 1",
            set("growth_factor", json!(1.0)),
            "`scaler.growth_factor` is 1.0; it must be finite and greater than 1",
        ),
        ("shrinking growth factor", set("growth_factor", json!(0.5)), "`scaler.growth_factor` is 0.5"),
        ("backoff 1", set("backoff_factor", json!(1.0)), "`scaler.backoff_factor` is 1.0; it must be in (0, 1)"),
        ("backoff 0", set("backoff_factor", json!(0.0)), "`scaler.backoff_factor` is 0.0"),
        ("negative backoff", set("backoff_factor", json!(-0.5)), "`scaler.backoff_factor` is -0.5"),
        ("tracker at the interval", set("_growth_tracker", json!(3)), "`scaler._growth_tracker` is 3"),
        ("negative tracker", set("_growth_tracker", json!(-1)), "invalid value: integer `-1`"),
        (
            "missing tracker",
            Box::new(|j: &mut Value| drop(j["scaler"].as_object_mut().unwrap().remove("_growth_tracker"))),
            "missing field `_growth_tracker`",
        ),
        ("unknown field", set("enabled", json!(true)), "unknown field `enabled`"),
        ("not an object", Box::new(|j: &mut Value| j["scaler"] = json!(65536.0)), "invalid type: floating point"),
    ];
    for (i, (name, edit, want)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("case{i}.safetensors"));
        let (sd, mut meta) = StateDict::load_with_metadata(&good).unwrap();
        let mut json: Value = serde_json::from_str(&meta["nn.checkpoint"]).unwrap();
        edit(&mut json);
        meta.insert("nn.checkpoint".into(), json.to_string());
        sd.save_with_metadata(&path, Some(meta)).unwrap();
        let e = match Checkpoint::load(&path) {
            Err(e) => e,
            Ok(ck) => ck
                .restore_with_scaler(&mut victim.model, Some(&mut victim.opt), None, &mut victim.scaler)
                .expect_err(name),
        };
        assert!(matches!(e, Error::Checkpoint { .. }), "{name}: {e:?}");
        assert!(e.to_string().contains(want), "{name}: {e}");
        assert!(victim.snapshot() == before, "{name}: a refused resume changed the run");
        assert_eq!(victim.scaler, scaler_before, "{name}");
    }

    // A state set by hand in memory: refused by `save` and by the resume, changing nothing.
    let mut ck = Checkpoint::load(&good).unwrap();
    for bad in [
        GradScalerState { scale: f64::NAN, ..ck.scaler.unwrap() },
        GradScalerState { scale: f64::INFINITY, ..ck.scaler.unwrap() },
        GradScalerState { growth_tracker: 7, ..ck.scaler.unwrap() },
    ] {
        ck.scaler = Some(bad);
        let e = ck.save(dir.path().join("never.safetensors")).unwrap_err();
        assert!(matches!(e, Error::GradScalerState { .. }), "{e:?}");
        assert!(!dir.path().join("never.safetensors").exists());
        let e = ck.restore_with_scaler(&mut victim.model, Some(&mut victim.opt), None, &mut victim.scaler).unwrap_err();
        assert!(matches!(e, Error::GradScalerState { .. }), "{e:?}");
        assert!(victim.snapshot() == before);
        assert_eq!(victim.scaler, scaler_before);
    }

    // The good checkpoint resumes, scaler included.
    let ck = Checkpoint::load(&good).unwrap();
    ck.restore_with_scaler(&mut victim.model, Some(&mut victim.opt), None, &mut victim.scaler).unwrap();
    assert!(victim.snapshot() == source.snapshot());
    assert_eq!(victim.scaler.state_dict(), source.scaler.state_dict());
}
