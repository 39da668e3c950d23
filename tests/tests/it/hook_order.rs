//! Hooks at PyTorch's depth (issue 53, item 2): every tensor of a tuple input and output,
//! the module's path, `None` where no gradient flows, and PyTorch's call order, checked
//! against `tests/fixtures/pytorch/hook_order.json` (written by `hook_order.py` from
//! PyTorch 2.15 for the same model, weights and hooks).

use std::sync::{Arc, Mutex};

use nn_core::hooks::{register_module_forward_hook_tensors, register_module_forward_pre_hook_tensors};
use nn_core::module::HookCall;
use nn_core::{Compute, Forward, HookConfig, HookHandle, Hooks, Module, ModuleBase, StateDict, Tensor};
use nn_layers::{Linear, Tanh};

#[derive(Module)]
struct Split {
    #[base]
    base: ModuleBase,
}

impl Compute for Split {
    type Input = Tensor;
    type Output = (Tensor, Tensor);
    fn compute(&self, h: &Tensor) -> (Tensor, Tensor) {
        (h * 2.0, h * 3.0)
    }
}

#[derive(Module)]
struct Mix {
    #[base]
    base: ModuleBase,
}

impl Compute for Mix {
    type Input = (Tensor, Tensor);
    type Output = Tensor;
    fn compute(&self, (p, y): &(Tensor, Tensor)) -> Tensor {
        p * &y.sigmoid()
    }
}

#[derive(Module)]
struct Body {
    #[module]
    fc: Linear,
    #[module]
    act: Tanh,
    #[module]
    split: Split,
    #[base]
    base: ModuleBase,
}

impl Compute for Body {
    type Input = Tensor;
    type Output = (Tensor, Tensor);
    fn compute(&self, x: &Tensor) -> (Tensor, Tensor) {
        let h = self.act.forward(&self.fc.forward(x));
        let (a, b) = self.split.forward(&h);
        (self.act.forward(&a), b)
    }
}

#[derive(Module)]
struct Net {
    #[module]
    body: Body,
    #[module]
    mix: Mix,
    #[module]
    head: Linear,
    #[base]
    base: ModuleBase,
}

impl Compute for Net {
    type Input = (Tensor, Tensor);
    type Output = (Tensor, Tensor);
    fn compute(&self, (x, y): &(Tensor, Tensor)) -> (Tensor, Tensor) {
        let (p, b) = self.body.forward(x);
        let c = self.mix.forward((&p, y));
        (self.head.forward(&c), b)
    }
}

/// The fixture's weights: `((arange(n) + offset) % 7 - 3) / 10`.
fn arange_param(shape: &[usize], offset: usize) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec_f64((0..n).map(|i| (((i + offset) % 7) as f64 - 3.0) / 10.0).collect(), shape)
}

