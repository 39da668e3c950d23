//! Optimizer states carry their hyper-parameters (a momentum-0.9 state is never read with
//! another momentum), refuse another kind of optimizer's state, and follow a parameter
//! that is cast or moved after some steps.

use nn_core::optim::{Adam, AdamConfig, AdamW, AdamWConfig, Optimizer, OptimizerState, ParamGroup, Sgd, SgdConfig};
use nn_core::{DType, Module, Parameter, Tensor};
use nn_layers::Linear;

/// A deterministic gradient for step `step` of a parameter of `shape`.
fn grad(step: usize, shape: &[usize], dtype: DType) -> Tensor {
    let n = shape.iter().product::<usize>();
    let v: Vec<f64> = (0..n).map(|i| ((i * 7 + step * 3) % 11) as f64 / 4.0 - 1.2).collect();
    Tensor::from_vec_f64(v, shape).to_dtype(dtype)
}

/// Steps `opt` over `params` for steps `from..to` with [`grad`]'s gradients.
fn drive(opt: &mut dyn Optimizer, params: &[Parameter], from: usize, to: usize) {
    for step in from..to {
        for p in params {
            p.set_grad(Some(grad(step, p.shape(), p.dtype())));
        }
        opt.step();
    }
}

fn params(dtype: DType) -> Vec<Parameter> {
    [5usize, 3]
        .iter()
        .map(|&n| {
            Parameter::new(Tensor::from_vec_f64((0..n).map(|i| i as f64 / 3.0 - 0.5).collect(), &[n]).to_dtype(dtype))
        })
        .collect()
}

fn bits(ps: &[Parameter]) -> Vec<Vec<u64>> {
    ps.iter().map(|p| p.to_vec_f64().iter().map(|v| v.to_bits()).collect()).collect()
}

/// An optimizer's buffers, learning rates and hyper-parameters, as bits.
type StateBits = (Vec<(String, Vec<u64>)>, Vec<u64>, Vec<Vec<(String, u64)>>);

/// Everything `load_state_dict` may change, as bits.
fn state_bits(opt: &dyn Optimizer) -> StateBits {
    let s = opt.state_dict();
    (
        s.tensors.iter().map(|(k, t)| (k.to_string(), t.to_vec_f64().iter().map(|v| v.to_bits()).collect())).collect(),
        s.lrs.iter().map(|v| v.to_bits()).collect(),
        s.hyper_params.iter().map(|h| h.iter().map(|(k, v)| (k.clone(), v.to_bits())).collect()).collect(),
    )
}

type Make = fn(Vec<(String, Parameter)>) -> Box<dyn Optimizer>;

fn named(ps: &[Parameter]) -> Vec<(String, Parameter)> {
    ps.iter().enumerate().map(|(i, p)| (format!("p{i}"), p.clone())).collect()
}

/// A run resumed by an optimizer built with other hyper-parameters continues, bit for bit,
/// as the run that saved the state: the state's momentum, betas, eps, weight decay and
/// amsgrad come with it (PyTorch restores its `param_groups`).
#[test]
fn a_loaded_state_brings_its_hyper_parameters() {
    let cases: [(&str, Make, Make); 3] = [
        (
            "sgd",
            |p| {
                let c = SgdConfig { lr: 0.05, momentum: 0.9, dampening: 0.1, weight_decay: 1e-3, nesterov: false };
                Box::new(Sgd::new(p, c))
            },
            |p| Box::new(Sgd::new(p, SgdConfig { lr: 0.05, ..Default::default() })),
        ),
        (
            "adam",
            |p| {
                let c = AdamConfig {
                    betas: (0.8, 0.95),
                    eps: 1e-6,
                    weight_decay: 0.01,
                    amsgrad: true,
                    ..Default::default()
                };
                Box::new(Adam::new(p, c))
            },
            |p| Box::new(Adam::new(p, AdamConfig::default())),
        ),
        (
            "adamw",
            |p| Box::new(AdamW::new(p, AdamWConfig { betas: (0.7, 0.9), weight_decay: 0.1, ..Default::default() })),
            |p| Box::new(AdamW::new(p, AdamWConfig { amsgrad: true, ..Default::default() })),
        ),
    ];
    for dtype in [DType::F32, DType::F64] {
        for (name, original, other) in cases {
            let ps = params(dtype);
            let mut a = original(named(&ps));
            drive(&mut *a, &ps, 0, 3);
            let state = a.state_dict();
            let at_save: Vec<Tensor> = ps.iter().map(|p| p.detach().contiguous()).collect();
            drive(&mut *a, &ps, 3, 6);

            let qs: Vec<Parameter> = at_save.into_iter().map(Parameter::new).collect();
            let mut b = other(named(&qs));
            b.load_state_dict(&state).unwrap();
            assert_eq!(b.state_dict().hyper_params, state.hyper_params, "{name}");
            drive(&mut *b, &qs, 3, 6);
            assert_eq!(bits(&qs), bits(&ps), "{name} {dtype:?}: the resumed run differs");
        }
    }
}

