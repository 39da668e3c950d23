//! Parametrizations against PyTorch (`tests/fixtures/pytorch/parametrize.py`'s committed
//! outputs, float64): a module built here, parametrized, loads PyTorch's state dict under
//! PyTorch's keys; its training-mode output, every parameter's gradient, the state dict after
//! that forward (spectral norm's power iteration updates `_u`/`_v`), the eval-mode output and
//! the parametrized weight match. Then the machinery: saving and loading both ways, deep
//! copies, assignment through `right_inverse`, removal, the `cached` scope, and the errors.

use std::path::Path;

use nn_core::module::parametrize::{
    assign, cached, register_parametrization, remove_parametrizations, value_of, Parametrization,
};
use nn_core::optim::Optimizer;
use nn_core::prelude::*;
use nn_core::{manual_seed, no_grad, DType, Error, StateDict};
use nn_layers::parametrizations::{
    orthogonal, spectral_norm, weight_norm, Orthogonal, OrthogonalMap, SpectralNormConfig,
};
use nn_layers::{Conv1d, Conv2d, Linear};

fn fixture(name: &str) -> StateDict {
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch/parametrize").join(format!("{name}.safetensors"));
    StateDict::load(&p).unwrap_or_else(|e| panic!("{e}"))
}

/// The entries of `f` under `prefix`, the prefix removed.
fn section(f: &StateDict, prefix: &str) -> StateDict {
    let mut sd = StateDict::new();
    for k in f.keys() {
        if let Some(rest) = k.strip_prefix(prefix) {
            sd.insert(rest.to_string(), f.get(k).unwrap().clone());
        }
    }
    sd
}

fn close(what: &str, got: &Tensor, want: &Tensor, tol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let err = got.to_dtype(DType::F64).sub(&want.to_dtype(DType::F64)).abs().max().item();
    assert!(err <= tol, "{what}: max error {err:e} > {tol:e}");
}

/// A user's parametrization, as the fixture's `Double`.
#[derive(Module)]
struct Double;
impl Parametrization for Double {
    fn forward(&self, x: &[Tensor], _training: bool) -> Tensor {
        &x[0] * 2.0
    }
    fn right_inverse(&self, w: &Tensor) -> Option<Vec<Tensor>> {
        Some(vec![w / 2.0])
    }
}

/// Runs the fixture `name` against the module `build` makes (parametrized, f64), on every
/// parity device (the CPU, and `gpu:0` with the `gpu` feature): load, train forward, grads,
/// state after, eval forward, weight.
fn parity<M: Module + Forward<Input = Tensor, Output = Tensor>>(name: &str, build: impl Fn() -> M) {
    for device in crate::layers::devices() {
        parity_on(device, name, build());
    }
}

fn parity_on<M: Module + Forward<Input = Tensor, Output = Tensor>>(device: nn_core::Device, name: &str, mut m: M) {
    // Sums on the device may run in another order.
    let tol = if device == nn_core::Device::Cpu { 1e-12 } else { 1e-9 };
    let name = &format!("{name} on {device}");
    let f: StateDict =
        fixture(name.split(' ').next().unwrap()).iter().map(|(k, v)| (k.to_string(), v.to_device(device))).collect();
    m.to_device(device);
    let sd = section(&f, "sd.");
    let mut ours: Vec<String> = m.state_dict().keys().map(str::to_string).collect();
    let mut theirs: Vec<String> = sd.keys().map(str::to_string).collect();
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs, "{name}: state-dict keys");
    m.load_state_dict(&sd, true).unwrap_or_else(|e| panic!("{name}: {e}"));
    m.train();
    let y = m.forward(f.get("x").unwrap());
    assert_eq!(y.device(), device, "{name}: output device");
    close(&format!("{name}: y_train"), &y, f.get("y_train").unwrap(), tol);
    (&y * f.get("cot").unwrap()).sum().backward();
    let grads = section(&f, "grad.");
    let params = m.named_parameters();
    assert_eq!(params.len(), grads.keys().count(), "{name}: parameters");
    for (k, p) in &params {
        let want = grads.get(k).unwrap_or_else(|| panic!("{name}: PyTorch has no gradient for `{k}`"));
        close(&format!("{name}: grad {k}"), &p.grad().unwrap(), want, 10.0 * tol);
    }
    let after = section(&f, "sd_after.");
    for (k, t) in m.state_dict().iter() {
        close(&format!("{name}: state after, {k}"), t, after.get(k).unwrap(), tol);
    }
    m.eval();
    let y = no_grad(|| m.forward(f.get("x").unwrap()));
    close(&format!("{name}: y_eval"), &y, f.get("y_eval").unwrap(), tol);
    let w = no_grad(|| value_of(&m, "weight").unwrap());
    close(&format!("{name}: weight"), &w, f.get("weight").unwrap(), tol);
}

