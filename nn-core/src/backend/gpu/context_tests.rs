//! Tests of the context (`context.rs`) and of a device made unusable (`health.rs`).

use super::*;

/// `gpu:0`'s context; fails, saying why, when there is none.
fn gpu0() -> &'static Ctx {
    get(0).unwrap_or_else(|e| panic!("this test needs gpu:0: {e}"))
}

/// The message of a panic raised by `f`.
fn panic_message(f: impl FnOnce()) -> String {
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("expected a panic");
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

#[test]
fn a_kernel_the_adapter_rejects_is_an_error_naming_the_device() {
    let Ok(ctx) = get(0) else { return }; // the GPU suite (tests/gpu.rs) requires gpu:0
    let e = ctx.try_kernel("@compute @workgroup_size(1)\nfn main() { let x: u32 = 1.5; }").err().expect("rejected");
    assert!(e.starts_with("gpu:0 (`") && e.contains("compiling a kernel failed"), "{e}");
}

#[test]
fn written_bindings_reads_the_declarations() {
    let src = "@group(0) @binding(0) var<storage, read> P: array<u32>;\n\
               @group(0) @binding(1) var<storage, read> X: array<f32>;\n\
               @group(0) @binding(2) var<storage, read_write> Y: array<f32>;\n\
               @group(0) @binding(3) var<storage, read_write> F: array<atomic<u32>>;\n";
    assert_eq!(written_bindings(src), 0b1100);
}

/// A grid whose threads `flat()` would number past 2^32 is refused, naming the device and
/// the size, rather than run threads on other threads' elements.
#[test]
fn a_grid_past_32_bit_thread_numbers_panics_naming_the_device_and_the_size() {
    let ctx = gpu0();
    assert_eq!(ctx.grid(70000), [65535, 2, 1]);
    assert_eq!(ctx.grid(65535 * 256), [65535, 256, 1]); // 2^32 - 2^16 threads
    let m = panic_message(|| {
        let _ = ctx.grid(65535 * 256 + 1);
    });
    assert!(m.starts_with("gpu:0 (`") && m.contains("16776961 workgroups") && m.contains("65535 x 257"), "{m}");
}

/// Parameters larger than the whole arena panic, saying so (submitting to make room for
/// them would recurse forever).
#[test]
fn parameters_larger_than_the_arena_panic() {
    let ctx = gpu0();
    let mut batch = Batch::default();
    let m = panic_message(|| {
        let _ = batch.stage(ctx, &vec![0u8; ARENA_BYTES as usize + 4]);
    });
    assert!(m.starts_with("gpu:0: ") && m.contains("exceed the parameter arena"), "{m}");
}

/// Set in the child process of [`an_error_that_loses_recorded_work_is_sticky`].
const STICKY_CHILD: &str = "NN_GPU_TEST_STICKY_ERROR_CHILD";

/// An error wgpu reports outside an error scope (here: a buffer the batch copies from is
/// destroyed before the submission) loses the batch's work. It panics naming the device;
/// the batch is dropped, its pending index check with it; every later allocation,
/// recording and read on the device panics naming the error, and the device is not
/// available. Run in a child process of this test binary: the device stays unusable for the
/// rest of the process, and the other tests here use it.
#[test]
fn an_error_that_loses_recorded_work_is_sticky() {
    if std::env::var_os(STICKY_CHILD).is_none() {
        let path = module_path!().split_once("::").expect("inside the crate").1;
        let name = format!("{path}::an_error_that_loses_recorded_work_is_sticky");
        let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", &name, "--nocapture", "--test-threads=1"])
            .env(STICKY_CHILD, "1")
            .output()
            .expect("the test binary runs");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && stdout.contains("1 passed"), "the child run failed:\n{stdout}\n{stderr}");
        return;
    }
    let ctx = gpu0();
    let gpu = crate::Device::Gpu(0);
    let x = crate::Tensor::zeros(&[4, 2]).to_device(gpu);
    let y = x.index_select(0, &crate::Tensor::from_vec_i64(vec![0, 1], &[2]).to_device(gpu));
    assert!(lock(&ctx.batch).checks_len() > 0, "the index check waits for the next read");
    let (src, dst, spare) = (ctx.alloc(256), ctx.alloc(256), ctx.alloc(256));
    ctx.copy(&src, &dst, 256);
    src.raw().destroy();
    let m = panic_message(|| drop(y.to_vec()));
    let named = m.starts_with("gpu:0 (`") && m.contains("destroyed");
    assert!(named && m.contains("every later use of gpu:0 fails"), "{m}");
    assert!(lock(&ctx.batch).is_clear(), "the lost batch is dropped, its check among it");
    let sticky = |what: &str, m: String| {
        let why = "(an earlier error lost recorded work; the device's results cannot be trusted)";
        assert!(m.contains("gpu:0 (`") && m.contains("destroyed") && m.contains(why), "{what}: {m}");
    };
    sticky("reading a value", panic_message(|| drop(y.to_vec())));
    sticky("reading a buffer", panic_message(|| drop(ctx.download(&dst, 4))));
    sticky("allocating", panic_message(|| drop(ctx.alloc(256))));
    sticky("recording a copy", panic_message(|| ctx.copy(&dst, &spare, 4)));
    sticky("an op", panic_message(|| drop(&x + 1.0)));
    sticky("an upload", panic_message(|| drop(crate::Tensor::ones(&[4]).to_device(gpu))));
    sticky("checking the device", gpu.check().expect_err("an unusable device is not available").to_string());
    assert!(lock(&ctx.batch).is_clear());
}