#[test]
fn a_state_of_another_kind_or_out_of_range_is_refused() {
    let ps = params(DType::F32);
    let adam = || Adam::new(named(&ps), AdamConfig::default());
    let sgd = || Sgd::new(named(&ps), SgdConfig { momentum: 0.9, ..Default::default() });
    let mut adam_state = adam();
    drive(&mut adam_state, &ps, 0, 1);
    let adam_state = adam_state.state_dict();
    let mut adamw_state = AdamW::new(named(&ps), AdamWConfig::default());
    drive(&mut adamw_state, &ps, 0, 1);
    let adamw_state = adamw_state.state_dict();
    let mut sgd_state = sgd();
    drive(&mut sgd_state, &ps, 0, 1);
    let sgd_state = sgd_state.state_dict();
    let edit = |s: &OptimizerState, key: &str, v: f64| {
        let mut s = s.clone();
        s.hyper_params[0].insert(key.into(), v);
        s
    };
    let cases: Vec<(Box<dyn Optimizer>, OptimizerState, &str)> = vec![
        (Box::new(AdamW::new(named(&ps), AdamWConfig::default())), adam_state.clone(), "the state is an Adam's"),
        (Box::new(adam()), adamw_state.clone(), "the state is an AdamW's (`decoupled_weight_decay` is 1)"),
        (Box::new(adam()), sgd_state.clone(), "`hyper_params[0]` has `dampening`, which this optimizer does not keep"),
        (Box::new(sgd()), adam_state.clone(), "`hyper_params[0]` has `amsgrad`, which this optimizer does not keep"),
        (Box::new(adam()), edit(&adam_state, "amsgrad", 0.5), "`hyper_params[0].amsgrad` is 0.5; a flag is 0 or 1"),
        (Box::new(adam()), edit(&adam_state, "beta1", 1.0), "the state's hyper-parameters: invalid betas (1.0, 0.999)"),
        (Box::new(adam()), edit(&adam_state, "eps", f64::NAN), "`hyper_params[0].eps` is NaN"),
        // Accepted: a dampening without Nesterov, and a state that records nothing.
        (Box::new(sgd()), edit(&sgd_state, "dampening", 0.5), ""),
        (Box::new(sgd()), edit(&edit(&sgd_state, "nesterov", 1.0), "dampening", 0.5), "Nesterov momentum requires"),
        (Box::new(sgd()), edit(&sgd_state, "momentum", -1.0), "invalid momentum -1"),
        (Box::new(sgd()), edit(&sgd_state, "initial_lr", -1.0), "`hyper_params[0].initial_lr` is -1"),
        (Box::new(sgd()), OptimizerState { hyper_params: vec![], ..sgd_state.clone() }, ""),
    ];
    for (mut opt, state, want) in cases {
        let before = state_bits(&*opt);
        let result = opt.load_state_dict(&state);
        if want.is_empty() {
            result.unwrap();
            continue;
        }
        let msg = result.unwrap_err().to_string();
        assert!(msg.contains(want), "{msg}\nwanted: {want}");
        assert!(state_bits(&*opt) == before, "a refused state changed the optimizer: {msg}");
    }
    // A state missing a name, and one whose groups disagree on an optimizer-wide value.
    let mut s = sgd_state.clone();
    s.hyper_params[0].remove("momentum");
    let msg = sgd().load_state_dict(&s).unwrap_err().to_string();
    assert!(msg.contains("`hyper_params[0]` has no `momentum`"), "{msg}");
    let groups = || vec![ParamGroup::new(named(&ps[..1])), ParamGroup::with_prefix("g", named(&ps[1..]))];
    let mut two = Sgd::new(groups(), SgdConfig { momentum: 0.9, ..Default::default() });
    let mut s = two.state_dict();
    s.hyper_params[1].insert("momentum".into(), 0.5);
    let msg = two.load_state_dict(&s).unwrap_err().to_string();
    assert!(msg.contains("`hyper_params[1].momentum` is 0.5, group 0's 0.9"), "{msg}");
    s.hyper_params.pop();
    let msg = two.load_state_dict(&s).unwrap_err().to_string();
    assert!(msg.contains("`hyper_params` has 1 parameter groups, this optimizer 2"), "{msg}");
}

