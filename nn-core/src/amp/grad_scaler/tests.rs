//! The scaler against PyTorch's rules: unscaling, skipped steps, growth and backoff, and
//! the misuse each iteration's record catches.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::*;
use crate::optim::{clip_grad_norm_, Adam, AdamConfig, Sgd, SgdConfig};
use crate::DType;

fn param(v: &[f32]) -> Parameter {
    Parameter::new(Tensor::from_vec(v.to_vec(), &[v.len()]))
}

fn grad(p: &Parameter) -> Vec<f32> {
    p.grad().expect("a gradient").to_vec()
}

fn set_grad(p: &Parameter, g: &[f32]) {
    p.set_grad(Some(Tensor::from_vec(g.to_vec(), &[g.len()])));
}

/// Everything of an optimizer a skipped step must leave alone: its parameters and its
/// state (moments, step counts, learning rates), as bits.
fn snapshot(opt: &dyn Optimizer) -> Vec<(String, Vec<u64>)> {
    let bits = |t: &Tensor| t.to_vec_f64().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let state = opt.state_dict();
    let mut out: Vec<(String, Vec<u64>)> =
        opt.named_parameters().iter().map(|(n, p)| (format!("param {n}"), bits(p))).collect();
    out.extend(state.tensors.iter().map(|(k, t)| (format!("state {k}"), bits(t))));
    out.push(("lrs".into(), state.lrs.iter().map(|v| v.to_bits()).collect()));
    out
}

/// The message of the panic `f` must raise.
fn panic_message(f: impl FnOnce()) -> String {
    let e = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
}

fn scaler(growth_interval: u64) -> GradScaler {
    GradScaler::with_config(GradScalerConfig { growth_interval, ..Default::default() })
}

/// `loss = sum(exp(w * x)) / 3` through the scaler: gradients `scale * x exp(w x) / 3`.
fn scaled_backward(scaler: &GradScaler, w: &Parameter, x: &[f32]) {
    let x = Tensor::from_vec(x.to_vec(), &[x.len()]);
    scaler.scale(&w.mul(&x).exp().mean()).backward();
}

#[test]
fn unscaled_gradients_equal_those_of_the_unscaled_loss_bit_for_bit() {
    let x = [0.3, -1.7, 2.9];
    let reference = param(&[0.1, 0.2, -0.7]);
    let disabled = GradScaler::with_config(GradScalerConfig { enabled: false, ..Default::default() });
    scaled_backward(&disabled, &reference, &x);
    let want = grad(&reference);

    let w = param(&[0.1, 0.2, -0.7]);
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig::default());
    let mut s = GradScaler::new();
    scaled_backward(&s, &w, &x);
    assert_eq!(grad(&w), want.iter().map(|g| g * 65536.0).collect::<Vec<_>>());
    s.unscale_(&mut opt);
    assert_eq!(grad(&w), want);
    // A scale that is not a power of two: the gradient times f32(1 / scale).
    let mut s = GradScaler::new();
    s.update_with(3.0).unwrap();
    set_grad(&w, &[3.0, 6.0, 1e-3]);
    s.unscale_(&mut opt);
    let inv = (1.0f64 / 3.0) as f32;
    assert_eq!(grad(&w), vec![3.0 * inv, 6.0 * inv, 1e-3 * inv]);
}

#[test]
fn a_step_with_an_inf_or_nan_gradient_is_skipped_and_backs_off() {
    for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
        let (w, b) = (param(&[0.5, -0.25]), param(&[0.1]));
        let mut opt =
            Adam::new(vec![("w".to_string(), w.clone()), ("b".to_string(), b.clone())], AdamConfig::default());
        let mut s = scaler(3);
        // Two clean iterations: Adam has moments and a step count, the tracker is at 2.
        for _ in 0..2 {
            opt.zero_grad();
            scaled_backward(&s, &w, &[1.0, 2.0]);
            b.set_grad(Some(Tensor::from_vec(vec![65536.0], &[1])));
            assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
            s.update();
        }
        assert_eq!(s.state_dict().growth_tracker, 2);
        let before = snapshot(&opt);
        assert!(before.iter().any(|(k, v)| k == "state w.step" && f64::from_bits(v[0]) == 2.0), "{before:?}");

        opt.zero_grad();
        scaled_backward(&s, &w, &[1.0, 2.0]);
        set_grad(&b, &[bad]); // one bad value, in another parameter than `w`
        assert_eq!(s.step(&mut opt), StepOutcome::Skipped, "{bad}");
        assert!(!StepOutcome::Skipped.stepped());
        assert_eq!(snapshot(&opt), before, "{bad}: the skipped step changed the parameters or Adam's state");
        s.update();
        let st = s.state_dict();
        assert_eq!((st.scale, st.growth_tracker), (32768.0, 0), "{bad}");

        // The next clean iteration steps, from the untouched state.
        opt.zero_grad();
        scaled_backward(&s, &w, &[1.0, 2.0]);
        assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
        s.update();
        assert_ne!(snapshot(&opt), before);
        assert_eq!(s.state_dict().growth_tracker, 1);
    }
}

