//! A GPU device lost in the middle of training (cargo feature `gpu`; lavapipe where there is
//! no GPU). Its own test binary: a lost device stays lost for the whole process, as a CUDA
//! error does in PyTorch. It needs `gpu:0` and fails, saying why, when it cannot be opened.
#![cfg(feature = "gpu")]

use std::sync::mpsc;
use std::time::Duration;

use nn_core::functional as F;
use nn_core::optim::{AdamW, AdamWConfig, Optimizer};
use nn_core::{gpu, Device, Parameter, Tensor};

const GPU: Device = Device::Gpu(0);

/// The panic message of `f`, run on its own thread; fails the test when `f` returns or
/// when it has not finished within a minute (a wait on the dead device would hang there).
fn panic_of(what: &str, f: impl FnOnce() + Send + 'static) -> String {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r.err().map(|e| {
            e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
        }));
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Some(msg)) => msg,
        Ok(None) => panic!("{what}: returned normally on a lost device"),
        Err(_) => panic!("{what}: still running after 60 s on a lost device (a hang)"),
    }
}

fn assert_names_the_loss(what: &str, msg: &str, adapter: &str) {
    assert!(
        msg.contains("gpu:0") && msg.contains(adapter) && msg.contains("was lost"),
        "{what}: the message should name gpu:0, the adapter `{adapter}` and the loss: {msg}"
    );
}

#[test]
fn a_device_lost_mid_step_is_reported_by_name_at_every_use_without_a_hang() {
    if let Err(e) = GPU.check() {
        panic!("this test needs gpu:0: {e}");
    }
    let adapter = gpu::adapter_info(0).unwrap();
    let adapter = adapter.split(" (").next().unwrap().to_string();
    nn_core::manual_seed(3);
    let x = Tensor::randn(&[16, 8]).to_device(GPU);
    let y = Tensor::from_vec_i64((0..16).map(|k| k % 3).collect(), &[16]).to_device(GPU);
    let params: Vec<(String, Parameter)> = [("w1", vec![8, 8]), ("w2", vec![3, 8])]
        .into_iter()
        .map(|(n, s)| (n.to_string(), Parameter::new((Tensor::randn(&s) * 0.3).to_device(GPU))))
        .collect();
    let ps: Vec<Tensor> = params.iter().map(|(_, p)| p.tensor().clone()).collect();
    let mut opt = AdamW::new(params, AdamWConfig::default());
    let forward = {
        let (x, y, ps) = (x.clone(), y.clone(), ps.clone());
        move || F::cross_entropy(&x.matmul(&ps[0].t()).relu().matmul(&ps[1].t()), &y)
    };
    let mut losses = Vec::new();
    for _ in 0..3 {
        opt.zero_grad();
        let loss = forward();
        loss.backward();
        opt.step();
        losses.push(loss.item());
    }
    assert!(losses.iter().all(|l| l.is_finite()) && losses[2] < losses[0], "{losses:?}");
    let before = ps[0].to_device(Device::Cpu);

    // Half a step recorded and not yet submitted, then the device goes.
    let pending = forward();
    gpu::lose_device(0);

    // Nothing on gpu:0 can be read, computed, allocated or moved, and no call waits.
    let msg = panic_of("reading a value recorded before the loss", move || {
        let _ = pending.item();
    });
    assert_names_the_loss("item", &msg, &adapter);
    let step = {
        let forward = forward.clone();
        move || {
            let loss = forward();
            loss.backward();
            let _ = loss.item();
        }
    };
    assert_names_the_loss("a training step", &panic_of("a training step", step), &adapter);
    let w = ps[0].clone();
    assert_names_the_loss(
        "moving to the CPU",
        &panic_of("to_device", move || drop(w.to_device(Device::Cpu))),
        &adapter,
    );
    let upload = || drop(Tensor::ones(&[1 << 16]).to_device(GPU));
    assert_names_the_loss("an upload", &panic_of("upload", upload), &adapter);
    let err = GPU.check().expect_err("a lost device is not available").to_string();
    assert!(err.contains("gpu:0") && err.contains("lost"), "{err}");
    assert!(!gpu::is_available());

    // An optimizer step on the lost device fails at its first kernel: loudly.
    let msg = panic_of("an optimizer step", move || opt.step());
    assert_names_the_loss("an optimizer step", &msg, &adapter);

    // What was read back before the loss, and the CPU, are untouched.
    assert_eq!(before.device(), Device::Cpu);
    assert!(before.to_vec().iter().all(|v| v.is_finite()));
    assert_eq!((Tensor::ones(&[3]) * 2.0).to_vec(), vec![2.0; 3]);
}
