//! Tensor ops against PyTorch: cumsum/cumprod, sort/argsort/topk, erf/erfinv, flip/roll,
//! outer, clamp with tensor bounds and arange with a dtype, forward values and the
//! gradients of `sum(y * w)`, from `tests/fixtures/pytorch/ops_scan_sort_shift.py`'s committed output.
//! f64 cases agree to 1e-12 relative (1e-15 for erf), indices exactly; f32 cases within
//! a few ulp of PyTorch's f32 results. With the `gpu` feature the differentiable cases run
//! again on `gpu:0` (inputs moved there), against the same PyTorch values (1e-14 where
//! the device sums gradients in another order).

use std::path::Path;
use std::sync::OnceLock;

use nn_core::{DType, Device, StateDict, Tensor};

fn fixtures() -> &'static StateDict {
    static F: OnceLock<StateDict> = OnceLock::new();
    F.get_or_init(|| {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch/ops_scan_sort_shift.safetensors");
        StateDict::load(&p).unwrap_or_else(|e| panic!("{e}"))
    })
}

#[track_caller]
fn get(key: &str) -> Tensor {
    fixtures().get(key).unwrap_or_else(|| panic!("fixture {key} is missing")).clone()
}

#[track_caller]
fn close(what: &str, actual: &Tensor, expected: &Tensor, tol: f64) {
    assert_eq!(actual.shape(), expected.shape(), "{what}: shape");
    assert_eq!(actual.dtype(), expected.dtype(), "{what}: dtype");
    for (i, (a, e)) in actual.to_vec_f64().iter().zip(expected.to_vec_f64()).enumerate() {
        let ok = a == &e || (a - e).abs() <= tol * e.abs().max(1.0) || (a.is_nan() && e.is_nan());
        assert!(ok, "{what}: element {i}: {a} vs PyTorch {e} (tolerance {tol:e})");
    }
}

/// The devices every case runs on: the CPU, and `gpu:0` with the `gpu` feature (a missing
/// adapter then fails the case, saying why).
fn devices() -> Vec<Device> {
    let mut d = vec![Device::Cpu];
    if cfg!(feature = "gpu") {
        let gpu = Device::Gpu(0);
        gpu.check().unwrap_or_else(|e| panic!("the parity suite with `gpu` needs gpu:0: {e}"));
        d.push(gpu);
    }
    d
}

/// Runs `f` on leaves of the named inputs of `case` (on every device) and checks `case.y`
/// and every `case.g<name>` (the gradient of `sum(y * case.w)`).
#[track_caller]
fn check(case: &str, inputs: &[(&str, &str)], tol: f64, f: impl Fn(&[Tensor]) -> Tensor) {
    for device in devices() {
        let tol = if device == Device::Cpu { tol } else { tol.max(1e-14) };
        let case = &format!("{case} on {device}");
        let leaves: Vec<Tensor> =
            inputs.iter().map(|(_, key)| get(key).detach().to_device(device).requires_grad_(true)).collect();
        let y = f(&leaves);
        assert_eq!(y.device(), device, "{case}: the output left the device");
        let key = case.split(' ').next().expect("a case name");
        close(&format!("{case} forward"), &y, &get(&format!("{key}.y")), tol);
        (&y * &get(&format!("{key}.w")).to_device(device)).sum().backward();
        for ((name, _), leaf) in inputs.iter().zip(&leaves) {
            let g = leaf.grad().unwrap_or_else(|| panic!("{case}: no gradient for {name}"));
            close(&format!("{case} gradient of {name}"), &g, &get(&format!("{key}.g{name}")), tol);
        }
    }
}

#[test]
fn cumsum_and_cumprod_match_pytorch() {
    for d in [0usize, 1] {
        check(&format!("cumsum{d}"), &[("x", "cumsum.x")], 1e-12, |t| t[0].cumsum(d));
        // The input has rows with one, two and no zeros: PyTorch's zero-aware gradient.
        check(&format!("cumprod{d}"), &[("x", "cumprod.x")], 1e-12, |t| t[0].cumprod(d));
    }
    // f32 accumulates in f64 and rounds each output, as PyTorch's CPU kernel: bit-equal.
    assert_eq!(get("cumsum_f32.x").cumsum(0).to_vec(), get("cumsum_f32.y").to_vec());
}

