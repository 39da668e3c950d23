//! Parity with PyTorch for the 3-D layers (`Conv3d`, `MaxPool3d`, `AvgPool3d`, `BatchNorm3d`) against
//! `tests/fixtures/pytorch/layers_volumes.py`'s committed outputs (the helpers and
//! tolerances of `layers.rs`; with the `gpu` feature every case runs on `gpu:0` too): values,
//! input and parameter gradients in train and eval mode, max-pool windows full of ties
//! included; printouts against PyTorch's `repr` (the lazy layers' before and after their first
//! forward); Conv3d's init; the lazy layers' materialisation; bad arguments.

use std::collections::HashMap;
use std::path::Path;

use nn_core::{manual_seed, Forward, Module, Tensor};
use nn_layers::*;

use crate::layers::{check, fwd, LOOSE, TIGHT};

fn conv3d_rect() -> Conv3d {
    let cfg = Conv3dConfig { stride: (2, 1, 2), padding: (1, 0, 1), dilation: (2, 1, 1), groups: 2, bias: false };
    Conv3d::with_kernel(4, 6, (2, 3, 1), cfg)
}

fn conv3d_strided() -> Conv3d {
    Conv3d::with_kernel(3, 2, (2, 2, 2), Conv2dConfig { stride: 3, padding: 1, ..Default::default() })
}

fn maxpool3d_rect() -> MaxPool3d {
    let cfg = MaxPool3dConfig { stride: Some((2, 1, 2)), padding: (1, 1, 0), dilation: (1, 2, 1), ceil_mode: false };
    MaxPool3d::with_kernel((3, 2, 2), cfg)
}

fn avgpool3d_pad() -> AvgPool3d {
    let cfg = AvgPool3dConfig { stride: Some((2, 1, 2)), padding: (1, 1, 1), ..Default::default() };
    AvgPool3d::with_kernel((3, 2, 3), cfg)
}

fn avgpool3d_nopad() -> AvgPool3d {
    AvgPool3d::with_options(3, 2, 1, true, false)
}

#[test]
fn convolutions() {
    check("conv3d", || Conv3d::new(2, 4, 3), fwd, LOOSE);
    // Per-axis stride, padding and dilation, groups, no bias.
    check("conv3d_rect", conv3d_rect, fwd, LOOSE);
    // Unbatched `[C, D, H, W]`, a stride larger than the kernel.
    check("conv3d_strided", conv3d_strided, fwd, LOOSE);
}

#[test]
fn pools() {
    // Inputs of four levels: the windows hold ties, and the gradient goes where PyTorch's does.
    check("maxpool3d", || MaxPool3d::new(2), fwd, TIGHT);
    check("maxpool3d_rect", maxpool3d_rect, fwd, TIGHT);
    check("maxpool3d_ceil", || MaxPool3d::with_options(2, 2, 0, 1, true), fwd, TIGHT);
    check("avgpool3d", || AvgPool3d::new(2), fwd, TIGHT);
    check("avgpool3d_pad", avgpool3d_pad, fwd, TIGHT);
    check("avgpool3d_nopad", avgpool3d_nopad, fwd, TIGHT);
}

#[test]
fn batch_norm_3d() {
    // Train mode (batch statistics, running buffers updated) and eval mode.
    check("batchnorm3d", || BatchNorm3d::new(3), fwd, TIGHT);
}

#[test]
fn lazy_layers_become_their_layer_at_the_first_forward() {
    let conv = LazyConv1d::with_config(4, 3, Conv1dConfig { stride: 2, padding: 1, bias: false, ..Default::default() });
    assert!(conv.try_state_dict().is_err());
    assert_eq!(conv.forward(&Tensor::zeros(&[2, 5, 9])).shape(), &[2, 4, 5]);
    assert_eq!(conv.to_string(), "Conv1d(5, 4, kernel_size=(3,), stride=(2,), padding=(1,), bias=False)");
    assert_eq!(conv.state_dict().keys().collect::<Vec<_>>(), ["weight"]);
    assert!(conv.as_any().downcast_ref::<Conv1d>().is_some());

    let conv = LazyConv3d::with_kernel(4, (1, 3, 3), Conv3dConfig { padding: (0, 1, 1), ..Default::default() });
    assert_eq!(conv.forward(&Tensor::zeros(&[2, 3, 4, 5, 6])).shape(), &[2, 4, 4, 5, 6]);
    assert_eq!(conv.materialized().unwrap().weight.shape(), &[4, 3, 1, 3, 3]);

    // A lazy batch norm follows the model's mode after it has materialised: eval uses the
    // running statistics (it kept training on the batch's before).
    let mut bn = LazyBatchNorm2d::new();
    let x = Tensor::randn(&[4, 3, 2, 2]) * 3.0 + 1.0;
    bn.forward(&x);
    bn.eval();
    let inner = bn.materialized().unwrap();
    assert!(!inner.is_training());
    let want = x.batch_norm(
        inner.running_mean.as_ref(),
        inner.running_var.as_ref(),
        inner.weight.as_deref(),
        inner.bias.as_deref(),
        false,
        0.1,
        1e-5,
    );
    nn_core::testing::assert_close(&bn.forward(&x).to_vec(), &want.to_vec(), 1e-6, 1e-6);
    let mut bn = LazyBatchNorm3d::new();
    bn.eval(); // before the first forward: kept
    bn.forward(&Tensor::randn(&[2, 3, 2, 2, 2]));
    assert!(!bn.materialized().unwrap().is_training());
    assert_eq!(bn.state_dict().get("num_batches_tracked").unwrap().to_vec_i64(), [0]);
}