fn net() -> Net {
    let mut net = Net {
        body: Body {
            fc: Linear::new(4, 4),
            act: Tanh::new(),
            split: Split { base: ModuleBase::new() },
            base: ModuleBase::new(),
        },
        mix: Mix { base: ModuleBase::new() },
        head: Linear::new(4, 2),
        base: ModuleBase::new(),
    };
    net.to_dtype(nn_core::DType::F64);
    let sd: StateDict = [
        ("body.fc.weight", arange_param(&[4, 4], 0)),
        ("body.fc.bias", arange_param(&[4], 1)),
        ("head.weight", arange_param(&[2, 4], 2)),
        ("head.bias", arange_param(&[2], 3)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    net.load_state_dict(&sd, true).unwrap();
    net
}

fn slots(ts: &[Option<Tensor>]) -> String {
    ts.iter().map(|t| if t.is_some() { 'T' } else { 'N' }).collect()
}

fn fixture() -> serde_json::Value {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/pytorch/hook_order.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

#[test]
fn call_order_matches_pytorch() {
    let net = net();
    // Global hooks see every module of the process, other tests' on other threads too:
    // these record this thread's calls only.
    let me = std::thread::current().id();
    let mine = move || std::thread::current().id() == me;
    let events: Arc<Mutex<Vec<String>>> = Arc::default();
    let path = |call: &HookCall<'_>| call.path().expect("every module of the model has a path").to_string();
    let mut handles: Vec<HookHandle> = Vec::new();
    let log = events.clone();
    handles.push(register_module_forward_pre_hook_tensors(HookConfig::default(), move |call, _| {
        if mine() {
            log.lock().unwrap().push(format!("forward_pre {}", path(call)));
        }
        None
    }));
    let log = events.clone();
    handles.push(register_module_forward_hook_tensors(HookConfig::default(), move |call, _, _| {
        if mine() {
            log.lock().unwrap().push(format!("forward {}", path(call)));
        }
        None
    }));
    for (p, m) in net.named_modules() {
        let (log, p2) = (events.clone(), p.clone());
        handles.push(
            m.register_full_backward_pre_hook_tensors(HookConfig::default(), move |call, go| {
                assert_eq!(call.path(), Some(p2.as_str()));
                log.lock().unwrap().push(format!("backward_pre {p2} go={}", slots(go)));
                None
            })
            .unwrap(),
        );
        let log = events.clone();
        handles.push(
            m.register_full_backward_hook_tensors(HookConfig::default(), move |_, gi, go| {
                log.lock().unwrap().push(format!("backward {p} gi={} go={}", slots(gi), slots(go)));
                None
            })
            .unwrap(),
        );
    }
    let log = events.clone();
    handles.push(
        net.body
            .register_forward_pre_hook(move |_| {
                log.lock().unwrap().push("own_forward_pre_1 body".into());
                None
            })
            .unwrap(),
    );
    let log = events.clone();
    handles.push(net.body.hook_base().unwrap().register_forward_pre_hook_with(HookConfig::prepend(), move |_| {
        log.lock().unwrap().push("own_forward_pre_0 body".into());
        None
    }));
    let log = events.clone();
    handles.push(
        net.body
            .register_forward_hook(move |_, _| {
                log.lock().unwrap().push("own_forward body".into());
                None
            })
            .unwrap(),
    );
    // Mix: double its second input (PyTorch: `(args[0], 2 * args[1])`), halve its first
    // grad_input (PyTorch: `(gi[0] / 2,) + gi[1:]`).
    handles.push(
        net.mix
            .register_forward_pre_hook_tensors(HookConfig::default(), |_, xs| {
                Some(vec![xs[0].clone(), xs[1].as_ref().map(|y| y * 2.0)])
            })
            .unwrap(),
    );
    handles.push(
        net.mix
            .register_full_backward_hook_tensors(HookConfig::default(), |_, gi, _| {
                Some(vec![gi[0].as_ref().map(|g| g * 0.5), gi[1].clone()])
            })
            .unwrap(),
    );

    let x =
        (Tensor::arange_dtype(0.0, 8.0, 1.0, nn_core::DType::F64).reshape(&[2, 4]) / 8.0 - 0.4).requires_grad_(true);
    let y = Tensor::arange_dtype(0.0, 8.0, 1.0, nn_core::DType::F64).reshape(&[2, 4]) / 4.0 - 1.0;
    let (out, _b) = net.forward((&x, &y));
    events.lock().unwrap().push("loss".into());
    out.sum().backward();
    handles.into_iter().for_each(HookHandle::remove);

    let want = fixture();
    let want_events: Vec<String> =
        want["events"].as_array().unwrap().iter().map(|e| e.as_str().unwrap().to_string()).collect();
    assert_eq!(*events.lock().unwrap(), want_events);
    let close = |got: Vec<f64>, want: Vec<f64>| {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-12, "{got:?} vs PyTorch's {want:?}");
        }
    };
    close(out.to_vec_of::<f64>(), floats(&want["out"]));
    close(x.grad().unwrap().to_vec_of::<f64>(), floats(&want["x_grad"]));
}

fn panic_text(r: std::thread::Result<impl Sized>) -> String {
    let Err(p) = r else { panic!("expected a panic") };
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

#[test]
fn hooks_see_and_replace_every_field_of_an_input_struct() {
    use nn_layers::{AttentionInput, MultiheadAttention};
    nn_core::manual_seed(0);
    let mha = MultiheadAttention::new(4, 2);
    let q = Tensor::randn(&[3, 1, 4]);
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    // A key padding mask that hides the last key, put in by the hook.
    let mask = Tensor::from_vec(vec![0.0, 0.0, f32::NEG_INFINITY], &[1, 3]);
    let h = mha
        .register_forward_pre_hook_tensors(HookConfig::default(), move |call, xs| {
            log.lock().unwrap().push(format!("{} {}", call.type_name(), slots(xs)));
            let mut xs = xs.to_vec();
            xs[3] = Some(mask.clone());
            Some(xs)
        })
        .unwrap();
    let (hooked, _) = mha.forward(&AttentionInput::self_attention(&q));
    h.remove();
    // query, key, value, key_padding_mask (absent), attn_mask (absent).
    assert_eq!(*seen.lock().unwrap(), ["MultiheadAttention TTTNN"]);
    let mask = Tensor::from_vec(vec![0.0, 0.0, f32::NEG_INFINITY], &[1, 3]);
    let (direct, _) = mha.forward(&AttentionInput::self_attention(&q).key_padding_mask(&mask));
    assert_eq!(hooked.to_vec(), direct.to_vec());
    let (plain, _) = mha.forward(&AttentionInput::self_attention(&q));
    assert_ne!(plain.to_vec(), direct.to_vec());
}

#[test]
fn backward_pre_hooks_see_none_where_no_gradient_arrives_and_may_replace_any_slot() {
    let split = Split { base: ModuleBase::new() };
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    split
        .register_full_backward_pre_hook_tensors(HookConfig::default(), move |_, go| {
            log.lock().unwrap().push(slots(go));
            // Send a gradient of ones to the output the loss did not use.
            Some(vec![go[0].clone(), Some(Tensor::ones(&[2]))])
        })
        .unwrap();
    let x = Tensor::ones(&[2]).requires_grad_(true);
    let (a, _b) = split.forward(&x);
    a.sum().backward();
    assert_eq!(*seen.lock().unwrap(), ["TN"]);
    // d(sum a)/dx = 2, plus the hook's ones through b = 3x: 2 + 3.
    assert_eq!(x.grad().unwrap().to_vec(), [5.0, 5.0]);
}

#[test]
fn a_hook_returning_the_wrong_slots_is_a_panic_naming_it_and_the_module() {
    let split = Split { base: ModuleBase::new() };
    let h = split.register_forward_hook_tensors(HookConfig::default(), |_, _, ys| Some(ys[..1].to_vec())).unwrap();
    let msg = panic_text(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| split.forward(&Tensor::ones(&[2])))));
    assert!(
        msg.contains("forward hook of `Split`") && msg.contains("returned 1 output slots, the output has 2"),
        "{msg}"
    );
    h.remove();
    let h =
        split.register_forward_hook_tensors(HookConfig::default(), |_, _, ys| Some(vec![None, ys[1].clone()])).unwrap();
    let msg = panic_text(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| split.forward(&Tensor::ones(&[2])))));
    assert!(msg.contains("returned None for tensor slot 0"), "{msg}");
    h.remove();
    // A grad_input of the wrong shape.
    let mix = Mix { base: ModuleBase::new() };
    mix.register_full_backward_hook_tensors(HookConfig::default(), |_, gi, _| {
        Some(vec![Some(Tensor::ones(&[3])), gi[1].clone()])
    })
    .unwrap();
    let p = Tensor::ones(&[2]).requires_grad_(true);
    let out = mix.forward((&p, &Tensor::ones(&[2])));
    let msg = panic_text(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| out.sum().backward())));
    assert!(msg.contains("full backward hook of `Mix`") && msg.contains("grad_input slot 0 of shape [3]"), "{msg}");
}