/// With a scale below 1, unscaling can overflow a finite gradient: that step is
/// skipped too, the parameter untouched.
#[test]
fn a_gradient_that_overflows_when_unscaled_skips_the_step() {
    let w = param(&[1.0, 2.0]);
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.1, ..Default::default() });
    let mut s = GradScaler::new();
    s.update_with(1e-3).unwrap();
    set_grad(&w, &[1e36, 1.0]); // finite; 1e39 once divided by 1e-3
    assert_eq!(s.step(&mut opt), StepOutcome::Skipped);
    assert_eq!(w.to_vec(), vec![1.0, 2.0]);
}

#[test]
fn the_scale_grows_after_exactly_growth_interval_clean_iterations() {
    let w = param(&[1.0]);
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.0, ..Default::default() });
    let mut s = scaler(3);
    let mut iteration = |s: &mut GradScaler, g: f32| {
        set_grad(&w, &[g]);
        s.step(&mut opt);
        s.update();
        let st = s.state_dict();
        (st.scale, st.growth_tracker)
    };
    assert_eq!(iteration(&mut s, 1.0), (65536.0, 1));
    assert_eq!(iteration(&mut s, 1.0), (65536.0, 2));
    assert_eq!(iteration(&mut s, 1.0), (131072.0, 0));
    assert_eq!(iteration(&mut s, 1.0), (131072.0, 1));
    assert_eq!(iteration(&mut s, 1.0), (131072.0, 2));
    // An inf resets the count: three more clean iterations are needed.
    assert_eq!(iteration(&mut s, f32::INFINITY), (65536.0, 0));
    assert_eq!(iteration(&mut s, 1.0), (65536.0, 1));
    assert_eq!(iteration(&mut s, 1.0), (65536.0, 2));
    assert_eq!(iteration(&mut s, 1.0), (131072.0, 0));
    // Growth that would overflow f32 keeps the scale (and restarts the count).
    s.update_with(f64::from(f32::MAX)).unwrap();
    assert_eq!(iteration(&mut s, 1.0), (f64::from(f32::MAX), 1));
    assert_eq!(iteration(&mut s, 1.0), (f64::from(f32::MAX), 2));
    assert_eq!(iteration(&mut s, 1.0), (f64::from(f32::MAX), 0));
    // A growth factor that is not a power of two rounds to f32, as PyTorch's scale.
    let mut s = GradScaler::with_config(GradScalerConfig {
        init_scale: 1.0,
        growth_factor: 1.1,
        growth_interval: 1,
        ..Default::default()
    });
    assert_eq!(iteration(&mut s, 1.0).0, f64::from(1.1f64 as f32));
    assert_eq!(iteration(&mut s, 1.0).0, f64::from((f64::from(1.1f64 as f32) * 1.1) as f32));
}

#[test]
fn unscale_then_clip_then_step_unscales_once() {
    let x = [3.0, -4.0];
    // Reference: no scaler.
    let r = param(&[0.5, 0.5]);
    let mut ropt = Sgd::new(vec![r.clone()], SgdConfig { lr: 0.1, ..Default::default() });
    r.mul(&Tensor::from_vec(x.to_vec(), &[2])).sum().backward();
    let rnorm = clip_grad_norm_(&ropt.parameters(), 1.0);
    let rclipped = grad(&r);
    ropt.step();

    let w = param(&[0.5, 0.5]);
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.1, ..Default::default() });
    let mut s = GradScaler::new();
    s.scale(&w.mul(&Tensor::from_vec(x.to_vec(), &[2])).sum()).backward();
    s.unscale_(&mut opt);
    assert_eq!(grad(&w), x.to_vec());
    assert_eq!(clip_grad_norm_(&opt.parameters(), 1.0), rnorm);
    assert_eq!(rnorm, 5.0);
    assert_eq!(grad(&w), rclipped);
    assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
    assert_eq!(grad(&w), rclipped, "step unscaled the gradients a second time");
    assert_eq!(w.to_vec(), r.to_vec());
    s.update();
    assert_eq!(s.get_scale(), 65536.0);
}

