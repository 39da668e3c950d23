//! Checkpoint metadata, optimizer state and scheduler state are untrusted: every hostile
//! value the reliability probe found is an error naming the field, and a refused resume
//! leaves the model, the optimizer and the scheduler exactly as they were.

use std::path::Path;

use nn_core::checkpoint::{Checkpoint, MAX_COUNTER};
use nn_core::functional as F;
use nn_core::optim::{Adam, AdamConfig, LrScheduler, Optimizer, OptimizerState, SchedulerState, StepLR};
use nn_core::{DType, Device, Forward, Module, StateDict, Tensor};
use nn_layers::{Linear, Sequential, Tanh};
use serde_json::{json, Value};

struct Run {
    model: Sequential,
    opt: Adam,
    sched: StepLR,
}

/// Model values, optimizer buffers, optimizer learning rates (as bits: NaN included),
/// scheduler state.
/// Model values, optimizer buffers, learning rates and hyper-parameters (as bits), and the
/// scheduler's state.
type Snapshot = (Vec<(String, Vec<u64>)>, Vec<(String, Vec<u64>)>, Vec<u64>, Vec<Vec<(String, u64)>>, SchedulerState);

impl Run {
    fn new() -> Run {
        let model = Sequential::new().add(Linear::new(3, 4)).add(Tanh::new()).add(Linear::new(4, 2));
        let mut opt = Adam::new(model.named_parameters(), AdamConfig { lr: 1e-2, ..Default::default() });
        let sched = StepLR::new(&mut opt, 2, 0.5);
        Run { model, opt, sched }
    }

    fn train(&mut self, steps: usize) {
        self.train_on(&Tensor::from_vec((0..6).map(|i| i as f32 / 3.0 - 1.0).collect(), &[2, 3]), steps);
    }

    fn train_on(&mut self, x: &Tensor, steps: usize) {
        let y = Tensor::from_vec_i64(vec![0, 1], &[2]);
        for _ in 0..steps {
            self.opt.zero_grad();
            F::cross_entropy(&self.model.forward(x), &y).backward();
            self.opt.step();
            self.sched.step(&mut self.opt);
        }
    }

    fn checkpoint(&self) -> Checkpoint {
        Checkpoint::new(self.model.state_dict(), Some(self.opt.state_dict()), Some(self.sched.state().clone()), 1, 2)
    }

    fn restore(&mut self, ck: &Checkpoint) -> nn_core::Result<()> {
        ck.restore(&mut self.model, Some(&mut self.opt), Some(&mut self.sched))
    }

    /// Everything a resume could change, as plain values.
    fn snapshot(&self) -> Snapshot {
        let bits = |v: Vec<f64>| v.into_iter().map(f64::to_bits).collect::<Vec<_>>();
        let values = |sd: &StateDict| sd.iter().map(|(k, t)| (k.to_string(), bits(t.to_vec_f64()))).collect();
        let opt = self.opt.state_dict();
        let hyper =
            opt.hyper_params.iter().map(|h| h.iter().map(|(k, v)| (k.clone(), v.to_bits())).collect()).collect();
        (values(&self.model.state_dict()), values(&opt.tensors), bits(opt.lrs), hyper, self.sched.state().clone())
    }
}

/// A copy of the checkpoint at `good` with its metadata JSON and tensors edited.
fn forge(good: &Path, out: &Path, edit: impl FnOnce(&mut Value, &mut StateDict)) {
    let (mut sd, mut meta) = StateDict::load_with_metadata(good).unwrap();
    let mut json: Value = serde_json::from_str(&meta["nn.checkpoint"]).unwrap();
    edit(&mut json, &mut sd);
    meta.insert("nn.checkpoint".into(), json.to_string());
    sd.save_with_metadata(out, Some(meta)).unwrap();
}

type Edit = Box<dyn FnOnce(&mut Value, &mut StateDict)>;

