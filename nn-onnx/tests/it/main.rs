//! nn-onnx's integration tests: every exported model runs in tract at two batch sizes and
//! matches nn's forward; errors name the op and the module and write no file.

mod errors;
mod layers;
mod pytorch;
mod support;
mod user_code;