#[test]
fn a_disabled_scaler_is_a_pass_through() {
    let off = GradScalerConfig { enabled: false, ..Default::default() };
    let mut s = GradScaler::with_config(off);
    assert!(!s.is_enabled() && GradScaler::new().is_enabled());
    assert_eq!((s.get_scale(), s.scale_factor()), (1.0, 1.0));
    let w = param(&[1.0, 2.0]);
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig { lr: 0.5, ..Default::default() });
    let loss = w.mul(&w).sum();
    let scaled = s.scale(&loss);
    assert_eq!(scaled.id(), loss.id());
    scaled.backward();
    s.unscale_(&mut opt);
    s.unscale_(&mut opt); // no record, so no misuse to catch
    assert_eq!(grad(&w), vec![2.0, 4.0]);
    assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
    assert_eq!(w.to_vec(), vec![0.0, 0.0]);
    // No inf check either: the optimizer steps with what it is given, as without a scaler.
    set_grad(&w, &[f32::INFINITY, 0.0]);
    assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
    assert!(w.to_vec()[0].is_infinite());
    s.update();
    s.update_with(8.0).unwrap();
    assert!(s.update_with(-8.0).is_err());
    assert_eq!(s.get_scale(), 1.0);
    assert_eq!(s, GradScaler::with_config(off), "nothing was recorded");
}

#[test]
fn invalid_configs_are_refused() {
    let cases: [(GradScalerConfig, &str); 11] = [
        (GradScalerConfig { init_scale: 0.0, ..Default::default() }, "`init_scale` is 0.0;"),
        (GradScalerConfig { init_scale: -1.0, ..Default::default() }, "`init_scale` is -1.0;"),
        (GradScalerConfig { init_scale: f64::NAN, ..Default::default() }, "`init_scale` is NaN;"),
        (GradScalerConfig { init_scale: f64::INFINITY, ..Default::default() }, "`init_scale` is inf;"),
        (GradScalerConfig { init_scale: 1e39, ..Default::default() }, "`init_scale` is 1e39;"),
        (GradScalerConfig { init_scale: 1e-40, ..Default::default() }, "a scale is a finite positive normal f32"),
        (GradScalerConfig { growth_factor: 1.0, ..Default::default() }, "`growth_factor` is 1.0;"),
        (GradScalerConfig { growth_factor: f64::INFINITY, ..Default::default() }, "`growth_factor` is inf;"),
        (
            GradScalerConfig { backoff_factor: 1.0, ..Default::default() },
            "`backoff_factor` is 1.0; it must be in (0, 1)",
        ),
        (GradScalerConfig { backoff_factor: 0.0, ..Default::default() }, "`backoff_factor` is 0.0;"),
        (
            GradScalerConfig { growth_interval: 0, ..Default::default() },
            "`growth_interval` is 0; it must be at least 1",
        ),
    ];
    for (config, want) in cases {
        for config in [config, GradScalerConfig { enabled: false, ..config }] {
            let e = GradScaler::try_with_config(config).unwrap_err();
            assert!(matches!(e, Error::GradScalerConfig { .. }), "{e:?}");
            assert!(e.to_string().starts_with("GradScaler: ") && e.to_string().contains(want), "{e}");
            assert_eq!(panic_message(|| drop(GradScaler::with_config(config))), e.to_string());
        }
    }
    // The edges that are valid.
    for config in [
        GradScalerConfig { init_scale: f64::from(f32::MIN_POSITIVE), ..Default::default() },
        GradScalerConfig { init_scale: f64::from(f32::MAX), ..Default::default() },
        GradScalerConfig {
            growth_factor: 1.0 + f64::EPSILON,
            backoff_factor: 1e-300,
            growth_interval: 1,
            ..Default::default()
        },
    ] {
        GradScaler::try_with_config(config).unwrap();
    }
}