#[test]
fn hostile_checkpoint_metadata_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.safetensors");
    let mut source = Run::new();
    source.train(3);
    source.checkpoint().save(&good).unwrap();

    let mut victim = Run::new();
    victim.train(1);
    let before = victim.snapshot();

    let set =
        |field: &'static str, v: Value| -> Edit { Box::new(move |j: &mut Value, _: &mut StateDict| j[field] = v) };
    let sched = |field: &'static str, v: Value| -> Edit {
        Box::new(move |j: &mut Value, _: &mut StateDict| j["schedulers"][0][field] = v)
    };
    let tensor = |key: &'static str, t: Tensor| -> Edit {
        Box::new(move |_: &mut Value, sd: &mut StateDict| {
            sd.insert(key.to_string(), t);
        })
    };
    let cases: Vec<(&str, Edit, &str)> = vec![
        // Four two-byte characters: 64 bytes but not 64 hex digits (a check slicing the
        // string by bytes would panic).
        ("non-ASCII rng seed", set("rng_seed", json!("é".repeat(32))), "`rng_seed` must be 64 hex digits"),
        ("short rng seed", set("rng_seed", json!("ab")), "`rng_seed` must be 64 hex digits"),
        ("rng position past the stream", set("rng_word_pos", json!((1u128 << 68).to_string())), "`rng_word_pos`"),
        ("rng position not a number", set("rng_word_pos", json!("-1")), "`rng_word_pos`"),
        ("epoch past the counter range", set("epoch", json!(u64::MAX)), "`epoch` is 18446744073709551615"),
        ("step past the counter range", set("step", json!(MAX_COUNTER + 1)), "`step` is 9007199254740993"),
        (
            "scheduler last_epoch u64::MAX",
            sched("last_epoch", json!(u64::MAX)),
            "`schedulers[0].last_epoch` is 18446744073709551615",
        ),
        ("negative base lr", sched("base_lrs", json!([-0.5])), "`schedulers[0].base_lrs[0]` is -0.5"),
        ("negative optimizer lr", set("optimizer_lrs", json!([-1.0])), "`optimizer_lrs[0]` is -1"),
        ("unknown format", set("format_version", json!(99)), "format version 99"),
        // Loads (it is self-consistent), then refused against the optimizer: resumed
        // unchecked, it would panic with an index out of bounds in `sched.apply`.
        (
            "more scheduler groups than optimizer groups",
            sched("base_lrs", json!([0.01, 0.01, 0.01])),
            "`base_lrs` has 3 learning rates, the optimizer 1 parameter group(s)",
        ),
        (
            "more optimizer learning rates than hyper-parameter groups",
            set("optimizer_lrs", json!([0.01, 0.02])),
            "`optimizer_hyper_params` has 1 parameter groups, `optimizer_lrs` 2",
        ),
        (
            "more optimizer groups",
            Box::new(|j: &mut Value, _: &mut StateDict| {
                j["optimizer_lrs"] = json!([0.01, 0.02]);
                let h = j["optimizer_hyper_params"][0].clone();
                j["optimizer_hyper_params"] = json!([h.clone(), h]);
            }),
            "`hyper_params` has 2 parameter groups, this optimizer 1",
        ),
        (
            "an AdamW's state",
            Box::new(|j: &mut Value, _: &mut StateDict| {
                j["optimizer_hyper_params"][0]["decoupled_weight_decay"] = json!(1.0)
            }),
            "the state is an AdamW's",
        ),
        (
            "beta2 of 1",
            Box::new(|j: &mut Value, _: &mut StateDict| j["optimizer_hyper_params"][0]["beta2"] = json!(1.0)),
            "invalid betas (0.9, 1.0)",
        ),
        (
            "hyper-parameters of an Sgd",
            Box::new(|j: &mut Value, _: &mut StateDict| j["optimizer_hyper_params"][0]["momentum"] = json!(0.9)),
            "has `momentum`, which this optimizer does not keep",
        ),
        ("optimizer entries without learning rates", set("optimizer_lrs", Value::Null), "no `optimizer_lrs`"),
        (
            "a cosine schedule's state",
            sched("hyper_params", json!({"T_max": 10.0, "eta_min": 0.0})),
            "has `T_max`, which a StepLR does not keep (it keeps `step_size`, `gamma`)",
        ),
        (
            "a step size of 2.5",
            sched("hyper_params", json!({"step_size": 2.5, "gamma": 0.5})),
            "`hyper_params.step_size` is 2.5; a step count is a whole number",
        ),
        (
            "a step size of 0",
            sched("hyper_params", json!({"step_size": 0.0, "gamma": 0.5})),
            "`hyper_params.step_size` is 0",
        ),
        (
            "a negative gamma",
            sched("hyper_params", json!({"step_size": 2.0, "gamma": -0.5})),
            "`hyper_params.gamma` is -0.5",
        ),
        (
            "no gamma",
            sched("hyper_params", json!({"step_size": 2.0})),
            "has no `gamma` (a StepLR keeps `step_size`, `gamma`)",
        ),
        ("hyper-parameters not numbers", sched("hyper_params", json!({"gamma": "x"})), "metadata"),
        ("an unknown scheduler field", sched("warmup", json!(3)), "unknown field `warmup`"),
        (
            "two scheduler states, one scheduler",
            Box::new(|j: &mut Value, _: &mut StateDict| {
                let first = j["schedulers"][0].clone();
                j["schedulers"] = json!([first.clone(), first]);
            }),
            "the checkpoint holds 2 schedulers' states, 1 scheduler was given",
        ),
        ("format 1's field in format 2", set("scheduler", json!([1, [0.01]])), "`scheduler` in a format-2 file"),
        (
            "format 2's field in format 1",
            Box::new(|j: &mut Value, _: &mut StateDict| j["format_version"] = json!(1)),
            "`schedulers` in a format-1 file",
        ),
        ("Adam step 1e30", tensor("optimizer.0.weight.step", Tensor::from_vec_f64(vec![1e30], &[])), "0.weight.step"),
        ("Adam step inf", tensor("optimizer.0.weight.step", Tensor::scalar(f32::INFINITY)), "0.weight.step"),
        ("Adam step -1", tensor("optimizer.0.weight.step", Tensor::scalar(-1.0)), "0.weight.step"),
        ("Adam step 1.5", tensor("optimizer.0.weight.step", Tensor::scalar(1.5)), "0.weight.step"),
        ("Adam step i64 -3", tensor("optimizer.2.bias.step", Tensor::from_vec_i64(vec![-3], &[])), "2.bias.step"),
        (
            "two-element step",
            tensor("optimizer.0.weight.step", Tensor::from_vec(vec![1.0, 2.0], &[2])),
            "`0.weight.step` must hold one value, has shape [2]",
        ),
        (
            "i64 exp_avg",
            tensor("optimizer.0.bias.exp_avg", Tensor::from_vec_i64(vec![0; 4], &[4])),
            "`0.bias.exp_avg` has dtype i64",
        ),
        (
            "negative second moment",
            tensor("optimizer.0.bias.exp_avg_sq", Tensor::from_vec(vec![-1.0; 4], &[4])),
            "`0.bias.exp_avg_sq` holds the value -1",
        ),
        (
            "infinite first moment",
            tensor("optimizer.0.bias.exp_avg", Tensor::from_vec(vec![f32::INFINITY; 4], &[4])),
            "`0.bias.exp_avg` holds the value inf",
        ),
        (
            "f64 moment past f32's range",
            tensor("optimizer.0.bias.exp_avg_sq", Tensor::from_vec_f64(vec![1e300; 4], &[4])),
            "`0.bias.exp_avg_sq` holds the value 1e300, beyond the range of f32",
        ),
        (
            "misshapen buffer",
            tensor("optimizer.0.bias.exp_avg", Tensor::zeros(&[5])),
            "`0.bias.exp_avg` has shape [5], the parameter [4]",
        ),
        ("buffer without a suffix", tensor("optimizer.0.bias", Tensor::zeros(&[4])), "unexpected entry `0.bias`"),
        (
            "buffer of a stranger",
            tensor("optimizer.9.bias.exp_avg", Tensor::zeros(&[4])),
            "buffers for `9.bias` (`9.bias.exp_avg`)",
        ),
        ("model entry of the wrong shape", tensor("model.2.bias", Tensor::zeros(&[7])), "2.bias"),
        ("entry outside model and optimizer", tensor("stray", Tensor::zeros(&[1])), "unexpected entry `stray`"),
    ];
    let n = cases.len();
    for (i, (name, edit, want)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("case{i}.safetensors"));
        forge(&good, &path, edit);
        let err = match Checkpoint::load(&path) {
            Err(e) => e,
            Ok(ck) => victim.restore(&ck).expect_err(name),
        };
        let msg = err.to_string();
        assert!(msg.contains(want), "{name}: {msg}");
        assert!(victim.snapshot() == before, "{name}: a refused resume changed the run");
    }
    assert!(n >= 35);

    // Duplicate keys in the metadata JSON are refused too (serde_json keeps the last).
    let (sd, mut meta) = StateDict::load_with_metadata(&good).unwrap();
    let json = meta["nn.checkpoint"].clone();
    meta.insert("nn.checkpoint".into(), json.replacen("{", "{\"epoch\":5,", 1));
    let path = dir.path().join("dup.safetensors");
    sd.save_with_metadata(&path, Some(meta)).unwrap();
    let msg = Checkpoint::load(&path).unwrap_err().to_string();
    assert!(msg.contains("duplicate"), "{msg}");

    // The good checkpoint resumes, and the scheduler then drives the optimizer.
    victim.restore(&Checkpoint::load(&good).unwrap()).unwrap();
    assert_eq!(victim.snapshot(), source.snapshot());
    victim.train(1);
    source.train(1);
    assert_eq!(victim.snapshot(), source.snapshot());
}

