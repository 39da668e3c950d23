//! Losses, optimizers and schedulers against PyTorch (committed fixtures of
//! `tests/fixtures/pytorch/training.py`), optimizer state by path and gradient clipping.
//! The bit-exact resume test is in `tests/resume.rs` (its own process: it needs the global
//! generator to itself).

use std::collections::HashMap;
use std::path::Path;

use nn_core::functional::{self as F, ClassLossConfig, Reduction};
use nn_core::optim::{
    clip_grad_norm_, Adam, AdamConfig, AdamW, AdamWConfig, CosineAnnealingLR, LinearLR, LrScheduler, Optimizer,
    ParamGroup, Sgd, SgdConfig, StepLR,
};
use nn_core::testing::assert_close;
use nn_core::{manual_seed, Forward, Module, StateDict, Tensor};
use nn_layers::{Linear, Sequential, Tanh};

fn fixture(name: &str) -> StateDict {
    StateDict::load(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch/training").join(name)).unwrap()
}

fn small_model() -> Sequential {
    Sequential::new().add(Linear::new(4, 8)).add(Tanh::new()).add(Linear::new(8, 3))
}

fn prefixed(sd: &StateDict, prefix: &str) -> StateDict {
    sd.iter().filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v.clone()))).collect()
}

/// Group 0: the first layer with lr 0.05; group 1: the second layer with the default lr.
fn groups(m: &Sequential) -> Vec<ParamGroup> {
    let named = m.named_parameters();
    let (a, b): (Vec<_>, Vec<_>) = named.into_iter().partition(|(k, _)| k.starts_with("0."));
    vec![ParamGroup::new(a).lr(0.05), ParamGroup::new(b)]
}

fn run_parity(name: &str, make: impl Fn(Vec<ParamGroup>) -> Box<dyn Optimizer>) {
    let f = fixture(&format!("optim_{name}.safetensors"));
    let mut m = small_model();
    m.load_state_dict(&prefixed(&f, "init."), true).unwrap();
    let mut opt = make(groups(&m));
    let (x, y) = (f.get("x").unwrap(), f.get("y").unwrap());
    let mut losses = Vec::new();
    for _ in 0..20 {
        opt.zero_grad();
        let loss = F::cross_entropy(&m.forward(x), y);
        losses.push(loss.item() as f32);
        loss.backward();
        opt.step();
    }
    assert_close(&losses, &f.get("losses").unwrap().to_vec(), 1e-5, 1e-4);
    let fin = prefixed(&f, "final.");
    for (k, v) in m.state_dict().iter() {
        let want = fin.get(k).unwrap().to_vec();
        let got = v.to_vec();
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 1e-4, "{name}: {k}[{i}] = {a}, PyTorch {b}");
        }
    }
}

#[test]
fn optimizers_match_pytorch_for_20_steps() {
    run_parity("sgd", |g| Box::new(Sgd::new(g, SgdConfig { lr: 0.1, ..Default::default() })));
    run_parity("sgd_momentum", |g| {
        Box::new(Sgd::new(g, SgdConfig { lr: 0.1, momentum: 0.5, dampening: 0.3, weight_decay: 1e-3, nesterov: false }))
    });
    run_parity("sgd_nesterov", |g| {
        Box::new(Sgd::new(
            g,
            SgdConfig { lr: 0.1, momentum: 0.9, weight_decay: 1e-3, nesterov: true, ..Default::default() },
        ))
    });
    run_parity("adam", |g| Box::new(Adam::new(g, AdamConfig { lr: 1e-2, weight_decay: 1e-3, ..Default::default() })));
    run_parity("adam_amsgrad", |g| {
        Box::new(Adam::new(g, AdamConfig { lr: 1e-2, betas: (0.8, 0.99), amsgrad: true, ..Default::default() }))
    });
    run_parity("adamw", |g| Box::new(AdamW::new(g, AdamWConfig { lr: 1e-2, weight_decay: 0.1, ..Default::default() })));
}

/// A loss under test: its name, its input, and how to compute it.
type LossCase<'a> = (&'static str, Tensor, Box<dyn Fn(&Tensor) -> Tensor + 'a>);
/// How to attach one scheduler to an optimizer.
type MakeSched<'a> = &'a dyn Fn(&mut Sgd) -> Box<dyn LrScheduler>;
/// A case: its name and the schedulers attached, in order (all stepped each step).
type SchedCase<'a> = (&'static str, Vec<MakeSched<'a>>);

