//! The options of [`RNN`](super::RNN), [`LSTM`](super::LSTM) and [`GRU`](super::GRU), with
//! PyTorch's defaults (the RNN's [`RnnNonlinearity`] among them), and [`RecurrentConfig`],
//! the options the engine takes from each.

/// The nonlinearity of an [`RNN`](super::RNN)'s cell (PyTorch's `nonlinearity='tanh' |
/// 'relu'`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RnnNonlinearity {
    /// `h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`, PyTorch's default.
    #[default]
    Tanh,
    /// `h' = relu(x W_ih^T + b_ih + h W_hh^T + b_hh)`.
    Relu,
}

/// Options of [`RNN`](super::RNN), with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RNNConfig {
    /// Stacked layers (default 1).
    pub num_layers: usize,
    /// The cell's nonlinearity (default tanh).
    pub nonlinearity: RnnNonlinearity,
    /// Learnable `bias_ih_l*` and `bias_hh_l*` (default `true`).
    pub bias: bool,
    /// Inputs and outputs `[N, L, *]` instead of `[L, N, *]` (default `false`; the states
    /// stay `[layers * directions, N, H]`, as PyTorch's).
    pub batch_first: bool,
    /// Dropout on the outputs of every layer but the last, in training mode (default 0).
    pub dropout: f64,
    /// Run a second, time-reversed pass per layer and concatenate (default `false`).
    pub bidirectional: bool,
}

impl Default for RNNConfig {
    fn default() -> Self {
        RNNConfig {
            num_layers: 1,
            nonlinearity: RnnNonlinearity::Tanh,
            bias: true,
            batch_first: false,
            dropout: 0.0,
            bidirectional: false,
        }
    }
}

/// Options of [`LSTM`](super::LSTM), with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LSTMConfig {
    /// Stacked layers (default 1).
    pub num_layers: usize,
    /// Learnable `bias_ih_l*` and `bias_hh_l*` (default `true`).
    pub bias: bool,
    /// Inputs and outputs `[N, L, *]` instead of `[L, N, *]` (default `false`; the states
    /// stay `[layers * directions, N, *]`, as PyTorch's).
    pub batch_first: bool,
    /// Dropout on the outputs of every layer but the last, in training mode (default 0).
    pub dropout: f64,
    /// Run a second, time-reversed pass per layer and concatenate (default `false`).
    pub bidirectional: bool,
    /// With `proj_size > 0`, the hidden state is projected to `proj_size` features by
    /// `weight_hr_l*` (`h = W_hr (o * tanh(c))`); 0 (the default) is no projection. Must
    /// be smaller than `hidden_size`.
    pub proj_size: usize,
}

impl Default for LSTMConfig {
    fn default() -> Self {
        LSTMConfig { num_layers: 1, bias: true, batch_first: false, dropout: 0.0, bidirectional: false, proj_size: 0 }
    }
}

/// Options of [`GRU`](super::GRU), with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GRUConfig {
    /// Stacked layers (default 1).
    pub num_layers: usize,
    /// Learnable `bias_ih_l*` and `bias_hh_l*` (default `true`).
    pub bias: bool,
    /// Inputs and outputs `[N, L, *]` instead of `[L, N, *]` (default `false`; the states
    /// stay `[layers * directions, N, H]`, as PyTorch's).
    pub batch_first: bool,
    /// Dropout on the outputs of every layer but the last, in training mode (default 0).
    pub dropout: f64,
    /// Run a second, time-reversed pass per layer and concatenate (default `false`).
    pub bidirectional: bool,
}

impl Default for GRUConfig {
    fn default() -> Self {
        GRUConfig { num_layers: 1, bias: true, batch_first: false, dropout: 0.0, bidirectional: false }
    }
}

/// The options every recurrent layer hands its engine (PyTorch's `RNNBase` arguments but
/// `mode` and the sizes); `proj_size` is 0 but for a projecting LSTM.
#[derive(Clone, Copy, Debug)]
pub(super) struct RecurrentConfig {
    pub(super) num_layers: usize,
    pub(super) bias: bool,
    pub(super) batch_first: bool,
    pub(super) dropout: f64,
    pub(super) bidirectional: bool,
    pub(super) proj_size: usize,
}

impl From<RNNConfig> for RecurrentConfig {
    fn from(c: RNNConfig) -> Self {
        RecurrentConfig {
            num_layers: c.num_layers,
            bias: c.bias,
            batch_first: c.batch_first,
            dropout: c.dropout,
            bidirectional: c.bidirectional,
            proj_size: 0,
        }
    }
}

impl From<LSTMConfig> for RecurrentConfig {
    fn from(c: LSTMConfig) -> Self {
        RecurrentConfig {
            num_layers: c.num_layers,
            bias: c.bias,
            batch_first: c.batch_first,
            dropout: c.dropout,
            bidirectional: c.bidirectional,
            proj_size: c.proj_size,
        }
    }
}

impl From<GRUConfig> for RecurrentConfig {
    fn from(c: GRUConfig) -> Self {
        RecurrentConfig {
            num_layers: c.num_layers,
            bias: c.bias,
            batch_first: c.batch_first,
            dropout: c.dropout,
            bidirectional: c.bidirectional,
            proj_size: 0,
        }
    }
}