#[test]
fn a_large_but_whole_adam_step_keeps_the_weights_finite() {
    // 2^31 steps must not wrap the bias-correction exponent to a negative i32, which would
    // make every weight NaN.
    let mut run = Run::new();
    run.train(1);
    let mut state = run.opt.state_dict();
    for key in state.tensors.keys().filter(|k| k.ends_with(".step")).map(String::from).collect::<Vec<_>>() {
        state.tensors.insert(key, Tensor::from_vec_f64(vec![2f64.powi(31)], &[]));
    }
    run.opt.load_state_dict(&state).unwrap();
    let before: Vec<f32> = run.model.parameters().iter().flat_map(|p| p.to_vec()).collect();
    run.train(2);
    let after: Vec<f32> = run.model.parameters().iter().flat_map(|p| p.to_vec()).collect();
    assert!(after.iter().all(|v| v.is_finite()), "{after:?}");
    assert_ne!(before, after);
    let step = run.opt.state_dict().tensors.get("0.weight.step").unwrap().to_vec_f64();
    assert_eq!(step, vec![2f64.powi(31) + 2.0], "counts stay exact past f32's 2^24");
}

#[test]
fn meta_tensors_in_an_optimizer_state_are_errors() {
    let mut run = Run::new();
    run.train(1);
    let mut state = run.opt.state_dict();
    let before = run.snapshot();
    state.tensors.insert("0.bias.exp_avg".into(), Tensor::full_on(&[4], 0.0, DType::F32, Device::Meta));
    let msg = run.opt.load_state_dict(&state).unwrap_err().to_string();
    assert!(msg.contains("`0.bias.exp_avg` is on the meta device"), "{msg}");
    let mut state = run.opt.state_dict();
    state.tensors.insert("0.bias.step".into(), Tensor::full_on(&[], 0.0, DType::F32, Device::Meta));
    let msg = run.opt.load_state_dict(&state).unwrap_err().to_string();
    assert!(msg.contains("`0.bias.step` is on the meta device"), "{msg}");
    // A step without its buffers.
    let mut state = OptimizerState { tensors: StateDict::default(), lrs: vec![0.01], ..Default::default() };
    state.tensors.insert("0.bias.step".into(), Tensor::scalar(1.0));
    let msg = run.opt.load_state_dict(&state).unwrap_err().to_string();
    assert!(msg.contains("`0.bias.step` without `0.bias.exp_avg`"), "{msg}");
    assert!(run.snapshot() == before);
}

