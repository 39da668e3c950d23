//! `RNN`, `LSTM`, `GRU` (PyTorch's recurrent layers) and their inputs, `RNNInput` and
//! `LSTMInput`.
//!
//! The three share one engine: per layer and direction, the input projections of every
//! time step are one product (`x W_ih^T + b_ih` over `[L * N, H_in]`), then each step runs
//! one `h W_hh^T` product and the cell's gates. Everything is composed of differentiable
//! ops (`addmm`, `narrow`, `sigmoid`, `tanh`, `stack`, `cat`), so backward is autograd's
//! and the layers run on every device those ops run on.
//!
//! The module's parts: `config` (the options, with PyTorch's defaults, and the RNN's
//! nonlinearity), `input` (the layers' inputs), `engine` (the weights and the time loop),
//! `layer_macro` (the trait impls and accessors the three layers share).

mod config;
mod engine;
mod input;
mod layer_macro;

use nn_core::{Compute, Parameter, Tensor};

pub use config::{GRUConfig, LSTMConfig, RNNConfig, RnnNonlinearity};
use engine::{Cell, Recurrent};
pub use input::{LSTMInput, RNNInput};
use layer_macro::recurrent_layer;

/// An Elman recurrent network (PyTorch's `nn.RNN`):
/// `h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)` (or `relu`), stacked
/// `num_layers` deep, optionally bidirectional.
///
/// Parameters, per layer `k` (and again with the suffix `_reverse` for the backward
/// direction): `weight_ih_l{k}` `[H, H_in]` (`[H, D * H]` for `k > 0`, `D` = 2 when
/// bidirectional), `weight_hh_l{k}` `[H, H]`, `bias_ih_l{k}` and `bias_hh_l{k}` `[H]`.
/// Init (PyTorch's `reset_parameters`): all `U(-1/sqrt(H), 1/sqrt(H))`.
///
/// Input: [`RNNInput`], a `&Tensor` `[L, N, H_in]` (`[N, L, H_in]` with `batch_first`,
/// unbatched `[L, H_in]`) or `(&x, &h0)`. Output `(output, h_n)`: `output` `[L, N, D * H]`
/// (the input's layout), `h_n` `[num_layers * D, N, H]` (`[num_layers * D, H]` unbatched).
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::{RNNConfig, RnnNonlinearity, RNN};
/// let rnn = RNN::with_config(3, 4, RNNConfig { num_layers: 2, nonlinearity: RnnNonlinearity::Relu, ..Default::default() });
/// assert_eq!(rnn.to_string(), "RNN(3, 4, num_layers=2)");
/// let (y, h_n) = rnn.forward(&Tensor::randn(&[5, 2, 3]));
/// assert_eq!((y.shape(), h_n.shape()), (&[5, 2, 4][..], &[2, 2, 4][..]));
/// // The last step's output is the last layer's final state.
/// assert_eq!(y.narrow(0, 4, 1).to_vec(), h_n.narrow(0, 1, 1).to_vec());
/// ```
pub struct RNN {
    inner: Recurrent,
}

recurrent_layer!(RNN);

impl RNN {
    /// One tanh layer.
    pub fn new(input_size: usize, hidden_size: usize) -> Self {
        Self::with_config(input_size, hidden_size, RNNConfig::default())
    }

    /// With explicit options.
    ///
    /// # Panics
    /// When `hidden_size` or `num_layers` is 0, or `dropout` is outside `[0, 1]`.
    #[track_caller]
    pub fn with_config(input_size: usize, hidden_size: usize, c: RNNConfig) -> Self {
        RNN { inner: Recurrent::new("RNN", Cell::Rnn(c.nonlinearity), input_size, hidden_size, c.into()) }
    }

    /// The cell's nonlinearity.
    pub fn nonlinearity(&self) -> RnnNonlinearity {
        match self.inner.cell {
            Cell::Rnn(act) => act,
            _ => unreachable!("an RNN runs an Elman cell"),
        }
    }
}

impl Compute for RNN {
    type Input = RNNInput;
    /// `(output, h_n)`.
    type Output = (Tensor, Tensor);

