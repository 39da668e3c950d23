//! # The GPU
//!
//! `Device::Gpu(n)` is the `n`-th adapter wgpu finds (Vulkan, Metal or DX12; discrete GPUs
//! first), printed `gpu:n` (PyTorch's `cuda:n`). Its kernels are WGSL compute shaders,
//! forward and backward, for every op the layers, losses and optimizers use. They are
//! built only with the cargo feature `gpu`; the default build has no GPU code, and the
//! variant is always there so that a `match` on [`Device`](crate::Device) does not change
//! with the feature.
//!
//! ## Turning it on
//!
//! ```text
//! [dependencies]
//! nn = { path = "../nn", features = ["gpu"] }     # nn-core/gpu and nn-layers/gpu
//! ```
//! In this workspace: `cargo test -p nn --features gpu`, or an example with
//! `cargo run --release -p nn-examples --features gpu --bin digits_mlp -- --device gpu`.
//! A machine without a GPU runs the same code on Mesa's software Vulkan, lavapipe
//! (`apt-get install mesa-vulkan-drivers`), which is how the tests and CI run it.
//!
//! ## Moving a model and its data
//!
//! [`to_device`](crate::Module::to_device) moves every parameter and buffer in place
//! (handles held elsewhere, such as an optimizer's, see the move);
//! [`Tensor::to_device`](crate::Tensor::to_device) copies a tensor (a recorded op:
//! gradients flow back to the source device). Ops never copy between devices on their
//! own: mixing devices in one op panics, naming both. Kernels are recorded and submitted
//! in batches; the host waits only when it reads a value (`item`, `to_vec`, a save).
//! [`gpu::is_available`](crate::gpu::is_available) says whether `gpu:0` can be used, so
//! this snippet runs everywhere, on the GPU where there is one:
//! ```
//! use nn::prelude::*;
//! use nn::functional::cross_entropy;
//! use nn::layers::{Linear, ReLU, Sequential};
//! use nn::optim::{Optimizer, Sgd, SgdConfig};
//!
//! let build = || {
//!     nn::manual_seed(0);
//!     Sequential::new().add(Linear::new(4, 8)).add(ReLU::new()).add(Linear::new(8, 2))
//! };
//! let x = Tensor::from_vec((0..24).map(|i| (i as f32 * 0.37).sin()).collect(), &[6, 4]);
//! let y = Tensor::from_vec_i64(vec![0, 1, 1, 0, 1, 0], &[6]);
//! let step = |model: &Sequential, x: &Tensor, y: &Tensor| {
//!     let mut opt = Sgd::new(model.named_parameters(), SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() });
//!     opt.zero_grad();
//!     cross_entropy(&model.forward(x), y).backward();
//!     opt.step(); // the optimizer's state lives on the parameters' device
//! };
//! let cpu = build();
//! step(&cpu, &x, &y);
//!
//! let mut model = build();
//! if nn::gpu::is_available() {
//!     let gpu = Device::Gpu(0);
//!     println!("running on {}", nn::gpu::adapter_info(0).unwrap());
//!     model.to_device(gpu);
//!     let (xg, yg) = (x.to_device(gpu), y.to_device(gpu));
//!     step(&model, &xg, &yg);
//!     assert_eq!(model.parameters()[0].device(), gpu);
//!     for (a, b) in model.parameters().iter().zip(cpu.parameters()) {
//!         let (a, b) = (a.to_vec(), b.to_vec()); // to_vec reads back to the host
//!         assert!(a.iter().zip(&b).all(|(a, b)| (a - b).abs() < 1e-5));
//!     }
//!     assert!(std::panic::catch_unwind(|| &x + &xg).is_err()); // cpu and gpu:0 in one op
//!     assert!(nn::gpu::stats(0).dispatches > 0);
//! } else {
//!     // No `gpu` feature, or no adapter: an error naming the device and why, nothing moved.
//!     let e = model.try_to_device(Device::Gpu(0)).unwrap_err().to_string();
//!     assert!(e.starts_with("device gpu:0 is not available"), "{e}");
//!     assert_eq!(model.parameters()[0].device(), Device::Cpu);
//!     assert_eq!(nn::gpu::stats(0), nn::gpu::GpuStats::default());
//! }
//! ```
//! `model.to_device(..)` panics with the same message where `try_to_device` returns it.
//! Without the feature, the reason says to enable it (PyTorch's "Torch not compiled with
//! CUDA enabled"); with it, the reason is wgpu's (no adapter, or one that would not open).
//! [`Device::check`](crate::Device::check) asks without moving anything:
//! ```
//! use nn::Device;
//!
//! assert_eq!(Device::Gpu(0).to_string(), "gpu:0");
//! match Device::Gpu(0).check() {
//!     Ok(()) => assert!(nn::gpu::device_count() >= 1),
//!     Err(e) if cfg!(feature = "gpu") => assert!(e.to_string().contains("gpu:0"), "{e}"),
//!     Err(e) => assert!(e.to_string().contains("`gpu` cargo feature"), "{e}"),
//! }
//! ```
//!
//! ## What to know
//!
//! - **Dtypes.** `f32` everywhere; `f64` where the adapter has it (Vulkan has no `f64`
//!   `exp`, `log` or `tanh`: those run on host copies); `f16` and `bf16` as storage and in
//!   the elementwise kernels and matrix products, computed in `f32`.
//!   [Autocast](super::mixed_precision) on the GPU is `autocast(Device::Gpu(0), ..)`.
//! - **Memory.** A caching allocator reuses device buffers: after warm-up a training step
//!   allocates none. [`gpu::stats(n)`](crate::gpu::stats) counts launches, submissions,
//!   host waits, allocations and the calls that took a host path
//!   ([`gpu::HOST_PATH`](crate::gpu::HOST_PATH) lists the methods that may).
//! - **Errors.** Out of memory, a buffer past the adapter's limits or a lost device panics
//!   naming `gpu:n`, the adapter and what failed; a lost device stays lost, and
//!   `Device::Gpu(n).check()` returns the reason. A bad index in `index_select`, `gather`,
//!   `embedding` or the losses is checked on the device and reported at the next host
//!   read, as CUDA's device-side assert, never clamped.
//! - **The matrix-product kernel** is tuned once per adapter and size class;
//!   [`gpu::gemm_report(n)`](crate::gpu::gemm_report) shows what ran and why.
//!
//! The device's design, its tests and the benchmarks against PyTorch CUDA are in
//! nn-core's README (section "GPU") and `BENCHMARKS.md`.
