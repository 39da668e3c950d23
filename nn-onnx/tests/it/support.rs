//! Running exported files in tract and comparing with nn.

use nn_core::{DType, Forward, Module, Tensor};
use nn_onnx::{ExportConfig, ExportInput, ExportOutput};
use tract_onnx::prelude::*;

/// Absolute tolerance, plus the same relative to the magnitude of nn's value.
pub const TOL: f64 = 1e-5;

fn to_tract(t: &Tensor) -> tract_onnx::prelude::Tensor {
    let shape = t.shape().to_vec();
    match t.dtype() {
        DType::F32 => tract_ndarray::ArrayD::from_shape_vec(shape, t.to_vec()).unwrap().into(),
        DType::F64 => tract_ndarray::ArrayD::from_shape_vec(shape, t.to_vec_f64()).unwrap().into(),
        DType::I64 => tract_ndarray::ArrayD::from_shape_vec(shape, t.to_vec_i64()).unwrap().into(),
        DType::Bool => tract_ndarray::ArrayD::from_shape_vec(shape, t.to_vec_bool()).unwrap().into(),
        d => panic!("no tract conversion for {d}"),
    }
}

/// Runs the ONNX `bytes` in tract on `inputs` (shapes pinned to theirs), returning each
/// output's shape and values as f64.
pub fn run_tract(bytes: &[u8], inputs: &[Tensor]) -> Vec<(Vec<usize>, Vec<f64>)> {
    let mut model = tract_onnx::onnx().model_for_read(&mut &bytes[..]).expect("tract reads the file");
    for (i, t) in inputs.iter().enumerate() {
        let fact = to_tract(t).datum_type().fact(t.shape());
        model = model.with_input_fact(i, fact.into()).expect("input fact");
    }
    let plan = model.into_optimized().expect("tract optimizes the graph").into_runnable().expect("runnable");
    let outs = plan.run(inputs.iter().map(|t| to_tract(t).into()).collect()).expect("tract runs the graph");
    outs.iter()
        .map(|o| {
            let o = o.cast_to::<f64>().expect("numeric output");
            (o.shape().to_vec(), o.to_plain_array_view::<f64>().unwrap().iter().copied().collect())
        })
        .collect()
}

/// Checks `got` against `want` within [`TOL`]; prints the worst errors (`--nocapture`).
pub fn assert_matches(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: {} values, expected {}", got.len(), want.len());
    let (mut worst_abs, mut worst_rel) = (0.0f64, 0.0f64);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g.is_nan() && w.is_nan() {
            continue;
        }
        let abs = (g - w).abs();
        assert!(abs <= TOL * (1.0 + w.abs()), "{what}: element {i} is {g}, expected {w} (error {abs:e})");
        worst_abs = worst_abs.max(abs);
        worst_rel = worst_rel.max(abs / w.abs().max(1e-3));
    }
    eprintln!("{what}: worst abs error {worst_abs:.2e}, worst rel error {worst_rel:.2e}");
}

/// Exports `model` (with `config`) on `make(batches[0])`, then runs the file in tract on
/// `make(b)` for every other batch size and compares with nn's forward.
pub fn check_with<M>(
    what: &str,
    model: &M,
    make: impl Fn(usize) -> M::Input,
    batches: &[usize],
    config: &ExportConfig,
) -> Vec<u8>
where
    M: Forward + Module,
    M::Input: ExportInput,
    M::Output: ExportOutput,
{
    let bytes = nn_onnx::to_bytes(model, &make(batches[0]), config).unwrap_or_else(|e| panic!("{what}: {e}"));
    for &b in &batches[1..] {
        let input = make(b);
        let want = nn_core::no_grad(|| model.forward(&input)).tensors();
        dump(what, &bytes, &input.tensors(), &want);
        let got = run_tract(&bytes, &input.tensors());
        assert_eq!(got.len(), want.len(), "{what}: number of outputs");
        for (k, ((gs, gv), w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(gs.as_slice(), w.shape(), "{what} (batch {b}): shape of output {k}");
            assert_matches(&format!("{what} (batch {b}, output {k})"), gv, &w.to_vec_f64());
        }
    }
    bytes
}

/// [`check_with`] with the default config, exporting at batch 1 and running at batches 2 and 5.
pub fn check<M>(what: &str, model: &M, make: impl Fn(usize) -> M::Input) -> Vec<u8>
where
    M: Forward + Module,
    M::Input: ExportInput,
    M::Output: ExportOutput,
{
    check_with(what, model, make, &[1, 2, 5], &ExportConfig::default())
}

/// Deterministic varied values of `shape` (seeded by `seed`).
pub fn vals(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n as u64).map(|i| ((i * 7919 + seed * 104_729) % 97) as f32 / 24.0 - 2.0).collect();
    Tensor::from_vec(v, shape)
}

/// With `NN_ONNX_OUT=DIR`, writes the file and one batch of inputs and nn's outputs
/// (`<name>.onnx`, `<name>.io.safetensors` with `input_<i>` and `output_<k>`) for
/// `nn-onnx/check_onnx.py`, which validates them with onnx's checker and onnxruntime.
fn dump(what: &str, bytes: &[u8], inputs: &[Tensor], outputs: &[Tensor]) {
    let Ok(dir) = std::env::var("NN_ONNX_OUT") else { return };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let stem: String = what.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    std::fs::write(dir.join(format!("{stem}.onnx")), bytes).unwrap();
    let mut sd = nn_core::StateDict::new();
    for (i, t) in inputs.iter().enumerate() {
        sd.insert(format!("input_{i}"), t.contiguous());
    }
    for (k, t) in outputs.iter().enumerate() {
        sd.insert(format!("output_{k}"), t.contiguous());
    }
    sd.save(dir.join(format!("{stem}.io.safetensors"))).unwrap();
}