fn f64<M: Module>(mut m: M) -> M {
    m.to_dtype(DType::F64);
    m
}

#[test]
fn weight_norm_matches_pytorch() {
    parity("weight_norm_linear", || weight_norm(f64(Linear::new(4, 3)), "weight", Some(0)).unwrap());
    parity("weight_norm_conv1d_dim1", || weight_norm(f64(Conv1d::new(2, 3, 3)), "weight", Some(1)).unwrap());
}

#[test]
fn spectral_norm_matches_pytorch() {
    let cfg = SpectralNormConfig::default();
    parity("spectral_norm_linear", || spectral_norm(f64(Linear::new(4, 3)), "weight", cfg).unwrap());
    parity("spectral_norm_conv2d", || spectral_norm(f64(Conv2d::new(2, 3, 3)), "weight", cfg).unwrap());
}

#[test]
fn orthogonal_matches_pytorch() {
    parity("orthogonal_linear", || orthogonal(f64(Linear::new(4, 4)), "weight", OrthogonalMap::MatrixExp).unwrap());
    let householder = || orthogonal(f64(Linear::new(3, 5)), "weight", OrthogonalMap::Householder).unwrap();
    parity("orthogonal_householder", householder);
}

#[test]
fn an_orthogonal_weight_stays_orthogonal_while_training() {
    manual_seed(4);
    for (map, (i, o)) in
        [(OrthogonalMap::MatrixExp, (3, 5)), (OrthogonalMap::Householder, (5, 3)), (OrthogonalMap::MatrixExp, (4, 4))]
    {
        let m = orthogonal(f64(Linear::new(i, o)), "weight", map).unwrap();
        let x = Tensor::randn(&[6, i]).to_dtype(DType::F64);
        let cfg = nn_core::optim::SgdConfig { lr: 0.05, ..Default::default() };
        let mut opt = nn_core::optim::Sgd::new(m.parameters(), cfg);
        for _ in 0..5 {
            opt.zero_grad();
            m.forward(&x).sin().sum().backward();
            opt.step();
        }
        let w = m.weight.value();
        let g = if o >= i { w.t().matmul(&w) } else { w.matmul(&w.t()) };
        close(&format!("{map:?} {o}x{i}: W^T W"), &g, &Tensor::eye(o.min(i)).to_dtype(DType::F64), 1e-10);
    }
    // Each map's gradient against finite differences (the composed matrix exponential, the
    // Householder product), for a square and a tall weight.
    for (map, shape) in
        [(OrthogonalMap::MatrixExp, [3, 3]), (OrthogonalMap::MatrixExp, [4, 2]), (OrthogonalMap::Householder, [4, 2])]
    {
        let w = Tensor::randn(&shape).to_dtype(DType::F64);
        let p = Orthogonal::new(&shape, map, &w);
        let original = p.right_inverse(&w).unwrap().remove(0);
        let x = (&original + &(Tensor::randn(&shape).to_dtype(DType::F64) * 0.3)).requires_grad_(true);
        nn_core::testing::gradcheck(|t| p.forward(&[t[0].clone()], false), &[x])
            .unwrap_or_else(|e| panic!("{map:?} {shape:?}: {e}"));
    }
}

#[test]
fn chained_parametrizations_match_pytorch() {
    parity("chained", || {
        let mut m = weight_norm(f64(Linear::new(4, 3)), "weight", Some(0)).unwrap();
        register_parametrization(&mut m, "weight", Double).unwrap();
        m
    });
}

#[test]
fn registration_keeps_the_weight_and_moves_it_into_the_originals() {
    manual_seed(0);
    let mut lin = Linear::new(4, 3);
    let before = lin.weight.detach().copy();
    register_parametrization(&mut lin, "weight", Double).unwrap();
    assert!(lin.weight.is_parametrized());
    close("value", &lin.weight.value(), &before, 1e-7);
    let sd = lin.state_dict();
    let keys: Vec<&str> = sd.keys().collect();
    assert!(keys.contains(&"parametrizations.weight.original") && keys.contains(&"bias"), "{keys:?}");
    close("original", sd.get("parametrizations.weight.original").unwrap(), &(&before / 2.0), 1e-7);
    // The optimizer's parameters are the original and the bias.
    let names: Vec<String> = lin.named_parameters().into_iter().map(|(k, _)| k).collect();
    assert_eq!(names, ["bias", "parametrizations.weight.original"]); // PyTorch's order: own parameters first
                                                                     // The printout shows the parametrization where PyTorch does.
    let shown = format!("{lin}");
    assert!(shown.contains("(parametrizations): ModuleDict") && shown.contains("(0): Double"), "{shown}");
}

