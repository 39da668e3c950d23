//! Module hooks: the recipes PyTorch users rely on (activation capture, NaN-gradient
//! detection per layer, per-layer gradient clipping, input normalisation), removal,
//! ordering, several uses of one module, registration by path and on a whole tree.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use nn_core::{manual_seed, Error, Forward, Module, ModuleBase, Tensor};
use nn_core::{Compute, Hooks};
use nn_layers::{Linear, ReLU, Sequential};

/// A user module that opts into hooks with its `#[base]` field.
#[derive(Module)]
struct Mlp {
    #[module]
    fc1: Linear,
    #[module]
    act: ReLU,
    #[module]
    fc2: Linear,
    #[base]
    base: ModuleBase,
}

impl Mlp {
    fn new() -> Self {
        Mlp { fc1: Linear::new(4, 8), act: ReLU::new(), fc2: Linear::new(8, 3), base: ModuleBase::new() }
    }
}

impl Compute for Mlp {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        self.fc2.forward(&self.act.forward(&self.fc1.forward(x)))
    }
}

#[test]
fn capture_every_named_activation() {
    manual_seed(0);
    let model = Mlp::new();
    let acts: Arc<Mutex<BTreeMap<String, Vec<usize>>>> = Arc::default();
    let handles = model
        .as_dyn()
        .register_forward_hooks_all(|name, _| {
            let acts = acts.clone();
            let name = if name.is_empty() { "<root>".to_string() } else { name.to_string() };
            Some(Arc::new(move |_x: &Tensor, y: &Tensor| {
                acts.lock().unwrap().insert(name.clone(), y.shape().to_vec());
                None
            }))
        })
        .unwrap();
    model.forward(&Tensor::ones(&[2, 4]));
    let got = acts.lock().unwrap().clone();
    let want: BTreeMap<String, Vec<usize>> =
        [("<root>", vec![2, 3]), ("fc1", vec![2, 8]), ("act", vec![2, 8]), ("fc2", vec![2, 3])]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
    assert_eq!(got, want);
    // As in PyTorch, hooks stay until removed: dropping the handles keeps them ...
    let ids: Vec<bool> = handles.iter().map(|h| h.is_registered()).collect();
    assert_eq!(ids, [true; 4]);
    acts.lock().unwrap().clear();
    model.forward(&Tensor::ones(&[2, 4]));
    assert_eq!(acts.lock().unwrap().len(), 4, "hooks must not vanish");
    // ... and `remove()` takes each away.
    for h in handles {
        h.remove();
    }
    acts.lock().unwrap().clear();
    model.forward(&Tensor::ones(&[2, 4]));
    assert!(acts.lock().unwrap().is_empty());
}

#[test]
fn nan_gradient_detector_names_the_layer() {
    manual_seed(0);
    let model = Mlp::new();
    // Poison fc2's weight so that gradients below it become NaN.
    nn_core::no_grad(|| model.fc2.weight.fill_(f64::NAN));
    let first_nan: Arc<Mutex<Vec<String>>> = Arc::default();
    let _handles = model
        .as_dyn()
        .register_full_backward_hooks_all(|name, _| {
            let log = first_nan.clone();
            let name = name.to_string();
            Some(Arc::new(move |gi: Option<&Tensor>, _go: &Tensor| {
                if let Some(g) = gi {
                    if g.to_vec().iter().any(|v| v.is_nan()) {
                        log.lock().unwrap().push(name.clone());
                    }
                }
                None
            }))
        })
        .unwrap();
    let x = Tensor::ones(&[2, 4]).requires_grad_(true);
    model.forward(&x).sum().backward();
    // Backward order: fc2 is the first layer whose input gradient is NaN.
    let log = first_nan.lock().unwrap().clone();
    assert_eq!(log.first().map(String::as_str), Some("fc2"), "{log:?}");
    assert!(log.contains(&"fc1".to_string()));
}

#[test]
fn per_layer_gradient_clipping_through_a_backward_hook() {
    manual_seed(0);
    let model = Mlp::new();
    let x = Tensor::ones(&[2, 4]).requires_grad_(true);
    let unclipped = {
        model.forward(&x).sum().backward();
        x.grad().unwrap().to_vec()
    };
    x.zero_grad();
    model.zero_grad();
    let h = model.fc1.register_full_backward_hook(|gi, _| gi.map(|g| g.clamp(-0.01, 0.01))).unwrap();
    model.forward(&x).sum().backward();
    let clipped = x.grad().unwrap().to_vec();
    assert!(clipped.iter().all(|v| v.abs() <= 0.01 + 1e-9));
    assert!(unclipped.iter().any(|v| v.abs() > 0.01), "the test needs gradients that get clipped");
    let expect: Vec<f32> = unclipped.iter().map(|v| v.clamp(-0.01, 0.01)).collect();
    assert_eq!(clipped, expect);
    h.remove();
    x.zero_grad();
    model.forward(&x).sum().backward();
    assert_eq!(x.grad().unwrap().to_vec(), unclipped, "removing the hook stops it");
}

