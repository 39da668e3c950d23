//! A reference model exported with `nn_onnx::export` runs in another runtime (tract) and
//! gives nn's output.

use nn_core::prelude::*;
use nn_models::resnet::ResNet;
use tract_onnx::prelude::*;

#[test]
fn resnet18_exports_to_onnx_and_runs_in_tract_with_nn_s_output() {
    nn_core::manual_seed(7);
    let mut model = ResNet::resnet18(10);
    model.eval();
    let x = nn_core::Tensor::randn(&[2, 3, 32, 32]);
    let expected = model.forward(&x).to_vec();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resnet18.onnx");
    nn_onnx::export(&model, &x, &path).unwrap();

    let plan = tract_onnx::onnx()
        .model_for_path(&path)
        .unwrap()
        .with_input_fact(0, f32::fact([2, 3, 32, 32]).into())
        .unwrap()
        .into_optimized()
        .unwrap()
        .into_runnable()
        .unwrap();
    let input: tract_onnx::prelude::Tensor =
        tract_ndarray::ArrayD::from_shape_vec(vec![2, 3, 32, 32], x.to_vec()).unwrap().into();
    let out = plan.run(tvec!(input.into())).unwrap();
    let got: Vec<f32> = out[0].to_plain_array_view::<f32>().unwrap().iter().copied().collect();
    assert_eq!(out[0].shape(), &[2, 10]);
    for (g, e) in got.iter().zip(&expected) {
        assert!((g - e).abs() <= 1e-4 * (1.0 + e.abs()), "{g} vs {e}");
    }
}

/// BERT with Hugging Face's i64 attention mask exports (while tracing the mask is taken as
/// `mask != 0`, without reading its values) and tract gives nn's hidden states.
#[test]
fn bert_with_a_mask_exports_and_runs_in_tract() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bert");
    let model = nn_models::bert::BertModel::from_pretrained(&dir).unwrap();
    let ids = nn_core::Tensor::from_vec_i64((0..14).map(|i| (i * 7) % 60).collect(), &[2, 7]);
    let mask = nn_core::Tensor::from_vec_i64(vec![1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0], &[2, 7]);
    let expected = model.forward((&ids, &mask)).0.to_vec();
    let opts = nn_onnx::ExportConfig { dynamic_axes: nn_onnx::DynamicAxes::Static, ..Default::default() };
    let bytes = nn_onnx::to_bytes(&model, &(ids.clone(), mask.clone()), &opts).unwrap();
    let plan = tract_onnx::onnx()
        .model_for_read(&mut &bytes[..])
        .unwrap()
        .with_input_fact(0, i64::fact([2, 7]).into())
        .unwrap()
        .with_input_fact(1, i64::fact([2, 7]).into())
        .unwrap()
        .into_optimized()
        .unwrap()
        .into_runnable()
        .unwrap();
    let t = |x: &nn_core::Tensor| -> tract_onnx::prelude::Tensor {
        tract_ndarray::ArrayD::from_shape_vec(vec![2, 7], x.to_vec_i64()).unwrap().into()
    };
    let out = plan.run(tvec!(t(&ids).into(), t(&mask).into())).unwrap();
    let got: Vec<f32> = out[0].to_plain_array_view::<f32>().unwrap().iter().copied().collect();
    for (g, e) in got.iter().zip(&expected) {
        assert!((g - e).abs() <= 1e-4 * (1.0 + e.abs()), "{g} vs {e}");
    }
}