#[test]
fn a_backward_hook_may_not_invent_a_gradient_for_an_input_without_one() {
    let mix = Mix { base: ModuleBase::new() };
    mix.register_full_backward_hook_tensors(HookConfig::default(), |_, gi, _| {
        Some(vec![gi[0].clone(), Some(Tensor::ones(&[2]))])
    })
    .unwrap();
    let p = Tensor::ones(&[2]).requires_grad_(true);
    let out = mix.forward((&p, &Tensor::ones(&[2])));
    let msg = panic_text(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| out.sum().backward())));
    assert!(msg.contains("new grad_input for slot 1, whose input does not require grad"), "{msg}");
}

#[test]
fn an_always_called_forward_hook_sees_the_panic_with_no_outputs() {
    #[derive(Module)]
    struct Fails {
        #[base]
        base: ModuleBase,
    }
    impl Compute for Fails {
        type Input = Tensor;
        type Output = Tensor;
        fn compute(&self, _: &Tensor) -> Tensor {
            panic!("shape mismatch inside")
        }
    }
    let m = Fails { base: ModuleBase::new() };
    let seen: Arc<Mutex<Vec<(bool, usize, usize)>>> = Arc::default();
    let log = seen.clone();
    m.register_forward_hook_tensors(HookConfig::always_call(), move |call, xs, ys| {
        log.lock().unwrap().push((call.panicked(), xs.len(), ys.len()));
        None
    })
    .unwrap();
    let msg = panic_text(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.forward(&Tensor::ones(&[1])))));
    assert_eq!(msg, "shape mismatch inside");
    assert_eq!(*seen.lock().unwrap(), [(true, 1, 0)]);
}

#[test]
fn a_module_outside_the_running_tree_has_no_path() {
    #[derive(Module)]
    struct BuildsInside {
        #[base]
        base: ModuleBase,
    }
    impl Compute for BuildsInside {
        type Input = Tensor;
        type Output = Tensor;
        fn compute(&self, x: &Tensor) -> Tensor {
            let inner = Split { base: ModuleBase::new() };
            let paths: Arc<Mutex<Vec<Option<String>>>> = PATHS.with(Clone::clone);
            inner
                .register_forward_hook_tensors(HookConfig::default(), move |call, _, _| {
                    paths.lock().unwrap().push(call.path().map(str::to_string));
                    None
                })
                .unwrap();
            inner.forward(x).0
        }
    }
    thread_local!(static PATHS: Arc<Mutex<Vec<Option<String>>>> = Arc::default());
    let m = BuildsInside { base: ModuleBase::new() };
    m.forward(&Tensor::ones(&[1]));
    assert_eq!(*PATHS.with(Clone::clone).lock().unwrap(), [None]);
}

#[test]
fn always_call_on_a_kind_without_it_is_refused_at_registration() {
    let split = Split { base: ModuleBase::new() };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        split.register_full_backward_hook_tensors(HookConfig::always_call(), |_, _, _| None)
    }));
    let msg = panic_text(r);
    assert!(msg.contains("always_call is for forward hooks; a full backward hook has no such option"), "{msg}");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        split.hook_base().unwrap().register_forward_hook_with(HookConfig::always_call(), |_, _| None)
    }));
    assert!(panic_text(r).contains("register_forward_hook_always_call"));
}
