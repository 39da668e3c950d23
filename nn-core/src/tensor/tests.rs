use std::sync::Arc;

use crate::testing::support::{assert_close64, grad, leaf, rng_lock, t64};
use crate::testing::{gradcheck_with, GradcheckConfig};
use crate::{manual_seed, no_grad, DType, Device, Error, Tensor};

// ---- dtype conversions --------------------------------------------------------------

#[test]
fn float_round_trips_are_exact_where_representable() {
    let v = vec![1.5f32, -2.25, 0.0, 65504.0, -0.125, 1024.0];
    let x = Tensor::from_vec(v.clone(), &[6]);
    for d in [DType::F64, DType::F16, DType::BF16] {
        if d == DType::BF16 {
            // bf16 has 8 significant bits: 65504 rounds, the rest are exact.
            let back = x.to_dtype(d).to_dtype(DType::F32).to_vec();
            assert_eq!(back, vec![1.5, -2.25, 0.0, 65536.0, -0.125, 1024.0]);
            continue;
        }
        let y = x.to_dtype(d);
        assert_eq!(y.dtype(), d);
        assert_eq!(y.to_dtype(DType::F32).to_vec(), v, "f32 -> {d} -> f32");
    }
    // f16 -> bf16 -> f64 -> f16 for values both half types hold exactly.
    let h = Tensor::from_vec(vec![0.5, -3.0, 96.0], &[3]).to_dtype(DType::F16);
    assert_eq!(h.to_dtype(DType::BF16).to_dtype(DType::F64).to_dtype(DType::F16).to_vec(), vec![0.5, -3.0, 96.0]);
}

#[test]
fn float_conversions_round_to_nearest_even() {
    let x = t64(&[0.1, 1.0 + 2f64.powi(-11), 1.0 + 3.0 * 2f64.powi(-11), 70000.0], &[4]);
    assert_eq!(x.to_dtype(DType::F16).to_vec_f64(), vec![0.0999755859375, 1.0, 1.001953125, f64::INFINITY]);
    let b = t64(&[0.1, 1.0 + 2f64.powi(-8), 1.0 + 3.0 * 2f64.powi(-8), 1e38], &[4]);
    let bv = b.to_dtype(DType::BF16).to_vec_f64();
    assert_eq!(bv[..3], [0.10009765625, 1.0, 1.015625]);
    assert!(bv[3].is_finite() && (bv[3] / 1e38 - 1.0).abs() < 4e-3, "bf16 keeps f32's range");
    let third = t64(&[1.0 / 3.0], &[1]).to_dtype(DType::F32).to_vec_f64();
    assert_eq!(third, vec![0.3333333432674408]);
}

#[test]
fn integer_and_bool_conversions() {
    let x = Tensor::from_vec(vec![1.9, -1.9, 2.5, -0.4, 0.0], &[5]);
    assert_eq!(x.to_dtype(DType::I64).to_vec_i64(), vec![1, -1, 2, 0, 0], "truncation toward zero");
    assert_eq!(x.to_dtype(DType::Bool).to_vec_bool(), vec![true, true, true, true, false]);
    let i = Tensor::from_vec_i64(vec![3, -2, 0, 1 << 53], &[4]);
    assert_eq!(i.to_dtype(DType::F64).to_vec_f64(), vec![3.0, -2.0, 0.0, 9007199254740992.0]);
    assert_eq!(i.to_dtype(DType::Bool).to_vec_bool(), vec![true, true, false, true]);
    assert_eq!(i.to_dtype(DType::F16).to_vec(), vec![3.0, -2.0, 0.0, f32::INFINITY]);
    // Past 2^53 an integer rounds to f32 once, as PyTorch (through f64 it would round
    // twice: 2^60 + 2^36 + 1 would become 2^60).
    let big = Tensor::from_vec_i64(vec![(1 << 60) + (1 << 36) + 1], &[1]);
    assert_eq!(big.to_dtype(DType::F32).to_vec(), vec![((1u64 << 60) + (1u64 << 37)) as f32]);
    assert_eq!(big.to_dtype(DType::BF16).to_vec(), vec![(1u64 << 60) as f32]);
    let b = Tensor::from_vec_bool(vec![true, false], &[2]);
    assert_eq!(b.to_dtype(DType::F32).to_vec(), vec![1.0, 0.0]);
    assert_eq!(b.to_dtype(DType::I64).to_vec_i64(), vec![1, 0]);
    assert_eq!(b.to_dtype(DType::BF16).to_dtype(DType::Bool).to_vec_bool(), vec![true, false]);
    // Round trip i64 -> f32 -> i64 is exact below 2^24.
    let j = Tensor::from_vec_i64(vec![16_777_215, -7], &[2]);
    assert_eq!(j.to_dtype(DType::F32).to_dtype(DType::I64).to_vec_i64(), vec![16_777_215, -7]);
}