#[test]
fn losses_match_pytorch() {
    let f = fixture("losses.safetensors");
    let g = |k: &str| f.get(k).unwrap().clone();
    let (target, target3) = (g("target"), g("target3"));
    let smooth = |s: f64, r: Reduction| ClassLossConfig { label_smoothing: s, reduction: r, ..Default::default() };
    let cases: Vec<LossCase<'_>> = vec![
        ("ce", g("logits"), Box::new(|z| F::cross_entropy(z, &target))),
        ("ce_smooth_sum", g("logits"), Box::new(|z| F::cross_entropy_with(z, &target, smooth(0.2, Reduction::Sum)))),
        ("ce_none", g("logits"), Box::new(|z| F::cross_entropy_with(z, &target, smooth(0.1, Reduction::None)))),
        ("ce_spatial", g("logits3"), Box::new(|z| F::cross_entropy(z, &target3))),
        ("nll", g("logits"), Box::new(|z| F::nll_loss(&z.log_softmax(1), &target))),
        ("mse", g("reg_x"), Box::new(|z| F::mse_loss(z, &g("reg_t"), Reduction::Mean))),
        ("l1_sum", g("reg_x"), Box::new(|z| F::l1_loss(z, &g("reg_t"), Reduction::Sum))),
        ("bce", g("bce_x"), Box::new(|z| F::binary_cross_entropy_with_logits(z, &g("bce_t"), None, Reduction::Mean))),
        (
            "bce_pos_weight",
            g("bce_x"),
            Box::new(|z| F::binary_cross_entropy_with_logits(z, &g("bce_t"), Some(&g("pos_weight")), Reduction::Mean)),
        ),
    ];
    for (name, input, loss) in cases {
        let z = input.detach().requires_grad_(true);
        let v = loss(&z);
        let n = v.numel();
        let w: Vec<f32> =
            (0..n).map(|i| if n == 1 { 0.5 } else { 0.5 + i as f32 / (n - 1) as f32 }).collect::<Vec<_>>();
        (&v * &Tensor::from_vec(w, v.shape())).sum().backward();
        assert_close(&v.to_vec(), &g(&format!("{name}.value")).to_vec(), 1e-6, 1e-5);
        assert_close(&z.grad().unwrap().to_vec(), &g(&format!("{name}.grad")).to_vec(), 1e-6, 1e-5);
    }
}

#[test]
fn schedulers_match_pytorch() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch/training/schedulers.json");
    let want: HashMap<String, Vec<f64>> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let run = |makes: &[MakeSched<'_>]| {
        let mut opt =
            Sgd::new(vec![nn_core::Parameter::new(Tensor::zeros(&[1]))], SgdConfig { lr: 0.1, ..Default::default() });
        let mut ss: Vec<Box<dyn LrScheduler>> = makes.iter().map(|make| make(&mut opt)).collect();
        let mut got = vec![opt.group_lr(0)];
        for _ in 0..12 {
            opt.step();
            ss.iter_mut().for_each(|s| s.step(&mut opt));
            got.push(opt.group_lr(0));
        }
        got
    };
    let cases: [SchedCase<'_>; 6] = [
        ("step", vec![&|o| Box::new(StepLR::new(o, 3, 0.5))]),
        ("cosine", vec![&|o| Box::new(CosineAnnealingLR::new(o, 10, 0.001))]),
        ("linear", vec![&|o| Box::new(LinearLR::new(o, 0.25, 1.0, 4))]),
        ("cosine_cycles", vec![&|o| Box::new(CosineAnnealingLR::new(o, 4, 0.01))]),
        // Two schedulers on one optimizer chain, as PyTorch's do: the second starts from the
        // group's first rate and scales the rate the first one set.
        (
            "chained_linear_cosine",
            vec![&|o| Box::new(LinearLR::new(o, 0.25, 1.0, 4)), &|o| Box::new(CosineAnnealingLR::new(o, 10, 0.001))],
        ),
        (
            "chained_linear_step",
            vec![&|o| Box::new(LinearLR::new(o, 0.5, 1.0, 3)), &|o| Box::new(StepLR::new(o, 2, 0.5))],
        ),
    ];
    for (name, makes) in cases {
        let got = run(&makes);
        assert_eq!(got.len(), want[name].len(), "{name}");
        for (i, (a, b)) in got.iter().zip(&want[name]).enumerate() {
            // PyTorch's formulas in the same order: equal but for the last bit of the
            // fixture's decimal digits.
            assert!((a - b).abs() <= 1e-15 * b.abs(), "{name} step {i}: {a} vs PyTorch {b}");
        }
    }
}