#[test]
fn scheduler_states_are_checked_against_the_optimizer() {
    let mut run = Run::new();
    let before = (run.sched.state().clone(), run.opt.group_lr(0));
    for (state, want) in [
        (
            SchedulerState { last_epoch: 1, base_lrs: vec![0.1, 0.1], ..Default::default() },
            "`base_lrs` has 2 learning rates",
        ),
        (
            SchedulerState { last_epoch: u64::MAX, base_lrs: vec![0.1], ..Default::default() },
            "`last_epoch` is 18446744073709551615",
        ),
        (SchedulerState { last_epoch: 1, base_lrs: vec![f64::NAN], ..Default::default() }, "`base_lrs[0]` is NaN"),
    ] {
        let msg = run.sched.load_state(&state, &mut run.opt).unwrap_err().to_string();
        assert!(msg.contains(want), "{msg}");
        assert_eq!((run.sched.state().clone(), run.opt.group_lr(0)), before);
    }
    // A valid state is kept; the learning rate is the optimizer's state's (PyTorch's
    // scheduler `load_state_dict` leaves it alone too).
    run.sched
        .load_state(&SchedulerState { last_epoch: 4, base_lrs: vec![0.1], ..Default::default() }, &mut run.opt)
        .unwrap();
    assert_eq!((run.sched.state().last_epoch, run.opt.group_lr(0)), (4, before.1));
    assert_eq!(run.sched.last_lr(), [0.025]); // 0.1 * 0.5^(4 / 2)
                                              // A state set by hand past the checks saturates instead of overflowing.
    run.sched.state_mut().last_epoch = u64::MAX - 1;
    run.sched.step(&mut run.opt);
    run.sched.step(&mut run.opt);
    assert_eq!(run.sched.state().last_epoch, u64::MAX);
    assert!(run.opt.group_lr(0).is_finite());
    // ... and one for another optimizer is a clear panic, not an index out of bounds.
    run.sched.state_mut().base_lrs = vec![0.1; 3];
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run.sched.apply(&mut run.opt))).unwrap_err();
    let msg = e.downcast_ref::<String>().unwrap();
    assert!(msg.contains("the scheduler has 3 base learning rates, the optimizer 1 parameter group(s)"), "{msg}");
}

