//! Layers and containers for the `nn` framework, with PyTorch's names and numerics.