    #[track_caller]
    fn compute(&self, a: &RNNInput) -> (Tensor, Tensor) {
        let layout = self.inner.check(&self.to_string(), &a.input, &[("h_0", a.hx.as_ref())]);
        let (y, h, _) = self.inner.run(&a.input, a.hx.as_ref(), None, layout);
        (y, h)
    }
}

/// A long short-term memory network (PyTorch's `nn.LSTM`). Per step, with the gates in
/// PyTorch's order `i, f, g, o` stacked in the weights' rows:
///
/// ```text
/// i = σ(x W_ii^T + b_ii + h W_hi^T + b_hi)    f = σ(x W_if^T + b_if + h W_hf^T + b_hf)
/// g = tanh(x W_ig^T + b_ig + h W_hg^T + b_hg) o = σ(x W_io^T + b_io + h W_ho^T + b_ho)
/// c' = f * c + i * g                          h' = o * tanh(c')   (h' = W_hr (o * tanh(c')) with proj_size)
/// ```
///
/// Parameters, per layer `k` (and again with the suffix `_reverse` for the backward
/// direction): `weight_ih_l{k}` `[4H, H_in]` (`[4H, D * H_out]` for `k > 0`),
/// `weight_hh_l{k}` `[4H, H_out]`, `bias_ih_l{k}` and `bias_hh_l{k}` `[4H]`, and with
/// `proj_size > 0` `weight_hr_l{k}` `[proj_size, H]`; `H_out` is `proj_size` when set,
/// else `H`. Init: all `U(-1/sqrt(H), 1/sqrt(H))`, as PyTorch.
///
/// Input: [`LSTMInput`], a `&Tensor` `[L, N, H_in]` (`[N, L, H_in]` with `batch_first`,
/// unbatched `[L, H_in]`) or `(&x, (&h0, &c0))`. Output `(output, (h_n, c_n))`: `output`
/// `[L, N, D * H_out]` (the input's layout), `h_n` `[num_layers * D, N, H_out]`, `c_n`
/// `[num_layers * D, N, H]` (without `N` unbatched).
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::{LSTMConfig, LSTM};
/// let cfg = LSTMConfig { num_layers: 2, batch_first: true, bidirectional: true, ..Default::default() };
/// let lstm = LSTM::with_config(10, 20, cfg);
/// assert_eq!(lstm.to_string(), "LSTM(10, 20, num_layers=2, batch_first=True, bidirectional=True)");
/// assert_eq!(lstm.state_dict().get("weight_ih_l1_reverse").unwrap().shape(), &[80, 40]);
/// let x = Tensor::randn(&[3, 5, 10]);
/// let (h0, c0) = (Tensor::zeros(&[4, 3, 20]), Tensor::zeros(&[4, 3, 20]));
/// let (y, (h_n, c_n)) = lstm.forward((&x, (&h0, &c0)));
/// assert_eq!((y.shape(), h_n.shape(), c_n.shape()), (&[3, 5, 40][..], &[4, 3, 20][..], &[4, 3, 20][..]));
/// assert_eq!(lstm.forward(&x).0.to_vec(), y.to_vec()); // zero states by default
/// // A projected hidden state.
/// let proj = LSTM::with_config(10, 20, LSTMConfig { proj_size: 5, ..Default::default() });
/// assert_eq!(proj.to_string(), "LSTM(10, 20, proj_size=5)");
/// let (y, (h_n, c_n)) = proj.forward(&Tensor::randn(&[4, 2, 10]));
/// assert_eq!((y.shape(), h_n.shape(), c_n.shape()), (&[4, 2, 5][..], &[1, 2, 5][..], &[1, 2, 20][..]));
/// ```
pub struct LSTM {
    inner: Recurrent,
}

recurrent_layer!(LSTM);

impl LSTM {
    /// One layer, PyTorch's defaults.
    pub fn new(input_size: usize, hidden_size: usize) -> Self {
        Self::with_config(input_size, hidden_size, LSTMConfig::default())
    }

    /// With explicit options.
    ///
    /// # Panics
    /// When `hidden_size` or `num_layers` is 0, `dropout` is outside `[0, 1]`, or
    /// `proj_size` is not smaller than `hidden_size`.
    #[track_caller]
    pub fn with_config(input_size: usize, hidden_size: usize, c: LSTMConfig) -> Self {
        LSTM { inner: Recurrent::new("LSTM", Cell::Lstm, input_size, hidden_size, c.into()) }
    }