#[test]
fn a_scheduler_state_loads_only_into_its_own_kind_and_brings_its_hyper_parameters() {
    use nn_core::optim::{CosineAnnealingLR, LinearLR};
    let mut run = Run::new();
    run.train(3);
    let saved = run.sched.state().clone();
    let h = |pairs: &[(&str, f64)]| pairs.iter().map(|&(k, v)| (k.to_string(), v)).collect();
    assert_eq!(saved.hyper_params, h(&[("step_size", 2.0), ("gamma", 0.5)]));

    // Into another kind of schedule: refused, naming the stranger and what it keeps.
    let mut other = Run::new();
    let mut cosine = CosineAnnealingLR::new(&mut other.opt, 10, 0.0);
    let before = cosine.state().clone();
    let msg = cosine.load_state(&saved, &mut other.opt).unwrap_err().to_string();
    assert!(
        msg.contains("has `gamma`, which a CosineAnnealingLR does not keep (it keeps `T_max`, `eta_min`)"),
        "{msg}"
    );
    assert_eq!(cosine.state(), &before);
    let mut linear = LinearLR::new(&mut other.opt, 0.5, 1.0, 4);
    let msg = linear.load_state(&saved, &mut other.opt).unwrap_err().to_string();
    assert!(msg.contains("which a LinearLR does not keep"), "{msg}");

    // Into a StepLR built with other hyper-parameters: it continues the saved schedule,
    // as PyTorch's `load_state_dict` does, step for step like the run that saved it.
    let mut resumed = Run::new();
    resumed.sched = StepLR::new(&mut resumed.opt, 5, 0.1);
    resumed.restore(&run.checkpoint()).unwrap();
    assert_eq!(resumed.sched.state(), &saved);
    for _ in 0..4 {
        run.train(1);
        resumed.train(1);
        assert_eq!(resumed.opt.group_lr(0).to_bits(), run.opt.group_lr(0).to_bits());
    }
    assert_eq!(resumed.snapshot(), run.snapshot());

    // A checkpoint of a StepLR run restored with a cosine schedule: refused, and the
    // model and the optimizer are untouched (rather than loaded, with the cosine then run
    // from the StepLR's step count).
    let mut victim = Run::new();
    victim.train(1);
    let before = victim.snapshot();
    let mut cosine = CosineAnnealingLR::new(&mut victim.opt, 10, 0.0);
    let cosine_before = cosine.state().clone();
    let msg = run.checkpoint().restore(&mut victim.model, Some(&mut victim.opt), Some(&mut cosine)).unwrap_err();
    assert!(msg.to_string().contains("which a CosineAnnealingLR does not keep"), "{msg}");
    assert!(victim.snapshot() == before);
    assert_eq!(cosine.state(), &cosine_before);

    // A state that records no hyper-parameters (built by hand) keeps the scheduler's own.
    let mut fresh = Run::new();
    let hand = SchedulerState { last_epoch: 2, base_lrs: vec![0.01], ..Default::default() };
    fresh.sched.load_state(&hand, &mut fresh.opt).unwrap();
    assert_eq!(fresh.sched.state().hyper_params, saved.hyper_params);
    assert_eq!(fresh.sched.state().last_epoch, 2);

    // Out of the ranges the constructors accept, or a name missing: refused.
    let mut bad = saved.clone();
    for (hyper, want) in [
        (h(&[("step_size", 0.0), ("gamma", 0.5)]), "`hyper_params.step_size` is 0"),
        (h(&[("step_size", 1e300), ("gamma", 0.5)]), "`hyper_params.step_size` is 1e300"),
        (h(&[("step_size", 2.0), ("gamma", f64::INFINITY)]), "`hyper_params.gamma` is inf"),
        (h(&[("step_size", 2.0)]), "has no `gamma`"),
    ] {
        bad.hyper_params = hyper;
        let msg = fresh.sched.load_state(&bad, &mut fresh.opt).unwrap_err().to_string();
        assert!(msg.contains(want), "{msg}");
    }
    let mut linear_state = linear.state().clone();
    for (k, v, want) in [
        ("start_factor", 0.0, "`hyper_params.start_factor` is 0; it must be in (0, 1]"),
        ("end_factor", 1.5, "`hyper_params.end_factor` is 1.5; it must be in [0, 1]"),
        ("total_iters", -1.0, "`hyper_params.total_iters` is -1; a step count is a whole number from 0"),
    ] {
        let keep = linear_state.hyper_params.insert(k.to_string(), v).unwrap();
        let msg = linear.load_state(&linear_state, &mut other.opt).unwrap_err().to_string();
        assert!(msg.contains(want), "{msg}");
        linear_state.hyper_params.insert(k.to_string(), keep);
    }
    linear.load_state(&linear_state, &mut other.opt).unwrap();

    // A format-1 file (one `scheduler`, no hyper-parameters) loads, and its state keeps
    // the scheduler's own hyper-parameters.
    let old = dir_old_format(&run);
    let ck = Checkpoint::load(old.path().join("old.safetensors")).unwrap();
    assert_eq!(ck.schedulers, [SchedulerState { last_epoch: 3, base_lrs: vec![0.01], ..Default::default() }]);
    let mut from_old = Run::new();
    from_old.restore(&ck).unwrap();
    assert_eq!(from_old.sched.state().hyper_params, saved.hyper_params);
    assert_eq!(from_old.sched.state().last_epoch, 3);

    // A checkpoint keeps them through save and load.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    run.checkpoint().save(&path).unwrap();
    assert_eq!(Checkpoint::load(&path).unwrap().schedulers[0].hyper_params, saved.hyper_params);
}