#[test]
fn sort_argsort_and_topk_match_pytorch() {
    for desc in [false, true] {
        for d in [0usize, 1] {
            let case = format!("sort{d}{}", if desc { "_desc" } else { "" });
            let x = get("sort.x");
            // Ties in the input: the stable order is PyTorch's `stable=True` order.
            assert_eq!(x.sort(d, desc).1.to_vec_i64(), get(&format!("{case}.i")).to_vec_i64(), "{case} indices");
            check(&case, &[("x", "sort.x")], 0.0, |t| t[0].sort(d, desc).0);
        }
    }
    assert_eq!(get("sort.x").argsort(1, true).to_vec_i64(), get("argsort_desc.i").to_vec_i64());
    for (case, largest) in [("topk", true), ("topk_smallest", false)] {
        assert_eq!(get("topk.x").topk(3, 1, largest, true).1.to_vec_i64(), get(&format!("{case}.i")).to_vec_i64());
        check(case, &[("x", "topk.x")], 0.0, |t| t[0].topk(3, 1, largest, true).0);
    }
    assert_eq!(get("topk.x").topk(2, 0, true, true).1.to_vec_i64(), get("topk0.i").to_vec_i64());
    check("topk0", &[("x", "topk.x")], 0.0, |t| t[0].topk(2, 0, true, true).0);
}

#[test]
fn erf_and_erfinv_match_pytorch() {
    check("erf", &[("x", "erf.x")], 1e-15, |t| t[0].erf());
    check("erfinv", &[("x", "erfinv.x")], 1e-13, |t| t[0].erfinv());
    // f32: within two ulp of PyTorch's own f32 results (each side is within about one
    // ulp of the true value).
    for (op, f) in [("erf", Tensor::erf as fn(&Tensor) -> Tensor), ("erfinv", Tensor::erfinv)] {
        let y = f(&get(&format!("{op}_f32.x")));
        assert_eq!(y.dtype(), DType::F32);
        for (a, e) in y.to_vec().iter().zip(get(&format!("{op}_f32.y")).to_vec()) {
            let ulp = e.abs().max(f32::MIN_POSITIVE) * f32::EPSILON;
            assert!((a - e).abs() <= 2.0 * ulp || a == &e, "{op} f32: {a} vs PyTorch {e}");
        }
    }
}

#[test]
fn flip_roll_and_outer_match_pytorch() {
    check("flip02", &[("x", "shift.x")], 0.0, |t| t[0].flip(&[0, 2]));
    check("flip1", &[("x", "shift.x")], 0.0, |t| t[0].flip(&[-2]));
    check("roll", &[("x", "shift.x")], 0.0, |t| t[0].roll(&[1, -3], &[1, 2]));
    check("roll_flat", &[("x", "shift.x")], 0.0, |t| t[0].roll(&[5], &[]));
    check("outer", &[("a", "outer.a"), ("b", "outer.b")], 1e-15, |t| t[0].outer(&t[1]));
}

#[test]
fn clamp_with_tensor_bounds_matches_pytorch() {
    let ins = [("x", "clamp.x"), ("lo", "clamp.lo"), ("hi", "clamp.hi")];
    check("clamp", &ins, 0.0, |t| t[0].clamp_tensor(Some(&t[1]), Some(&t[2])));
    check("clamp_min", &ins[..2], 0.0, |t| t[0].clamp_tensor(Some(&t[1]), None));
}

#[test]
fn arange_with_a_dtype_matches_pytorch() {
    let cases = [("a", 0.0, 5.0, 1.5), ("b", -1.5, 3.7, 1.2), ("c", 10.0, -3.0, -3.0)];
    for (name, start, end, step) in cases {
        let t = Tensor::arange_dtype(start, end, step, DType::I64);
        assert_eq!(t.to_vec_i64(), get(&format!("arange_i64_{name}.y")).to_vec_i64(), "arange {name}");
    }
    // PyTorch's vectorized kernel adds `step` to a lane base (`start + 4 step`, ...), so
    // its last bit depends on the CPU's vector width; ours is `start + i step` rounded once.
    close("arange f64", &Tensor::arange_dtype(-1.0, 1.0, 0.15, DType::F64), &get("arange_f64.y"), 1e-15);
    close("arange f32", &Tensor::arange_dtype(0.0, 1.0, 0.1, DType::F32), &get("arange_f32.y"), 1e-7);
}