#[test]
fn pre_hook_normalises_input_and_hooks_fire_in_order() {
    let model = Mlp::new();
    let order: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let (o1, o2, o3) = (order.clone(), order.clone(), order.clone());
    let _a = model
        .register_forward_pre_hook(move |x| {
            o1.lock().unwrap().push("pre");
            let mean = x.mean_dim(-1, true);
            let std = x.var_dims(&[-1], 0, true).sqrt() + 1e-5;
            Some((x - &mean) / std)
        })
        .unwrap();
    let _b = model
        .register_forward_hook(move |_, _| {
            o2.lock().unwrap().push("fwd1");
            None
        })
        .unwrap();
    let _c = model
        .register_forward_hook(move |_, y| {
            o3.lock().unwrap().push("fwd2");
            Some(y * 0.0)
        })
        .unwrap();
    let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[1, 4]);
    let y = model.forward(&x);
    assert_eq!(*order.lock().unwrap(), ["pre", "fwd1", "fwd2"]);
    assert_eq!(y.to_vec(), vec![0.0; 3], "a forward hook may replace the output");
    // The normalised input is what fc1 saw: scaling the input does not change the output.
    drop(_c);
    let y1 = model.forward(&x).to_vec();
    let y2 = model.forward(&(&x * 10.0)).to_vec();
    nn_core::testing::assert_close(&y1, &y2, 1e-5, 1e-4);
}

#[test]
fn a_module_used_twice_fires_twice() {
    let shared = Linear::new(3, 3);
    let fwd = Arc::new(Mutex::new(0));
    let bwd = Arc::new(Mutex::new(0));
    let (f, b) = (fwd.clone(), bwd.clone());
    let _h1 = shared
        .register_forward_hook(move |_, _| {
            *f.lock().unwrap() += 1;
            None
        })
        .unwrap();
    let _h2 = shared
        .register_full_backward_hook(move |gi, go| {
            assert_eq!(go.shape(), &[2, 3]);
            assert_eq!(gi.unwrap().shape(), &[2, 3]);
            *b.lock().unwrap() += 1;
            None
        })
        .unwrap();
    let x = Tensor::ones(&[2, 3]).requires_grad_(true);
    let y = shared.forward(&shared.forward(&x));
    y.sum().backward();
    assert_eq!((*fwd.lock().unwrap(), *bwd.lock().unwrap()), (2, 2));
}

#[test]
fn backward_hook_on_a_first_layer_sees_no_input_gradient() {
    let lin = Linear::new(3, 2);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let _h = lin
        .register_full_backward_hook(move |gi, go| {
            s.lock().unwrap().push((gi.is_some(), go.shape().to_vec()));
            None
        })
        .unwrap();
    lin.forward(&Tensor::ones(&[4, 3])).sum().backward(); // data input: no grad
    assert_eq!(*seen.lock().unwrap(), vec![(false, vec![4, 2])]);
}

/// A replacement from a hook of a first layer (its input needs no gradient) would have
/// nowhere to go: refused during backward, as PyTorch does, not silently dropped.
#[test]
fn a_replacement_gradient_with_nowhere_to_go_is_refused() {
    let lin = Linear::new(3, 2);
    let _h = lin.register_full_backward_hook(|_, go| Some(go * 0.0)).unwrap();
    let loss = lin.forward(&Tensor::ones(&[4, 3])).sum();
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loss.backward())).unwrap_err();
    let msg = e
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .or_else(|| e.downcast_ref::<std::sync::Arc<str>>().map(|s| s.to_string()))
        .unwrap_or_else(|| format!("a payload of another type: {:?}", e.type_id()));
    assert!(msg.contains("returned a replacement gradient, which would be dropped"), "{msg}");
}