#[test]
fn to_dtype_of_a_strided_view_and_the_same_dtype() {
    let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let y = x.t().to_dtype(DType::F64);
    assert!(y.is_contiguous());
    assert_eq!(y.to_vec_f64(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    assert_eq!(x.to_dtype(DType::F32).id(), x.id(), "same dtype returns the tensor itself");
}

#[test]
fn to_dtype_backward_converts_the_gradient_back() {
    let x = Tensor::from_vec(vec![1.0, 2.0], &[2]).requires_grad_(true);
    let y = x.to_dtype(DType::F64);
    assert_eq!(y.grad_fn_name(), Some("to_dtype"));
    (y.exp() * t64(&[1.0, 3.0], &[2])).sum().backward();
    let g = x.grad().unwrap();
    assert_eq!(g.dtype(), DType::F32);
    crate::testing::assert_close(&g.to_vec(), &[1f32.exp(), 3.0 * 2f32.exp()], 1e-6, 1e-6);
    // A half-precision leaf gets a half-precision gradient.
    let h = Tensor::from_vec(vec![0.5, -1.0], &[2]).to_dtype(DType::F16).requires_grad_(true);
    (h.to_dtype(DType::F32) * 4.0).sum().backward();
    let gh = h.grad().unwrap();
    assert_eq!((gh.dtype(), gh.to_vec()), (DType::F16, vec![4.0, 4.0]));
    // Conversions to non-float types cut the graph.
    assert!(!x.to_dtype(DType::I64).requires_grad());
    // Finite differences through an f32 round trip need a coarser step.
    let o = GradcheckConfig { eps: 1e-3, atol: 1e-3, rtol: 1e-3 };
    gradcheck_with(|t| t[0].to_dtype(DType::F32).exp().to_dtype(DType::F64), &[t64(&[0.3, -1.2, 0.8], &[3])], o)
        .unwrap();
}

// ---- meta device --------------------------------------------------------------------

#[test]
fn meta_tensors_propagate_shapes_and_dtypes_through_a_model() {
    let x = Tensor::full_on(&[8, 3, 16, 16], 0.0, DType::F32, Device::Meta);
    let w = Tensor::full_on(&[4, 3, 3, 3], 0.0, DType::F32, Device::Meta).requires_grad_(true);
    let l = Tensor::full_on(&[10, 64], 0.0, DType::F32, Device::Meta).requires_grad_(true);
    let h = x.conv2d(&w, None, crate::ops::Conv2dConfig { padding: (1, 1), ..Default::default() });
    let h = h.relu().max_pool2d(crate::ops::Pool2dConfig::new(4)).flatten(1, -1);
    assert_eq!(h.shape(), &[8, 64]);
    let logits = h.matmul(&l.t());
    let loss = logits.log_softmax(-1).mean();
    assert_eq!((loss.shape(), loss.dtype(), loss.device()), (&[] as &[usize], DType::F32, Device::Meta));
    assert!(loss.requires_grad());
    loss.backward();
    assert_eq!((w.grad().unwrap().shape(), w.grad().unwrap().device()), (&[4, 3, 3, 3][..], Device::Meta));
    assert_eq!(format!("{l}"), "tensor(..., size=[10, 64], device=meta, requires_grad=true)");
}

#[test]
fn to_device_round_trip() {
    let x = Tensor::from_vec(vec![1.0, 2.0], &[2]);
    let m = x.to_device(Device::Meta);
    assert_eq!((m.device(), m.shape(), m.dtype()), (Device::Meta, &[2][..], DType::F32));
    let back = m.to_device(Device::Cpu);
    assert_eq!(back.to_vec(), vec![0.0, 0.0], "materialising gives zeros, like to_empty");
    assert_eq!(x.to_device(Device::Cpu).id(), x.id());
}

#[test]
#[should_panic(
    expected = "to_vec: tensor on the meta device has no values (shape [2, 3]); materialise it first with `to_device(Device::Cpu)`"
)]
fn to_vec_on_meta_panics_with_a_clear_message() {
    Tensor::full_on(&[2, 3], 0.0, DType::F32, Device::Meta).to_vec();
}

#[test]
#[should_panic(expected = "tensor on the meta device has no values (shape [])")]
fn item_on_meta_panics_with_a_clear_message() {
    Tensor::full_on(&[], 0.0, DType::F64, Device::Meta).item();
}