#[test]
fn frozen_parameters_are_skipped_and_clipping_scales() {
    manual_seed(0);
    let m = small_model();
    m.get_submodule("0").unwrap();
    let first = m.named_parameters()[0].1.clone();
    let before = first.to_vec();
    let mut opt = Sgd::new(m.named_parameters(), SgdConfig { lr: 0.1, ..Default::default() });
    first.requires_grad_(false);
    let x = Tensor::randn(&[4, 4]);
    F::cross_entropy(&m.forward(&x), &Tensor::from_vec_i64(vec![0, 1, 2, 0], &[4])).backward();
    opt.step();
    assert_eq!(first.to_vec(), before, "a frozen parameter does not move");
    m.requires_grad_(true);
    m.zero_grad();
    F::cross_entropy(&m.forward(&x), &Tensor::from_vec_i64(vec![0, 1, 2, 0], &[4])).backward();
    let params = m.parameters();
    let norm = clip_grad_norm_(&params, 0.01);
    let after: f64 =
        params.iter().map(|p| p.grad().unwrap().to_vec_f64().iter().map(|v| v * v).sum::<f64>()).sum::<f64>().sqrt();
    assert!(norm > 0.01 && (after - 0.01).abs() < 1e-6, "norm {norm} -> {after}");
}

#[test]
fn optimizer_state_is_keyed_by_path() {
    manual_seed(0);
    let m = small_model();
    let mut opt = Adam::new(m.named_parameters(), AdamConfig::default());
    F::cross_entropy(&m.forward(&Tensor::randn(&[2, 4])), &Tensor::from_vec_i64(vec![0, 1], &[2])).backward();
    opt.step();
    let st = opt.state_dict();
    assert!(st.tensors.contains_key("0.weight.exp_avg") && st.tensors.contains_key("2.bias.step"));
    // A new optimizer over the parameters in another order restores by name.
    let mut rev = m.named_parameters();
    rev.reverse();
    let mut opt2 = Adam::new(rev, AdamConfig::default());
    opt2.load_state_dict(&st).unwrap();
    let st2 = opt2.state_dict();
    for (k, v) in st.tensors.iter() {
        assert_eq!(st2.tensors.get(k).unwrap().to_vec(), v.to_vec(), "{k}");
    }
    // An optimizer over other parameters refuses the state, naming the stranger.
    let other = Sequential::new().add(Linear::new(4, 8));
    let mut opt3 = Adam::new(other.named_parameters(), AdamConfig::default());
    let e = opt3.load_state_dict(&st).unwrap_err().to_string();
    assert!(e.contains("2.weight") || e.contains("2.bias"), "{e}");
}

/// The model: an encoder and a head whose own parameters are both named `weight`
/// and `bias`.
#[derive(Module)]
struct EncoderHead {
    #[module]
    encoder: Linear,
    #[module]
    head: Linear,
}

impl EncoderHead {
    fn new() -> Self {
        EncoderHead { encoder: Linear::new(4, 6), head: Linear::new(6, 3) }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        self.head.forward(&self.encoder.forward(x).tanh())
    }

    /// Layer-wise learning rates, built from `get_submodule` with full names.
    fn adam(&self) -> Adam {
        let group = |path: &str| ParamGroup::with_prefix(path, self.get_submodule(path).unwrap().named_parameters());
        Adam::try_new(vec![group("encoder").lr(1e-3), group("head").lr(1e-2)], AdamConfig::default()).unwrap()
    }
}

fn adam_steps(m: &EncoderHead, opt: &mut Adam, x: &Tensor, y: &Tensor, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            opt.zero_grad();
            let loss = F::cross_entropy(&m.forward(x), y);
            loss.backward();
            opt.step();
            loss.item() as f32
        })
        .collect()
}

#[test]
fn layer_wise_groups_from_submodules_round_trip_optimizer_state() {
    manual_seed(3);
    let x = Tensor::randn(&[5, 4]);
    let y = Tensor::from_vec_i64(vec![0, 1, 2, 1, 0], &[5]);
    let model = EncoderHead::new();
    let mut opt = model.adam();
    assert_eq!((opt.group_lr(0), opt.group_lr(1)), (1e-3, 1e-2));
    adam_steps(&model, &mut opt, &x, &y, 3);

    // Every entry survives: 4 parameters x (exp_avg, exp_avg_sq, step), under full names.
    let state = opt.state_dict();
    let mut keys: Vec<&str> = state.tensors.keys().collect();
    keys.sort();
    let mut want = vec![];
    for p in ["encoder.weight", "encoder.bias", "head.weight", "head.bias"] {
        for b in ["exp_avg", "exp_avg_sq", "step"] {
            want.push(format!("{p}.{b}"));
        }
    }
    want.sort();
    assert_eq!(keys, want);

    // Through a checkpoint file into a fresh model and optimizer.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.safetensors");
    nn_core::checkpoint::Checkpoint::new(model.state_dict(), Some(state), None, 0, 3).save(&path).unwrap();
    let ck = nn_core::checkpoint::Checkpoint::load(&path).unwrap();
    let mut fresh = EncoderHead::new();
    fresh.load_state_dict(&ck.model, true).unwrap();
    let mut fresh_opt = fresh.adam();
    fresh_opt.load_state_dict(ck.optimizer.as_ref().unwrap()).unwrap();
    assert_eq!(fresh_opt.state_dict().tensors.len(), 12);

    // Both continue bit for bit alike.
    let a = adam_steps(&model, &mut opt, &x, &y, 4);
    let b = adam_steps(&fresh, &mut fresh_opt, &x, &y, 4);
    assert_eq!(a, b);
    for ((k, u), (_, v)) in model.state_dict().iter().zip(fresh.state_dict().iter()) {
        assert_eq!(u.to_vec(), v.to_vec(), "{k}");
    }
}