#[test]
fn registration_by_path_persistence_and_errors() {
    let net = Sequential::new().add(Linear::new(2, 2)).add(ReLU::new()).add(Linear::new(2, 1));
    let count = Arc::new(Mutex::new(0));
    let c = count.clone();
    net.as_dyn()
        .register_forward_hook_at("2", move |_, _| {
            *c.lock().unwrap() += 1;
            None
        })
        .unwrap();
    net.forward(&Tensor::ones(&[1, 2]));
    net.forward(&Tensor::ones(&[1, 2]));
    assert_eq!(*count.lock().unwrap(), 2, "a hook whose handle was dropped stays registered");
    let e = net.as_dyn().register_forward_hook_at("5", |_, _| None).unwrap_err();
    assert!(matches!(e, Error::SubmoduleNotFound { .. }), "{e}");

    #[derive(Module)]
    struct NoBase {
        #[module]
        fc: Linear,
    }
    let m = NoBase { fc: Linear::new(1, 1) };
    let e = m.register_forward_hook(|_, _| None).unwrap_err().to_string();
    assert!(e.contains("`NoBase` has no forward of its own, so a hook on it would never fire"), "{e}");
    // Its sub-modules still can.
    m.fc.register_forward_hook(|_, _| None).unwrap().remove();
}

/// A module of two outputs.
#[derive(Module)]
struct TwoOut {
    #[module]
    fc: Linear,
    #[base]
    base: ModuleBase,
}

impl Compute for TwoOut {
    type Input = Tensor;
    type Output = (Tensor, Tensor);
    fn compute(&self, x: &Tensor) -> (Tensor, Tensor) {
        let h = self.fc.forward(x);
        (h.relu(), &h * 2.0)
    }
}

/// The loss uses the second output only (an RNN's `h_n`): the full backward hook still
/// fires, with the input's gradient and a zero gradient for the first output (PyTorch
/// passes `None` there), rather than being skipped silently.
#[test]
fn a_backward_hook_fires_when_only_a_later_output_gets_a_gradient() {
    manual_seed(0);
    let m = TwoOut { fc: Linear::new(3, 2), base: ModuleBase::new() };
    type Seen = Vec<(Vec<f32>, Vec<f32>)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let s = seen.clone();
    let _h = m
        .register_full_backward_hook(move |gi, go| {
            s.lock().unwrap().push((gi.unwrap().to_vec(), go.to_vec()));
            None
        })
        .unwrap();
    let x = Tensor::ones(&[1, 3]).requires_grad_(true);
    let (_, second) = m.forward(&x);
    second.sum().backward();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "the hook fired once");
    assert_eq!(seen[0].0, x.grad().unwrap().to_vec());
    assert_eq!(seen[0].1, vec![0.0, 0.0]);
}

/// A module type only the global-hook test runs, so that the hooks it registers on every
/// module (the whole test process) can tell its calls from other tests' by type name.
#[derive(Module)]
struct GlobalHookProbe {
    #[module]
    inner: Linear,
    #[base]
    base: ModuleBase,
}

impl Compute for GlobalHookProbe {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        self.inner.forward(x) * 2.0
    }
}