#[test]
#[should_panic(expected = "matmul: expected all tensors on one device, got meta (shape [2, 2]) and cpu (shape [2, 2])")]
fn mixing_meta_and_cpu_panics() {
    Tensor::full_on(&[2, 2], 0.0, DType::F32, Device::Meta).matmul(&Tensor::ones(&[2, 2]));
}

// ---- random generator ---------------------------------------------------------------

#[test]
fn manual_seed_makes_randn_and_rand_reproducible() {
    let _rng = rng_lock();
    manual_seed(123);
    let (a, b) = (Tensor::randn(&[50]).to_vec(), Tensor::rand(&[50]).to_vec());
    manual_seed(123);
    assert_eq!(Tensor::randn(&[50]).to_vec(), a);
    assert_eq!(Tensor::rand(&[50]).to_vec(), b);
    manual_seed(124);
    assert_ne!(Tensor::randn(&[50]).to_vec(), a);
    manual_seed(5);
    let p = Tensor::randperm(10).to_vec_i64();
    manual_seed(5);
    assert_eq!(Tensor::randperm(10).to_vec_i64(), p);
    let mut sorted = p.clone();
    sorted.sort();
    assert_eq!(sorted, (0..10).collect::<Vec<i64>>());
}

#[test]
fn random_constructors_have_the_right_distributions() {
    let _rng = rng_lock();
    manual_seed(0);
    let n = 20_000;
    let u = Tensor::rand(&[n]).to_vec();
    assert!(u.iter().all(|&v| (0.0..1.0).contains(&v)));
    let mean = u.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
    assert!((mean - 0.5).abs() < 0.01, "uniform mean {mean}");
    let z = Tensor::randn(&[n]);
    let (m, v) = (z.mean().item(), z.var_dims::<usize>(&[], 1, false).item());
    assert!(m.abs() < 0.03 && (v - 1.0).abs() < 0.05, "normal mean {m} var {v}");
    let g = Tensor::normal(&[n], 3.0, 0.5);
    assert!((g.mean().item() - 3.0).abs() < 0.02 && (g.var_dims::<usize>(&[], 1, false).item() - 0.25).abs() < 0.02);
    let w = Tensor::uniform(&[n], -2.0, -1.0).to_vec();
    assert!(w.iter().all(|&v| (-2.0..-1.0).contains(&v)));
}

// ---- constructors and values --------------------------------------------------------

#[test]
fn constructors() {
    assert_eq!(Tensor::eye(2).to_vec(), vec![1.0, 0.0, 0.0, 1.0]);
    assert_eq!(Tensor::arange(1.0, 0.0, -0.25).to_vec(), vec![1.0, 0.75, 0.5, 0.25]);
    assert_eq!(Tensor::full(&[2], 1.5).to_vec(), vec![1.5, 1.5]);
    let i = Tensor::from_vec_i64(vec![1, 2], &[2]);
    assert_eq!((Tensor::ones_like(&i).dtype(), Tensor::ones_like(&i).to_vec_i64()), (DType::I64, vec![1, 1]));
    assert_eq!(Tensor::scalar(2.0).shape(), &[] as &[usize]);
    assert!(Tensor::try_from_vec(vec![1.0; 3], &[2, 2]).is_err());
    assert_eq!(
        Tensor::try_from_vec(vec![1.0; 3], &[2, 2]).unwrap_err().to_string(),
        "Tensor::try_from_vec: shape [2, 2] needs 4 elements, got 3"
    );
    assert_eq!(Tensor::from_data(vec![true], &[1]).unwrap().dtype(), DType::Bool);
    assert_eq!(format!("{}", t64(&[1.0, 2.5], &[2])), "tensor([1.0000, 2.5000], dtype=f64)");
    assert_eq!(format!("{}", leaf(&[1.0], &[1]) * 2.0), "tensor([2.0000], dtype=f64, grad_fn=affine)");
}

// ---- shapes whose element count does not fit ---------------------------------------

/// The panic message of `f`, which must panic.
fn panic_message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let e = std::panic::catch_unwind(f).expect_err("no panic");
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
}

