//! Training on the GPU against the CPU, from one initialisation (feature `gpu`; Mesa's
//! software Vulkan where there is no GPU). Every test needs `gpu:0` and fails, saying why,
//! when it cannot be opened.
#![cfg(feature = "gpu")]

use nn_core::functional::cross_entropy;
use nn_core::optim::{clip_grad_norm_, Adam, AdamConfig, AdamW, AdamWConfig, Optimizer, Sgd, SgdConfig};
use nn_core::{gpu, manual_seed, with_device, DType, Device, Forward, Module, StateDict, Tensor};
use nn_layers::{
    BatchNorm1d, BatchNorm2d, Conv2d, Dropout, Flatten, LayerNorm, Linear, MaxPool2d, ReLU, Sequential,
    TransformerEncoderLayer,
};

const GPU: Device = Device::Gpu(0);

/// Checks `gpu:0` and holds the suite's lock: the tests seed the global generator (dropout
/// masks, initialisation), so they run one at a time.
fn require_gpu() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = GPU.check() {
        panic!("the GPU suite needs gpu:0: {e}");
    }
    guard
}

fn max_rel(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs() / y.abs().max(1.0)).fold(0.0, f64::max)
}

/// Trains `model` (and a CPU copy of it) for `steps` steps of `opt` on the same batches;
/// returns both loss curves and the worst parameter difference at the end.
fn train_both<M: Module + nn_core::Layer>(
    make: impl Fn() -> M,
    make_opt: impl Fn(&M) -> Box<dyn Optimizer>,
    batches: &[(Tensor, Tensor)],
) -> (Vec<f64>, Vec<f64>, f64) {
    manual_seed(7);
    let mut cpu = make();
    let mut on_gpu = make();
    on_gpu.load_state_dict(&cpu.state_dict(), true).unwrap();
    on_gpu.to_device(GPU);
    assert!(on_gpu.parameters().iter().all(|p| p.device() == GPU));
    cpu.train();
    on_gpu.train();
    let mut oc = make_opt(&cpu);
    let mut og = make_opt(&on_gpu);
    let mut curves = (Vec::new(), Vec::new());
    for (step, (x, y)) in batches.iter().enumerate() {
        for (model, opt, curve, device) in
            [(&cpu, &mut oc, &mut curves.0, Device::Cpu), (&on_gpu, &mut og, &mut curves.1, GPU)]
        {
            // One seed per step: dropout draws the same mask on both devices.
            manual_seed(100 + step as u64);
            opt.zero_grad();
            let loss = cross_entropy(&model.forward(&x.to_device(device)), &y.to_device(device));
            loss.backward();
            clip_grad_norm_(&model.parameters(), 5.0);
            opt.step();
            curve.push(loss.item());
        }
    }
    let pc = cpu.state_dict();
    let pg = on_gpu.state_dict();
    let mut worst: f64 = 0.0;
    for (k, t) in pc.iter() {
        let g = pg.get(k).unwrap();
        assert_eq!(g.device(), GPU, "{k} left the GPU");
        worst = worst.max(max_rel(&g.to_vec_f64(), &t.to_vec_f64()));
    }
    (curves.0, curves.1, worst)
}

fn report(name: &str, (cpu, gpu, params): (Vec<f64>, Vec<f64>, f64)) {
    let loss_err = max_rel(&gpu, &cpu);
    eprintln!(
        "{name}: loss {:.4} -> {:.4} on the CPU, {:.4} -> {:.4} on the GPU; worst loss difference {loss_err:.1e}, \
         parameters {params:.1e}",
        cpu[0],
        cpu[cpu.len() - 1],
        gpu[0],
        gpu[gpu.len() - 1]
    );
    let (first, last) = (cpu[..5].iter().sum::<f64>(), cpu[cpu.len() - 5..].iter().sum::<f64>());
    assert!(last < first, "{name}: the CPU run did not learn (mean loss of the first 5 steps vs the last 5)");
    assert!(loss_err < 1e-3 && params < 1e-3, "{name}: GPU and CPU training diverged");
}

fn classes(n: usize, k: usize) -> Tensor {
    Tensor::from_vec_i64((0..n).map(|i| ((i * 7 + i / 3) % k) as i64).collect(), &[n])
}