/// A state that records no hyper-parameters (saved before they were, or built by hand)
/// keeps the optimizer's own, and buffers those would not read are refused: momentum
/// buffers are never silently dropped by an `Sgd` without momentum.
#[test]
fn a_state_without_hyper_parameters_keeps_the_optimizers() {
    let ps = params(DType::F32);
    let mut a = Sgd::new(named(&ps), SgdConfig { momentum: 0.9, ..Default::default() });
    drive(&mut a, &ps, 0, 2);
    let state = OptimizerState { hyper_params: vec![], ..a.state_dict() };
    let mut plain = Sgd::new(named(&ps), SgdConfig::default());
    let msg = plain.load_state_dict(&state).unwrap_err().to_string();
    assert!(msg.contains("but this Sgd has momentum 0 and keeps no buffers"), "{msg}");
    let mut other = Sgd::new(named(&ps), SgdConfig { momentum: 0.5, weight_decay: 0.1, ..Default::default() });
    other.load_state_dict(&state).unwrap();
    let h = &other.state_dict().hyper_params[0];
    assert_eq!((h["momentum"], h["weight_decay"]), (0.5, 0.1));
}

/// A module cast to f64 after some Adam steps goes on with its moments (cast) and its
/// step count: exactly as an optimizer that loaded the state for the f64 parameters.
/// Moments reset to zero under the old step count (bias correction about 1) would make the
/// next update about 3x the learning rate.
#[test]
fn moments_follow_a_module_cast_after_some_steps() {
    let cases: [(&str, Make); 3] = [
        ("adam", |p| Box::new(Adam::new(p, AdamConfig { lr: 0.01, ..Default::default() }))),
        ("adamw amsgrad", |p| Box::new(AdamW::new(p, AdamWConfig { amsgrad: true, ..Default::default() }))),
        ("sgd dampening", |p| {
            Box::new(Sgd::new(p, SgdConfig { lr: 0.1, momentum: 0.9, dampening: 0.5, ..Default::default() }))
        }),
    ];
    for (name, make) in cases {
        let mut layer = Linear::new(3, 2);
        let ps: Vec<Parameter> = layer.parameters();
        let mut opt = make(layer.named_parameters());
        drive(&mut *opt, &ps, 0, 3);
        let state = opt.state_dict();

        // The reference: fresh f64 parameters with the same values, loading the state.
        let qs: Vec<Parameter> = ps.iter().map(|p| Parameter::new(p.detach().to_dtype(DType::F64))).collect();
        let names: Vec<(String, Parameter)> =
            layer.named_parameters().into_iter().zip(&qs).map(|((n, _), q)| (n, q.clone())).collect();
        let mut reference = make(names);
        reference.load_state_dict(&state).unwrap();
        drive(&mut *reference, &qs, 3, 5);

        layer.to_dtype(DType::F64);
        drive(&mut *opt, &ps, 3, 5);
        assert_eq!(bits(&ps), bits(&qs), "{name}");
        let moved = opt.state_dict();
        assert!(moved.tensors.iter().all(|(_, t)| t.dtype() == DType::F64), "{name}: the state follows the dtype");
    }
}