#[test]
fn wrapping_shapes_are_refused_by_every_constructor() {
    let wraps = [(1usize << 63) + 1, 2]; // the product wraps to 2
    let e = Tensor::try_from_vec(vec![1.0, 2.0], &wraps).unwrap_err();
    assert!(matches!(e, Error::ShapeOverflow { op: "Tensor::try_from_vec", .. }), "{e:?}");
    assert!(e.to_string().contains("[9223372036854775809, 2] is unrepresentable"), "{e}");
    let m = panic_message(|| drop(Tensor::from_vec(vec![1.0, 2.0], &wraps)));
    assert!(m.starts_with("Tensor::from_vec: shape [9223372036854775809, 2] is unrepresentable"), "{m}");
    assert!(Tensor::from_data(vec![1i64, 2], &wraps).is_err());
    let huge = [1usize << 32, 1 << 32];
    for (name, f) in [
        ("Tensor::zeros", Box::new(|| drop(Tensor::zeros(&huge))) as Box<dyn FnOnce() + std::panic::UnwindSafe>),
        ("Tensor::ones", Box::new(|| drop(Tensor::ones(&huge)))),
        ("Tensor::full", Box::new(|| drop(Tensor::full(&huge, 2.0)))),
        ("Tensor::randn", Box::new(|| drop(Tensor::randn(&huge)))),
        ("Tensor::uniform", Box::new(|| drop(Tensor::rand(&huge)))),
        ("Tensor::normal", Box::new(|| drop(Tensor::normal(&huge, 0.0, 1.0)))),
        ("Tensor::eye", Box::new(|| drop(Tensor::eye(1 << 32)))),
        ("Tensor::full_on", Box::new(|| drop(Tensor::full_on(&huge, 0.0, DType::I64, Device::Meta)))),
    ] {
        let m = panic_message(f);
        assert!(m.starts_with(&format!("{name}: shape [4294967296, 4294967296] is unrepresentable")), "{m}");
    }
    assert!(matches!(Tensor::try_zeros(&huge), Err(Error::ShapeOverflow { .. })));
    // Zero-element shapes count zero dims as 1: their strides must fit too.
    assert!(Tensor::try_zeros(&[0, 1 << 40, 1 << 40]).is_err());
    assert_eq!(Tensor::try_zeros(&[0, 1 << 40]).unwrap().numel(), 0);
    // A representable shape whose buffer cannot exist: an error, not an abort.
    let e = Tensor::try_zeros(&[1 << 62]).unwrap_err();
    assert!(matches!(e, Error::Allocation { bytes, .. } if bytes == 1 << 64), "{e:?}");
    let m = panic_message(|| drop(Tensor::arange(0.0, 1e30, 1.0)));
    assert!(m.contains("more than a tensor can hold"), "{m}");
}

#[test]
fn ops_refuse_results_whose_shape_does_not_fit() {
    let m = panic_message(|| drop(Tensor::zeros(&[2]).reshape(&[(1 << 63) + 1, 2])));
    assert!(m.starts_with("reshape: shape [9223372036854775809, 2] is invalid for input of shape [2]"), "{m}");
    let m = panic_message(|| drop(Tensor::zeros(&[2]).view(&[(1 << 63) + 1, 2])));
    assert!(m.starts_with("view: shape [9223372036854775809, 2] is invalid"), "{m}");
    let m = panic_message(|| drop(Tensor::zeros(&[1]).expand(&[1 << 40, 1 << 40])));
    assert!(m.starts_with("expand: shape [1099511627776, 1099511627776] is unrepresentable"), "{m}");
    // Each operand is a cheap, valid view; their broadcast is not.
    let (col, row) = (Tensor::zeros(&[1, 1]).expand(&[1 << 40, 1]), Tensor::zeros(&[1, 1]).expand(&[1, 1 << 40]));
    let m = panic_message(|| drop(&col + &row));
    assert!(m.starts_with("broadcast: shapes [1099511627776, 1] and [1, 1099511627776] broadcast to"), "{m}");
    // k = 0: both operands are empty, the product is not.
    let (a, b) = (Tensor::zeros(&[1 << 40, 0]), Tensor::zeros(&[0, 1 << 40]));
    let m = panic_message(|| drop(a.matmul(&b)));
    assert!(m.starts_with("matmul: shape [1099511627776, 1099511627776] is unrepresentable"), "{m}");
    let big = Tensor::zeros(&[usize::MAX / 2, 0]);
    let m = panic_message(|| drop(Tensor::cat(&[&big, &big, &big], 0)));
    assert!(m.starts_with("cat: shape"), "{m}");
}

#[test]
#[should_panic(expected = "Tensor::from_vec: shape [2, 2] needs 4 elements, got 3")]
fn from_vec_with_wrong_length_panics() {
    Tensor::from_vec(vec![1.0; 3], &[2, 2]);
}

#[test]
#[should_panic(expected = "item: a tensor with 2 elements (shape [2]) cannot be converted to a scalar")]
fn item_of_a_vector_panics() {
    Tensor::ones(&[2]).item();
}

// ---- in-place updates and autograd state --------------------------------------------