/// A learnable task: the class is where the first `k` features of each row peak.
fn peak_classes(x: &Tensor, k: usize) -> Tensor {
    let rows = x.shape()[0];
    x.reshape(&[rows, x.numel() / rows]).narrow(1, 0, k).argmax(1, false)
}

#[test]
fn mlp_trains_the_same_on_gpu_and_cpu_for_20_steps() {
    let _gpu = require_gpu();
    manual_seed(1);
    let batches: Vec<(Tensor, Tensor)> = (0..20)
        .map(|_| {
            let x = Tensor::randn(&[32, 20]);
            let y = peak_classes(&x, 5);
            (x, y)
        })
        .collect();
    let make =
        || Sequential::new().add(Linear::new(20, 64)).add(ReLU::new()).add(Dropout::new(0.2)).add(Linear::new(64, 5));
    let adam = |m: &Sequential| -> Box<dyn Optimizer> {
        Box::new(Adam::new(m.named_parameters(), AdamConfig { lr: 1e-2, ..Default::default() }))
    };
    report("MLP, Adam", train_both(make, adam, &batches));
    let sgd = |m: &Sequential| -> Box<dyn Optimizer> {
        Box::new(Sgd::new(m.named_parameters(), SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() }))
    };
    report("MLP, SGD with momentum", train_both(make, sgd, &batches));
}

#[test]
fn cnn_and_transformer_train_the_same_on_gpu_and_cpu() {
    let _gpu = require_gpu();
    manual_seed(2);
    let images: Vec<(Tensor, Tensor)> = (0..20)
        .map(|_| {
            let x = Tensor::randn(&[8, 1, 8, 8]);
            let y = peak_classes(&x, 3);
            (x, y)
        })
        .collect();
    let cnn = || {
        Sequential::new()
            // Normalised after the ReLU: a bias right before a batch norm gets a gradient of
            // pure rounding noise, which Adam's normalisation amplifies differently on each
            // device.
            .add(Conv2d::new(1, 4, 3))
            .add(ReLU::new())
            .add(BatchNorm2d::new(4))
            .add(MaxPool2d::new(2))
            .add(Flatten::new())
            .add(Linear::new(36, 3))
    };
    let adamw = |m: &Sequential| -> Box<dyn Optimizer> {
        Box::new(AdamW::new(m.named_parameters(), AdamWConfig { lr: 1e-2, ..Default::default() }))
    };
    report("CNN, AdamW", train_both(cnn, adamw, &images));

    let tokens: Vec<(Tensor, Tensor)> = (0..20)
        .map(|_| {
            let x = Tensor::randn(&[4, 6, 16]);
            let y = peak_classes(&x, 3);
            (x, y)
        })
        .collect();
    #[derive(Module)]
    struct Tiny {
        #[module]
        layer: TransformerEncoderLayer,
        #[module]
        norm: LayerNorm,
        #[module]
        head: Linear,
        #[base]
        base: nn_core::ModuleBase,
    }
    impl nn_core::Compute for Tiny {
        type Input = Tensor;
        type Output = Tensor;
        fn compute(&self, x: &Tensor) -> Tensor {
            let h = self.norm.forward(&self.layer.forward(&nn_layers::EncoderInput::new(x)));
            self.head.forward(&h.mean_dim(1, false))
        }
    }
    let tiny = || Tiny {
        layer: TransformerEncoderLayer::new(16, 4),
        norm: LayerNorm::new(16),
        head: Linear::new(16, 3),
        base: Default::default(),
    };
    let adam = |m: &Tiny| -> Box<dyn Optimizer> {
        Box::new(Adam::new(m.named_parameters(), AdamConfig { lr: 3e-3, ..Default::default() }))
    };
    report("Transformer layer, Adam", train_both(tiny, adam, &tokens));
}