#[test]
fn a_direct_read_of_a_parametrized_weight_panics_naming_it() {
    let mut lin = Linear::new(4, 3);
    register_parametrization(&mut lin, "weight", Double).unwrap();
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| lin.weight.shape().to_vec())).unwrap_err();
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("`weight` of `Linear` is parametrized (Double)") && msg.contains("Parameter::value()"),
        "{msg}"
    );
}

#[test]
fn training_reaches_the_originals_and_the_state_dict_round_trips() {
    manual_seed(1);
    let m = weight_norm(f64(Linear::new(4, 3)), "weight", Some(0)).unwrap();
    let x = Tensor::randn(&[5, 4]).to_dtype(DType::F64);
    let cfg = nn_core::optim::SgdConfig { lr: 0.1, ..Default::default() };
    let mut opt = nn_core::optim::Sgd::new(m.parameters(), cfg);
    let before = m.forward(&x).detach().copy();
    m.forward(&x).square().sum().backward();
    opt.step();
    let after = m.forward(&x).detach();
    assert!(after.sub(&before).abs().max().item() > 1e-6, "the step changed nothing");
    // Saved and loaded into a fresh parametrized layer, the output is the same.
    let mut fresh = weight_norm(f64(Linear::new(4, 3)), "weight", Some(0)).unwrap();
    fresh.load_state_dict(&m.state_dict(), true).unwrap();
    close("reloaded", &fresh.forward(&x), &after, 0.0);
    // A plain layer does not take the parametrized keys (strict), naming them.
    let err = f64(Linear::new(4, 3)).load_state_dict(&m.state_dict(), true).unwrap_err().to_string();
    assert!(err.contains("parametrizations.weight.original0"), "{err}");
}

#[test]
fn a_deep_copy_is_independent_and_keeps_the_parametrization() {
    manual_seed(2);
    let m = spectral_norm(f64(Linear::new(4, 3)), "weight", SpectralNormConfig::default()).unwrap();
    let copy = m.deep_copy();
    let x = Tensor::randn(&[2, 4]).to_dtype(DType::F64);
    let (mut a, mut b) = (m, copy);
    a.eval();
    b.eval();
    close("copy", &b.forward(&x), &a.forward(&x), 0.0);
    let (pa, pb) = (a.named_parameters(), b.named_parameters());
    assert!(pa.iter().zip(&pb).all(|((_, p), (_, q))| p.id() != q.id()), "the copy shares a parameter");
    let weight = |ps: &[(String, Parameter)]| {
        ps.iter().find(|(k, _)| k == "parametrizations.weight.original").unwrap().1.clone()
    };
    no_grad(|| {
        weight(&pb).mul_(2.0);
    });
    assert!(b.forward(&x).sub(&a.forward(&x)).abs().max().item() < 1e-9, "spectral norm is scale-free");
    b.train();
    b.forward(&x); // a power iteration on the copy's `_u`/`_v` ...
    let (ua, ub) = (a.state_dict(), b.state_dict());
    assert!(
        ua.get("parametrizations.weight.0._u").unwrap().id() != ub.get("parametrizations.weight.0._u").unwrap().id()
    );
}

#[test]
fn assign_goes_through_right_inverse_and_remove_leaves_a_plain_parameter() {
    manual_seed(3);
    let mut m = weight_norm(f64(Linear::new(4, 3)), "weight", Some(0)).unwrap();
    register_parametrization(&mut m, "weight", Double).unwrap();
    let target = Tensor::randn(&[3, 4]).to_dtype(DType::F64);
    assign(&mut m, "weight", &target).unwrap();
    close("assigned", &m.weight.value(), &target, 1e-12);
    // Several originals cannot be left unparametrized; nothing changes.
    let err = remove_parametrizations(&mut m, "weight", false).unwrap_err().to_string();
    assert!(err.contains("2 originals"), "{err}");
    assert!(m.weight.is_parametrized());
    remove_parametrizations(&mut m, "weight", true).unwrap();
    assert!(!m.weight.is_parametrized());
    close("left", &m.weight, &target, 1e-12);
    let names: Vec<String> = m.named_parameters().into_iter().map(|(k, _)| k).collect();
    assert_eq!(names, ["weight", "bias"]);
    // Registered again after the removal.
    register_parametrization(&mut m, "weight", Double).unwrap();
    close("again", &m.weight.value(), &target, 1e-12);
    // A single original keeps its handle: removal without leaving it parametrized.
    let mut lin = Linear::new(2, 2);
    let id = lin.weight.id();
    register_parametrization(&mut lin, "weight", Double).unwrap();
    let original = lin.named_parameters().into_iter().find(|(k, _)| k == "parametrizations.weight.original").unwrap().1;
    assert_eq!(original.id(), id, "the original is the weight's tensor");
    remove_parametrizations(&mut lin, "weight", false).unwrap();
    assert_eq!(lin.weight.id(), id);
}