/// Hyper-parameters `load_state_dict` refuses are refused when the optimizer is built too:
/// a group's negative or NaN rate or weight decay, an infinite `eps` (Adam a no-op) or rate,
/// a NaN dampening. Accepted, each would step silently and write a state the run could
/// not resume from.
#[test]
fn hyper_parameters_are_checked_when_the_optimizer_is_built() {
    let w = || vec![("w".to_string(), Parameter::new(Tensor::ones(&[2])))];
    let bad_groups = [
        (ParamGroup::new(w()).lr(-0.1), "invalid learning rate -0.1 in group 0"),
        (ParamGroup::new(w()).lr(f64::NAN), "invalid learning rate NaN in group 0"),
        (ParamGroup::new(w()).weight_decay(f64::NAN), "invalid weight_decay NaN in group 0"),
    ];
    for (group, want) in bad_groups {
        let e = Sgd::try_new(vec![group], SgdConfig::default()).err().expect("refused").to_string();
        assert!(e.contains(want), "{e}");
    }
    let e = Adam::try_new(w(), AdamConfig { eps: f64::INFINITY, ..Default::default() }).err().unwrap().to_string();
    assert!(e.contains("invalid epsilon inf"), "{e}");
    let e = Sgd::try_new(w(), SgdConfig { lr: f64::INFINITY, ..Default::default() }).err().unwrap().to_string();
    assert!(e.contains("invalid learning rate inf"), "{e}");
    let e = Sgd::try_new(w(), SgdConfig { dampening: f64::NAN, ..Default::default() }).err().unwrap().to_string();
    assert!(e.contains("invalid dampening NaN"), "{e}");
}

/// A step that panics on a parameter's dtype (a model converted to f16) leaves Adam's
/// state as it was: taking the moments out first and dropping them, with the step count
/// kept, would restart the next step from zero moments with an advanced bias correction.
#[test]
fn a_refused_adam_step_keeps_the_moments() {
    use nn_core::Forward;
    let mut l = Linear::new(2, 2);
    let mut opt = Adam::new(l.named_parameters(), AdamConfig::default());
    let step = |l: &Linear, opt: &mut Adam| {
        opt.zero_grad();
        l.forward(&Tensor::ones(&[1, 2]).to_dtype(l.weight.dtype())).sum().backward();
        opt.step();
    };
    step(&l, &mut opt);
    let before = opt.state_dict();
    l.to_dtype(DType::F16);
    l.forward(&Tensor::ones(&[1, 2]).to_dtype(DType::F16)).sum().backward();
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| opt.step())).unwrap_err();
    assert!(e.downcast_ref::<String>().unwrap().contains("parameters must be f32 or f64, got f16"));
    let after = opt.state_dict();
    assert_eq!(after.tensors.keys().collect::<Vec<_>>(), before.tensors.keys().collect::<Vec<_>>());
}

/// `clip_grad_norm_` with a NaN gradient makes every gradient NaN (PyTorch's result), where
/// the others stepped unclipped; a NaN or negative `max_norm` is refused.
#[test]
fn clipping_a_nan_norm_is_not_a_no_op() {
    use nn_core::optim::clip_grad_norm_;
    let (a, b) = (Parameter::new(Tensor::zeros(&[2])), Parameter::new(Tensor::zeros(&[1])));
    a.set_grad(Some(Tensor::from_vec(vec![300.0, 400.0], &[2])));
    b.set_grad(Some(Tensor::from_vec(vec![f32::NAN], &[1])));
    assert!(clip_grad_norm_(&[a.clone(), b], 1.0).is_nan());
    assert!(a.grad().unwrap().to_vec().iter().all(|v| v.is_nan()));
    a.set_grad(Some(Tensor::from_vec(vec![f32::INFINITY, 1.0], &[2])));
    assert_eq!(clip_grad_norm_(std::slice::from_ref(&a), 1.0), f64::INFINITY);
    assert_eq!(a.grad().unwrap().to_vec()[1], 0.0);
    for bad in [f64::NAN, -1.0] {
        let e = std::panic::catch_unwind(|| clip_grad_norm_(&[], bad)).unwrap_err();
        assert!(e.downcast_ref::<String>().unwrap().contains("max_norm must be non-negative"));
    }
}

/// Two `Parameter`s on one storage (one tensor wrapped twice) would both be stepped: a
/// double update with two sets of state. Refused as the same parameter is.
#[test]
fn two_parameters_on_one_storage_are_refused() {
    let t = Tensor::ones(&[2]);
    let (a, b) = (Parameter::new(t.clone()), Parameter::new(t));
    let e = Sgd::try_new(vec![("a".to_string(), a), ("b".to_string(), b)], SgdConfig::default()).err().unwrap();
    assert!(e.to_string().contains("the same parameter (or two handles on one storage)"), "{e}");
}