#[test]
fn state_dicts_cross_devices_bit_for_bit() {
    let _gpu = require_gpu();
    manual_seed(3);
    let net = || Sequential::new().add(Linear::new(5, 7)).add(BatchNorm1d::new(7));
    let mut g = net();
    g.to_device(GPU);
    // Values only a GPU kernel wrote.
    nn_core::no_grad(|| {
        for p in g.parameters() {
            p.copy_(&(&*p * 1.5 + 0.25));
        }
    });
    let sd = g.state_dict();
    let mut c = net();
    c.load_state_dict(&sd, true).unwrap();
    assert!(c.parameters().iter().all(|p| p.device() == Device::Cpu), "loading keeps the target's device");
    let back = c.state_dict();
    for (k, t) in sd.iter() {
        assert_eq!(back.get(k).unwrap().to_vec_f64(), t.to_vec_f64(), "{k}");
        assert_eq!(back.get(k).unwrap().dtype(), t.dtype(), "{k}");
    }
    // And through a file, into a GPU model.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    sd.save(&path).unwrap();
    let mut g2 = net();
    g2.to_device(GPU);
    g2.load_state_dict(&StateDict::load(&path).unwrap(), true).unwrap();
    for (k, t) in g2.state_dict().iter() {
        assert_eq!(t.device(), GPU, "{k}");
        assert_eq!(t.to_vec_f64(), sd.get(k).unwrap().to_vec_f64(), "{k}");
    }
}

#[test]
fn models_build_and_materialise_on_the_gpu() {
    let _gpu = require_gpu();
    manual_seed(4);
    let built = with_device(GPU, || Linear::new(6, 3));
    assert!(built.parameters().iter().all(|p| p.device() == GPU), "with_device(Gpu) allocates there");
    let sd = built.state_dict();
    let mut meta = with_device(Device::Meta, || Linear::new(6, 3));
    // A meta model has no values to move (PyTorch refuses too): storage is made on the
    // device with `to_empty`, then the state is loaded into it.
    assert!(meta.try_to_device(GPU).unwrap_err().to_string().contains("is on the meta device"));
    meta.to_empty(GPU).unwrap();
    meta.load_state_dict(&sd, true).unwrap();
    for (k, t) in meta.state_dict().iter() {
        assert_eq!((t.device(), t.to_vec_f64()), (GPU, sd.get(k).unwrap().to_vec_f64()), "{k}");
    }
    let mut half = Linear::new(4, 2);
    half.to_device(GPU);
    half.to_dtype(DType::BF16);
    let cpu_half = half.weight.to_device(Device::Cpu);
    assert_eq!(cpu_half.dtype(), DType::BF16);
    let err = Linear::new(2, 2).try_to_device(Device::Gpu(99)).unwrap_err().to_string();
    assert!(err.contains("gpu:99") && err.contains("adapter"), "{err}");
}

#[test]
fn a_training_step_after_warm_up_allocates_no_device_memory() {
    let _gpu = require_gpu();
    manual_seed(5);
    let mut model = Sequential::new().add(Linear::new(16, 32)).add(ReLU::new()).add(Linear::new(32, 4));
    model.to_device(GPU);
    let mut opt = Sgd::new(model.named_parameters(), SgdConfig { lr: 0.05, ..Default::default() });
    let (x, y) = (Tensor::randn(&[8, 16]).to_device(GPU), classes(8, 4).to_device(GPU));
    let mut step = || {
        opt.zero_grad();
        let loss = cross_entropy(&model.forward(&x), &y);
        loss.backward();
        opt.step();
        loss.item()
    };
    // The pool fills over the first steps (buffers of each size class are created as
    // often as they are live at once).
    for _ in 0..5 {
        step();
    }
    let before = gpu::stats(0);
    for _ in 0..5 {
        step();
    }
    let after = gpu::stats(0);
    let per_step = (after.allocations - before.allocations) as f64 / 5.0;
    eprintln!(
        "after warm-up: {per_step} new device buffers per step, {} reused, {} kernels per step",
        (after.reuses - before.reuses) / 5,
        (after.dispatches - before.dispatches) / 5
    );
    assert_eq!(per_step, 0.0, "the caching allocator serves every buffer of a warm step");
    assert_eq!(
        after.host_path_calls(),
        before.host_path_calls(),
        "a training step runs every kernel on the device: {:?}",
        after.host_path
    );
    let state = opt.state_dict();
    assert!(state.tensors.iter().all(|(_, t)| t.device() == GPU), "the optimizer's state lives on the GPU");
}