/// A scheduler written outside nn, keeping one hyper-parameter of its own.
struct Warmup {
    state: SchedulerState,
}

impl LrScheduler for Warmup {
    fn lr_at(&self, base_lr: f64, epoch: u64) -> f64 {
        base_lr * (epoch as f64 / self.state.hyper_params["warmup_steps"]).min(1.0)
    }
    fn state(&self) -> &SchedulerState {
        &self.state
    }
    fn state_mut(&mut self) -> &mut SchedulerState {
        &mut self.state
    }
}

#[test]
fn a_user_scheduler_takes_only_states_with_its_own_hyper_parameters() {
    let mut run = Run::new();
    run.train(2);
    let step_lr = run.sched.state().clone();
    let own = |hyper: &[(&str, f64)]| SchedulerState {
        last_epoch: 2,
        base_lrs: vec![0.01],
        hyper_params: hyper.iter().map(|&(k, v)| (k.to_string(), v)).collect(),
    };
    let mut warmup = Warmup { state: own(&[("warmup_steps", 4.0)]) };
    let before = warmup.state().clone();
    let msg = warmup.load_state(&step_lr, &mut run.opt).unwrap_err().to_string();
    assert!(msg.contains("has `gamma`, which this scheduler does not keep (it keeps `warmup_steps`)"), "{msg}");
    let msg = warmup.load_state(&own(&[("warmup", 4.0)]), &mut run.opt).unwrap_err().to_string();
    assert!(msg.contains("has `warmup`, which this scheduler does not keep"), "{msg}");
    assert_eq!(warmup.state(), &before);
    warmup.load_state(&own(&[("warmup_steps", 8.0)]), &mut run.opt).unwrap();
    assert_eq!(warmup.state().hyper_params["warmup_steps"], 8.0);

    // One that keeps none takes only states that record none.
    let mut plain = Warmup { state: own(&[]) };
    let msg = plain.load_state(&step_lr, &mut run.opt).unwrap_err().to_string();
    assert!(msg.contains("which this scheduler does not keep (it keeps none)"), "{msg}");
    plain.load_state(&own(&[]), &mut run.opt).unwrap();
}