/// Global hooks (PyTorch's `register_module_forward_pre_hook` and friends) fire on every
/// module that runs, before the module's own hooks of the same kind, with the module, until
/// removed; the global backward hook gets the module's type name and may replace
/// `grad_input`.
#[test]
fn global_hooks_fire_on_every_module_before_its_own() {
    use nn_core::hooks::{
        register_module_forward_hook, register_module_forward_pre_hook, register_module_full_backward_hook,
    };
    manual_seed(0);
    let probe = GlobalHookProbe { inner: Linear::new(2, 2), base: ModuleBase::new() };
    // The gradient through the module without hooks, for reference.
    let x0 = Tensor::ones(&[1, 2]).requires_grad_(true);
    probe.forward(&x0).sum().backward();
    let plain = x0.grad().unwrap().to_vec();
    let y_plain = probe.forward(&Tensor::ones(&[1, 2])).to_vec();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let ours = |t: &str| t == "GlobalHookProbe";
    let (l1, l2, l3, l4, l5) = (log.clone(), log.clone(), log.clone(), log.clone(), log.clone());
    let pre = register_module_forward_pre_hook(move |m, _| {
        if ours(m.type_name()) {
            l1.lock().unwrap().push("global pre".into());
        }
        None
    });
    let fwd = register_module_forward_hook(move |m, _, y| {
        if ours(m.type_name()) {
            l2.lock().unwrap().push(format!("global fwd {:?}", y.shape()));
            // The module itself: its parameters, and a downcast.
            assert_eq!(m.named_parameters()[0].0, "inner.weight");
            assert!(m.as_any().downcast_ref::<GlobalHookProbe>().is_some());
            return Some(y * 3.0);
        }
        None
    });
    let bwd = register_module_full_backward_hook(move |type_name, gi, _| {
        if ours(type_name) {
            l3.lock().unwrap().push("global bwd".into());
            return gi.map(|g| g * 10.0);
        }
        None
    });
    let own_pre = probe
        .register_forward_pre_hook(move |_| {
            l4.lock().unwrap().push("own pre".into());
            None
        })
        .unwrap();
    let own_fwd = probe
        .register_forward_hook(move |_, y| {
            // Sees the global hook's replacement.
            l5.lock().unwrap().push(format!("own fwd {:?}", y.shape()));
            None
        })
        .unwrap();
    let x = Tensor::ones(&[1, 2]).requires_grad_(true);
    let y = probe.forward(&x);
    let tripled: Vec<f32> = y_plain.iter().map(|v| v * 3.0).collect();
    assert_eq!(y.to_vec(), tripled, "the global forward hook's replacement is the output");
    (&y + &x).sum().backward();
    assert_eq!(
        *log.lock().unwrap(),
        ["global pre", "own pre", "global fwd [1, 2]", "own fwd [1, 2]", "global bwd"],
        "PyTorch's order: global hooks before the module's own"
    );
    // Through the module: 3x (the forward hook) the plain gradient, then 10x (the global
    // backward hook's replacement); plus 1 from `+ x`.
    let want: Vec<f32> = plain.iter().map(|g| g * 30.0 + 1.0).collect();
    nn_core::testing::assert_close(&x.grad().unwrap().to_vec(), &want, 1e-5, 1e-5);
    for h in [pre, fwd, bwd, own_pre, own_fwd] {
        assert!(h.is_registered());
        h.remove();
    }
    log.lock().unwrap().clear();
    let y = probe.forward(&Tensor::ones(&[1, 2]));
    assert_eq!(y.to_vec(), y_plain, "removed: no longer replaced");
    assert!(log.lock().unwrap().is_empty());
}

/// Records `tag` in `log` and returns nothing (the hooks of the ordering tests).
fn tagger(log: &Arc<Mutex<Vec<&'static str>>>, tag: &'static str) -> impl Fn() + Send + Sync + 'static {
    let log = log.clone();
    move || log.lock().unwrap().push(tag)
}

#[test]
fn prepended_hooks_fire_first_as_in_pytorch() {
    use nn_core::module::HookConfig;
    let lin = Linear::new(2, 2);
    let m = lin.hook_base().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let first = HookConfig::prepend();
    let (a, b, c) = (tagger(&log, "pre a"), tagger(&log, "pre b"), tagger(&log, "pre c (prepended)"));
    m.register_forward_pre_hook(move |_| {
        a();
        None
    });
    m.register_forward_pre_hook(move |_| {
        b();
        None
    });
    m.register_forward_pre_hook_with(first, move |_| {
        c();
        None
    });
    let (d, e) = (tagger(&log, "fwd d"), tagger(&log, "fwd e (prepended)"));
    m.register_forward_hook(move |_, _| {
        d();
        None
    });
    m.register_forward_hook_with(first, move |_, _| {
        e();
        None
    });
    let (f, g) = (tagger(&log, "bwd f"), tagger(&log, "bwd g (prepended)"));
    m.register_full_backward_hook(move |_, _| {
        f();
        None
    });
    m.register_full_backward_hook_with(first, move |_, _| {
        g();
        None
    });
    let (h, i) = (tagger(&log, "bwd pre h"), tagger(&log, "bwd pre i (prepended)"));
    m.register_full_backward_pre_hook(move |_| {
        h();
        None
    });
    m.register_full_backward_pre_hook_with(first, move |_| {
        i();
        None
    });
    lin.forward(&Tensor::ones(&[1, 2]).requires_grad_(true)).sum().backward();
    // PyTorch's order: prepended first within each kind; backward pre-hooks when
    // grad_output arrives, full backward hooks when grad_input is ready.
    assert_eq!(
        *log.lock().unwrap(),
        [
            "pre c (prepended)",
            "pre a",
            "pre b",
            "fwd e (prepended)",
            "fwd d",
            "bwd pre i (prepended)",
            "bwd pre h",
            "bwd g (prepended)",
            "bwd f"
        ]
    );
}