#[test]
fn colliding_parameter_groups_are_refused_at_construction() {
    let model = EncoderHead::new();
    let before: Vec<Vec<f32>> = model.parameters().iter().map(|p| p.to_vec()).collect();
    let sub = |path: &str| model.get_submodule(path).unwrap().named_parameters();

    // The natural form without prefixes: both groups hold `weight` and `bias`.
    let natural = || vec![ParamGroup::new(sub("encoder")).lr(1e-3), ParamGroup::new(sub("head"))];
    let e = Adam::try_new(natural(), AdamConfig::default()).err().expect("duplicate names accepted");
    assert!(matches!(e, nn_core::Error::ParamGroupConflict { same_parameter: false, .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("`weight` is used in group 0 and in group 1"), "{msg}");
    assert!(msg.contains("ParamGroup::with_prefix"), "{msg}");
    // `new` keeps its signature and panics with the same message.
    let panic = std::panic::catch_unwind(|| Sgd::new(natural(), SgdConfig::default())).err().unwrap();
    assert_eq!(panic.downcast_ref::<String>().unwrap(), &msg);

    // Within one group, too.
    let mut twice = sub("head");
    twice.push(("weight".to_string(), nn_core::Parameter::new(Tensor::zeros(&[1]))));
    let msg = AdamW::try_new(vec![ParamGroup::new(twice)], AdamWConfig::default()).err().unwrap().to_string();
    assert!(msg.contains("`weight` appears twice in group 0"), "{msg}");

    // The same parameter in two groups, even under different names (PyTorch raises).
    let all = model.named_parameters();
    let e = Sgd::try_new(
        vec![ParamGroup::with_prefix("", all.clone()), ParamGroup::with_prefix("again", sub("head"))],
        SgdConfig::default(),
    )
    .err()
    .unwrap();
    assert!(matches!(e, nn_core::Error::ParamGroupConflict { same_parameter: true, .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("the same parameter (or two handles on one storage) is in group 0 (as `head.weight`) and in group 1 (as `again.weight`)"),
        "{msg}"
    );

    // Hyper-parameters are checked by `try_new` too.
    let e = Sgd::try_new(all, SgdConfig { lr: -1.0, ..Default::default() }).err().unwrap();
    assert_eq!(e.to_string(), "Sgd: invalid learning rate -1");

    // Nothing was touched.
    let after: Vec<Vec<f32>> = model.parameters().iter().map(|p| p.to_vec()).collect();
    assert_eq!(before, after);
}

/// Checkpoint extras hold what a training loop saves beside the model (nanoGPT saves its
/// config): strings, integers, booleans, floats and nested maps and lists, read back
/// exactly; a NaN deep inside is refused at save by its path.
#[test]
fn checkpoint_extras_hold_json_values_exactly() {
    use nn_core::checkpoint::{Checkpoint, Extra};
    let m = small_model();
    let mut ck = Checkpoint::new(m.state_dict(), None, None, 1, 1);
    let config = Extra::map([
        ("n_layer", Extra::from(12)),
        ("bias", false.into()),
        ("dataset", "pride_and_prejudice".into()),
        ("dropout", 0.0.into()),
        ("seed", u64::MAX.into()),
        ("betas", vec![0.9, 0.95].into()),
        ("init_from", Extra::Null),
    ]);
    ck.extra.insert("config".into(), config.clone());
    ck.extra.insert("best_val_loss".into(), 1.25.into());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    ck.save(&path).unwrap();
    let back = Checkpoint::load(&path).unwrap();
    assert_eq!(back.extra["config"], config);
    assert_eq!(back.extra["config"].get("seed").and_then(Extra::as_u64), Some(u64::MAX));
    assert_eq!(back.extra["best_val_loss"].as_f64(), Some(1.25));

    let before = std::fs::read(&path).unwrap();
    ck.extra.insert("curve".into(), Extra::map([("val", vec![1.0, f64::INFINITY].into())]));
    let e = ck.save(&path).unwrap_err().to_string();
    assert!(e.contains("`extra[\"curve\"].val[1]` is inf") && e.contains("nothing was written"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

/// A checkpoint holding a scheduler's state, restored with an optimizer but no scheduler,
/// is refused (a new scheduler would restart from the decayed rates), unless the caller
/// drops the state on purpose; an `extra` value that JSON cannot hold (a diverged loss)
/// is refused at save, leaving the previous file as it was.
#[test]
fn a_checkpoints_scheduler_is_not_dropped_and_nan_extras_are_not_written() {
    use nn_core::checkpoint::Checkpoint;
    let m = small_model();
    let mut opt = Sgd::new(m.named_parameters(), SgdConfig { lr: 0.1, ..Default::default() });
    let mut sched = StepLR::new(&mut opt, 1, 0.5);
    sched.step(&mut opt);
    let mut ck = Checkpoint::new(m.state_dict(), Some(opt.state_dict()), Some(sched.state().clone()), 1, 1);
    let mut m2 = small_model();
    let mut opt2 = Sgd::new(m2.named_parameters(), SgdConfig { lr: 0.1, ..Default::default() });
    let e = ck.restore(&mut m2, Some(&mut opt2), None).unwrap_err().to_string();
    assert!(e.contains("holds a scheduler's state: pass the scheduler"), "{e}");
    assert_eq!(opt2.group_lr(0), 0.1, "nothing restored");
    ck.restore(&mut m2, None, None).unwrap(); // the model alone: weights, no schedule
    ck.schedulers.clear();
    ck.restore(&mut m2, Some(&mut opt2), None).unwrap(); // on purpose
    assert_eq!(opt2.group_lr(0), 0.05);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ck.safetensors");
    ck.save(&path).unwrap();
    let before = std::fs::read(&path).unwrap();
    ck.extra.insert("loss.7".into(), f64::NAN.into());
    let e = ck.save(&path).unwrap_err().to_string();
    assert!(e.contains("`extra[\"loss.7\"]` is NaN") && e.contains("nothing was written"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left");
    ck.extra.clear();

    // Nor is anything written that `load` or `restore` would refuse: a learning rate a
    // schedule grew to infinity (JSON would hold `null`) or one set negative, a counter
    // past MAX_COUNTER, a diverged optimizer state.
    type Edit = Box<dyn Fn(&mut Checkpoint)>;
    let edits: Vec<(Edit, &str)> = vec![
        (Box::new(|c| c.optimizer.as_mut().unwrap().lrs[0] = f64::INFINITY), "`optimizer_lrs[0]` is inf"),
        (Box::new(|c| c.optimizer.as_mut().unwrap().lrs[0] = -1e-3), "`optimizer_lrs[0]` is -0.001"),
        (Box::new(|c| c.schedulers[0].base_lrs[0] = f64::NAN), "`schedulers[0].base_lrs[0]` is NaN"),
        (Box::new(|c| c.step = u64::MAX), "`step` is 18446744073709551615"),
        (Box::new(|c| c.rng.word_pos = 1 << 68), "`rng.word_pos` 295147905179352825856 is not a generator position"),
        (
            Box::new(|c| {
                let o = c.optimizer.as_mut().unwrap();
                o.hyper_params = vec![o.hyper_params[0].clone(), o.hyper_params[0].clone()];
            }),
            "2 parameter groups' hyper-parameters and 1 learning rates",
        ),
        (
            Box::new(|c| {
                let t = &mut c.optimizer.as_mut().unwrap().tensors;
                t.insert("0.weight.exp_avg_sq".into(), Tensor::full(&[2], -1.0));
            }),
            "`optimizer.0.weight.exp_avg_sq` holds -1",
        ),
        (
            Box::new(|c| {
                let t = &mut c.optimizer.as_mut().unwrap().tensors;
                t.insert("0.weight.momentum_buffer".into(), Tensor::full(&[2], f64::NAN));
            }),
            "holds NaN: the optimizer's state has diverged",
        ),
    ];
    ck.schedulers = vec![sched.state().clone()];
    for (edit, want) in edits {
        let mut bad = ck.clone();
        edit(&mut bad);
        let e = bad.save(&path).unwrap_err().to_string();
        assert!(e.contains(want) && e.contains("nothing was written"), "{want}: {e}");
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left");
}
