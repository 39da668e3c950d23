//! The example Transformer (`char_transformer`'s model) exports to ONNX and the file, run
//! in tract at two batch sizes, reproduces nn's logits. (The digits MLP and MNIST CNN are
//! checked by nn-onnx's tests and the `export_onnx` smoke test.)

use nn_core::prelude::*;
use nn_examples::char_model::CharTransformer;
use tract_onnx::prelude::*;

/// `batch` rows of 16 character ids below `vocab`.
fn ids(batch: usize, vocab: usize) -> nn_core::Tensor {
    let v = (0..batch * 16).map(|k| ((k * 7 + 3) % vocab) as i64).collect();
    nn_core::Tensor::from_vec_i64(v, &[batch, 16])
}

#[test]
fn the_char_transformer_exports_and_tract_reproduces_it() {
    nn_core::manual_seed(0);
    let vocab = 40;
    let mut model = CharTransformer::new(vocab);
    model.eval();
    let bytes = nn_onnx::to_bytes(&model, &ids(2, vocab), &nn_onnx::ExportConfig::default()).expect("exports");
    let plan = tract_onnx::onnx()
        .model_for_read(&mut &bytes[..])
        .expect("tract reads the file")
        .with_input_fact(0, i64::fact([3, 16]).into())
        .expect("input fact")
        .into_optimized()
        .expect("tract optimizes the graph")
        .into_runnable()
        .expect("runnable");
    // Batch 3: not the traced one, so the batch axis really is dynamic.
    let x = ids(3, vocab);
    let want = nn_core::no_grad(|| model.forward(&x));
    let input = tract_ndarray::ArrayD::from_shape_vec(vec![3, 16], x.to_vec_i64()).unwrap();
    let out = plan.run(tvec!(tract_onnx::prelude::Tensor::from(input).into())).expect("tract runs the graph");
    let got = out[0].to_plain_array_view::<f32>().expect("f32 logits");
    assert_eq!(got.shape(), want.shape());
    let worst =
        got.iter().zip(want.to_vec()).map(|(g, w)| ((g - w).abs() / (1.0 + w.abs())) as f64).fold(0.0, f64::max);
    assert!(worst <= 1e-5, "worst scaled error {worst:e}");
}