    /// The projection size, 0 for none.
    pub fn proj_size(&self) -> usize {
        self.inner.proj_size
    }

    /// `weight_hr_l{layer}` (`_reverse` with `reverse`): `[proj_size, H]`, `None` without
    /// a projection.
    ///
    /// # Panics
    /// When the layer or direction does not exist.
    #[track_caller]
    pub fn weight_hr(&self, layer: usize, reverse: bool) -> Option<&Parameter> {
        self.inner.weights("LSTM", layer, reverse).w_hr.as_ref()
    }
}

impl Compute for LSTM {
    type Input = LSTMInput;
    /// `(output, (h_n, c_n))`.
    type Output = (Tensor, (Tensor, Tensor));

    #[track_caller]
    fn compute(&self, a: &LSTMInput) -> (Tensor, (Tensor, Tensor)) {
        let (h0, c0) = (a.hx.as_ref().map(|s| &s.0), a.hx.as_ref().map(|s| &s.1));
        let layout = self.inner.check(&self.to_string(), &a.input, &[("h_0", h0), ("c_0", c0)]);
        let (y, h, c) = self.inner.run(&a.input, h0, c0, layout);
        (y, (h, c.expect("the LSTM returns its cell state")))
    }
}

/// A gated recurrent unit network (PyTorch's `nn.GRU`). Per step, with the gates in
/// PyTorch's order `r, z, n` stacked in the weights' rows:
///
/// ```text
/// r = σ(x W_ir^T + b_ir + h W_hr^T + b_hr)    z = σ(x W_iz^T + b_iz + h W_hz^T + b_hz)
/// n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn))
/// h' = (1 - z) * n + z * h
/// ```
///
/// Parameters, per layer `k` (and again with the suffix `_reverse` for the backward
/// direction): `weight_ih_l{k}` `[3H, H_in]` (`[3H, D * H]` for `k > 0`), `weight_hh_l{k}`
/// `[3H, H]`, `bias_ih_l{k}` and `bias_hh_l{k}` `[3H]`. Init: all `U(-1/sqrt(H),
/// 1/sqrt(H))`, as PyTorch.
///
/// Input: [`RNNInput`], as [`RNN`]'s; output `(output, h_n)`, shaped as [`RNN`]'s.
///
/// ```
/// use nn_core::{Forward, Module, Tensor};
/// use nn_layers::{GRUConfig, GRU};
/// let gru = GRU::with_config(3, 4, GRUConfig { bidirectional: true, ..Default::default() });
/// assert_eq!(gru.to_string(), "GRU(3, 4, bidirectional=True)");
/// let (y, h_n) = gru.forward(&Tensor::randn(&[6, 3])); // unbatched [L, H_in]
/// assert_eq!((y.shape(), h_n.shape()), (&[6, 8][..], &[2, 4][..]));
/// ```
pub struct GRU {
    inner: Recurrent,
}

recurrent_layer!(GRU);

impl GRU {
    /// One layer, PyTorch's defaults.
    pub fn new(input_size: usize, hidden_size: usize) -> Self {
        Self::with_config(input_size, hidden_size, GRUConfig::default())
    }

    /// With explicit options.
    ///
    /// # Panics
    /// When `hidden_size` or `num_layers` is 0, or `dropout` is outside `[0, 1]`.
    #[track_caller]
    pub fn with_config(input_size: usize, hidden_size: usize, c: GRUConfig) -> Self {
        GRU { inner: Recurrent::new("GRU", Cell::Gru, input_size, hidden_size, c.into()) }
    }
}

impl Compute for GRU {
    type Input = RNNInput;
    /// `(output, h_n)`.
    type Output = (Tensor, Tensor);

    #[track_caller]
    fn compute(&self, a: &RNNInput) -> (Tensor, Tensor) {
        let layout = self.inner.check(&self.to_string(), &a.input, &[("h_0", a.hx.as_ref())]);
        let (y, h, _) = self.inner.run(&a.input, a.hx.as_ref(), None, layout);
        (y, h)
    }
}
