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
