//! # ONNX export
//!
//! [`nn::onnx::export(&model, &example, path)`](crate::onnx::export) is
//! `torch.onnx.export`: it runs the model's forward on the example input with nn-core's
//! tracer on and writes what ran as an ONNX graph (opset 17 by default, the batch axis
//! dynamic, the weights as initializers under their state-dict keys), atomically. Since
//! the tracer sits in the tensor ops, a forward you write exports like the built-in
//! layers. The file runs in onnxruntime, TensorRT, tract or a browser;
//! [`nn::onnx::inspect`](crate::onnx::inspect) reads back a summary for checks.
//!
//! ## A model
//!
//! Put the model in eval mode first (dropout off, batch norm on its running statistics):
//! ```
//! use nn::prelude::*;
//! use nn::layers::{Dropout, Linear, ReLU, Sequential};
//!
//! let mut model = Sequential::new().add(Linear::new(4, 8)).add(ReLU::new());
//! model = model.add(Dropout::new(0.1)).add(Linear::new(8, 3));
//! model.eval();
//! let path = std::env::temp_dir().join(format!("nn-guide-mlp-{}.onnx", std::process::id()));
//! nn::onnx::export(&model, &Tensor::zeros(&[1, 4]), &path)?;
//!
//! let summary = nn::onnx::inspect(&std::fs::read(&path)?)?;
//! assert_eq!(summary.opset, 17);
//! assert_eq!(summary.inputs, [("input".to_string(), vec!["batch".to_string(), "4".to_string()])]);
//! assert_eq!(summary.outputs[0].1, ["batch", "3"]); // any batch size
//! assert_eq!(summary.initializers, ["0.weight", "0.bias", "3.weight", "3.bias"]);
//! assert_eq!(summary.op_types, ["Gemm", "Relu", "Gemm"]); // dropout in eval mode is nothing
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Your own forward
//!
//! Matmuls, reshapes and permutes, `cat`, `narrow`, broadcasting arithmetic, softmax and
//! the rest of the ops a forward calls are traced where they run, so a module you write
//! needs nothing more for export:
//! ```
//! use nn::prelude::*;
//! use nn::layers::Linear;
//!
//! #[derive(Module)]
//! struct Scorer {
//!     #[module] proj: Linear,
//!     #[param] temperature: Parameter,
//!     #[base] base: ModuleBase,
//! }
//! impl Compute for Scorer {
//!     type Input = Tensor;
//!     type Output = Tensor;
//!     fn compute(&self, x: &Tensor) -> Tensor {
//!         let h = self.proj.forward(x); // [N, 6]
//!         let scores = h.reshape((-1, 2, 3)).sum_dim(1, false) / &*self.temperature;
//!         scores.softmax(-1)
//!     }
//! }
//!
//! let temperature = Parameter::new(Tensor::full(&[1], 2.0));
//! let mut model = Scorer { proj: Linear::new(4, 6), temperature, base: ModuleBase::new() };
//! model.eval();
//! let bytes = nn::onnx::to_bytes(&model, &Tensor::zeros(&[1, 4]), &Default::default())?;
//! let summary = nn::onnx::inspect(&bytes)?;
//! assert_eq!(summary.initializers, ["proj.weight", "proj.bias", "temperature"]); // in the order the graph uses them
//! assert!(summary.op_types.contains(&"Softmax".to_string()), "{:?}", summary.op_types);
//! # Ok::<(), nn::onnx::Error>(())
//! ```
//! [`to_bytes`](crate::onnx::to_bytes) gives the file's bytes without writing it;
//! [`export_with`](crate::onnx::export_with) takes the opset (17 to 21), the input and
//! output names and the dynamic axes (none, the batch axis, or a list naming axes such as
//! `seq`). Models with several inputs take a tuple (`Bilinear`) or the attention layers'
//! input structs.
//!
//! ## Nothing fails silently
//!
//! What an ONNX graph cannot express is an [`Error::Unsupported`](crate::onnx::Error::Unsupported)
//! naming the op and the module path, and no file is written: dropout or batch norm in
//! training mode, in-place updates, values read into Rust (`item`, `to_vec`) from tensors
//! that depend on the input, custom autograd ops, and constants or control flow that
//! change with the batch size (the forward is traced twice, at two batch sizes, to find
//! them). The model is left as it was, whatever its forwards wrote:
//! ```
//! use nn::prelude::*;
//! use nn::layers::{Dropout, Linear, Sequential};
//!
//! let model = Sequential::new().add(Linear::new(4, 4)).add(Dropout::new(0.5)); // training mode
//! let path = std::env::temp_dir().join(format!("nn-guide-refused-{}.onnx", std::process::id()));
//! let e = nn::onnx::export(&model, &Tensor::ones(&[2, 4]), &path).unwrap_err().to_string();
//! assert!(e.starts_with("cannot export `dropout` in module `1` (Dropout):"), "{e}");
//! assert!(e.contains("model.eval()"), "{e}");
//! assert!(!path.exists());
//! ```
//! The exported models are tested in tract at two batch sizes against nn's forward and
//! PyTorch's outputs; `cargo run --release -p nn-examples --bin export_onnx` writes the
//! digits MLP and the MNIST CNN, and nn-onnx's README shows them run from onnxruntime.