#[test]
fn in_place_updates_write_through_views_and_detached_copies() {
    let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let view = x.t();
    x.add_(&Tensor::from_vec(vec![10.0, 20.0], &[2]));
    assert_eq!(x.to_vec(), vec![11.0, 22.0, 13.0, 24.0]);
    assert_eq!(view.to_vec(), vec![11.0, 13.0, 22.0, 24.0], "a view sees its base's update");
    x.mul_(0.5);
    assert_eq!(view.to_vec(), vec![5.5, 6.5, 11.0, 12.0]);
    x.fill_(7.0);
    assert_eq!(view.to_vec(), vec![7.0; 4]);
    x.zero_();
    assert_eq!(view.to_vec(), vec![0.0; 4]);
    // copy_ into a strided view writes through its own layout, into its base.
    let base = Tensor::from_vec(vec![0.0; 4], &[2, 2]);
    let t = base.t();
    t.copy_(&Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]));
    assert_eq!(t.to_vec(), vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(base.to_vec(), vec![1.0, 3.0, 2.0, 4.0]);
}

#[test]
fn every_view_op_and_detach_is_an_alias_in_both_directions() {
    type View = fn(&Tensor) -> Tensor;
    let views: [(&str, View); 12] = [
        ("narrow", |t| t.narrow(1, 1, 2)),
        ("transpose", |t| t.transpose(0, 1)),
        ("permute", |t| t.permute(&[1, 0])),
        ("reshape", |t| t.reshape(&[3, 2])),
        ("view", |t| t.view(&[6])),
        ("flatten", |t| t.flatten(0, 1)),
        ("unsqueeze", |t| t.unsqueeze(0)),
        ("squeeze_dim", |t| t.unsqueeze(1).squeeze_dim(1)),
        ("split", |t| t.split(1, 0)[1].clone()),
        ("chunk", |t| t.chunk(3, 1)[2].clone()),
        ("detach", |t| t.detach()),
        ("detach of a view of a detach", |t| t.detach().t().detach()),
    ];
    for (name, view) in views {
        // The view writes into the base ...
        let base = Tensor::arange(0.0, 6.0, 1.0).reshape(&[2, 3]);
        let v = view(&base);
        let n = v.numel();
        v.add_(100.0);
        let changed = base.to_vec().iter().filter(|&&x| x >= 100.0).count();
        assert_eq!(changed, n, "{name}: every element of the view, and only those, changed in the base");
        // ... and the base into the view, as in PyTorch.
        base.mul_(0.0);
        assert_eq!(v.to_vec(), vec![0.0; n], "{name}: the view sees the base's update");
        // A value taken out of place is not an alias.
        let out = &v + 1.0;
        base.fill_(5.0);
        assert_eq!(out.to_vec(), vec![1.0; n], "{name}: an op's result is its own");
    }
}

#[test]
fn aliases_on_the_meta_device_and_of_integer_tensors() {
    let ids = Tensor::from_vec_i64(vec![1, 2, 3, 4], &[2, 2]);
    ids.narrow(0, 1, 1).add_(10);
    assert_eq!(ids.to_vec_i64(), vec![1, 2, 13, 14]);
    let m = Tensor::full_on(&[2, 2], 0.0, DType::F32, Device::Meta);
    m.t().add_(1.0);
    assert_eq!((m.device(), m.t().detach().device()), (Device::Meta, Device::Meta));
}

#[test]
fn values_saved_for_backward_are_the_forwards_after_a_write_through_an_alias() {
    let w = Tensor::from_vec(vec![2.0, 3.0], &[2]).requires_grad_(true);
    let x = Tensor::from_vec(vec![5.0, 7.0], &[2]).requires_grad_(true);
    let y = (&x * &w).sum();
    // PyTorch raises a version-counter error here; nn keeps the forward's values.
    no_grad(|| {
        w.narrow(0, 0, 1).fill_(100.0);
    });
    w.detach().add_(1.0);
    assert_eq!(w.to_vec(), [101.0, 4.0]);
    y.backward();
    assert_eq!(x.grad().unwrap().to_vec(), [2.0, 3.0]);
    assert_eq!(w.grad().unwrap().to_vec(), [5.0, 7.0]);
}