#[test]
fn optimizer_state_resumes_across_devices() {
    let _gpu = require_gpu();
    manual_seed(6);
    let net = || Sequential::new().add(Linear::new(6, 8)).add(ReLU::new()).add(Linear::new(8, 3));
    let cfg = AdamConfig { lr: 1e-2, ..Default::default() };
    let (x, y) = (Tensor::randn(&[5, 6]), classes(5, 3));
    let step = |m: &Sequential, o: &mut Adam, d: Device| {
        o.zero_grad();
        cross_entropy(&m.forward(&x.to_device(d)), &y.to_device(d)).backward();
        o.step();
    };
    // Two steps on the GPU, then the checkpoint (model and optimizer) goes on to a CPU
    // run and a fresh GPU run; one more step each must agree.
    let mut g = net();
    g.to_device(GPU);
    let mut og = Adam::new(g.named_parameters(), cfg);
    step(&g, &mut og, GPU);
    step(&g, &mut og, GPU);
    let (sd, osd) = (g.state_dict(), og.state_dict());
    let mut c = net();
    c.load_state_dict(&sd, true).unwrap();
    let mut oc = Adam::new(c.named_parameters(), cfg);
    oc.load_state_dict(&osd).unwrap();
    let mut g2 = net();
    g2.to_device(GPU);
    g2.load_state_dict(&sd, true).unwrap();
    let mut og2 = Adam::new(g2.named_parameters(), cfg);
    og2.load_state_dict(&osd).unwrap();
    step(&c, &mut oc, Device::Cpu);
    step(&g2, &mut og2, GPU);
    step(&g, &mut og, GPU);
    let (pc, pg2, pg) = (c.state_dict(), g2.state_dict(), g.state_dict());
    for (k, t) in pc.iter() {
        let want = t.to_vec_f64();
        assert!(
            max_rel(&pg2.get(k).unwrap().to_vec_f64(), &want) < 1e-5,
            "{k}: resumed GPU run differs from the CPU one"
        );
        assert_eq!(
            pg.get(k).unwrap().to_vec_f64(),
            pg2.get(k).unwrap().to_vec_f64(),
            "{k}: resuming on the GPU is exact"
        );
    }
}

/// A model moved between the CPU and the GPU in the middle of a run keeps its optimizer
/// state: the moments follow the parameters at the next step (before, the GPU-to-CPU move
/// panicked inside the step, and a moved Sgd restarted its momentum). The run that moves
/// agrees with one that stays on the CPU.
#[test]
fn optimizer_state_follows_a_model_moved_mid_run() {
    let _gpu = require_gpu();
    manual_seed(8);
    let net = || Sequential::new().add(Linear::new(6, 8)).add(ReLU::new()).add(Linear::new(8, 3));
    let (x, y) = (Tensor::randn(&[5, 6]), classes(5, 3));
    type Make = fn(&Sequential) -> Box<dyn Optimizer>;
    let makers: [(&str, Make); 2] = [
        ("adam", |m| Box::new(Adam::new(m.named_parameters(), AdamConfig { lr: 1e-2, ..Default::default() }))),
        ("sgd", |m| {
            let c = SgdConfig { lr: 0.05, momentum: 0.9, dampening: 0.5, ..Default::default() };
            Box::new(Sgd::new(m.named_parameters(), c))
        }),
    ];
    for (name, make) in makers {
        let step = |m: &Sequential, o: &mut dyn Optimizer| {
            let d = m.parameters()[0].device();
            o.zero_grad();
            cross_entropy(&m.forward(&x.to_device(d)), &y.to_device(d)).backward();
            o.step();
        };
        let mut moved = net();
        let mut stays = net();
        stays.load_state_dict(&moved.state_dict(), true).unwrap();
        let (mut om, mut os) = (make(&moved), make(&stays));
        for device in [Device::Cpu, GPU, GPU, Device::Cpu, Device::Cpu] {
            moved.to_device(device);
            step(&moved, &mut *om);
            step(&stays, &mut *os);
        }
        let (a, b) = (moved.state_dict(), stays.state_dict());
        for (k, t) in b.iter() {
            let got = a.get(k).unwrap().to_vec_f64();
            assert!(max_rel(&got, &t.to_vec_f64()) < 1e-5, "{name} {k}: the moved run differs from the CPU one");
        }
        assert!(om.state_dict().tensors.iter().all(|(_, t)| t.device() == Device::Cpu), "{name}");
    }
}