/// A folder holding `old.safetensors`: `run`'s checkpoint as format 1 wrote it, with the
/// scheduler's state `(3, [0.01])`.
fn dir_old_format(run: &Run) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let (good, old) = (dir.path().join("good.safetensors"), dir.path().join("old.safetensors"));
    run.checkpoint().save(&good).unwrap();
    forge(&good, &old, |j, _| {
        let j = j.as_object_mut().unwrap();
        j.remove("schedulers");
        j.insert("scheduler".into(), json!([3, [0.01]]));
        j.insert("format_version".into(), json!(1));
    });
    dir
}

#[test]
fn a_refused_resume_leaves_a_diverged_run_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.safetensors");
    let mut source = Run::new();
    source.train(1);
    let mut ck = source.checkpoint();
    ck.model.insert("2.bias".into(), Tensor::zeros(&[5]));
    ck.save(&path).unwrap();
    // NaN inputs: every weight and Adam buffer of the victim is NaN (a state its own
    // `load_state_dict` would refuse, so nothing may depend on reloading it).
    let mut victim = Run::new();
    victim.train_on(&Tensor::full(&[2, 3], f64::NAN), 1);
    let before = victim.snapshot();
    let e = victim.restore(&Checkpoint::load(&path).unwrap()).unwrap_err().to_string();
    assert!(e.contains("\"2.bias\" is [5]"), "{e}");
    assert!(victim.snapshot() == before);
}