#[test]
fn gradients_are_never_aliases_of_each_other() {
    // Both leaves of an add receive the same incoming gradient: scaling one `.grad` in
    // place (as gradient clipping and unscaling do) must not scale the other.
    let a = Tensor::ones(&[2]).requires_grad_(true);
    let b = Tensor::ones(&[2]).requires_grad_(true);
    (&a + &b).sum().backward();
    no_grad(|| {
        a.grad().unwrap().mul_(0.5);
    });
    assert_eq!((a.grad().unwrap().to_vec(), b.grad().unwrap().to_vec()), (vec![0.5; 2], vec![1.0; 2]));
    // A gradient set from a tensor does not follow that tensor either.
    let g = Tensor::ones(&[2]);
    a.set_grad(Some(g.clone()));
    g.fill_(3.0);
    assert_eq!(a.grad().unwrap().to_vec(), [1.0, 1.0]);
}

#[test]
fn set_data_leaves_the_aliases_made_before_with_the_old_values() {
    let w = Tensor::from_vec(vec![1.0, 2.0], &[2]);
    let (d, v) = (w.detach(), w.narrow(0, 1, 1));
    w.set_data(&Tensor::from_vec(vec![5.0, 6.0], &[2]));
    assert_eq!((d.to_vec(), v.to_vec()), (vec![1.0, 2.0], vec![2.0]));
    // The old aliases still alias each other, and no longer the tensor.
    d.add_(1.0);
    assert_eq!((v.to_vec(), w.to_vec()), (vec![3.0], vec![5.0, 6.0]));
    // Nor does the source become an alias of the tensor.
    let src = Tensor::from_vec(vec![7.0, 8.0], &[2]);
    w.set_data(&src);
    src.zero_();
    assert_eq!(w.to_vec(), [7.0, 8.0]);
}