#[test]
fn printouts_match_pytorch() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch/reprs_volumes.json");
    let expected: HashMap<String, String> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mine: Vec<(&str, String)> = vec![
        ("conv3d", Conv3d::new(2, 4, 3).to_string()),
        ("conv3d_rect", conv3d_rect().to_string()),
        ("conv3d_strided", conv3d_strided().to_string()),
        ("maxpool3d", MaxPool3d::new(2).to_string()),
        ("maxpool3d_rect", maxpool3d_rect().to_string()),
        ("maxpool3d_ceil", MaxPool3d::with_options(2, 2, 0, 1, true).to_string()),
        ("avgpool3d", AvgPool3d::new(2).to_string()),
        ("avgpool3d_pad", avgpool3d_pad().to_string()),
        ("avgpool3d_nopad", avgpool3d_nopad().to_string()),
        ("batchnorm3d", BatchNorm3d::new(3).to_string()),
        (
            "lazyconv1d",
            LazyConv1d::with_config(4, 3, Conv1dConfig { stride: 2, padding: 1, bias: false, ..Default::default() })
                .to_string(),
        ),
        (
            "lazyconv3d",
            LazyConv3d::with_kernel(4, (1, 3, 3), Conv3dConfig { padding: (0, 1, 1), ..Default::default() })
                .to_string(),
        ),
        ("lazybatchnorm1d", LazyBatchNorm1d::new().to_string()),
        (
            "lazybatchnorm2d",
            LazyBatchNorm2d::with_config(BatchNormConfig { eps: 1e-3, momentum: None, ..Default::default() })
                .to_string(),
        ),
        (
            "lazybatchnorm3d",
            LazyBatchNorm3d::with_config(BatchNormConfig { affine: false, ..Default::default() }).to_string(),
        ),
    ];
    assert_eq!(mine.len(), expected.len(), "every PyTorch printout is compared");
    for (name, got) in mine {
        let want = expected.get(name).unwrap_or_else(|| panic!("no PyTorch repr for {name}"));
        assert_eq!(&got, want, "{name}");
    }
}

#[test]
fn conv3d_init_is_pytorchs_kaiming_uniform() {
    // Its own generator: the other tests of this binary draw from the process's in parallel,
    // and the span check below needs the draws of seed 3.
    nn_core::random::fork_rng(conv3d_init_forked);
}

fn conv3d_init_forked() {
    manual_seed(3);
    let c = Conv3d::new(4, 8, 3);
    // fan_in = 4 * 27: weight bound 1/sqrt(fan_in) (kaiming_uniform with a = sqrt(5)), bias the same.
    let bound = 1.0 / (4.0f64 * 27.0).sqrt();
    for (name, t) in [("weight", c.weight.tensor().clone()), ("bias", c.bias.as_ref().unwrap().tensor().clone())] {
        let v = t.to_vec_f64();
        let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        assert!(lo >= -bound - 1e-7 && hi <= bound + 1e-7, "{name}: [{lo}, {hi}] outside +-{bound}");
        assert!(lo < -0.8 * bound && hi > 0.8 * bound, "{name}: [{lo}, {hi}] does not span +-{bound}");
    }
    assert_eq!(c.state_dict().keys().collect::<Vec<_>>(), ["weight", "bias"]);
    assert_eq!(c.weight.shape(), &[8, 4, 3, 3, 3]);
}

fn panic_text(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let e = std::panic::catch_unwind(f).expect_err("must panic");
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
}

#[test]
fn bad_arguments_are_named() {
    let e = panic_text(|| {
        Conv3d::new(3, 4, 2).forward(&Tensor::zeros(&[1, 2, 4, 4, 4]));
    });
    assert!(e.contains("expects input [N, 3, D, H, W]"), "{e}");
    let e = panic_text(|| {
        Conv3d::new(3, 4, 3).forward(&Tensor::zeros(&[1, 3, 2, 4, 4]));
    });
    assert!(e.contains("conv3d: input [1, 3, 2, 4, 4]") && e.contains("smaller than the dilated kernel"), "{e}");
    let e = panic_text(|| {
        let _ = Conv3d::with_kernel(3, 4, (2, 2, 2), Conv3dConfig { groups: 2, ..Default::default() });
    });
    assert!(e.contains("must be divisible by groups 2"), "{e}");
    let e = panic_text(|| {
        MaxPool3d::with_kernel((2, 2, 2), MaxPool3dConfig { padding: (2, 0, 0), ..Default::default() })
            .forward(&Tensor::zeros(&[1, 1, 4, 4, 4]));
    });
    assert!(e.contains("max_pool3d: padding (2, 0, 0) should be at most half of the kernel size"), "{e}");
    let e = panic_text(|| {
        AvgPool3d::new(2).forward(&Tensor::zeros(&[4, 4, 4]));
    });
    assert!(e.contains("avg_pool3d: expected a 5-D input [N, C, D, H, W] (or 4-D [C, D, H, W], unbatched)"), "{e}");
}
