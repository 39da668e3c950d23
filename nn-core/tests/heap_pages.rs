//! Training steps take no fresh pages from the OS once warm: the pool recycles tensor
//! buffers, and the C heap keeps the pages of the GEMM library's per-call packing buffers
//! (`keep_heap_pages` in `nn-core/src/backend/cpu/buffer_pool.rs`). Without either, a step of
//! the 784-256-10 MLP at batch 256 faulted in about 160 pages (measured on 2 threads).
//!
//! Its own test binary: page faults are counted for the whole process, so no other test
//! may run beside it.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

use nn_core::functional::cross_entropy;
use nn_core::optim::{Optimizer, Sgd, SgdConfig};
use nn_core::{manual_seed, Parameter, Tensor};

/// Minor page faults of this process so far (pages mapped on first touch).
fn minor_faults() -> i64 {
    // SAFETY: `getrusage` fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0, "getrusage failed");
        usage
    };
    usage.ru_minflt
}

/// One `#[test]`, so nothing else runs in the process while faults are counted.
#[test]
fn warm_training_steps_fault_in_no_pages() {
    training_steps();
    gemm_sized_heap_blocks();
}

/// Warm MLP steps at batch 256 (SGD with momentum) take no fresh pages.
fn training_steps() {
    manual_seed(0);
    let w1 = Parameter::new(Tensor::randn(&[256, 784]) * 0.05);
    let b1 = Parameter::new(Tensor::zeros(&[256]));
    let w2 = Parameter::new(Tensor::randn(&[10, 256]) * 0.05);
    let b2 = Parameter::new(Tensor::zeros(&[10]));
    let params = vec![w1.clone(), b1.clone(), w2.clone(), b2.clone()];
    let mut opt = Sgd::new(params, SgdConfig { lr: 0.01, momentum: 0.9, ..Default::default() });
    let x = Tensor::randn(&[256, 784]);
    let y = Tensor::from_vec_i64((0..256).map(|i| i % 10).collect(), &[256]);
    let mut step = || {
        opt.zero_grad();
        let h = (x.matmul(&w1.t()) + &*b1).relu();
        let loss = cross_entropy(&(h.matmul(&w2.t()) + &*b2), &y);
        loss.backward();
        opt.step();
        loss.item()
    };
    let first = step();
    for _ in 0..20 {
        step();
    }
    let before = minor_faults();
    let mut last = 0.0;
    for _ in 0..100 {
        last = step();
    }
    let faults = minor_faults() - before;
    assert!(last < first, "the steps trained nothing (loss {first} -> {last})");
    // One fresh 256 x 784 buffer a step would be 196 faults a step; a few stray pages
    // (the test harness, a late thread stack) are allowed.
    assert!(faults < 100, "100 warm training steps faulted in {faults} pages (fresh memory every step)");
}

/// After nn's first GEMM, blocks of the size of a GEMM's packing buffers, allocated and
/// freed with the global allocator as the `gemm` crate does on every call, keep their
/// pages. With glibc's default thresholds this pattern (three 3 MiB blocks at the top of
/// the heap, freed together) gives the memory back on every round and faults it in again
/// on the next: over 2 000 faults a round.
fn gemm_sized_heap_blocks() {
    // glibc's moving thresholds as a long-running process would have them: a freed 4 MiB
    // mapping raises the heap's block limit to 4 MiB and its trim threshold to 8 MiB.
    drop(std::hint::black_box(vec![1u8; 4 << 20]));
    drop(Tensor::randn(&[64, 64]).matmul(&Tensor::randn(&[64, 64])));
    let round = || {
        let blocks: Vec<Vec<u8>> = (0..3).map(|_| vec![1u8; 3 << 20]).collect();
        std::hint::black_box(&blocks);
    };
    round();
    let before = minor_faults();
    for _ in 0..10 {
        round();
    }
    let faults = minor_faults() - before;
    assert!(faults < 100, "10 rounds of 9 MiB of blocks freed and taken again faulted in {faults} pages");
}