#[test]
fn copy_and_snapshot_keep_values_apart_from_later_updates() {
    let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]).requires_grad_(true);
    let c = x.t().copy();
    assert!(c.is_contiguous() && c.requires_grad());
    (&c * &Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])).sum().backward();
    assert_eq!(x.grad().unwrap().to_vec(), [1.0, 3.0, 2.0, 4.0]);
    let (copied, kept) = (x.detach().copy(), x.snapshot());
    no_grad(|| x.add_(1.0));
    assert_eq!(copied.to_vec(), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(kept.to_vec(), [1.0, 2.0, 3.0, 4.0]);
    kept.zero_();
    assert_eq!(x.to_vec(), [2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn in_place_updates_from_a_source_that_requires_grad_are_refused_outside_no_grad() {
    let w = Tensor::from_vec(vec![1.0, 2.0], &[2]).requires_grad_(true);
    let acc = Tensor::zeros(&[2]);
    let h = &w * 2.0;
    for (op, f) in [
        (
            "copy_",
            Box::new(|| {
                acc.copy_(&h);
            }) as Box<dyn Fn()>,
        ),
        (
            "add_",
            Box::new(|| {
                acc.add_(&w);
            }),
        ),
        (
            "mul_",
            Box::new(|| {
                acc.narrow(0, 0, 1).mul_(&h.narrow(0, 0, 1));
            }),
        ),
    ] {
        let msg = panic_message(std::panic::AssertUnwindSafe(f));
        assert!(msg.contains(&format!("{op}: the source (shape")), "{msg}");
        assert!(msg.contains("no gradient would reach it"), "{msg}");
        assert_eq!(acc.to_vec(), [0.0, 0.0], "{op}: nothing written");
    }
    // Its values only, said so: inside no_grad, or from a detached copy.
    no_grad(|| acc.add_(&w));
    acc.add_(&h.detach());
    assert_eq!(acc.to_vec(), [3.0, 6.0]);
}

#[test]
fn in_place_on_a_parameter_inside_no_grad_is_allowed() {
    let w = Tensor::ones(&[2]).requires_grad_(true);
    no_grad(|| w.add_(&Tensor::full(&[2], 0.5)));
    assert_eq!(w.to_vec(), vec![1.5, 1.5]);
    assert!(w.requires_grad() && w.is_leaf());
}

#[test]
#[should_panic(expected = "add_: in-place update of a tensor that requires grad; run it inside `no_grad(|| ...)`")]
fn in_place_on_a_tensor_requiring_grad_panics() {
    Tensor::ones(&[2]).requires_grad_(true).add_(&Tensor::ones(&[2]));
}

#[test]
#[should_panic(expected = "copy_: in-place update of a tensor that requires grad")]
fn copy_into_a_tensor_requiring_grad_panics() {
    Tensor::ones(&[2]).requires_grad_(true).copy_(&Tensor::ones(&[2]));
}

#[test]
#[should_panic(expected = "requires_grad_: only tensors of floating-point dtype can require gradients, got i64")]
fn requires_grad_on_integers_panics() {
    Tensor::from_vec_i64(vec![1], &[1]).requires_grad_(true);
}

#[test]
#[should_panic(expected = "requires_grad_: you can only change requires_grad flags of leaf tensors")]
fn clearing_requires_grad_on_a_non_leaf_panics() {
    (Tensor::ones(&[1]).requires_grad_(true) * 2.0).requires_grad_(false);
}

#[test]
fn detach_shares_values_but_not_the_graph() {
    let x = leaf(&[1.0, 2.0], &[2]);
    let y = &x * 3.0;
    let d = y.detach();
    assert!(!d.requires_grad() && d.is_leaf() && d.grad_fn_name().is_none());
    assert!(Arc::ptr_eq(&d.storage_arc(), &y.storage_arc()));
    assert_ne!(d.id(), y.id());
    (&d * &x).sum().backward();
    assert_eq!(grad(&x), vec![3.0, 6.0], "no gradient flows through the detached factor");
}

#[test]
fn clones_are_the_same_tensor() {
    let x = leaf(&[1.0], &[1]);
    let c = x.clone();
    assert_eq!(c.id(), x.id());
    (&c * 2.0).sum().backward();
    assert_eq!(grad(&x), vec![2.0]);
    x.zero_grad();
    assert!(c.grad().is_none());
    x.set_grad(Some(t64(&[5.0], &[1])));
    assert_eq!(grad(&c), vec![5.0]);
}

#[test]
#[should_panic(expected = "set_grad: gradient of shape [2] for a tensor of shape [1]")]
fn set_grad_with_the_wrong_shape_panics() {
    leaf(&[1.0], &[1]).set_grad(Some(t64(&[1.0, 2.0], &[2])));
}

#[test]
fn contiguous_and_to_device_backward() {
    let x = leaf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    (x.t().contiguous() * t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])).sum().backward();
    assert_eq!(grad(&x), vec![1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
    // Through a meta round trip the values are gone but the gradient still arrives.
    let y = leaf(&[1.0, 2.0], &[2]);
    let back = y.to_device(Device::Meta).to_device(Device::Cpu);
    assert!(back.requires_grad());
    (back + 1.0).exp().sum().backward();
    assert_close64(&grad(&y), &[1f64.exp(), 1f64.exp()], 1e-15);
}

#[test]
fn a_tensor_sharing_its_storage_frees_what_backward_saved_with_it() {
    for share in [false, true] {
        let w = Tensor::from_vec(vec![2.0, 3.0], &[2]).requires_grad_(true);
        if share {
            w.share_storage_with_views();
            w.share_storage_with_views(); // again: nothing changes
        }
        let x = Tensor::from_vec(vec![5.0, 7.0], &[2]).requires_grad_(true);
        // `matmul` saves a view of `w` (`w.unsqueeze(1)`, detached) for backward.
        let y = x.matmul(&w.unsqueeze(1)).sum();
        let buffer = Arc::downgrade(&w.storage_arc());
        w.set_data(&Tensor::full_on(&[2], 0.0, DType::F32, Device::Meta));
        // Shared, the graph's saved view went with the parameter's values; not shared, the
        // graph holds the buffer until backward.
        assert_eq!(buffer.upgrade().is_some(), !share, "share = {share}");
        if share {
            w.set_data(&Tensor::from_vec(vec![2.0, 3.0], &[2]));
        }
        y.backward();
        assert_eq!(x.grad().unwrap().to_vec(), [2.0, 3.0]);
        assert_eq!(w.grad().unwrap().to_vec(), [5.0, 7.0]);
    }
}

#[test]
fn views_of_a_tensor_sharing_its_storage_read_its_values_as_they_are_now() {
    let w = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let before = w.t(); // made before: an alias all the same
    let kept = w.snapshot();
    w.share_storage_with_views();
    assert!(w.shares_storage_with_views() && before.shares_storage_with_views());
    let t = w.t();
    let d = t.detach().narrow(0, 1, 1);
    assert!(t.shares_storage_with_views() && d.shares_storage_with_views() && !kept.shares_storage_with_views());
    w.set_data(&Tensor::from_vec(vec![5.0, 6.0, 7.0, 8.0], &[2, 2]));
    assert_eq!(t.to_vec(), [5.0, 7.0, 6.0, 8.0]);
    assert_eq!(d.to_vec(), [6.0, 8.0]);
    assert_eq!(before.to_vec(), [5.0, 7.0, 6.0, 8.0]);
    assert_eq!(kept.to_vec(), [1.0, 2.0, 3.0, 4.0]);
    w.add_(&Tensor::ones(&[2, 2]));
    assert_eq!(t.to_vec(), [6.0, 8.0, 7.0, 9.0]);
    // An op that is not a view gets a buffer of its own.
    let s = &t * 2.0;
    assert!(!s.shares_storage_with_views());
    // Only the tensor itself replaces the shared buffer.
    let msg = panic_message(std::panic::AssertUnwindSafe(|| t.set_data(&Tensor::zeros(&[2, 2]))));
    assert!(msg.contains("a view of a tensor that shares its storage"), "{msg}");
    let msg = panic_message(std::panic::AssertUnwindSafe(|| t.share_storage_with_views()));
    assert!(msg.contains("call it on that tensor"), "{msg}");
    assert_eq!(w.to_vec(), [6.0, 7.0, 8.0, 9.0]);
}

#[test]
fn a_backward_that_reads_a_freed_shared_value_panics() {
    let w = Tensor::from_vec(vec![2.0, 3.0], &[2]).requires_grad_(true);
    w.share_storage_with_views();
    let x = Tensor::from_vec(vec![5.0, 7.0], &[2]).requires_grad_(true);
    let y = (&x * &w).sum();
    w.set_data(&Tensor::full_on(&[2], 0.0, DType::F32, Device::Meta));
    let msg = panic_message(std::panic::AssertUnwindSafe(|| y.backward()));
    assert!(msg.contains("backward of `mul`: a value saved for backward holds no values"), "{msg}");
    assert!(x.grad().is_none(), "no meta gradient reached the leaf");
}

#[test]
fn retain_grad_keeps_a_non_leaf_gradient_and_reading_one_otherwise_panics() {
    let x = Tensor::from_vec(vec![1.0, 2.0], &[2]).requires_grad_(true);
    let h = &x * 3.0;
    let unkept = h.exp();
    let msg = panic_message(std::panic::AssertUnwindSafe(|| drop(unkept.grad())));
    assert!(msg.contains("not a leaf (it is the output of `exp`)") && msg.contains("retain_grad()"), "{msg}");
    h.retain_grad();
    h.retain_grad(); // once is enough: the gradient is not added twice
    assert!(h.retains_grad() && !x.retains_grad() && !unkept.retains_grad());
    let loss = (&h * &h).sum();
    loss.retain_grad();
    loss.backward_with(&Tensor::ones(&[]), true); // keep h's node for the second pass
    assert_eq!(h.grad().unwrap().to_vec(), [6.0, 12.0]);
    assert_eq!(loss.grad().unwrap().to_vec(), [1.0]);
    // Accumulated across passes, as a leaf's.
    (&h * 2.0).sum().backward();
    assert_eq!(h.grad().unwrap().to_vec(), [8.0, 14.0]);
    // A clone is the same tensor; a dropped retained tensor is skipped.
    let h2 = &x * 1.0;
    h2.clone().retain_grad();
    assert!(h2.retains_grad());
    let y = (&h2 * 2.0).sum();
    drop(h2);
    y.backward();
    let msg = panic_message(|| Tensor::ones(&[1]).retain_grad());
    assert!(msg.contains("requires_grad=False"), "{msg}");
}

#[test]
fn share_storage_with_views_refuses_a_view_of_part_of_a_buffer() {
    let big = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let msg = panic_message(std::panic::AssertUnwindSafe(|| big.narrow(0, 1, 1).share_storage_with_views()));
    assert!(msg.contains("a view of part of a buffer of 4 elements"), "{msg}");
    assert!(!big.shares_storage_with_views());
    big.t().share_storage_with_views(); // a view of all of it is fine
}

#[test]
fn a_clamps_bounds_are_saved_as_they_were_in_the_forward() {
    let x = Tensor::from_vec(vec![0.5, 2.0], &[2]).requires_grad_(true);
    let lo = Tensor::from_vec(vec![0.0, 0.0], &[2]);
    let y = x.clamp_tensor(Some(&lo), None);
    lo.fill_(1.0);
    y.sum().backward();
    assert_eq!(x.grad().unwrap().to_vec(), [1.0, 1.0]);
}

#[test]
fn set_data_from_part_of_a_larger_buffer_owns_a_buffer_of_its_own() {
    let fused = Tensor::arange(0.0, 8.0, 1.0).reshape(&[4, 2]);
    let w = Tensor::zeros(&[2, 2]);
    w.set_data(&fused.narrow(0, 0, 2));
    assert_eq!(w.storage_arc().len(), 4, "not the fused buffer of 8");
    w.share_storage_with_views(); // FSDP's call: a tensor spanning its buffer
    w.add_(1.0);
    assert_eq!(fused.to_vec()[..4], [0.0, 1.0, 2.0, 3.0]);
    assert_eq!(w.to_vec(), [1.0, 2.0, 3.0, 4.0]);
}