#[test]
fn cached_computes_once_per_scope() {
    let mut lin = Linear::new(3, 3);
    register_parametrization(&mut lin, "weight", Double).unwrap();
    let (a, b) = cached(|| (lin.weight.value().into_owned(), lin.weight.value().into_owned()));
    assert_eq!(a.id(), b.id(), "one value inside the scope");
    assert_ne!(lin.weight.value().id(), lin.weight.value().id(), "recomputed outside it");
}

/// A parametrization whose output has another shape.
#[derive(Module)]
struct Flatten;
impl Parametrization for Flatten {
    fn forward(&self, x: &[Tensor], _training: bool) -> Tensor {
        x[0].reshape(&[x[0].numel()])
    }
}

#[test]
fn bad_registrations_are_refused_naming_the_module_and_tensor() {
    let mut lin = Linear::new(4, 3);
    let before = lin.state_dict();
    let err = register_parametrization(&mut lin, "weight", Flatten).unwrap_err();
    assert!(matches!(err, Error::Parametrization { .. }));
    let msg = err.to_string();
    assert!(msg.starts_with("parametrization of `weight` on `Linear`: the parametrization's output is [12]"), "{msg}");
    let err = register_parametrization(&mut lin, "wieght", Double).unwrap_err().to_string();
    assert!(err.contains("there is no parameter `wieght`; its parameters are: [weight, bias]"), "{err}");
    assert!(!lin.weight.is_parametrized());
    assert_eq!(lin.state_dict().keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>());
    let err = assign(&mut lin, "weight", &Tensor::zeros(&[3, 4])).unwrap_err().to_string();
    assert!(err.contains("it is not parametrized"), "{err}");
    let err = weight_norm(Linear::new(4, 3), "weight", Some(2)).err().unwrap().to_string();
    assert!(err.contains("dim 2 of a tensor of rank 2"), "{err}");
    // A chained step whose output shape differs is refused too, the chain unchanged.
    let mut m = weight_norm(Linear::new(4, 3), "weight", Some(0)).unwrap();
    assert!(register_parametrization(&mut m, "weight", Flatten).is_err());
    assert_eq!(m.weight.value().shape(), &[3, 4]);
}

#[test]
fn a_recurrent_weight_can_be_parametrized() {
    fork_rng_seeded(7, || {
        let lstm = f64(nn_layers::LSTM::new(3, 4));
        let x = Tensor::randn(&[5, 2, 3]).to_dtype(DType::F64);
        let (before, _) = no_grad(|| lstm.forward(&x));
        let m = weight_norm(lstm, "weight_hh_l0", Some(0)).unwrap();
        let sd = m.state_dict();
        let keys: Vec<&str> = sd.keys().collect();
        assert!(keys.contains(&"parametrizations.weight_hh_l0.original0"), "{keys:?}");
        assert!(!keys.contains(&"weight_hh_l0") && keys.contains(&"weight_ih_l0"), "{keys:?}");
        let (after, _) = m.forward(&x);
        close("the weight is unchanged by registration", &after, &before, 1e-12);
        after.sum().backward();
        for (k, p) in m.named_parameters() {
            assert!(p.grad().is_some(), "{k} has no gradient");
        }
    });
}

/// Runs `f` with a private generator seeded `seed` (the binary's other tests draw from the
/// process's in parallel).
fn fork_rng_seeded(seed: u64, f: impl FnOnce()) {
    nn_core::random::fork_rng(|| {
        manual_seed(seed);
        f()
    })
}

/// A hand-written module that reports its parameter as a plain `Item::Param`.
struct Raw {
    w: Parameter,
}
impl nn_core::module::HoldsState for Raw {}
impl Module for Raw {
    fn visit<'a>(&'a self, f: &mut dyn FnMut(nn_core::Name<'a>, nn_core::Item<'a>)) {
        f(nn_core::Name::Field("w"), nn_core::Item::Param(&self.w));
    }
    fn visit_modules_mut<'a>(&'a mut self, _: &mut dyn FnMut(nn_core::Name<'_>, &'a mut dyn Module)) {}
    fn type_name(&self) -> &'static str {
        "Raw"
    }
    nn_core::module_accessors!();
}

#[test]
fn a_module_whose_visit_bypasses_report_refuses_a_parametrization() {
    let mut m = Raw { w: Parameter::new(Tensor::ones(&[2])) };
    let err = register_parametrization(&mut m, "w", Double).unwrap_err().to_string();
    assert!(
        err.contains("`Raw` reports `w` to its visit as a plain `Item::Param`") && err.contains("parametrize::report"),
        "{err}"
    );
    assert!(!m.w.is_parametrized());
    assert_eq!(m.w.to_vec(), [1.0, 1.0], "nothing changed");
}