#[test]
fn a_backward_pre_hook_replaces_grad_output_for_the_module_and_its_backward_hooks() {
    manual_seed(5);
    let m = Linear::new(3, 2);
    let x = Tensor::randn(&[4, 3]).requires_grad_(true);
    m.forward(&x).sum().backward();
    let (gw, gx) = (m.weight.grad().unwrap().to_vec(), x.grad().unwrap().to_vec());
    m.zero_grad();
    x.set_grad(None);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let pre = m.register_full_backward_pre_hook(|g| Some(g * 2.0)).unwrap();
    m.register_full_backward_hook(move |_, go| {
        s.lock().unwrap().push(go.to_vec());
        None
    })
    .unwrap();
    m.forward(&x).sum().backward();
    let twice = |v: &[f32]| v.iter().map(|g| g * 2.0).collect::<Vec<_>>();
    assert_eq!(m.weight.grad().unwrap().to_vec(), twice(&gw));
    assert_eq!(x.grad().unwrap().to_vec(), twice(&gx));
    assert_eq!(*seen.lock().unwrap(), [vec![2.0; 8]], "the full backward hook sees the replaced grad_output");
    // Removed, it is gone; the module's input needing no gradient still runs pre-hooks.
    pre.remove();
    m.zero_grad();
    let fired = Arc::new(Mutex::new(0));
    let f = fired.clone();
    m.register_full_backward_pre_hook(move |_| {
        *f.lock().unwrap() += 1;
        None
    })
    .unwrap();
    m.forward(&Tensor::ones(&[1, 3])).sum().backward();
    assert_eq!(*fired.lock().unwrap(), 1);
    assert!(m.weight.grad().unwrap().to_vec().iter().all(|g| *g == 1.0), "no doubling once removed");
}

/// Panics on an input with a negative first value.
#[derive(Module)]
struct Fragile {
    #[base]
    base: ModuleBase,
}

impl Compute for Fragile {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        assert!(x.to_vec()[0] >= 0.0, "Fragile: a negative input");
        x * 2.0
    }
}

#[test]
fn an_always_call_hook_fires_when_the_forward_panics_and_the_panic_goes_on() {
    let m = Fragile { base: ModuleBase::new() };
    let log = Arc::new(Mutex::new(Vec::new()));
    let (l1, l2) = (log.clone(), log.clone());
    m.register_forward_hook(move |_, _| {
        l1.lock().unwrap().push("plain".to_string());
        None
    })
    .unwrap();
    m.register_forward_hook_always_call(move |_, y| {
        l2.lock().unwrap().push(format!("always {:?}", y.map(Tensor::to_vec)));
        y.map(|y| y + 1.0) // may replace an output that exists
    })
    .unwrap();
    assert_eq!(m.forward(&Tensor::ones(&[1])).to_vec(), [3.0]);
    let err =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.forward(&Tensor::full(&[1], -1.0)))).unwrap_err();
    let msg = err.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| err.downcast_ref::<String>().cloned());
    assert_eq!(msg.as_deref(), Some("Fragile: a negative input"), "the forward's own panic reaches the caller");
    assert_eq!(*log.lock().unwrap(), ["plain", "always Some([2.0])", "always None"]);
}

#[test]
fn an_always_call_hook_fires_when_an_earlier_hook_panics() {
    let m = Fragile { base: ModuleBase::new() };
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    m.register_forward_hook(|_, _| panic!("a hook fails")).unwrap();
    m.register_forward_hook_always_call(move |_, y| {
        l.lock().unwrap().push(y.is_some());
        None
    })
    .unwrap();
    assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.forward(&Tensor::ones(&[1])))).is_err());
    assert_eq!(*log.lock().unwrap(), [false], "run once, without an output");
}

#[test]
fn a_panicking_hook_is_named_with_its_kind_and_module_and_the_module_is_unchanged() {
    let message = |f: &mut dyn FnMut()| {
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
        err.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    let m = Linear::new(2, 2);
    let pre = m.register_forward_pre_hook(|_| panic!("no inputs today")).unwrap();
    let msg = message(&mut || drop(m.forward(&Tensor::ones(&[1, 2]))));
    assert_eq!(msg, "forward pre-hook of `Linear` panicked: no inputs today");
    // The hook is still registered (a hook stays until removed) and the mode is unchanged.
    assert!(pre.is_registered() && m.is_training());
    pre.remove();
    let h = m.register_forward_hook(|_, _| panic!("bad output")).unwrap();
    let msg = message(&mut || drop(m.forward(&Tensor::ones(&[1, 2]))));
    assert_eq!(msg, "forward hook of `Linear` panicked: bad output");
    h.remove();
    m.register_full_backward_hook(|_, _| panic!("bad gradient")).unwrap();
    let y = m.forward(&Tensor::ones(&[1, 2]).requires_grad_(true));
    let msg = message(&mut || y.sum().backward());
    assert!(msg.contains("full backward hook of `Linear` panicked: bad gradient"), "{msg}");
}