#[test]
fn invalid_states_are_refused_and_change_nothing() {
    let mut s = scaler(4);
    s.update_with(256.0).unwrap();
    let w = param(&[1.0]);
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig::default());
    set_grad(&w, &[1.0]);
    s.step(&mut opt);
    s.update();
    set_grad(&w, &[1.0]);
    s.unscale_(&mut opt); // a record in progress, which a refused load keeps too
    let before = s.clone();
    let good = s.state_dict();
    assert_eq!(
        good,
        GradScalerState {
            scale: 256.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 4,
            growth_tracker: 1
        }
    );
    let cases: [(GradScalerState, &str); 12] = [
        (GradScalerState { scale: f64::NAN, ..good }, "`scale` is NaN;"),
        (GradScalerState { scale: f64::INFINITY, ..good }, "`scale` is inf;"),
        (GradScalerState { scale: f64::NEG_INFINITY, ..good }, "`scale` is -inf;"),
        (GradScalerState { scale: 0.0, ..good }, "`scale` is 0.0;"),
        (GradScalerState { scale: -2.0, ..good }, "`scale` is -2.0;"),
        (GradScalerState { scale: 1e300, ..good }, "`scale` is 1e300;"),
        (GradScalerState { growth_interval: 0, growth_tracker: 0, ..good }, "`growth_interval` is 0"),
        (GradScalerState { growth_factor: 0.5, ..good }, "`growth_factor` is 0.5"),
        (GradScalerState { growth_factor: f64::NAN, ..good }, "`growth_factor` is NaN"),
        (GradScalerState { backoff_factor: 1.5, ..good }, "`backoff_factor` is 1.5"),
        (GradScalerState { backoff_factor: -0.5, ..good }, "`backoff_factor` is -0.5"),
        (GradScalerState { growth_tracker: 4, ..good }, "`_growth_tracker` is 4; it counts clean iterations"),
    ];
    for (state, want) in cases {
        let e = s.load_state_dict(&state).unwrap_err();
        assert!(matches!(e, Error::GradScalerState { .. }), "{e:?}");
        assert!(e.to_string().starts_with("grad scaler state: ") && e.to_string().contains(want), "{e}");
        assert_eq!(s, before, "{want}: a refused state changed the scaler");
    }
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e39, 1e-39] {
        let e = s.update_with(bad).unwrap_err();
        assert!(e.to_string().starts_with("GradScaler: `new_scale` is "), "{e}");
        assert_eq!(s, before);
    }
    // A valid state round-trips, and the record in progress is kept.
    s.load_state_dict(&GradScalerState { scale: 8.0, growth_tracker: 3, ..good }).unwrap();
    assert_eq!(s.state_dict(), GradScalerState { scale: 8.0, growth_tracker: 3, ..good });
    assert_eq!(s.iteration, before.iteration);
}

#[test]
fn unscale_twice_panics_and_changes_nothing() {
    let w = param(&[1.0, 2.0]);
    let mut opt = Adam::new(vec![w.clone()], AdamConfig::default());
    let mut s = GradScaler::new();
    set_grad(&w, &[65536.0, 131072.0]);
    s.unscale_(&mut opt);
    let (before, opt_before, grad_before) = (s.clone(), snapshot(&opt), grad(&w));
    let msg = panic_message(|| s.unscale_(&mut opt));
    assert_eq!(
        msg,
        "GradScaler::unscale_: unscale_() has already been called on this optimizer since the last update() \
         (the gradient of `0` is unscaled already)"
    );
    assert_eq!((&s, snapshot(&opt), grad(&w)), (&before, opt_before, grad_before));
    assert_eq!(grad(&w), vec![1.0, 2.0]);
    // The iteration goes on normally.
    assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
    // After step: unscale_ is refused (PyTorch's "unscale_() is being called after step()").
    let (before, opt_before) = (s.clone(), snapshot(&opt));
    let msg = panic_message(|| s.unscale_(&mut opt));
    assert!(msg.starts_with("GradScaler::unscale_: unscale_() is being called after step()"), "{msg}");
    assert_eq!((&s, snapshot(&opt)), (&before, opt_before));
    s.update();
    // A new iteration may unscale again.
    set_grad(&w, &[65536.0, 65536.0]);
    s.unscale_(&mut opt);
    assert_eq!(grad(&w), vec![1.0, 1.0]);
}

#[test]
fn step_twice_without_update_panics_and_changes_nothing() {
    let w = param(&[1.0, 2.0]);
    let mut opt = Adam::new(vec![w.clone()], AdamConfig::default());
    let mut s = GradScaler::new();
    set_grad(&w, &[65536.0, 65536.0]);
    assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
    let (before, opt_before, grad_before) = (s.clone(), snapshot(&opt), grad(&w));
    let msg = panic_message(|| {
        s.step(&mut opt);
    });
    assert_eq!(
        msg,
        "GradScaler::step: step() has already been called since the last update() (for the optimizer of `0`)"
    );
    assert_eq!((&s, snapshot(&opt), grad(&w)), (&before, opt_before, grad_before));
    s.update();
    set_grad(&w, &[65536.0, 65536.0]);
    assert_eq!(s.step(&mut opt), StepOutcome::Stepped);
}

