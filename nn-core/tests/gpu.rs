//! The GPU device against the CPU, op by op (cargo feature `gpu`; on machines without a
//! GPU, Mesa's software Vulkan: `apt-get install mesa-vulkan-drivers`). Every test needs
//! `gpu:0` and fails, saying why, when it cannot be opened: a suite that was asked for
//! never passes by skipping.
#![cfg(feature = "gpu")]

use nn_core::{gpu, DType, Device, Tensor};

const GPU: Device = Device::Gpu(0);

fn require_gpu() {
    if let Err(e) = GPU.check() {
        panic!("the GPU suite needs gpu:0: {e}");
    }
}

#[test]
fn moves_round_trip_every_dtype_bit_for_bit() {
    require_gpu();
    eprintln!("gpu:0 is {}", gpu::adapter_info(0).unwrap());
    let f = Tensor::from_vec(vec![1.5, -0.0, f32::NAN, f32::INFINITY, 3.25e-39], &[5]);
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::Bool] {
        let x = f.to_dtype(dtype);
        let g = x.to_device(GPU);
        assert_eq!(g.device(), GPU);
        let back = g.to_device(Device::Cpu);
        assert_eq!(format!("{:?}", back.to_vec_f64()), format!("{:?}", x.to_vec_f64()), "{dtype}");
    }
}
