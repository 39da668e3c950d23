//! `#[derive(Module)]` for the `nn` framework (see `nn_core::Module`).