#[test]
fn steps_and_updates_without_gradients_panic_and_change_nothing() {
    let w = param(&[1.0]);
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig::default());
    let mut s = GradScaler::new();
    let before = s.clone();
    let msg = panic_message(|| s.update());
    assert!(msg.starts_with("GradScaler::update: no inf checks were recorded prior to update()"), "{msg}");
    let msg = panic_message(|| {
        s.step(&mut opt);
    });
    assert!(
        msg.starts_with("GradScaler::step: no inf checks were recorded for this optimizer: none of its 1"),
        "{msg}"
    );
    assert_eq!(s, before);
    // unscale_ without gradients is allowed (PyTorch too), but records no check.
    s.unscale_(&mut opt);
    let msg = panic_message(|| {
        s.step(&mut opt);
    });
    assert!(msg.contains("no inf checks were recorded for this optimizer"), "{msg}");
    assert!(panic_message(|| s.update()).contains("no inf checks were recorded prior to update()"));
    assert_eq!(w.to_vec(), vec![1.0]);
}

#[test]
fn several_optimizers_in_one_iteration() {
    let (a, b) = (param(&[1.0]), param(&[1.0]));
    let mut opt_a = Sgd::new(vec![a.clone()], SgdConfig { lr: 1.0, ..Default::default() });
    let mut opt_b = Sgd::new(vec![b.clone()], SgdConfig { lr: 1.0, ..Default::default() });
    let mut s = GradScaler::new();
    set_grad(&a, &[65536.0]);
    set_grad(&b, &[f32::NAN]);
    // Each optimizer is skipped on its own gradients; the update sees both.
    assert_eq!(s.step(&mut opt_a), StepOutcome::Stepped);
    assert_eq!(s.step(&mut opt_b), StepOutcome::Skipped);
    assert_eq!((a.to_vec(), b.to_vec()), (vec![0.0], vec![1.0]));
    s.update();
    assert_eq!(s.get_scale(), 32768.0);
    // Two optimizers sharing a parameter: its gradient is not unscaled twice.
    let mut opt_ab = Sgd::new(vec![a.clone(), b.clone()], SgdConfig::default());
    set_grad(&a, &[32768.0]);
    set_grad(&b, &[32768.0]);
    s.unscale_(&mut opt_a);
    let before = s.clone();
    let msg = panic_message(|| {
        s.step(&mut opt_ab);
    });
    assert!(msg.contains("unscale_() has already been called on this optimizer") && msg.contains("`0`"), "{msg}");
    assert_eq!((s, grad(&a), grad(&b)), (before, vec![1.0], vec![32768.0]));
}

#[test]
fn half_precision_gradients_are_refused() {
    let w = Parameter::new(Tensor::ones(&[2]).to_dtype(DType::F16));
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig::default());
    w.set_grad(Some(Tensor::ones(&[2]).to_dtype(DType::F16)));
    let mut s = GradScaler::new();
    let before = s.clone();
    let msg = panic_message(|| s.unscale_(&mut opt));
    assert!(msg.starts_with("GradScaler::unscale_: attempting to unscale f16 gradients (`0`)"), "{msg}");
    assert_eq!(s, before);
    assert_eq!(w.grad().unwrap().to_vec(), vec![1.0, 1.0]);
}

#[test]
fn backing_off_below_the_smallest_normal_f32_panics() {
    let w = param(&[1.0]);
    let mut opt = Sgd::new(vec![w.clone()], SgdConfig::default());
    let mut s = GradScaler::new();
    s.update_with(f64::from(f32::MIN_POSITIVE) * 4.0).unwrap();
    let mut poisoned = |s: &mut GradScaler| {
        set_grad(&w, &[f32::NAN]);
        s.step(&mut opt);
        s.update();
    };
    poisoned(&mut s);
    poisoned(&mut s);
    assert_eq!(s.get_scale(), f64::from(f32::MIN_POSITIVE));
    let msg = panic_message(|| poisoned(&mut s));
    assert!(msg.contains("would take the scale below 1.1754944e-38") && msg.contains("the loss itself"), "{msg}");
    assert_eq!(s.get_scale(), f64::from(f32::MIN_POSITIVE));
}
